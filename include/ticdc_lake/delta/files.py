"""The files of one Delta write: planned on the driver, written by Spark's tasks, committed by
the driver with delta-rs.

A write's tasks run ``WriteTask`` (a ``mapInArrow`` function): each writes its rows to Parquet
files in the table directory and emits their ``add`` actions; the driver then commits every file
in ONE Delta transaction (``commit_files``). A failed task deletes its own files, and a failed
write every file of its write id (``discard_uncommitted``). Files of a job killed outright are
referenced by no transaction: readers never see them and ``vacuum`` removes them.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.transaction import AddAction, create_table_with_add_actions

from ticdc_lake.delta import partitions
from ticdc_lake.delta.exceptions import SchemaMismatchError
from ticdc_lake.delta.schema import TableSchema
from ticdc_lake.delta.stats import FileStats
from ticdc_lake.delta.txn import (
    FILES_KEY,
    ROWS_KEY,
    already_committed,
    commit_properties,
    find_commit,
)

# A row group is written once this many rows of a file are buffered (pyarrow writes at least
# one row group per write call, and Spark hands over batches of 10k rows), or this many bytes
# of Arrow data: Spark splits a file for its readers only between row groups, and wide rows
# (bronze's JSON messages) made a 486 MB row group of a 62 MB file, read by one task while the
# other core idled.
ROW_GROUP_ROWS = 128 * 1024
ROW_GROUP_BYTES = 64 * 1024 * 1024
# File sizes: each task writes one file per partition value it meets, and starts a new one
# once the current file holds this many bytes of Parquet (checked after each row group, so a
# file ends up to one row group larger). 128 MiB: few enough files for readers to list and
# open, small enough for delta-rs merges to rewrite only what they touch. How many tasks write
# (and so how many smaller files there are) is the caller's: see write_delta's size_hint_bytes.
DEFAULT_MAX_FILE_BYTES = 128 * 1024 * 1024


@dataclass
class WritePlan:
    """Everything a write decides on the driver, shipped to the tasks and the commit."""

    path: str
    write_id: str
    mode: str  # "append" or "overwrite"
    incoming: TableSchema  # the DataFrame's columns; partition_by () means "the table's"
    target: TableSchema  # the table schema after the write, as planned
    replace_where: dict[str, list[str]] | None = None  # partition column → values (as text)
    overwrite_schema: bool = False
    app_id: str | None = None
    version: int | None = None
    start_version: int | None = None  # table version at planning; None: no table yet
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES

    @property
    def present(self) -> list[str]:
        return self.incoming.names


def resolve_target(current: TableSchema, plan: WritePlan) -> TableSchema:
    """The table schema after writing ``plan.incoming`` into a table whose schema is ``current``."""
    incoming = plan.incoming
    if incoming.partition_by and incoming.partition_by != current.partition_by:
        raise SchemaMismatchError(
            f"table {plan.path} is partitioned by {list(current.partition_by)}, "
            f"the write by {list(incoming.partition_by)}; partitioning cannot change"
        )
    if plan.mode == "overwrite" and plan.overwrite_schema:
        if plan.replace_where:
            raise SchemaMismatchError("overwrite_schema replaces the whole table: no replace_where")
        target = TableSchema(incoming.columns, current.partition_by)
        target.check_partitioning()
        return target
    return current.evolve(incoming)[0]


# --- executor side ----------------------------------------------------------------------------


def pruned_by(schema: pa.Schema) -> list[str]:
    """The columns whose Parquet statistics are written: those a reader may prune row groups
    by. Min and max of nested images and binary payloads serve no filter, and cost 7-11% of
    writing silver's changes."""
    return [
        field.name
        for field in schema
        if not (
            pa.types.is_nested(field.type)
            or pa.types.is_binary(field.type)
            or pa.types.is_large_binary(field.type)
        )
    ]


