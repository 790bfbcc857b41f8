"""Spark transforms from silver changes to the change set gold merges: DataFrame → DataFrame.

In order (gold/compact.py strings them together):

1. ``with_order_ts``: the TS a change sorts by. Its commit TS; for a change the protocol sent
   without one (Avro deletes, Canal-JSON without the TiDB extension) the next known TS in its
   Kafka partition (a later change's commit TS or a resolved TS) that is not a replay: changes
   of a partition are in commit order, so that TS bounds the change's own from above, and a TS
   below one already seen (TiCDC replaying from an older checkpoint) bounds nothing. None when
   nothing follows yet.
2. ``with_selection``: which changes this run applies (per table: above the TS already applied,
   up to the target TS; or, without TSs, the bronze batches not applied yet).
3. ``with_segment``: DDL barriers cut a table's changes into segments applied in turn;
   ``with_folds``: the DDLs folded into a segment (gold/plan.py) act on the changes before them.
4. ``key_actions``: each change as upserts/deletes keyed by its handle-key values (a delete by
   the old key; an UPDATE that changed the key, as TiCDC sends it with
   ``output-raw-change-event``, deletes the old key and upserts the new one).
5. ``last_per_key``: per (table, segment, key) the last action by (order TS, topic, partition,
   offset, index), after dropping at-least-once replays: copies of an event (same event_id and
   order TS) after its first in Kafka order. Both happen after one shuffle by key: every copy
   of an event has the same table, segment and key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from ticdc_lake.gold.plan import ColumnTrail
from ticdc_lake.silver.rows import COLUMN_TYPE

POSITION = ("topic", "partition", "offset", "index")
IMAGE_FIELDS = tuple(field.name for field in COLUMN_TYPE)
NO_SEGMENT_TS = None


def with_order_ts(changes: DataFrame, resolved: DataFrame | None) -> DataFrame:
    """Add ``order_ts``; ``resolved`` (topic, partition, ts, offset, index) fills gaps.

    A change without a commit TS is placed by the known TSs around it in its partition (its
    changes, resolved events and DDLs). A known TS below the largest one before it is a replay
    (TiCDC restarted from an older checkpoint) and bounds nothing. So a change followed by a
    replay takes the first TS after it above everything seen (the next TS it is truly
    before), unless it is itself the copy of an earlier change that the same next TS followed:
    then it takes that TS, and is recognised as the replay it is (``last_per_key``).
    """
    if resolved is None:
        return changes.withColumn("order_ts", F.col("commit_ts"))
    markers = resolved.select(
        "topic", "partition", "offset", "index", F.col("ts").alias("commit_ts")
    ).withColumn("_marker", F.lit(True))
    rows = changes.withColumn("_marker", F.lit(False))
    in_order = Window.partitionBy("topic", "partition").orderBy("offset", "index", "_marker")
    before = in_order.rowsBetween(Window.unboundedPreceding, -1)
    after = in_order.rowsBetween(Window.currentRow, Window.unboundedFollowing)
    known = F.col("commit_ts")
    # The largest TS before each row; a known TS above it is new (not a replay).
    seen = F.max(known).over(before)
    placed = (
        rows.unionByName(markers, allowMissingColumns=True)
        .withColumn("_seen", seen)
        .withColumn("_new", F.when(F.col("_seen").isNull() | (known > F.col("_seen")), known))
        .withColumn("_next", F.first(known, ignorenulls=True).over(after))
        .withColumn("_next_new", F.first("_new", ignorenulls=True).over(after))
        .where(~F.col("_marker"))
    )
    # Followed by a replay: the copy of an earlier change placed at the same next TS keeps it.
    replayed = F.col("_next") < F.col("_seen")
    copies = Window.partitionBy("topic", "partition", "event_id").orderBy("offset", "index")
    earlier = F.collect_set(F.when(known.isNull(), F.col("_next"))).over(
        copies.rowsBetween(Window.unboundedPreceding, -1)
    )
    copy = F.array_contains(earlier, F.col("_next"))
    order_ts = (
        F.when(known.isNotNull(), known)
        .when(replayed & ~copy, F.col("_next_new"))
        .otherwise(F.col("_next"))
    )
    return placed.withColumn("order_ts", order_ts).drop(
        "_marker", "_seen", "_new", "_next", "_next_new"
    )


def with_selection(
    changes: DataFrame,
    applied: DataFrame,
    *,
    target_ts: int | None,
    default_ts: int,
    default_batch: int,
) -> DataFrame:
    """Add ``applied_ts``, ``applied_batch`` (per table, from ``applied``: schema, table,
    applied_ts, applied_batch; tables not in it start at the defaults) and ``selected``.

    With a target TS: selected when applied_ts < order_ts <= target. Without (a changefeed that
    is not transactionally consistent): selected when the change's bronze batch is new.
    """
    known = applied.select(
        F.col("schema").alias("_applied_schema"),
        F.col("table").alias("_applied_table"),
        F.col("applied_ts").alias("_applied_ts"),
        F.col("applied_batch").alias("_applied_batch"),
    )
    match = (changes["schema"] == known["_applied_schema"]) & (
        changes["table"] == known["_applied_table"]
    )
    joined = (
        changes.join(F.broadcast(known), match, "left")
        .withColumn("applied_ts", F.coalesce("_applied_ts", F.lit(default_ts)))
        .withColumn("applied_batch", F.coalesce("_applied_batch", F.lit(default_batch)))
        .drop("_applied_schema", "_applied_table", "_applied_ts", "_applied_batch")
    )
    if target_ts is None:
        selected = F.col("bronze_batch") > F.col("applied_batch")
    else:
        order_ts = F.col("order_ts")
        selected = (
            order_ts.isNotNull() & (order_ts > F.col("applied_ts")) & (order_ts <= F.lit(target_ts))
        )
    return joined.withColumn("selected", selected)


def with_segment(
    changes: DataFrame, barriers: Mapping[tuple[str, str], Sequence[int | None]]
) -> DataFrame:
    """Add ``segment``: how many of its table's barriers each change comes after (by
    ``order_ts``). A barrier of None (a DDL without a TS, applied after the run's changes) never
    comes first; a change without an order TS comes after every barrier.

    A broadcast join on the table with each segment's TS range [low, high): a run may cross
    hundreds of DDLs, and a CASE branch per barrier outgrows what Spark can compile.
    """
    ranges = []
    for (schema, table), points in barriers.items():
        known = [point for point in points if point is not None]
        if not known:
            continue
        bounds = [None, *known, None]
        for number in range(len(known) + 1):
            ranges.append((schema, table, number, bounds[number], bounds[number + 1]))
    if not ranges:
        return changes.withColumn("segment", F.lit(0))
    segments = changes.sparkSession.createDataFrame(
        ranges,
        "_segment_schema string, _segment_table string, _segment int, _low long, _high long",
    )
    order_ts, low, high = F.col("order_ts"), F.col("_low"), F.col("_high")
    inside = (low.isNull() | (order_ts >= low)) & (high.isNull() | (order_ts < high))
    match = (
        (changes["schema"] == segments["_segment_schema"])
        & (changes["table"] == segments["_segment_table"])
        & (inside | (order_ts.isNull() & high.isNull()))
    )
    return (
        changes.join(F.broadcast(segments), match, "left")
        .withColumn("segment", F.coalesce(F.col("_segment"), F.lit(0)))
        .drop("_segment_schema", "_segment_table", "_segment", "_low", "_high")
    )


def with_folds(changes: DataFrame, points: Mapping[tuple[str, str, int], Sequence]) -> DataFrame:
    """Carry out a segment's folded DDLs (``points``: plan.FoldPoint by (schema, table,
    segment)) on the changes before them (by ``order_ts``; a change at a DDL's TS comes after
    it): a change before a reset (TRUNCATE, CREATE TABLE) is dropped, a change before a DROP
    COLUMN loses the column from its images (a column added again later is another column), a
    change before an ADD COLUMN gains the value the rows already there get, a change before a
    RENAME COLUMN has the column, and its handle key, renamed. Handle-key columns stay: the
    key is what the change is merged by.

    A broadcast join with each segment's TS ranges between its DDLs, as in ``with_segment``.
    """
    element = changes.schema["columns"].dataType.elementType
    ranges = [dataclasses.astuple(fold) for fold in fold_ranges(points)]
    if not ranges:
        return changes
    folds = changes.sparkSession.createDataFrame(ranges, _fold_ranges_type(element))
    order_ts, low = F.col("order_ts"), F.col("_low")
    match = (
        (changes["schema"] == folds["_fold_schema"])
        & (changes["table"] == folds["_fold_table"])
        & (changes["segment"] == folds["_fold_segment"])
        & (low.isNull() | (order_ts >= low))
        & (order_ts < F.col("_high"))
    )
    renamed = F.col("_renamed")
    fields = element.fieldNames()
    return (
        changes.join(F.broadcast(folds), match, "left")
        .where(~F.coalesce(F.col("_reset"), F.lit(False)))
        .withColumn("columns", _refolded("columns", fields))
        .withColumn("old_columns", _refolded("old_columns", fields))
        .withColumn(
            "handle_key",
            F.when(
                renamed.isNull() | ~F.arrays_overlap("handle_key", F.map_keys(renamed)),
                F.col("handle_key"),
            ).otherwise(F.transform("handle_key", _name_now)),
        )
        .drop(*_FOLD_COLUMNS)
    )


def _fold_ranges_type(element: StructType) -> StructType:
    """The Spark type of ``FoldRange`` rows; ``element``: an image element's type."""
    return StructType(
        [
            StructField("_fold_schema", StringType()),
            StructField("_fold_table", StringType()),
            StructField("_fold_segment", IntegerType()),
            StructField("_low", LongType()),
            StructField("_high", LongType()),
            StructField("_reset", BooleanType()),
            StructField("_dropped", ArrayType(StringType())),  # gone, not renamed
            StructField("_renamed", MapType(StringType(), StringType())),
            StructField("_added", ArrayType(element)),
        ]
    )


