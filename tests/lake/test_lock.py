"""The per-lake lock: taken atomically, waited for, refused with the holder named, a dead
holder's lock recovered and a live one's never touched; two real processes on one lake."""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from ticdc_lake.errors import ConfigError
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.lake.lock import (
    DEFAULT_LOCK_WAIT,
    LOCK_WAIT_ENV,
    LakeLockedError,
    LockHolder,
    default_lock_wait,
    lake_lock,
    process_start,
    read_holder,
)

# Takes the lock on argv[1] waiting argv[2] seconds, says so, holds it argv[3] seconds.
_HOLD = """
import sys, time
from ticdc_lake.lake.lock import LakeLockedError, lake_lock
try:
    with lake_lock(sys.argv[1], float(sys.argv[2]), poll=0.05):
        print("held", flush=True)
        time.sleep(float(sys.argv[3]))
except LakeLockedError as exc:
    print(exc, file=sys.stderr)
    sys.exit(1)
"""


def lock_process(lake: Path, wait: float, hold: float) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(lake), str(wait), str(hold)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def hold_lock(lake: Path, seconds: float) -> subprocess.Popen:
    """Another process holding the lake's lock for ``seconds`` (returns once it holds it)."""
    holder = lock_process(lake, 0, seconds)
    assert holder.stdout.readline() == "held\n", holder.stderr.read()
    return holder


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def write_lock(lake: Path, **fields) -> LockHolder:
    holder = LockHolder(
        **{
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "command": "ticdc-lake run --config other.yaml",
            "started": datetime.now(UTC).isoformat(timespec="seconds"),
            "token": "t0",
            **fields,
        }
    )
    lake.mkdir(parents=True, exist_ok=True)
    LakeLayout(lake).lock.write_text(json.dumps(holder.__dict__))
    return holder


def test_the_lock_names_this_process_while_held_and_is_gone_after(tmp_path):
    lake = tmp_path / "lake"
    with lake_lock(LakeLayout(lake), 0):
        content = json.loads((lake / "_lock.json").read_text())
        assert content["host"] == socket.gethostname() and content["pid"] == os.getpid()
        assert content["command"] and content["started"].endswith("+00:00")
        with lake_lock(lake, 0):  # taken once per process: nesting is free
            pass
        assert (lake / "_lock.json").exists()
    assert list(lake.iterdir()) == []


def test_another_thread_of_the_holding_process_waits_like_any_run(tmp_path):
    lake = tmp_path / "lake"
    refused = []

    def second_run():
        try:
            with lake_lock(lake, 0.1, poll=0.02):
                pass
        except LakeLockedError as exc:
            refused.append(str(exc))

    with lake_lock(lake, 0):
        thread = threading.Thread(target=second_run)
        thread.start()
        thread.join()
    assert len(refused) == 1 and f"pid {os.getpid()} " in refused[0]


def test_a_held_lake_is_waited_for_then_refused_naming_the_holder(tmp_path):
    lake = tmp_path / "lake"
    other = write_lock(lake, pid=os.getppid(), started="2099-01-02T03:04:05+00:00")
    started = time.monotonic()
    # A live process, not this one (a start time after the process's: not a reused pid).
    with pytest.raises(LakeLockedError) as raised, lake_lock(lake, 0.3, poll=0.05):
        pytest.fail("took a lock another live process holds")
    assert time.monotonic() - started >= 0.3
    message = str(raised.value)
    assert f"pid {other.pid} on {other.host}, since 2099-01-02T03:04:05+00:00" in message
    assert "ticdc-lake run --config other.yaml" in message and "waited 0.3 s" in message
    assert "--lock-wait" in message and str(lake / "_lock.json") in message
    assert read_holder(LakeLayout(lake).lock) == other


def test_the_lock_of_a_dead_process_of_this_host_is_recovered(tmp_path):
    lake = tmp_path / "lake"
    write_lock(lake, pid=dead_pid())
    with lake_lock(lake, 0):
        assert read_holder(LakeLayout(lake).lock).pid == os.getpid()
    assert list(lake.iterdir()) == []  # no marker or stale file left behind


