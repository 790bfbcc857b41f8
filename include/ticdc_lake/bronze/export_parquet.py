"""Spark Kafka Parquet exports read by Spark's own Parquet reader: the batches land's pass
leaves (a re-export, a repeated offset, a row without coordinates) are sorted from its rows.

``read_kafka_parquet(spark, files, indices)`` gives the rows ``export_source`` gives for those
files (``EXPORT_ROWS_SCHEMA`` plus ``source_file``) without a Python worker; ``footer_rows``
tells which files both read alike. Spark reads a file whole or fails, where the export reader
keeps the rows before a broken page: so what is read here is checked against each footer's row
count, and read again by the export reader on any difference or failure.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import BinaryType, IntegerType

from ticdc_lake.bronze import exports
from ticdc_lake.bronze.export_source import (
    EXPORT_ROWS_SCHEMA,
    ExportFile,
    looked_up,
    with_source_file,
)
from ticdc_lake.limits import Limits

# What Spark's Kafka source writes, as Spark types.
KAFKA_COLUMNS = from_arrow_schema(exports.SPARK_KAFKA_SCHEMA)

# The columns both readers take exactly alike; any other type goes to the export reader.
_ARROW_TYPES = {
    "key": pa.binary(),
    "value": pa.binary(),
    "topic": pa.string(),
    "partition": pa.int32(),
    "offset": pa.int64(),
    "timestampType": pa.int32(),
}
# Hadoop takes these for a pattern or a URI scheme; a path holding one stays with Python.
_HADOOP_SPECIAL = re.compile(r"[*?\[\]{}\\:]")
# Absolute, of parts made of a URI's unreserved characters, none of them "." or "..".
_PLAIN_PATH = re.compile(r"(?:/(?!\.\.?(?:/|$))[A-Za-z0-9._~-]+)+")
_FILE_PATH, _FOUND = "_spark_file_path", "_found_index"


def read_kafka_parquet(
    spark: SparkSession, files: Sequence[ExportFile], indices: Sequence[int]
) -> DataFrame:
    """The rows of the files at ``indices`` (each one ``footer_rows`` takes) by Spark's
    Parquet reader; ``file_index`` is the file's place in ``files``, -1 for a file Spark names
    otherwise than expected (the footer check then finds its rows missing)."""
    paths = [files[index].path for index in indices]
    read = (
        spark.read.schema(KAFKA_COLUMNS)
        # Values as stored, as pyarrow reads them, whatever the session's rebase settings.
        .option("datetimeRebaseMode", "CORRECTED")
        .option("int96RebaseMode", "CORRECTED")
        .parquet(*paths)
    )
    located = read.select(
        "*",
        F.col("_metadata.file_path").alias(_FILE_PATH),
        F.col("_metadata.row_index").alias("position"),
    )
    # Spark names each file by its qualified URI.
    places = zip(_spark_uris(spark, paths), indices, strict=True)
    located = looked_up(located, F.col(_FILE_PATH), places, _FOUND, IntegerType())
    rows = located.withColumn("file_index", F.coalesce(F.col(_FOUND), F.lit(-1))).select(
        *_export_rows(F.coalesce(_is_record(), F.lit(False)))
    )
    return with_source_file(rows, files)


def footer_rows(file: ExportFile, limits: Limits | None = None) -> int | None:
    """The row count of a plain Parquet file both readers read alike, else None: the Spark
    Kafka columns by their exact names, of the types Spark writes (``timestamp``,
    ``timestampType`` and ``headers`` may be absent, as without the Kafka source's
    ``includeHeaders``: both readers give nulls), timestamps in ms or µs of UTC (or INT96), no
    column of the same name in another case (Spark matches names regardless of case), a path
    Hadoop takes literally, and no row group past ``limits.max_parquet_row_group_bytes`` (the
    export reader reports those)."""
    if file.layout != "parquet" or file.compression != "none":
        return None
    if _HADOOP_SPECIAL.search(file.path) or not file.path.startswith("/"):
        return None
    try:
        parquet = pq.ParquetFile(file.path)
    except exports.CORRUPT_FILE_ERRORS:
        return None
    schema = parquet.schema_arrow
    names, lowered = set(schema.names), [name.lower() for name in schema.names]
    for name in exports.SPARK_KAFKA_SCHEMA.names:
        alike = lowered.count(name.lower())
        if alike != (name in names) or (name in exports.REQUIRED_COLUMNS and alike == 0):
            return None  # named only in another case, twice, or a required column missing
    if any(
        name in names and schema.field(name).type != kind for name, kind in _ARROW_TYPES.items()
    ):
        return None
    if "headers" in names and not _kafka_headers(schema.field("headers").type):
        return None
    if "timestamp" in names and not _utc_instants(parquet):
        return None
    metadata, limit = parquet.metadata, (limits or Limits()).max_parquet_row_group_bytes
    groups = (metadata.row_group(group) for group in range(metadata.num_row_groups))
    if any(group.total_byte_size > limit for group in groups):
        return None
    return metadata.num_rows


def _kafka_headers(kind: pa.DataType) -> bool:
    """list<struct<key: string, value: binary>>, whatever the list's element is named."""
    return (
        pa.types.is_list(kind)
        and kind.value_type == exports.SPARK_KAFKA_SCHEMA.field("headers").type.value_type
    )


