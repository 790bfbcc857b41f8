"""Spark → Delta: ``write_delta``, the one way the pipeline writes a DataFrame to a table;
``write_arrow`` for a table of a few rows written from the driver; ``append_rows``,
``replace_table``, ``add_columns`` and ``compact_partition``: the other commits made from the
driver with delta-rs."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from deltalake import Schema as DeltaSchema
from deltalake.transaction import CommitProperties, Transaction
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema

from ticdc_lake.delta import partitions
from ticdc_lake.delta.files import (
    ADDS_SCHEMA,
    DEFAULT_MAX_FILE_BYTES,
    WritePlan,
    WriteTask,
    commit_files,
    discard_uncommitted,
    resolve_target,
)
from ticdc_lake.delta.read import check_plain_files, table_path, table_schema
from ticdc_lake.delta.schema import TableSchema
from ticdc_lake.delta.tables import Table
from ticdc_lake.delta.txn import (
    FILES_KEY,
    ROWS_KEY,
    already_committed,
    check_app_version,
    commit_properties,
    find_commit,
)
from ticdc_lake.runtime.spark_columns import map_in_arrow


@dataclass(frozen=True)
class WriteResult:
    """What a write did. ``committed`` is False for a replay (``skipped``) or a no-op append."""

    committed: bool
    version: int | None  # the version this write created, or the table's version if none
    num_records: int = 0
    num_files: int = 0
    skipped: bool = False  # (app_id, version) was already in the table


def _replace_where_text(replace_where: Mapping[str, Any] | None) -> dict[str, list[str]] | None:
    if replace_where is None:
        return None
    if not replace_where:
        raise ValueError("replace_where needs at least one partition column")
    result = {}
    for column, value in replace_where.items():
        values = value if isinstance(value, list | tuple | set | frozenset) else [value]
        texts = [partitions.value_text(v) for v in values]
        if None in texts:
            raise ValueError(
                f"replace_where {column}: null partitions cannot be replaced selectively"
            )
        result[column] = sorted(texts)
    return result


def write_tasks(spark: SparkSession, size_bytes: int, max_file_bytes: int) -> int:
    """How many tasks write ``size_bytes``: one per ``max_file_bytes``, at least one per core."""
    return max(spark.sparkContext.defaultParallelism, math.ceil(size_bytes / max_file_bytes))


def plan_write(
    location: str,
    incoming: TableSchema,
    *,
    mode: str = "append",
    replace_where: Mapping[str, Any] | None = None,
    overwrite_schema: bool = False,
    app_id: str | None = None,
    version: int | None = None,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
) -> WritePlan | None:
    """The plan of writing rows of ``incoming``'s columns to the table at ``location`` (see
    ``write_delta``); None when the table already records ``version`` for ``app_id``. Tasks
    that write their own files (``TaskFiles``) take it, and ``commit_files`` commits them."""
    check_app_version(app_id, version)
    current = None
    if DeltaTable.is_deltatable(location):
        table = DeltaTable(location)
        check_plain_files(table)
        if already_committed(table, app_id, version):
            return None
        current = (table.version(), table_schema(table))

    plan = WritePlan(
        path=location,
        write_id=uuid.uuid4().hex,
        mode=mode,
        incoming=incoming,
        target=incoming,  # a new table is the incoming schema
        replace_where=_replace_where_text(replace_where),
        overwrite_schema=overwrite_schema,
        app_id=app_id,
        version=version,
        start_version=current[0] if current else None,
        max_file_bytes=max_file_bytes,
    )
    if current is not None:
        plan = dataclasses.replace(plan, target=resolve_target(current[1], plan))
    if plan.replace_where:
        unknown = set(plan.replace_where) - set(plan.target.partition_by)
        if unknown:
            raise ValueError(f"replace_where on non-partition columns {sorted(unknown)}")
    return plan


def write_delta(
    df: DataFrame,
    path: str | os.PathLike,
    *,
    mode: str = "append",
    partition_by: Sequence[str] | None = None,
    replace_where: Mapping[str, Any] | None = None,
    overwrite_schema: bool = False,
    app_id: str | None = None,
    version: int | None = None,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    size_hint_bytes: int | None = None,
) -> WriteResult:
    """Write ``df`` to the Delta table at ``path`` in one transaction: Spark's tasks write the
    Parquet files (``WriteTask``), the driver commits them with delta-rs. (Not a Python data
    source: each of those starts a Python daemon for its lookup, planning and commit, about
    2.5 s of a new JVM's first write.)

    - ``mode``: ``append`` or ``overwrite``. Overwrite replaces every row, or with
      ``replace_where={"col": value or [values]}`` only the rows of those partitions (the data
      must lie inside them). The schema evolves by new nullable columns; ``overwrite_schema``
      lets a full overwrite replace the columns instead.
    - ``partition_by``: for a new table; for an existing one it must match (or be omitted).
    - ``app_id``/``version``: the write is skipped, with no new Delta version, when the table
      already records that version (or a later one) for ``app_id``; otherwise both are
      recorded with the commit. Checked before the Spark job and again before the commit.
    - File sizes: every Spark task writes its own files (one per partition value it meets),
      each closed at about ``max_file_bytes`` of Parquet. So a write has at least as many
      files as tasks: ``size_hint_bytes``, about how much the write holds, merges the
      DataFrame's partitions (``coalesce``, no shuffle) down to that many bytes per task, but
      never below the session's default parallelism, so that every core still writes.
    """
    if mode not in ("append", "overwrite"):
        raise ValueError(f"mode must be append or overwrite, not {mode!r}")
    if replace_where is not None and mode != "overwrite":
        raise ValueError("replace_where applies to mode='overwrite' only")
    location = table_path(path)
    incoming = TableSchema.from_spark(df.schema, tuple(partition_by or ()))
    plan = plan_write(
        location,
        incoming,
        mode=mode,
        replace_where=replace_where,
        overwrite_schema=overwrite_schema,
        app_id=app_id,
        version=version,
        max_file_bytes=max_file_bytes,
    )
    if plan is None:
        return WriteResult(committed=False, version=DeltaTable(location).version(), skipped=True)
    if size_hint_bytes is not None:
        df = df.coalesce(write_tasks(df.sparkSession, size_hint_bytes, max_file_bytes))
    _write_and_commit(df, plan)
    return _write_result(plan)


def _write_and_commit(df: DataFrame, plan: WritePlan) -> None:
    """Spark's tasks write the files, the driver commits them; files of a failed write go."""
    try:
        adds = map_in_arrow(df, WriteTask(plan), from_arrow_schema(ADDS_SCHEMA)).collect()
        commit_files(plan, [json.loads(row.add) for row in adds])
    except BaseException:
        discard_uncommitted(plan)
        raise


def _write_result(plan: WritePlan) -> WriteResult:
    """What the planned write did, from its commit in the table's history (none: the commit
    was skipped, as a replay if the table now records the plan's app version)."""
    info = find_commit(plan.path, plan.write_id, plan.start_version)
    if info is None:
        table = DeltaTable(plan.path) if DeltaTable.is_deltatable(plan.path) else None
        return WriteResult(
            committed=False,
            version=table.version() if table else None,
            skipped=table is not None and already_committed(table, plan.app_id, plan.version),
        )
    return WriteResult(
        committed=True,
        version=info["version"],
        num_records=info.get(ROWS_KEY, 0),
        num_files=info.get(FILES_KEY, 0),
    )


def write_arrow(
    data: pa.Table,
    path: str | os.PathLike,
    *,
    mode: str = "append",
    app_id: str | None = None,
    version: int | None = None,
    partition_by: Sequence[str] = (),
    configuration: Mapping[str, str] | None = None,
) -> WriteResult:
    """Write ``data`` to the Delta table at ``path`` from the driver, with delta-rs, in one
    transaction: for a table of a few rows, where a Spark job's start costs seconds. ``mode``
    and ``app_id``/``version`` as in ``write_delta``; ``partition_by`` and ``configuration``
    (table properties) apply when this write creates the table, and an existing table keeps
    its own."""
    if mode not in ("append", "overwrite"):
        raise ValueError(f"mode must be append or overwrite, not {mode!r}")
    check_app_version(app_id, version)
    location = table_path(path)
    before = DeltaTable(location) if DeltaTable.is_deltatable(location) else None
    if before is not None and already_committed(before, app_id, version):
        return WriteResult(committed=False, version=before.version(), skipped=True)
    write_id = uuid.uuid4().hex
    properties = commit_properties(write_id, app_id, version, **{ROWS_KEY: data.num_rows})
    layout: dict[str, Any] = {}
    if before is None:
        layout = {"partition_by": list(partition_by) or None, "configuration": configuration}
    write_deltalake(location, data, mode=mode, commit_properties=properties, **layout)
    info = find_commit(location, write_id, before.version() if before else None)
    if info is None:  # not expected: delta-rs committed or raised
        raise RuntimeError(f"{location}: the write's commit is not in the table's history")
    return WriteResult(committed=True, version=info["version"], num_records=data.num_rows)


def append_rows(
    path: str | os.PathLike,
    rows: pa.Table,
    *,
    partition_by: Sequence[str] | None = None,
    configuration: Mapping[str, str] | None = None,
    app_versions: Mapping[str, int] | None = None,
) -> None:
    """Append ``rows`` to the table at ``path`` from the driver, in one commit carrying no
    properties of this package's (no write id, not skipped as a replay): a record of what a
    run did, or a table rewritten a chunk at a time. ``partition_by`` and ``configuration``
    as in ``write_arrow``; ``app_versions`` (app id → version), when given, is recorded as
    the commit's app transactions (copied from the table the rows come from)."""
    properties = None
    if app_versions is not None:
        transactions = [Transaction(app, version) for app, version in app_versions.items()]
        properties = CommitProperties(app_transactions=transactions)
    write_deltalake(
        table_path(path),
        rows,
        mode="append",
        partition_by=list(partition_by) if partition_by is not None else None,
        configuration=configuration,
        commit_properties=properties,
    )


def replace_table(table: Table, rows: pa.Table, *, app_id: str, version: int) -> None:
    """Replace the rows and columns of ``table`` with ``rows`` in one commit by delta-rs alone
    (no Spark job), recording ``(app_id, version)``. The caller checks it is not a replay."""
    write_deltalake(
        table,
        rows,
        mode="overwrite",
        schema_mode="overwrite",
        commit_properties=commit_properties(uuid.uuid4().hex, app_id, version),
    )


def add_columns(table: Table, fields: Sequence[pa.Field], *, app_id: str, version: int) -> None:
    """Append the nullable columns ``fields`` to ``table``'s schema (metadata only: no file is
    written), recording ``(app_id, version)``. The caller checks it is not a replay."""
    table.alter.add_columns(
        DeltaSchema.from_arrow(pa.schema(fields)).fields,
        commit_properties=commit_properties(uuid.uuid4().hex, app_id, version),
    )


def compact_partition(table: Table, values: Mapping[str, str]) -> None:
    """Rewrite the files of the partition whose columns hold ``values`` into as few as
    delta-rs's target size allows (an ``optimize``; its rows are unchanged)."""
    table.optimize.compact(partition_filters=[(c, "=", v) for c, v in values.items()])