def _name_now(name: Column) -> Column:
    """A column's name after the fold's renames."""
    return F.coalesce(F.try_element_at(F.col("_renamed"), name), name)


def _renamed_field(column: Column, name: str) -> Column:
    # A new struct, not withField: Spark interprets the lambda, and withField's generic
    # struct update costs more per element.
    value = _name_now(column[name]) if name == "name" else column[name]
    return value.alias(name)


def _refolded(image: str, fields: list[str]) -> Column:
    """An image (``fields``: its elements' fields) with the fold's dropped columns gone (the
    handle key's kept), renamed ones renamed and added ones appended."""
    dropped, renamed = F.col("_dropped"), F.col("_renamed")
    handle = F.coalesce(F.col("handle_key"), F.array().cast("array<string>"))
    # Spark interprets a lambda for every element: each pass runs only on an image
    # holding a column it changes (an image's names are read without one).
    names = F.col(image)["name"]
    kept = F.when(
        F.arrays_overlap(names, dropped),
        F.filter(
            F.col(image),
            lambda c: ~F.array_contains(dropped, c["name"]) | F.array_contains(handle, c["name"]),
        ),
    ).otherwise(F.col(image))
    named = F.when(
        F.arrays_overlap(names, F.map_keys(renamed)),
        F.transform(kept, lambda c: F.struct(*[_renamed_field(c, f) for f in fields])),
    ).otherwise(kept)
    unchanged = dropped.isNull() | F.col(image).isNull()
    return F.when(unchanged, F.col(image)).otherwise(F.concat(named, F.col("_added")))


