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
_NOTHING_RELEASED: Mapping[str, int] = {}
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
        self.borrow_version = 0
        """Changes whenever a queue starts or stops borrowing a flavor (``borrowing``), and only then."""
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
        code, borrowing = self._limit(queue, flavor, milli, preemptible, _NOTHING_RELEASED, count_jobs=True)
        if code is None:
            return _BORROWING if borrowing else _OK
        if code is ReasonCode.MAX_RUNNING_JOBS:
            assert queue.max_running_jobs is not None
            return QuotaVerdict(
                False,
                code=code,
                details={"running_jobs": self.jobs[queue.name], "max_running_jobs": queue.max_running_jobs},
            )
        if code is ReasonCode.MAX_GPUS:
            assert queue.max_gpus_milli is not None
            return QuotaVerdict(
                False,
                code=code,
                details={
                    "gpus_in_use": _gpus(self.total[queue.name]),
                    "requested": _gpus(milli),
                    "max_gpus": _gpus(queue.max_gpus_milli),
                },
            )
        return self._refuse(code, queue, flavor, milli)

    def _limit(
        self,
        queue: QueueInfo,
        flavor: str,
        milli: int,
        preemptible: bool,
        released: Mapping[str, int],
        count_jobs: bool,
    ) -> tuple[ReasonCode | None, bool]:
        """The first limit that ``milli`` more on ``flavor`` breaks for ``queue`` (None: none), and whether it would
        borrow, once ``released`` milli-GPUs of ``flavor`` per queue of the cohort are given back (the quota rules
        of ``check`` and of ``could_fit_after`` in one place). ``count_jobs``: check the running-jobs limit too."""
        name = queue.name
        if count_jobs and queue.max_running_jobs is not None and self.jobs[name] + 1 > queue.max_running_jobs:
            return ReasonCode.MAX_RUNNING_JOBS, False
        own = released.get(name, 0)
        if queue.max_gpus_milli is not None and self.total[name] - own + milli > queue.max_gpus_milli:
            return ReasonCode.MAX_GPUS, False
        quota = queue.quota(flavor)
        used = self.usage[name][flavor] - own
        after = used + milli
        if queue.cohort is None:
            return (ReasonCode.QUOTA_NOMINAL_EXCEEDED if after > quota.nominal else None), False
        borrowing = after > quota.nominal
        if borrowing:
            if quota.borrow_limit is not None and after > quota.nominal + quota.borrow_limit:
                return ReasonCode.BORROWING_LIMIT_EXCEEDED, True
            if not preemptible and not queue.allow_nonpreemptible_borrowing:
                return ReasonCode.NONPREEMPTIBLE_CANNOT_BORROW, True
        guaranteed = quota.guaranteed
        extra = max(0, after - guaranteed) - max(0, used - guaranteed)
        if not extra:
            return None, borrowing
        key = (queue.cohort, flavor)
        drawn = self.drawn[key]
        for other, given in released.items():
            held = self.usage[other][flavor]
            floor = self.index.queues[other].quota(flavor).guaranteed
            drawn -= max(0, held - floor) - max(0, held - given - floor)
        if drawn + extra > self.index.cohort_lendable.get(key, 0):
            return (ReasonCode.COHORT_QUOTA_EXHAUSTED if borrowing else ReasonCode.AWAITING_RECLAIM), borrowing
        return None, borrowing

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
                if spared and self.index.reclaim_runtime_per_wait is not None:
                    details["reclaim_min_runtime_per_wait"] = self.index.reclaim_runtime_per_wait
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
        nominal = queue.quota(flavor).nominal
        if (used > nominal) != (used + milli > nominal):
            self.borrow_version += 1
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
        return self._limit(queue, flavor, milli, preemptible, released, count_jobs=False)[0] is None

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
