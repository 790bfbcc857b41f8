"""SIGKILL of the real spark-submit jobs in the middle of their writes, then a rerun.

The killed lake starts as a copy of the reference lake after round one
(tests/e2e/test_idempotency.py), so both have the same history; round two's exports are in the
landing area they share. Round two then runs as spark-submit jobs: land, decode and compact are
each launched, killed once their write is in flight, and launched again to completion
(watermark, between them, runs in process). A job is killed when a data file appears under the
tables it writes (bronze, silver, gold and state) that was not there before, which is before the
commit that would reference it: its process group is sent SIGKILL together with the group
PySpark's daemon puts its Python workers in, so no process of the job is left to finish or tidy
anything. Each kill records where it landed:

- ``in-flight``: files of an uncommitted write are on disk (the window aimed at);
- ``between-commits``: the write had committed, a later commit of the stage had not started;
- ``finished``: the job ended before a new file was seen.

Land's bronze and decode's silver writes stay in flight for seconds (Spark tasks writing), so
their kills land in flight; compact's merges are delta-rs commits of small files on the driver,
in flight for milliseconds, so its kill lands in flight or between commits.

Whatever the phase, a reader right after the kill must see only whole commits, each equal to the
reference lake's table at the same Delta version, and the rerun must leave the lake equal to the
reference: same versions, schemas and rows. Files of a killed write must be referenced by no
commit, and ``vacuum`` must remove them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from deltalake import DeltaTable
from ticdc_lake.config import load_config
from ticdc_lake.delta import read_delta
from ticdc_lake.orchestration import delta_conf
from ticdc_lake.silver.watermark import watermark

from tests.e2e.test_idempotency import (
    TableState,
    assert_same_tables,
    read_lake,
    read_table,
    reference_lake,
    stage_of,
    versions,
    write_lake_config,
)
from tests.spark_fixtures import TEST_CONF

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
KILLED_STAGES = ("land", "decode", "compact")
WATCHED = {"land": ("bronze",), "decode": ("silver",), "compact": ("gold", "state")}
POLL_SECONDS = 0.005
JOB_TIMEOUT_SECONDS = 900


# --- files and processes ----------------------------------------------------------------------


def data_files(directories: list[Path]) -> set[Path]:
    """Every Parquet data file under ``directories`` (Delta logs and hidden files aside)."""
    found = set()
    for directory in directories:
        for parent, subdirectories, names in os.walk(directory):
            subdirectories[:] = [d for d in subdirectories if not d.startswith(("_", "."))]
            found.update(Path(parent, n) for n in names if n.endswith(".parquet"))
    return found


def committed_files(lake: Path) -> set[Path]:
    """Every data file any commit of any table of ``lake`` ever added."""
    added = set()
    for log in lake.glob("**/_delta_log"):
        for commit in log.glob("*.json"):
            for line in commit.read_text().splitlines():
                action = json.loads(line)
                if "add" in action:
                    added.add(log.parent / urllib.parse.unquote(action["add"]["path"]))
    return added


def unreferenced_files(lake: Path) -> set[Path]:
    return data_files([lake]) - committed_files(lake)


def table_of(path: Path, lake: Path) -> str | None:
    """The table (relative to ``lake``) a data file lies in; None if its table has no log yet."""
    for parent in path.parents:
        if (parent / "_delta_log").is_dir():
            return str(parent.relative_to(lake))
        if parent == lake:
            return None
    return None


def _processes() -> dict[int, tuple[int, int, str]]:
    """pid → (parent pid, process group, state) of every process, from /proc."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:  # ended meanwhile
                continue
            state, parent, group = stat[stat.rindex(")") + 2 :].split()[:3]
            found[int(entry.name)] = (int(parent), int(group), state)
    return found


def job_process_groups(pid: int) -> set[int]:
    """The process groups of ``pid`` and its descendants: PySpark's daemon starts its own group
    for the Python workers, which a kill of spark-submit's group alone would leave running."""
    processes = _processes()
    members, groups = {pid}, {pid}
    while children := {p for p, (parent, *_) in processes.items() if parent in members} - members:
        members |= children
        groups |= {processes[p][1] for p in children}
    return groups


