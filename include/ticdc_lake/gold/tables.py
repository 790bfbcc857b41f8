"""One gold table: typing a segment of changes, merging it, and carrying out DDL effects.

Every commit to a gold table carries the app transaction ``(app_id, version)`` (merge_delta,
write_delta), with versions that only grow along the change log (gold/compact.py chooses
them), so each step of a compaction is done at most once however often a run is repeated, and a
run killed between two steps resumes where it stopped.

Rows merge by the table's handle key; ``_commit_ts`` holds the commit TS of a row's last change.
Schema changes: ADD COLUMN adds a nullable column (metadata only); DROP/MODIFY/CHANGE/RENAME
COLUMN, DROP/TRUNCATE PARTITION and RENAME TABLE rewrite the table through Spark; TRUNCATE and
DROP TABLE replace it with no rows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from ticdc_lake.delta import (
    Table,
    add_columns,
    already_committed,
    delta_table_exists,
    file_actions,
    is_latest,
    merge_delta,
    merge_frame,
    open_table,
    read_delta,
    replace_table,
    table_schema,
    write_delta,
)
from ticdc_lake.gold import catalog
from ticdc_lake.gold import types as gold_types
from ticdc_lake.gold.convert import ZERO_DATE, Origin, column_values, convert
from ticdc_lake.gold.exceptions import ConversionError, GoldError
from ticdc_lake.runtime.spark_columns import map_in_arrow, named_column

COMMIT_TS = "_commit_ts"
DATED = (gold_types.DATE, gold_types.DATETIME, gold_types.TIMESTAMP)
DELETED = "_deleted"  # the merge's delete flag; never stored
# Tables up to this many rows are rewritten on the driver when that needs no Spark transform.
DRIVER_REWRITE_ROWS = 1_000_000


@dataclass
class SegmentStats:
    upserts: int = 0
    deletes: int = 0
    key_only: int = 0  # upserts whose images held only the handle key
    zero_dates: int = 0


@dataclass(frozen=True)
class GoldSnapshot:
    """What a gold table holds at its latest version (``version`` None: no table yet)."""

    version: int | None
    schema: pa.Schema | None
    rows: int


@dataclass
class TypedSegment:
    data: pa.Table  # gold columns, _commit_ts, _deleted
    keys: tuple[str, ...]
    columns: list[dict] = field(default_factory=list)  # name, type, mysql_type (for the state)
    stats: SegmentStats = field(default_factory=SegmentStats)


def arrow_struct(schema: pa.Schema) -> StructType:
    """The Spark schema of an Arrow schema made of gold's types."""
    fields = [
        {
            "name": f.name,
            "type": gold_types.delta_type_name(f.type),
            "nullable": True,
            "metadata": {},
        }
        for f in schema
    ]
    return StructType.fromJson({"type": "struct", "fields": fields})


