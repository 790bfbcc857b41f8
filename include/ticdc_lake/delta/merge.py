"""Upserts and deletes of a change set into a Delta table by key: delta-rs ``merge``.

The change set is small next to the table (a compaction's new changes), so it is collected to
the driver as Arrow and merged by delta-rs, which rewrites only the files holding matched keys;
a small table is read and written whole instead (``_rewrite``).
It must hold at most one row per key: choosing the last change per key is the caller's job.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, write_deltalake
from deltalake.table import TableMerger
from pyspark.sql import DataFrame, SparkSession

from ticdc_lake.delta.exceptions import MergeSourceError
from ticdc_lake.delta.read import check_plain_files, read_on_driver, table_path, table_schema
from ticdc_lake.delta.schema import TableSchema
from ticdc_lake.delta.spark_merge import merge_frame, quoted
from ticdc_lake.delta.tables import MergeResult
from ticdc_lake.delta.txn import (
    already_committed,
    check_app_version,
    commit_in,
    commit_properties,
)

# Key types whose file statistics delta-rs reads back exactly, so that merge may skip files by
# the change set's key range. delta-rs clamps DECIMAL(20,0) statistics above 2^63 − 1 and
# rounds wide decimals through floats: skipping by them inserts a duplicate instead of updating
# (seen with deltalake 1.6.6), so tables keyed by decimals or anything else are merged by a
# full scan of the target.
_PRUNABLE_KEY_TYPES = (pa.types.is_integer, pa.types.is_string, pa.types.is_date32)
# A table of at most this many rows and Parquet bytes, unpartitioned, whose columns the change
# set has with the same types, is read and overwritten whole in one commit: delta-rs's merge
# costs ~20 ms whatever it merges (its plan), a rewrite of 250 rows 7 ms and of 5,000 8 ms; a
# run over 600 gold tables is mostly merges. The bytes bound rows of large BLOBs.
REWRITE_ROWS = 10_000
REWRITE_BYTES = 64 << 20


def _source_table(changes: DataFrame | pa.Table) -> pa.Table:
    if isinstance(changes, pa.Table):
        return changes
    if isinstance(changes, DataFrame):
        return changes.toArrow()
    raise TypeError(f"changes must be a Spark DataFrame or a pyarrow Table, not {type(changes)}")


def _check_source(source: pa.Table, keys: Sequence[str], delete_column: str | None) -> None:
    missing = [
        k
        for k in (*keys, *([delete_column] if delete_column else []))
        if k not in source.column_names
    ]
    if missing:
        raise MergeSourceError(f"change set lacks columns {missing}: it has {source.column_names}")
    for key in keys:
        if source.column(key).null_count:
            raise MergeSourceError(f"key column {key!r} holds nulls")
    if delete_column is not None:
        column = source.column(delete_column)
        if not pa.types.is_boolean(column.type) or column.null_count:
            raise MergeSourceError(
                f"delete column {delete_column!r} must be a boolean without nulls"
            )
    counts = source.group_by(list(keys), use_threads=False).aggregate([([], "count_all")])
    duplicated = counts.filter(pc.greater(counts.column("count_all"), 1))
    if duplicated.num_rows:
        example = duplicated.slice(0, 3).select(list(keys)).to_pylist()
        raise MergeSourceError(
            f"{duplicated.num_rows} keys occur more than once in the change set, e.g. {example}: "
            "keep the last change per key before merging"
        )


def _nullable(data: pa.Table) -> pa.Table:
    """``data`` with every column nullable (Spark marks many non-null; see TableSchema)."""
    from deltalake import Schema as DeltaSchema

    arrow = TableSchema.from_delta(DeltaSchema.from_arrow(data.schema), []).to_arrow()
    return data.cast(arrow)


def merge_delta(
    changes: DataFrame | pa.Table,
    path: str | os.PathLike,
    keys: Sequence[str],
    *,
    delete_column: str | None = None,
    partition_by: Sequence[str] | None = None,
    merge_schema: bool = False,
    app_id: str | None = None,
    version: int | None = None,
    table: DeltaTable | None = None,
) -> MergeResult:
    """Apply ``changes`` (one row per key) to the table at ``path``.

    Rows whose ``delete_column`` is true delete the target row with their key (and are not
    inserted); the others replace it, or are inserted. The delete column itself is not stored.
    A missing table is created from the inserted rows (partitioned by ``partition_by``).
    ``app_id``/``version`` make the merge idempotent, as in ``write_delta``. An empty change
    set commits nothing. ``merge_schema`` lets new source columns extend the table. ``table``:
    the table already open at its latest version (it is left at the merge's).
    """
    check_app_version(app_id, version)
    if not keys:
        raise MergeSourceError("merge needs at least one key column")
    location = table_path(path)
    source = _source_table(changes)
    _check_source(source, keys, delete_column)
    write_id = uuid.uuid4().hex

    if table is None and not DeltaTable.is_deltatable(location):
        return _create(location, source, delete_column, partition_by, write_id, app_id, version)

    table = table if table is not None else DeltaTable(location)
    check_plain_files(table)
    if already_committed(table, app_id, version):
        return MergeResult(committed=False, version=table.version(), skipped=True)
    if source.num_rows == 0:
        return MergeResult(committed=False, version=table.version())
    start_version = table.version()
    rewritten = _rewrite(table, source, keys, delete_column, write_id, app_id, version)
    if rewritten is not None:
        return rewritten

    if any("`" in name for name in source.column_names):
        # delta-rs's MERGE cannot quote a column name holding a backtick (deltalake 1.6.6:
        # "Expected close delimiter '`'"), which MySQL allows; Spark's SQL can.
        changes = SparkSession.active().createDataFrame(source)
        return merge_frame(changes, location, keys, delete_column=delete_column, app_id=app_id,
                           version=version)  # fmt: skip
    merger = _merger(table, source, keys, delete_column, merge_schema, write_id, app_id, version)
    metrics = merger.execute()
    # The merged table is at the merge's version: searched without opening the table again.
    info = commit_in(table, write_id, start_version)
    return MergeResult(
        committed=info is not None,
        version=info["version"] if info else table.version(),
        metrics=metrics,
    )


def _create(
    location: str,
    source: pa.Table,
    delete_column: str | None,
    partition_by: Sequence[str] | None,
    write_id: str,
    app_id: str | None,
    version: int | None,
) -> MergeResult:
    """The merge into a missing table: a new table of the change set's inserted rows."""
    rows = source
    if delete_column is not None:
        rows = source.filter(pc.invert(source.column(delete_column))).drop_columns([delete_column])
    write_deltalake(
        location,
        _nullable(rows),
        mode="error",
        partition_by=list(partition_by) if partition_by else None,
        commit_properties=commit_properties(write_id, app_id, version),
    )
    # A new table's first commit (mode "error" fails if another writer made it first).
    return MergeResult(committed=True, version=0)


def _merger(
    table: DeltaTable,
    source: pa.Table,
    keys: Sequence[str],
    delete_column: str | None,
    merge_schema: bool,
    write_id: str,
    app_id: str | None,
    version: int | None,
) -> TableMerger:
    """delta-rs's merge of ``source`` into ``table`` by ``keys``, ready to execute."""
    prunable = all(
        any(test(source.schema.field(k).type) for test in _PRUNABLE_KEY_TYPES) for k in keys
    )
    predicate = " AND ".join(f"t.{quoted(k)} = s.{quoted(k)}" for k in keys)
    merger = table.merge(
        source,
        predicate,
        source_alias="s",
        target_alias="t",
        merge_schema=merge_schema,
        # Not streamed: delta-rs then derives a file-skipping predicate from the change set's
        # key range, so unchanged files are neither read nor rewritten.
        streamed_exec=not prunable,
        commit_properties=commit_properties(write_id, app_id, version),
    )
    if delete_column is None:
        return merger.when_matched_update_all().when_not_matched_insert_all()
    deleted = f"s.{quoted(delete_column)}"
    return (
        merger.when_matched_delete(predicate=deleted)
        .when_matched_update_all(predicate=f"NOT {deleted}", except_cols=[delete_column])
        .when_not_matched_insert_all(predicate=f"NOT {deleted}", except_cols=[delete_column])
    )


def _rewrite(
    table: DeltaTable,
    source: pa.Table,
    keys: Sequence[str],
    delete_column: str | None,
    write_id: str,
    app_id: str | None,
    version: int | None,
) -> MergeResult | None:
    """The merge as one overwrite of a small table (None: not small, partitioned, or the
    change set's columns differ from the table's: delta-rs merges it). The rows the change
    set names by key go; its upserts come in. A change set naming no row appends."""
    if table.metadata().partition_columns:
        return None
    actions = pa.table(table.get_add_actions(flatten=False))  # no statistics columns
    if actions.num_rows:
        counts, sizes = actions.column("num_records"), actions.column("size_bytes")
        if counts.null_count or pc.sum(counts).as_py() > REWRITE_ROWS:
            return None
        if pc.sum(sizes).as_py() > REWRITE_BYTES:
            return None
    schema = table_schema(table).to_arrow()
    columns = [name for name in source.column_names if name != delete_column]
    if sorted(columns) != sorted(schema.names) or any(
        source.schema.field(field.name).type != field.type for field in schema
    ):
        return None
    rows = read_on_driver(table, schema.names, pc.scalar(True))
    try:
        kept = _unnamed(rows, source.select(list(keys)))
    except pa.ArrowNotImplementedError:
        return None  # a key type Arrow cannot match on
    upserts = source
    if delete_column is not None:
        upserts = source.filter(pc.invert(source.column(delete_column)))
    upserts = upserts.select(schema.names)
    if kept.num_rows == rows.num_rows:
        # No row of the table is named: as delta-rs's merge, its files stay (the new rows are
        # appended; readers of the table as a stream see an append), and nothing to insert
        # commits nothing.
        if not upserts.num_rows:
            return MergeResult(committed=False, version=table.version(), metrics=_rewritten())
        written, mode = upserts, "append"
    else:
        written, mode = pa.concat_tables([kept.select(schema.names), upserts]), "overwrite"
    write_deltalake(
        table,
        written.cast(schema),
        mode=mode,
        commit_properties=commit_properties(write_id, app_id, version),
    )
    info = commit_in(table, write_id, table.version() - 1)
    metrics = _rewritten(
        num_target_rows_deleted=rows.num_rows - kept.num_rows, num_output_rows=written.num_rows
    )
    return MergeResult(
        committed=info is not None,
        version=info["version"] if info else table.version(),
        metrics=metrics,
    )


def _rewritten(**figures: int) -> dict[str, Any]:
    """A rewrite's metrics, marked as not merged by delta-rs."""
    return {"rewritten": True, **figures}


def _unnamed(rows: pa.Table, keys: pa.Table) -> pa.Table:
    """The ``rows`` whose key (``keys``' columns) is not among ``keys``' rows."""
    if keys.num_columns == 1:
        named = pc.is_in(rows.column(keys.column_names[0]), value_set=keys.column(0))
        return rows.filter(pc.invert(named))
    return rows.join(keys, keys.column_names, join_type="left anti", use_threads=False)
