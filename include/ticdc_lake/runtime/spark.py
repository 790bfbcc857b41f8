"""Building the SparkSession every stage runs on.

The session is created once by a job's ``main()`` (or a test fixture) and passed in; nothing in
the library creates or looks up a global session.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

from ticdc_lake.orchestration import (
    DELTA_ARTIFACTS,
    DELTA_SESSION_CONF,
    SPARK_ARTIFACTS,
    delta_jars,
    driver_java_options,
)
from ticdc_lake.runtime.huge_pages import disable_huge_pages
from ticdc_lake.runtime.jars import MissingJarsError, jars_folder

# What an Arrow batch handed to the Python workers holds at most: Spark's to land's tasks,
# decode's own reads of bronze (bronze_splits). At 10,000 rows, 60 MB of realistic records, the
# workers' allocator gave each batch's memory back to the system and faulted it in again for
# the next: a decode worker spent 0.7 s of its 6.4 s in the kernel, 0.2-0.3 s at 6-15 MB (the
# stage: 6.3-6.4 against 6.0-6.1 s); land's Python workers 0.1-0.3 s less.
ARROW_BATCH_BYTES = 8 * 1024 * 1024

# Settings for a laptop or a 2-core CI runner; a cluster's spark-submit overrides any of them.
DEFAULT_CONF: dict[str, str] = {
    # Timestamps are instants: Spark must neither shift them by the machine's zone when it
    # converts to Arrow nor when it parses or prints them.
    "spark.sql.session.timeZone": "UTC",
    # The default 200 shuffle partitions means 200 tiny tasks per shuffle on a small machine.
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # Python data sources and mapInArrow start Python workers: reuse them across tasks.
    "spark.python.worker.reuse": "true",
    # Land's tasks were handed 10,000 rows whatever their size (see ARROW_BATCH_BYTES).
    "spark.sql.execution.arrow.maxBytesPerBatch": str(ARROW_BATCH_BYTES),
    # Parquet written by pyarrow/delta-rs carries no Spark rebase metadata: dates and
    # timestamps before 1582 are proleptic Gregorian already and must be read as they are.
    "spark.sql.parquet.datetimeRebaseModeInRead": "CORRECTED",
    "spark.sql.parquet.int96RebaseModeInRead": "CORRECTED",
    "spark.sql.parquet.datetimeRebaseModeInWrite": "CORRECTED",
    "spark.sql.parquet.int96RebaseModeInWrite": "CORRECTED",
    "spark.ui.showConsoleProgress": "false",
    # read_delta and land hand Spark lists of files; past this many paths Spark stats them in
    # a job of a task per path, which costs more than it saves on a local file system (land's
    # 2,000 export files: 8-9 s, against 0.5 s on the driver): never.
    "spark.sql.sources.parallelPartitionDiscovery.threshold": "2147483647",
}


# Where the driver listens when Spark runs on this machine alone (a local[...] master): nothing
# but this machine need reach it. spark-submit's settings and ``conf`` win over these, so a
# local run can still open them (--conf spark.driver.bindAddress=0.0.0.0); on a cluster
# (spark://, yarn, k8s://) the driver must be reachable from the executors' hosts, and where it
# listens is the cluster's to configure (docs/security.md, "Listeners").
LOCAL_LISTENERS: dict[str, str] = {
    # The driver's RPC and block-manager ports bind this address; by default it is the
    # machine's name resolved, or its first non-loopback address when the name resolves to
    # loopback: an address anyone on the network can connect to.
    "spark.driver.bindAddress": "127.0.0.1",
    # Where the driver tells its executors (threads of this process) to call it.
    "spark.driver.host": "127.0.0.1",
    # The web UI has no login and listens on every interface (0.0.0.0, whatever the driver's
    # address): off unless asked for (``ui``: ticdc-lake run --spark-ui), then on LOCAL_IP_ENV.
    "spark.ui.enabled": "false",
}
UI_KEY = "spark.ui.enabled"
# The address Spark's web UI binds is read from this variable when the JVM starts (no setting
# says it): 127.0.0.1 for a local session's UI unless the environment says otherwise.
LOCAL_IP_ENV = "SPARK_LOCAL_IP"

DRIVER_JAVA_OPTIONS_KEY = "spark.driver.extraJavaOptions"

# The module Spark starts its Python task workers' daemon from (see ``spark_daemon``).
DAEMON_MODULE = "spark.python.daemon.module"

# What the pipeline's Python workers import: its Arrow functions run there (xxhash: land's
# pass hashes the records it reads; a project installed without its dependencies lacks it).
WORKER_MODULES = ("pyarrow", "deltalake", "xxhash", "ticdc_lake")


# How many pieces, at least, Spark's file scans cut their files into.
MIN_SPLITS = "spark.sql.files.minPartitionNum"
SNAPSHOT_PARTITIONS = "spark.databricks.delta.snapshotPartitions"
LISTING_PARALLELISM = "spark.sql.sources.parallelPartitionDiscovery.parallelism"


def min_splits(spark: SparkSession, splits: int) -> dict[str, str]:
    """``job_settings`` for scans cut into ``splits`` pieces at least, unless the session
    says how many already (a cluster's own choice)."""
    return {} if spark.conf.get(MIN_SPLITS, None) is not None else {MIN_SPLITS: str(splits)}


@contextlib.contextmanager
def job_settings(spark: SparkSession, settings: Mapping[str, str]) -> Iterator[None]:
    """``settings`` for the jobs Spark plans inside the block; each setting is as it was
    before (set, or not set at all) after it."""
    before = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def _submitted_conf() -> SparkConf:
    """The settings spark-submit started this driver with (empty when Python starts Spark)."""
    if "PYSPARK_GATEWAY_PORT" in os.environ:
        # spark-submit launched the JVM first: connect to it, and SparkConf reads its settings.
        SparkContext._ensure_initialized()
    return SparkConf()


def listener_settings(master: str, submitted: Mapping[str, str], *, ui: bool) -> dict[str, str]:
    """Where the driver listens: for a local master, LOCAL_LISTENERS less what spark-submit
    set (``submitted``), the UI on when ``ui`` asks for it; on a cluster, nothing of ours."""
    if not master.startswith("local"):
        return {}
    settings = {k: v for k, v in LOCAL_LISTENERS.items() if k not in submitted}
    if ui:
        settings[UI_KEY] = "true"
    return settings


def delta_settings(submitted: Mapping[str, str]) -> dict[str, str]:
    """Delta Lake in the session: this environment's jars (``make setup`` fetched them) unless
    spark-submit brought Delta itself (``--packages`` or ``--jars``), and Delta's SQL extension
    and catalog unless spark-submit set them. MissingJarsError when there are none at all."""
    settings = {k: v for k, v in DELTA_SESSION_CONF.items() if k not in submitted}
    brought = " ".join(submitted.get(k, "") for k in ("spark.jars", "spark.jars.packages"))
    if "delta-spark" in brought:
        return settings
    jars = delta_jars(sys.executable)
    if len(jars) < len(SPARK_ARTIFACTS):
        raise MissingJarsError(
            f"Spark's jars (Delta Lake, Kafka) are not all in {jars_folder()}: run "
            "`python -m ticdc_lake.runtime.jars` (make setup does), or give spark-submit "
            f"--packages {','.join(DELTA_ARTIFACTS)}"
        )
    if "PYSPARK_GATEWAY_PORT" in os.environ:
        # spark-submit started the driver's JVM: jars named now would reach the executors only.
        raise MissingJarsError(
            f"spark-submit was given no Delta Lake jars: add --jars {','.join(map(str, jars))} "
            f"(or --packages {','.join(DELTA_ARTIFACTS)})"
        )
    jars_given = submitted.get("spark.jars")
    settings["spark.jars"] = ",".join([*([jars_given] if jars_given else []), *map(str, jars)])
    return settings


def quiet_py4j() -> None:
    """py4j logs every command it sends at DEBUG, pickled functions and all: a decode task
    carries the topics' settings, registry credentials included, to the executors. So its
    logger stays at WARNING or above whatever the root logger's level (secrets never reach
    logs). Not INFO: at exit its connections' finalizers log at INFO into streams already
    closed, and Python prints a "Logging error" traceback for each."""
    py4j = logging.getLogger("py4j")
    if py4j.getEffectiveLevel() < logging.WARNING:
        py4j.setLevel(logging.WARNING)


def build_session(
    app_name: str = "ticdc-lake",
    *,
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    ui: bool = False,
) -> SparkSession:
    """A SparkSession for the pipeline. (This module imports nothing of the lake's but the
    standard-library-only orchestration module's JVM options and ``huge_pages``.)

    ``master`` defaults to ``local[*]`` unless spark-submit already chose one. Local workers run
    this interpreter (``PYSPARK_PYTHON``): the pipeline's Arrow functions import pyarrow,
    deltalake and this package on the workers, which a system Python lacks. A local session
    listens on 127.0.0.1 only, without the web UI unless ``ui`` (``listener_settings``). On a
    cluster the executors' Python is checked once (``check_executor_python``).
    """
    quiet_py4j()
    # Settings spark-submit was given (--conf, spark-defaults.conf) win over these defaults;
    # ``conf`` wins over both.
    submitted = _submitted_conf()
    if master is None:
        master = submitted.get("spark.master", "local[*]")
    settings = session_settings(master, submitted, conf, ui=ui)
    if master.startswith("local") and settings.get(UI_KEY) == "true":
        # Read by the JVM this process starts (a JVM spark-submit started has read it: there
        # the caller's environment decides).
        os.environ.setdefault(LOCAL_IP_ENV, "127.0.0.1")

    builder = SparkSession.builder.appName(app_name).master(master)
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    # The driver's own arrays (compaction reduces on it) without huge pages. A JVM this
    # process starts after a LazySession did this inherits it: it asks for none itself unless
    # told to (-XX:+UseTransparentHugePages, which slowed the floor's job).
    disable_huge_pages()
    if not master.startswith("local"):
        check_executor_python(session)
    return session


def session_settings(
    master: str, submitted: SparkConf, conf: Mapping[str, str] | None, *, ui: bool
) -> dict[str, str]:
    """The session's settings: ours less what spark-submit set (``submitted``), then ``conf``."""
    settings = {k: v for k, v in DEFAULT_CONF.items() if not submitted.contains(k)}
    # Why these, in orchestration.py (the DAGs give spark-submit the same). Only when Python
    # starts the JVM; spark-submit has started it already.
    java_options = driver_java_options(os.environ, sys.executable)
    if java_options and not submitted.contains(DRIVER_JAVA_OPTIONS_KEY):
        settings[DRIVER_JAVA_OPTIONS_KEY] = java_options
    settings.update(listener_settings(master, dict(submitted.getAll()), ui=ui))
    settings.update(delta_settings(dict(submitted.getAll())))
    if master.startswith("local"):
        settings.update(local_worker_settings(submitted))
    settings.update(conf or {})
    return settings


def local_worker_settings(submitted: SparkConf) -> dict[str, str]:
    """For a local master: the workers' Python, and task counts for a machine's few cores.
    Sets ``PYSPARK_PYTHON`` unless the environment has it."""
    settings: dict[str, str] = {}
    # Local workers are forked from this machine: run them on this interpreter. (On a
    # cluster the executors' Python is the cluster's to configure.) Both the variable,
    # read by the worker launcher, and the conf, which wins over it.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings["spark.pyspark.python"] = os.environ["PYSPARK_PYTHON"]
    if os.environ["PYSPARK_PYTHON"] == sys.executable and not submitted.contains(DAEMON_MODULE):
        # This interpreter has the package, so its daemon imports pyspark compiled.
        settings[DAEMON_MODULE] = "ticdc_lake.runtime.spark_daemon"
    if not submitted.contains(SNAPSHOT_PARTITIONS):
        # Delta on Spark rebuilds a table's state from its log in this many tasks before it
        # reads or writes the table; its default, 50, made each small write 4.7-5.9 s on two
        # busy cores where 1 made it 0.7-1.4 s. One task per local core.
        settings[SNAPSHOT_PARTITIONS] = str(os.cpu_count() or 1)
    if not submitted.contains(LISTING_PARALLELISM):
        # Delta's VACUUM lists a table's files in this many tasks; the default, 10,000,
        # made a VACUUM of a three-file table take 25 s on two cores, 2.7 s with 2.
        settings[LISTING_PARALLELISM] = str(os.cpu_count() or 1)
    return settings


class LazySession:
    """A SparkSession built when a stage first uses it, so a stage with no work for Spark never
    starts one: the watermark stage folds on the driver, and a run with no new files or
    batches reads only Delta logs. Under spark-submit, as Airflow runs each stage, starting
    the SparkContext takes 4-5 s of the job (2.5-3 s with the class archive)."""

    def __init__(self, build: Callable[[], SparkSession]):
        # Here, not only when the session is built: a stage may do all its work on the driver
        # (compaction reduces and writes there) and never start Spark.
        disable_huge_pages()
        self._build = build
        self._session: SparkSession | None = None
        self._building = threading.Lock()  # compaction applies tables from several threads

    def __getattr__(self, name: str) -> Any:
        with self._building:
            if self._session is None:
                self._session = self._build()
        return getattr(self._session, name)


def check_executor_python(session: SparkSession) -> None:
    """Raise a ConfigError naming the fix when the executors' Python cannot import what the
    pipeline's workers need. Without this check every task of the first stage fails, is retried,
    and the job dies minutes later of a bare ``ModuleNotFoundError: pyarrow``."""
    from ticdc_lake.errors import ConfigError

    modules = WORKER_MODULES

    def probe(_rows):  # nested, so it is pickled by value: it runs without this package
        import importlib
        import sys

        missing = []
        for name in modules:
            try:
                importlib.import_module(name)
            except ImportError:
                missing.append(name)
        yield sys.executable, missing

    fix = (
        "point spark.pyspark.python (or PYSPARK_PYTHON on the workers) at a Python with the "
        "project installed, on every worker host, e.g. --conf spark.pyspark.python="
        f"{sys.executable} when the workers share this machine or image"
    )
    try:
        job = session.sparkContext.parallelize([0], 1).mapPartitions(probe)
        ((python, missing),) = job.collect()
    except Exception as error:  # no worker started (no such Python, another Python version)
        lines = str(error).strip().splitlines() or [repr(error)]
        cause = next((line for line in lines if "Error" in line), lines[0]).strip()
        raise ConfigError(f"the executors cannot run Python ({cause[:300]}): {fix}") from error
    if missing:
        raise ConfigError(
            f"the executors' Python ({python}) cannot import {', '.join(missing)}: {fix}"
        )