class GoldTable:
    """One gold table: what it holds, and its rows merged, loaded or replaced."""

    def __init__(self, spark: SparkSession, name: catalog.TableName, path: Path, app_id: str):
        self.spark = spark
        self.name = name
        self.path = path
        self.app_id = app_id
        # Kept open while no other commit follows it: a run's segment reads the schema, merges
        # and reads the state, each an open of ~2 ms (a run over 600 tables: 1,800 opens).
        self._table: Table | None = None

    # --- what is there -------------------------------------------------------------------

    def exists(self) -> bool:
        return delta_table_exists(self.path)

    def schema(self) -> pa.Schema | None:
        table = self._open()
        return None if table is None else table_schema(table).to_arrow()

    def _open(self) -> Table | None:
        """The table at its latest version (None: no table)."""
        if self._table is None or not is_latest(self._table):
            self._table = open_table(self.path) if self.exists() else None
        return self._table

    def _pending(self, version: int) -> Table | None:
        """The table, opened once for a whole DDL effect (a run may carry hundreds of them,
        each open reads the log), unless it is missing or step ``version`` is done already."""
        table = self._open()
        if table is None or already_committed(table, self.app_id, version):
            return None
        return table

    def snapshot(self) -> GoldSnapshot:
        """Version, schema and row count from one open (each open reads the log: a run's
        state rows for 600 tables took 4.2 s opening each table three times)."""
        table = self._open()
        if table is None:
            return GoldSnapshot(None, None, 0)
        return GoldSnapshot(table.version(), table_schema(table).to_arrow(), _row_count(table))

    def rows(self) -> int:
        table = self._open()
        return 0 if table is None else _row_count(table)

    def written_by(self, app_ids: list[str]) -> bool:
        """Whether a commit of the table carries one of these app transactions."""
        table = self._open()
        return table is not None and any(table.transaction_version(a) is not None for a in app_ids)

    def done(self, version: int) -> bool:
        """Whether the step with this version was committed already (a rerun)."""
        table = self._open()
        if table is None:
            return False
        recorded = table.transaction_version(self.app_id)
        return recorded is not None and recorded >= version

    # --- rows ----------------------------------------------------------------------------

    def merge(self, segment: TypedSegment, version: int) -> bool:
        result = merge_delta(
            segment.data,
            self.path,
            list(segment.keys),
            delete_column=DELETED,
            merge_schema=True,
            app_id=self.app_id,
            version=version,
            table=self._open(),
        )
        return result.committed

    def merge_frame(self, changes: DataFrame, keys: tuple[str, ...], version: int) -> bool:
        """A large segment's typed changes (with the delete flag), merged by delta-spark on
        the executors."""
        result = merge_frame(
            changes, self.path, list(keys), delete_column=DELETED, app_id=self.app_id,
            version=version,
        )  # fmt: skip
        return result.committed

    def append(self, frame: DataFrame, version: int) -> bool:
        """Rows known to be new (an initial load), written by Spark's executors."""
        return self._write(frame, version, mode="append")

    def load(self, frame: DataFrame, version: int) -> bool:
        """The table's rows and columns are ``frame`` (written by Spark's executors)."""
        return self._write(frame, version)

    def replace_rows(self, segment: TypedSegment, version: int) -> bool:
        """The table emptied and given the segment's upserts and columns in one commit (a
        segment after a TRUNCATE); an absent table is created by a merge."""
        data = segment.data
        if not self.exists():
            return self.merge(segment, version)
        table = self._pending(version)
        if table is None:
            return False
        upserts = data.filter(pc.invert(data.column(DELETED))).drop_columns([DELETED])
        return self._replace(table, upserts, version)

    # --- writing -------------------------------------------------------------------------

    def _write(self, frame: DataFrame, version: int, *, mode: str = "overwrite") -> bool:
        result = write_delta(
            frame,
            self.path,
            mode=mode,
            overwrite_schema=mode == "overwrite",
            app_id=self.app_id,
            version=version,
        )
        return result.committed

    def _replace(self, table: Table, rows: pa.Table, version: int) -> bool:
        """Replace the rows and columns of ``table`` with ``rows`` by delta-rs alone: no Spark
        job, which matters for the DDL effects that write no rows (a run may carry hundreds)."""
        replace_table(table, rows, app_id=self.app_id, version=version)
        return True


