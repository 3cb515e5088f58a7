"""Quota accounting per queue and flavor, with cohort borrowing and lending limits (Kueue semantics).

For a queue q and flavor f: nominal n, borrowing limit B (None: unlimited), lending limit L, and the
guaranteed part g = n - L that others can never use. A queue may hold at most n + B. Within a cohort,
usage above the guaranteed part is drawn from a shared pool of the members' lendable quota ΣL; the pool
can never be overdrawn, so no lender is ever pushed below its guaranteed quota.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuplane.model.decision import ReasonCode
from gpuplane.model.gpu import MILLI_PER_GPU
from gpuplane.scheduler.index import PolicyIndex, QueueInfo


@dataclass(slots=True)
class QuotaVerdict:
    """Whether a request fits the quota, whether it borrows, and if not, why."""

    ok: bool
    borrowing: bool = False
    code: ReasonCode | None = None
    details: dict[str, Any] = field(default_factory=dict)


_OK = QuotaVerdict(True)
_BORROWING = QuotaVerdict(True, borrowing=True)


def _gpus(milli: int) -> float | int:
    return milli // MILLI_PER_GPU if milli % MILLI_PER_GPU == 0 else milli / MILLI_PER_GPU


class QuotaLedger:
    """Usage of every queue per flavor, running job counts, and each cohort's drawn pool."""

    def __init__(self, index: PolicyIndex) -> None:
        self.index = index
        self.usage: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.total: dict[str, int] = defaultdict(int)
        self.jobs: dict[str, int] = defaultdict(int)
        self.drawn: dict[tuple[str, str], int] = defaultdict(int)
        self.version = 0
        self.queue_version: dict[str, int] = defaultdict(int)
        self._verdicts: dict[tuple[str, str, int, bool], tuple[int, QuotaVerdict]] = {}

    def _excess(self, queue: QueueInfo, flavor: str, usage: int) -> int:
        return max(0, usage - queue.quota(flavor).guaranteed)

    def check(self, queue: QueueInfo, flavor: str, milli: int, preemptible: bool) -> QuotaVerdict:
        """Whether ``milli`` more on ``flavor`` fits ``queue``'s quota now.

        Verdicts are remembered until the ledger next changes: in a busy cluster thousands of waiting
        workloads ask the same question between two admissions. A verdict's details are shared and
        must not be mutated.
        """
        key = (queue.name, flavor, milli, preemptible)
        known = self._verdicts.get(key)
        if known is not None and known[0] == self.version:
            return known[1]
        verdict = self._check(queue, flavor, milli, preemptible)
        self._verdicts[key] = (self.version, verdict)
        return verdict

    def _check(self, queue: QueueInfo, flavor: str, milli: int, preemptible: bool) -> QuotaVerdict:
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
        if queue.cohort is None:
            if after > quota.nominal:
                return self._refuse(ReasonCode.QUOTA_NOMINAL_EXCEEDED, queue, flavor, milli)
            return _OK
        borrowing = after > quota.nominal
        if borrowing:
            if quota.borrow_limit is not None and after > quota.nominal + quota.borrow_limit:
                return self._refuse(ReasonCode.BORROWING_LIMIT_EXCEEDED, queue, flavor, milli)
            if not preemptible and not queue.allow_nonpreemptible_borrowing:
                return self._refuse(ReasonCode.NONPREEMPTIBLE_CANNOT_BORROW, queue, flavor, milli)
        guaranteed = quota.guaranteed
        extra = max(0, after - guaranteed) - max(0, used - guaranteed)
        key = (queue.cohort, flavor)
        if extra and self.drawn[key] + extra > self.index.cohort_lendable.get(key, 0):
            code = ReasonCode.COHORT_QUOTA_EXHAUSTED if borrowing else ReasonCode.AWAITING_RECLAIM
            return self._refuse(code, queue, flavor, milli)
        return _BORROWING if borrowing else _OK

    def _refuse(self, code: ReasonCode, queue: QueueInfo, flavor: str, milli: int) -> QuotaVerdict:
        quota = queue.quota(flavor)
        details: dict[str, Any] = {
            "flavor": flavor,
            "in_use": _gpus(self.usage[queue.name][flavor]),
            "requested": _gpus(milli),
            "nominal": _gpus(quota.nominal),
        }
        if code is ReasonCode.BORROWING_LIMIT_EXCEEDED:
            assert quota.borrow_limit is not None
            details["borrowing_limit"] = _gpus(quota.borrow_limit)
        elif code in (ReasonCode.COHORT_QUOTA_EXHAUSTED, ReasonCode.AWAITING_RECLAIM):
            assert queue.cohort is not None
            key = (queue.cohort, flavor)
            details.update(
                {
                    "cohort": queue.cohort,
                    "cohort_lendable": _gpus(self.index.cohort_lendable.get(key, 0)),
                    "cohort_in_use": _gpus(self.drawn[key]),
                    "guaranteed": _gpus(quota.guaranteed),
                }
            )
            if code is ReasonCode.AWAITING_RECLAIM:
                rules = self.index.policy.scheduling.preemption
                spared = self.index.reclaim_min_runtime_s
                details["reclaim"] = rules.reclaim_within_cohort if rules.enabled else "off"
                details["reclaim_min_runtime_s"] = spared or 0.0
        return QuotaVerdict(False, code=code, details=details)

    def charge(self, queue: QueueInfo, flavor: str, milli: int) -> None:
        """Account one admitted workload of ``milli`` on ``flavor``."""
        self._add(queue, flavor, milli, 1)

    def release(self, queue: QueueInfo, flavor: str, milli: int) -> None:
        """Return a workload's quota (it finished or was preempted)."""
        self._add(queue, flavor, -milli, -1)

    def _add(self, queue: QueueInfo, flavor: str, milli: int, jobs: int) -> None:
        self.version += 1
        self.queue_version[queue.name] += 1
        used = self.usage[queue.name][flavor]
        if queue.cohort is not None:
            key = (queue.cohort, flavor)
            self.drawn[key] += self._excess(queue, flavor, used + milli) - self._excess(queue, flavor, used)
        self.usage[queue.name][flavor] = used + milli
        self.total[queue.name] += milli
        self.jobs[queue.name] += jobs

    def could_fit_after(
        self, queue: QueueInfo, flavor: str, milli: int, preemptible: bool, released: Mapping[str, int]
    ) -> bool:
        """Whether ``milli`` more on ``flavor`` could fit ``queue``'s quota once at most ``released`` milli-GPUs of
        ``flavor`` per queue of the cohort (``queue`` itself included) are given back.

        Every limit only loosens as work is released, so a False here means no subset of those releases lets
        the request in: a preemption search that can free at most ``released`` is refused by quota whatever it
        takes, and need not walk its victims. The running-jobs limit is not checked (releases free job slots).
        """
        own = released.get(queue.name, 0)
        if queue.max_gpus_milli is not None and self.total[queue.name] - own + milli > queue.max_gpus_milli:
            return False
        quota = queue.quota(flavor)
        used = self.usage[queue.name][flavor] - own
        after = used + milli
        if queue.cohort is None:
            return after <= quota.nominal
        if after > quota.nominal:
            if quota.borrow_limit is not None and after > quota.nominal + quota.borrow_limit:
                return False
            if not preemptible and not queue.allow_nonpreemptible_borrowing:
                return False
        guaranteed = quota.guaranteed
        extra = max(0, after - guaranteed) - max(0, used - guaranteed)
        if not extra:
            return True
        drawn = self.drawn[(queue.cohort, flavor)]
        queues = self.index.queues
        for name, given in released.items():
            held = self.usage[name][flavor]
            floor = queues[name].quota(flavor).guaranteed
            drawn -= max(0, held - floor) - max(0, held - given - floor)
        return drawn + extra <= self.index.cohort_lendable.get((queue.cohort, flavor), 0)

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
