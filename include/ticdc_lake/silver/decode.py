"""Decode: bronze records not yet decoded → the silver change log, DDL log, resolved events and
quarantine, plus a decode log that reconciles the counts of every bronze batch.

    decode(spark, config) -> DecodeResult          # every bronze batch not in the decode log
    redecode(spark, config, batches=[...])         # re-derive silver for these bronze batches
    redecode(spark, config, start_ts=S, end_ts=E)  # ... for the batches touching a TS range

Decoding runs on the executors, in one pass over bronze: each ``mapInArrow`` task reads a split
of bronze's records from the files itself (silver/bronze_splits.py), decodes them with the
topic's protocol and settings from the pipeline config (``codecs.topic_decoder``, the CLI's
factory too; each topic's decoder built once per Python worker) and writes the rows, already in
the silver formats (silver/rows.py), to Parquet files of each table itself (``SilverFiles``):
Spark never converts them to rows. The tasks report their files and counts; the driver
reconciles the counts, writes the decode log's few rows itself and commits the files to:

- ``layout.changes`` (silver.CHANGES_SCHEMA) and ``layout.ddl`` (silver.DDL_SCHEMA);
- ``layout.resolved``: every resolved event (topic, partition, ts, offset, index, bronze_batch);
- ``layout.quarantine``: every record that did not decode, raw, with the error and where;
- ``layout.decode_log``: per bronze batch, records read = decoded + quarantined, and events by
  kind. It is written last: a batch is decoded once its log row exists.

All silver tables are partitioned by ``bronze_batch``, so a batch can be re-derived by replacing
its partition (``redecode``). Replays (the same event_id at another offset) stay in silver: it
is a log; compaction deduplicates by event_id.

Idempotency. Every table is committed with app id ``decode-<table>`` and version = the highest
bronze batch of the run, in the order changes, ddl, resolved, quarantine, log; files not
committed are never visible, and are deleted when the run fails. A run killed between two
commits leaves the log without the run's batches, so the rerun decodes them again;
a table that already recorded the version (or a later one) skips its write, and one whose
recorded version v is lower gets only the rows of batches above v (batches it already holds
are ≤ v, since batch ids grow). Resolved events are written after the changes and DDLs, so a
partial run never advances a watermark past changes it has not written. Bronze is read at one
pinned version for the whole run; the pending batches and their record counts come from its
Delta log's file statistics (a batch's files hold one batch id), so a no-op run starts no Spark
job and writes nothing.

What fails the stage instead of quarantining: a schema registry that cannot be reached or
refuses the credentials (the record is not at fault: quarantining a whole topic would hide an
outage), an invalid config, and counts that do not reconcile. Nothing is written then.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import pickle
from collections.abc import Container, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from ticdc_lake.config import PipelineConfig, TopicConfig
from ticdc_lake.delta import (
    Table,
    delta_table_exists,
    file_actions,
    open_table,
    read_delta,
    read_table,
    spanning,
)
from ticdc_lake.delta.files import (
    TaskFiles,
    WritePlan,
    commit_files,
    delete_files,
    delete_write,
    write_files,
)
from ticdc_lake.delta.read import (
    DataFile,
    check_plain_files,
    present_files,
    table_path,
)
from ticdc_lake.delta.schema import TableSchema
from ticdc_lake.delta.write import plan_write
from ticdc_lake.errors import ConfigError, DecodeError, TicdcLakeError
from ticdc_lake.gold.ddl import defined_columns
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.lake.names import qualified_name
from ticdc_lake.limits import MIB, Limits, check_limit
from ticdc_lake.protocols import Decoder
from ticdc_lake.protocols.base import MALFORMED_INPUT_ERRORS
from ticdc_lake.records import KafkaRecord
from ticdc_lake.redact import redact_text
from ticdc_lake.runtime.gc_pause import gc_paused
from ticdc_lake.runtime.spark import MIN_SPLITS
from ticdc_lake.silver import rows as silver
from ticdc_lake.silver.bronze_splits import SplitReader, even_splits
from ticdc_lake.silver.codecs import topic_decoder
from ticdc_lake.silver.events import DdlEvent, Event, ResolvedEvent, RowEvent
from ticdc_lake.silver.schema_registry import SchemaRegistryUnavailableError

APP_PREFIX = "decode-"
PARTITION_BY = ("bronze_batch",)
# Write order: resolved after changes and DDL (a watermark never runs ahead of its changes),
# the log last (it is the mark that a batch is done). The tasks write the silver tables' files,
# the driver the log's.
SILVER_TABLES = ("changes", "ddl", "resolved", "quarantine")
LOG = "log"
DECODE_TABLES = (*SILVER_TABLES, LOG)
OPS = ("insert", "update", "delete")

QUARANTINE_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("source_file", pa.string()),
        ("bronze_batch", pa.int64()),
        ("protocol", pa.string()),  # null when the topic is not configured
        ("error", pa.string()),  # str(DecodeError): reason, file, topic, partition, offset
        ("byte_offset", pa.int64()),  # where in the key or value decoding stopped, if known
        ("quarantined_at", pa.timestamp("us", tz="UTC")),
    ]
)

DECODE_LOG_SCHEMA = pa.schema(
    [
        ("bronze_batch", pa.int64()),
        ("records", pa.int64()),  # bronze records read = decoded + quarantined
        ("decoded", pa.int64()),  # records that decoded (possibly to zero events)
        ("quarantined", pa.int64()),
        ("inserts", pa.int64()),  # events by kind
        ("updates", pa.int64()),
        ("deletes", pa.int64()),
        ("ddl", pa.int64()),
        ("resolved", pa.int64()),
        ("bronze_version", pa.int64()),  # the bronze snapshot the batch was decoded from
        ("run", pa.string()),  # decode | redecode
        ("decoded_at", pa.timestamp("us", tz="UTC")),
    ]
)
_COUNT_COLUMNS = ("records", "decoded", "quarantined", "inserts", "updates", "deletes", "ddl",
                  "resolved")  # fmt: skip

# The executors' one output: `kind` says which struct column holds the row.
CHANGE = "change"
DDL = "ddl"
RESOLVED = "resolved"
QUARANTINE = "quarantine"
TALLY = "tally"  # per task and bronze batch: records read, decoded, quarantined
FATAL = "fatal"  # decoding cannot go on (registry down): the stage fails, nothing is written

_TALLY_TYPE = pa.struct(
    [("records", pa.int64()), ("decoded", pa.int64()), ("quarantined", pa.int64())]
)
_FATAL_TYPE = pa.struct([("error_type", pa.string()), ("message", pa.string())])
DECODED_SCHEMA = pa.schema(
    [
        ("kind", pa.string()),
        ("bronze_batch", pa.int64()),
        (CHANGE, pa.struct(list(silver.CHANGES_SCHEMA))),
        (DDL, pa.struct(list(silver.DDL_SCHEMA))),
        (RESOLVED, pa.struct(list(silver.RESOLVED_SCHEMA))),
        (QUARANTINE, pa.struct([f for f in QUARANTINE_SCHEMA if f.name != "quarantined_at"])),
        (TALLY, _TALLY_TYPE),
        (FATAL, _FATAL_TYPE),
    ]
)
SILVER_SCHEMAS = {
    "changes": silver.CHANGES_SCHEMA,
    "ddl": silver.DDL_SCHEMA,
    "resolved": silver.RESOLVED_SCHEMA,
    "quarantine": QUARANTINE_SCHEMA,
    LOG: DECODE_LOG_SCHEMA,
}
_KIND_OF = {"changes": CHANGE, "ddl": DDL, "resolved": RESOLVED, "quarantine": QUARANTINE}
# What each decoding task reports to the driver: one JSON document (SilverFiles).
REPORT_SCHEMA = pa.schema([("report", pa.string())])
_SUMMED = ("records", "decoded", "quarantined", "quarantine_rows", "inserts", "updates",
           "deletes", "changes", "ddl", "resolved")  # fmt: skip

# Bronze columns the decoders need (Kafka headers and timestamps carry nothing they read).
BRONZE_COLUMNS = ("topic", "partition", "offset", "key", "value", "source_file", "batch_id")

# Redecoding a TS range: a quarantined record (TS unknown) is included when its Kafka timestamp
# is at or after the range's start, less this allowance for clocks: a message is produced after
# its commit, so one stamped before the start cannot hold a change of the range.
CLOCK_SKEW_MS = 60_000


class DecodeStageError(TicdcLakeError):
    """The decode stage cannot run or its counts do not reconcile; nothing was written."""


@dataclass(frozen=True)
class DecodeResult:
    """What one run did. ``events`` counts insert, update, delete, ddl, resolved."""

    batches: tuple[int, ...] = ()
    records: int = 0
    decoded: int = 0
    quarantined: int = 0
    events: dict[str, int] = field(default_factory=dict)
    bronze_version: int | None = None
    run: str = "decode"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"batches": list(self.batches)}

    def __str__(self) -> str:
        if not self.batches:
            return f"{self.run}: nothing to decode"
        events = ", ".join(f"{kind} {count}" for kind, count in self.events.items())
        return (
            f"{self.run}: {len(self.batches)} bronze batch(es) {list(self.batches)}: "
            f"{self.records} records = {self.decoded} decoded + {self.quarantined} quarantined; "
            f"events: {events}"
        )


# --- driver: the stage ----------------------------------------------------------------------


def decode(spark: SparkSession, config: PipelineConfig) -> DecodeResult:
    """Decode every bronze batch the decode log does not hold yet into silver."""
    layout = LakeLayout(config.lake)
    if not delta_table_exists(layout.bronze):
        return DecodeResult()
    check_topics(config)
    snapshot = open_table(layout.bronze)  # one bronze version for the whole run
    bronze_version = snapshot.version()
    counts = batch_counts(spark, snapshot)
    pending = pending_batches(counts, logged_batches(layout))
    if not pending:
        return DecodeResult(bronze_version=bronze_version)

    expected = {batch: counts[batch] for batch in pending}
    version = max(pending)
    plans = silver_plans(layout, version=version)
    records = BronzeBatches.read(snapshot, pending)
    return _decode_and_commit(spark, config, records, expected, bronze_version, plans, "decode")


def batch_counts(spark: SparkSession, snapshot: Table) -> dict[int, int]:
    """Records per bronze batch (of the ``snapshot``): what the decoded counts must add up to.

    Read from the Delta log when it can be (every file's statistics hold its record count and
    a single batch id, as a batch's files do), so finding the pending batches costs one look
    at the log, not a scan of bronze, nor a Spark session; counted by Spark otherwise.
    """
    counts = _counts_from_log(snapshot)
    if counts is None:
        grouped = read_table(spark, snapshot).groupBy("batch_id").count().collect()
        counts = {row["batch_id"]: row["count"] for row in grouped}
    if None in counts:
        raise DecodeStageError(f"bronze holds {counts[None]} records without a batch_id")
    return counts


def _counts_from_log(snapshot: Table) -> dict[int, int] | None:
    files = file_actions(snapshot)
    names = ("num_records", "min.batch_id", "max.batch_id", "null_count.batch_id")
    if "partition.batch_id" in files.column_names:  # one batch per file by construction
        lows = highs = files.column("partition.batch_id").to_pylist()
        nulls = [0] * files.num_rows
        records = files.column("num_records").to_pylist()
    elif all(name in files.column_names for name in names):
        records, lows, highs, nulls = (files.column(name).to_pylist() for name in names)
    else:
        return None
    counts: dict[int, int] = {}
    for count, low, high, null in zip(records, lows, highs, nulls, strict=True):
        if count is None or low is None or low != high or null:
            return None  # no statistics, or a file holding several batches: count by Spark
        counts[low] = counts.get(low, 0) + count
    return counts


def logged_batches(layout: LakeLayout) -> set[int]:
    """Bronze batches the decode log holds: decoded. (A small table: read by delta-rs.)"""
    if not delta_table_exists(layout.decode_log):
        return set()
    ids = open_table(layout.decode_log).to_pyarrow_table(columns=["bronze_batch"])
    return set(ids.column("bronze_batch").to_pylist())


def pending_batches(bronze_batches: Iterable[int], logged: set[int]) -> list[int]:
    """Bronze batch ids the decode log lacks, ascending.

    Progress is tracked by increasing batch ids (the silver writes record the highest batch
    of a run as their app version), so a batch below one already decoded cannot be decoded
    in order: that is refused, pointing at ``redecode``.
    """
    pending = sorted(set(bronze_batches) - logged)
    late = [b for b in pending if logged and b < max(logged)]
    if late:
        raise DecodeStageError(
            f"bronze batch(es) {late} appeared after batch {max(logged)} was decoded; decode "
            "follows increasing batch ids, so it cannot take them in order: decode them with "
            "redecode(spark, config, batches=...) after landing is fixed"
        )
    return pending


def check_topics(config: PipelineConfig) -> None:
    """Build every configured topic's decoder once on the driver: a bad setting (missing schema
    directory, unknown option) fails the stage here with a ConfigError, before any Spark job."""
    TopicDecoders(DecoderSettings.for_config(config)).build_all()


def _path(layout: LakeLayout, name: str):
    return layout.decode_log if name == LOG else getattr(layout, name)


def _first_missing(path, app_id: str, version: int) -> int | None:
    """The first bronze batch a table lacks of a run that records ``version`` under
    ``app_id``: 0 when it records none; None when it records the run (written before a
    crash: complete). A table recording an earlier version was written by a run that crashed
    after its write, before more batches were landed: it holds every batch up to that one."""
    recorded = open_table(path).transaction_version(app_id) if delta_table_exists(path) else None
    if recorded is None:
        return 0
    return None if recorded >= version else recorded + 1


def silver_plans(
    layout: LakeLayout, *, version: int | None = None, replace: Sequence[int] | None = None
) -> dict[str, WritePlan]:
    """How a run writes each silver table and the decode log: appended with app id
    ``decode-<table>`` and ``version`` (tables that already record it are left out), or with
    the partitions of the bronze batches ``replace`` replaced."""
    plans = {}
    for name in DECODE_TABLES:
        incoming = TableSchema.from_spark(from_arrow_schema(SILVER_SCHEMAS[name]), PARTITION_BY)
        if replace is not None:
            options = {"mode": "overwrite", "replace_where": {"bronze_batch": list(replace)}}
        else:
            options = {"app_id": f"{APP_PREFIX}{name}", "version": version}
        plan = plan_write(table_path(_path(layout, name)), incoming, **options)
        if plan is not None:
            plans[name] = plan
    return plans


# --- driver: decoding a set of bronze batches once -------------------------------------------


@dataclass
class DecodedRun:
    """The silver files one run's tasks wrote (not committed yet), and its per-batch summary."""

    plans: dict[str, WritePlan]
    adds: dict[str, list[dict[str, Any]]]  # table -> its files' add actions
    summary: list[dict[str, Any]]  # decode-log rows, one per batch
    batches: tuple[int, ...]
    bronze_version: int
    run: str
    started_at: dt.datetime
    committed: set[str] = field(default_factory=set)

    def commit(self, name: str) -> None:
        """Commit the files of silver table ``name``. A table that already records the run's
        version (a run killed after its commit) keeps what it has; one recording an earlier
        version (killed after its commit, before more batches were landed) gets only the
        batches above it."""
        plan = self.plans.get(name)
        if plan is None:
            return  # it recorded the run's version before the run started
        adds = self.adds.get(name, [])
        if plan.app_id:
            first = _first_missing(plan.path, plan.app_id, plan.version)
            kept = [add for add in adds if first is not None and _batch_of(add) >= first]
            delete_files(plan.path, [add for add in adds if add not in kept])
            adds = kept
        commit_files(plan, adds)
        self.committed.add(name)

    def release(self) -> None:
        """Delete the files of tables not committed (the run failed, or they were done)."""
        _delete_files(self.plans, self.adds, keep=self.committed)

    def result(self) -> DecodeResult:
        totals = {name: sum(row[name] for row in self.summary) for name in _COUNT_COLUMNS}
        events = {
            "insert": totals["inserts"],
            "update": totals["updates"],
            "delete": totals["deletes"],
            "ddl": totals["ddl"],
            "resolved": totals["resolved"],
        }
        return DecodeResult(
            batches=self.batches,
            records=totals["records"],
            decoded=totals["decoded"],
            quarantined=totals["quarantined"],
            events=events,
            bronze_version=self.bronze_version,
            run=self.run,
        )