class GoldDDL(GoldTable):
    """A gold table under the app id of DDL effects, as they change it: created, emptied,
    its columns added, dropped or reshaped, its rows rewritten or copied to another."""

    def reshape(
        self,
        schema: pa.Schema,
        version: int,
        values: dict[str, pa.Scalar] | None = None,
        sources: dict[str, str | None] | None = None,
    ) -> bool:
        """Give the table ``schema``'s columns, in its order: each filled from the column
        ``sources`` names (default: the same name; None: none), cast to its type; columns it
        lacks dropped, new ones NULL, or the value ``values`` gives them in every row (an added
        column's default; a column that is there takes it too: it was dropped and added
        again). Only NULL columns added: metadata only; else a rewrite (on the driver when the
        table is small enough, else by Spark)."""
        table = self._pending(version)
        return table is not None and self._reshape(table, schema, version, values, sources)

    def _reshape(
        self,
        table: Table,
        schema: pa.Schema,
        version: int,
        values: dict[str, pa.Scalar] | None = None,
        sources: dict[str, str | None] | None = None,
    ) -> bool:
        present = table_schema(table).to_arrow()
        values = {n: v for n, v in (values or {}).items() if v.is_valid or n in present.names}
        sources = {f.name: (sources or {}).get(f.name, f.name) for f in schema}
        sources = {n: s if s in present.names else None for n, s in sources.items()}
        kept = [(f.name, f.name, f.type) for f in present]
        same = [(f.name, sources[f.name], f.type) for f in schema]
        if same[: len(kept)] == kept and not values:  # only new NULL columns, appended
            added = list(schema)[len(kept) :]
            if not added:
                return False
            add_columns(table, added, app_id=self.app_id, version=version)
            return True
        if _row_count(table) > DRIVER_REWRITE_ROWS:
            frame = reshaped(schema, values, sources)(read_delta(self.spark, self.path))
            return self._write(frame, version)
        rows = table.to_pyarrow_table()

        def column(field: pa.Field) -> pa.Array:
            if field.name in values:
                return pa.repeat(values[field.name], rows.num_rows)
            source = sources[field.name]
            if source is not None:
                # Only widenings come here (catalog.AlterColumn.folds): a safe cast is exact.
                return rows.column(source).cast(field.type)
            return pa.nulls(rows.num_rows, field.type)

        return self._replace(
            table, pa.Table.from_arrays([column(f) for f in schema], schema=schema), version
        )

    def create(self, schema: pa.Schema, version: int) -> bool:
        """An empty table with ``schema`` (an existing one is emptied and takes it)."""
        if self.exists():
            table = self._pending(version)
            return table is not None and self._replace(table, schema.empty_table(), version)
        # A new table: merge_delta creates it from the (empty) Arrow data with delta-rs alone,
        # no Spark job; every CREATE TABLE of a run costs milliseconds.
        result = merge_delta(
            schema.empty_table(), self.path, [schema.names[0]], app_id=self.app_id,
            version=version,
        )  # fmt: skip
        return result.committed

    def empty(self, version: int) -> bool:
        """TRUNCATE / DROP TABLE: no rows, the same columns."""
        table = self._pending(version)
        if table is None:
            return False
        return self._replace(table, table_schema(table).to_arrow().empty_table(), version)

    def add_columns(
        self, added: list[pa.Field], version: int, values: dict[str, pa.Scalar] | None = None
    ) -> bool:
        """Columns appended (Delta appends them after _commit_ts; a new table has them
        before it), NULL or with the value ``values`` gives them in every row."""
        table = self._pending(version)
        if table is None:
            return False
        present = table_schema(table).to_arrow()
        fields = [f for f in added if f.name not in present.names]
        if not fields:
            return False
        schema = pa.schema([*present, *fields])
        values = {f.name: values[f.name] for f in fields if values and f.name in values}
        return self._reshape(table, schema, version, values)

    def rewrite(self, transform, version: int) -> bool:
        """Replace the rows with ``transform(rows)`` (a DataFrame → DataFrame)."""
        if not self.exists() or self.done(version):
            return False
        return self._write(transform(read_delta(self.spark, self.path)), version)

    def drop_columns(self, names: tuple[str, ...], version: int) -> bool:
        """DROP COLUMN: a table small enough is rewritten by delta-rs on the driver (no Spark
        job), a larger one by Spark."""
        table = self._pending(version)
        if table is None:
            return False
        if _row_count(table) > DRIVER_REWRITE_ROWS:
            return self.rewrite(drop_columns(names), version)
        rows = table.to_pyarrow_table()
        kept = [n for n in rows.column_names if n not in names]
        return self._replace(table, rows.select(kept), version)

    def copy_to(self, other: GoldTable, version: int) -> bool:
        """RENAME TABLE: this table's rows become ``other``'s."""
        if not self.exists() or other.done(version):
            return False
        return other._write(read_delta(self.spark, self.path), version)


def _row_count(table: Table) -> int:
    actions = file_actions(table)
    return int(pc.sum(actions.column("num_records")).as_py() or 0) if actions.num_rows else 0


# --- DDL effects as Spark transforms -----------------------------------------------------------


def drop_columns(names: tuple[str, ...]):
    def transform(frame: DataFrame) -> DataFrame:
        return frame.select(*[named_column(n) for n in frame.columns if n not in names])

    return transform


