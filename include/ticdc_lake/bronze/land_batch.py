"""One land batch: what its records are (new, duplicate, conflict), then its commits in order.

The records' coordinates and positions are cached: they answer what the batch holds. Usually
it holds each offset once and none that bronze has: then nothing is sorted and no record's
bytes are compared. Otherwise every record is classified (``classify``) by the hash of its
bytes.

A batch's plain Spark Kafka Parquet files are read by Spark's own Parquet reader
(``export_parquet``), with no Python worker: three columns wide for the coordinates, and again
whole to write the new records (cheaper than caching whole records). Until bronze's commit is
made, any failure of that read, or a file whose rows do not add up to its footer's count, makes
the batch start again with the export reader alone, whose rows are the same and which reports
a broken file row by row. The other files (JSON Lines, kcat, Avro, compressed or other
Parquet) are parsed by the export reader and cached whole, parsing being the dearer part.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import IntegerType, LongType, StringType, StructType

from ticdc_lake.bronze.export_parquet import footer_rows, read_kafka_parquet
from ticdc_lake.bronze.export_source import (
    HEADERS_TYPE,
    ExportFile,
    looked_up,
    plan_partitions,
    read_export_files,
)
from ticdc_lake.bronze.land_pass import (
    REPORT_SCHEMA,
    BronzeStamp,
    ExportsToBronze,
    PassTally,
    shares,
)
from ticdc_lake.bronze.land_tables import (
    APP_ID,
    BRONZE_PARTITION_BY,
    BRONZE_SCHEMA,
    EXPORT_ERRORS_SCHEMA,
    LANDED_FILES_SCHEMA,
    OFFSET_CONFLICTS_SCHEMA,
    OFFSET_GAPS_SCHEMA,
    OFFSET_RANGES_SCHEMA,
    LandError,
    LandPlan,
    LandTables,
    from_micros,
)
from ticdc_lake.bronze.offset_runs import (
    Runs,
    collect_runs,
    gap_rows,
    merge_runs,
    overlap_windows,
    range_rows,
    run_key,
)
from ticdc_lake.delta import merge_delta, open_table, read_delta, spanning, write_delta
from ticdc_lake.delta.files import commit_files, delete_write, discard_uncommitted
from ticdc_lake.delta.read import table_path
from ticdc_lake.delta.schema import TableSchema
from ticdc_lake.delta.write import plan_write, write_tasks
from ticdc_lake.limits import Limits

NEW, DUPLICATE, CONFLICT = "new", "duplicate", "conflict"
# Where each record is (file and position in it) and what it is (Kafka coordinates).
COORDINATES = ("file_index", "position", "topic", "partition", "offset")
# Up to this many duplicate/conflict rows are broadcast when the new records are picked out.
_BROADCAST_ROWS = 2_000_000
_PLACE = "_place"  # a parsed file's place in the batch


@dataclass
class RecordCounts:
    """What became of the records of a file, or of a batch."""

    read: int = 0  # = new + duplicates + conflicts
    new: int = 0
    duplicates: int = 0
    conflicts: int = 0
    errors: int = 0  # lines, rows or whole files not readable

    def __add__(self, other: RecordCounts) -> RecordCounts:
        pairs = zip(dataclasses.astuple(self), dataclasses.astuple(other), strict=True)
        return RecordCounts(*(mine + theirs for mine, theirs in pairs))

    def count(self, status: str, records: int) -> None:
        """Add ``records`` of a classified ``status`` (NEW, DUPLICATE, CONFLICT)."""
        field = {NEW: "new", DUPLICATE: "duplicates", CONFLICT: "conflicts"}[status]
        setattr(self, field, getattr(self, field) + records)

    def reconciles(self) -> bool:
        return self.read == self.new + self.duplicates + self.conflicts


@dataclass(frozen=True)
class BatchOutcome:
    counts: RecordCounts
    gaps: list[dict]  # the open offset gaps after the batch (rows of offset_gaps)
    reader: str  # SPARK_PARQUET, EXPORT_READER, or both with their files' counts
    # Why Spark's Parquet reader's rows were not used, when it was tried and they were not.
    reader_fallback: str = ""


SPARK_PARQUET, EXPORT_READER = "Spark's Parquet reader", "the export reader"


class SparkParquetFailed(Exception):
    """Spark's Parquet reader failed on the batch, or gave other rows than the footers say."""