@dataclasses.dataclass(frozen=True)
class FoldRange:
    """The changes of a table's segment with ``low <= order_ts < high`` (low None: from the
    segment's start) and what the folded DDLs after them do to them."""

    schema: str
    table: str
    segment: int
    low: int | None
    high: int
    reset: bool  # discarded (TRUNCATE, CREATE TABLE after them)
    dropped: list[str]  # columns gone from their images, and not renamed
    renamed: dict[str, str]  # name in their images -> name now
    added: list[tuple]  # image elements they gain (silver's image element fields, in order)


def fold_ranges(points: Mapping[tuple[str, str, int], Sequence]) -> list[FoldRange]:
    """The ranges of changes a fold acts on, from each segment's FoldPoints (in order): one per
    TS between the segment's folded DDLs, where they reset the table or take columns away."""
    ranges = []
    for (schema, table, segment), folds in points.items():
        stamps = sorted({point.ts for point in folds})
        for number, high in enumerate(stamps):
            later = [point for point in folds if point.ts >= high]
            reset = any(point.reset for point in later)
            trail, added = _columns_after(later)
            if reset or trail.gone:
                renamed = trail.renamed
                elements = [
                    tuple(value.image_element()[name] for name in IMAGE_FIELDS) for value in added
                ]
                ranges.append(
                    FoldRange(
                        schema, table, segment, stamps[number - 1] if number else None, high,
                        reset, sorted(trail.gone - set(renamed)), renamed, elements,
                    )
                )  # fmt: skip
    return ranges


