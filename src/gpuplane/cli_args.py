"""The command line's parser and argument types: options checked before anything runs.

``Parser`` refuses a mistyped option with the closest real one (``--polcy``: did you mean ``--policy``?)
instead of argparse's "--policy is required"; the types refuse numbers that are not finite or out of
range and names that are not known (with the closest one). argparse calls them while parsing, so a bad
option is refused (exit 2, the option named, the fix given) before any file is read or any simulation
starts.
"""

from __future__ import annotations

import argparse
import difflib
import math
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

_NEGATIVE = re.compile(r"^-\d+$|^-\d*\.\d+$")


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


def names(
    known: Sequence[str] | Callable[[], Sequence[str]],
    what: str = "policy",
    also: Callable[[str], bool] | None = None,
) -> Callable[[str], tuple[str, ...]]:
    """A comma-separated list of names from ``known`` (or names ``also`` accepts, such as ``hpa@TARGET``);
    an unknown one is refused with the closest match. ``known`` may be a function, called only when parsing."""

    def parse(raw: str) -> tuple[str, ...]:
        known_names = known() if callable(known) else known
        chosen = tuple(dict.fromkeys(n.strip() for n in raw.split(",") if n.strip()))
        if not chosen:
            raise argparse.ArgumentTypeError(f"give at least one {what}: some of {', '.join(known_names)}")
        for name in chosen:
            if name not in known_names and not (also is not None and also(name)):
                raise argparse.ArgumentTypeError(
                    f"unknown {what} '{name}': {did_you_mean(name.lower(), known_names)}"
                    f"use some of {', '.join(known_names)}"
                )
        return chosen

    return parse


def did_you_mean(name: str, known: Sequence[str]) -> str:
    """``"did you mean 'x'? "`` for the closest of ``known``, or nothing when none is close."""
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'? " if close else ""


class Parser(argparse.ArgumentParser):
    """argparse with a check for unknown options first, so a typo is named with the closest real option.

    argparse alone reports ``--polcy x`` as "the following arguments are required: --policy", which hides
    the typo. The check looks at this parser's own options only: up to the subcommand for a parser with
    subcommands, up to ``--`` or the command of a trailing ``REMAINDER`` (``submit ... -- python -u x.py``).
    """

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        """Refuse the first unknown option (with the closest known one), then parse as argparse does."""
        tokens = list(sys.argv[1:] if args is None else args)
        self._refuse_unknown_options(tokens)
        return super().parse_known_args(tokens, namespace)

    def _refuse_unknown_options(self, tokens: list[str]) -> None:
        commands = {name for a in self._actions if isinstance(a, argparse._SubParsersAction) for name in a.choices}
        remainder = any(a.nargs == argparse.REMAINDER for a in self._positionals._group_actions)
        known = sorted(self._option_string_actions)
        skip = 0
        for token in tokens:
            if skip:
                skip -= 1
                continue
            if token == "--" or token in commands:
                return
            if not token.startswith("-") or token == "-" or _NEGATIVE.match(token):
                if commands:
                    self.error(
                        f"unknown command '{token}': {did_you_mean(token, sorted(commands))}see '{self.prog} --help'"
                    )
                if remainder:
                    return
                continue
            flag = token.split("=", 1)[0]
            action = self._option_string_actions.get(flag)
            if action is None:
                matches = [o for o in known if o.startswith(flag) and flag.startswith("--")]
                if len(matches) == 1:
                    action = self._option_string_actions[matches[0]]
                elif not (flag.startswith("-") and not flag.startswith("--") and len(flag) > 2):
                    self.error(f"unrecognized option '{flag}': {did_you_mean(flag, known)}see '{self.prog} --help'")
            if action is not None and "=" not in token:
                skip = _values_taken(action)


def _values_taken(action: argparse.Action) -> int:
    """How many following tokens an option consumes (1 for a plain option, 0 for a flag)."""
    nargs: Any = action.nargs
    if nargs is None:
        return 1
    if isinstance(nargs, int):
        return nargs
    return 0 if nargs in ("?", "*", "+") else 1
