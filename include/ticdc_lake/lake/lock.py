"""One run per lake at a time: a lock file created atomically, naming its holder.

Two runs on one lake came out correct (every write is idempotent) but both reported the same
work; the lock makes the guarantee explicit. A lock whose holder died on this host is taken
over; one held by a live process, or by another host, is waited for and then refused.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from ticdc_lake.errors import TicdcLakeError
from ticdc_lake.lake.layout import LakeLayout

# A scheduler retries a task that fails; a lake busy with the previous run is better waited
# for a while than failed at once. Ten minutes covers a scheduled run on a small lake.
DEFAULT_WAIT_SECONDS = 600.0
WAIT_ENV = "TICDC_LAKE_LOCK_WAIT"


class LakeLockedError(TicdcLakeError):
    """Another run holds the lake's lock."""


def default_wait() -> float:
    text = os.environ.get(WAIT_ENV)
    return DEFAULT_WAIT_SECONDS if text is None else float(text)


def add_lock_wait(parser: argparse.ArgumentParser) -> None:
    """The ``--lock-wait`` option of every command that runs stages."""
    parser.add_argument(
        "--lock-wait",
        type=float,
        metavar="SECONDS",
        help="wait this long for another run on the same lake to end, then fail "
        f"(default ${WAIT_ENV} or {DEFAULT_WAIT_SECONDS:g})",
    )


def _holder() -> dict:
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "command": " ".join(sys.argv)[:500],
        "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }


def _read_holder(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}  # being written, or garbage: treated as held


def _is_dead(holder: dict) -> bool:
    """The holder ran on this host and its process is gone."""
    if holder.get("host") != socket.gethostname() or not isinstance(holder.get("pid"), int):
        return False
    try:
        os.kill(holder["pid"], 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _try_create(path: Path) -> bool:
    try:
        descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(descriptor, "w") as out:
        json.dump(_holder(), out)
    return True


def _recover_stale(path: Path, holder: dict) -> None:
    """Move a dead holder's lock aside; a live lock moved by a race is put back unless a
    newer one is there already (link fails on an existing name)."""
    aside = path.with_name(f"{path.name}.stale-{os.getpid()}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return
    if _read_holder(aside) != holder:
        with contextlib.suppress(FileExistsError):
            os.link(aside, path)
    aside.unlink()


def _describe(holder: dict | None) -> str:
    if not holder:
        return "another run"
    return (
        f"pid {holder.get('pid')} on {holder.get('host')} since {holder.get('started')} "
        f"({holder.get('command', '?')})"
    )


@contextlib.contextmanager
def lake_lock(
    layout: LakeLayout, wait_seconds: float | None = None, poll_seconds: float = 0.5
) -> Iterator[Path]:
    """Hold ``layout``'s lock for the block; wait up to ``wait_seconds`` for a live holder."""
    wait = default_wait() if wait_seconds is None else wait_seconds
    path = layout.lock
    path.parent.mkdir(parents=True, exist_ok=True)
    if _is_mine(_read_holder(path)):  # a run inside a run of this process: already held
        yield path
        return
    deadline = time.monotonic() + wait
    while not _try_create(path):
        holder = _read_holder(path)
        if holder and _is_dead(holder):
            _recover_stale(path, holder)
            continue
        if time.monotonic() >= deadline:
            raise LakeLockedError(
                f"lake {layout.root} is in use by {_describe(holder)}; waited {wait:g} s. "
                f"Run again when it ends, or wait longer (--lock-wait, {WAIT_ENV}); if that "
                f"run is gone from another host, delete {path}"
            )
        time.sleep(poll_seconds)
    try:
        yield path
    finally:
        if _is_mine(_read_holder(path)):
            path.unlink(missing_ok=True)


def _is_mine(holder: dict | None) -> bool:
    holder = holder or {}
    return (holder.get("host"), holder.get("pid")) == (socket.gethostname(), os.getpid())