# Decoding is CPU-bound and bronze's records cost unevenly: a few large splits leave a core
# idle while the last one finishes (ddl-heavy 1M, the stage alone: 4 splits on 2 cores took
# 42.8 s, 8 splits 39.1-39.6 s). So up to this many splits per core, but none much under
# SPLIT_FLOOR_BYTES of bronze, where a task's start costs more than the balance gains.
SPLITS_PER_CORE = 4
SPLIT_FLOOR_BYTES = 32 * MIB


@dataclass(frozen=True)
class BronzeBatches:
    """The bronze files that can hold some batches (by their batch_id statistics)."""

    files: tuple[DataFile, ...]

    @classmethod
    def read(cls, snapshot: Table, batches: Sequence[int]) -> BronzeBatches:
        within = spanning("batch_id", batches)
        check_plain_files(snapshot)
        return cls(tuple(present_files(snapshot, within)))

    @property
    def size(self) -> int:
        return sum(file.size for file in self.files)

    def split_count(self, spark: SparkSession) -> int:
        """How many splits the records are cut into for decoding: the session's own
        ``spark.sql.files.minPartitionNum`` if it sets one (a cluster's choice), else by
        SPLITS_PER_CORE and SPLIT_FLOOR_BYTES."""
        chosen = spark.conf.get(MIN_SPLITS, None)
        if chosen is not None:
            return int(chosen)
        cores = spark.sparkContext.defaultParallelism
        return max(cores, min(SPLITS_PER_CORE * cores, self.size // SPLIT_FLOOR_BYTES))


def decode_batches(
    spark: SparkSession,
    config: PipelineConfig,
    bronze: BronzeBatches,
    expected: dict[int, int],
    bronze_version: int,
    plans: dict[str, WritePlan],
    *,
    run: str,
) -> DecodedRun:
    """Decode the bronze records of the batches in ``expected`` (batch id → bronze records) on
    the executors, which write the silver files of ``plans``; check that the counts reconcile.

    Raises the registry's or the config's error when decoding could not go on, and
    DecodeStageError when the counts do not reconcile; the files are deleted then.
    """
    started_at = dt.datetime.now(dt.UTC)
    batches = tuple(sorted(expected))
    splits = even_splits(bronze.files, bronze.split_count(spark))
    reader = SplitReader(tuple(splits), BRONZE_COLUMNS, batches)
    decoder = PartitionDecoder.for_config(config)
    by_tasks = {name: plan for name, plan in plans.items() if name != LOG}
    task = DecodeTask(reader, SilverFiles(decoder, by_tasks, started_at))
    try:
        numbers = spark.range(len(splits), numPartitions=max(1, len(splits)))
        rows = numbers.mapInArrow(task, from_arrow_schema(REPORT_SCHEMA)).collect()
    except BaseException:
        for plan in plans.values():  # tasks killed by a failing one leave their files
            delete_write(plan.path, plan.write_id)
        raise
    reports = [json.loads(row.report) for row in rows]
    adds = {name: [add for r in reports for add in r["adds"].get(name, [])] for name in by_tasks}
    try:
        summary = _summary(reports)
        _check_fatal(summary)
        _reconcile(summary, expected)
        log = [
            _log_row(row, bronze_version, run, started_at)
            for row in sorted(summary, key=lambda r: r["bronze_batch"])
        ]
        if LOG in plans:  # a few rows: written here, where a Spark job would cost more
            log_rows = pa.RecordBatch.from_pylist(log, schema=DECODE_LOG_SCHEMA)
            adds[LOG] = write_files(plans[LOG], [log_rows])
    except BaseException:
        _delete_files(plans, adds)
        raise
    return DecodedRun(plans, adds, log, batches, bronze_version, run, started_at)


def _batch_of(add: dict[str, Any]) -> int:
    return int(add["partition_values"]["bronze_batch"])


def _delete_files(
    plans: dict[str, WritePlan], adds: dict[str, list[dict[str, Any]]], keep: Container[str] = ()
) -> None:
    for name, plan in plans.items():
        if name not in keep:
            delete_files(plan.path, adds.get(name, []))


def _summary(reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tasks' counts added up per bronze batch."""
    total: dict[int, dict[str, Any]] = {}
    for report in reports:
        for counts in report["counts"]:
            batch = counts["bronze_batch"]
            row = total.setdefault(batch, _zero_counts(batch))
            for name in _SUMMED:
                row[name] += counts[name]
            row[FATAL] = row[FATAL] or counts[FATAL]
    return list(total.values())


def _check_fatal(summary: list[dict[str, Any]]) -> None:
    for row in summary:
        fatal = row[FATAL]
        if fatal is None:
            continue
        message = f"decoding bronze batch {row['bronze_batch']} stopped, nothing was written: "
        message += fatal["message"]
        if fatal["error_type"] == SchemaRegistryUnavailableError.__name__:
            raise SchemaRegistryUnavailableError(message)
        raise ConfigError(message)


def _log_row(row: dict[str, Any], bronze_version: int, run: str, at: dt.datetime) -> dict:
    log = {name: row[name] for name in DECODE_LOG_SCHEMA.names if name in row}
    return log | {"bronze_version": bronze_version, "run": run, "decoded_at": at}


def _reconcile(summary: list[dict[str, Any]], expected: dict[int, int]) -> None:
    """bronze records = decoded + quarantined, per batch, and every event and quarantined
    record is a row: a mismatch is a bug, and nothing is written."""
    problems = []
    seen = {row["bronze_batch"] for row in summary}
    for batch in sorted(set(expected) - seen):
        problems.append(f"batch {batch}: {expected[batch]} bronze records, none decoded")
    for row in summary:
        batch, records = row["bronze_batch"], row["records"]
        if records != expected.get(batch, 0):
            problems.append(f"batch {batch}: read {records} records of {expected.get(batch, 0)}")
        if records != row["decoded"] + row["quarantined"]:
            problems.append(
                f"batch {batch}: {records} records != {row['decoded']} decoded + "
                f"{row['quarantined']} quarantined"
            )
        if row["changes"] != sum(row[f"{op}s"] for op in OPS):
            problems.append(f"batch {batch}: row events with an op other than {OPS}")
        if row["quarantine_rows"] != row["quarantined"]:
            problems.append(
                f"batch {batch}: {row['quarantined']} records quarantined but "
                f"{row['quarantine_rows']} quarantine rows"
            )
    if problems:
        raise DecodeStageError("decode counts do not reconcile: " + "; ".join(problems))


# --- transforms ------------------------------------------------------------------------------


# --- executors: decoding records -------------------------------------------------------------


@dataclass(frozen=True)
class DecoderSettings:
    """What the executors need to build each topic's decoder: the topics' settings and the
    limits (plain data, pickled to the workers), and the config file, for messages."""

    topics: dict[str, TopicConfig]
    limits: Limits
    source: str

    @classmethod
    def for_config(cls, config: PipelineConfig) -> DecoderSettings:
        # Claim-check stores' credentials read here: the workers' processes may lack them.
        topics = {
            name: dataclasses.replace(topic, s3=topic.s3.resolved()) if topic.s3 else topic
            for name, topic in config.topics.items()
        }
        return cls(topics, config.limits, str(config.source))

    def fingerprint(self) -> str:
        return hashlib.sha256(pickle.dumps(self)).hexdigest()


class TopicDecoder(NamedTuple):
    """A topic's decoder and protocol, or why the topic has none (not in the config)."""

    decoder: Decoder | None
    protocol: str | None
    problem: str | None


class TopicDecoders:
    """Each topic's decoder, built on first use by the codecs factory; topics naming the same
    schema source share it (one registry client and cache per worker)."""

    def __init__(self, settings: DecoderSettings):
        self.settings = settings
        self._schema_sources: dict = {}
        self._decoders: dict[str, TopicDecoder] = {}

    def build_all(self) -> None:
        for topic in self.settings.topics:
            self.get(topic)

    def get(self, topic: str) -> TopicDecoder:
        entry = self._decoders.get(topic)
        if entry is None:
            configured = self.settings.topics.get(topic)
            if configured is not None:
                decoder = topic_decoder(configured, self.settings.limits, self._schema_sources)
                entry = TopicDecoder(decoder, configured.protocol, None)
            else:
                known = ", ".join(sorted(self.settings.topics))
                entry = TopicDecoder(
                    None,
                    None,
                    f"topic {topic!r} is not in the pipeline config {self.settings.source} "
                    f"(configured: {known}); add it with its protocol, then redecode",
                )
            self._decoders[topic] = entry
        return entry


# Decoders live as long as the Python worker (Spark reuses workers across tasks), keyed by a
# fingerprint of the settings they were built from; a few configs at most per worker.
_WORKER_DECODERS: dict[str, TopicDecoders] = {}
_WORKER_DECODERS_MAX = 8


def worker_decoders(fingerprint: str, settings: DecoderSettings) -> TopicDecoders:
    decoders = _WORKER_DECODERS.get(fingerprint)
    if decoders is None:
        if len(_WORKER_DECODERS) >= _WORKER_DECODERS_MAX:
            _WORKER_DECODERS.clear()
        decoders = _WORKER_DECODERS[fingerprint] = TopicDecoders(settings)
    return decoders


class OutputBuilder:
    """Rows of the decode output, drained after each Arrow batch. Changes, nearly all of it,
    are built column by column (silver.ChangeRows) and come out in a batch of their own; the
    few other rows are kept as dicts."""

    def __init__(self):
        self.changes = silver.ChangeRows()
        self.others: list[tuple[str, int, Any]] = []

    def add_events(self, events: list[Event], batch: int) -> None:
        """The rows of one record's events, all or none: an event whose silver row cannot be
        built raises DecodeError and leaves the output as it was."""
        changes, others = len(self.changes), len(self.others)
        try:
            for event in events:
                if isinstance(event, RowEvent):
                    self.changes.add(event, batch)
                elif isinstance(event, DdlEvent):
                    self.add(DDL, batch, silver.ddl_row(event, batch))
                else:
                    self.add(RESOLVED, batch, silver.resolved_row(event, batch))
        except MALFORMED_INPUT_ERRORS as exc:
            self.changes.truncate(changes)
            del self.others[others:]
            raise DecodeError(
                f"the silver row of its {event.kind} event cannot be built: "
                f"{type(exc).__name__}: {exc}"
            ) from exc

    def add(self, kind: str, batch: int, value: Any) -> None:
        self.others.append((kind, batch, value))

    def __len__(self) -> int:
        return len(self.changes) + len(self.others)

    def drain(self) -> list[pa.RecordBatch]:
        """The rows as DECODED_SCHEMA batches, the builder emptied: the changes' (if any), then
        the others' (if any). Apart, so the changes' nested images are never copied into one
        batch with them. The changes' buffers are emptied, not freed: the next batch's rows
        reuse their memory, where new buffers would grow and fault in pages again."""
        parts = []
        if len(self.changes):
            rows = self.changes.struct_array()
            kinds = pa.repeat(pa.scalar(CHANGE, pa.string()), len(rows))
            parts.append(_decoded(kinds, rows.field("bronze_batch"), {CHANGE: rows}))
        if self.others:
            kinds = [kind for kind, _, _ in self.others]
            batch_ids = pa.array([batch for _, batch, _ in self.others], pa.int64())
            values = {f.name: self._values_of(f) for f in DECODED_SCHEMA if f.name in kinds}
            parts.append(_decoded(pa.array(kinds, pa.string()), batch_ids, values))
        self.changes.truncate(0)
        self.others = []
        return parts

    def _values_of(self, field: pa.Field) -> pa.Array:
        """The other rows' column ``field`` (one per kind): null in the rows of other kinds."""
        values = [value if kind == field.name else None for kind, _, value in self.others]
        return pa.array(values, field.type)


def _decoded(kinds: pa.Array, batch_ids: pa.Array, values: dict[str, pa.Array]) -> pa.RecordBatch:
    """A DECODED_SCHEMA batch of these rows: nulls in the kinds' columns ``values`` lacks."""
    count = len(kinds)
    arrays = [kinds, batch_ids]
    arrays += [values.get(f.name, pa.nulls(count, f.type)) for f in list(DECODED_SCHEMA)[2:]]
    return pa.RecordBatch.from_arrays(arrays, schema=DECODED_SCHEMA)


def _too_large_ts(events: list[Event]) -> tuple[Event, int] | None:
    for event in events:
        ts = event.ts if isinstance(event, ResolvedEvent) else event.commit_ts
        if ts is not None and ts > silver.TSO_MAX:
            return event, ts
    return None


@dataclass
class PartitionDecoder:
    """The ``mapInArrow`` function: bronze record batches → decode output batches.

    Every record ends as events (possibly none) or as one quarantine row; each task ends with
    a tally per bronze batch so the driver can reconcile. A registry outage or a config error
    ends the task with one ``fatal`` row (the rest of its input is read but not decoded).
    """

    settings: DecoderSettings
    fingerprint: str

    @classmethod
    def for_config(cls, config: PipelineConfig) -> PartitionDecoder:
        settings = DecoderSettings.for_config(config)
        return cls(settings, settings.fingerprint())

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        with gc_paused():  # events and their images are many small acyclic objects
            yield from self._decode(batches)

    def _decode(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        decoders = worker_decoders(self.fingerprint, self.settings)
        tallies: dict[int, list[int]] = {}
        out = OutputBuilder()  # one per task: its buffers keep their size from batch to batch
        for batch in batches:
            fatal = self._decode_batch(batch, decoders, out, tallies)
            yield from out.drain()
            if fatal is not None:
                for _ in batches:  # read the rest of the input, so Spark can finish the task
                    pass
                batch_id, error = fatal
                message = {"error_type": type(error).__name__, "message": redact_text(str(error))}
                out.add(FATAL, batch_id, message)
                yield from out.drain()
                return
        for batch_id, (records, decoded, quarantined) in sorted(tallies.items()):
            tally = {"records": records, "decoded": decoded, "quarantined": quarantined}
            out.add(TALLY, batch_id, tally)
        yield from out.drain()

    def _decode_batch(
        self,
        batch: pa.RecordBatch,
        decoders: TopicDecoders,
        out: OutputBuilder,
        tallies: dict[int, list[int]],
    ) -> tuple[int, Exception] | None:
        """Decode one Arrow batch into ``out``; (batch id, error) if decoding cannot go on."""
        columns = [batch.column(name).to_pylist() for name in BRONZE_COLUMNS]
        for topic, partition, offset, key, value, source_file, batch_id in zip(
            *columns, strict=True
        ):
            tally = tallies.setdefault(batch_id, [0, 0, 0])
            tally[0] += 1
            entry = decoders.get(topic)
            decoder = entry.decoder
            # Most records: their rows go straight into the silver buffers, no events made.
            if decoder is not None and decoder.decode_parts_into(
                topic, partition, offset, key, value, out.changes, batch_id
            ):
                tally[1] += 1
                continue
            record = KafkaRecord(topic, partition, offset, key, value)
            try:
                events = decode_record(entry, record, source_file)
                out.add_events(events, batch_id)
            except DecodeError as error:
                tally[2] += 1
                error.located(
                    protocol=entry.protocol, topic=topic, partition=partition,
                    offset=offset, source_file=source_file,
                )  # fmt: skip
                out.add(QUARANTINE, batch_id, _quarantine_row(record, source_file, batch_id, error))
                continue
            except (SchemaRegistryUnavailableError, ConfigError) as error:
                return batch_id, error
            tally[1] += 1
        return None


@dataclass(frozen=True)
class DecodeTask:
    """The ``mapInArrow`` function of a run: the task reads the bronze splits it is given
    (``SplitReader``) and decodes them into silver files (``SilverFiles``)."""

    reader: SplitReader
    writer: SilverFiles

    def __call__(self, numbers: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return self.writer(self.reader(numbers))


@dataclass
class SilverFiles:
    """What a task does with its records: it decodes them (``PartitionDecoder``) and writes
    the silver rows to Parquet files of each planned table itself, so Spark never
    turns them into rows; it then emits one report: its files' add actions and its counts per
    bronze batch. A failing task deletes its files."""

    decoder: PartitionDecoder
    plans: dict[str, WritePlan]
    quarantined_at: dt.datetime

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        files = {name: TaskFiles(plan) for name, plan in self.plans.items()}
        counts: dict[int, dict[str, Any]] = {}
        try:
            for out in self.decoder(batches):
                _count(out, counts)
                for name, task_files in files.items():
                    rows = self._rows(out, name)
                    if rows is not None:
                        task_files.write(rows)
            adds = {name: task_files.close() for name, task_files in files.items()}
        except BaseException:
            for task_files in files.values():
                task_files.discard()
            raise
        report = json.dumps({"adds": adds, "counts": list(counts.values())})
        yield pa.RecordBatch.from_pydict({"report": [report]}, schema=REPORT_SCHEMA)

    def _rows(self, out: pa.RecordBatch, name: str) -> pa.RecordBatch | None:
        """The rows of silver table ``name`` in one decode output batch."""
        kind = _KIND_OF[name]
        mask = pc.equal(out.column("kind"), kind)
        count = pc.sum(mask).as_py() or 0
        if not count:
            return None
        column = out.column(kind)
        # Changes come in batches of their own (OutputBuilder.drain): taken whole, no copy.
        rows = pa.RecordBatch.from_struct_array(
            column if count == len(column) else column.filter(mask)
        )
        if name == "quarantine":
            stamp = pa.repeat(pa.scalar(self.quarantined_at, pa.timestamp("us", tz="UTC")),
                              rows.num_rows)  # fmt: skip
            rows = rows.append_column("quarantined_at", stamp)
        return rows


def _zero_counts(batch: int) -> dict[str, Any]:
    return {"bronze_batch": batch, **dict.fromkeys(_SUMMED, 0), FATAL: None}


def _count(out: pa.RecordBatch, counts: dict[int, dict[str, Any]]) -> None:
    """Add one decode output batch's rows to ``counts`` (bronze batch -> counts)."""
    kinds, ops = out.column("kind"), pc.struct_field(out.column(CHANGE), "op")
    keys = pa.table({"batch": out.column("bronze_batch"), "kind": kinds, "op": ops})
    grouped = keys.group_by(["batch", "kind", "op"], use_threads=False).aggregate(
        [([], "count_all")]
    )
    columns = grouped.to_pydict()
    for batch, kind, op, number in zip(
        columns["batch"], columns["kind"], columns["op"], columns["count_all"], strict=True
    ):
        row = counts.setdefault(batch, _zero_counts(batch))
        if kind == CHANGE:
            row["changes"] += number
            if op in OPS:
                row[f"{op}s"] += number
        elif kind == QUARANTINE:
            row["quarantine_rows"] += number
        elif kind in (DDL, RESOLVED):
            row[kind] += number
    rare = out.select(["kind", "bronze_batch", TALLY, FATAL])  # filtered without the images
    for row in rare.filter(pc.is_in(kinds, pa.array([TALLY, FATAL]))).to_pylist():
        counted = counts.setdefault(row["bronze_batch"], _zero_counts(row["bronze_batch"]))
        if row["kind"] == FATAL:
            counted[FATAL] = counted[FATAL] or row[FATAL]
        else:
            for name, number in row[TALLY].items():
                counted[name] += number


def decode_record(entry: TopicDecoder, record: KafkaRecord, source_file: str) -> list[Event]:
    """The record's events, or DecodeError naming the file and coordinates: undecodable bytes,
    a topic the config does not name, or a TS silver cannot hold. A registry that cannot be
    asked raises SchemaRegistryUnavailableError (or ConfigError for refused credentials)."""
    where = {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "source_file": source_file,
    }
    decoder, protocol, problem = entry
    if decoder is None:
        raise DecodeError(problem, **where)
    try:
        events = decoder.decode(record)
    except DecodeError as error:
        raise error.located(source_file=source_file) from None
    check_ddl_widths(events, decoder.settings.limits)
    too_large = _too_large_ts(events)
    if too_large is not None:
        event, ts = too_large
        raise DecodeError(
            f"{event.kind} event TS {ts} exceeds 2^63-1 (silver.TSO_MAX): no TSO is that "
            "large (it would be the year ~3100) and silver's BIGINT cannot hold it",
            protocol=protocol,
            **where,
        )
    return events


def check_ddl_widths(events: list[Event], limits: Limits) -> None:
    """LimitExceededError for a CREATE TABLE or ADD COLUMN defining more columns than
    ``limits.max_table_columns``: the record goes to quarantine, never reaching gold."""
    for event in events:
        if type(event) is DdlEvent:
            found = defined_columns(event.query, event.schema, limits.max_table_columns)
            name = qualified_name(event.schema, event.table)
            check_limit(f"DDL of {name}: its column count", limits, "max_table_columns", found)


def _quarantine_row(
    record: KafkaRecord, source_file: str, batch_id: int, error: DecodeError
) -> dict[str, Any]:
    return {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "key": record.key,
        "value": record.value,
        "source_file": source_file,
        "bronze_batch": batch_id,
        "protocol": error.protocol,
        "error": redact_text(str(error)),  # a URL's password never reaches a table
        "byte_offset": error.byte_offset,
    }


# --- re-deriving silver (backfills) ----------------------------------------------------------


def redecode(
    spark: SparkSession,
    config: PipelineConfig,
    *,
    batches: Iterable[int] | None = None,
    start_ts: int | None = None,
    end_ts: int | None = None,
) -> DecodeResult:
    """Re-derive silver for bronze batches: given, or the decoded ones touching [start_ts, end_ts].

    Bronze is immutable, so this rebuilds what ``decode`` wrote for those batches with the
    current config (after fixing a topic's protocol, say, its quarantined records decode):
    each silver table's partitions of those batches are replaced in one commit, and their
    decode-log rows are replaced. Whole batches are re-derived, never parts of one. A batch
    ``decode`` refused (landed below one already decoded) is decoded this way too.

    A TS range selects the batches holding a change, DDL or resolved event with
    start_ts <= TS <= end_ts, and those holding a quarantined record (whose TS is unknown)
    produced at or after the range's start (see CLOCK_SKEW_MS). Rerunning gives the same rows
    (new Delta versions: it is an explicit rebuild). Gold must be rebuilt afterwards.
    """
    if (batches is None) == (start_ts is None and end_ts is None):
        raise ValueError("give either batches or a TS range (start_ts, end_ts)")
    layout = LakeLayout(config.lake)
    if not delta_table_exists(layout.bronze):
        raise DecodeStageError(f"no bronze table at {layout.bronze}: nothing to redecode")
    check_topics(config)
    snapshot = open_table(layout.bronze)
    bronze_version = snapshot.version()
    if batches is None:
        if start_ts is None or end_ts is None or not 0 <= start_ts <= end_ts:
            raise ValueError(f"need 0 <= start_ts <= end_ts, not [{start_ts}, {end_ts}]")
        bronze = read_table(spark, snapshot)
        chosen = batches_in_range(spark, layout, bronze, start_ts, end_ts)
    else:
        chosen = sorted(set(batches))
    if not chosen:
        return DecodeResult(bronze_version=bronze_version, run="redecode")
    counts = batch_counts(spark, snapshot)
    expected = {batch: counts[batch] for batch in chosen if batch in counts}
    missing = [b for b in chosen if b not in expected]
    if missing:
        raise DecodeStageError(
            f"bronze batch(es) {missing} are not in bronze {layout.bronze} "
            f"(version {bronze_version})"
        )
    plans = silver_plans(layout, replace=chosen)
    records = BronzeBatches.read(snapshot, chosen)
    return _decode_and_commit(spark, config, records, expected, bronze_version, plans, "redecode")


def _decode_and_commit(spark, config, records, expected, bronze_version, plans, run_name: str):
    """Decode ``records`` and commit every silver table of the run, releasing what the run
    holds whether or not the commits succeed: the one ending of decode and redecode."""
    run = decode_batches(spark, config, records, expected, bronze_version, plans, run=run_name)
    try:
        for name in DECODE_TABLES:
            run.commit(name)
    finally:
        run.release()
    return run.result()


def batches_in_range(
    spark: SparkSession, layout: LakeLayout, bronze: DataFrame, start_ts: int, end_ts: int
) -> list[int]:
    """Decoded bronze batches that may hold events with start_ts <= TS <= end_ts."""
    found: DataFrame | None = None

    def add(ids: DataFrame) -> None:
        nonlocal found
        found = ids if found is None else found.unionByName(ids)

    for name, column in (("changes", "commit_ts"), ("ddl", "commit_ts"), ("resolved", "ts")):
        path = _path(layout, name)
        if delta_table_exists(path):
            rows = read_delta(spark, path).where(F.col(column).between(start_ts, end_ts))
            add(rows.select("bronze_batch"))
    if delta_table_exists(layout.quarantine):
        since = dt.datetime.fromtimestamp(((start_ts >> 18) - CLOCK_SKEW_MS) / 1000, dt.UTC)
        quarantined = read_delta(spark, layout.quarantine).select(
            "topic", "partition", "offset", "bronze_batch"
        )
        stamped = bronze.select(
            "topic",
            "partition",
            "offset",
            F.col("batch_id").alias("bronze_batch"),
            "timestamp",
        )
        joined = quarantined.join(stamped, ["topic", "partition", "offset", "bronze_batch"])
        add(
            joined.where(F.col("timestamp").isNull() | (F.col("timestamp") >= F.lit(since))).select(
                "bronze_batch"
            )
        )
    if found is None:
        return []
    return sorted(row.bronze_batch for row in found.distinct().collect())
