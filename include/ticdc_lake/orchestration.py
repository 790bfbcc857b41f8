"""What the Airflow DAGs need at parse time, and nothing heavy: stage names, TSO <-> time, the
backfill range check, and where the pipeline configs are.

    discover_configs(environ) -> list[PipelineSource]   # names only: no file is opened
    parse_ts(text, name) -> int                          # a TSO number or an ISO-8601 time
    parse_tables(text) -> list[str]                      # --tables of spark_jobs/backfill.py
    tso_of(moment) / moment_of(tso)                      # TSO = unix ms << 18
    check_range(start_ts, end_ts, watermark) -> None     # BackfillParamError says what to fix

This module imports only the standard library: a DAG file imports it while the scheduler parses
it, so it must not start a JVM, read a Delta table or open a config.
"""

from __future__ import annotations

import calendar
import datetime as dt
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# In pipeline order (the same as ticdc_lake.app.pipeline.STAGES; a test keeps them in step).
STAGES = ("land", "decode", "watermark", "compact")

# The driver JVM's options: the sessions Python starts (ticdc_lake.runtime.spark) and each stage's
# spark-submit (the DAGs; TICDC_LAKE_DRIVER_JAVA_OPTIONS replaces them, empty gives none and
# spark-defaults.conf decides). ``driver_java_options`` adds the class archive.
# - The stages are batch jobs: throughput counts, not pause times. With the parallel
#   collector a cold compaction of the realistic 1M run took 36.5 s against G1's 38.2.
# - Their heavy work runs in Python and Arrow; the JVM's is short. Its optimizing compiler
#   (C2) spent more CPU compiling than its code saved, on the cores the tasks need: stopping
#   at C1, the first land of a session took 8.7-9.5 s against 11.3 s, and the realistic
#   benchmark (one session) 29.2-31.6 s against 34.5-34.9 s, at 4M 121 against 138 s.
DRIVER_JAVA_OPTIONS = "-XX:+UseParallelGC -XX:TieredStopAtLevel=1"
DRIVER_JAVA_OPTIONS_ENV = "TICDC_LAKE_DRIVER_JAVA_OPTIONS"

# Where, in the Python environment Spark runs from, ``make setup`` keeps the driver JVM's
# archive of Spark's classes (``ticdc_lake.runtime.class_archive``). Under Airflow every job is a
# new JVM that loads them: mapped from the archive, the DAG's seven jobs on 200k events took
# 56.0-56.7 s against 76.4 s (bench.submit), 2.3-2.4 s each with nothing new against 2.6-3.1.
CLASS_ARCHIVE = Path("share") / "ticdc-lake" / "spark-classes.jsa"


def class_archive(python: str) -> Path:
    """The class archive of the environment ``python`` (a virtualenv's bin/python) is in."""
    return Path(python).parent.parent / CLASS_ARCHIVE


# Delta Lake on Spark: the jars of delta-spark built for Spark 4.1 (the newest build Maven
# Central serves; its Python package is pinned beside pyspark 4.1.1 in requirements.txt), which
# ``make setup`` fetches once into the Python environment (``python -m ticdc_lake.runtime.jars``).
DELTA_ARTIFACTS = ("io.delta:delta-spark_4.1_2.13:4.1.0", "io.delta:delta-storage:4.1.0")
# Spark's Kafka batch source at pyspark's exact version (land reads a topic straight into
# bronze), with the compile-scope dependencies of its POM that pyspark does not ship.
KAFKA_ARTIFACTS = (
    "org.apache.spark:spark-sql-kafka-0-10_2.13:4.1.1",
    "org.apache.spark:spark-token-provider-kafka-0-10_2.13:4.1.1",
    "org.apache.kafka:kafka-clients:3.9.1",
    "org.apache.commons:commons-pool2:2.12.1",
)
SPARK_ARTIFACTS = DELTA_ARTIFACTS + KAFKA_ARTIFACTS
DELTA_JARS = Path("share") / "ticdc-lake" / "jars"
DELTA_SESSION_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}


