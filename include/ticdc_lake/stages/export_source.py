"""A Spark 4 Python data source that reads Kafka export files on the executors.

``spark.read.format("ticdc_kafka_exports").option("files", json).load()`` reads the export
files listed in ``files`` (see ``ExportFile``) with ``ticdc_lake.exports``'s rules, one Spark
partition per file (uncompressed Parquet: per run of row groups; large uncompressed JSON Lines:
per line-aligned byte range; so one large file still uses every core), and yields Arrow
batches of ``EXPORT_ROWS_SCHEMA``:

- a **record** row per Kafka record (``error`` null): coordinates, timestamp, key, value,
  headers, which file it came from (``file_index``) and its ``position`` in that file;
- an **error** row per line, row or file ``exports`` could not read (``error`` set, with the
  1-based ``line`` when known, whatever coordinates could be read, and the raw line), so that
  nothing is dropped silently and the rest of the file still lands.

``file_index`` and ``position`` order the rows as the files were listed and as each file holds
them, which is how the land stage decides which copy of a re-exported record came first.

Spark-Kafka Parquet files (the bulk of a landing area) are converted column-wise with Arrow
compute; JSON Lines, kcat, Avro containers and whole-file-compressed files go through
``exports.read_export`` (byte ranges: its line parser) record by record.
"""

from __future__ import annotations

import gc
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from ticdc_lake import exports
from ticdc_lake.records import KafkaRecord

SOURCE_NAME = "ticdc_kafka_exports"

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
ARROW_SCHEMA = to_arrow_schema(EXPORT_ROWS_SCHEMA, timezone="UTC")


# Rows per Arrow batch handed to Spark, and the uncompressed Parquet bytes per Spark partition.
BATCH_ROWS = 16_384
SPLIT_BYTES = 64 * 1024 * 1024

_INT32_MAX = 2**31 - 1
# Without these a Parquet file is not a Spark Kafka export (the others may be absent).
_REQUIRED_COLUMNS = ("key", "value", "topic", "partition", "offset")


@dataclass(frozen=True)
class ExportFile:
    """One file of a land batch, as the driver saw it when planning."""

    path: str
    size: int
    mtime_ns: int
    layout: str  # parquet | jsonl | avro ("jsonl" covers kcat) | unknown (unreadable)
    compression: str  # none | gz | zstd


def describe_file(path: str) -> ExportFile:
    """Stat a file and tell its layout from its bytes (cheap: only the first bytes are read)."""
    stat = os.stat(path)
    try:
        layout, compression = exports.detect_format(path)
    # exports' own list of what reading a corrupt file raises (zlib, zstd, Arrow, ...).
    except (OSError, *exports._CORRUPT_FILE_ERRORS):
        # The reader reports an unreadable file as an error row; planning must not fail on it.
        layout, compression = "unknown", "none"
    return ExportFile(path, stat.st_size, stat.st_mtime_ns, layout, compression)


class ExportPartition(InputPartition):
    """A whole file; or row groups [start, stop) of a Parquet file, whose first row is row
    ``first_row`` (0-based) of the file; or bytes [start, end) (end None: to the end) of a
    JSON Lines file, starting at line ``first_line`` (1-based)."""

    def __init__(
        self,
        file_index: int,
        file: ExportFile,
        row_groups: tuple[int, int] | None = None,
        first_row: int = 0,
        byte_range: tuple[int, int | None] | None = None,
        first_line: int = 1,
    ):
        super().__init__((file_index, file.path, row_groups, byte_range))
        self.file_index = file_index
        self.file = file
        self.row_groups = row_groups
        self.first_row = first_row
        self.byte_range = byte_range
        self.first_line = first_line
        self.coordinates_only = False  # Parquet: read topic, partition, offset only


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
        with open(file.path, "rb") as stream:
            while True:
                stream.seek(start)
                chunk = stream.read(SPLIT_BYTES)
                # Up to the end of the line the split falls in.
                rest = stream.readline() if len(chunk) == SPLIT_BYTES else b""
                end = start + len(chunk) + len(rest)
                last = len(chunk) < SPLIT_BYTES or not stream.read(1)
                byte_range = (start, None if last else end)  # the last one reads to the end
                parts.append(ExportPartition(index, file, byte_range=byte_range, first_line=line))
                if last:
                    return parts
                start, line = end, line + chunk.count(b"\n") + rest.count(b"\n")
    except OSError:
        return [ExportPartition(index, file)]  # the reader reports what is wrong with it


