"""Kafka export files read on Spark's executors: ``read_export_files``.

The files (see ``ExportFile``) are read with ``ticdc_lake.bronze.exports``'s rules, one Spark
partition per file (uncompressed Parquet: per run of row groups; large uncompressed JSON Lines:
per line-aligned byte range; so one large file still uses every core), by a ``mapInArrow``
function (not a Python data source, whose lookup and planning would each start a Python daemon
in a new JVM) that yields Arrow batches of ``EXPORT_ROWS_SCHEMA``:

- a **record** row per Kafka record (``error`` null): coordinates, timestamp, key, value,
  headers, which file it came from (``file_index``) and its ``position`` in that file;
- an **error** row per line, row or file ``exports`` could not read (``error`` set, with the
  1-based ``line`` when known, whatever coordinates could be read, and the raw line), so that
  nothing is dropped silently and the rest of the file still lands.

``file_index`` and ``position`` order the rows as the files were listed and as each file holds
them, which is how the land stage decides which copy of a re-exported record came first.

Spark-Kafka Parquet files (the bulk of a landing area), compressed or not, are checked and
converted column-wise by ``exports.kafka_columns``; JSON Lines, kcat and Avro containers go
through ``exports.read_export`` (byte ranges: ``exports.parse_json_line``) record by record.
Either way the rules are ``exports``' own: this module only adds positions and batches.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from ticdc_lake.bronze import exports
from ticdc_lake.limits import Limits
from ticdc_lake.records import KafkaRecord
from ticdc_lake.runtime.gc_pause import gc_paused
from ticdc_lake.storage import ObjectInfo, S3Settings

HEADERS_TYPE = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)
EXPORT_ROWS_SCHEMA = StructType(
    [
        StructField("file_index", IntegerType()),
        StructField("position", LongType()),  # 0-based row or item number inside the file
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestamp_type", IntegerType()),  # Kafka's; null when the export omits it
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("headers", HEADERS_TYPE),
        StructField("line", LongType()),  # error rows: 1-based line/row, null for a whole file
        StructField("error", StringType()),  # null for records
        StructField("raw", BinaryType()),  # error rows: the offending line, when there is one
    ]
)
# Spark compares a yielded batch's Arrow schema with exactly this one.
ARROW_SCHEMA = to_arrow_schema(EXPORT_ROWS_SCHEMA)  # timestamps in UTC


# Rows per Arrow batch handed to Spark, and the uncompressed Parquet bytes per Spark partition.
BATCH_ROWS = 16_384
SPLIT_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class ExportFile:
    """One file of a land batch, as the driver saw it when planning."""

    path: str
    size: int
    mtime_ns: int
    layout: str  # parquet | jsonl | avro ("jsonl" covers kcat) | unknown (unreadable)
    compression: str  # none | gz | zstd
    etag: str | None = None  # an s3:// object's: its content's tag when listed
    s3: S3Settings | None = None  # how an s3:// object is reached (not kept in the plan file)


def describe_file(path: str) -> ExportFile:
    """Stat a file and tell its layout from its bytes (cheap: only the first bytes are read)."""
    stat = os.stat(path)
    layout, compression = _format_of(path, None)
    return ExportFile(path, stat.st_size, stat.st_mtime_ns, layout, compression)


def describe_object(found: ObjectInfo, s3: S3Settings | None) -> ExportFile:
    """An s3:// object as listed, its layout told from its first bytes."""
    layout, compression = _format_of(found.uri, s3)
    return ExportFile(found.uri, found.size, found.mtime_ns, layout, compression, found.etag, s3)


def _format_of(path: str, s3: S3Settings | None) -> tuple[str, str]:
    try:
        return exports.detect_format(path, s3)
    except exports.CORRUPT_FILE_ERRORS:
        # The reader reports an unreadable file as an error row; planning must not fail on it.
        return "unknown", "none"


class ExportPartition:
    """A whole file; or row groups [start, stop) of a Parquet file, whose first row is row
    ``first_row`` (0-based) of the file; or bytes [start, end) (end None: to the end) of a
    JSON Lines file, starting at line ``first_line`` (1-based). ``size``: the bytes it holds
    (a Parquet file's uncompressed, when it has a footer), to share partitions out evenly."""

    def __init__(
        self,
        file_index: int,
        file: ExportFile,
        row_groups: tuple[int, int] | None = None,
        first_row: int = 0,
        byte_range: tuple[int, int | None] | None = None,
        first_line: int = 1,
        size: int | None = None,
    ):
        self.file_index = file_index
        self.file = file
        self.row_groups = row_groups
        self.first_row = first_row
        self.byte_range = byte_range
        self.first_line = first_line
        self.size = file.size if size is None else size


