"""The per-lake lock: taken atomically, waited for, refused with the holder named, a dead
holder's lock recovered and a live one's never touched; two real processes on one lake; whatever
is at the lock's path, the wait ends by its deadline, sleeping, in one message naming the file."""

from __future__ import annotations

import errno
import itertools
import json
import math
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
    LockFileError,
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
    with pytest.raises(LockFileError, match=r"_lock\.json is not JSON"), lake_lock(lake, 0):
        pass
    assert (lake / "_lock.json").read_text() == "not json"


# Waits argv[2] seconds for the lock of lake argv[1]; prints how that ended as JSON. In a process
# of its own, so that a wait that never ends is killed and fails the test instead of hanging it.
_WAIT = """
import json, sys, time
from ticdc_lake.lake.lock import lake_lock
began, cpu = time.monotonic(), time.process_time()
try:
    with lake_lock(sys.argv[1], float(sys.argv[2]), poll=0.05):
        error, message = None, ""
except Exception as exc:
    error, message = type(exc).__name__, str(exc)
print(json.dumps({"error": error, "message": message, "seconds": time.monotonic() - began,
                  "cpu": time.process_time() - cpu}))
"""


def wait_for_lock(lake: Path, wait: float) -> dict:
    """How a wait of ``wait`` seconds for the lake's lock ended, in a process of its own."""
    process = subprocess.Popen(
        [sys.executable, "-c", _WAIT, str(lake), str(wait)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = process.communicate(timeout=wait + 20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        pytest.fail(f"a wait of {wait} s for the lock had not ended after {wait + 20} s")
    assert process.returncode == 0, err
    return json.loads(out)


def _lock_fields(**fields) -> str:
    return json.dumps(
        {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "command": "c",
            "started": "2099-01-01T00:00:00+00:00",
            "token": "t",
            **fields,
        }
    )


def _make_fifo(path: Path) -> None:
    os.mkfifo(path)


# What may be found at the lock's path instead of a lock; what the message must say about it.
NOT_A_LOCK = {
    "dangling-symlink": (lambda p: p.symlink_to(p.with_name("nowhere")), "is a symbolic link"),
    "symlink-to-a-lock": (
        lambda p: (p.with_name("real").write_text(_lock_fields()), p.symlink_to("real")),
        "is a symbolic link (to 'real')",
    ),
    "directory": (Path.mkdir, "is a directory"),
    "named-pipe": (_make_fifo, "is a named pipe"),
    "not-json": (lambda p: p.write_text("{"), "is not JSON"),
    "json-list": (lambda p: p.write_text("[1]"), "holds a JSON list"),
    "not-utf8": (lambda p: p.write_bytes(b"\xff\xfe"), "is not UTF-8 text"),
    "too-big": (lambda p: p.write_text(" " * 100_000), "is over 64 KiB"),
    "pid-as-text": (lambda p: p.write_text(_lock_fields(pid="123")), "has pid '123'"),
    "pid-true": (lambda p: p.write_text(_lock_fields(pid=True)), "has pid True"),
    "pid-huge": (lambda p: p.write_text(_lock_fields(pid=2**70)), f"has pid {2**70}"),
    "started-a-number": (lambda p: p.write_text(_lock_fields(started=5)), "has started 5"),
    "started-not-a-time": (lambda p: p.write_text(_lock_fields(started="x")), "has started 'x'"),
    "a-field-missing": (
        lambda p: p.write_text(json.dumps({"host": "h"})),
        "does not hold a lock holder's fields (missing pid, command, started, token)",
    ),
}


@pytest.mark.parametrize("kind", NOT_A_LOCK)
def test_what_is_not_a_lock_ends_the_wait_by_its_deadline_naming_the_file(tmp_path, kind):
    """A dangling symlink spun at full CPU past --lock-wait; a directory and a pid written as
    text raised tracebacks; a pipe blocked the read. Each now waits its time, sleeping between
    tries, and ends in one message naming the file and what it is; nothing is removed."""
    lake = tmp_path / "lake"
    lake.mkdir()
    lock = lake / "_lock.json"
    make, what = NOT_A_LOCK[kind]
    make(lock)
    before = sorted(os.listdir(lake))
    ended = wait_for_lock(lake, 0.5)
    assert ended["error"] == "LockFileError", ended
    assert ended["message"].startswith(f"the lake's lock file {lock} {what}")
    assert "waited 0.5 s" in ended["message"] and "remove it" in ended["message"]
    assert 0.5 <= ended["seconds"] < 5 and ended["cpu"] < 0.25, ended
    assert sorted(os.listdir(lake)) == before and os.path.lexists(lock)


def test_a_stale_lock_a_killed_breaker_left_its_marker_on_ends_the_wait_naming_both(tmp_path):
    """The breaking branch looped past the deadline while another waiter's marker was there."""
    lake = tmp_path / "lake"
    stale = write_lock(lake, pid=dead_pid())
    marker = lake / f"_lock.json.{stale.token}.breaking"
    marker.touch()
    ended = wait_for_lock(lake, 0.5)
    assert ended["error"] == "LockFileError" and 0.5 <= ended["seconds"] < 5, ended
    assert str(lake / "_lock.json") in ended["message"] and str(marker) in ended["message"]
    assert f"pid {stale.pid} " in ended["message"]
    assert "a process of this host that is gone" in ended["message"]
    assert read_holder(LakeLayout(lake).lock) == stale and marker.exists()


def test_the_lock_started_when_it_was_taken_not_when_the_wait_began(tmp_path):
    lake = tmp_path / "lake"
    write_lock(lake, pid=os.getppid(), started="2099-01-02T03:04:05+00:00")
    began = time.time()
    threading.Timer(1.2, (lake / "_lock.json").unlink).start()
    with lake_lock(lake, 30, poll=0.05):
        started = datetime.fromisoformat(read_holder(LakeLayout(lake).lock).started)
    assert started.timestamp() >= math.floor(began + 1.2)


def _link_refused(source, target):
    raise OSError(errno.EPERM, "Operation not permitted", str(source), None, str(target))


def _write_cut_short(self, text):
    with open(self, "w") as file:
        file.write(text[:5])
    raise OSError(errno.ENOSPC, "No space left on device", str(self))


@pytest.mark.parametrize(
    "patch, why",
    [
        (("os.link", _link_refused), "Operation not permitted"),
        (("pathlib.Path.write_text", _write_cut_short), "No space left on device"),
        (None, "File exists"),  # the lake's folder is a file
    ],
    ids=["no-hard-links", "disk-full", "lake-is-a-file"],
)
def test_a_lock_that_cannot_be_created_says_why_and_leaves_no_temporary_file(
    tmp_path, monkeypatch, patch, why
):
    lake = tmp_path / "lake"
    if patch is None:
        lake.write_text("")
    else:
        lake.mkdir()
        monkeypatch.setattr(*patch)
    with pytest.raises(LockFileError) as raised, lake_lock(lake, 5):
        pytest.fail("took a lock that could not be created")
    monkeypatch.undo()
    assert str(raised.value).startswith(f"the lake's lock file {lake / '_lock.json'} cannot be")
    assert why in str(raised.value)
    assert not lake.is_dir() or list(lake.iterdir()) == []


def test_a_run_s_lock_wait_holds_for_a_dangling_symlink(tmp_path):
    """Through the command: exit 1 after --lock-wait, one line naming the file, no traceback."""
    config_path = tmp_path / "pipeline.yaml"
    config_path.write_text("topics: {t: {protocol: craft, partitions: 1}}\nlake: lake\n")
    (tmp_path / "lake").mkdir()
    (tmp_path / "lake" / "_lock.json").symlink_to("gone")
    argv = ["run", "--config", str(config_path), "--lock-wait", "0.5"]
    try:
        done = subprocess.run(
            [sys.executable, "-m", "ticdc_lake", *argv], capture_output=True, text=True, timeout=60
        )
    except subprocess.TimeoutExpired:  # run() killed it
        pytest.fail("ticdc-lake run --lock-wait 0.5 had not ended after 60 s")
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith(f"ticdc-lake: the lake's lock file {tmp_path / 'lake'}")
    assert "is a symbolic link" in done.stderr and "Traceback" not in done.stderr


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