def _parquet_partitions(index: int, file: ExportFile) -> list[ExportPartition]:
    try:
        metadata = pq.ParquetFile(file.path).metadata
    except (OSError, pa.ArrowException):
        return [ExportPartition(index, file)]  # the reader reports what is wrong with it
    if metadata.num_row_groups <= 1:
        return [ExportPartition(index, file)]
    parts, start, first_row, rows, size = [], 0, 0, 0, 0
    for group in range(metadata.num_row_groups):
        size += metadata.row_group(group).total_byte_size
        rows += metadata.row_group(group).num_rows
        if size >= SPLIT_BYTES or group == metadata.num_row_groups - 1:
            parts.append(ExportPartition(index, file, (start, group + 1), first_row))
            start, first_row, size = group + 1, first_row + rows, 0
            rows = 0
    return parts


# --- reading ----------------------------------------------------------------------------------


def read_partition(partition: ExportPartition) -> Iterator[pa.RecordBatch]:
    """The record and error rows of one partition, as batches of ``ARROW_SCHEMA``."""
    file = partition.file
    # The record-by-record layouts allocate millions of small acyclic objects; the cyclic
    # GC's scans over them cost more than the parsing (measured: 2.4 s against 1.0 s).
    enabled = gc.isenabled()
    gc.disable()
    try:
        if partition.byte_range is not None:
            yield from _batches(partition, _json_range_items(partition))
        elif file.layout == "parquet" and file.compression == "none":
            yield from _ParquetRows(partition).batches()
        else:
            yield from _batches(partition, _export_items(partition))
    finally:
        if enabled:
            gc.enable()