def plan_partitions(files: Sequence[ExportFile]) -> list[ExportPartition]:
    """One partition per file; uncompressed Parquet split into runs of row groups, large
    uncompressed JSON Lines files into line-aligned byte ranges (compressed files cannot be
    split: a gzip or zstd stream is read from its start)."""
    result: list[ExportPartition] = []
    for index, file in enumerate(files):
        if file.layout == "parquet" and file.compression == "none":
            result.extend(_parquet_partitions(index, file))
        elif file.layout == "jsonl" and file.compression == "none" and file.size > SPLIT_BYTES:
            result.extend(_json_lines_partitions(index, file))
        else:
            result.append(ExportPartition(index, file))
    return result


def _json_lines_partitions(index: int, file: ExportFile) -> list[ExportPartition]:
    """Ranges of about SPLIT_BYTES ending at line ends, with the line number each starts at
    (counting newlines reads the file once, at memory speed: error lines keep true numbers)."""
    parts, start, line = [], 0, 1
    try:
        with exports.open_regular(file.path, file.s3) as stream:
            while True:
                stream.seek(start)
                chunk = stream.read(SPLIT_BYTES)
                # Up to the end of the line the split falls in (which may be very long).
                rest, newline = _to_line_end(stream) if len(chunk) == SPLIT_BYTES else (0, 0)
                end = start + len(chunk) + rest
                last = len(chunk) < SPLIT_BYTES or not stream.read(1)
                byte_range = (start, None if last else end)  # the last one reads to the end
                parts.append(ExportPartition(index, file, byte_range=byte_range, first_line=line))
                if last:
                    return parts
                start, line = end, line + chunk.count(b"\n") + newline
    except OSError:
        return [ExportPartition(index, file)]  # the reader reports what is wrong with it


def _to_line_end(stream) -> tuple[int, int]:
    """(bytes, newlines) read up to and including the next newline, none of it kept."""
    skipped = 0
    while piece := stream.readline(1 << 20):
        skipped += len(piece)
        if piece.endswith(b"\n"):
            return skipped, 1
    return skipped, 0


def _parquet_partitions(index: int, file: ExportFile) -> list[ExportPartition]:
    try:
        metadata = pq.ParquetFile(exports.parquet_source(file.path, file.s3)).metadata
    except (OSError, pa.ArrowException):
        return [ExportPartition(index, file)]  # the reader reports what is wrong with it
    if metadata.num_row_groups <= 1:
        size = metadata.row_group(0).total_byte_size if metadata.num_row_groups else 0
        return [ExportPartition(index, file, size=size)]
    parts, start, first_row, rows, size = [], 0, 0, 0, 0
    for group in range(metadata.num_row_groups):
        size += metadata.row_group(group).total_byte_size
        rows += metadata.row_group(group).num_rows
        if size >= SPLIT_BYTES or group == metadata.num_row_groups - 1:
            parts.append(ExportPartition(index, file, (start, group + 1), first_row, size=size))
            start, first_row, size = group + 1, first_row + rows, 0
            rows = 0
    return parts


# --- reading ----------------------------------------------------------------------------------


def read_partition(
    partition: ExportPartition, limits: Limits | None = None
) -> Iterator[pa.RecordBatch]:
    """The record and error rows of one partition, as batches of ``ARROW_SCHEMA``, read
    within ``limits`` (the bounds on a line, a row group)."""
    limits = limits or Limits()
    file = partition.file
    with gc_paused():  # the record-by-record layouts make millions of small acyclic objects
        if partition.byte_range is not None:
            yield from _batches(partition, _json_range_items(partition, limits))
        elif file.layout == "parquet":
            yield from _parquet_batches(partition, limits)
        else:
            yield from _batches(partition, _export_items(partition, limits))


