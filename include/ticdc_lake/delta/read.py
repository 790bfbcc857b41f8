"""Delta → Spark: the rows of a table's snapshot, read by Spark's Parquet reader.

Spark cannot read Delta logs without the delta-spark jars, so delta-rs lists the snapshot's
files and Spark reads exactly those: correct after overwrites, deletes and merges, with
partition columns from the directory names (``basePath``) and the Delta schema given
explicitly (files written before a column was added lack it; Spark fills in null).

Spark is given plain local paths, never the percent-encoded URIs delta-rs reports (a lake under
``lake dir/数据`` would not be found), with Hadoop's glob characters escaped. A file of the
snapshot missing from disk is a TableFileMissingError naming it, before Spark gets to fail.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from pyspark.sql import DataFrame, SparkSession

from ticdc_lake.delta import partitions
from ticdc_lake.delta.exceptions import (
    DeltaIOError,
    TableFileMissingError,
    TableFileUnreadableError,
    UnsupportedTableError,
)
from ticdc_lake.delta.schema import TableSchema
from ticdc_lake.delta.tables import open_table, table_location, table_path
from ticdc_lake.runtime.spark_columns import named_column

if TYPE_CHECKING:  # the driver's reads import it; the tasks importing this module need not
    import pyarrow.dataset as ds


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


def snapshot_files(table: DeltaTable) -> list[str]:
    """The local paths of the snapshot's data files."""
    return [file.path for file in data_files(table)]


@dataclass(frozen=True)
class DataFile:
    path: str  # local
    size: int  # bytes
    partition: tuple[tuple[str, Any], ...] = ()  # (column, value) of a partitioned table's file


# (column, low, high): the rows a reader wants have low <= column <= high.
ValueRange = tuple[str, int, int]


def spanning(column: str, values: Iterable[int]) -> ValueRange:
    """The ValueRange of ``column`` from the least to the greatest of ``values``."""
    values = list(values)
    return column, min(values), max(values)


def data_files(table: DeltaTable, within: ValueRange | None = None) -> list[DataFile]:
    """The snapshot's data files; with ``within``, only those whose partition value or
    statistics allow a value of its column in its range (a file without them is kept: the
    reader still filters the rows).

    The log holds each path percent-encoded (RFC 3986), relative to the table; decoding it
    once gives the name on disk (partition directories keep their own ``%xx`` escapes).
    """
    location = table_location(table)
    actions = pa.table(table.get_add_actions(flatten=True))
    kept = _may_hold(actions, within) if within else [True] * actions.num_rows
    paths, sizes = actions.column("path").to_pylist(), actions.column("size_bytes").to_pylist()
    prefix = "partition."
    columns = [name for name in actions.column_names if name.startswith(prefix)]
    values = [actions.column(name).to_pylist() for name in columns]
    names = [name.removeprefix(prefix) for name in columns]
    return [
        DataFile(
            table_path(unquote(path)) if "://" in path else os.path.join(location, unquote(path)),
            size,
            tuple(zip(names, [column[row] for column in values], strict=True)),
        )
        for row, (path, size, keep) in enumerate(zip(paths, sizes, kept, strict=True))
        if keep
    ]


def _may_hold(actions: pa.Table, within: ValueRange) -> list[bool]:
    column, low, high = within
    names = actions.column_names
    if f"partition.{column}" in names:
        lows = highs = actions.column(f"partition.{column}").to_pylist()
    elif f"min.{column}" in names and f"max.{column}" in names:
        lows = actions.column(f"min.{column}").to_pylist()
        highs = actions.column(f"max.{column}").to_pylist()
    else:
        return [True] * actions.num_rows
    return [
        least is None or most is None or (least <= high and most >= low)
        for least, most in zip(lows, highs, strict=True)
    ]


def may_hold_nulls(
    table: DeltaTable, columns: Sequence[str], within: ValueRange | None = None
) -> bool:
    """Whether a file of the snapshot (of ``within``, see ``data_files``) may hold a row in
    which every one of ``columns`` is null, by the log's null counts (a file without them
    may): what a reader skipping files by their statistics would read for such rows."""
    actions = pa.table(table.get_add_actions(flatten=True))
    kept = _may_hold(actions, within) if within else [True] * actions.num_rows
    unknown = [None] * actions.num_rows
    nulls = [
        actions.column(f"null_count.{column}").to_pylist()
        if f"null_count.{column}" in actions.column_names
        else unknown
        for column in columns
    ]
    return any(
        keep and all(count is None or count > 0 for count in counts)
        for keep, counts in zip(kept, zip(*nulls, strict=True), strict=True)
    )


def missing_files(table: DeltaTable) -> list[str]:
    """The snapshot's data files that are not on disk (deleted or moved from under it)."""
    return [path for path in snapshot_files(table) if not os.path.isfile(path)]