class _ParquetRows:
    """Spark-Kafka Parquet rows converted column by column (no Python object per record)."""

    def __init__(self, partition: ExportPartition):
        self.partition = partition
        self.path = partition.file.path

    def batches(self) -> Iterator[pa.RecordBatch]:
        part = self.partition
        try:
            parquet = pq.ParquetFile(self.path)
            names = set(parquet.schema_arrow.names)
        except (OSError, pa.ArrowException) as exc:
            yield self._file_error(f"parquet file is corrupt or truncated: {exc}")
            return
        missing = [name for name in _REQUIRED_COLUMNS if name not in names]
        if missing:
            if part.first_row == 0:  # one report per file, not per split
                yield self._file_error(
                    f"not a Spark Kafka export: missing column(s) {', '.join(missing)}"
                )
            return
        wanted = [name for name in exports.SPARK_KAFKA_SCHEMA.names if name in names]
        if part.coordinates_only:
            wanted = ["topic", "partition", "offset"]
        groups = range(*part.row_groups) if part.row_groups else None
        row = part.first_row
        try:
            for batch in parquet.iter_batches(
                batch_size=BATCH_ROWS, row_groups=groups, columns=wanted
            ):
                yield from self._convert(batch, row)
                row += batch.num_rows
        except (OSError, pa.ArrowException) as exc:
            # Rows already yielded stay valid, as in exports.read_export.
            yield self._file_error(f"parquet file is corrupt or truncated: {exc}", row + 1)

    def _file_error(self, reason: str, line: int | None = None) -> pa.RecordBatch:
        return _error_batch(
            self.partition, [(self.partition.first_row, line, reason, None, None, None, None)]
        )

    def _convert(self, batch: pa.RecordBatch, first_row: int) -> Iterator[pa.RecordBatch]:
        columns = dict(zip(batch.schema.names, batch.columns, strict=True))
        count = batch.num_rows
        positions = pa.array(range(first_row, first_row + count), pa.int64())
        try:
            topic = _as_string(columns["topic"])
            partition = columns["partition"].cast(pa.int64())
            offset = columns["offset"].cast(pa.int64())
            converted = {
                "timestamp": _timestamps(columns.get("timestamp"), count),
                "timestamp_type": _optional_int32(columns.get("timestampType"), count),
                "key": _binary(columns.get("key"), count),
                "value": _binary(columns.get("value"), count),
                "headers": _headers(columns.get("headers"), count),
            }
        except pa.ArrowException as exc:
            # Columns of unexpected types: these rows cannot be records; say which and why.
            reason = f"rows {first_row + 1}-{first_row + count}: columns not of the Spark Kafka "
            reason += f"export types: {exc}"
            yield _error_batch(self.partition, [(first_row, first_row + 1, reason, *[None] * 4)])
            return
        valid = pc.and_(
            pc.and_(pc.is_valid(topic), pc.is_valid(offset)),
            pc.and_(
                pc.and_(pc.is_valid(partition), pc.greater_equal(offset, 0)),
                pc.and_(pc.greater_equal(partition, 0), pc.less_equal(partition, _INT32_MAX)),
            ),
        )
        valid = pc.fill_null(valid, False)
        kept = pc.sum(valid).as_py() or 0
        if kept < count:
            yield self._bad_rows(pc.invert(valid), positions, topic, partition, offset)
        if kept == 0:
            return

        def keep(array: pa.Array) -> pa.Array:
            return array if kept == count else pc.filter(array, valid)

        fields = {name: keep(array) for name, array in converted.items()}
        fields |= {
            "file_index": pa.array([self.partition.file_index] * kept, pa.int32()),
            "position": keep(positions),
            "topic": keep(topic),
            "partition": keep(partition).cast(pa.int32()),
            "offset": keep(offset),
            "line": pa.nulls(kept, pa.int64()),
            "error": pa.nulls(kept, pa.string()),
            "raw": pa.nulls(kept, pa.binary()),
        }
        yield _batch(fields)

    def _bad_rows(self, bad, positions, topic, partition, offset) -> pa.RecordBatch:
        rows = []
        for position, t, p, o in zip(
            pc.filter(positions, bad).to_pylist(),
            pc.filter(topic, bad).to_pylist(),
            pc.filter(partition, bad).to_pylist(),
            pc.filter(offset, bad).to_pylist(),
            strict=True,
        ):
            reason = "topic, partition and offset must be present"
            if p is not None and not 0 <= p <= _INT32_MAX:
                reason, p = f"`partition` must be in [0, 2^31), found {p}", None
            elif o is not None and o < 0:
                reason, o = f"`offset` must not be negative, found {o}", None
            rows.append((position, position + 1, reason, t, p, o, None))
        return _error_batch(self.partition, rows)


def _as_string(column: pa.Array) -> pa.Array:
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    return column.cast(pa.string())


def _timestamps(column: pa.Array | None, count: int) -> pa.Array:
    """Spark-Kafka ``timestamp`` as UTC microseconds; integer columns are milliseconds (as
    ``exports`` reads them); a zone-less timestamp is taken as UTC."""
    target = ARROW_SCHEMA.field("timestamp").type
    if column is None:
        return pa.nulls(count, target)
    if pa.types.is_timestamp(column.type):
        if column.type.tz is None:
            column = column.cast(pa.timestamp(column.type.unit, tz="UTC"))
        return column.cast(target, safe=False)  # ns → us truncates, as exports' ms does
    millis = column.cast(pa.int64())
    return pc.multiply(millis, 1000).cast(pa.timestamp("us")).cast(target)


def _binary(column: pa.Array | None, count: int) -> pa.Array:
    return pa.nulls(count, pa.binary()) if column is None else column.cast(pa.binary())


def _optional_int32(column: pa.Array | None, count: int) -> pa.Array:
    return pa.nulls(count, pa.int32()) if column is None else column.cast(pa.int32())


