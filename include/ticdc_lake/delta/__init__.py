"""Delta table IO for every stage: Spark → Delta writes, Delta → Spark reads, merges.

Tables are written through delta-rs: ``write_delta`` writes a DataFrame with Spark's executors
and commits one transaction; ``read_delta`` reads a snapshot back into Spark; ``merge_delta``
upserts and deletes a change set by key on the driver; ``write_arrow`` writes a few rows from
the driver. A change set too large for the driver is merged by delta-spark on the executors
(``merge_frame``). Writes and merges are idempotent when given an ``app_id`` and ``version``.

This package is the only one that uses ``deltalake``; the rest of the pipeline imports from
here alone. Importing it loads no Spark: the functions that need Spark load it on first use
(the quality pages read tables and must not).

Tables and their log (delta-rs and pyarrow only):
    Table                          an open snapshot of a table, as ``open_table`` returns it
    delta_table_exists(path)       whether a Delta table is at ``path``
    open_table(path, version)      the table (at a version), TableNotFoundError when none
    is_latest(table)               whether no commit follows the snapshot
    spark_can_merge(names, present)  whether delta-spark merges such columns into such a table
    read_arrow(path, version, columns=, where=)  a snapshot's rows as Arrow, on the driver
    file_actions(table)            the snapshot's files: paths, sizes, partitions, statistics
    already_committed(table, app_id, version)    whether that step is in the table already
    commits_after(path, version)   the commitInfos of the versions after ``version``
    ROWS_KEY                       the commitInfo key of the rows a write or merge committed

Spark reads and what they check (on first use, Spark):
    read_delta(spark, path, version, within=)    a snapshot as a DataFrame
    read_table(spark, table, within=)            ``read_delta`` of an open snapshot
    spanning(column, values)       a ``within`` range from the least to the greatest value
    table_schema(table)            the snapshot's schema (``.to_arrow()``, ``.to_spark()``)
    read_on_driver(table, columns, where)        rows read by delta-rs, after the same checks
    RowGroups.of(table, where)     the row groups ``where`` may hold, read by chunks
    rows_in_partitions_above(table, column, low) rows above a partition value, from the log
    may_hold_nulls(table, columns, within)       whether a file may hold all-null rows there
    file_problem(root, error)      the table an unexpected failure is about, if it says

Writes (on first use, Spark):
    write_delta(df, path, mode=, ...)            a DataFrame in one commit → WriteResult
    write_arrow(rows, path, mode=, ...)          a few rows from the driver → WriteResult
    merge_delta(changes, path, keys, ...)        upserts and deletes by key → MergeResult
    merge_frame(changes, path, keys, ...)        the same on the executors, by delta-spark
    append_rows(path, rows, ...)   rows appended with no commit properties of this package's
    replace_table(table, rows, app_id=, version=)   rows and columns replaced, one commit
    add_columns(table, fields, app_id=, version=)   nullable columns added, metadata only
    compact_partition(table, values)             a partition's files compacted (optimize)
    WriteResult, MergeResult       what a write or merge did: committed, version, skipped

Errors: DeltaIOError and its subclasses (TableNotFoundError, TableFileMissingError, ...).

The stages that write or split a table's files in their own Spark tasks (land, decode) still
use ``files``, ``write.plan_write`` and ``read``'s file listing directly: see
tests/delta/test_boundary.py.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ticdc_lake.delta.exceptions import (
    DeltaIOError,
    MergeSourceError,
    SchemaMismatchError,
    TableFileMissingError,
    TableFileUnreadableError,
    TableNotFoundError,
    UnsupportedTableError,
)
from ticdc_lake.delta.tables import (
    Table,
    delta_table_exists,
    file_actions,
    is_latest,
    open_table,
    read_arrow,
    spark_can_merge,
)
from ticdc_lake.delta.txn import ROWS_KEY, already_committed, commits_after

if TYPE_CHECKING:
    from ticdc_lake.delta.merge import MergeResult, merge_delta
    from ticdc_lake.delta.read import (
        RowGroups,
        file_problem,
        may_hold_nulls,
        read_delta,
        read_on_driver,
        read_table,
        rows_in_partitions_above,
        spanning,
        table_schema,
    )
    from ticdc_lake.delta.spark_merge import merge_frame
    from ticdc_lake.delta.write import (
        WriteResult,
        add_columns,
        append_rows,
        compact_partition,
        replace_table,
        write_arrow,
        write_delta,
    )

# The names whose modules import pyspark: loaded when first asked for.
_ON_FIRST_USE = {
    "MergeResult": "merge",
    "merge_delta": "merge",
    "merge_frame": "spark_merge",
    "RowGroups": "read",
    "file_problem": "read",
    "may_hold_nulls": "read",
    "read_delta": "read",
    "read_on_driver": "read",
    "read_table": "read",
    "rows_in_partitions_above": "read",
    "spanning": "read",
    "table_schema": "read",
    "WriteResult": "write",
    "add_columns": "write",
    "append_rows": "write",
    "compact_partition": "write",
    "replace_table": "write",
    "write_arrow": "write",
    "write_delta": "write",
}


def __getattr__(name: str) -> Any:
    module = _ON_FIRST_USE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "ROWS_KEY",
    "DeltaIOError",
    "MergeResult",
    "MergeSourceError",
    "RowGroups",
    "SchemaMismatchError",
    "Table",
    "TableFileMissingError",
    "TableFileUnreadableError",
    "TableNotFoundError",
    "UnsupportedTableError",
    "WriteResult",
    "add_columns",
    "already_committed",
    "append_rows",
    "commits_after",
    "compact_partition",
    "delta_table_exists",
    "file_actions",
    "file_problem",
    "is_latest",
    "may_hold_nulls",
    "merge_delta",
    "merge_frame",
    "open_table",
    "read_arrow",
    "read_delta",
    "read_on_driver",
    "read_table",
    "replace_table",
    "rows_in_partitions_above",
    "spanning",
    "spark_can_merge",
    "table_schema",
    "write_arrow",
    "write_delta",
]