class _DataFile:
    """One Parquet file being written, with its statistics."""

    def __init__(self, root: str, write_id: str, values: dict[str, str | None], schema: pa.Schema):
        # The write id in the name lets discard_uncommitted find files of tasks killed midway.
        name = f"{file_prefix(write_id)}{uuid.uuid4().hex}.zstd.parquet"
        directory = partitions.directory(values) if values else ""
        self.relative = f"{directory}/{name}" if directory else name
        self.absolute = os.path.join(root, self.relative)
        self.values = values
        os.makedirs(os.path.dirname(self.absolute), exist_ok=True)
        self.stats = FileStats(schema)
        self.bytes = 0
        self._pending: list[pa.Table] = []
        self._pending_rows = self._pending_bytes = 0
        self._writer = pq.ParquetWriter(
            self.absolute, schema, compression="zstd", write_statistics=pruned_by(schema)
        )

    def append(self, data: pa.Table) -> None:
        self.stats.update(data)
        self._pending.append(data)
        self._pending_rows += data.num_rows
        self._pending_bytes += data.nbytes
        if self._pending_rows >= ROW_GROUP_ROWS or self._pending_bytes >= ROW_GROUP_BYTES:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            self._writer.write_table(pa.concat_tables(self._pending), row_group_size=ROW_GROUP_ROWS)
            self._pending, self._pending_rows, self._pending_bytes = [], 0, 0
            self.bytes = os.path.getsize(self.absolute)  # Parquet bytes written so far

    def close(self) -> dict[str, Any]:
        self._flush()
        self._writer.close()
        return {
            "path": self.relative,
            "size": os.path.getsize(self.absolute),
            "partition_values": self.values,
            "modification_time": int(time.time() * 1000),
            "stats": self.stats.to_json(),
            "num_records": self.stats.num_records,
        }

    def discard(self) -> None:
        with contextlib.suppress(Exception):
            self._writer.close()
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.absolute)


def _split(
    data: pa.Table, columns: tuple[str, ...]
) -> Iterator[tuple[dict[str, str | None], pa.Table]]:
    """The rows of ``data`` grouped by their partition values (as Delta text)."""
    if all(_single_valued(data.column(c)) for c in columns):
        # The usual case (Spark's rows arrive clustered by partition): no grouping, no copy.
        yield {c: partitions.value_text(data.column(c)[0].as_py()) for c in columns}, data
        return
    rows = pa.array(range(data.num_rows), pa.int64())
    keyed = data.select(list(columns)).append_column("__row", rows)
    groups = keyed.group_by(list(columns), use_threads=False).aggregate([("__row", "list")])
    for i in range(groups.num_rows):
        values = {c: partitions.value_text(groups.column(c)[i].as_py()) for c in columns}
        yield values, data.take(groups.column("__row_list")[i].values)


def _single_valued(column: pa.ChunkedArray) -> bool:
    first = column[0]
    if not first.is_valid:
        return column.null_count == len(column)
    return column.null_count == 0 and pc.all(pc.equal(column, first)).as_py()


class TaskFiles:
    """The files one task has open or finished, keyed by partition values."""

    def __init__(self, plan: WritePlan):
        self.root = plan.path
        self.write_id = plan.write_id
        self.partition_by = plan.target.partition_by
        self.schema = plan.target.file_schema(plan.present)
        self.max_bytes = plan.max_file_bytes
        self.open: dict[tuple, _DataFile] = {}
        self.done: list[dict[str, Any]] = []

    def _cast(self, data: pa.Table) -> pa.Table:
        # Spark's Arrow types (session time zone, narrower ints, non-null flags) → the table's.
        arrays = [data.column(f.name).cast(f.type) for f in self.schema]
        return pa.Table.from_arrays(arrays, schema=self.schema)

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        data = pa.Table.from_batches([batch])
        if not self.partition_by:
            self._append({}, data)
            return
        for values, rows in _split(data, self.partition_by):
            self._append(values, rows)

    def _append(self, values: dict[str, str | None], data: pa.Table) -> None:
        key = tuple(values.items())
        file = self.open.get(key)
        if file is None:
            file = self.open[key] = _DataFile(self.root, self.write_id, values, self.schema)
        file.append(self._cast(data))
        if file.bytes >= self.max_bytes:
            self.done.append(self.open.pop(key).close())

    def close(self) -> list[dict[str, Any]]:
        while self.open:
            _, file = self.open.popitem()
            self.done.append(file.close())
        return self.done

    def discard(self) -> None:
        for file in self.open.values():
            file.discard()
        delete_files(self.root, self.done)


def file_prefix(write_id: str) -> str:
    return f"part-{write_id}-"


def delete_files(root: str, adds: list[dict[str, Any]]) -> None:
    for add in adds:
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(root, add["path"]))


def delete_write(root: str, write_id: str) -> None:
    """Delete every data file of one write, including those of tasks that were killed (a stage
    cancelled by a failing task kills its other tasks' Python workers before they clean up)."""
    prefix = file_prefix(write_id)
    for directory, subdirectories, names in os.walk(root):
        subdirectories[:] = [d for d in subdirectories if not d.startswith(("_", "."))]
        for name in names:
            if name.startswith(prefix):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(directory, name))


