"""The session helpers: settings scoped to the jobs of one block."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from ticdc_lake.spark import job_settings
from ticdc_lake.spark_daemon import compiled_first

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
        "import subprocess, sys; from ticdc_lake.huge_pages import disable_huge_pages; "
        "assert disable_huge_pages(); "
        "print(subprocess.run(['grep', 'THP_enabled', '/proc/self/status'], "
        "capture_output=True, text=True).stdout.split()[1])"
    )
    assert _printed_by_fresh_python(script) == "0"


@needs_thp_status
def test_a_stage_process_without_spark_runs_without_huge_pages_too():
    """Jobs and commands hand their stage a LazySession: compaction may never build it."""
    script = (
        "from ticdc_lake.spark import LazySession; "
        "LazySession(lambda: None); "
        "print(open('/proc/self/status').read().split('THP_enabled:')[1].split()[0])"
    )
    assert _printed_by_fresh_python(script) == "0"