def test_a_lock_whose_pid_now_belongs_to_a_newer_process_is_recovered(tmp_path):
    """After a reboot or pid wrap-around the dead holder's pid may run something else."""
    lake = tmp_path / "lake"
    assert process_start(os.getppid()) > datetime(2000, 1, 1, tzinfo=UTC).timestamp()
    write_lock(lake, pid=os.getppid(), started="2000-01-01T00:00:00+00:00")
    with lake_lock(lake, 0):
        assert read_holder(LakeLayout(lake).lock).pid == os.getpid()


@pytest.mark.parametrize(
    "fields",
    [{"host": "another-host"}, {"pid": 1}],
    ids=["dead-pid-on-another-host", "live-pid"],
)
def test_a_lock_that_may_be_live_is_never_removed(tmp_path, fields):
    lake = tmp_path / "lake"
    if fields.get("host"):
        fields["pid"] = dead_pid()  # dead here, but it is another host's pid
    other = write_lock(lake, **fields)
    with (
        pytest.raises(LakeLockedError, match=f"pid {other.pid} on {other.host}"),
        lake_lock(lake, 0),
    ):
        pass
    assert read_holder(LakeLayout(lake).lock) == other


def test_an_unreadable_lock_is_kept_and_named(tmp_path):
    lake = tmp_path / "lake"
    lake.mkdir()
    (lake / "_lock.json").write_text("not json")
    with pytest.raises(LakeLockedError, match="unreadable lock file"), lake_lock(lake, 0):
        pass
    assert (lake / "_lock.json").read_text() == "not json"


def test_a_lock_taken_over_meanwhile_is_not_removed_on_release(tmp_path):
    lake = tmp_path / "lake"
    with lake_lock(lake, 0):
        other = write_lock(lake, token="someone else's")
    assert read_holder(LakeLayout(lake).lock) == other


def test_the_wait_defaults_to_the_environment_then_600_seconds(monkeypatch):
    monkeypatch.delenv(LOCK_WAIT_ENV, raising=False)
    assert default_lock_wait() == DEFAULT_LOCK_WAIT == 600
    monkeypatch.setenv(LOCK_WAIT_ENV, "2.5")
    assert default_lock_wait() == 2.5
    for bad in ("soon", "-1", "nan"):
        monkeypatch.setenv(LOCK_WAIT_ENV, bad)
        with pytest.raises(ConfigError, match=f"{LOCK_WAIT_ENV} is '{bad}'"):
            default_lock_wait()


def test_two_processes_one_lake_the_second_refuses_or_waits_its_turn(tmp_path):
    lake = tmp_path / "lake"
    first = hold_lock(lake, 1.5)
    held_since = time.monotonic()
    refused = lock_process(lake, 0, 0)
    assert refused.wait(timeout=30) == 1
    err = refused.stderr.read()
    assert "the lake is locked by another run: " in err and f"pid {first.pid} " in err
    waiting = lock_process(lake, 30, 0)
    assert waiting.stdout.readline() == "held\n"  # only once the first let go
    assert time.monotonic() - held_since >= 1.4, "held while the first still held it"
    assert first.wait(timeout=30) == 0 and waiting.wait(timeout=30) == 0
    assert list(lake.iterdir()) == []


def test_a_killed_holder_does_not_block_the_next_run(tmp_path):
    lake = tmp_path / "lake"
    killed = hold_lock(lake, 60)
    killed.kill()
    killed.wait()
    assert read_holder(LakeLayout(lake).lock).pid == killed.pid
    with lake_lock(lake, 0):
        assert read_holder(LakeLayout(lake).lock).pid == os.getpid()


_RECORD = """
import sys, time
from ticdc_lake.lake.lock import lake_lock
with lake_lock(sys.argv[1], 60, poll=0.01):
    began = time.time()
    time.sleep(0.2)
    ended = time.time()
open(sys.argv[2], "w").write(f"{began} {ended}")
"""


def test_processes_racing_for_a_stale_lock_hold_it_one_at_a_time(tmp_path):
    lake = tmp_path / "lake"
    write_lock(lake, pid=dead_pid())
    runs = [
        subprocess.Popen([sys.executable, "-c", _RECORD, str(lake), str(tmp_path / f"{n}.txt")])
        for n in range(4)
    ]
    assert [run.wait(timeout=60) for run in runs] == [0] * 4
    spans = sorted(tuple(map(float, (tmp_path / f"{n}.txt").read_text().split())) for n in range(4))
    assert all(ended <= began for (_, ended), (began, _) in itertools.pairwise(spans))
    assert list(lake.iterdir()) == []