def run_batch(
    spark: SparkSession, tables: LandTables, plan: LandPlan, limits: Limits | None = None
) -> BatchOutcome:
    """Read the plan's files and make its commits (those not made yet)."""
    try:
        return _run_batch(spark, tables, plan, limits, spark_parquet=True)
    except SparkParquetFailed as failed:
        outcome = _run_batch(spark, tables, plan, limits, spark_parquet=False)
        return dataclasses.replace(outcome, reader_fallback=str(failed))


def _run_batch(
    spark: SparkSession,
    tables: LandTables,
    plan: LandPlan,
    limits: Limits | None,
    spark_parquet: bool,
) -> BatchOutcome:
    commits = BatchCommits(spark, tables, plan)
    records = BatchRecords(spark, plan, limits, spark_parquet)
    try:
        old_runs = old_offset_runs(spark, tables, plan)
        with records.falling_back():
            sorted_records = land_in_one_pass(commits, records, old_runs) or sort_records(
                spark, tables, plan, records, old_runs
            )
        try:
            if not sorted_records.landed:  # else committed by the pass: no error, no conflict
                with records.falling_back():
                    commits.bronze(records.records, sorted_records)
                commits.export_errors(records.errors(), sorted_records.totals)
                commits.conflicts(records.records, sorted_records)
        finally:
            sorted_records.release()
    finally:
        records.release()
    gaps = commits.offset_runs(merge_runs(old_runs, sorted_records.new_runs))
    commits.landed_files(sorted_records.per_file)
    # The pass that landed the batch read it with the export reader in its own tasks.
    reader = EXPORT_READER if sorted_records.landed else records.reader
    return BatchOutcome(sorted_records.totals, gaps, reader)


class BatchRecords:
    """The batch's records as Spark reads them, and the cache of what it holds. The Spark
    frames are made when first used: a batch land's pass lands needs none of them."""

    def __init__(
        self, spark: SparkSession, plan: LandPlan, limits: Limits | None, spark_parquet: bool
    ):
        self.spark, self.files = spark, plan.files
        self.limits = limits or Limits()
        # Per file, the rows its footer says it holds when Spark's Parquet reader reads it.
        self.footer_rows = [footer_rows(f, limits) if spark_parquet else None for f in self.files]
        self.by_spark = [i for i, rows in enumerate(self.footer_rows) if rows is not None]
        self.parsed = [i for i, rows in enumerate(self.footer_rows) if rows is None]
        self.reader = _readers(len(self.by_spark), len(self.parsed))
        self.spark_read_only = bool(self.by_spark) and not self.parsed
        self.cached: list[DataFrame] = []

    @functools.cached_property
    def raw(self) -> DataFrame:
        # Spark prunes Parquet columns itself: the coordinates are a cheap first look, and the
        # files cheap to read again for the records.
        files = self.files
        frames = [read_kafka_parquet(self.spark, files, self.by_spark)] if self.by_spark else []
        if self.parsed or not self.by_spark:
            # Records parsed in Python: parse once, keep them. (Parsed again, a file could
            # break where its first look did not: its records would be counted, not landed.)
            parsed = [files[i] for i in self.parsed]
            rows = read_export_files(self.spark, parsed, limits=self.limits)
            # The files' places in the batch.
            places = enumerate(self.parsed)
            rows = looked_up(rows, F.col("file_index"), places, _PLACE, IntegerType())
            rows = rows.withColumn("file_index", F.col(_PLACE)).drop(_PLACE)
            self.cached.append(rows.persist(StorageLevel.MEMORY_AND_DISK))
            frames.append(rows)
        return functools.reduce(DataFrame.unionByName, frames)

    @functools.cached_property
    def records(self) -> DataFrame:
        return with_record_hash(self.raw.where(F.col("error").isNull()))

    @functools.cached_property
    def slim(self) -> DataFrame:
        slim = self.raw.select(*COORDINATES, F.col("error").isNull().alias("is_record"))
        self.cached.append(slim.persist(StorageLevel.MEMORY_AND_DISK))
        return slim

    @functools.cached_property
    def present(self) -> DataFrame:
        """The coordinates of the batch's records."""
        return self.slim.where(F.col("is_record")).drop("is_record")

    def errors(self) -> DataFrame:
        """The rows ``exports`` could not read, with why (not cached: rare, maybe long)."""
        return self.raw.where(F.col("error").isNotNull()).withColumnRenamed("error", "reason")

    def check_footers(self, per_file: list[RecordCounts], files: Sequence[ExportFile]) -> None:
        """Spark's Parquet reader gave each of its files' rows, as many as the footer says."""
        differs = self.footers_differ(per_file, files)
        if differs is not None:
            raise SparkParquetFailed(differs)

    def footers_differ(
        self, per_file: list[RecordCounts], files: Sequence[ExportFile]
    ) -> str | None:
        """The first file read for other than the rows its footer says, with both counts."""
        for counts, rows, file in zip(per_file, self.footer_rows, files, strict=True):
            read = counts.read + counts.errors
            if rows is not None and read != rows:
                return f"{file.path}: {read} rows read, its footer has {rows}"
        return None

    @contextmanager
    def falling_back(self) -> Iterator[None]:
        """Failures of Spark's Parquet reader become SparkParquetFailed (nothing is committed
        yet where this is used, so the batch can start again with the export reader)."""
        if all(rows is None for rows in self.footer_rows):
            yield
            return
        try:
            yield
        except SparkParquetFailed:
            raise
        except Exception as exc:  # any: the export reader reads again or says what is wrong
            raise SparkParquetFailed(_spark_reason(exc)) from exc

    def release(self) -> None:
        for frame in self.cached:
            frame.unpersist()


