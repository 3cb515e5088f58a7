"""Quota accounting per queue and flavor, with cohort borrowing and lending limits (Kueue semantics).

For a queue q and flavor f: nominal n, borrowing limit B (None: unlimited), lending limit L, and the
guaranteed part g = n - L that others can never use. A queue may hold at most n + B. Within a cohort,
usage above the guaranteed part is drawn from a shared pool of the members' lendable quota ΣL; the pool
can never be overdrawn, so no lender is ever pushed below its guaranteed quota.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from gpuplane.model.decision import ReasonCode
from gpuplane.scheduler.index import PolicyIndex, QueueInfo


@dataclass(slots=True)
class QuotaVerdict:
    """Whether a request fits the quota, whether it borrows, and if not, why."""

    ok: bool
    borrowing: bool = False
    code: ReasonCode | None = None
    details: dict[str, Any] = field(default_factory=dict)


def _gpus(milli: int) -> float | int:
    gpus = round(milli / 1000, 3)
    return int(gpus) if gpus == int(gpus) else gpus


class QuotaLedger:
    """Usage of every queue per flavor, running job counts, and each cohort's drawn pool."""

    def __init__(self, index: PolicyIndex) -> None:
        self.index = index
        self.usage: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.total: dict[str, int] = defaultdict(int)
        self.jobs: dict[str, int] = defaultdict(int)
        self.drawn: dict[tuple[str, str], int] = defaultdict(int)

    def _excess(self, queue: QueueInfo, flavor: str, usage: int) -> int:
        return max(0, usage - queue.quota(flavor).guaranteed)

    def check(self, queue: QueueInfo, flavor: str, milli: int, preemptible: bool) -> QuotaVerdict:
        """Whether ``milli`` more on ``flavor`` fits ``queue``'s quota now."""
        if queue.max_running_jobs is not None and self.jobs[queue.name] + 1 > queue.max_running_jobs:
            return QuotaVerdict(
                False,
                code=ReasonCode.MAX_RUNNING_JOBS,
                details={"running_jobs": self.jobs[queue.name], "max_running_jobs": queue.max_running_jobs},
            )
        if queue.max_gpus_milli is not None and self.total[queue.name] + milli > queue.max_gpus_milli:
            return QuotaVerdict(
                False,
                code=ReasonCode.MAX_GPUS,
                details={
                    "gpus_in_use": _gpus(self.total[queue.name]),
                    "requested": _gpus(milli),
                    "max_gpus": _gpus(queue.max_gpus_milli),
                },
            )
        quota = queue.quota(flavor)
        used = self.usage[queue.name][flavor]
        after = used + milli
        base = {
            "flavor": flavor,
            "in_use": _gpus(used),
            "requested": _gpus(milli),
            "nominal": _gpus(quota.nominal),
        }
        if queue.cohort is None:
            if after > quota.nominal:
                return QuotaVerdict(False, code=ReasonCode.QUOTA_NOMINAL_EXCEEDED, details=base)
            return QuotaVerdict(True)
        borrowing = after > quota.nominal
        if borrowing:
            if quota.borrow_limit is not None and after > quota.nominal + quota.borrow_limit:
                return QuotaVerdict(
                    False,
                    code=ReasonCode.BORROWING_LIMIT_EXCEEDED,
                    details={**base, "borrowing_limit": _gpus(quota.borrow_limit)},
                )
            if not preemptible and not queue.allow_nonpreemptible_borrowing:
                return QuotaVerdict(False, code=ReasonCode.NONPREEMPTIBLE_CANNOT_BORROW, details=base)
        key = (queue.cohort, flavor)
        extra = self._excess(queue, flavor, after) - self._excess(queue, flavor, used)
        pool = self.index.cohort_lendable.get(key, 0)
        if self.drawn[key] + extra > pool:
            return QuotaVerdict(
                False,
                code=ReasonCode.COHORT_QUOTA_EXHAUSTED,
                details={
                    **base,
                    "cohort": queue.cohort,
                    "cohort_lendable": _gpus(pool),
                    "cohort_in_use": _gpus(self.drawn[key]),
                    "guaranteed": _gpus(quota.guaranteed),
                },
            )
        return QuotaVerdict(True, borrowing=borrowing)

    def charge(self, queue: QueueInfo, flavor: str, milli: int) -> None:
        """Account one admitted workload of ``milli`` on ``flavor``."""
        self._add(queue, flavor, milli, 1)

    def release(self, queue: QueueInfo, flavor: str, milli: int) -> None:
        """Return a workload's quota (it finished or was preempted)."""
        self._add(queue, flavor, -milli, -1)

    def _add(self, queue: QueueInfo, flavor: str, milli: int, jobs: int) -> None:
        used = self.usage[queue.name][flavor]
        if queue.cohort is not None:
            key = (queue.cohort, flavor)
            self.drawn[key] += self._excess(queue, flavor, used + milli) - self._excess(queue, flavor, used)
        self.usage[queue.name][flavor] = used + milli
        self.total[queue.name] += milli
        self.jobs[queue.name] += jobs

    def borrowing(self, queue: QueueInfo, flavor: str) -> bool:
        """Whether ``queue`` holds more than its nominal quota of ``flavor``."""
        return self.usage[queue.name][flavor] > queue.quota(flavor).nominal

    def dominant_share(self, queue: QueueInfo, capacity: dict[str, int]) -> float:
        """DRF share: the largest fraction of any flavor's capacity the queue holds, over its weight."""
        share = 0.0
        for flavor, used in self.usage[queue.name].items():
            cap = capacity.get(flavor) or 1
            share = max(share, used / cap)
        return share / queue.weight
