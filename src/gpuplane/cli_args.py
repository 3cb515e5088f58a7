"""Argument types of the command line: numbers that must be finite and in range, lists of known names.

argparse calls them while parsing, so a bad option is refused (exit 2, the option named, the fix given)
before any file is read or any simulation starts.
"""

from __future__ import annotations

import argparse
import difflib
import math
from collections.abc import Callable, Sequence


def number(
    low: float | None = None,
    high: float | None = None,
    *,
    above: bool = False,
    whole: bool = False,
) -> Callable[[str], float]:
    """A finite number from ``low`` (excluded when ``above``) to ``high``; whole numbers come back as int."""

    def parse(raw: str) -> float:
        try:
            value = float(raw) if not whole else int(raw)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{raw}' is not a {'whole ' if whole else ''}number") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"'{raw}' is not a finite number")
        if low is not None and (value <= low if above else value < low):
            raise argparse.ArgumentTypeError(f"{raw} is too small: use a value {'>' if above else '>='} {low:g}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"{raw} is too large: use a value <= {high:g}")
        return value

    return parse


def names(known: Sequence[str], what: str = "policy") -> Callable[[str], tuple[str, ...]]:
    """A comma-separated list of names from ``known``; an unknown one is refused with the closest match."""

    def parse(raw: str) -> tuple[str, ...]:
        chosen = tuple(dict.fromkeys(n.strip() for n in raw.split(",") if n.strip()))
        if not chosen:
            raise argparse.ArgumentTypeError(f"give at least one {what}: some of {', '.join(known)}")
        for name in chosen:
            if name not in known:
                close = difflib.get_close_matches(name.lower(), known, n=1)
                hint = f"did you mean '{close[0]}'? " if close else ""
                raise argparse.ArgumentTypeError(f"unknown {what} '{name}': {hint}use some of {', '.join(known)}")
        return chosen

    return parse