@dataclass(frozen=True)
class SortedRecords:
    """The batch's records sorted into new, duplicates and conflicts."""

    per_file: list[RecordCounts]  # by file index in the plan
    new_runs: Runs  # the offset runs of the new records
    status: DataFrame | None = None  # classify's output; None: every record is new
    landed: bool = False  # bronze's commit made already, by the pass that sorted them

    @property
    def totals(self) -> RecordCounts:
        return sum(self.per_file, RecordCounts())

    def release(self) -> None:
        if self.status is not None:
            self.status.unpersist()


def _readers(by_spark: int, parsed: int) -> str:
    if not by_spark or not parsed:
        return SPARK_PARQUET if by_spark else EXPORT_READER
    return f"{SPARK_PARQUET} ({by_spark} files) and {EXPORT_READER} ({parsed})"


def _spark_reason(exc: Exception) -> str:
    """The Spark error's own message (``[ERROR_CLASS] ...``), not py4j's "An error occurred
    while calling o464.save." nor the Java stack."""
    text = str(exc)
    found = re.search(r"\[[A-Z][A-Z_.]+\][^\n]*", text)
    line = found.group(0) if found else (text.strip().splitlines() or [type(exc).__name__])[0]
    return line.strip()[:500]


def sort_records(
    spark: SparkSession,
    tables: LandTables,
    plan: LandPlan,
    records: BatchRecords,
    old_runs: Runs,
) -> SortedRecords:
    extents, per_file = _extents(records.slim, len(plan.files))
    records.check_footers(per_file, plan.files)
    windows = overlap_windows(extents, old_runs)
    if not windows and _offsets_unique(records, extents):
        return _all_new(records, extents, per_file)
    # Which copy is which takes the records' bytes (their hashes).
    hashed = records.records.select(*COORDINATES, "record_hash")
    status = classify(hashed, _bronze_copies(spark, tables, plan, windows))
    return _summarize(status.persist(StorageLevel.MEMORY_AND_DISK), per_file, plan.batch_id)


