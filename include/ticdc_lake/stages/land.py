"""Land: new Kafka export files from the landing area → bronze (issue 3, stage 1).

    land(spark, config) -> LandResult

Every run that finds something to land is one **batch** (ids 1, 2, 3, ...): the files matched
by ``config.inputs`` that are new, or changed since they were landed, are read by Spark's
executors (``export_source``) and their records appended to bronze. Matching stays inside the
folders the patterns name and takes regular files only (``land_inputs``); the matches refused
are counted, and listed, in the result. Tables, all under
``<lake>/bronze/``, each at ``LakeLayout.<name>`` (``records`` at ``LakeLayout.bronze``):

- ``records``, partitioned by ``topic``: one row per
  (topic, partition, offset) ever landed (``BRONZE_SCHEMA``). Partitioned by topic because
  every later stage works topic by topic (each topic has its own protocol), a re-export
  overlaps only its own topic, and topics are few, so a batch writes few files. Not by Kafka
  partition or by batch: either would multiply small files with every run.
- ``landed_files``: per file and batch, its size and modification
  time when planned and what became of its records. A file whose latest entry matches its
  current size and time is skipped without being opened; a file changed at the same path
  (appended to, rewritten) is read again whole, and the offset dedup keeps bronze right.
- ``export_errors``: every line, row or file ``exports`` could not read: file, line, reason,
  whatever coordinates could be read and the raw line. The rest of the file lands.
- ``offset_conflicts``: records whose (topic, partition, offset) was already landed, or came
  earlier in the batch, with *different* bytes (key, value or headers). The first copy stays
  in bronze; the other is kept here, whole, beside where the first one came from.
- ``offset_ranges``: per (topic, partition), the contiguous runs of offsets bronze holds.
- ``offset_gaps``: offsets missing between landed records of a
  partition (``from_offset``..``to_offset`` inclusive, ``size``) and the batch that first saw
  the gap. Derived from ``offset_ranges`` and the batch's new offsets: no bronze scan.

Deduplication: each (topic, partition, offset) is landed once. Within a batch the first copy
wins (files in planned order, oldest modification time first, then path; rows in file order);
against bronze, the landed copy wins. A later copy with the same bytes is a duplicate, one with
other bytes a conflict. Bronze keeps a 64-bit hash of each record's bytes (``record_hash``), so
the comparison reads a few narrow columns of bronze, and only in the offset windows where
``offset_ranges`` says the batch overlaps bronze: a batch of new offsets never reads bronze.

Idempotency and crashes: a batch is planned first (its files with their size and time, the
versions of the tables it reads, its landing time) and the plan saved (``layout.land_plan``). The
commits follow, each tagged with the Delta app transaction ("land", batch id): bronze,
export_errors, offset_conflicts, offset_ranges, offset_gaps, then landed_files, which marks the
batch done. A run killed anywhere in between leaves the plan behind, and the next run finishes
that same batch: it reads the same files against the same table versions (Delta time travel),
so it computes the same rows, and each commit already made is skipped by its app transaction.
A run with nothing new writes nothing and adds no Delta version. Run one land job at a time.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import os
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from ticdc_lake.config import PipelineConfig
from ticdc_lake.delta import (
    delta_table_exists,
    merge_delta,
    open_table,
    read_delta,
    write_delta,
)
from ticdc_lake.errors import TicdcLakeError
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.limits import Limits
from ticdc_lake.stages.export_source import (
    HEADERS_TYPE,
    ExportFile,
    describe_file,
    read_export_files,
)
from ticdc_lake.stages.land_inputs import discover_files

APP_ID = "land"
REFUSED_SHOWN = 20  # refused matches listed in the result (all are counted)

NEW, DUPLICATE, CONFLICT = "new", "duplicate", "conflict"

# Up to this many duplicate/conflict rows are broadcast when the new records are picked out.
_BROADCAST_ROWS = 2_000_000

BRONZE_SCHEMA = StructType(
    [
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestamp_type", IntegerType()),  # null: the export did not say
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("headers", HEADERS_TYPE),  # [] when the record has none
        StructField("record_hash", LongType()),  # xxhash64 of key, value and headers
        StructField("source_file", StringType()),
        StructField("batch_id", LongType()),
        StructField("landed_at", TimestampType()),
    ]
)
BRONZE_PARTITION_BY = ("topic",)

# The small tables land writes from the driver (Arrow → delta-rs), one row per file or run.
LANDED_FILES_SCHEMA = pa.schema(
    [
        ("path", pa.string()),
        ("size", pa.int64()),
        ("modification_time", pa.timestamp("us", tz="UTC")),
        ("layout", pa.string()),  # parquet | jsonl (also kcat) | avro | unknown
        ("file_compression", pa.string()),  # none | gz | zstd
        ("batch_id", pa.int64()),
        ("records_read", pa.int64()),  # = added + duplicates + conflicts
        ("records_added", pa.int64()),
        ("duplicates", pa.int64()),
        ("conflicts", pa.int64()),
        ("errors", pa.int64()),  # lines/rows (or the whole file) not readable
        ("landed_at", pa.timestamp("us", tz="UTC")),
    ]
)

EXPORT_ERRORS_SCHEMA = StructType(
    [
        StructField("batch_id", LongType()),
        StructField("source_file", StringType()),
        StructField("line", LongType()),  # 1-based line (JSON Lines) or row; null: whole file
        StructField("reason", StringType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("raw", BinaryType()),
        StructField("landed_at", TimestampType()),
    ]
)

OFFSET_CONFLICTS_SCHEMA = StructType(
    [
        StructField("batch_id", LongType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("source_file", StringType()),
        StructField("timestamp", TimestampType()),
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("headers", HEADERS_TYPE),
        StructField("record_hash", LongType()),
        StructField("kept_batch_id", LongType()),  # where the copy bronze holds came from
        StructField("kept_source_file", StringType()),
        StructField("kept_record_hash", LongType()),
        StructField("landed_at", TimestampType()),
    ]
)

OFFSET_RANGES_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("from_offset", pa.int64()),
        ("to_offset", pa.int64()),
        ("size", pa.int64()),
    ]
)

OFFSET_GAPS_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("from_offset", pa.int64()),  # first missing offset
        ("to_offset", pa.int64()),  # last missing offset (inclusive)
        ("size", pa.int64()),
        ("batch_id", pa.int64()),  # the batch that first saw this gap
    ]
)


# Per (topic, partition): sorted, disjoint, inclusive offset runs.
Runs = dict[tuple[str, int], list[tuple[int, int]]]


class LandError(TicdcLakeError):
    """The landing area or the bronze tables are not in a state land can work from."""


@dataclass(frozen=True)
class LandTables:
    """Land's tables, from the layout."""

    bronze: Path
    landed_files: Path
    export_errors: Path
    offset_conflicts: Path
    offset_ranges: Path
    offset_gaps: Path
    plan: Path  # the pending batch's plan (not a table)

    @classmethod
    def of(cls, layout: LakeLayout) -> LandTables:
        return cls(
            bronze=layout.bronze,
            landed_files=layout.landed_files,
            export_errors=layout.export_errors,
            offset_conflicts=layout.offset_conflicts,
            offset_ranges=layout.offset_ranges,
            offset_gaps=layout.offset_gaps,
            plan=layout.land_plan,
        )

    def committed(self) -> list[Path]:
        """The tables a batch commits to, in commit order (landed_files last: batch done)."""
        return [
            self.bronze,
            self.export_errors,
            self.offset_conflicts,
            self.offset_ranges,
            self.offset_gaps,
            self.landed_files,
        ]


