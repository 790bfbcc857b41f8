"""One run per lake: the lock is created atomically, waited for, refused, and recovered from a
dead holder; two real processes contend for it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.lake.lock import LakeLockedError, lake_lock

HOLD = """
import sys, time
from pathlib import Path
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.lake.lock import LakeLockedError, lake_lock
root, wait, hold = Path(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
try:
    with lake_lock(LakeLayout(root), wait, poll_seconds=0.05):
        print("held", flush=True)
        time.sleep(hold)
except LakeLockedError as exc:
    print(exc, file=sys.stderr)
    sys.exit(1)
"""


def _contender(root: Path, wait: float, hold: float) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", HOLD, str(root), str(wait), str(hold)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True,
                          capture_output=True, text=True)  # fmt: skip
    return int(done.stdout)


def test_the_lock_names_its_holder_and_is_gone_after(tmp_path):
    layout = LakeLayout(tmp_path / "lake")
    with lake_lock(layout, 0) as path:
        holder = json.loads(path.read_text())
        assert (holder["host"], holder["pid"]) == (socket.gethostname(), os.getpid())
        assert holder["started"]
        with lake_lock(layout, 0):  # a run inside this process's run: already held
            assert path.exists()
        assert path.exists()
    assert not layout.lock.exists()


def test_a_live_holder_is_waited_for_then_refused_by_name(tmp_path):
    layout = LakeLayout(tmp_path / "lake")
    layout.root.mkdir()
    layout.lock.write_text(json.dumps({"host": "elsewhere", "pid": 1, "started": "then"}))
    started = time.monotonic()
    refused = pytest.raises(LakeLockedError, match=r"pid 1 on elsewhere since then.*--lock-wait")
    with refused, lake_lock(layout, 0.3, poll_seconds=0.05):
        pass
    assert time.monotonic() - started >= 0.3
    assert json.loads(layout.lock.read_text())["host"] == "elsewhere"  # never taken from it


def test_a_dead_holder_on_this_host_is_recovered(tmp_path):
    layout = LakeLayout(tmp_path / "lake")
    layout.root.mkdir()
    dead = {"host": socket.gethostname(), "pid": _dead_pid(), "started": "earlier"}
    layout.lock.write_text(json.dumps(dead))
    with lake_lock(layout, 0) as path:
        assert json.loads(path.read_text())["pid"] == os.getpid()
    assert not layout.lock.exists()
    assert not list(layout.root.glob("_lock.json.stale-*"))


def test_two_processes_one_lake(tmp_path):
    root = tmp_path / "lake dir"
    first = _contender(root, 0, 3)
    assert first.stdout.readline().strip() == "held"
    refused = _contender(root, 0, 0)
    assert refused.wait(30) == 1
    assert f"pid {first.pid}" in refused.stderr.read()
    waiting = _contender(root, 30, 0)  # waits for the first to end, then holds it
    assert waiting.stdout.readline().strip() == "held"
    assert first.wait(30) == 0 and waiting.wait(30) == 0
    assert not LakeLayout(root).lock.exists()