_FOLD_COLUMNS = (
    "_fold_schema", "_fold_table", "_fold_segment", "_low", "_high", "_reset", "_dropped",
    "_renamed", "_added",
)  # fmt: skip


def _columns_after(points: Sequence) -> tuple[ColumnTrail, list]:
    """What the folded DDLs ``points`` (in order) do to the columns of the images before them:
    where each column goes (``ColumnTrail``), and the AddedValues of the columns they add
    (those added without a value are NULL, as an image without them reads)."""
    trail, added = ColumnTrail(), {}
    for point in points:
        for name in point.dropped:
            trail.drop(name)
            added.pop(name, None)
        for value in point.added:
            trail.drop(value.name)
            added[value.name] = value
        if point.renamed is not None:
            old, new = point.renamed
            trail.rename(old, new)
            value = added.pop(old, None)
            if value is not None:
                added[new] = dataclasses.replace(value, name=new)
    return trail, [value for value in added.values() if not value.is_null]


KEY_TYPE = "array<struct<n:string,t:string,b:binary>>"


def _key_part(column: Column) -> Column:
    return F.struct(
        column["name"].alias("n"), column["text"].alias("t"), column["binary"].alias("b")
    )


def _key_of(image: Column, handle: Column, sole: Column) -> Column:
    """The handle-key values of an image, sorted by column name: compared and hashed, never
    read. (``sort_array`` orders by the struct's first field, the unique name, with no lambda
    comparator: this runs once or twice per change.)

    A handle of one column (most tables) is ``sole``, the image's element of that column
    (null: none), found without a lambda: Spark interprets lambdas element by element."""
    key = F.filter(image, lambda c: F.array_contains(handle, c["name"]))
    by_lambda = F.sort_array(F.transform(key, _key_part))
    return (
        F.when(F.size(handle) != 1, by_lambda)
        .when(image.isNull(), F.lit(None).cast(KEY_TYPE))
        .when(sole.isNull(), F.array().cast(KEY_TYPE))
        .otherwise(F.array(_key_part(sole)))
    )


def _sole_position(image: Column, handle: Column) -> Column:
    """Where the image holds the column of a one-column handle (0: nowhere; null: no image,
    or a handle of other than one column)."""
    return F.when(F.size(handle) == 1, F.array_position(image["name"], F.element_at(handle, 1)))


def _sole(image: Column, position: Column) -> Column:
    return F.when(position > 0, F.element_at(image, position.cast("int")))


# key_actions' working columns, dropped from its result.
_KEY_COLUMNS = ("_new_at", "_old_at", "_new_sole", "_old_sole", "_new_key", "_old_key")


