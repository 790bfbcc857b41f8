"""One run per lake at a time: a lock file at ``LakeLayout.lock`` naming who holds it.

    with lake_lock(layout_or_root, wait_seconds, poll=1.0):
        ...  # run stages

The lock is a JSON file (host, pid, command, started, token) that appears whole: it is written
to a file of its own and hard-linked into place, which fails when a lock exists (atomic on a
local or POSIX file system), so no reader ever sees it half-written. A second run waits up to
``wait_seconds`` for it, then raises LakeLockedError naming the holder. A lock whose holder is a
process of this host that is gone (killed, crashed; its pid unused, or reused by a newer process)
is stale and is broken; one held from another host is never broken (its process cannot be
checked from here). A process holds the lock once: taking it again inside (a run of several
stages, a job running the pipeline) is free; another thread of the process waits like any run.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from ticdc_lake.errors import ConfigError, TicdcLakeError
from ticdc_lake.lake.layout import LakeLayout

# A scheduler retrying a task that found the lake busy would otherwise fail fast and burn its
# retries while the other run finishes; ten minutes covers an ordinary incremental run, and a
# run that takes longer is better refused (with who holds the lake) than queued behind forever.
DEFAULT_LOCK_WAIT = 600.0
LOCK_WAIT_ENV = "TICDC_LAKE_LOCK_WAIT"

# (lock path, pid, thread) of the locks this process holds: taken once, whatever nests inside.
_held: set[tuple[Path, int, int]] = set()


class LakeLockedError(TicdcLakeError):
    """Another run holds the lake's lock and did not let go within the wait."""


@dataclass(frozen=True)
class LockHolder:
    host: str
    pid: int
    command: str
    started: str  # ISO-8601, UTC
    token: str  # tells this holding apart from any other by the same pid

    @classmethod
    def of_this_process(cls) -> LockHolder:
        return cls(
            host=socket.gethostname(),
            pid=os.getpid(),
            command=" ".join(sys.argv)[:500],
            started=datetime.now(UTC).isoformat(timespec="seconds"),
            token=uuid.uuid4().hex,
        )

    def describe(self) -> str:
        return f"{self.command or '?'!r} (pid {self.pid} on {self.host}, since {self.started})"

    def is_dead(self) -> bool:
        """True only when the holder is surely gone: a process of this host that does not exist,
        or whose pid now belongs to a process started after the lock was taken."""
        if self.host != socket.gethostname():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # alive, another user's
            pass
        began = process_start(self.pid)
        try:
            taken = datetime.fromisoformat(self.started).timestamp()
        except ValueError:
            return False
        # The lock's time is whole seconds and the clock ticks are coarse: a margin.
        return began is not None and began > taken + 2


def process_start(pid: int) -> float | None:
    """When a process of this host started (Unix time), where /proc tells; else None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        boot = next(
            float(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime ")
        )
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def default_lock_wait() -> float:
    """Seconds to wait for a busy lake: $TICDC_LAKE_LOCK_WAIT, else DEFAULT_LOCK_WAIT."""
    text = os.environ.get(LOCK_WAIT_ENV, "").strip()
    if not text:
        return DEFAULT_LOCK_WAIT
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:  # also refuses nan
        raise ConfigError(f"${LOCK_WAIT_ENV} is {text!r}: expected a number of seconds >= 0")
    return seconds


def _seconds(text: str) -> float:
    seconds = float(text)
    if not seconds >= 0:
        raise ValueError(text)
    return seconds


def add_lock_wait(parser: argparse.ArgumentParser) -> None:
    """``--lock-wait SECONDS`` (None when not given: lake_lock then takes the default)."""
    parser.add_argument(
        "--lock-wait",
        type=_seconds,
        metavar="SECONDS",
        help="while another run holds the lake, wait this long for it, then fail "
        f"(default: ${LOCK_WAIT_ENV}, else {DEFAULT_LOCK_WAIT:g})",
    )


def read_holder(path: Path) -> LockHolder | None:
    """Who holds the lock at ``path``; None when there is no lock (any more)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        return LockHolder(**json.loads(text))
    except (ValueError, TypeError):  # not ours: never broken, never overwritten
        return LockHolder("?", -1, f"unreadable lock file {path}", "?", "")


@contextmanager
def lake_lock(
    lake: LakeLayout | Path | str, wait_seconds: float | None = None, *, poll: float = 1.0
) -> Iterator[None]:
    """Hold the lake's lock for the block; wait at most ``wait_seconds`` (None: the default)."""
    path = (lake if isinstance(lake, LakeLayout) else LakeLayout(Path(lake))).lock
    path = path.absolute()
    mine = (path, os.getpid(), threading.get_ident())
    if mine in _held:
        yield
        return
    wait = default_lock_wait() if wait_seconds is None else wait_seconds
    holder = _acquire(path, wait, poll)
    _held.add(mine)
    try:
        yield
    finally:
        _held.discard(mine)
        _release(path, holder)


def _acquire(path: Path, wait_seconds: float, poll: float) -> LockHolder:
    me = LockHolder.of_this_process()
    deadline = time.monotonic() + wait_seconds
    while True:
        if _try_create(path, me):
            return me
        holder = read_holder(path)
        if holder is None:
            continue  # let go between our try and our look: try again at once
        if holder.is_dead():
            _break_stale(path, holder)
            continue
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise LakeLockedError(_locked_message(path, holder, wait_seconds))
        time.sleep(min(poll, remaining))


def _try_create(path: Path, holder: LockHolder) -> bool:
    path.parent.mkdir(parents=True, exist_ok=True)
    written = path.with_name(f"{path.name}.{holder.token}.new")
    written.write_text(json.dumps(asdict(holder)))
    try:
        os.link(written, path)  # fails when a lock exists, never replaces it
        return True
    except FileExistsError:
        return False
    finally:
        written.unlink()


def _break_stale(path: Path, stale: LockHolder) -> None:
    """Remove the lock of a dead holder, unless someone else already did (then do nothing).

    Several waiters may find the same stale lock: only the one that creates the stale holding's
    marker file may remove it, and only after checking the lock is still that holding, so a lock
    taken meanwhile is never removed.
    """
    marker = path.with_name(f"{path.name}.{stale.token}.breaking")
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        time.sleep(0.05)  # another waiter is breaking it
        return
    try:
        if read_holder(path) == stale:
            path.unlink()
    finally:
        marker.unlink()


def _release(path: Path, holder: LockHolder) -> None:
    if read_holder(path) == holder:  # else broken as stale: never remove another's lock
        path.unlink()


def _locked_message(path: Path, holder: LockHolder, wait_seconds: float) -> str:
    return (
        f"the lake is locked by another run: {holder.describe()}; waited {wait_seconds:g} s. "
        f"Only one run at a time works on a lake. Let it finish and run again, or wait longer "
        f"(--lock-wait SECONDS or ${LOCK_WAIT_ENV}); if no run is going on the lake "
        f"(e.g. its host is gone), remove {path}"
    )
