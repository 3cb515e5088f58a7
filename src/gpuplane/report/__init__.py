"""Reports built from what the runtimes recorded: chargeback of GPU costs per team and period."""