def key_actions(changes: DataFrame, fallback_handles: Mapping[tuple[str, str], Sequence[str]]):
    """One row per action: ``deleted``, ``image``, ``key`` (its handle-key values),
    ``handle``, ``sub``.

    ``fallback_handles`` gives, per table, the handle key the DDL log implies, for changes that
    name none (Canal-JSON marks only primary keys).
    """
    fallback = F.lit(None).cast("array<string>")
    for (schema, table), handle in fallback_handles.items():
        if handle:
            match = (F.col("schema") == schema) & (F.col("table") == table)
            fallback = F.when(match, F.array(*[F.lit(n) for n in handle])).otherwise(fallback)
    handle = F.when(F.size("handle_key") > 0, F.col("handle_key")).otherwise(fallback)
    prepared = changes.withColumn("handle", F.coalesce(handle, F.array().cast("array<string>")))
    # In projections of their own, so each is found once and not once per use.
    prepared = prepared.withColumns(
        {
            "_new_at": _sole_position(F.col("columns"), F.col("handle")),
            "_old_at": _sole_position(F.col("old_columns"), F.col("handle")),
        }
    )
    prepared = prepared.withColumns(
        {
            "_new_sole": _sole(F.col("columns"), F.col("_new_at")),
            "_old_sole": _sole(F.col("old_columns"), F.col("_old_at")),
        }
    )
    prepared = prepared.withColumns(
        {
            "_new_key": _key_of(F.col("columns"), F.col("handle"), F.col("_new_sole")),
            "_old_key": _key_of(F.col("old_columns"), F.col("handle"), F.col("_old_sole")),
        }
    )
    new_key, old_key = F.col("_new_key"), F.col("_old_key")

    def action(deleted: bool, image: str, key: Column, sub: int) -> Column:
        return F.struct(
            F.lit(deleted).alias("deleted"),
            F.col(image).alias("image"),
            key.alias("key"),
            F.lit(sub).alias("sub"),
        )

    key_changed = (
        (F.col("op") == "update") & F.col("old_columns").isNotNull() & (old_key != new_key)
    )
    actions = (
        F.when(F.col("op") == "delete", F.array(action(True, "old_columns", old_key, 0)))
        .when(
            key_changed,
            F.array(action(True, "old_columns", old_key, 0), action(False, "columns", new_key, 1)),
        )
        .otherwise(F.array(action(False, "columns", new_key, 0)))
    )
    return (
        prepared.withColumn("_action", F.explode(actions))
        .select("*", "_action.*")
        .drop("_action", "columns", "old_columns", *_KEY_COLUMNS)
    )


def last_per_key(actions: DataFrame, ahead: Sequence[str] = (), replays: bool = True) -> DataFrame:
    """Keep the last action per (schema, table, segment, key), replays dropped. A change without
    any order TS (only when nothing tells its TS) sorts after every change that has one.

    ``ahead``: columns that are functions of (schema, table, segment), e.g. a hash of them, to
    lead the windows' partitioning: each task's result then comes out sorted by them, as a
    write partitioned by them needs (without a sort of its own). ``replays`` False: the caller
    knows no event occurs twice (a run's counts found no duplicate), so copies need no
    dropping, and the wide rows are sorted once instead of twice."""
    key = (*ahead, "schema", "table", "segment", "key")
    # One exchange: both windows below partition by a superset of these columns. Not by the
    # segment: it is a literal when no DDL splits the run, and Spark drops a literal from a
    # window's partitioning but not from a hash partitioning, which then satisfies neither
    # window (three more shuffles of the wide rows).
    clustered = actions.repartition("schema", "table", "key")
    first = Window.partitionBy(*key, "event_id", "order_ts", "sub").orderBy(*POSITION)
    last = Window.partitionBy(*key).orderBy(
        F.col("order_ts").desc_nulls_first(),
        *[F.col(name).desc() for name in POSITION],
        F.col("sub").desc(),
    )
    unique = clustered
    if replays:
        unique = clustered.withColumn("_copy", F.row_number().over(first)).where("_copy = 1")
        unique = unique.drop("_copy")
    return unique.withColumn("_rank", F.row_number().over(last)).where("_rank = 1").drop("_rank")
