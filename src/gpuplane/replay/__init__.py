"""Replaying one event script through the simulator and the live plane, and comparing their decisions."""
