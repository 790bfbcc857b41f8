"""The session helpers: settings scoped to the jobs of one block; where a local session
listens (127.0.0.1 only, the web UI only when asked for)."""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import socket
import subprocess
import sys
import types
import urllib.request
from pathlib import Path

import psutil
import pytest
from ticdc_lake.app.cli import _parser, _session
from ticdc_lake.runtime.spark import (
    LISTING_PARALLELISM,
    LOCAL_IP_ENV,
    SNAPSHOT_PARTITIONS,
    job_settings,
    listener_settings,
    quiet_py4j,
)
from ticdc_lake.runtime.spark_daemon import compiled_first

SPLITS = "spark.sql.files.minPartitionNum"
SPLIT_BYTES = "spark.sql.files.maxPartitionBytes"


def test_job_settings_hold_inside_the_block_and_are_as_before_after_it(spark):
    spark.conf.set(SPLIT_BYTES, "64m")
    try:
        with job_settings(spark, {SPLITS: "8", SPLIT_BYTES: "16m"}):
            assert (spark.conf.get(SPLITS), spark.conf.get(SPLIT_BYTES)) == ("8", "16m")
        assert spark.conf.get(SPLITS, None) is None  # not set before: not set after
        assert spark.conf.get(SPLIT_BYTES) == "64m"

        with pytest.raises(RuntimeError), job_settings(spark, {SPLITS: "3"}):
            raise RuntimeError("a failing job")
        assert spark.conf.get(SPLITS, None) is None
    finally:
        spark.conf.unset(SPLIT_BYTES)


def test_python_workers_are_handed_arrow_batches_of_about_8_mb(spark):
    """Not 10,000 rows whatever their size (build_session's maxBytesPerBatch)."""
    from pyspark.sql import functions as F

    def rows_per_batch(batches):
        import pyarrow as pa

        for batch in batches:
            yield pa.record_batch([pa.array([batch.num_rows], pa.int64())], names=["rows"])

    megabyte_rows = spark.range(0, 40, 1, 1).select(F.repeat(F.lit("x"), 1 << 20).alias("s"))
    found = [row.rows for row in megabyte_rows.mapInArrow(rows_per_batch, "rows long").collect()]
    assert sum(found) == 40
    assert max(found) <= 9


def _spark_home(root, name="site"):
    """A site directory holding pyspark and, as pip installs it, the zips Spark ships."""
    site = root / name
    (site / "pyspark" / "python" / "lib").mkdir(parents=True)
    (site / "pyspark" / "__init__.py").write_text("")
    lib = site / "pyspark" / "python" / "lib"
    return str(site), str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip")


def test_the_daemon_puts_the_installed_pyspark_where_spark_put_its_zip(tmp_path):
    site, pyspark_zip, py4j_zip = _spark_home(tmp_path)
    shipped = str(tmp_path / "userFiles")  # --py-files: still ahead of pyspark
    path = ["/cwd", shipped, pyspark_zip, py4j_zip, "/jar", "/stdlib", site]
    assert compiled_first(path) == ["/cwd", shipped, site, "/jar", "/stdlib", pyspark_zip, py4j_zip]