def land_in_one_pass(
    commits: BatchCommits, records: BatchRecords, old_runs: Runs
) -> SortedRecords | None:
    """The common batch (plain Parquet files, holding new offsets, each once) sorted and
    landed by one Spark job, as a plain copy of the files would be: its tasks read the files
    with the export reader, write every record to bronze's files and tally what they wrote
    (``land_pass``). The files are committed when the tally shows every record new and every
    file read whole and clean; otherwise they are deleted and None returned, for
    ``sort_records`` to sort the batch (Spark's Parquet reader then reads it, or says why
    not). None too for a batch of other files, or already in bronze (a rerun:
    ``sort_records`` counts it)."""
    if not records.spark_read_only:
        return None
    incoming = TableSchema.from_spark(BRONZE_SCHEMA, BRONZE_PARTITION_BY)
    write = plan_write(table_path(commits.tables.bronze), incoming, **commits.version)
    if write is None:
        return None
    spark, plan = commits.spark, commits.plan
    files = plan.files
    # Whole rounds of the cores: three tasks of one size on two cores take two rounds, the
    # second on one core (the realistic 4M's land: 11.8 s).
    cores = spark.sparkContext.defaultParallelism
    needed = write_tasks(spark, commits.size_hint_bytes, write.max_file_bytes)
    tasks = shares(plan_partitions(files), cores * math.ceil(needed / cores))
    stamp = BronzeStamp(plan.batch_id, plan.landed_at_us, tuple(file.path for file in files))
    task = ExportsToBronze(tuple(tasks), records.limits, stamp, write)
    try:
        numbers = spark.range(len(tasks), numPartitions=len(tasks))
        reports = numbers.mapInArrow(task, from_arrow_schema(REPORT_SCHEMA)).collect()
        tally = PassTally.of([json.loads(row.report) for row in reports])
        extents, per_file = _extents_of(tally.cells, len(files))
        unique = False if overlap_windows(extents, old_runs) else tally.offsets_unique()
        if unique is None:  # the tasks' offset spans of a partition meet: the offsets say
            unique = _offsets_unique(records, extents)
        clean = not any(counts.errors for counts in per_file)
        if not (unique and clean and records.footers_differ(per_file, files) is None):
            delete_write(write.path, write.write_id)
            return None
        landed = _all_new(records, extents, per_file)
        commit_files(write, tally.adds)
    except BaseException:
        discard_uncommitted(write)
        raise
    return dataclasses.replace(landed, landed=True)


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


Extents = dict[tuple[str, int], tuple[int, int, int]]  # (topic, partition) -> low, high, count


def _extents(slim: DataFrame, files: int) -> tuple[Extents, list[RecordCounts]]:
    """``_extents_of`` the batch's rows. Reads the files and fills the cache."""
    rows = (
        slim.groupBy("file_index", "topic", "partition", "is_record")
        .agg(F.min("offset"), F.max("offset"), F.count(F.lit(1)))
        .collect()
    )
    return _extents_of(rows, files)


def _extents_of(rows: Iterable[Sequence], files: int) -> tuple[Extents, list[RecordCounts]]:
    """Per (topic, partition): the batch's lowest and highest offset and record count;
    per file: counts of records and of error rows. ``rows``: (file_index, topic, partition,
    is_record, lowest offset, highest, count), a key possibly in several rows."""
    extents: Extents = {}
    per_file = [RecordCounts() for _ in range(files)]
    for file_index, topic, partition, is_record, low, high, count in rows:
        counts = per_file[file_index]
        if not is_record:
            counts.errors += count
            continue
        counts.read += count
        known = extents.get((topic, partition))
        if known is not None:
            low, high, count = min(known[0], low), max(known[1], high), known[2] + count
        extents[(topic, partition)] = (low, high, count)
    return extents, per_file


def _offsets_unique(records: BatchRecords, extents: Extents) -> bool:
    """Whether no (topic, partition, offset) occurs twice in the batch."""
    if any(count > high - low + 1 for low, high, count in extents.values()):
        return False  # more records than offsets in their span
    distinct = records.present.select("topic", "partition", "offset").distinct().count()
    return distinct == sum(count for _, _, count in extents.values())


def _all_new(records: BatchRecords, extents: Extents, per_file: list[RecordCounts]):
    """Every record is new; when each partition's offsets are dense, its run is its
    [lowest, highest], known without reading anything again."""
    for counts in per_file:
        counts.new = counts.read
    if all(count == high - low + 1 for low, high, count in extents.values()):
        dense = {key: [(low, high)] for key, (low, high, _) in extents.items()}
        return SortedRecords(per_file, dense)
    # Some partition has holes: its runs take a sort (rare: holes are lost records).
    return SortedRecords(per_file, collect_runs(records.present))


def _summarize(status: DataFrame, per_file: list[RecordCounts], batch_id: int) -> SortedRecords:
    """Per file, how many records are new, duplicates and conflicts, and the contiguous
    offset runs of the new records per (topic, partition)."""
    for row in status.groupBy("file_index", "status").count().collect():
        per_file[row.file_index].count(row.status, row["count"])
    if not all(counts.reconciles() for counts in per_file):
        raise LandError(f"batch {batch_id}: record counts do not reconcile")
    has_new = any(counts.new for counts in per_file)
    new_runs = collect_runs(status.where(F.col("status") == NEW)) if has_new else {}
    return SortedRecords(per_file, new_runs, status)


