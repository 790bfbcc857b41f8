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

Whatever is found at the lock's path, the wait ends by the deadline, sleeping ``poll`` between
tries, and ends in one message naming the lock file and what is wrong with it. Anything there that
is not a lock this module writes (a directory, a symbolic link, a pipe, text that is not the
holder's JSON, a pid that is not a number) is never broken or replaced: LockFileError says what it
is, once the wait is over, for a person to remove. The holder's ``started`` is when it took the
lock, not when it began waiting.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import json
import os
import socket
import stat
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

# A lock is a few hundred bytes (its command is cut at 500 characters): a file past this is not
# one, and reading it whole would only cost memory.
_MAX_LOCK_BYTES = 64 * 1024
# A pid is a positive C int (Linux caps it at 2**22); os.kill raises on anything else.
_MAX_PID = 2**31 - 1
# What a lock file's text may be shown with in a message.
_SHOWN = 80

# (lock path, pid, thread) of the locks this process holds: taken once, whatever nests inside.
_held: set[tuple[Path, int, int]] = set()


class LakeLockedError(TicdcLakeError):
    """Another run holds the lake's lock and did not let go within the wait, or the lock cannot
    be taken at all (LockFileError)."""


class LockFileError(LakeLockedError):
    """The lock file is not a lock this module writes (a directory, a symbolic link, text that
    is not a holder), or cannot be read, created or removed: the lake stays locked until a person
    looks. ``reason`` says what is wrong with ``path``."""

    def __init__(self, path: Path, reason: str):
        self.path, self.reason = path, reason
        super().__init__(f"the lake's lock file {path} {reason}")


@dataclass(frozen=True)
class LockHolder:
    host: str
    pid: int
    command: str
    started: str  # ISO-8601, UTC: when the lock was taken
    token: str  # tells this holding apart from any other by the same pid

    @classmethod
    def of_this_process(cls, token: str | None = None) -> LockHolder:
        """This process, as of now (call it when the lock is taken: ``started`` is now)."""
        return cls(
            host=socket.gethostname(),
            pid=os.getpid(),
            command=" ".join(sys.argv)[:500],
            started=datetime.now(UTC).isoformat(timespec="seconds"),
            token=token or uuid.uuid4().hex,
        )

    @classmethod
    def from_json(cls, text: str) -> LockHolder:
        """The holder a lock file's text names; ValueError saying what is wrong with it (the
        rest of a sentence beginning with the file's name) when it is not a holder."""
        try:
            fields = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise ValueError(f"is not JSON ({exc})") from None
        if not isinstance(fields, dict):
            raise ValueError(f"holds a JSON {type(fields).__name__}, not a lock holder's object")
        names = [field.name for field in dataclasses.fields(cls)]
        missing = [name for name in names if name not in fields]
        unknown = [name for name in fields if name not in names]
        if missing or unknown:
            wrong = [f"missing {', '.join(missing)}"] if missing else []
            wrong += [f"unknown {', '.join(map(_shown, unknown[:5]))}"] if unknown else []
            raise ValueError(f"does not hold a lock holder's fields ({'; '.join(wrong)})")
        for name in ("host", "command", "started", "token"):
            if not isinstance(fields[name], str):
                raise ValueError(f"has {name} {_shown(fields[name])}: expected a string")
        pid = fields["pid"]
        if type(pid) is not int or not 0 < pid <= _MAX_PID:  # bool is an int: not a pid
            raise ValueError(f"has pid {_shown(pid)}: expected a process id (1 to {_MAX_PID})")
        try:
            datetime.fromisoformat(fields["started"])
        except ValueError:
            raise ValueError(
                f"has started {_shown(fields['started'])}: expected an ISO-8601 time"
            ) from None
        return cls(**fields)

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


def _shown(value: object) -> str:
    """A value from a lock file, for a message: its repr, cut short."""
    text = repr(value)
    return text if len(text) <= _SHOWN else f"{text[: _SHOWN - 3]}..."


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
    """Who holds the lock at ``path``; None when there is no lock (any more). LockFileError
    when what is there is not a lock this module writes, or cannot be read."""
    try:
        text = _read_lock_file(path)
    except FileNotFoundError:
        return None
    try:
        return LockHolder.from_json(text)
    except ValueError as exc:  # not ours: never broken, never overwritten
        raise LockFileError(path, str(exc)) from None


# What a lock's path may be instead of a file, for a message.
_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a named pipe",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


def _read_lock_file(path: Path) -> str:
    """The text of the lock file; FileNotFoundError when there is none.

    A symbolic link is not followed (the lock is never one, and what it names could be a pipe
    whose read blocks or a device that never ends), nor is anything but a regular file read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise LockFileError(path, f"is a symbolic link{_link_target(path)}") from None
        raise LockFileError(path, f"cannot be read: {_os_problem(exc, path)}") from None
    try:
        kind = stat.S_IFMT(os.fstat(fd).st_mode)
        if kind != stat.S_IFREG:
            raise LockFileError(path, f"is {_KINDS.get(kind, 'not a regular file')}")
        data = b""
        while len(data) <= _MAX_LOCK_BYTES:
            chunk = os.read(fd, _MAX_LOCK_BYTES + 1 - len(data))
            if not chunk:
                break
            data += chunk
    except OSError as exc:
        raise LockFileError(path, f"cannot be read: {_os_problem(exc, path)}") from None
    finally:
        os.close(fd)
    if len(data) > _MAX_LOCK_BYTES:
        raise LockFileError(path, f"is over {_MAX_LOCK_BYTES // 1024} KiB, too big for a lock")
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise LockFileError(path, "is not UTF-8 text") from None


def _link_target(path: Path) -> str:
    try:
        return f" (to {_shown(os.readlink(path))})"
    except OSError:
        return ""


def _os_problem(exc: OSError, path: Path) -> str:
    """An OSError as the rest of a sentence about ``path``: its reason, and the file it names
    when that is another (the lake's folder, a temporary file)."""
    where = f" ({exc.filename})" if exc.filename and str(exc.filename) != str(path) else ""
    return f"{exc.strerror or exc}{where}"


@contextmanager
def lake_lock(
    lake: LakeLayout | Path | str, wait_seconds: float | None = None, *, poll: float = 1.0
) -> Iterator[None]:
    """Hold the lake's lock for the block; wait at most ``wait_seconds`` (None: the default),
    trying again every ``poll`` seconds."""
    path = (lake if isinstance(lake, LakeLayout) else LakeLayout(Path(lake))).lock
    path = path.absolute()
    mine = (path, os.getpid(), threading.get_ident())
    if mine in _held:
        yield
        return
    wait = default_lock_wait() if wait_seconds is None else wait_seconds
    if not wait >= 0:  # nan would never time out
        raise ConfigError(f"lock wait {wait!r}: expected a number of seconds >= 0")
    if not poll > 0:
        raise ValueError(f"poll {poll!r}: expected seconds > 0")
    holder = _acquire(path, wait, poll)
    _held.add(mine)
    try:
        yield
    finally:
        _held.discard(mine)
        _release(path, holder)


def _acquire(path: Path, wait_seconds: float, poll: float) -> LockHolder:
    """Take the lock, trying every ``poll`` seconds until ``wait_seconds`` have passed; then
    raise what kept it (LakeLockedError, or LockFileError for what a person must remove).

    A lock that went between a try and the look (let go, or broken here as stale) is tried
    again at once, but only once per poll: every other path sleeps, and none runs past the
    deadline."""
    token = uuid.uuid4().hex
    deadline = time.monotonic() + wait_seconds
    tried_again = False
    while True:
        # Made at each try: `started` is when the lock is taken, not when the wait began.
        me = LockHolder.of_this_process(token)
        if _try_create(path, me):
            return me
        obstacle, gone = _obstacle(path, wait_seconds)
        if gone and not tried_again:
            tried_again = True
            continue
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise obstacle
        time.sleep(min(poll, remaining))
        tried_again = False


def _obstacle(path: Path, wait_seconds: float) -> tuple[LakeLockedError, bool]:
    """What kept the lock from being taken, as the error to raise if the wait is over, and
    whether the lock is gone now (let go, or left by a dead process and broken here).

    Raises LockFileError at once for what waiting cannot mend (a dead holder's lock that cannot
    be removed)."""
    waited = f"waited {wait_seconds:g} s"
    try:
        holder = read_holder(path)
    except LockFileError as exc:
        return LockFileError(
            path,
            f"{exc.reason}; {waited} for it to go. No run breaks or replaces a lock it cannot "
            "read: if no run is going on the lake, remove it and run again",
        ), False
    if holder is not None and holder.is_dead():
        if _break_stale(path, holder):
            holder = None
        else:
            marker = _marker(path, holder)
            return LockFileError(
                path,
                f"is held by {holder.describe()}, a process of this host that is gone, and "
                f"cannot be broken while {marker} is there (another run is breaking it, or was "
                f"killed while it did); {waited}. If no run is going on the lake, remove both "
                "and run again",
            ), False
    if holder is None:
        return LakeLockedError(
            f"the lake's lock {path} came free but another run took it each time this one "
            f"tried; {waited}. Let the other runs finish and run again, or wait longer "
            f"(--lock-wait SECONDS or ${LOCK_WAIT_ENV})"
        ), True
    return LakeLockedError(_locked_message(path, holder, wait_seconds)), False


def _try_create(path: Path, holder: LockHolder) -> bool:
    """Put ``holder``'s lock in place; False when anything is at the lock's path already.
    The holder's JSON is written to a file of its own first (removed whatever happens), so
    the lock appears whole."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LockFileError(path, f"cannot be created: {_os_problem(exc, path)}") from None
    written = path.with_name(f"{path.name}.{holder.token}.new")
    try:
        written.write_text(json.dumps(asdict(holder)))
        os.link(written, path)  # fails when anything is at the path, never replaces it
        return True
    except FileExistsError:
        return False
    except OSError as exc:
        links = " (the lock is hard-linked into place)" if exc.filename2 is not None else ""
        raise LockFileError(path, f"cannot be created: {_os_problem(exc, path)}{links}") from None
    finally:
        written.unlink(missing_ok=True)


def _marker(path: Path, stale: LockHolder) -> Path:
    return path.with_name(f"{path.name}.{stale.token}.breaking")


def _break_stale(path: Path, stale: LockHolder) -> bool:
    """Remove the lock of a dead holder unless someone else already did: True when it is gone
    (whoever removed it), False while another waiter's marker says it is being broken.

    Several waiters may find the same stale lock: only the one that creates the stale holding's
    marker file may remove it, and only after checking the lock is still that holding, so a lock
    taken meanwhile is never removed.
    """
    marker = _marker(path, stale)
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC))
    except FileExistsError:
        return False
    except OSError as exc:
        raise LockFileError(path, _unbreakable(stale, exc, path)) from None
    try:
        try:
            still_stale = read_holder(path) == stale
        except LockFileError:  # replaced by something else meanwhile: the stale lock is gone
            still_stale = False
        if still_stale:
            path.unlink(missing_ok=True)
        return True
    except OSError as exc:
        raise LockFileError(path, _unbreakable(stale, exc, path)) from None
    finally:
        marker.unlink(missing_ok=True)


def _unbreakable(stale: LockHolder, exc: OSError, path: Path) -> str:
    return (
        f"is held by {stale.describe()}, a process of this host that is gone, but cannot be "
        f"removed: {_os_problem(exc, path)}"
    )


def _release(path: Path, holder: LockHolder) -> None:
    try:
        if read_holder(path) != holder:  # broken as stale: never remove another's lock
            return
    except LockFileError:  # replaced by something that is not a lock: not ours either
        return
    path.unlink(missing_ok=True)


def _locked_message(path: Path, holder: LockHolder, wait_seconds: float) -> str:
    return (
        f"the lake is locked by another run: {holder.describe()}; waited {wait_seconds:g} s. "
        f"Only one run at a time works on a lake. Let it finish and run again, or wait longer "
        f"(--lock-wait SECONDS or ${LOCK_WAIT_ENV}); if no run is going on the lake "
        f"(e.g. its host is gone), remove {path}"
    )