def reshaped(
    schema: pa.Schema,
    values: dict[str, pa.Scalar] | None = None,
    sources: dict[str, str | None] | None = None,
):
    """The frame with ``schema``'s columns in its order, each from the column ``sources``
    names (default: the same name) cast to its type; missing ones NULL, those in ``values``
    that value in every row."""
    values, sources = values or {}, sources or {}

    def transform(frame: DataFrame) -> DataFrame:
        columns = []
        for f in schema:
            source = sources.get(f.name, f.name)
            delta_type = gold_types.delta_type_name(f.type)
            if f.name in values:
                columns.append(_literal(values[f.name]).alias(f.name))
            elif source is not None and source in frame.columns:
                columns.append(named_column(source).cast(delta_type).alias(f.name))
            else:
                columns.append(F.lit(None).cast(delta_type).alias(f.name))
        return frame.select(*columns)

    return transform


def _literal(value: pa.Scalar) -> Column:
    """A Spark literal of a gold value: from text (time values keep their instant or wall
    clock whatever the driver's zone), or bytes."""
    python = value.as_py()
    if python is None or isinstance(python, bytes):
        literal = F.lit(python)
    elif hasattr(python, "isoformat"):
        literal = F.lit(python.isoformat())
    else:
        literal = F.lit(str(python))
    return literal.cast(gold_types.delta_type_name(value.type))


def alter_column(old: str, new: str, target: pa.DataType | None):
    """Rename ``old`` to ``new`` and cast it to ``target`` (as MySQL converts the values)."""

    def transform(frame: DataFrame) -> DataFrame:
        columns = []
        for name in frame.columns:
            value = named_column(name)
            if name == old:
                if target is not None:
                    value = value.cast(gold_types.delta_type_name(target))
                value = value.alias(new)
            columns.append(value)
        return frame.select(*columns)

    return transform


def partition_condition(rows: catalog.PartitionRows) -> Column:
    """True for the rows a DROP/TRUNCATE PARTITION removes."""
    value = named_column(rows.column)
    if rows.kind == "hash":
        remainder = F.coalesce(F.abs(value) % rows.modulus, F.lit(0))
        return remainder.isin(list(rows.remainders))
    if rows.kind == "list":
        values = [v for v in rows.values if v is not None]
        condition = value.isin(values) if values else F.lit(False)
        if any(v is None for v in rows.values):
            condition = condition | value.isNull()
        return F.coalesce(condition, F.lit(False))
    condition = F.lit(False)
    for low, high in rows.ranges:
        part = F.lit(True)
        if low is not None:
            part = part & (value >= F.lit(low))
        if high is not None:
            part = part & (value < F.lit(high))
        if low is None:
            part = part | value.isNull()
        condition = condition | F.coalesce(part, F.lit(False))
    return condition


def delete_rows(rows: catalog.PartitionRows):
    def transform(frame: DataFrame) -> DataFrame:
        if rows.column not in frame.columns:
            raise GoldError(f"partition column {rows.column!r} is not a gold column")
        return frame.where(~partition_condition(rows))

    return transform


# --- typing a segment --------------------------------------------------------------------------

DESCRIPTION = ("name", "type_code", "flags", "mysql_type")


def specs_of(descriptions: list[dict]) -> dict[str, gold_types.ColumnSpec]:
    """Each column's spec from (name, type_code, flags, mysql_type) descriptions in the order
    the columns first appear; a full type text (sent with some rows only, e.g. Canal-JSON)
    beats a bare one."""
    specs: dict[str, gold_types.ColumnSpec] = {}
    for row in descriptions:
        spec = gold_types.ColumnSpec.from_row(row["type_code"], row["flags"], row["mysql_type"])
        known = specs.get(row["name"])
        bare = known is not None and known.length is None and known.elements is None
        if known is None or (bare and (spec.length is not None or spec.elements is not None)):
            specs[row["name"]] = spec
    return specs


def row_specs(images: pa.Array) -> dict[str, gold_types.ColumnSpec]:
    """Each column's spec as a batch of change images describes it."""
    if isinstance(images, pa.ChunkedArray):
        images = images.combine_chunks()
    flat = pc.list_flatten(images)
    described = pa.table({name: flat.field(name) for name in DESCRIPTION})
    first = described.append_column("_at", pa.array(np.arange(len(described), dtype=np.int64)))
    distinct = first.group_by(list(DESCRIPTION), use_threads=False).aggregate([("_at", "min")])
    return specs_of(sorted(distinct.to_pylist(), key=lambda row: row["_at_min"]))