def old_offset_runs(spark: SparkSession, tables: LandTables, plan: LandPlan) -> Runs:
    """Bronze's offset runs as the batch was planned against."""
    if plan.rebuild_ranges:
        bronze = read_delta(spark, tables.bronze, plan.versions["bronze"])
        return collect_runs(bronze)  # a full scan of three columns, once
    runs: Runs = {}
    for row in _rows_at_plan(tables.offset_ranges, "offset_ranges", plan):
        runs.setdefault((row["topic"], row["partition"]), []).append(
            (row["from_offset"], row["to_offset"])
        )
    return {key: sorted(value) for key, value in runs.items()}


def _bronze_copies(
    spark: SparkSession, tables: LandTables, plan: LandPlan, windows: dict
) -> DataFrame | None:
    """Bronze's copies of offsets the batch may hold again: only the windows where the
    batch's offsets meet bronze's runs are read, only from the files whose offset statistics
    meet the windows' (not every file bronze ever landed), and only the narrow columns."""
    version = plan.versions.get("bronze")
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
    bounds = [bound for window in windows.values() for bound in window]
    return (
        read_delta(spark, tables.bronze, version, within=spanning("offset", bounds))
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


def _rows_at_plan(path: Path, name: str, plan: LandPlan) -> list[dict]:
    """A small table's rows at the version the batch was planned against."""
    version = plan.versions.get(name)
    if version is None:
        return []
    return open_table(path, version).to_pyarrow_table().to_pylist()


class BatchCommits:
    """The batch's commits, each tagged with the app transaction (land, batch id): a rerun of
    the batch skips those already made."""

    def __init__(self, spark: SparkSession, tables: LandTables, plan: LandPlan):
        self.spark = spark
        self.tables = tables
        self.plan = plan
        self.version = {"app_id": APP_ID, "version": plan.batch_id}

    @property
    def size_hint_bytes(self) -> int:
        # Bronze holds about what the files do (less for JSON Lines: base64 and field names):
        # a few large files per batch rather than one per split of every file.
        return sum(file.size for file in self.plan.files)

    def conform(
        self, frame: DataFrame, schema: StructType, keep: Sequence[str | Column] = ()
    ) -> DataFrame:
        """``frame`` with this batch's id and landing time, as exactly ``schema``'s columns
        (and ``keep``)."""
        frame = frame.withColumns(
            {"batch_id": F.lit(self.plan.batch_id), "landed_at": F.lit(self.plan.landed_at)}
        )
        return frame.select(*[F.col(f.name).cast(f.dataType) for f in schema.fields], *keep)

    def bronze(self, records: DataFrame, sorted_records: SortedRecords) -> None:
        totals = sorted_records.totals
        if totals.new == 0 or sorted_records.landed:
            return  # nothing new (no commit, no version), or committed already
        others = totals.duplicates + totals.conflicts
        if others:
            records = records.join(
                _statuses(sorted_records.status, (DUPLICATE, CONFLICT), others),
                ["file_index", "position"],
                "left_anti",
            )
        write_delta(
            self.conform(records, BRONZE_SCHEMA),
            self.tables.bronze,
            partition_by=BRONZE_PARTITION_BY,
            size_hint_bytes=self.size_hint_bytes,
            **self.version,
        )

    def export_errors(self, errors: DataFrame, totals: RecordCounts) -> None:
        if totals.errors == 0:
            return
        write_delta(
            self.conform(errors, EXPORT_ERRORS_SCHEMA), self.tables.export_errors, **self.version
        )

    def conflicts(self, records: DataFrame, sorted_records: SortedRecords) -> None:
        status = sorted_records.status
        if status is None or sorted_records.totals.conflicts == 0:
            return
        conflicts = _conflicts_with_kept_copy(self.spark, status, self.plan)
        rows = records.join(F.broadcast(conflicts), ["file_index", "position"])
        write_delta(
            self.conform(rows, OFFSET_CONFLICTS_SCHEMA),
            self.tables.offset_conflicts,
            **self.version,
        )

    def offset_runs(self, runs: Runs) -> list[dict]:
        """offset_ranges and offset_gaps brought to ``runs``; returns the gaps."""
        tables = self.tables
        # Against what the tables held when planned (not rebuilt runs): the diff must be theirs.
        old_ranges = _rows_at_plan(tables.offset_ranges, "offset_ranges", self.plan)
        old_gaps = _rows_at_plan(tables.offset_gaps, "offset_gaps", self.plan)
        gaps = gap_rows(runs, old_gaps, self.plan.batch_id)
        ranges = range_rows(runs)
        _sync_runs(tables.offset_ranges, OFFSET_RANGES_SCHEMA, old_ranges, ranges, self.version)
        _sync_runs(tables.offset_gaps, OFFSET_GAPS_SCHEMA, old_gaps, gaps, self.version)
        return gaps

    def landed_files(self, per_file: list[RecordCounts]) -> None:
        """Last: the batch is done once its files are recorded."""
        # A handful of rows: a delta-rs commit from the driver (each row is a new key).
        merge_delta(
            pa.Table.from_pylist(_landed_file_rows(self.plan, per_file), LANDED_FILES_SCHEMA),
            self.tables.landed_files,
            ["path", "batch_id"],
            **self.version,
        )


def _conflicts_with_kept_copy(spark: SparkSession, status: DataFrame, plan: LandPlan) -> DataFrame:
    """(file_index, position) of the batch's conflicts, and where the copy kept is."""
    first_files = spark.createDataFrame(
        [(i, f.path) for i, f in enumerate(plan.files)],
        "first_file int, first_source_file string",
    )
    in_bronze = F.col("kept_record_hash").isNotNull()
    # The copy kept is bronze's when bronze had one, else the batch's first.
    return (
        status.where(F.col("status") == CONFLICT)
        .join(F.broadcast(first_files), "first_file")
        .select(
            "file_index",
            "position",
            F.when(in_bronze, F.col("kept_batch_id"))
            .otherwise(F.lit(plan.batch_id))
            .alias("kept_batch_id"),
            F.when(in_bronze, F.col("kept_source_file"))
            .otherwise(F.col("first_source_file"))
            .alias("kept_source_file"),
            F.when(in_bronze, F.col("kept_record_hash"))
            .otherwise(F.col("first_hash"))
            .alias("kept_record_hash"),
        )
    )


def _sync_runs(
    path: Path, schema: pa.Schema, old: list[dict], new: list[dict], app_version: dict
) -> None:
    """Make the small table at ``path`` (keyed by topic, partition, from_offset) hold
    ``new`` instead of ``old``: one delta-rs merge of the changed rows on the driver, no
    Spark job; nothing at all when nothing changed."""
    before = {run_key(row): row for row in old}
    after = {run_key(row): row for row in new}
    changes = [row | {"deleted": False} for k, row in after.items() if before.get(k) != row]
    changes += [row | {"deleted": True} for k, row in before.items() if k not in after]
    if not changes:
        return
    merge_delta(
        pa.Table.from_pylist(changes, schema.append(pa.field("deleted", pa.bool_()))),
        path,
        ["topic", "partition", "from_offset"],
        delete_column="deleted",
        **app_version,
    )


def _landed_file_rows(plan: LandPlan, per_file: list[RecordCounts]) -> list[dict]:
    """The landed_files rows of the batch: per file, what became of its records."""
    return [
        {
            "path": file.path,
            "size": file.size,
            "modification_time": from_micros(file.mtime_ns // 1000),
            "layout": file.layout,
            "file_compression": file.compression,
            "batch_id": plan.batch_id,
            "records_read": counts.read,
            "records_added": counts.new,
            "duplicates": counts.duplicates,
            "conflicts": counts.conflicts,
            "errors": counts.errors,
            "landed_at": plan.landed_at,
            "etag": file.etag,
        }
        for file, counts in zip(plan.files, per_file, strict=True)
    ]


def _statuses(status: DataFrame, kinds: Sequence[str], expected: int) -> DataFrame:
    """(file_index, position) of records with the given statuses, broadcast when small."""
    keys = status.where(F.col("status").isin(list(kinds))).select("file_index", "position")
    return F.broadcast(keys) if expected <= _BROADCAST_ROWS else keys