def kill_job(process: subprocess.Popen) -> None:
    """SIGKILL a spark-submit job, every process of it, and wait until all are gone, so nothing
    writes any more while the lake is read. Its group (the JVM, the Python driver) is stopped
    first: frozen, it commits nothing more while its process tree is read to find the Python
    workers' group, which takes some milliseconds."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGSTOP)
    groups = job_process_groups(process.pid)
    for group in groups:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
    process.wait()
    deadline = time.monotonic() + 60
    while any(g in groups and s not in "ZX" for _, g, s in _processes().values()):
        assert time.monotonic() < deadline, f"processes of groups {groups} survived SIGKILL"
        time.sleep(0.05)


# --- spark-submit -----------------------------------------------------------------------------


@dataclass
class Job:
    stage: str
    config: Path
    logs: Path

    def command(self) -> list[str]:
        conf = TEST_CONF | delta_conf(sys.executable)  # Delta's jars, as the DAGs give them
        settings = [arg for key, value in conf.items() for arg in ("--conf", f"{key}={value}")]
        return [
            str(Path(sys.executable).parent / "spark-submit"),
            "--master", "local[2]", *settings,
            str(REPO / "spark_jobs" / f"{self.stage}.py"), "--config", str(self.config),
        ]  # fmt: skip

    def start(self, attempt: str) -> subprocess.Popen:
        environment = os.environ | {
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
        }
        with (
            open(self.logs / f"{self.stage}-{attempt}.out", "wb") as stdout,
            open(self.logs / f"{self.stage}-{attempt}.err", "wb") as stderr,
        ):
            return subprocess.Popen(
                self.command(), stdout=stdout, stderr=stderr, env=environment,
                start_new_session=True,  # its own process group
            )  # fmt: skip

    def tail(self, attempt: str) -> str:
        text = (self.logs / f"{self.stage}-{attempt}.err").read_text(errors="replace")
        return "\n".join(text.splitlines()[-40:])

    def run(self) -> tuple[dict, float]:
        """Run to completion: the stage's result (the JSON the job prints) and wall time."""
        started = time.monotonic()
        process = self.start("rerun")
        try:
            code = process.wait(JOB_TIMEOUT_SECONDS)
        finally:
            if process.poll() is None:
                kill_job(process)
        assert code == 0, f"spark-submit {self.stage} exited {code}:\n{self.tail('rerun')}"
        output = (self.logs / f"{self.stage}-rerun.out").read_text().strip().splitlines()
        return json.loads(output[-1]), time.monotonic() - started

    def kill_mid_write(self, watched: list[Path]) -> tuple[str, float]:
        """Launch, SIGKILL the job once a new data file appears under ``watched``; the phase the
        kill landed in is worked out by the caller from the lake. Returns (how the job ended,
        seconds from launch to the kill)."""
        existing = data_files(watched)
        started = time.monotonic()
        process = self.start("killed")
        try:
            while process.poll() is None:
                if data_files(watched) - existing:
                    kill_job(process)
                    return "killed", time.monotonic() - started
                assert time.monotonic() - started < JOB_TIMEOUT_SECONDS, "the job hung"
                time.sleep(POLL_SECONDS)
        finally:
            if process.poll() is None:
                kill_job(process)
        assert process.returncode == 0, f"{self.stage} failed:\n{self.tail('killed')}"
        return "finished", time.monotonic() - started


# --- the killed lake --------------------------------------------------------------------------


@dataclass
class Kill:
    """One stage's job killed and rerun, and what the lake held at each point."""

    stage: str
    phase: str  # in-flight | between-commits | finished
    seconds_to_kill: float
    before: dict[str, TableState]
    after_kill: dict[str, TableState]
    leftovers: set[Path]  # files of the killed write no commit references
    spark_counts: dict[str, int]  # rows Spark read right after the kill, per table with leftovers
    rerun: dict[str, TableState]
    rerun_result: dict
    rerun_seconds: float


@dataclass
class KilledLake:
    lake: Path
    reference: Path  # the reference lake, after both rounds
    kills: dict[str, Kill]

    def reference_at(self, name: str, version: int) -> TableState:
        return read_table(self.reference, name, version)


def kill_and_rerun(spark, lake: Path, job: Job, copied_from: Path) -> Kill:
    def read_lake_now() -> dict[str, TableState]:
        return read_lake(lake, copied_from=copied_from)

    before = read_lake_now()
    unreferenced = unreferenced_files(lake)
    ended, seconds = job.kill_mid_write([lake / d for d in WATCHED[job.stage]])
    after_kill = read_lake_now()
    leftovers = unreferenced_files(lake) - unreferenced
    spark_counts = {
        name: read_delta(spark, lake / name).count()
        for name in {table_of(path, lake) for path in leftovers} - {None}
    }
    if ended == "finished":
        phase = "finished"
    elif leftovers:
        phase = "in-flight"
    else:
        phase = "between-commits"
    result, rerun_seconds = job.run()
    return Kill(
        job.stage, phase, seconds, before, after_kill, leftovers, spark_counts, read_lake_now(),
        result, rerun_seconds,
    )  # fmt: skip