@dataclass(frozen=True)
class LandResult:
    batch_id: int | None  # None: nothing to land
    files_seen: int
    files_landed: int
    files_skipped: int  # unchanged since they were landed
    records_read: int
    records_added: int
    duplicates: int  # same offset, same bytes: already in bronze or earlier in the batch
    conflicts: int  # same offset, other bytes: kept in offset_conflicts
    errors: int  # unreadable lines, rows or files: kept in export_errors
    offset_gaps: int  # open gaps in bronze after this run
    missing_offsets: int  # offsets in those gaps
    files_waiting: int = 0  # new or changed, left for the next batch (after a recovery)
    # Matches never opened: outside the pattern's folder, devices, FIFOs, sockets, ...
    files_refused: int = 0
    refused: tuple[str, ...] = ()  # "path: reason" of the first REFUSED_SHOWN
    recovered: bool = False  # this run finished a batch a killed run had started
    seconds: float = 0.0

    def __str__(self) -> str:
        batch = f"batch {self.batch_id}" if self.batch_id is not None else "nothing new"
        return (
            f"land: {batch}{' (recovered)' if self.recovered else ''}: files "
            f"{self.files_landed} landed / {self.files_skipped} skipped / "
            f"{self.files_waiting} waiting / {self.files_seen} seen / "
            f"{self.files_refused} refused; records "
            f"{self.records_read} read, {self.records_added} added, "
            f"{self.duplicates} duplicates, {self.conflicts} conflicts; {self.errors} errors; "
            f"{self.offset_gaps} offset gaps ({self.missing_offsets} offsets); "
            f"{self.seconds:.1f} s"
        )

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class LandPlan:
    """A batch as decided before anything is written; a retry lands exactly this."""

    batch_id: int
    landed_at_us: int  # one landing time for the whole batch, the same on a retry
    files: tuple[ExportFile, ...]
    versions: dict[str, int | None]  # table versions the batch is computed against
    # offset_ranges is behind bronze (a killed run's plan was lost): derive the runs from
    # bronze itself, or records of that run would look new and land twice.
    rebuild_ranges: bool = False

    def to_json(self) -> str:
        data = asdict(self)
        data["files"] = [asdict(f) for f in self.files]
        return json.dumps(data, indent=1)

    @classmethod
    def from_json(cls, text: str) -> LandPlan:
        data = json.loads(text)
        return cls(
            batch_id=data["batch_id"],
            landed_at_us=data["landed_at_us"],
            files=tuple(ExportFile(**f) for f in data["files"]),
            versions=data["versions"],
            rebuild_ranges=data.get("rebuild_ranges", False),
        )

    @property
    def landed_at(self) -> dt.datetime:
        return from_micros(self.landed_at_us)