def test_the_daemon_leaves_the_zips_of_a_spark_installation_first(tmp_path):
    """$SPARK_HOME/python/lib/pyspark.zip is no copy of an installed package: its version may
    differ from a pyspark the site directory happens to hold."""
    lib = tmp_path / "opt" / "spark" / "python" / "lib"
    lib.mkdir(parents=True)
    site, _, _ = _spark_home(tmp_path)
    path = ["/cwd", str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip"), site]
    assert compiled_first(path) == path
    assert compiled_first(["/cwd", site]) == ["/cwd", site]  # no zip at all


def test_local_workers_import_pyspark_compiled_not_from_the_zip(spark):
    def where(_rows):
        import pyspark

        yield pyspark.__file__

    (found,) = spark.sparkContext.parallelize([0], 1).mapPartitions(where).collect()
    assert ".zip" not in found and found.endswith("__init__.py")


def _huge_pages_enabled() -> str:
    """This process's ``THP_enabled`` (Linux 5.0 and later): 0 once prctl turned them off."""
    with open("/proc/self/status") as status:
        return next(line.split()[1] for line in status if line.startswith("THP_enabled:"))


STATUS = Path("/proc/self/status")
needs_thp_status = pytest.mark.skipif(
    not STATUS.exists() or "THP_enabled:" not in STATUS.read_text(),
    reason="the kernel reports no THP_enabled (Linux before 5.0, or not Linux)",
)


@needs_thp_status
def test_the_driver_and_local_workers_run_without_transparent_huge_pages(spark):
    def enabled(_rows):
        yield _huge_pages_enabled()

    assert _huge_pages_enabled() == "0"  # the session was built in this process
    workers = spark.sparkContext.parallelize([0, 1], 2).mapPartitions(enabled).collect()
    assert workers == ["0", "0"]


def _printed_by_fresh_python(script: str) -> str:
    fresh = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert fresh.returncode == 0, fresh.stderr
    return fresh.stdout.strip()


@needs_thp_status
def test_disabling_huge_pages_holds_for_the_children_of_the_process():
    script = (
        "import subprocess, sys; from ticdc_lake.runtime.huge_pages import disable_huge_pages; "
        "assert disable_huge_pages(); "
        "print(subprocess.run(['grep', 'THP_enabled', '/proc/self/status'], "
        "capture_output=True, text=True).stdout.split()[1])"
    )
    assert _printed_by_fresh_python(script) == "0"


@needs_thp_status
def test_a_stage_process_without_spark_runs_without_huge_pages_too():
    """Jobs and commands hand their stage a LazySession: compaction may never build it."""
    script = (
        "from ticdc_lake.runtime.spark import LazySession; "
        "LazySession(lambda: None); "
        "print(open('/proc/self/status').read().split('THP_enabled:')[1].split()[0])"
    )
    assert _printed_by_fresh_python(script) == "0"


# --- where a local session listens --------------------------------------------------------------


def _is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%")[0])
    mapped = getattr(ip, "ipv4_mapped", None)  # ::ffff:127.0.0.1, as a JVM's dual-stack socket
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


def outside_address() -> str | None:
    """An address of this machine other than loopback: where another host would connect."""
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family == socket.AF_INET and not _is_loopback(address.address):
                return address.address
    return None


def listening(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket process ``pid`` listens on."""
    return [
        (connection.laddr.ip, connection.laddr.port)
        for connection in psutil.Process(pid).net_connections(kind="inet")
        if connection.status == psutil.CONN_LISTEN
    ]


def refused_from_outside(port: int) -> bool:
    """Whether a connection to ``port`` at this machine's outside address is refused."""
    outside = outside_address()
    if outside is None:  # no other interface: nothing to reach from elsewhere
        return True
    try:
        socket.create_connection((outside, port), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


def test_a_local_session_listens_on_loopback_without_the_ui_unless_asked_a_cluster_s_is_its_own():
    loopback = {"spark.driver.bindAddress": "127.0.0.1", "spark.driver.host": "127.0.0.1"}
    assert listener_settings("local[*]", {}, ui=False) == loopback | {"spark.ui.enabled": "false"}
    assert listener_settings("local[2]", {}, ui=True) == loopback | {"spark.ui.enabled": "true"}
    # What spark-submit was given wins: a local run can be opened on purpose.
    opened = {"spark.driver.bindAddress": "0.0.0.0", "spark.ui.enabled": "true"}
    assert listener_settings("local[*]", opened, ui=False) == {"spark.driver.host": "127.0.0.1"}
    for master in ("spark://10.0.0.5:7077", "yarn", "k8s://https://10.0.0.1:6443"):
        assert listener_settings(master, {}, ui=False) == {}, master


def test_the_commands_build_their_session_with_the_ui_only_when_asked(monkeypatch):
    built = []

    def build_session(name, **options):
        built.append(options)
        return types.SimpleNamespace(version="4")

    monkeypatch.setattr("ticdc_lake.runtime.spark.build_session", build_session)
    for argv in (["run", "--config", "c"], ["demo"], ["run", "--config", "c", "--spark-ui"]):
        args = _parser().parse_args(argv)
        args.spark = None
        assert _session(args, "ticdc-lake-test").version == "4"
    assert built == [{"ui": False}, {"ui": False}, {"ui": True}]


def test_the_session_s_driver_listens_on_loopback_only(spark):
    """Its RPC and block-manager ports bound the machine's outside address."""
    found = listening(spark.sparkContext._gateway.proc.pid)
    assert found and all(_is_loopback(address) for address, _ in found), found
    assert all(refused_from_outside(port) for _, port in found)


# Builds a local session with the web UI asked for; says where it is; stops when told to.
_WITH_UI = """
import json, sys
from ticdc_lake.runtime.spark import build_session
spark = build_session("ticdc-lake-ui-test", master="local[1]", ui=True)
info = {"jvm": spark.sparkContext._gateway.proc.pid, "ui": spark.sparkContext.uiWebUrl}
print(json.dumps(info), flush=True)
sys.stdin.readline()
spark.stop()
"""


@pytest.mark.spark  # a session of its own, in a child process
@pytest.mark.slow
def test_a_spark_ui_asked_for_answers_on_loopback_and_nowhere_else():
    """The UI answered 200 from another address: it listened on every interface."""
    env = {k: v for k, v in os.environ.items() if k != LOCAL_IP_ENV}
    child = subprocess.Popen(
        [sys.executable, "-c", _WITH_UI],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        line = child.stdout.readline()
        assert line, "the session did not start"
        info = json.loads(line)
        ui_port = int(info["ui"].rsplit(":", 1)[1])
        assert info["ui"].startswith("http://127.0.0.1:")
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/jobs/", timeout=30) as page:
            assert page.status == 200
        found = listening(info["jvm"])
        assert ui_port in {port for _, port in found}
        assert all(_is_loopback(address) for address, _ in found), found
        assert all(refused_from_outside(port) for _, port in found)
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.wait(timeout=60) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_a_local_session_rebuilds_delta_state_and_lists_files_in_a_task_per_core(spark):
    # Delta's default of 50 tasks per log replay cost seconds per small write on two cores,
    # and its VACUUM's 10,000 listing tasks 25 s for a table of three files.
    assert spark.conf.get(SNAPSHOT_PARTITIONS) == str(os.cpu_count())
    assert spark.conf.get(LISTING_PARALLELISM) == str(os.cpu_count())


def test_py4j_logs_nothing_below_warning_whatever_the_root_level():
    """At DEBUG py4j logs every command, pickled settings and their secrets with them; at INFO
    its finalizers log into closed streams at exit."""
    root, py4j = logging.getLogger(), logging.getLogger("py4j")
    levels = (root.level, py4j.level)
    root.setLevel(logging.DEBUG)
    py4j.setLevel(logging.NOTSET)
    try:
        quiet_py4j()
        assert not logging.getLogger("py4j.clientserver").isEnabledFor(logging.INFO)
        assert logging.getLogger("py4j.clientserver").isEnabledFor(logging.WARNING)
    finally:
        root.setLevel(levels[0])
        py4j.setLevel(levels[1])