def _parquet_batches(part: ExportPartition, limits: Limits) -> Iterator[pa.RecordBatch]:
    """Spark-Kafka Parquet rows converted column by column (no Python object per record)."""
    path = part.file.path
    try:
        parquet = exports.open_parquet_export(path, part.file.compression, limits, part.file.s3)
    except exports.ExportError as error:
        yield _error_batch(part, [(part.first_row, error)])
        return
    except exports.CORRUPT_FILE_ERRORS as exc:
        yield _error_batch(
            part, [(part.first_row, exports.broken_file_error(path, "parquet", exc))]
        )
        return
    missing = exports.missing_columns_error(parquet, path)
    if missing is not None:
        if part.first_row == 0:  # one report per file, not per split
            yield _error_batch(part, [(part.first_row, missing)])
        return
    groups = range(*part.row_groups) if part.row_groups else None
    row = part.first_row
    batches = exports.parquet_batches(
        parquet, path, batch_rows=BATCH_ROWS, groups=groups, limits=limits
    )
    try:
        for row, rows, batch in batches:
            if isinstance(batch, exports.ExportError):
                yield _error_batch(part, [(row, batch)])
            else:
                checked = exports.kafka_columns(batch, path=path, first_row=row)
                if checked.errors:
                    yield _error_batch(part, [(e.line - 1, e) for e in checked.errors])
                if checked.records.num_rows:
                    yield _rows_batch(part, checked.records, checked.rows)
            row += rows
    except exports.CORRUPT_FILE_ERRORS as exc:
        # Rows already yielded stay valid, as in exports.read_export.
        error = exports.broken_file_error(path, "parquet", exc, done=row)
        yield _error_batch(part, [(row, error)])


def _batch(fields: dict[str, pa.Array]) -> pa.RecordBatch:
    arrays = [fields[f.name].cast(f.type) for f in ARROW_SCHEMA]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


def _rows_batch(
    partition: ExportPartition, records: pa.RecordBatch, positions: pa.Array
) -> pa.RecordBatch:
    """Record rows from a ``exports.SPARK_KAFKA_SCHEMA`` batch and their positions."""
    count = records.num_rows
    fields = {
        "file_index": pa.array([partition.file_index] * count, pa.int32()),
        "position": positions,
        "timestamp_type": records.column("timestampType"),
        "line": pa.nulls(count, pa.int64()),
        "error": pa.nulls(count, pa.string()),
        "raw": pa.nulls(count, pa.binary()),
    }
    for name in ("topic", "partition", "offset", "timestamp", "key", "value", "headers"):
        fields[name] = records.column(name)
    return _batch(fields)


def _error_batch(
    partition: ExportPartition, errors: list[tuple[int, exports.ExportError]]
) -> pa.RecordBatch:
    """Error rows: (position, error) each, keeping what coordinates the error could read."""
    count = len(errors)
    found = [error for _, error in errors]
    kafka_partitions = [
        e.partition if e.partition is not None and 0 <= e.partition < 2**31 else None for e in found
    ]
    offsets = [e.offset if e.offset is not None and 0 <= e.offset < 2**63 else None for e in found]
    fields = {
        "file_index": pa.array([partition.file_index] * count, pa.int32()),
        "position": pa.array([position for position, _ in errors], pa.int64()),
        "topic": pa.array([e.topic for e in found], pa.string()),
        "partition": pa.array(kafka_partitions, pa.int32()),
        "offset": pa.array(offsets, pa.int64()),
        "line": pa.array([e.line for e in found], pa.int64()),
        "error": pa.array([e.reason for e in found], pa.string()),
        "raw": pa.array([e.raw for e in found], pa.binary()),
    }
    for field in ARROW_SCHEMA:
        if field.name not in fields:
            fields[field.name] = pa.nulls(count, field.type)
    return _batch(fields)


Item = tuple[int, "KafkaRecord | exports.ExportError"]  # (position in the file, what is there)


def _batches(partition: ExportPartition, items: Iterator[Item]) -> Iterator[pa.RecordBatch]:
    """Records and errors, in batches of each kind."""
    records: list[tuple[int, KafkaRecord]] = []
    errors: list[tuple[int, exports.ExportError]] = []
    for position, item in items:
        if isinstance(item, KafkaRecord):
            records.append((position, item))
            if len(records) >= BATCH_ROWS:
                yield _record_batch(partition, records)
                records = []
        else:
            errors.append((position, item))
            if len(errors) >= BATCH_ROWS:
                yield _error_batch(partition, errors)
                errors = []
    if records:
        yield _record_batch(partition, records)
    if errors:
        yield _error_batch(partition, errors)


def _record_batch(
    partition: ExportPartition, items: list[tuple[int, KafkaRecord]]
) -> pa.RecordBatch:
    records = exports.records_to_arrow([record for _, record in items])
    positions = pa.array([position for position, _ in items], pa.int64())
    return _rows_batch(partition, records, positions)