@dataclass(frozen=True)
class SegmentPlan:
    """The gold columns of a segment: name, how its values are typed, and its Arrow type."""

    table: str
    keys: tuple[str, ...]
    columns: tuple[
        tuple[str, gold_types.GoldType | None, pa.DataType, gold_types.ColumnSpec | None], ...
    ]

    @property
    def schema(self) -> pa.Schema:
        """The gold table's columns for these rows (without the merge's delete flag)."""
        fields = [pa.field(name, arrow) for name, _, arrow, _ in self.columns]
        return pa.schema([*fields, pa.field(COMMIT_TS, pa.int64())])

    @property
    def described(self) -> list[dict]:
        return [
            {
                "name": name,
                "type": gold_types.delta_type_name(arrow),
                "mysql_type": spec.describe() if spec else None,
            }
            for name, _, arrow, spec in self.columns
        ]


def plan_segment(
    table: catalog.TableInfo,
    handles: set[tuple[str, ...]],
    from_rows: dict[str, gold_types.ColumnSpec],
    existing: pa.Schema | None,
) -> SegmentPlan:
    """Decide a segment's gold columns: the gold table's (keeping their types), then those the
    DDL defines, then any other the changes carry; types from the DDL, else from the changes."""
    name = str(table.name)
    if len(handles) != 1 or not next(iter(handles)):
        raise GoldError(
            f"{name}: the changes name no single handle key ({sorted(handles)}); gold needs the "
            "primary key or a NOT NULL unique key (from the rows or a CREATE TABLE)"
        )
    keys = next(iter(handles))
    from_ddl = table.specs
    present = [f.name for f in existing if f.name != COMMIT_TS] if existing is not None else []
    order = present + [n for n in from_ddl if n not in present]
    order += [n for n in from_rows if n not in order]
    missing = [k for k in keys if k not in order]
    if missing:
        raise GoldError(f"{name}: handle key column(s) {missing} are in no change or DDL")
    existing_types = {f.name: f.type for f in existing} if existing is not None else {}
    columns = []
    for column in order:
        spec = from_ddl.get(column) or from_rows.get(column)
        gold = gold_types.gold_type(spec) if spec is not None else None
        arrow = existing_types.get(column) or (gold.arrow if gold else pa.string())
        columns.append((column, gold, arrow, spec))
    return SegmentPlan(name, keys, tuple(columns))


def apply_plan(plan: SegmentPlan, rows: pa.Table, zones: dict[str, str]) -> TypedSegment:
    """The gold rows of reduced changes (reduce.last_per_key's columns) under ``plan``."""
    names = [name for name, *_ in plan.columns]
    values = column_values(rows.column("image"), names)
    origin = Origin(
        plan.table, rows.column("topic"), rows.column("partition"), rows.column("offset")
    )
    topics = pc.dictionary_encode(rows.column("topic").combine_chunks())
    zone_of_topic = pa.array([zones.get(t) for t in topics.dictionary.to_pylist()], pa.string())
    row_zones = pc.fill_null(zone_of_topic.take(topics.indices), "UTC")
    arrays = []
    stats = SegmentStats()
    for column, gold, arrow, _ in plan.columns:
        if gold is None:
            array = pa.nulls(rows.num_rows, arrow)  # only in gold: nothing to type
        else:
            array, nulled = convert(values[column], gold, arrow, column, origin, row_zones)
            stats.zero_dates += nulled
        arrays.append(array)
    deleted = pc.fill_null(rows.column("deleted"), False)
    for key in plan.keys:
        array = arrays[names.index(key)]
        if array.null_count:
            raise ConversionError(f"{plan.table}: {array.null_count} changes lack key {key}")
    upserts = pc.invert(deleted)
    key_only = pc.and_(upserts, pc.fill_null(rows.column("handle_key_only"), False))
    stats.upserts = int(pc.sum(upserts).as_py() or 0)
    stats.deletes = rows.num_rows - stats.upserts
    stats.key_only = int(pc.sum(key_only).as_py() or 0)
    arrays.append(rows.column("commit_ts").cast(pa.int64()))
    arrays.append(deleted)
    schema = plan.schema.append(pa.field(DELETED, pa.bool_()))
    data = pa.Table.from_arrays(
        [a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in arrays],
        schema=schema,
    )
    return TypedSegment(data, plan.keys, plan.described, stats)