def _utc_instants(parquet: pq.ParquetFile) -> bool:
    """The timestamp column holds INT96, or ms or µs since the epoch in UTC."""
    leaves = (parquet.schema.column(i) for i in range(parquet.metadata.num_columns))
    column = next(leaf for leaf in leaves if leaf.path == "timestamp")
    if column.physical_type == "INT96":
        return True
    logical = json.loads(column.logical_type.to_json())
    return (
        column.physical_type == "INT64"
        and logical.get("Type") == "Timestamp"
        and logical.get("isAdjustedToUTC") is True
        and logical.get("timeUnit") in ("milliseconds", "microseconds")
    )


def _spark_uris(spark: SparkSession, paths: Sequence[str]) -> list[str]:
    """``_spark_uri`` of each path. A plain path (only characters a URI path holds as they
    are, no "." or ".." part) that Hadoop qualifies as "file:" + itself tells that the others
    do too: the default file system is local and quotes nothing in them. Hadoop is asked once
    for them (2,000 files asked one by one: 8.5 s)."""
    local = None  # whether plain paths are their own URIs, once a first one was asked
    uris = []
    for path in paths:
        plain = _PLAIN_PATH.fullmatch(path) is not None
        if plain and local is None:
            local = _spark_uri(spark, path) == "file:" + path
        uris.append("file:" + path if plain and local else _spark_uri(spark, path))
    return uris


def _spark_uri(spark: SparkSession, path: str) -> str:
    """The path as Spark's ``_metadata.file_path`` gives it: the qualified path's URI built
    from its parts ("file:/a%20b", where the URI's own string is "file:///a%20b")."""
    jvm = spark.sparkContext._jvm
    hadoop = jvm.org.apache.hadoop.fs.Path(path)
    system = hadoop.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    uri = system.makeQualified(hadoop).toUri()
    return jvm.java.net.URI(
        uri.getScheme(), uri.getAuthority(), uri.getPath(), None, None
    ).toString()


def _is_record() -> Column:
    """What ``exports.kafka_columns`` keeps: a topic, a partition in [0, 2^31), an offset
    of at least 0 (the partition column is 32 bits: it cannot exceed 2^31 - 1)."""
    return F.col("topic").isNotNull() & (F.col("partition") >= 0) & (F.col("offset") >= 0)


def _export_rows(is_record: Column) -> list[Column]:
    """The columns of EXPORT_ROWS_SCHEMA: a record row, or an error row naming what is wrong
    with the coordinates as ``exports`` words it (same precedence: partition, offset, null)."""
    partition, offset = F.col("partition"), F.col("offset")
    reason = (
        F.when(partition < 0, F.concat(F.lit(exports.PARTITION_OUT_OF_RANGE), partition))
        .when(offset < 0, F.concat(F.lit(exports.NEGATIVE_OFFSET), offset))
        .otherwise(F.lit(exports.NULL_COORDINATES))
    )
    timestamp_type = F.col("timestampType")
    columns = {
        "file_index": F.col("file_index"),
        "position": F.col("position"),
        "topic": F.col("topic"),
        "partition": F.when(partition >= 0, partition),
        "offset": F.when(offset >= 0, offset),
        "timestamp": F.when(is_record, F.col("timestamp")),
        "timestamp_type": F.when(is_record & (timestamp_type != -1), timestamp_type),
        "key": F.when(is_record, F.col("key")),
        "value": F.when(is_record, F.col("value")),
        "headers": F.when(is_record, F.col("headers")),
        "line": F.when(~is_record, F.col("position") + 1),
        "error": F.when(~is_record, reason),
        "raw": F.lit(None).cast(BinaryType()),
    }
    return [
        columns[field.name].cast(field.dataType).alias(field.name) for field in EXPORT_ROWS_SCHEMA
    ]
