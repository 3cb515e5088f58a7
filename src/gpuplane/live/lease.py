"""One control plane per database: a lease in the store that a second plane is refused.

Two planes on one database would both start and stop the same jobs (each job running twice, a cancel on one
kept running by the other). The plane takes the lease when it starts and renews it while it runs; another
plane is refused with the holder's host, process and expiry. A lease whose plane died is taken over at once
when that plane ran on this host (its process is gone), otherwise once it expires (``LEASE_TTL_S`` after the
last renewal). A plane that finds its lease taken stops acting (``renew`` returns False).
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Callable

from gpuplane.live.store import Store, StoreError

LEASE_TTL_S = 30.0
"""A lease not renewed for this long is free; the holder renews it every third of that."""


class LeaseHeld(StoreError):
    """Another control plane holds the database."""


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class PlaneLease:
    """This plane's hold on the store."""

    def __init__(
        self, store: Store, clock: Callable[[], float], ttl_s: float = LEASE_TTL_S, host: str | None = None
    ) -> None:
        self.store = store
        self.clock = clock
        self.ttl_s = ttl_s
        self.host = host or socket.gethostname()
        self.pid = os.getpid()
        self.holder = uuid.uuid4().hex
        self.renewed = 0.0

    def acquire(self) -> str | None:
        """Take the lease or raise LeaseHeld naming the plane that holds it and the fix; returns a note when a
        dead plane's lease was taken over."""
        for _ in range(3):
            now = self.clock()
            current = self.store.lease()
            replacing = None if current is None else str(current["holder"])
            note = None
            if current is not None:
                dead_here = current["host"] == self.host and not process_alive(int(current["pid"]))
                if not dead_here and float(current["expires"]) > now:
                    raise LeaseHeld(
                        f"another control plane uses this database (host {current['host']}, pid {current['pid']}, "
                        f"lease valid for {float(current['expires']) - now:.0f} s more). Fix: stop that plane, or "
                        "give this one its own --database-url/--data-dir; a plane that died on another host "
                        f"releases the database {self.ttl_s:.0f} s after its last renewal"
                    )
                note = f"took over the lease of a stopped plane (host {current['host']}, pid {current['pid']})"
            if self.store.claim_lease(self.holder, self.host, self.pid, now + self.ttl_s, replacing):
                self.renewed = now
                return note
        raise LeaseHeld("another control plane took the database while this one started. Fix: stop the other plane")

    def renew(self) -> bool:
        """Extend the lease when due; False when another plane has taken it (this plane must stop acting)."""
        now = self.clock()
        if now - self.renewed < self.ttl_s / 3:
            return True
        if not self.store.renew_lease(self.holder, now + self.ttl_s):
            return False
        self.renewed = now
        return True

    def release(self) -> None:
        """Give the database up (on a clean shutdown the next plane starts at once)."""
        self.store.release_lease(self.holder)