def check_files_present(table: DeltaTable, within: ValueRange | None = None) -> list[str]:
    """The snapshot's local file paths (those of ``within``, see ``data_files``);
    TableFileMissingError when some are not on disk."""
    return [file.path for file in present_files(table, within)]


def present_files(table: DeltaTable, within: ValueRange | None = None) -> list[DataFile]:
    """``data_files``, after checking they are all on disk (TableFileMissingError)."""
    files = data_files(table, within)
    missing = [file.path for file in files if not os.path.isfile(file.path)]
    if missing:
        raise TableFileMissingError(table_location(table), missing, table.version())
    return files


def rows_in_partitions_above(table: DeltaTable, column: str, low: int) -> float:
    """How many rows the files of the partitions whose ``column`` is above ``low`` hold, by
    the log's file statistics (infinite when the log does not say): what a driver-side read of
    them would bring to the driver."""
    actions = pa.table(table.get_add_actions(flatten=True))
    if f"partition.{column}" not in actions.column_names:
        return math.inf
    values = pc.cast(actions.column(f"partition.{column}"), pa.int64())
    counts = pc.filter(actions.column("num_records"), pc.greater(values, low))
    return math.inf if counts.null_count else pc.sum(counts).as_py() or 0


def read_on_driver(table: DeltaTable, columns: list[str], where: pc.Expression) -> pa.Table:
    """The snapshot's rows that ``where`` keeps, read by delta-rs on the driver (partitions
    and row groups pruned by it), after the checks ``read_delta`` makes: for a few columns of
    a run's rows, where a Spark job's start costs seconds."""
    return _checked_dataset(table).to_table(columns=columns, filter=where)


def _checked_dataset(table: DeltaTable) -> ds.Dataset:
    """The snapshot as a pyarrow dataset, after the checks ``read_delta`` makes."""
    check_plain_files(table)
    check_files_present(table)
    return table.to_pyarrow_dataset()


@dataclass(frozen=True)
class RowGroups:
    """The row groups of a snapshot that ``where`` may hold rows of (by partition values and
    Parquet statistics), read whole on the driver, in order: a read's row numbers are the
    same whatever its columns, so a read of narrow columns can choose the rows, and a read of
    wide ones of just the row groups holding them. ``matching`` applies ``where`` to rows."""

    dataset: ds.Dataset
    where: pc.Expression
    groups: tuple[ds.ParquetFileFragment, ...]

    @classmethod
    def of(cls, table: DeltaTable, where: pc.Expression) -> RowGroups:
        """After the checks ``read_delta`` makes."""
        dataset = _checked_dataset(table)
        groups = [
            group
            for file in dataset.get_fragments(filter=where)
            for group in file.split_by_row_group(filter=where, schema=dataset.schema)
        ]
        return cls(dataset, where, tuple(groups))

    @property
    def sizes(self) -> list[int]:
        """Each row group's rows."""
        return [group.row_groups[0].num_rows for group in self.groups]

    def read(
        self,
        groups: Iterable[ds.ParquetFileFragment],
        columns: list[str],
        dictionaries: Sequence[str] = (),
    ) -> pa.Table:
        """``columns`` of every row of ``groups``, each column in one piece (pyarrow's take
        over a chunked nested column joins its pieces first, each time); the string fields
        ``dictionaries`` (paths, as ``columns.list.element.name``) dictionary-encoded, as
        Parquet holds them: read without a string per value."""
        # One dataset of the row groups: pyarrow reads them on all cores, where reading them
        # one by one took half as long again.
        from pyarrow.dataset import FileSystemDataset, ParquetFileFormat, ParquetReadOptions

        dataset, schema, file_format = self.dataset, self.dataset.schema, self.dataset.format
        if dictionaries:
            options = file_format.read_options
            file_format = ParquetFileFormat(
                read_options=ParquetReadOptions(
                    dictionary_columns=set(options.dictionary_columns) | set(dictionaries),
                    coerce_int96_timestamp_unit=options.coerce_int96_timestamp_unit,
                    binary_type=options.binary_type,
                    list_type=options.list_type,
                ),
                default_fragment_scan_options=file_format.default_fragment_scan_options,
            )
            schema = pa.schema([_dictionary_encoded(field, dictionaries) for field in schema])
        chosen = FileSystemDataset(list(groups), schema, file_format, dataset.filesystem)
        return _one_piece_each(chosen.to_table(columns=columns))

    def read_all(self, columns: list[str]) -> pa.Table:
        return self.read(self.groups, columns)

    def matching(self, rows: pa.Table) -> np.ndarray:
        """The numbers of the ``rows`` (holding the columns ``where`` names) it keeps."""
        numbered = rows.append_column("_row", pa.array(np.arange(rows.num_rows)))
        return numbered.filter(self.where).column("_row").to_numpy()