def _headers(column: pa.Array | None, count: int) -> pa.Array:
    target = ARROW_SCHEMA.field("headers").type
    if column is None:
        return pa.nulls(count, target)
    return column.cast(target)


def _batch(fields: dict[str, pa.Array]) -> pa.RecordBatch:
    arrays = [fields[f.name].cast(f.type) for f in ARROW_SCHEMA]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


ErrorRow = tuple  # (position, line, reason, topic, partition, offset, raw)


def _error_batch(partition: ExportPartition, rows: list[ErrorRow]) -> pa.RecordBatch:
    count = len(rows)
    columns = list(zip(*rows, strict=True)) if rows else [()] * 7
    position, line, reason, topic, kafka_partition, offset, raw = columns
    fields = {
        "file_index": pa.array([partition.file_index] * count, pa.int32()),
        "position": pa.array(position, pa.int64()),
        "topic": pa.array(topic, pa.string()),
        "partition": pa.array(kafka_partition, pa.int32()),
        "offset": pa.array(offset, pa.int64()),
        "timestamp": pa.nulls(count, ARROW_SCHEMA.field("timestamp").type),
        "timestamp_type": pa.nulls(count, pa.int32()),
        "key": pa.nulls(count, pa.binary()),
        "value": pa.nulls(count, pa.binary()),
        "headers": pa.nulls(count, ARROW_SCHEMA.field("headers").type),
        "line": pa.array(line, pa.int64()),
        "error": pa.array(reason, pa.string()),
        "raw": pa.array(raw, pa.binary()),
    }
    return _batch(fields)


Item = tuple[int, "KafkaRecord | exports.ExportError"]  # (position in the file, what is there)


def _batches(partition: ExportPartition, items: Iterator[Item]) -> Iterator[pa.RecordBatch]:
    """Records and errors, in batches of each kind."""
    records: list[tuple[int, KafkaRecord]] = []
    errors: list[ErrorRow] = []
    for position, item in items:
        if isinstance(item, KafkaRecord):
            records.append((position, item))
            if len(records) >= BATCH_ROWS:
                yield _record_batch(partition, records)
                records = []
        else:
            errors.append(_error_row(position, item))
            if len(errors) >= BATCH_ROWS:
                yield _error_batch(partition, errors)
                errors = []
    if records:
        yield _record_batch(partition, records)
    if errors:
        yield _error_batch(partition, errors)


def _export_items(partition: ExportPartition) -> Iterator[Item]:
    """Any layout through ``exports.read_export``: records and reported errors, in file order
    (``on_error`` runs inside the iteration, so errors come out where they were met)."""
    errors: list[exports.ExportError] = []
    position = 0
    for record in exports.read_export(partition.file.path, on_error=errors.append):
        for error in errors:
            yield position, error
            position += 1
        errors.clear()
        yield position, record
        position += 1
    for error in errors:  # reported after the last record (e.g. a truncated stream)
        yield position, error
        position += 1


def _json_range_items(partition: ExportPartition) -> Iterator[Item]:
    """The lines of one byte range of an uncompressed JSON Lines file (``jsonl`` or kcat),
    parsed by exports' line parser; positions are 0-based line numbers."""
    path = partition.file.path
    start, end = partition.byte_range
    number = partition.first_line
    try:
        with open(path, "rb") as stream:
            stream.seek(start)
            at = start
            for line in stream:
                if end is not None and at >= end:
                    break
                at += len(line)
                if line.strip():
                    yield number - 1, _parse_line(line, path, number)
                number += 1
    except OSError as exc:
        yield number - 1, exports.ExportError(f"cannot read export file: {exc}", path=path)


def _parse_line(line: bytes, path: str, number: int) -> KafkaRecord | exports.ExportError:
    # exports' private line parser: the same rules as exports.read_export, for one line.
    try:
        return exports._record_from_json_line(line)
    except exports._BadLine as bad:
        return exports.ExportError(
            bad.reason,
            path=path,
            line=number,
            topic=bad.fields.get("topic"),
            partition=bad.fields.get("partition"),
            offset=bad.fields.get("offset"),
            raw=line,
        )


