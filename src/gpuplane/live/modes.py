"""Which kind of plane wrote a database: a real one (its jobs ran) or a shadow one (its jobs are would-be)."""

from __future__ import annotations

from gpuplane.live.records import JobRecord


class PlaneModeError(RuntimeError):
    """A database written by a shadow plane opened by a real one, or the other way round."""


def check_mode(jobs: list[JobRecord], shadow: bool) -> None:
    """Refuse a database whose jobs were written by a plane of the other mode: a real plane would start every
    job a shadow plane recorded as admitted, and a shadow plane would take real runs for would-be ones."""
    other = [j.id for j in jobs if j.shadow != shadow]
    if not other:
        return
    if shadow:
        raise PlaneModeError(
            f"this database holds {len(other)} jobs of a real plane (e.g. {other[0]}). Fix: give the shadow plane "
            "its own database (--data-dir or --database-url)"
        )
    raise PlaneModeError(
        f"this database holds {len(other)} jobs of a shadow plane (e.g. {other[0]}), which a real plane would "
        "start. Fix: give the real plane its own database (--data-dir or --database-url)"
    )