def delta_jars(python: str) -> list[Path]:
    """The Spark jars of the environment ``python`` is in, one per SPARK_ARTIFACTS entry (a
    missing one is left out: ``ticdc_lake.runtime.jars`` says how to fetch it)."""
    folder = Path(python).parent.parent / DELTA_JARS
    return [path for path in map(folder.joinpath, jar_names()) if path.is_file()]


def jar_names() -> list[str]:
    """The file names Maven gives SPARK_ARTIFACTS' jars (artifact-version.jar)."""
    return [jar_name(artifact) for artifact in SPARK_ARTIFACTS]


def jar_name(artifact: str) -> str:
    _, name, version = artifact.split(":")
    return f"{name}-{version}.jar"


def delta_conf(python: str) -> dict[str, str]:
    """The settings that give a session Delta Lake: ``python``'s environment's jars, Delta's
    SQL extension and catalog."""
    return {"spark.jars": ",".join(map(str, delta_jars(python))), **DELTA_SESSION_CONF}


def driver_java_options(environ: Mapping[str, str], python: str) -> str:
    """DRIVER_JAVA_OPTIONS and the class archive of ``python``'s environment, or what
    DRIVER_JAVA_OPTIONS_ENV says instead (empty: none). A JVM whose archive is missing starts
    without it, silently; one whose archive another JDK or other jars wrote warns and starts
    without it (one cut short would crash it: ``class_archive`` installs none such)."""
    if DRIVER_JAVA_OPTIONS_ENV in environ:
        return environ[DRIVER_JAVA_OPTIONS_ENV].strip()
    archive = str(class_archive(python))
    if '"' in archive or "\\" in archive:
        return DRIVER_JAVA_OPTIONS  # Spark's option parser would take it apart
    return f'{DRIVER_JAVA_OPTIONS} "-XX:SharedArchiveFile={archive}"'


def spark_submit_binary(environ: Mapping[str, str], python: str) -> str:
    """TICDC_LAKE_SPARK_SUBMIT, else the ``spark-submit`` beside ``python`` (pyspark's)."""
    return environ.get("TICDC_LAKE_SPARK_SUBMIT") or str(Path(python).parent / "spark-submit")


# A job's own environment, beside the Python every job gets.
# - compact: its driver keeps the memory it frees. pyarrow's allocator (mimalloc) reads this as
#   it loads, so it is a process's setting, and each job is a process that ends with its stage.
#   Compaction reduces silver a chunk at a time, and the pages each chunk handed back to the
#   kernel the next faulted in again. As a spark-submit of its own on the realistic 4M run,
#   the stage took 12.1-12.4 s against 13.0-13.3 s, and 3.13-3.14 s against 3.25-3.33 s on the
#   1M one (in one process at 4M: 1.4-1.5M page faults against 2.4-2.6M, a peak 0.3-0.4 GB
#   higher). Land's and decode's workers gained nothing from it and held more.
JOB_ENV = {"compact": {"MIMALLOC_PURGE_DELAY": "-1"}}