# --- the stage --------------------------------------------------------------------------------


def land(spark: SparkSession, config: PipelineConfig) -> LandResult:
    """Land the new and changed export files of ``config.inputs`` as one bronze batch."""
    started = time.perf_counter()
    tables = LandTables.of(LakeLayout(config.lake))
    # A glob reaching into the lake must not land the lake's own files.
    discovered = discover_files(config.inputs, exclude=(config.lake, config.reports))
    seen, refused = discovered.files, tuple(str(r) for r in discovered.refused)
    changed = changed_files(seen, landed_state(tables))
    plan = pending_plan(tables)
    recovered = plan is not None
    if plan is None:
        if not changed:
            gaps, missing = _gap_totals(tables)
            return LandResult(
                batch_id=None,
                files_seen=len(seen),
                files_landed=0,
                files_skipped=len(seen),
                records_read=0,
                records_added=0,
                duplicates=0,
                conflicts=0,
                errors=0,
                offset_gaps=gaps,
                missing_offsets=missing,
                files_refused=len(refused),
                refused=refused[:REFUSED_SHOWN],
                seconds=time.perf_counter() - started,
            )
        plan = plan_batch(tables, changed)
        save_plan(tables, plan)
    outcome = run_batch(spark, tables, plan, config.limits)
    tables.plan.unlink(missing_ok=True)
    planned = {f.path for f in plan.files}
    return LandResult(
        batch_id=plan.batch_id,
        files_seen=len(seen),
        files_landed=len(plan.files),
        files_skipped=len(seen) - len(changed),
        files_waiting=len([f for f in changed if f.path not in planned]),
        files_refused=len(refused),
        refused=refused[:REFUSED_SHOWN],
        recovered=recovered,
        seconds=time.perf_counter() - started,
        **outcome,
    )


# --- planning ---------------------------------------------------------------------------------


def landed_state(tables: LandTables) -> dict[str, tuple[int, int]]:
    """path → (size, modification time in µs) as of its latest landing."""
    if not delta_table_exists(tables.landed_files):
        return {}
    rows = (
        open_table(tables.landed_files)
        .to_pyarrow_table(columns=["path", "size", "modification_time", "batch_id"])
        .to_pylist()
    )
    latest: dict[str, tuple[int, tuple[int, int]]] = {}
    for row in rows:
        stamp = _micros(row["modification_time"])
        if row["path"] not in latest or row["batch_id"] > latest[row["path"]][0]:
            latest[row["path"]] = (row["batch_id"], (row["size"], stamp))
    return {path: state for path, (_, state) in latest.items()}


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _micros(stamp: dt.datetime) -> int:
    # Integer arithmetic: a float round trip can be a microsecond off, making a file "changed".
    return (stamp.replace(tzinfo=stamp.tzinfo or dt.UTC) - _EPOCH) // dt.timedelta(microseconds=1)


def from_micros(micros: int) -> dt.datetime:
    return _EPOCH + dt.timedelta(microseconds=micros)


def _table_version(path: Path) -> int | None:
    return open_table(path).version() if delta_table_exists(path) else None


def _land_version(path: Path) -> int:
    """The last batch this table recorded (Delta app transaction "land"), 0 if none."""
    if not delta_table_exists(path):
        return 0
    return open_table(path).transaction_version(APP_ID) or 0