def _export_items(partition: ExportPartition, limits: Limits) -> Iterator[Item]:
    """Any layout through ``exports.read_export``: records and reported errors, in file order
    (``on_error`` runs inside the iteration, so errors come out where they were met)."""
    errors: list[exports.ExportError] = []
    position = 0
    path = partition.file.path
    records = exports.read_export(path, on_error=errors.append, limits=limits, s3=partition.file.s3)
    for record in records:
        for error in errors:
            yield position, error
            position += 1
        errors.clear()
        yield position, record
        position += 1
    for error in errors:  # reported after the last record (e.g. a truncated stream)
        yield position, error
        position += 1


def _json_range_items(partition: ExportPartition, limits: Limits) -> Iterator[Item]:
    """The lines of one byte range of an uncompressed JSON Lines file (``jsonl`` or kcat),
    parsed by exports' line parser; positions are 0-based line numbers."""
    path = partition.file.path
    start, end = partition.byte_range
    max_line = limits.max_export_line_bytes
    try:
        with exports.open_regular(path, partition.file.s3) as stream:
            stream.seek(start)
            lines = exports.bounded_lines(stream, max_line)
            # The range ends at a line end: stop there (the last range reads to the end).
            left = float("inf") if end is None else end - start
            for number, line in enumerate(lines, start=partition.first_line):
                if isinstance(line, exports.LongLine):
                    left -= line.length
                    yield number - 1, line.error(path=path, number=number, limit=max_line)
                else:
                    left -= len(line)
                    if not line.isspace():
                        yield number - 1, exports.parse_json_line(line, path=path, number=number)
                if left <= 0:
                    return
    except OSError as exc:
        error = exports.ExportError(f"cannot read export file: {exc}", path=path)
        yield partition.first_line - 1, error


# --- the Spark read ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionReader:
    """The ``mapInArrow`` function of a read: a task reads the partitions whose numbers it is
    handed, in order, within the read's ``limits``."""

    partitions: tuple[ExportPartition, ...]
    limits: Limits

    def __call__(self, numbers: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in numbers:
            for number in batch.column(0).to_pylist():
                yield from read_partition(self.partitions[number], self.limits)


def read_export_files(
    spark: SparkSession,
    files: Sequence[ExportFile],
    *,
    limits: Limits | None = None,
) -> DataFrame:
    """``EXPORT_ROWS_SCHEMA`` plus ``source_file`` over ``files``, read by Spark's executors,
    one task per partition (``plan_partitions``).

    ``limits``: a JSON Lines line longer than ``max_export_line_bytes`` is an error row."""
    partitions = tuple(plan_partitions(files))
    numbers = spark.range(len(partitions), numPartitions=max(1, len(partitions)))
    rows = numbers.mapInArrow(PartitionReader(partitions, limits or Limits()), EXPORT_ROWS_SCHEMA)
    return with_source_file(rows, files)


def with_source_file(rows: DataFrame, files: Sequence[ExportFile]) -> DataFrame:
    """``source_file``: the path of the file at ``file_index`` in ``files``."""
    paths = [(index, file.path) for index, file in enumerate(files)]
    return looked_up(rows, F.col("file_index"), paths, "source_file", StringType())


def looked_up(
    rows: DataFrame, key: Column, pairs: Iterable[tuple[Any, Any]], name: str, kind: DataType
) -> DataFrame:
    """``rows`` and ``name``: the value ``pairs`` (key, value) give the row's ``key``, null for
    none. Up to LITERAL_PAIRS pairs, from arrays of literals; past them by a broadcast join."""
    pairs = list(pairs)
    if len(pairs) <= LITERAL_PAIRS:
        keys = F.array(*[F.lit(found) for found, _ in pairs])
        values = F.array(*[F.lit(value).cast(kind) for _, value in pairs])
        place = F.array_position(keys, key).cast(IntegerType())
        value = F.when(place > 0, F.element_at(values, place)) if pairs else F.lit(None)
        return rows.withColumn(name, value.cast(kind))
    key_type = rows.select(key).schema[0].dataType
    table = rows.sparkSession.createDataFrame(
        list(pairs), StructType([StructField(_LOOKUP_KEY, key_type), StructField(name, kind)])
    )
    keyed = rows.withColumn(_LOOKUP_KEY, key)
    joined = keyed.join(F.broadcast(table), _LOOKUP_KEY, "left")
    return joined.select(*rows.columns, name)


_LOOKUP_KEY = "__lookup_key"
# An array of literals takes a py4j call per element to build and array_position scans it for
# each row (2,000 export files: 4 s to build, 5 us a row); a broadcast join finds a row's value
# at once but its job costs ~0.2 s (land of the realistic 1M's 4 files: 0.4 s more).
LITERAL_PAIRS = 256