def _dictionary_encoded(field: pa.Field, paths: Sequence[str], prefix: str = "") -> pa.Field:
    """``field`` with the string fields at ``paths`` (in Parquet's naming of nested fields)
    dictionary-encoded."""
    path = f"{prefix}{field.name}"
    kind = field.type
    if pa.types.is_string(kind) and path in paths:
        return field.with_type(pa.dictionary(pa.int32(), pa.string()))
    if pa.types.is_list(kind):
        element = _dictionary_encoded(kind.value_field, paths, f"{path}.list.")
        return field.with_type(pa.list_(element))
    if pa.types.is_struct(kind):
        return field.with_type(
            pa.struct([_dictionary_encoded(child, paths, f"{path}.") for child in kind])
        )
    return field


def _one_piece_each(rows: pa.Table) -> pa.Table:
    """``rows`` with each column in one piece, joined a column at a time: memory peaks at the
    rows and one column more, not twice the rows."""
    joined = {}
    for name in rows.column_names:
        column = rows.column(name)
        joined[name] = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
        rows = rows.drop_columns([name])
    return pa.table(joined)


_FILE_IN_MESSAGE = re.compile(r"(?:file:)?/+([^\s'\"]+?\.parquet)")
# delta-rs and pyarrow name a data file by its path in its table: 'bronze_batch=1/part-….parquet'
_TABLE_FILE_IN_MESSAGE = re.compile(r"'([^\s'\"/][^\s'\"]*?\.parquet)'")


def file_problem(root: str | os.PathLike, error: BaseException) -> DeltaIOError | None:
    """What an unexpected failure of a stage says about the Delta tables under ``root``: a
    table missing data files, or the table of an unreadable file the error names; else None.

    A stage reads tables through Spark and delta-rs, which fail deep inside (an
    AnalysisException, an OSError) without naming the table or what to do.
    """
    tables = [log.parent for log in Path(table_path(root)).rglob("_delta_log")]
    for location in sorted(tables):
        try:
            table = DeltaTable(str(location))
        except Exception:  # a table whose log is unreadable: not this diagnosis
            continue
        missing = missing_files(table)
        if missing:
            return TableFileMissingError(str(location), missing, table.version())
    text = str(error)
    cause = text.strip().splitlines()[0][:300] if text.strip() else repr(error)
    for match in _FILE_IN_MESSAGE.finditer(text):
        file = Path("/" + unquote(match.group(1)))
        owner = next((t for t in tables if t in file.parents), None)
        if owner is not None:
            return TableFileUnreadableError(str(owner), str(file), cause)
    for match in _TABLE_FILE_IN_MESSAGE.finditer(text):
        for location in sorted(tables):
            file = location / unquote(match.group(1))
            if file.is_file() and file.resolve().is_relative_to(location.resolve()):
                return TableFileUnreadableError(str(location), str(file), cause)
    return None


_GLOB = re.compile(r"([\\{}\[\]*?])")


def spark_path(path: str) -> str:
    """A local path as Spark's reader takes it: Hadoop reads ``{}[]*?\\`` as a glob."""
    return _GLOB.sub(r"\\\1", path)


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
    spark: SparkSession,
    path: str | os.PathLike,
    version: int | None = None,
    *,
    within: ValueRange | None = None,
) -> DataFrame:
    """The table's rows at ``version`` (default: latest) as a DataFrame in the Delta schema.

    ``within`` (column, low, high) leaves out the files whose partition value or statistics
    rule out a row in that range, so Spark does not even open them; the DataFrame still holds
    the other rows of the files it reads: filter them.

    Raises TableNotFoundError for a missing table (see ``delta_table_exists``),
    TableFileMissingError when a data file of the snapshot is gone, and
    UnsupportedTableError for deletion vectors, column mapping or type widening.
    """
    return read_table(spark, open_table(path, version), within=within)


def read_table(
    spark: SparkSession, table: DeltaTable, *, within: ValueRange | None = None
) -> DataFrame:
    """``read_delta`` of a snapshot already open (its log is not read again)."""
    check_plain_files(table)
    schema = table_schema(table)
    spark_schema = schema.to_spark()
    files = check_files_present(table, within)
    if not files:
        return spark.createDataFrame([], spark_schema)
    reader = spark.read.schema(spark_schema)
    if schema.partition_by:
        _check_partition_paths(table, schema)
        # The files' root, as delta-rs resolved it: a path through a symlink is not theirs.
        reader = reader.option("basePath", table_location(table))
    # Spark puts partition columns last; give the table's column order back.
    return reader.parquet(*map(spark_path, files)).select(*map(named_column, schema.names))
