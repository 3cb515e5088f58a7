"""File adapters around the policy core: reading policy and snapshot files from disk."""
