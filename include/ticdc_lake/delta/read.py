"""Delta → Spark: the rows of a table's snapshot, read by Spark's Parquet reader.

Spark cannot read Delta logs without the delta-spark jars, so delta-rs lists the snapshot's
files and Spark reads exactly those: correct after overwrites, deletes and merges, with
partition columns from the directory names (``basePath``) and the Delta schema given
explicitly (files written before a column was added lack it; Spark fills in null).
"""

from __future__ import annotations

import os
from urllib.parse import unquote

import pyarrow as pa
from deltalake import DeltaTable
from pyspark.sql import DataFrame, SparkSession

from ticdc_lake.delta import partitions
from ticdc_lake.delta.exceptions import DeltaIOError, TableNotFoundError, UnsupportedTableError
from ticdc_lake.delta.schema import TableSchema


def table_path(path: str | os.PathLike) -> str:
    """An absolute local path (the writer and Spark's reader work on local file systems)."""
    text = os.fspath(path)
    if text.startswith("file://"):
        text = text[len("file://") :]
    elif "://" in text:
        raise DeltaIOError(f"only local tables are supported, not {text}")
    return os.path.abspath(text)


def delta_table_exists(path: str | os.PathLike) -> bool:
    return DeltaTable.is_deltatable(table_path(path))


def open_table(path: str | os.PathLike, version: int | None = None) -> DeltaTable:
    """The table at ``path`` (at ``version``), or TableNotFoundError."""
    location = table_path(path)
    if not DeltaTable.is_deltatable(location):
        raise TableNotFoundError(location)
    return DeltaTable(location, version=version)


def check_plain_files(table: DeltaTable) -> None:
    """Refuse tables whose rows are not simply the rows of their files, by column name.

    Deletion vectors hide rows inside files; column mapping stores columns under physical
    names; type widening leaves older files with narrower types.
    """
    protocol = table.protocol()
    features = set(protocol.reader_features or []) | set(protocol.writer_features or [])
    found = []
    if "deletionVectors" in features:
        found.append("deletion vectors")
    mapping = table.metadata().configuration.get("delta.columnMapping.mode") or "none"
    if protocol.min_reader_version == 2 or "columnMapping" in features or mapping != "none":
        found.append("column mapping")
    if any(f.startswith("typeWidening") for f in features):
        found.append("type widening")
    if found:
        raise UnsupportedTableError(table.table_uri, found)


def table_schema(table: DeltaTable) -> TableSchema:
    return TableSchema.from_delta(table.schema(), table.metadata().partition_columns)


def _check_partition_paths(table: DeltaTable, schema: TableSchema) -> None:
    """Spark takes partition values from directory names; make sure they are the log's.

    Every writer we use (this package, delta-rs) lays files out as ``col=value/``; a table
    written otherwise would silently read wrong partition values, so it is refused.
    """
    actions = pa.table(table.get_add_actions(flatten=True))
    paths = actions.column("path").to_pylist()
    for column in schema.partition_by:
        values = actions.column(f"partition.{column}").to_pylist()
        for path, value in zip(paths, values, strict=True):
            found = partitions.directory_values(unquote(path)).get(column, "<absent>")
            if found != partitions.value_text(value):
                raise DeltaIOError(
                    f"file {path} of {table.table_uri} is not under {column}={value}: "
                    "its partition value cannot be read from its path"
                )


def read_delta(
    spark: SparkSession, path: str | os.PathLike, version: int | None = None
) -> DataFrame:
    """The table's rows at ``version`` (default: latest) as a DataFrame in the Delta schema.

    Raises TableNotFoundError for a missing table (see ``delta_table_exists``) and
    UnsupportedTableError for deletion vectors, column mapping or type widening.
    """
    table = open_table(path, version)
    check_plain_files(table)
    schema = table_schema(table)
    spark_schema = schema.to_spark()
    files = table.file_uris()
    if not files:
        return spark.createDataFrame([], spark_schema)
    reader = spark.read.schema(spark_schema)
    if schema.partition_by:
        _check_partition_paths(table, schema)
        reader = reader.option("basePath", table_path(path))
    # Spark puts partition columns last; give the table's column order back.
    return reader.parquet(*files).select(*schema.names)