ADDS_SCHEMA = pa.schema([("add", pa.string())])  # WriteTask's output: one add action per row


@dataclass(frozen=True)
class WriteTask:
    """The ``mapInArrow`` function of a write: the task writes its rows to the plan's files and
    emits their add actions as JSON; a failing (or interrupted) task deletes its files."""

    plan: WritePlan

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        adds = write_files(self.plan, batches)
        yield pa.RecordBatch.from_pydict({"add": [json.dumps(a) for a in adds]}, ADDS_SCHEMA)


def write_files(plan: WritePlan, batches: Iterable[pa.RecordBatch]) -> list[dict[str, Any]]:
    """Write the rows to files of the plan, not committed yet; their add actions. The files
    are deleted if writing fails."""
    files = TaskFiles(plan)
    try:
        for batch in batches:
            files.write(batch)
        return files.close()
    except BaseException:
        files.discard()
        raise


def discard_uncommitted(plan: WritePlan) -> None:
    """After a failed write: delete its files, those of tasks killed before they could clean
    up included, unless its commit reached the log anyway (an error after writing it): then
    they are the table's. When the log cannot be read, keep them too: ``vacuum`` removes them
    if they are not the table's."""
    try:
        committed = find_commit(plan.path, plan.write_id, plan.start_version)
    except Exception:
        return
    if committed is None:
        delete_write(plan.path, plan.write_id)


# --- driver side: the one commit --------------------------------------------------------------


def _add_action(add: dict[str, Any]) -> AddAction:
    return AddAction(
        add["path"],
        add["size"],
        add["partition_values"],
        add["modification_time"],
        True,
        add["stats"],
    )


def _check_replace_where(plan: WritePlan, adds: list[dict[str, Any]]) -> list[tuple]:
    """delta-rs partition filters for ``replace_where``; every new file must fall inside them
    (delta-rs does not check: it would commit rows outside the partitions it replaces)."""
    assert plan.replace_where is not None
    for add in adds:
        for column, allowed in plan.replace_where.items():
            value = add["partition_values"].get(column)
            if value not in allowed:
                raise SchemaMismatchError(
                    f"replace_where {plan.replace_where} but the data holds {column}={value!r}"
                )
    return [(column, "in", allowed) for column, allowed in plan.replace_where.items()]


def commit_files(plan: WritePlan, adds: list[dict[str, Any]]) -> None:
    """Commit the written files as one Delta transaction (or drop them, for a replay)."""
    properties = commit_properties(
        plan.write_id,
        plan.app_id,
        plan.version,
        **{ROWS_KEY: sum(a["num_records"] for a in adds), FILES_KEY: len(adds)},
    )
    actions = [_add_action(a) for a in adds]
    if not DeltaTable.is_deltatable(plan.path):
        if plan.replace_where:
            _check_replace_where(plan, adds)
        create_table_with_add_actions(
            plan.path,
            plan.target.to_delta(),
            actions,
            mode="error",
            partition_by=list(plan.target.partition_by) or None,
            commit_properties=properties,
        )
        return

    table = DeltaTable(plan.path)
    if already_committed(table, plan.app_id, plan.version):
        delete_files(plan.path, adds)
        return
    current = TableSchema.from_delta(table.schema(), table.metadata().partition_columns)
    target = resolve_target(current, plan)
    if target.file_schema(plan.present) != plan.target.file_schema(plan.present):
        raise SchemaMismatchError(
            f"the schema of {plan.path} changed while writing: planned {plan.target.to_json()}, "
            f"now {target.to_json()}"
        )
    partition_by = list(target.partition_by)

    if plan.mode == "append":
        if not actions and plan.app_id is None:
            return  # nothing to add and nothing to record: no new version
        added = [name for name in target.names if name not in current.names]
        if added:
            # delta-rs ignores the schema of an append: evolve it first, in its own commit
            # (harmless if the data commit then never happens: the columns are just null).
            fields = TableSchema(tuple((n, target.type_of(n)) for n in added)).to_delta().fields
            table.alter.add_columns(fields)
            table = DeltaTable(plan.path)
        table.create_write_transaction(
            actions, "append", target.to_delta(), partition_by, commit_properties=properties
        )
        return

    filters = _check_replace_where(plan, adds) if plan.replace_where else None
    # An overwrite writes the schema it is given into the table's metadata.
    table.create_write_transaction(
        actions,
        "overwrite",
        target.to_delta(),
        partition_by,
        partition_filters=filters,
        commit_properties=properties,
    )