def spark_submit_env(python: str, job: str | None = None) -> dict[str, str]:
    """The environment a job's spark-submit adds: ``python`` for the driver and workers, and
    what JOB_ENV gives the ``spark_jobs/`` entry point ``job``."""
    return {"PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python, **JOB_ENV.get(job, {})}


def spark_submit_conf(environ: Mapping[str, str], python: str) -> dict[str, str]:
    """What every job's spark-submit is given: ``python`` for the driver and executors, Delta
    Lake (``delta_conf``), and the driver's JVM options (``driver_java_options``)."""
    conf = {"spark.pyspark.python": python, "spark.pyspark.driver.python": python}
    conf |= delta_conf(python)
    java_options = driver_java_options(environ, python)
    if java_options:
        conf["spark.driver.extraJavaOptions"] = java_options
    return conf


# The data-quality checks that follow a stage (stage -> the checks' stage), run before the next
# stage starts so that data failing a `fail` check stops the run before it spreads.
QUALITY_AFTER = {"land": "bronze", "decode": "silver", "compact": "gold"}


def quality_task_id(stage: str) -> str:
    """The Airflow task running the checks that follow ``stage``."""
    return f"quality_{QUALITY_AFTER[stage]}"


# Where the configs are: a YAML file, or a folder of them (one DAG pair per file). The Airflow
# Variable of the same name works when given as an environment variable (AIRFLOW_VAR_...),
# which is read without a database query at parse time.
CONFIGS_ENV = "TICDC_LAKE_CONFIGS"
CONFIGS_VARIABLE = "ticdc_lake_configs"
# The demo sample used when no config is named, generated on the first run when missing.
DEMO_DIR_ENV = "TICDC_LAKE_DEMO_DIR"
DEMO_PROTOCOL = "open-protocol"
DEMO_TRANSACTIONS = 200

PIPELINE_DAG = "ticdc_lake"
BACKFILL_DAG = "ticdc_lake_backfill"
# One Airflow pool slot per lake: the pipeline's and the backfill's Spark jobs never overlap.
POOL = "ticdc_lake"
# Where a local Airflow (airflow_local.py) serves task logs to its api-server: Airflow's default.
LOG_SERVER_PORT = 8793

TSO_LOGICAL_BITS = 18
TSO_MAX = (1 << 63) - 1  # TSOs are stored as int64 in the lake
_CONFIG_SUFFIXES = (".yaml", ".yml")


class BackfillParamError(ValueError):
    """A backfill's parameters cannot be used; the message says which and what to give."""


class ConfigNameCollisionError(ValueError):
    """Two config files of the folder would give the same DAG ids; the message names both."""


# --- TSO <-> time ---------------------------------------------------------------------------


def unix_millis(moment: dt.datetime) -> int:
    """A zoned moment's unix time in whole milliseconds (rounded down). By the calendar and
    integers, not datetime arithmetic: Airflow hands in pendulum DateTimes, whose difference is
    no timedelta, and a time near year 1 or 9999 with a zone would overflow a conversion."""
    offset = moment.utcoffset()
    if offset is None:
        raise ValueError(f"{moment.isoformat()} has no time zone")
    wall = calendar.timegm(moment.timetuple())  # its own fields, as if they were UTC
    micros = wall * 1_000_000 + moment.microsecond - offset // dt.timedelta(microseconds=1)
    return micros // 1000


def tso_of(moment: dt.datetime) -> int:
    """The first TSO of a moment's millisecond (TSO = unix ms << 18)."""
    return unix_millis(moment) << TSO_LOGICAL_BITS


def moment_of(tso: int) -> dt.datetime:
    """A TSO's physical time, in UTC."""
    return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(
        milliseconds=tso >> TSO_LOGICAL_BITS
    )


def describe_ts(tso: int) -> str:
    """``449... (2026-01-02T03:04:05.678+00:00)``: a TSO a person can place."""
    return f"{tso} ({moment_of(tso).isoformat(timespec='milliseconds')})"


def parse_ts(text: object, name: str, *, end: bool = False) -> int:
    """A TSO from a whole number, or from an ISO-8601 time with a zone: its millisecond's first
    TSO, or with ``end`` (a range's inclusive end) its last. ``name`` (the parameter) goes into
    the message when the text is neither."""
    value = str(text).strip() if text is not None else ""
    if re.fullmatch(r"[0-9]+", value):
        digits = value.lstrip("0") or "0"  # int() refuses text of thousands of digits
        if len(digits) > len(str(TSO_MAX)) or int(digits) > TSO_MAX:
            shown = value if len(value) <= 40 else f"{value[:20]}...({len(value)} digits)"
            raise BackfillParamError(f"{name}: {shown} is larger than any TSO (at most {TSO_MAX})")
        return int(digits)
    try:
        moment = dt.datetime.fromisoformat(value)
    except ValueError:
        moment = None
    if moment is None:
        raise BackfillParamError(
            f"{name}: {value!r} is neither a TSO (a whole number such as 462873715384320000) "
            "nor an ISO-8601 time with a zone (such as 2026-01-02T03:00:00+00:00)"
        )
    if moment.utcoffset() is None:
        raise BackfillParamError(
            f"{name}: {value!r} has no time zone; add one (such as +00:00 or Z): TiDB's "
            "timestamps are absolute"
        )
    millis = unix_millis(moment)
    if millis < 0:
        raise BackfillParamError(f"{name}: {value!r} is before 1970, before any TSO")
    if millis > TSO_MAX >> TSO_LOGICAL_BITS:
        raise BackfillParamError(
            f"{name}: {value!r} is after {moment_of(TSO_MAX).isoformat(timespec='milliseconds')}, "
            f"the last time a TSO can hold (at most {TSO_MAX}); give a time before it"
        )
    first = millis << TSO_LOGICAL_BITS
    return first + (1 << TSO_LOGICAL_BITS) - 1 if end else first


def parse_tables(text: str) -> list[str]:
    """The gold tables a backfill job is given: a JSON list of ``schema.table`` names, so that a
    name holding a comma (a quoted identifier may) stays one name. Blank names are left out,
    as ``plan_backfill`` leaves them out; an empty list means every table."""
    try:
        tables = json.loads(text)
    except ValueError:
        tables = None
    if not isinstance(tables, list) or not all(isinstance(name, str) for name in tables):
        shown = text if len(text) <= 80 else text[:77] + "..."
        raise BackfillParamError(
            f'tables: expected a JSON list of schema.table names such as ["shop.orders"] '
            f"([] for every table), got {shown!r}"
        )
    return [name for name in tables if name.strip()]


def interval_range(start: dt.datetime, end: dt.datetime) -> tuple[int, int]:
    """An Airflow data interval [start, end) as an inclusive TSO range."""
    return tso_of(start), tso_of(end) - 1


def requested_range(
    start_text: object, end_text: object, interval: tuple[dt.datetime, dt.datetime] | None
) -> tuple[int, int] | None:
    """The TSO range a backfill run asks for: its ``start_ts``/``end_ts`` params when given,
    else its data interval (``interval``: a run of ``airflow backfill create``), else None."""
    given = [bool(str(text or "").strip()) for text in (start_text, end_text)]
    if any(given):
        if not all(given):
            missing = "end_ts" if given[0] else "start_ts"
            raise BackfillParamError(f"{missing} is empty: give start_ts and end_ts together")
        return parse_ts(start_text, "start_ts"), parse_ts(end_text, "end_ts", end=True)
    if interval is not None:
        return interval_range(*interval)
    return None


def check_range(start_ts: int, end_ts: int, watermark: int | None) -> None:
    """Refuse a range a backfill cannot serve: backwards, or past what the lake holds."""
    if end_ts < start_ts:
        raise BackfillParamError(
            f"end_ts {describe_ts(end_ts)} is before start_ts {describe_ts(start_ts)}"
        )
    if watermark is None:
        raise BackfillParamError(
            "the lake has no gold watermark yet: run the pipeline (DAG ticdc_lake) first; a "
            "backfill re-derives what the pipeline has already brought in"
        )
    if start_ts > watermark:
        raise BackfillParamError(
            f"the range starts at {describe_ts(start_ts)}, above the lake's current watermark "
            f"{describe_ts(watermark)}: nothing there is in gold yet (the pipeline brings it)"
        )
    if end_ts > watermark:
        raise BackfillParamError(
            f"end_ts {describe_ts(end_ts)} is above the lake's current watermark "
            f"{describe_ts(watermark)}: end the range at or below the watermark"
        )


# --- where the configs are ------------------------------------------------------------------


@dataclass(frozen=True)
class PipelineSource:
    """One pipeline config, and the DAG ids of its pipeline and backfill."""

    config: Path
    suffix: str  # "" for the only config; else its file name's stem
    demo: bool = False  # the built-in demo sample: generated by the first run when missing

    @property
    def pipeline_dag_id(self) -> str:
        return PIPELINE_DAG + (f"__{self.suffix}" if self.suffix else "")

    @property
    def backfill_dag_id(self) -> str:
        return BACKFILL_DAG + (f"__{self.suffix}" if self.suffix else "")


def demo_dir(environ: Mapping[str, str]) -> Path:
    """Where the demo sample lives: TICDC_LAKE_DEMO_DIR, else beside Airflow's home."""
    if environ.get(DEMO_DIR_ENV):
        return Path(environ[DEMO_DIR_ENV])
    home = environ.get("AIRFLOW_HOME") or str(Path("~/airflow").expanduser())
    return Path(home) / "ticdc_lake_demo"


def demo_config(environ: Mapping[str, str]) -> Path:
    return demo_dir(environ) / DEMO_PROTOCOL / "pipeline.yaml"


def configs_setting(environ: Mapping[str, str]) -> str | None:
    """The configured file or folder: TICDC_LAKE_CONFIGS, else the Airflow Variable
    ticdc_lake_configs given as AIRFLOW_VAR_TICDC_LAKE_CONFIGS."""
    for name in (CONFIGS_ENV, f"AIRFLOW_VAR_{CONFIGS_VARIABLE.upper()}"):
        if environ.get(name, "").strip():
            return environ[name].strip()
    return None


def discover_configs(environ: Mapping[str, str] | None = None) -> list[PipelineSource]:
    """The pipeline configs to schedule, found by name only (no file is opened).

    A folder gives one DAG pair per *.yaml/*.yml in it (ids suffixed with the file's stem, each
    character a DAG id cannot hold made ``_``); a file gives ``ticdc_lake`` and
    ``ticdc_lake_backfill``; nothing configured gives the demo sample. A folder that holds no
    config gives no DAGs. Files whose stems give the same ids (``prod.yaml`` and ``prod.yml``,
    ``team a.yaml`` and ``team_a.yaml``) raise ConfigNameCollisionError naming them: one pipeline
    would silently replace the other, so the DAG files fail to import instead.
    """
    environ = os.environ if environ is None else environ
    setting = configs_setting(environ)
    if setting is None:
        return [PipelineSource(demo_config(environ), "", demo=True)]
    path = Path(setting).expanduser()
    if not path.is_dir():
        return [PipelineSource(path, "")]
    files = sorted(
        entry for entry in path.iterdir() if entry.suffix in _CONFIG_SUFFIXES and entry.is_file()
    )
    if len(files) == 1:
        return [PipelineSource(files[0], "")]
    sources = [PipelineSource(file, _dag_suffix(file.stem)) for file in files]
    _refuse_shared_dag_ids(sources, path)
    return sources


def _refuse_shared_dag_ids(sources: list[PipelineSource], folder: Path) -> None:
    by_id: dict[str, list[PipelineSource]] = {}
    for source in sources:
        by_id.setdefault(source.pipeline_dag_id, []).append(source)
    clashes = [
        f"{' and '.join(repr(s.config.name) for s in same)} {'both' if len(same) == 2 else 'all'} "
        f"give the DAG ids "
        f"{same[0].pipeline_dag_id} and {same[0].backfill_dag_id}"
        for same in by_id.values()
        if len(same) > 1
    ]
    if clashes:
        raise ConfigNameCollisionError(
            f"pipeline configs in {folder}: {'; '.join(clashes)}; rename one of each so that "
            "their names differ in letters, digits, '_', '.' or '-' (a DAG id takes no other "
            "character)"
        )


def _dag_suffix(stem: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", stem)


# --- the Spark jobs -------------------------------------------------------------------------


def spark_jobs_dir(environ: Mapping[str, str], dags_file: str) -> Path:
    """The spark_jobs/ folder: TICDC_LAKE_SPARK_JOBS, else beside the dags/ folder."""
    if environ.get("TICDC_LAKE_SPARK_JOBS"):
        return Path(environ["TICDC_LAKE_SPARK_JOBS"])
    return Path(dags_file).resolve().parent.parent / "spark_jobs"


def run_dir(environ: Mapping[str, str]) -> Path:
    """Where the Spark jobs of a DAG run leave their JSON results for the summary task."""
    if environ.get("TICDC_LAKE_RUN_DIR"):
        return Path(environ["TICDC_LAKE_RUN_DIR"])
    home = environ.get("AIRFLOW_HOME") or str(Path("~/airflow").expanduser())
    return Path(home) / "ticdc_lake_runs"
