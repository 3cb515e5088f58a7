"""Durations as people read them: seconds, minutes, hours or days, whichever keeps the figure meaningful."""

from __future__ import annotations


def format_duration(seconds: float) -> str:
    """``seconds`` in the largest unit that still shows it with a leading figure of at least 1 (so a
    one-hour trace reads "1.0 h", never "0.0 days")."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"