def _error_row(position: int, error: exports.ExportError) -> ErrorRow:
    partition = error.partition if error.partition is not None else None
    if partition is not None and not 0 <= partition <= _INT32_MAX:
        partition = None
    offset = error.offset if error.offset is not None and 0 <= error.offset < 2**63 else None
    return (position, error.line, error.reason, error.topic, partition, offset, error.raw)


def _record_batch(
    partition: ExportPartition, items: list[tuple[int, KafkaRecord]]
) -> pa.RecordBatch:
    count = len(items)
    records = [record for _, record in items]
    fields = {
        "file_index": pa.array([partition.file_index] * count, pa.int32()),
        "position": pa.array([position for position, _ in items], pa.int64()),
        "topic": pa.array([r.topic for r in records], pa.string()),
        "partition": pa.array([r.partition for r in records], pa.int32()),
        "offset": pa.array([r.offset for r in records], pa.int64()),
        "timestamp": pa.array(
            [None if r.timestamp_ms is None else r.timestamp_ms * 1000 for r in records],
            pa.int64(),
        )
        .cast(pa.timestamp("us"))
        .cast(ARROW_SCHEMA.field("timestamp").type),
        # KafkaRecord does not carry the timestamp type: these layouts do not all say it.
        "timestamp_type": pa.nulls(count, pa.int32()),
        "key": pa.array([r.key for r in records], pa.binary()),
        "value": pa.array([r.value for r in records], pa.binary()),
        "headers": pa.array(
            [[{"key": k, "value": v} for k, v in r.headers] for r in records],
            ARROW_SCHEMA.field("headers").type,
        ),
        "line": pa.nulls(count, pa.int64()),
        "error": pa.nulls(count, pa.string()),
        "raw": pa.nulls(count, pa.binary()),
    }
    return _batch(fields)


# --- the data source --------------------------------------------------------------------------


class ExportReader(DataSourceReader):
    def __init__(self, files: list[ExportFile], coordinates_only: bool = False):
        self.files = files
        self.coordinates_only = coordinates_only

    def partitions(self) -> list[ExportPartition]:
        parts = plan_partitions(self.files)
        for part in parts:
            part.coordinates_only = self.coordinates_only
        return parts

    def read(self, partition: ExportPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)


class KafkaExportsDataSource(DataSource):
    """``spark.read.format("ticdc_kafka_exports").option("files", files_option(files))``."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        return EXPORT_ROWS_SCHEMA

    def reader(self, schema: StructType) -> ExportReader:
        if "files" not in self.options:
            raise ValueError(f"the {SOURCE_NAME} data source needs the `files` option")
        files = [ExportFile(**entry) for entry in json.loads(self.options["files"])]
        return ExportReader(files, self.options.get("coordinates_only") == "true")


def files_option(files: Sequence[ExportFile]) -> str:
    return json.dumps([asdict(file) for file in files])


def read_export_files(
    spark: SparkSession, files: Sequence[ExportFile], *, coordinates_only: bool = False
) -> DataFrame:
    """``EXPORT_ROWS_SCHEMA`` plus ``source_file`` over ``files``, read by Spark's executors.

    ``coordinates_only``: plain Parquet files give topic, partition and offset but no
    timestamp, key, value or headers (null), reading only those columns: a cheap first look
    at a batch. (Spark's Python data sources cannot prune columns themselves.) Other layouts
    are parsed whole either way, and give everything."""
    spark.dataSource.register(KafkaExportsDataSource)
    rows = (
        spark.read.format(SOURCE_NAME)
        .option("files", files_option(files))
        .option("coordinates_only", str(coordinates_only).lower())
        .load()
    )
    # The JVM looks the path up: a path string per row need not cross from Python.
    paths = F.array(*[F.lit(file.path) for file in files])
    return rows.withColumn("source_file", F.element_at(paths, F.col("file_index") + 1))