def type_segment(
    rows: pa.Table,
    table: catalog.TableInfo,
    existing: pa.Schema | None,
    zones: dict[str, str],
) -> TypedSegment:
    """Plan and type one segment of reduced changes on the driver."""
    handles = distinct_handles(rows.column("handle"))
    plan = plan_segment(table, handles, row_specs(rows.column("image")), existing)
    return apply_plan(plan, rows, zones)


def distinct_handles(handles: pa.Array | pa.ChunkedArray) -> set[tuple[str, ...]]:
    """The distinct handle keys (lists of column names) of a segment's rows, found by Arrow
    per list length: a Python tuple per row cost a fifth of typing the segment."""
    if isinstance(handles, pa.ChunkedArray):
        handles = handles.combine_chunks()
    lengths = pc.fill_null(pc.list_value_length(handles), 0)
    found = set()
    for length in pc.unique(lengths).to_pylist():
        if length == 0:
            found.add(())
            continue
        same = handles.filter(pc.equal(lengths, length))
        if length == 1:  # the usual one-column key: no grouping
            found |= {(name,) for name in pc.unique(pc.list_element(same, 0)).to_pylist()}
            continue
        positions = [str(i) for i in range(length)]
        names = pa.table({p: pc.list_element(same, i) for i, p in enumerate(positions)})
        distinct = names.group_by(positions).aggregate([]).to_pylist()
        found |= {tuple(row[p] for p in positions) for row in distinct}
    return found


def zero_dates(plan: SegmentPlan) -> Column:
    """Per change, the zero dates its image holds in the plan's date and time columns: what
    ``apply_plan`` stores as NULL, counted by Spark where the executors type the values."""
    dated = [name for name, gold, _, _ in plan.columns if gold is not None and gold.kind in DATED]
    if not dated:
        return F.lit(0)
    zero = F.filter("image", lambda c: c["name"].isin(dated) & c["text"].rlike(ZERO_DATE))
    # Spark runs the lambda row by row, interpreted (tens of seconds at a million changes):
    # only for the rare change whose values hold "-00" at all, found by a plain search.
    maybe = F.array_join("image.text", "\n").contains("-00")
    return F.when(maybe, F.size(zero)).otherwise(0)


def typed_changes(frame: DataFrame, plan: SegmentPlan, zones: dict[str, str]) -> DataFrame:
    """A large segment's changes typed on the executors, with the delete flag (for a merge)."""

    def typed(batches):
        for batch in batches:
            yield from apply_plan(plan, pa.Table.from_batches([batch]), zones).data.to_batches()

    schema = plan.schema.append(pa.field(DELETED, pa.bool_()))
    return map_in_arrow(frame, typed, arrow_struct(schema))


def typed_frame(frame: DataFrame, plan: SegmentPlan, zones: dict[str, str]) -> DataFrame:
    """A large segment's upserts typed on the executors (for an empty table, where deletes
    have nothing to delete)."""
    upserts = frame.where(~F.coalesce(F.col("deleted"), F.lit(False)))
    return typed_changes(upserts, plan, zones).drop(DELETED)


def frame_specs(frame: DataFrame) -> tuple[set[tuple[str, ...]], dict[str, gold_types.ColumnSpec]]:
    """The handle keys and column specs of a large segment, by a small Spark aggregate."""
    described = (
        frame.select(F.posexplode("image").alias("_at", "c"))
        .groupBy(*[F.col(f"c.{name}").alias(name) for name in DESCRIPTION])
        .agg(F.min("_at").alias("_at"))
        .collect()
    )
    handles = {tuple(row.handle) for row in frame.select("handle").distinct().collect()}
    ordered = sorted((row.asDict() for row in described), key=lambda row: row["_at"])
    return handles, specs_of(ordered)


def describe_schema(schema: pa.Schema | None, specs: dict[str, gold_types.ColumnSpec]) -> str:
    """The state table's ``columns`` JSON for a gold schema."""
    if schema is None:
        return "[]"
    described = [
        {
            "name": f.name,
            "type": gold_types.delta_type_name(f.type),
            "mysql_type": specs[f.name].describe() if f.name in specs else None,
        }
        for f in schema
    ]
    return json.dumps(described, ensure_ascii=False)