def changed_files(seen: Iterable[str], landed: dict[str, tuple[int, int]]) -> list[ExportFile]:
    """The files not landed yet, or whose size or modification time changed since."""
    files = []
    for path in seen:
        try:
            stat = os.stat(path)
            if landed.get(path) == (stat.st_size, stat.st_mtime_ns // 1000):
                continue  # unchanged: not even opened
            files.append(describe_file(path))
        except FileNotFoundError:
            continue  # vanished since the glob: nothing to land
    return files


def plan_batch(tables: LandTables, files: Sequence[ExportFile]) -> LandPlan:
    """The next batch, over ``files``: its id, landing time and the table versions it reads."""
    # Any table may be ahead of landed_files if a killed run's plan was lost: never reuse its id.
    batch_id = max(_land_version(path) for path in tables.committed()) + 1
    # Every batch that adds records to bronze also extends offset_ranges, after it.
    stale_ranges = _land_version(tables.bronze) > _land_version(tables.offset_ranges)
    return LandPlan(
        batch_id=batch_id,
        landed_at_us=time.time_ns() // 1000,
        # Oldest first: of two copies of a record in one batch, the older export's is kept.
        files=tuple(sorted(files, key=lambda f: (f.mtime_ns, f.path))),
        versions={
            "bronze": _table_version(tables.bronze),
            "offset_ranges": _table_version(tables.offset_ranges),
            "offset_gaps": _table_version(tables.offset_gaps),
        },
        rebuild_ranges=stale_ranges,
    )


def save_plan(tables: LandTables, plan: LandPlan) -> None:
    """Write the plan atomically: a crash leaves the old file or the new one, never half."""
    tables.plan.parent.mkdir(parents=True, exist_ok=True)
    temporary = tables.plan.with_name(tables.plan.name + ".tmp")
    with open(temporary, "w") as sink:
        sink.write(plan.to_json())
        sink.flush()
        os.fsync(sink.fileno())
    os.replace(temporary, tables.plan)


def pending_plan(tables: LandTables) -> LandPlan | None:
    """The plan of a batch a killed run started and did not finish, if any."""
    if not tables.plan.exists():
        return None
    try:
        plan = LandPlan.from_json(tables.plan.read_text())
    except (ValueError, KeyError, TypeError) as exc:
        raise LandError(
            f"{tables.plan}: unreadable land plan ({exc}); if no land job is running, delete it "
            "and land again (files of the unfinished batch are then re-read and deduplicated)"
        ) from exc
    done = _land_version(tables.landed_files)
    if plan.batch_id <= done:
        tables.plan.unlink(missing_ok=True)  # finished; the run died before removing it
        return None
    if plan.batch_id != done + 1:
        raise LandError(
            f"{tables.plan} plans batch {plan.batch_id} but {tables.landed_files} ends at batch "
            f"{done}: the landed-files table lost commits"
        )
    return plan


# --- running a batch --------------------------------------------------------------------------


def run_batch(
    spark: SparkSession, tables: LandTables, plan: LandPlan, limits: Limits | None = None
) -> dict[str, int]:
    """Read the plan's files and make its commits (those not made yet); returns the counts."""
    return _Batch(spark, tables, plan, limits).run()


def with_record_hash(records: DataFrame) -> DataFrame:
    """Headers normalised (none → []) and ``record_hash``: xxhash64 of the record's bytes.

    The null flags keep (key null, value v) apart from (key v, value null): xxhash64 skips
    null inputs, so without them the two would hash alike."""
    headers = F.coalesce(F.col("headers"), F.array().cast(HEADERS_TYPE))
    return records.withColumn("headers", headers).withColumn(
        "record_hash",
        F.xxhash64(
            F.col("key").isNull(), F.col("key"), F.col("value").isNull(), F.col("value"), headers
        ),
    )


def classify(slim: DataFrame, existing: DataFrame | None) -> DataFrame:
    """``status`` (new | duplicate | conflict) of each (file_index, position) record.

    ``slim``: file_index, position, topic, partition, offset, record_hash of the batch's
    records. ``existing``: topic, partition, offset, kept_batch_id, kept_source_file,
    kept_record_hash of bronze records the batch may overlap (None: it overlaps none).
    Adds kept_record_hash, kept_batch_id, kept_source_file (bronze's copy) and first_file
    (the index of the file whose copy is first in the batch).
    """
    coordinates = ["topic", "partition", "offset"]
    first = Window.partitionBy(*coordinates).orderBy("file_index", "position")
    ranked = (
        slim.withColumn("rank", F.row_number().over(first))
        .withColumn("first_hash", F.first("record_hash").over(first))
        .withColumn("first_file", F.first("file_index").over(first))
    )
    if existing is None:
        ranked = ranked.select(
            "*",
            F.lit(None).cast(LongType()).alias("kept_record_hash"),
            F.lit(None).cast(LongType()).alias("kept_batch_id"),
            F.lit(None).cast(StringType()).alias("kept_source_file"),
        )
    else:
        ranked = ranked.join(existing, coordinates, "left")
    in_bronze = F.col("kept_record_hash").isNotNull()
    status = (
        F.when(in_bronze & (F.col("record_hash") == F.col("kept_record_hash")), F.lit(DUPLICATE))
        .when(in_bronze, F.lit(CONFLICT))
        .when(F.col("rank") == 1, F.lit(NEW))
        .when(F.col("record_hash") == F.col("first_hash"), F.lit(DUPLICATE))
        .otherwise(F.lit(CONFLICT))
    )
    return ranked.withColumn("status", status).drop("rank")


# Where each record is (file and position in it) and what it is (Kafka coordinates).
COORDINATES = ("file_index", "position", "topic", "partition", "offset")


class _Batch:
    """One batch's computation: what its records are, then the commits in order.

    The records' coordinates and positions are cached: they answer what the batch holds.
    Usually it holds each offset once and none that bronze has (``_all_new``): then nothing is
    sorted and no record's bytes are compared. Otherwise every record is classified
    (``classify``) by the hash of its bytes. Plain Parquet files are read three columns wide
    for the coordinates, and again whole to write the new records (cheaper than caching whole
    records); records parsed in Python (JSON Lines, kcat, Avro, compressed files) are cached
    whole instead, parsing being the dearer part.
    """

    def __init__(
        self, spark: SparkSession, tables: LandTables, plan: LandPlan, limits: Limits | None
    ):
        self.spark = spark
        self.tables = tables
        self.plan = plan
        self.raw = read_export_files(spark, plan.files, limits=limits)
        self.records = with_record_hash(self.raw.where(F.col("error").isNull()))
        if all(_plain_parquet(f) for f in plan.files):
            # Parquet is cheap to read again, and its coordinates alone cheaper still.
            self.cached = []
            first_look = read_export_files(spark, plan.files, coordinates_only=True)
        else:
            # Records parsed in Python: parse once, keep them.
            self.cached = [self.raw.persist(StorageLevel.MEMORY_AND_DISK)]
            first_look = self.raw
        self.slim = first_look.select(
            *COORDINATES, F.col("error").isNull().alias("is_record")
        ).persist(StorageLevel.MEMORY_AND_DISK)
        self.cached.append(self.slim)

    def run(self) -> dict[str, int]:
        try:
            extents, per_file = self._extents()
            old_ranges = self._old_ranges()
            windows = overlap_windows(extents, old_ranges)
            records = self.slim.where(F.col("is_record")).drop("is_record")
            status = None
            if not windows and self._offsets_unique(records, extents):
                totals, new_runs = self._all_new(records, extents, per_file)
            else:
                # Which copy is which takes the records' bytes (their hashes).
                hashed = self.records.select(*COORDINATES, "record_hash")
                status = classify(hashed, self._existing(windows))
                status = status.persist(StorageLevel.MEMORY_AND_DISK)
                totals, new_runs = self._summarize(status, per_file)
            try:
                self._commit_bronze(status, totals)
                self._commit_errors(totals)
                self._commit_conflicts(status, totals)
            finally:
                if status is not None:
                    status.unpersist()
        finally:
            for frame in self.cached:
                frame.unpersist()
        ranges = merge_runs(old_ranges, new_runs)
        gaps = self._commit_ranges_and_gaps(ranges)
        self._commit_landed_files(per_file)
        return {
            "records_read": totals["read"],
            "records_added": totals[NEW],
            "duplicates": totals[DUPLICATE],
            "conflicts": totals[CONFLICT],
            "errors": totals["errors"],
            "offset_gaps": len(gaps),
            "missing_offsets": sum(gap["size"] for gap in gaps),
        }

    # --- reading what the batch holds ---

    def _extents(self) -> tuple[dict, dict]:
        """Per (topic, partition): the batch's lowest and highest offset and record count;
        per file: counts of records and of error rows. Reads the files and fills the cache."""
        rows = (
            self.slim.groupBy("file_index", "topic", "partition", "is_record")
            .agg(F.min("offset"), F.max("offset"), F.count(F.lit(1)))
            .collect()
        )
        extents: dict[tuple[str, int], tuple[int, int, int]] = {}
        per_file = {i: defaultdict(int) for i in range(len(self.plan.files))}
        for file_index, topic, partition, is_record, low, high, count in rows:
            counts = per_file[file_index]
            if not is_record:
                counts["errors"] += count
                continue
            counts["read"] += count
            known = extents.get((topic, partition))
            if known is not None:
                low, high, count = min(known[0], low), max(known[1], high), known[2] + count
            extents[(topic, partition)] = (low, high, count)
        return extents, per_file

    def _offsets_unique(self, records: DataFrame, extents: dict) -> bool:
        """Whether no (topic, partition, offset) occurs twice in the batch."""
        if any(count > high - low + 1 for low, high, count in extents.values()):
            return False  # more records than offsets in their span
        distinct = records.select("topic", "partition", "offset").distinct().count()
        return distinct == sum(count for _, _, count in extents.values())

    def _all_new(self, records: DataFrame, extents: dict, per_file: dict):
        """Counts and new runs when every record is new; when each partition's offsets are
        dense, its run is its [lowest, highest], known without reading anything again."""
        totals: dict[str, int] = defaultdict(int)
        for file_counts in per_file.values():
            file_counts[NEW] = file_counts["read"]
            for kind in ("read", "errors", NEW):
                totals[kind] += file_counts[kind]
        if all(count == high - low + 1 for low, high, count in extents.values()):
            return totals, {key: [(low, high)] for key, (low, high, _) in extents.items()}
        # Some partition has holes: its runs take a sort (rare: holes are lost records).
        return totals, _collect_runs(records)

    def _old_ranges(self) -> Runs:
        if self.plan.rebuild_ranges:
            bronze = read_delta(self.spark, self.tables.bronze, self.plan.versions["bronze"])
            return _collect_runs(bronze)  # a full scan of three columns, once
        version = self.plan.versions.get("offset_ranges")
        if version is None:
            return {}
        ranges: Runs = defaultdict(list)
        table = open_table(self.tables.offset_ranges, version)
        for row in table.to_pyarrow_table().to_pylist():
            ranges[(row["topic"], row["partition"])].append((row["from_offset"], row["to_offset"]))
        return {key: sorted(runs) for key, runs in ranges.items()}

    def _existing(self, windows: dict) -> DataFrame | None:
        """Bronze's copies of offsets the batch may hold again: only the windows where the
        batch's offsets meet bronze's runs are read, and only the narrow columns."""
        version = self.plan.versions.get("bronze")
        if version is None or not windows:
            return None
        condition = F.lit(False)
        for (topic, partition), (low, high) in sorted(windows.items()):
            condition = condition | (
                (F.col("topic") == topic)
                & (F.col("partition") == partition)
                & F.col("offset").between(low, high)
            )
        topics = sorted({topic for topic, _ in windows})
        return (
            read_delta(self.spark, self.tables.bronze, version)
            .where(F.col("topic").isin(topics))  # prunes the topic directories
            .where(condition)
            .select(
                "topic",
                "partition",
                "offset",
                F.col("batch_id").alias("kept_batch_id"),
                F.col("source_file").alias("kept_source_file"),
                F.col("record_hash").alias("kept_record_hash"),
            )
        )

    def _summarize(self, status: DataFrame, per_file: dict) -> tuple[dict[str, int], Runs]:
        """Per file, how many records are new, duplicates and conflicts (added to
        ``per_file``), the batch's totals, and the contiguous offset runs of its new records
        per (topic, partition)."""
        for row in status.groupBy("file_index", "status").count().collect():
            per_file[row.file_index][row.status] += row["count"]
        totals: dict[str, int] = defaultdict(int)
        for file_counts in per_file.values():
            for kind in ("read", "errors", NEW, DUPLICATE, CONFLICT):
                totals[kind] += file_counts[kind]
            if file_counts["read"] != sum(file_counts[k] for k in (NEW, DUPLICATE, CONFLICT)):
                raise LandError(f"batch {self.plan.batch_id}: record counts do not reconcile")
        new_runs = _collect_runs(status.where(F.col("status") == NEW)) if totals[NEW] else {}
        return totals, new_runs

    # --- the commits, in order ---

    def _version_kwargs(self) -> dict:
        return {"app_id": APP_ID, "version": self.plan.batch_id}

    def _conform(self, frame: DataFrame, schema: StructType) -> DataFrame:
        """``frame`` with this batch's id and landing time, as exactly ``schema``'s columns."""
        frame = frame.withColumns(
            {"batch_id": F.lit(self.plan.batch_id), "landed_at": F.lit(self.plan.landed_at)}
        )
        return frame.select(*[F.col(f.name).cast(f.dataType) for f in schema.fields])

    def _others(self, status: DataFrame, kinds: Sequence[str], expected: int) -> DataFrame:
        """(file_index, position) of records with the given statuses, broadcast when small."""
        keys = status.where(F.col("status").isin(list(kinds))).select("file_index", "position")
        return F.broadcast(keys) if expected <= _BROADCAST_ROWS else keys

    def _commit_bronze(self, status: DataFrame | None, totals: dict[str, int]) -> None:
        if totals[NEW] == 0:
            return  # nothing new: no commit, no version
        records = self.records
        if status is not None and (totals[DUPLICATE] or totals[CONFLICT]):
            others = self._others(status, (DUPLICATE, CONFLICT), totals["read"] - totals[NEW])
            records = records.join(others, ["file_index", "position"], "left_anti")
        write_delta(
            self._conform(records, BRONZE_SCHEMA),
            self.tables.bronze,
            partition_by=BRONZE_PARTITION_BY,
            # Bronze holds about what the files do (less for JSON Lines: base64 and field
            # names): a few large files per batch rather than one per split of every file.
            size_hint_bytes=sum(file.size for file in self.plan.files),
            **self._version_kwargs(),
        )

    def _commit_errors(self, totals: dict[str, int]) -> None:
        if totals["errors"] == 0:
            return
        # Read again: error rows are not cached (they are rare, and may hold long lines).
        errors = self.raw.where(F.col("error").isNotNull()).withColumnRenamed("error", "reason")
        write_delta(
            self._conform(errors, EXPORT_ERRORS_SCHEMA),
            self.tables.export_errors,
            **self._version_kwargs(),
        )

    def _commit_conflicts(self, status: DataFrame | None, totals: dict[str, int]) -> None:
        if status is None or totals[CONFLICT] == 0:
            return
        first_files = self.spark.createDataFrame(
            [(i, f.path) for i, f in enumerate(self.plan.files)],
            "first_file int, first_source_file string",
        )
        in_bronze = F.col("kept_record_hash").isNotNull()
        # The copy kept is bronze's when bronze had one, else the batch's first.
        conflicts = (
            status.where(F.col("status") == CONFLICT)
            .join(F.broadcast(first_files), "first_file")
            .select(
                "file_index",
                "position",
                F.when(in_bronze, F.col("kept_batch_id"))
                .otherwise(F.lit(self.plan.batch_id))
                .alias("kept_batch_id"),
                F.when(in_bronze, F.col("kept_source_file"))
                .otherwise(F.col("first_source_file"))
                .alias("kept_source_file"),
                F.when(in_bronze, F.col("kept_record_hash"))
                .otherwise(F.col("first_hash"))
                .alias("kept_record_hash"),
            )
        )
        rows = self.records.join(F.broadcast(conflicts), ["file_index", "position"])
        write_delta(
            self._conform(rows, OFFSET_CONFLICTS_SCHEMA),
            self.tables.offset_conflicts,
            **self._version_kwargs(),
        )

    def _commit_ranges_and_gaps(self, ranges: Runs) -> list[dict]:
        # Against what the tables held when planned (not rebuilt runs): the diff must be theirs.
        old_ranges = self._old_rows(self.tables.offset_ranges, "offset_ranges")
        old_gaps = self._old_rows(self.tables.offset_gaps, "offset_gaps")
        gaps = gap_rows(ranges, old_gaps, self.plan.batch_id)
        self._sync(self.tables.offset_ranges, OFFSET_RANGES_SCHEMA, old_ranges, range_rows(ranges))
        self._sync(self.tables.offset_gaps, OFFSET_GAPS_SCHEMA, old_gaps, gaps)
        return gaps

    def _old_rows(self, path: Path, name: str) -> list[dict]:
        version = self.plan.versions.get(name)
        if version is None:
            return []
        return open_table(path, version).to_pyarrow_table().to_pylist()

    def _sync(self, path: Path, schema: pa.Schema, old: list[dict], new: list[dict]) -> None:
        """Make the small table at ``path`` (keyed by topic, partition, from_offset) hold
        ``new`` instead of ``old``: one delta-rs merge of the changed rows on the driver, no
        Spark job; nothing at all when nothing changed."""
        before = {_run_key(row): row for row in old}
        after = {_run_key(row): row for row in new}
        changes = [row | {"deleted": False} for k, row in after.items() if before.get(k) != row]
        changes += [row | {"deleted": True} for k, row in before.items() if k not in after]
        if not changes:
            return
        merge_delta(
            pa.Table.from_pylist(changes, schema.append(pa.field("deleted", pa.bool_()))),
            path,
            ["topic", "partition", "from_offset"],
            delete_column="deleted",
            **self._version_kwargs(),
        )

    def _commit_landed_files(self, per_file: dict) -> None:
        rows = []
        for index, file in enumerate(self.plan.files):
            counts = per_file[index]
            rows.append(
                {
                    "path": file.path,
                    "size": file.size,
                    "modification_time": from_micros(file.mtime_ns // 1000),
                    "layout": file.layout,
                    "file_compression": file.compression,
                    "batch_id": self.plan.batch_id,
                    "records_read": counts["read"],
                    "records_added": counts[NEW],
                    "duplicates": counts[DUPLICATE],
                    "conflicts": counts[CONFLICT],
                    "errors": counts["errors"],
                    "landed_at": self.plan.landed_at,
                }
            )
        # A handful of rows: a delta-rs commit from the driver (each row is a new key).
        merge_delta(
            pa.Table.from_pylist(rows, LANDED_FILES_SCHEMA),
            self.tables.landed_files,
            ["path", "batch_id"],
            **self._version_kwargs(),
        )


def _plain_parquet(file: ExportFile) -> bool:
    return file.layout == "parquet" and file.compression == "none"


def _collect_runs(records: DataFrame) -> Runs:
    """The contiguous offset runs of ``records`` (offsets unique per partition), per
    (topic, partition): gaps and islands, offset minus its rank is constant along a run."""
    order = Window.partitionBy("topic", "partition").orderBy("offset")
    rows = (
        records.select("topic", "partition", "offset")
        .withColumn("run", F.col("offset") - F.row_number().over(order))
        .groupBy("topic", "partition", "run")
        .agg(F.min("offset").alias("low"), F.max("offset").alias("high"))
        .collect()
    )
    runs: Runs = defaultdict(list)
    for row in rows:
        runs[(row.topic, row.partition)].append((row.low, row.high))
    return {key: sorted(value) for key, value in runs.items()}


def _run_key(row: dict) -> tuple:
    return row["topic"], row["partition"], row["from_offset"]


def range_rows(ranges: Runs) -> list[dict]:
    return [
        {"topic": t, "partition": p, "from_offset": a, "to_offset": b, "size": b - a + 1}
        for (t, p), runs in sorted(ranges.items())
        for a, b in runs
    ]


def gap_rows(ranges: Runs, old_gaps: list[dict], batch_id: int) -> list[dict]:
    """The gaps between consecutive runs; a gap seen before keeps the batch that first saw it."""
    first_seen = {(*_run_key(g), g["to_offset"]): g["batch_id"] for g in old_gaps}
    gaps = []
    for (topic, partition), runs in sorted(ranges.items()):
        for (_, end), (start, _) in itertools.pairwise(runs):
            low, high = end + 1, start - 1
            gaps.append(
                {
                    "topic": topic,
                    "partition": partition,
                    "from_offset": low,
                    "to_offset": high,
                    "size": high - low + 1,
                    "batch_id": first_seen.get((topic, partition, low, high), batch_id),
                }
            )
    return gaps


# --- offset runs (pure functions) -------------------------------------------------------------


def overlap_windows(
    extents: dict[tuple[str, int], tuple[int, ...]], ranges: Runs
) -> dict[tuple[str, int], tuple[int, int]]:
    """Per (topic, partition): the offset window where the batch's [low, high] meets bronze's
    runs (absent when it meets none: the batch's offsets there are all new)."""
    windows = {}
    for key, (low, high, *_) in extents.items():
        meeting = [(a, b) for a, b in ranges.get(key, ()) if a <= high and b >= low]
        if meeting:
            windows[key] = (max(low, meeting[0][0]), min(high, meeting[-1][1]))
    return windows


def merge_runs(old: Runs, new: Runs) -> Runs:
    """The union of two sets of inclusive offset runs, adjacent runs joined."""
    merged: Runs = {}
    for key in sorted(set(old) | set(new)):
        runs = sorted([*old.get(key, ()), *new.get(key, ())])
        result: list[tuple[int, int]] = []
        for low, high in runs:
            if result and low <= result[-1][1] + 1:
                result[-1] = (result[-1][0], max(result[-1][1], high))
            else:
                result.append((low, high))
        merged[key] = result
    return merged


def _gap_totals(tables: LandTables) -> tuple[int, int]:
    if not delta_table_exists(tables.offset_gaps):
        return 0, 0
    sizes = open_table(tables.offset_gaps).to_pyarrow_table(columns=["size"]).column("size")
    return len(sizes), sum(sizes.to_pylist())
