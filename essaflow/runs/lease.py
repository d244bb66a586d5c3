"""One process per pipeline run: a lease in storage, renewed by a heartbeat while the run's process lives.

A run (new, retried or resumed) takes the lease of its run id when it opens and gives it back when it ends. The
lease is a sequence of JSON objects, `runs/<run_id>/lease/<generation>.json`; a holder takes generation n + 1 with
a conditional create (`ArtifactStore.create_json`: S3 `If-None-Match: *`, a hard link on file://), so of two
processes taking over the same free lease exactly one wins. The holder rewrites its own generation every
`heartbeat_s` seconds with a new expiry (`MISSED_BEATS` heartbeats ahead). A second process finds the newest
generation live (not released, not expired) and is refused with `LeaseHeld`, naming the holder (host, pid, since).

One rule says the holder is gone (:func:`holder_gone`): its lease expired unreleased (a process anywhere that stopped
its heartbeat: SIGKILL, a lost machine), or it ran on this machine and its process has exited (found at once, not
after the expiry). Taking a lease and `essaflow/runs/crashed.py` (which marks such a run's MLflow run FAILED, so
`--resume last` finds it) both use it. This module never imports prefect.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import datetime, timezone

from essaflow.environment import env_number
from essaflow.storage import ArtifactStore

log = logging.getLogger(__name__)

HEARTBEAT_ENV = "ESSAFLOW_HEARTBEAT_S"
MISSED_BEATS = 4
"""A lease expires this many heartbeats after its last one: a slow storage write or a busy machine is no crash."""


def heartbeat_s() -> float:
    """Seconds between heartbeats: ESSAFLOW_HEARTBEAT_S, default 30 (a lease then expires after 2 minutes); a value
    that is no positive number is a ConfigError naming the variable (essaflow.environment)."""
    return env_number(HEARTBEAT_ENV)


def lease_prefix(run_id: str) -> str:
    return f"runs/{run_id}/lease"


def iso_time(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class LeaseRecord:
    """One generation of a run's lease, as stored."""

    run_id: str
    generation: int
    host: str
    pid: int
    since: float
    """Unix time the holder took the lease."""
    beat_at: float
    """Unix time of the holder's last heartbeat."""
    expires_at: float
    released: bool
    token: str
    """Random per holder: tells a process its own lease from another process's with the same pid."""

    def live(self, now: float | None = None) -> bool:
        return not self.released and self.expires_at > (time.time() if now is None else now)

    def stale(self, now: float | None = None) -> bool:
        """Neither released nor renewed in time: the holder died."""
        return not self.released and self.expires_at <= (time.time() if now is None else now)

    def holder(self) -> str:
        return f"{self.host} pid {self.pid} since {iso_time(self.since)}"


class LeaseHeld(RuntimeError):
    """Another live process holds the run's lease; the message names it."""

    def __init__(self, record: LeaseRecord):
        self.record = record
        left = max(0.0, record.expires_at - time.time())
        super().__init__(
            f"run {record.run_id} is held by {record.holder()} (last heartbeat {iso_time(record.beat_at)}, "
            f"lease expires in {left:.0f}s unless renewed); a second process may not resume it: wait until that "
            "one ends, or until its lease expires if it died"
        )


def _key(run_id: str, generation: int) -> str:
    return f"{lease_prefix(run_id)}/{generation:08d}.json"


def current_lease(store: ArtifactStore, run_id: str) -> LeaseRecord | None:
    """The newest generation of the run's lease (None if the run never took one)."""
    keys = [k for k in store.list(lease_prefix(run_id)) if k.endswith(".json")]
    if not keys:
        return None
    return LeaseRecord(**store.get_json(max(keys)))


class RunLease:
    """A lease this process holds: renewed by a daemon thread until `release`."""

    def __init__(self, store: ArtifactStore, record: LeaseRecord, heartbeat: float):
        self.store, self.record, self.heartbeat = store, record, heartbeat
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"lease-{record.run_id[:8]}", daemon=True)
        self._thread.start()

    @property
    def run_id(self) -> str:
        return self.record.run_id

    def _write(self, **change) -> None:
        now = time.time()
        fields = {"beat_at": now, "expires_at": now + MISSED_BEATS * self.heartbeat, **change}
        self.record = LeaseRecord(**{**asdict(self.record), **fields})
        self.store.put_json(_key(self.run_id, self.record.generation), asdict(self.record))

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat):
            try:
                newest = current_lease(self.store, self.run_id)
                if newest is not None and newest.token != self.record.token:
                    log.error("lease of run %s was taken over by %s; no longer renewed", self.run_id, newest.holder())
                    return
                self._write()
            except Exception as e:  # storage down for a beat: the next one retries; MISSED_BEATS leave room
                log.warning("lease heartbeat of run %s failed: %s", self.run_id, e)

    def release(self) -> None:
        """Stop the heartbeat and mark the lease released (the next process takes it at once)."""
        self._stop.set()
        _HELD.pop(self.run_id, None)
        _GIVEN_BACK.add(self.record.token)  # ours even if the write below fails (storage down): no one holds it
        try:
            self._write(released=True, expires_at=time.time())
        except Exception as e:  # an unreleased lease expires on its own
            log.warning("could not release the lease of run %s: %s", self.run_id, e)


#: run id -> the lease this process holds on it (a flow retry in the same process keeps its lease)
_HELD: dict[str, RunLease] = {}
#: tokens of the leases this process gave back: free to take again even if storage missed the release
_GIVEN_BACK: set[str] = set()


def _holder_exited(record: LeaseRecord) -> bool:
    """The holder ran on this machine and its process is gone (it could not release: storage was down, or it was
    killed): the lease is free before it expires. A holder on another machine is judged by its expiry alone."""
    if record.host != socket.gethostname() or record.pid == os.getpid():
        return False
    try:
        os.kill(record.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False


def holder_gone(record: LeaseRecord, now: float | None = None) -> bool:
    """The lease's holder is gone: neither released nor renewed in time, or its process on this machine exited."""
    return not record.released and (record.stale(now) or _holder_exited(record))


def acquire(store: ArtifactStore, run_id: str, heartbeat: float | None = None) -> RunLease:
    """Take the lease of `run_id` (or keep the one this process holds); LeaseHeld if another process holds it."""
    held = _HELD.get(run_id)
    newest = current_lease(store, run_id)
    if held is not None and newest is not None and newest.token == held.record.token:
        return held
    gone = newest is not None and holder_gone(newest)
    if newest is not None and not newest.released and not gone and newest.token not in _GIVEN_BACK:
        raise LeaseHeld(newest)
    now = time.time()
    beat = heartbeat or heartbeat_s()
    record = LeaseRecord(
        run_id=run_id,
        generation=(newest.generation + 1) if newest else 1,
        host=socket.gethostname(),
        pid=os.getpid(),
        since=now,
        beat_at=now,
        expires_at=now + MISSED_BEATS * beat,
        released=False,
        token=uuid.uuid4().hex,
    )
    if not store.create_json(_key(run_id, record.generation), asdict(record)):
        raise LeaseHeld(current_lease(store, run_id) or record)  # another process took this generation first
    if gone:
        log.warning("run %s: took over the lease of %s, which is gone", run_id, newest.holder())
    lease = RunLease(store, record, beat)
    _HELD[run_id] = lease
    return lease


def release(run_id: str | None) -> None:
    """Give back the lease this process holds on `run_id`, if any (flow hooks call this; no store needed)."""
    lease = _HELD.get(run_id or "")
    if lease is not None:
        lease.release()