@pytest.fixture(scope="module")
def killed(spark, tmp_path_factory) -> KilledLake:
    reference = reference_lake(spark, tmp_path_factory)
    directory = tmp_path_factory.mktemp("killed")
    config_path = write_lake_config(directory, reference.output, reference.landing)
    config = load_config(config_path)
    shutil.copytree(reference.after_round_one, config.lake)
    logs = directory / "logs"
    logs.mkdir()
    kills = {}
    for stage in KILLED_STAGES:
        if stage == "compact":
            watermark(spark, config)
        kills[stage] = kill_and_rerun(
            spark, config.lake, Job(stage, config_path, logs), reference.config.lake
        )
    return KilledLake(config.lake, reference.config.lake, kills)


# --- tests ------------------------------------------------------------------------------------


@pytest.mark.parametrize("stage", KILLED_STAGES)
def test_right_after_the_kill_a_reader_sees_only_whole_commits(killed, stage, record_property):
    kill = killed.kills[stage]
    record_property("kill_phase", kill.phase)
    record_property("seconds_to_kill", round(kill.seconds_to_kill, 1))
    print(f"{stage}: killed after {kill.seconds_to_kill:.1f} s, {kill.phase}")
    assert set(kill.after_kill) >= set(kill.before)
    for name, state in kill.after_kill.items():
        if name in kill.before and state.version == kill.before[name].version:
            # Untouched, or written to without a commit: the previous version exactly.
            assert state == kill.before[name], name
        else:
            # Committed by the killed job before it died: a whole commit, the clean run's.
            assert stage_of(name) == stage, name
            assert state == killed.reference_at(name, state.version), name
    if kill.phase == "in-flight":
        # The write the kill interrupted: its files are on disk, its table does not show them.
        for path in kill.leftovers:
            name = table_of(path, killed.lake)
            if name is None:  # the write would have created its table: there is none to read
                continue
            assert stage_of(name) == stage, name
            assert kill.after_kill[name].version == kill.before[name].version, name
        # Spark reads the same previous rows as plain deltalake.
        for name, count in kill.spark_counts.items():
            assert count == len(kill.before[name].rows), name


@pytest.mark.parametrize("stage", KILLED_STAGES)
def test_the_rerun_finishes_the_stage_as_a_clean_run_would(killed, stage):
    kill = killed.kills[stage]
    print(f"{stage}: rerun took {kill.rerun_seconds:.1f} s")
    own = {name for name in kill.rerun if stage_of(name) == stage}
    assert own == {name for name in read_lake(killed.reference) if stage_of(name) == stage}
    for name, state in kill.rerun.items():
        # Every table equals the reference at its version; the stage's own are at their final
        # version: no commit was lost or made twice.
        assert state == killed.reference_at(name, state.version), name
        if stage_of(name) == stage:
            assert state.version == DeltaTable(str(killed.reference / name)).version(), name
    # The rerun adopted none of the killed write's files.
    assert not kill.leftovers & committed_files(killed.lake)


def test_after_every_kill_and_rerun_the_lake_equals_the_clean_run(killed):
    final = killed.kills[KILLED_STAGES[-1]].rerun
    expected = read_lake(killed.reference)
    assert versions(final) == versions(expected)
    assert_same_tables(final, expected)


def test_vacuum_removes_the_files_killed_writes_left(killed):
    leftovers = {path for kill in killed.kills.values() for path in kill.leftovers}
    if not leftovers:
        phases = {stage: kill.phase for stage, kill in killed.kills.items()}
        pytest.skip(f"no kill landed while a write was in flight: {phases}")
    for name in {table_of(path, killed.lake) for path in leftovers}:
        assert name is not None, "a killed write's files lie where no table is"
        table = killed.lake / name
        removed = DeltaTable(str(table)).vacuum(
            retention_hours=0, enforce_retention_duration=False, dry_run=False, full=True
        )
        mine = {path for path in leftovers if table_of(path, killed.lake) == name}
        assert mine <= {table / urllib.parse.unquote(f) for f in removed}, name
    assert not leftovers & data_files([killed.lake])
    # Vacuum commits (VACUUM START/END) but changes no table's schema or rows.
    lake = read_lake(killed.lake, copied_from=killed.reference)
    assert_same_tables(
        {name: replace(state, version=0) for name, state in lake.items()},
        {name: replace(state, version=0) for name, state in read_lake(killed.reference).items()},
    )
