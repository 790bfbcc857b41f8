"""Compact: the silver change log → one typed gold Delta table per upstream table.

    compact(spark, config, *, changefeeds=None, until_ts=None, rebuild=False) -> CompactResult

Per changefeed (config.changefeeds), the target of a run is

- ``watermark`` mode: the changefeed's global watermark W (stages/watermark.py), capped by
  ``until_ts``: gold then holds exactly the transactions with commit TS <= W, so a transaction
  whose rows span partitions is wholly in or wholly out;
- ``cutoff`` mode (``watermarks: false`` with ``cutoff-ts``): the same at the user's cut-off;
- ``inconsistent`` mode (no watermarks, no cut-off, or a protocol without commit TSs): every
  change received is applied in Kafka order per key; the state table says gold is not
  transactionally consistent, and its ``reason`` says why (``inconsistent_reason``).

The state's ``reason`` also names what gold knowingly misses: changes without a TS held back
(``cutoff``: deletes after the last TS <= the cut-off in their partition), and a row-changing
DDL without a TS (TRUNCATE in Canal-JSON without the TiDB extension) applied after the run's
changes. Those derived from the run are recomputed each run; DDL and failure reasons are kept.

A run applies the changes with applied TS < TS <= target (``gold/reduce.py``): replays are
recognised by event_id; per handle key the last change by (commit TS, topic, partition, offset,
index) wins; deletes remove rows; a key change (delete + insert at one commit TS) moves the row.
A table's DDLs are folded into its changes (``gold/plan.py``, ``reduce.with_folds``): within a
run, ADD/DROP COLUMN, TRUNCATE and CREATE TABLE reach gold with the changes in at most two
commits (a column reshape, then one merge, or after a TRUNCATE one commit replacing the rows).
Only the DDLs a merge cannot carry are barriers, and only for the tables they alter: the
table's changes before one are merged under the old schema, then its effect is carried out on
gold (``gold/tables.py``), then the changes after it (``_Steps``).
Types come from CREATE TABLE/ALTER in the DDL log, else from the change rows
(``gold/types.py``); TIMESTAMP text is read in the topic's configured time zone.

Incremental: silver is partitioned by bronze batch, and the state records the last batch that is
settled (every change in it applied, none still above the target); a run reads only the later
batches (partition pruning), and of those only changes above the applied TS (pushed down to
Parquet statistics). Gold is changed by ``merge_delta``, which rewrites only the files holding
changed keys (files loaded by the executors are sorted key ranges, so recent keys share few
files). Only DDL rewrites (DROP/MODIFY COLUMN, partition drops, RENAME) rewrite a table.

A cut-off TS is the user's word that every change up to it has landed: changes with a TS at or
below it that land later are not applied (raise the cut-off, or ``rebuild``).

Idempotent: each gold commit carries an app transaction (``compact:<schema>.<table>#<gen>`` for
merges with version = the segment's last TS, ``...:ddl`` for DDL effects and reshapes with
version = DDL TS x 8 + n, n counting the table's effects at that TS),
and the state table (gold/state.py) is written last with version = the target. A rerun
changes nothing and adds no Delta version; a run killed anywhere resumes where it stopped.

A gold table's path does not name its changefeed, so a table belongs to the changefeed whose
state row it has (or that wrote it first in the run): another changefeed carrying changes of it
leaves it alone, and the table fails there with what to change (``_ChangefeedRun._taken``).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import shutil
from collections.abc import Container, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ticdc_lake.config import ChangefeedConfig, PipelineConfig
from ticdc_lake.delta import delta_table_exists, read_delta
from ticdc_lake.errors import ConfigError
from ticdc_lake.gold.catalog import (
    AddColumns,
    AlterColumn,
    Catalog,
    Create,
    DeleteRows,
    Drop,
    DropColumns,
    Effect,
    Inconsistent,
    Move,
    TableInfo,
    TableName,
    Truncate,
)
from ticdc_lake.gold.exceptions import CompactError, GoldError
from ticdc_lake.gold.plan import (
    Barrier,
    Segment,
    Timeline,
    build_timeline,
    parse_record,
    unique_records,
)
from ticdc_lake.gold.reduce import (
    key_actions,
    last_per_key,
    with_folds,
    with_order_ts,
    with_segment,
    with_selection,
)
from ticdc_lake.gold.state import (
    CUTOFF,
    INCONSISTENT,
    WATERMARK,
    TableState,
    read_state,
    write_state,
)
from ticdc_lake.gold.tables import (
    COMMIT_TS,
    GoldTable,
    SegmentStats,
    TypedSegment,
    alter_column,
    delete_rows,
    describe_schema,
    frame_specs,
    plan_segment,
    type_segment,
    typed_frame,
)
from ticdc_lake.gold.types import ColumnSpec, gold_type
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.quality.quarantine import COORDINATES, quarantined_coordinates
from ticdc_lake.stages.watermark import (
    ChangefeedWatermark,
    changefeed_watermarks,
    column_max,
    read_watermarks,
)

# Room for this many DDL effects on one table at one commit TS (versions are TS x 8 + n; a TSO
# x 8 still fits a long until the year 2100).
EFFECTS_PER_DDL = 8
# Inconsistent mode numbers its steps from (bronze batch + 1) x STEPS_PER_RUN.
STEPS_PER_RUN = 1 << 16
# A run reading more changes than this keeps its change set in Spark: an empty gold table is
# loaded by the executors, and other segments are brought to the driver (for merge_delta) one
# at a time. Below it, one collect serves the whole run.
COLLECT_LIMIT = 200_000
# Rows per file of a gold table loaded by the executors (~10-40 MB of Parquet).
ROWS_PER_FILE = 250_000
# A large run's reduced change set is written under <lake>/SCRATCH/compact-<changefeed>/ for
# the run, in one directory per SPILL_BUCKET (a hash of table and segment).
SCRATCH = "_scratch"
SPILL_BUCKET = "segment_bucket"
REDUCED_COLUMNS = (
    "schema", "table", "segment", "deleted", "image", "handle", "commit_ts", "order_ts",
    "handle_key_only", "topic", "partition", "offset",
)  # fmt: skip


@dataclass(frozen=True)
class TableResult:
    table: str
    mode: str
    watermark: int | None  # the TS gold reflects (None: inconsistent without TSs)
    previous: int | None  # the applied TS before the run
    changes: int = 0  # changes applied this run (replays not counted)
    duplicates: int = 0  # replays recognised and skipped
    upserts: int = 0  # rows written (after keeping the last change per key)
    deletes: int = 0  # keys deleted
    ddl: int = 0  # DDL effects carried out
    rows: int = 0  # rows in gold after the run
    version: int | None = None  # gold Delta version after the run
    commits: int = 0  # gold commits this run
    dropped: bool = False
    reason: str | None = None  # why gold is knowingly not what upstream held
    zero_dates: int = 0  # zero dates (0000-00-00) stored as NULL

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class ChangefeedResult:
    name: str
    mode: str
    target: int | None  # the TS compacted to (None: inconsistent without TSs)
    previous: int | None
    generation: int
    tables: tuple[TableResult, ...] = ()
    noop: bool = False
    pending: int = 0  # changes without a commit TS not yet placeable (held for a later run)
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        data["tables"] = [t.to_dict() for t in self.tables]
        data["notes"] = list(self.notes)
        return data


@dataclass(frozen=True)
class CompactResult:
    changefeeds: tuple[ChangefeedResult, ...]
    failures: dict[str, str] = field(default_factory=dict)

    @property
    def tables(self) -> dict[str, TableResult]:
        return {t.table: t for feed in self.changefeeds for t in feed.tables}

    def to_dict(self) -> dict[str, Any]:
        return {
            "changefeeds": [feed.to_dict() for feed in self.changefeeds],
            "failures": dict(self.failures),
        }

    def __str__(self) -> str:
        lines = []
        for feed in self.changefeeds:
            at = "no TS" if feed.target is None else f"TS {feed.target}"
            state = "nothing to do" if feed.noop else f"{len(feed.tables)} tables"
            lines.append(f"compact {feed.name}: {feed.mode} at {at}, {state}")
            for table in feed.tables:
                flag = " [dropped]" if table.dropped else ""
                flag += f" [not consistent: {table.reason}]" if table.reason else ""
                lines.append(
                    f"  {table.table}: {table.rows} rows; +{table.upserts} upserts, "
                    f"-{table.deletes} deletes, {table.ddl} DDL, {table.duplicates} replays "
                    f"skipped{flag}"
                )
            if feed.pending:
                lines.append(f"  {feed.pending} changes without commit TS held for later")
            lines.extend(f"  note: {note}" for note in feed.notes)
        for table, reason in sorted(self.failures.items()):
            lines.append(f"  FAILED {table}: {reason}")
        return "\n".join(lines)


def compact(
    spark: SparkSession,
    config: PipelineConfig,
    *,
    changefeeds: Sequence[str] | None = None,
    until_ts: int | None = None,
    rebuild: bool = False,
    fold_ddl: bool = True,
) -> CompactResult:
    """Bring every gold table of the chosen changefeeds (default: all) up to its target.

    ``until_ts`` caps the target TS (backfills, tests). ``rebuild`` empties the changefeed's
    gold tables and applies the change log again from the start. ``fold_ddl`` False makes
    every DDL a barrier with a step of its own (the slow reference path the fold is tested
    against). Raises CompactError (with ``.result``) when some tables failed; the others are
    compacted and recorded.
    """
    layout = LakeLayout(config.lake)
    names = list(changefeeds) if changefeeds is not None else list(config.changefeeds)
    unknown = [name for name in names if name not in config.changefeeds]
    if unknown:
        raise ConfigError(
            f"{config.source}: unknown changefeed(s) {unknown}; known: {sorted(config.changefeeds)}"
        )
    marks = changefeed_watermarks(config, read_watermarks(spark, layout))
    states = read_state(spark, layout.gold_state)
    owners = {TableName(state.schema, state.table): state.changefeed for state in states}
    results, failures = [], {}
    for name in names:
        run = _ChangefeedRun(
            spark,
            config,
            layout,
            config.changefeeds[name],
            marks[name],
            [state for state in states if state.changefeed == name],
            owners,
            until_ts=until_ts,
            rebuild=rebuild,
            fold_ddl=fold_ddl,
        )
        results.append(run.run())
        failures.update(run.failures)
        for table in run.tables:
            owners.setdefault(table, name)
    result = CompactResult(tuple(results), failures)
    if failures:
        error = CompactError(failures)
        error.result = result
        raise error
    return result


def _carries_commit_ts(config: PipelineConfig, topic: str) -> bool:
    """Whether the topic's changes carry commit TSs (Avro deletes never do)."""
    settings = config.topic(topic)
    return settings.enable_tidb_extension or settings.protocol not in ("avro", "canal-json")


def _lacks_commit_ts(config: PipelineConfig, topic: str) -> bool:
    """Whether some changes of the topic come without a commit TS (PROTOCOLS.md §4, §5.4)."""
    settings = config.topic(topic)
    return settings.protocol == "avro" or (
        settings.protocol == "canal-json" and not settings.enable_tidb_extension
    )


def target_of(
    config: PipelineConfig,
    feed: ChangefeedConfig,
    mark: ChangefeedWatermark,
    until_ts: int | None,
) -> tuple[str, int | None, list[str]]:
    """(mode, target TS, notes) of a changefeed."""
    notes = []
    without_ts = [t for t in feed.topics if not _carries_commit_ts(config, t)]
    if feed.watermarks:
        target = mark.watermark or 0
        mode = WATERMARK
    elif feed.cutoff_ts is not None and not without_ts:
        target, mode = feed.cutoff_ts, CUTOFF
    else:
        if feed.cutoff_ts is not None:
            notes.append(
                f"cutoff-ts {feed.cutoff_ts} ignored: topics {without_ts} carry no "
                "commit TS (enable the TiDB extension)"
            )
        return INCONSISTENT, None, notes
    if until_ts is not None and until_ts < target:
        target = until_ts
        notes.append(f"target capped at until_ts {until_ts}")
    return mode, target, notes


class _ChangefeedRun:
    """One changefeed's compaction: plan, reduce, then steps in order, then the state."""

    def __init__(
        self,
        spark: SparkSession,
        config: PipelineConfig,
        layout: LakeLayout,
        feed: ChangefeedConfig,
        mark: ChangefeedWatermark,
        prior: list[TableState],
        owners: dict[TableName, str],
        *,
        until_ts: int | None,
        rebuild: bool,
        fold_ddl: bool = True,
    ):
        self.spark = spark
        self.fold_ddl = fold_ddl
        self.config = config
        self.layout = layout
        self.feed = feed
        self.prior = {TableName(p.schema, p.table): p for p in prior}
        self.owners = owners  # gold table -> the changefeed it belongs to
        self.tables = set(self.prior)  # the gold tables this run keeps state rows of
        self.mode, self.target, notes = target_of(config, feed, mark, until_ts)
        self.notes = list(notes)
        self.failures: dict[str, str] = {}
        self.zones = {topic: config.topic(topic).time_zone for topic in feed.topics}
        self.lacks_ts = any(_lacks_commit_ts(config, t) for t in feed.topics)
        self.mode_reason = inconsistent_reason(config, feed) if self.mode == INCONSISTENT else None
        generation = max((p.generation for p in prior), default=0)
        modes = {mode for mode in map(_changefeed_mode, prior) if mode is not None}
        self.rebuild = bool(prior) and (rebuild or bool(modes - {self.mode}))
        if self.rebuild:
            if not rebuild:
                self.notes.append(f"mode changed from {sorted(modes)} to {self.mode}: rebuilt")
            generation += 1
        self.generation = generation
        applied = [p for p in prior] if not self.rebuild else []
        self.low_ts = min((p.applied_ts for p in applied), default=-1)
        self.low_batch = min((p.applied_batch for p in applied), default=-1)

    # --- the run -------------------------------------------------------------------------

    def run(self) -> ChangefeedResult:
        noop = self._noop()
        if noop is not None:
            return noop
        parsed = [parse_record(record) for record in self._ddl_records()]
        initial = Catalog(
            {name: TableInfo(name) for name, p in self.prior.items() if not p.dropped}
        )
        timeline = build_timeline(
            parsed,
            initial=initial,
            applied_ts=self.low_ts,
            applied_batch=self.low_batch,
            target_ts=self.target if self.mode != INCONSISTENT else None,
            fold=self.fold_ddl,
        )
        reduced, counts, batches = self._reduce(timeline)
        try:
            tables = [n for n in self._tables(timeline, reduced) if not self._taken(n)]
            work = {n: _TableWork(n, self._gold(n), self.prior.get(n)) for n in tables}
            self.tables |= set(work)
            if self.rebuild:
                self._empty_for_rebuild(work)
            steps = _Steps(self.zones, self.failures)
            steps.execute(timeline, reduced, work, self._versions(batches))
        finally:
            reduced.release()
        return self._finish(timeline, counts, batches, work)

    def _noop(self) -> ChangefeedResult | None:
        if self.rebuild or not self.prior:
            return None
        if self.mode != INCONSISTENT:
            if all(p.applied_ts >= self.target for p in self.prior.values()):
                if self.target < self.low_ts:
                    self.notes.append(
                        f"target {self.target} is below the TS already applied ({self.low_ts}): "
                        "gold stays (was a partition added to the config?)"
                    )
                return self._unchanged()
            return None
        latest = column_max(self.layout.changes, "bronze_batch")
        if latest is None or latest <= self.low_batch:
            return self._unchanged()
        return None

    def _unchanged(self) -> ChangefeedResult:
        tables = tuple(
            TableResult(
                table=p.full_name,
                mode=p.mode,
                watermark=p.watermark,
                previous=p.applied_ts,
                rows=p.rows,
                version=p.gold_version,
                dropped=p.dropped,
                reason=p.reason,
            )
            for p in sorted(self.prior.values(), key=lambda p: p.full_name)
        )
        return self._result(tables, noop=True)

    def _result(self, tables: Sequence[TableResult], **outcome: Any) -> ChangefeedResult:
        return ChangefeedResult(
            self.feed.name,
            self.mode,
            self.target,
            self.low_ts,
            self.generation,
            tuple(tables),
            notes=tuple(self.notes),
            **outcome,
        )

    def _taken(self, name: TableName) -> bool:
        """Whether the gold table is another changefeed's; if so, it fails in this one."""
        owner = self.owners.get(name, self.feed.name)
        if owner == self.feed.name or name in self.prior:
            return False
        feed = self.feed.name
        message = (
            f"gold table {name} ({self.layout.gold(name.schema, name.name)}) belongs to "
            f"changefeed {owner!r} (state table {self.layout.gold_state}); changefeed {feed!r} "
            "carries changes of it too and leaves it alone: "
        )
        if owner in self.config.changefeeds:
            message += f"send the changes of {name} through the topics of one changefeed only"
        else:
            message += (
                f"if {owner!r} was renamed {feed!r}, rename it back; or, to give the table to "
                f"{feed!r}, delete the rows of changefeed {owner!r} from the state table and "
                f"their gold tables, then run compact with --changefeed {feed} --rebuild"
            )
        self.failures[str(name)] = message
        return True

    def _gold(self, name: TableName) -> GoldTable:
        return GoldTable(
            self.spark, name, self.layout.gold(name.schema, name.name),
            f"compact:{name}#{self.generation}",
        )  # fmt: skip

    # --- reading silver ------------------------------------------------------------------

    def _topics(self) -> F.Column:
        return F.col("topic").isin(list(self.feed.topics))

    def _ddl_records(self):
        if not delta_table_exists(self.layout.ddl):
            return []
        rows = read_delta(self.spark, self.layout.ddl).where(self._topics()).collect()
        return unique_records([row.asDict() for row in rows])

    def _changes(self) -> DataFrame | None:
        if not delta_table_exists(self.layout.changes):
            return None
        changes = read_delta(self.spark, self.layout.changes).where(self._topics())
        # Rows a data-quality check quarantined stay out of gold.
        quarantined = quarantined_coordinates(self.spark, self.layout)
        if quarantined is not None:
            changes = changes.join(F.broadcast(quarantined), COORDINATES, "left_anti")
        # Bronze batches up to low_batch are settled: every change in them is applied (or was
        # a replay). Silver is partitioned by bronze batch, so Spark reads only later files.
        unsettled = changes.where(F.col("bronze_batch") > self.low_batch)
        if self.mode == INCONSISTENT or self.lacks_ts:
            # Changes without a TS need their neighbours, whatever their TSs.
            return unsettled
        # Above the target too: those changes keep their batches unsettled (see _counts).
        return unsettled.where(F.col("commit_ts") > self.low_ts)

    def _markers(self) -> DataFrame | None:
        """Known TSs in the partitions: resolved events and DDLs of the unsettled batches, and
        per partition the largest TS of the settled ones (before them: replays below it are
        told from bounds, ``reduce.with_order_ts``)."""
        frames, settled = [], []
        tables = (
            (self.layout.resolved, "ts"),
            (self.layout.ddl, "commit_ts"),
            (self.layout.changes, "commit_ts"),
        )
        for path, ts in tables:
            if not delta_table_exists(path):
                continue
            rows = read_delta(self.spark, path).where(self._topics())
            if path != self.layout.changes:
                frames.append(
                    rows.where(F.col("bronze_batch") > self.low_batch).select(
                        "topic", "partition", F.col(ts).alias("ts"), "offset", "index"
                    )
                )
            settled.append(
                rows.where(F.col("bronze_batch") <= self.low_batch).select(
                    "topic", "partition", F.col(ts).alias("ts")
                )
            )
        if settled and self.low_batch >= 0:
            floor = functools.reduce(DataFrame.unionByName, settled).groupBy("topic", "partition")
            frames.append(
                floor.agg(F.max("ts").alias("ts"))
                .where(F.col("ts").isNotNull())
                .withColumn("offset", F.lit(-1).cast("long"))
                .withColumn("index", F.lit(-1).cast("int"))
            )
        return functools.reduce(DataFrame.unionByName, frames) if frames else None

    def _reduce(
        self, timeline: Timeline
    ) -> tuple[_Reduced, dict[TableName, _TableCounts], _Batches]:
        """The reduced change set (REDUCED_COLUMNS), per-table counts and batch bounds."""
        changes = self._changes()
        if changes is None:
            return _Reduced(pa.table({n: [] for n in REDUCED_COLUMNS})), {}, _Batches()
        ordered = with_order_ts(changes, self._markers() if self.lacks_ts else None)
        applied = self.spark.createDataFrame(
            [
                (name.schema, name.name, p.applied_ts, p.applied_batch)
                for name, p in self.prior.items()
                if not self.rebuild
            ],
            "schema string, table string, applied_ts long, applied_batch long",
        )
        selected = with_selection(
            ordered,
            applied,
            target_ts=self.target if self.mode != INCONSISTENT else None,
            default_ts=self.low_ts,
            default_batch=self.low_batch,
        )
        # Not cached: the counts read only narrow columns (Parquet column pruning), and caching
        # the images of a large run would not fit a small driver.
        counts, batches = self._counts(selected)
        splits, points = {}, {}
        for name in {n for b in timeline.barriers for n in b.tables}:
            segments = timeline.segments_of(name)
            splits[(name.schema, name.name)] = [segment.end for segment in segments[:-1]]
            for segment in segments:
                if segment.folds:
                    points[(name.schema, name.name, segment.number)] = segment.points(
                        name, self.zones
                    )
        handles = self._fallback_handles(timeline)
        applying = with_segment(selected.where(F.col("selected")), splits)
        applying = with_folds(applying, points)
        reduced = last_per_key(key_actions(applying, handles)).select(*REDUCED_COLUMNS)
        if sum(count.read for count in counts.values()) <= COLLECT_LIMIT:
            return _Reduced(reduced.toArrow()), counts, batches
        spill = self.layout.root / SCRATCH / f"compact-{self.feed.name}"
        return _Reduced.spilled(reduced, spill), counts, batches

    def _counts(self, marked: DataFrame) -> tuple[dict[TableName, _TableCounts], _Batches]:
        """Per table: changes read, distinct, left for later; the batch bounds of the run."""
        selected = F.col("selected")
        unsettled = F.lit(False)  # a change this run leaves for a later one
        if self.mode != INCONSISTENT:
            unsettled = ~selected & (
                F.col("order_ts").isNull() | (F.col("order_ts") > F.lit(self.target))
            )
        waiting = F.col("commit_ts").isNull() & unsettled
        rows = (
            marked.groupBy("schema", "table")
            .agg(
                F.sum(selected.cast("long")).alias("read"),
                # Replays: copies of an event (same event_id and order TS) beyond the first.
                F.count_distinct(
                    F.when(selected, F.struct("event_id", F.coalesce("order_ts", F.lit(-1))))
                ).alias("changes"),
                F.sum(waiting.cast("long")).alias("pending"),
                F.min(F.when(unsettled, F.col("bronze_batch"))).alias("pending_batch"),
                F.max("bronze_batch").alias("max_batch"),
                F.max(F.when(selected, F.col("order_ts"))).alias("max_ts"),
            )
            .collect()
        )
        counts = {
            TableName(row.schema, row.table): _TableCounts(
                read=int(row.read or 0),
                changes=int(row.changes or 0),
                pending=int(row.pending or 0),
                max_ts=row.max_ts,
            )
            for row in rows
        }
        pending = [row.pending_batch for row in rows if row.pending_batch is not None]
        batches = _Batches(
            latest=max((row.max_batch for row in rows), default=None),
            pending=min(pending) if pending else None,
        )
        return counts, batches

    def _fallback_handles(self, timeline: Timeline) -> dict[tuple[str, str], tuple[str, ...]]:
        """Per table the handle the DDL log implies (the latest catalog that knows it)."""
        handles = {}
        for catalog in [timeline.history, *(b.catalog for b in timeline.barriers)]:
            for name, info in catalog.tables.items():
                if info.handle:
                    handles[(name.schema, name.name)] = info.handle
        return handles

    # --- planning the steps --------------------------------------------------------------

    def _tables(self, timeline: Timeline, reduced: _Reduced) -> list[TableName]:
        names = set(self.prior)
        for barrier in timeline.barriers:
            names |= barrier.tables
        for catalog in [timeline.history, *(b.catalog for b in timeline.barriers)]:
            names |= {name for name, info in catalog.tables.items() if info.complete}
        names |= {TableName(schema, table) for schema, table, _ in reduced.keys}
        return sorted(names, key=str)

    def _versions(self, batches: _Batches) -> _Versions:
        if self.mode == INCONSISTENT:
            top = max(self.low_batch, batches.latest if batches.latest is not None else -1)
            return _Versions(None, (top + 1) * STEPS_PER_RUN)
        return _Versions(self.target, None)

    def _empty_for_rebuild(self, work: dict[TableName, _TableWork]) -> None:
        for item in work.values():
            if item.gold.exists():
                # Version 0 of the new generation's ddl app: before every later step.
                ddl = item.ddl_gold()
                item.commits += ddl.empty(0)

    # --- the state -----------------------------------------------------------------------

    def _finish(
        self,
        timeline: Timeline,
        counts: dict[TableName, _TableCounts],
        batches: _Batches,
        work: dict[TableName, _TableWork],
    ) -> ChangefeedResult:
        final = timeline.barriers[-1].catalog if timeline.barriers else timeline.history
        latest = max(self.low_batch, batches.latest if batches.latest is not None else -1)
        if self.mode != INCONSISTENT and batches.pending is not None:
            applied_batch = batches.pending - 1
        else:
            applied_batch = latest
        states, results = [], []
        for name, item in sorted(work.items(), key=lambda pair: str(pair[0])):
            count = counts.get(name, _TableCounts())
            if item.failed:
                # The table keeps what it reflected before (nothing, if it is new), so the next
                # run reads its changes again and retries.
                prior = item.prior
                states.append(_failed_state(self.feed.name, item, self.generation))
                results.append(
                    TableResult(
                        str(name),
                        "failed",
                        None,
                        prior.applied_ts if prior else None,
                        reason=item.reasons[-1],
                    )
                )
                continue
            state = self._state(item, count, final.info(name), applied_batch)
            states.append(state)
            results.append(self._table_result(item, count, state))
        if states:
            version = (
                self.target if self.mode != INCONSISTENT else (applied_batch + 1) * STEPS_PER_RUN
            )
            write_state(self.layout.gold_state, self.feed.name, states, version, self.generation)
        pending = sum(count.pending for count in counts.values())
        return self._result(results, pending=pending)

    def _reason(self, item: _TableWork, count: _TableCounts) -> tuple[str, str | None]:
        """A table's mode and reason after the run."""
        prior = item.prior
        carried = prior and prior.reason and not self.rebuild and not _failed(prior)
        marks = _marks(prior.reason) if carried else []
        marked = _join_reasons(*dict.fromkeys(marks + item.reasons))
        # A DDL or a failure makes the table inconsistent; the run's own reasons (the
        # changefeed's mode, changes held back) leave the mode as it is.
        mode = INCONSISTENT if marked else self.mode
        held = count.pending if self.mode != INCONSISTENT else 0
        reason = _join_reasons(self.mode_reason, self._held_reason(held) if held else None, marked)
        return mode, reason

    def _state(
        self, item: _TableWork, count: _TableCounts, info: TableInfo, applied_batch: int
    ) -> TableState:
        """The state row of a table compacted in this run."""
        prior = item.prior
        applied_ts = self.target
        if self.mode == INCONSISTENT:
            seen = [count.max_ts, prior.applied_ts if prior else None]
            applied_ts = max((v for v in seen if v is not None), default=self.low_ts)
        mode, reason = self._reason(item, count)
        return TableState(
            changefeed=self.feed.name,
            schema=item.name.schema,
            table=item.name.name,
            path=str(item.gold.path),
            mode=mode,
            watermark=self.target if self.mode != INCONSISTENT else None,
            applied_ts=applied_ts,
            applied_batch=applied_batch,
            rows=item.gold.rows(),
            columns=describe_schema(item.gold.schema(), info.specs),
            handle_key=list(item.keys or info.handle or (prior.handle_key if prior else []) or []),
            dropped=item.dropped if item.dropped is not None else bool(prior and prior.dropped),
            reason=reason,
            generation=self.generation,
            gold_version=item.gold.version(),
        )

    def _table_result(
        self, item: _TableWork, count: _TableCounts, state: TableState
    ) -> TableResult:
        prior = item.prior
        return TableResult(
            table=str(item.name),
            mode=state.mode,
            watermark=state.watermark,
            previous=prior.applied_ts if prior and not self.rebuild else None,
            changes=count.changes,
            duplicates=count.duplicates,
            upserts=item.upserts,
            deletes=item.deletes,
            ddl=item.ddl,
            rows=state.rows,
            version=state.gold_version,
            commits=item.commits,
            dropped=state.dropped,
            reason=state.reason,
            zero_dates=item.zero_dates,
        )

    def _held_reason(self, held: int) -> str:
        where = "cut-off" if self.mode == CUTOFF else "target"
        advice = (
            "raise cutoff-ts once later data has landed"
            if self.mode == CUTOFF
            else "a later run applies them once a later TS arrives in their partitions"
        )
        return (
            f"{HELD_BACK}{held} changes without a commit TS (deletes after the last TS <= "
            f"{where} {self.target} in their partition): rows they delete may still be in "
            f"gold ({advice})"
        )


class _Steps:
    """A run's steps on gold, in commit order: each table's segments (its changes with the DDLs
    folded into them) and the barriers that split tables. A failing table is marked failed in
    ``failures`` and skipped from then on; the others go on."""

    def __init__(self, zones: dict[str, str], failures: dict[str, str]):
        self.zones = zones  # topic -> the time zone its TIMESTAMP text is read in
        self.failures = failures

    def execute(
        self,
        timeline: Timeline,
        reduced: _Reduced,
        work: dict[TableName, _TableWork],
        versions: _Versions,
    ) -> None:
        steps: list[tuple[tuple, _SegmentStep | Barrier]] = []
        for name, item in work.items():
            for segment in timeline.segments_of(name):
                key = (name.schema, name.name, segment.number)
                if key not in reduced.keys and not segment.folds:
                    continue
                end = segment.end if segment.end is not None else _INFINITY
                steps.append(((end, 0, str(name)), _SegmentStep(item, segment, key)))
        for position, barrier in enumerate(timeline.barriers):
            ts = barrier.ts if barrier.ts is not None else _INFINITY
            steps.append(((ts, 1, position), barrier))
        steps.sort(key=lambda step: step[0])
        for number, (_, step) in enumerate(steps):
            if isinstance(step, _SegmentStep):
                self._segment(step, reduced, versions, number)
            else:
                self._ddl(timeline, step, work, versions, number)

    def _segment(
        self, step: _SegmentStep, reduced: _Reduced, versions: _Versions, number: int
    ) -> None:
        """A segment's folded DDLs and changes: at most a reshape of gold's columns, then one
        merge (after a TRUNCATE: one commit replacing the rows)."""
        item, segment = step.item, step.segment
        if item.failed:
            return
        info = segment.catalog.info(item.name)
        version = versions.merge(segment.end, number)
        try:
            shape = self._shape(item, segment)
            if step.key not in reduced.keys and shape.reset:
                # A DDL's version: the merge version (end TS - 1) can be the last run's target
                # when no change lies between, and would be taken as done.
                emptied = self._ddl_version(versions, item, segment, number)
                item.commits += self._emptied(item, shape.schema, emptied)
                return
            if shape.changed and not shape.reset:
                reshape = self._ddl_version(versions, item, segment, number)
                item.commits += item.ddl_gold().reshape(shape.schema, reshape, shape.values)
            if step.key not in reduced.keys:
                return
            stats = self._apply(item, info, shape, reduced, step.key, version)
        except (GoldError, ValueError, pa.ArrowException) as exc:
            item.fail(str(exc))
            self.failures[str(item.name)] = str(exc)
            return
        item.upserts += stats.upserts
        item.deletes += stats.deletes
        item.zero_dates += stats.zero_dates
        if stats.key_only:
            item.reasons.append(
                f"{stats.key_only} changes carried only their handle key (TiCDC's large-message "
                "handle-key-only option): their other columns are NULL in gold"
            )

    def _shape(self, item: _TableWork, segment: Segment) -> _Shape:
        """Gold's columns after the segment's folded DDLs, as the barrier path leaves them:
        CREATE TABLE's columns, added ones appended (after _commit_ts) with the value the rows
        already there get, dropped ones gone."""
        present = item.gold.schema()
        schema, reset, values = present, False, {}
        for barrier in segment.folds:
            for effect in _combined(barrier.effects_on(item.name)):
                if isinstance(effect, Inconsistent):
                    item.reasons.append(effect.reason)
                    continue
                item.ddl += 1
                if isinstance(effect, Create):
                    item.dropped, reset, values = False, True, {}
                    if effect.columns:
                        schema = _create_schema(effect.columns)
                elif isinstance(effect, Truncate):
                    reset, values = True, {}
                elif schema is None:
                    continue  # no gold table: nothing to change
                elif isinstance(effect, AddColumns):
                    for name, value in self._added(effect, barrier, schema.names).items():
                        schema = schema.append(pa.field(name, value.type))
                        values[name] = value
                elif isinstance(effect, DropColumns):
                    for name in effect.names:
                        if name in schema.names:
                            schema = schema.remove(schema.get_field_index(name))
                            values.pop(name, None)
        changed = schema is not None and (
            present is None or schema.names != present.names or bool(values)
        )
        return _Shape(schema, reset, changed, values)

    def _added(
        self, effect: AddColumns, barrier: Barrier, existing: Container[str] = ()
    ) -> dict[str, pa.Scalar]:
        """The columns ``effect`` adds (those not ``existing``), each with the value the rows
        already there get, typed as gold's column."""
        specs = dict(effect.columns)
        where = barrier.ddl.record.describe()
        return {
            value.name: value.gold_value(_gold_arrow(specs[value.name]), where)
            for value in barrier.added_values(effect, self.zones)
            if value.name not in existing
        }

    @staticmethod
    def _ddl_version(versions: _Versions, item: _TableWork, segment: Segment, number: int) -> int:
        """The version of a commit carrying the segment's folded DDLs (at its last DDL's TS)."""
        version = versions.ddl(item.name, segment.folds[-1].ts, number)
        if version is None:
            raise GoldError(f"more than {EFFECTS_PER_DDL} DDL effects at one TS")
        return version

    def _emptied(self, item: _TableWork, schema: pa.Schema | None, version: int) -> int:
        """A reset without changes after it: gold empty, with ``schema``."""
        return 0 if schema is None else item.ddl_gold().create(schema, version)

    def _apply(
        self,
        item: _TableWork,
        info: TableInfo,
        shape: _Shape,
        reduced: _Reduced,
        key: tuple[str, str, int],
        version: int,
    ) -> SegmentStats:
        """The segment's reduced changes into gold: merged, or replacing its rows after a
        reset; a large one into an empty table typed and written by the executors."""
        if reduced.size(key) > COLLECT_LIMIT and (shape.reset or item.gold.rows() == 0):
            return self._append(item, info, reduced.frame(key), version, shape)
        typed = type_segment(reduced.rows(key), info, shape.schema, self.zones)
        if shape.schema is not None:
            typed = _in_order(typed, shape.schema)
        if shape.reset:
            item.commits += item.gold.replace_rows(typed, version)
        else:
            item.commits += item.gold.merge(typed, version)
        item.keys = typed.keys
        return typed.stats

    def _append(
        self,
        item: _TableWork,
        info: TableInfo,
        frame: DataFrame,
        version: int,
        shape: _Shape,
    ):
        """A large segment into an empty gold table (an initial load, or after a reset): typed
        on the executors and written by write_delta, never collected to the driver."""
        handles, specs = frame_specs(frame)
        plan = plan_segment(info, handles, specs, shape.schema)
        totals = frame.agg(
            F.count("*").alias("rows"),
            F.sum(F.col("deleted").cast("long")).alias("deletes"),
            F.sum((~F.col("deleted") & F.col("handle_key_only")).cast("long")).alias("key_only"),
        ).first()
        rows = int(totals.rows)
        # Files of disjoint key ranges, each sorted: a later merge's key range then skips the
        # files it does not touch (changes cluster on recent keys in most tables).
        files = max(1, -(-(rows - int(totals.deletes or 0)) // ROWS_PER_FILE))
        typed = typed_frame(frame, plan, self.zones)
        keys = [F.col(f"`{key}`") for key in plan.keys]
        clustered = typed.repartitionByRange(files, *keys).sortWithinPartitions(*keys)
        if item.gold.exists() and (shape.reset or shape.changed):
            item.commits += item.gold.load(clustered, version)
        else:
            item.commits += item.gold.append(clustered, version)
        item.keys = plan.keys
        # Zero dates are not counted on this path (the executors type the values).
        return SegmentStats(
            upserts=rows - int(totals.deletes or 0),
            deletes=int(totals.deletes or 0),
            key_only=int(totals.key_only or 0),
        )

    def _ddl(
        self,
        timeline: Timeline,
        barrier: Barrier,
        work: dict[TableName, _TableWork],
        versions: _Versions,
        number: int,
    ) -> None:
        """A barrier's effects on the tables it splits (folded ones: ``_segment``)."""
        for effect in _combined(barrier.effects):
            item = work.get(effect.table)
            if item is None or item.failed or not timeline.splits(barrier, effect.table):
                continue
            version = versions.ddl(effect.table, barrier.ts, number)
            if version is None:
                item.fail(f"{barrier.ddl.record.describe()} has more than {EFFECTS_PER_DDL} "
                          "effects on the table")  # fmt: skip
                self.failures[str(item.name)] = item.reasons[-1]
                continue
            try:
                self._effect(effect, item, work, barrier, version)
            except (GoldError, ValueError, pa.ArrowException) as exc:
                message = f"{barrier.ddl.record.describe()}: {exc}"
                item.fail(message)
                self.failures[str(item.name)] = message

    def _effect(
        self,
        effect: Effect,
        item: _TableWork,
        work: dict[TableName, _TableWork],
        barrier: Barrier,
        version: int,
    ) -> None:
        gold = item.ddl_gold()
        if isinstance(effect, Inconsistent):
            item.reasons.append(effect.reason)
            return
        item.ddl += 1
        if barrier.ts is None and type(effect) in ROW_EFFECTS:
            item.reasons.append(
                f"{barrier.ddl.record.describe()} ({ROW_EFFECTS[type(effect)]}) applied after "
                "the changes of the run, having no TS to place it by: rows upstream wrote after "
                "it are missing from gold, rows it removed before later changes may remain"
            )
        if isinstance(effect, Create):
            item.dropped = False
            if not effect.replace and gold.exists():
                fields = [pa.field(n, _gold_arrow(spec)) for n, spec in effect.columns]
                item.commits += gold.add_columns(fields, version)
            elif effect.columns:
                item.commits += gold.create(_create_schema(effect.columns), version)
            else:
                item.commits += gold.empty(version)
        elif isinstance(effect, AddColumns):
            added = self._added(effect, barrier)
            fields = [pa.field(name, value.type) for name, value in added.items()]
            item.commits += gold.add_columns(fields, version, added)
        elif isinstance(effect, DropColumns):
            present = gold.schema()
            if present is not None and any(n in present.names for n in effect.names):
                item.commits += gold.drop_columns(effect.names, version)
        elif isinstance(effect, AlterColumn):
            self._alter(effect, gold, item, version)
        elif isinstance(effect, Truncate):
            item.commits += gold.empty(version)
        elif isinstance(effect, Drop):
            item.commits += gold.empty(version)
            item.dropped = True
        elif isinstance(effect, Move):
            target = work.get(effect.new)
            if target is not None and not target.failed:
                target.commits += gold.copy_to(target.ddl_gold(), version)
                target.dropped = False
                target.ddl += 1
            item.commits += gold.empty(version)
            item.dropped = True
        elif isinstance(effect, DeleteRows):
            item.commits += gold.rewrite(delete_rows(effect.rows), version)

    def _alter(self, effect: AlterColumn, gold: GoldTable, item, version: int) -> None:
        present = gold.schema()
        if present is None or effect.old_name not in present.names:
            return
        current = present.field(effect.old_name).type
        target = _gold_arrow(effect.spec) if effect.spec is not None else current
        if target == current and effect.new_name == effect.old_name:
            return  # the gold type is the same (VARCHAR(10) → VARCHAR(20), new ENUM members)
        item.commits += gold.rewrite(
            alter_column(effect.old_name, effect.new_name, None if target == current else target),
            version,
        )


@dataclass
class _TableWork:
    """One gold table's progress in a run."""

    name: TableName
    gold: GoldTable
    prior: TableState | None
    upserts: int = 0
    deletes: int = 0
    ddl: int = 0
    commits: int = 0
    zero_dates: int = 0
    keys: tuple[str, ...] | None = None
    dropped: bool | None = None
    failed: bool = False
    reasons: list[str] = field(default_factory=list)

    def ddl_gold(self) -> GoldTable:
        """The table under the app id of DDL effects (its versions are TS x 8 + n)."""
        return GoldTable(self.gold.spark, self.name, self.gold.path, f"{self.gold.app_id}:ddl")

    def fail(self, reason: str) -> None:
        self.failed = True
        self.reasons.append(reason)


_INFINITY = float("inf")


@dataclass(frozen=True)
class _TableCounts:
    """A table's changes in a run."""

    read: int = 0  # selected for this run, replays included
    changes: int = 0  # distinct events among them
    pending: int = 0  # changes without a commit TS left for a later run
    max_ts: int | None = None  # the largest order TS selected

    @property
    def duplicates(self) -> int:
        return self.read - self.changes


@dataclass(frozen=True)
class _Batches:
    """The bronze batches a run read."""

    latest: int | None = None  # the latest one
    pending: int | None = None  # the first holding a change left for a later run


@dataclass(frozen=True)
class _SegmentStep:
    """A step of a run: one table's segment (its folded DDLs and its changes) into gold."""

    item: _TableWork
    segment: Segment
    key: tuple[str, str, int]  # the segment's key in the reduced change set


@dataclass(frozen=True)
class _Shape:
    """A gold table's columns after a segment's folded DDLs, before its changes."""

    schema: pa.Schema | None  # None: no gold table yet
    reset: bool  # emptied (TRUNCATE, CREATE TABLE): the changes replace its rows
    changed: bool  # columns differ from gold's
    values: dict[str, pa.Scalar]  # added columns: the value the rows already there get


@dataclass
class _Versions:
    """App-transaction versions of a run's steps; they only grow along the change log."""

    target: int | None  # the TS of a consistent run
    base: int | None  # inconsistent runs: steps numbered from here
    # DDL effects given a version per (table, TS or step): two DDLs at one TS (or a DDL and a
    # segment's reshape) take successive versions, so neither is taken for the other's rerun.
    used: dict[tuple, int] = field(default_factory=dict)

    def merge(self, end_ts: int | None, step: int) -> int:
        if self.base is not None:
            return self.base + step
        # Changes before a DDL at TS t all have TS < t; the last segment ends at the target.
        return (end_ts - 1) if end_ts is not None else self.target

    def ddl(self, table: TableName, ts: int | None, step: int) -> int | None:
        """The next version of a DDL effect on ``table`` at ``ts`` (None: more effects than
        EFFECTS_PER_DDL at one TS)."""
        numbered = self.base is not None or ts is None
        point = (table, step) if numbered else (table, ts)
        sub = self.used.get(point, 0)
        self.used[point] = sub + 1
        if sub >= EFFECTS_PER_DDL:
            return None
        if numbered:
            return (self.base or 0) + step * EFFECTS_PER_DDL + sub
        return ts * EFFECTS_PER_DDL + sub


class _Reduced:
    """A run's reduced change set by segment: on the driver (small runs), or spilled once to
    Parquet files bucketed by segment (large runs), from which each segment is read alone.

    Spilling costs one Spark job however many segments (DDL barriers) the run has; reading
    each segment from a cached DataFrame would scan the whole change set once per segment.
    """

    def __init__(self, table: pa.Table | None = None, spill: Path | None = None):
        self.spill = spill
        self.dataset: ds.Dataset | None = None
        self.frame_all: DataFrame | None = None
        self.segments: dict[tuple[str, str, int], pa.Table] = {}
        self.sizes: dict[tuple[str, str, int], int] = {}
        self.buckets: dict[tuple[str, str, int], int] = {}
        if table is not None and table.num_rows:
            # One sort, then each segment is a slice (a take per segment costs a pass each).
            order = [("schema", "ascending"), ("table", "ascending"), ("segment", "ascending")]
            table = table.sort_by(order).combine_chunks()
            columns = table.select(["schema", "table", "segment"]).to_pydict()
            triples = zip(columns["schema"], columns["table"], columns["segment"], strict=True)
            start = 0
            for key, run in itertools.groupby(triples):
                size = sum(1 for _ in run)
                self.segments[key] = table.slice(start, size)
                self.sizes[key] = size
                start += size
        self.keys = set(self.sizes)

    @classmethod
    def spilled(cls, frame: DataFrame, directory: Path) -> _Reduced:
        """Write ``frame`` under ``directory``, one Parquet directory per bucket of segments."""
        shutil.rmtree(directory, ignore_errors=True)
        bucket = F.xxhash64("schema", "table", "segment")
        (
            frame.withColumn(SPILL_BUCKET, bucket)
            .repartition(SPILL_BUCKET)
            .write.partitionBy(SPILL_BUCKET)
            .parquet(str(directory))
        )
        reduced = cls(spill=directory)
        if not any(directory.glob(f"{SPILL_BUCKET}=*")):
            return reduced  # nothing to apply
        # Listed once: a run may read a thousand segments from it.
        dataset = reduced.dataset = ds.dataset(directory, format="parquet", partitioning="hive")
        reduced.frame_all = frame.sparkSession.read.parquet(str(directory))
        columns = ["schema", "table", "segment", SPILL_BUCKET]
        groups = (
            dataset.to_table(columns=columns)
            .group_by(columns, use_threads=False)
            .aggregate([([], "count_all")])
            .to_pylist()
        )
        for group in groups:
            key = (group["schema"], group["table"], group["segment"])
            reduced.sizes[key] = group["count_all"]
            reduced.buckets[key] = group[SPILL_BUCKET]
        reduced.keys = set(reduced.sizes)
        return reduced

    def size(self, key: tuple[str, str, int]) -> int:
        return self.sizes.get(key, 0)

    def _where(self, key: tuple[str, str, int], column) -> Any:
        schema, table, segment = key
        return (
            (column(SPILL_BUCKET) == self.buckets[key])
            & (column("schema") == schema)
            & (column("table") == table)
            & (column("segment") == segment)
        )

    def frame(self, key: tuple[str, str, int]) -> DataFrame:
        """A spilled segment as a DataFrame (a large one, for the executors to load)."""
        assert self.frame_all is not None, "only a spilled segment is read by Spark"
        return self.frame_all.where(self._where(key, F.col)).drop(SPILL_BUCKET)

    def rows(self, key: tuple[str, str, int]) -> pa.Table:
        if self.dataset is None:
            return self.segments[key]
        rows = self.dataset.to_table(filter=self._where(key, pc.field))
        return rows.drop_columns([SPILL_BUCKET])

    def release(self) -> None:
        if self.spill is not None:
            shutil.rmtree(self.spill, ignore_errors=True)


FAILED = "compaction failed: "
# Reasons a run derives afresh (never carried from the prior state): the changefeed's lack of a
# consistent cut, and changes held back. Each starts with its marker and holds no separator.
NO_CONSISTENT_CUT = "no consistent cut: "
HELD_BACK = "held back: "
_RUN_REASONS = (NO_CONSISTENT_CUT, HELD_BACK)
_SEPARATOR = "; "
# Effects that change rows, named for a reason: without a TS they are misplaced in time.
ROW_EFFECTS = {
    Truncate: "TRUNCATE",
    Drop: "DROP TABLE",
    Move: "RENAME",
    DeleteRows: "partition DDL deleting rows",
}


def inconsistent_reason(config: PipelineConfig, feed: ChangefeedConfig) -> str:
    """Why a changefeed in ``inconsistent`` mode has no consistent cut."""
    canal = [t for t in feed.topics if config.topic(t).protocol == "canal-json"]
    canal = [t for t in canal if not config.topic(t).enable_tidb_extension]
    avro = [t for t in feed.topics if config.topic(t).protocol == "avro"]
    avro = [t for t in avro if not config.topic(t).enable_tidb_extension]
    causes = []
    if canal:
        causes.append(
            f"canal-json without the TiDB extension (topics {canal}): no commit TS, changes "
            "applied in Kafka order per key, DDLs applied after the changes of the run"
        )
    if avro:
        causes.append(
            f"avro without the TiDB extension (topics {avro}): no commit TS, changes applied "
            "in Kafka order per key"
        )
    if not causes:
        causes.append(
            "watermarks: false and no cutoff-ts: every change received is applied, in Kafka "
            "order per key"
        )
    return NO_CONSISTENT_CUT + ", and ".join(causes)


def _join_reasons(*reasons: str | None) -> str | None:
    return _SEPARATOR.join(r for r in reasons if r) or None


def _marks(reason: str) -> list[str]:
    """The reasons of a prior state that a run carries: all but the run-derived ones."""
    return [part for part in reason.split(_SEPARATOR) if not part.startswith(_RUN_REASONS)]


def _changefeed_mode(state: TableState) -> str | None:
    """The mode of the changefeed that wrote a state row; None when a DDL or a failure marked
    the table inconsistent in a changefeed of a consistent mode (which, the row cannot say)."""
    if state.mode != INCONSISTENT or state.reason is None:
        return state.mode
    if any(p.startswith(NO_CONSISTENT_CUT) for p in state.reason.split(_SEPARATOR)):
        return INCONSISTENT
    return None


def _failed(state: TableState) -> bool:
    return bool(state.reason and state.reason.startswith(FAILED))


def _failed_state(changefeed: str, item: _TableWork, generation: int) -> TableState:
    """The state of a table whose compaction failed: as before the run, with the reason."""
    prior = item.prior
    return TableState(
        changefeed=changefeed,
        schema=item.name.schema,
        table=item.name.name,
        path=str(item.gold.path),
        mode=INCONSISTENT,
        watermark=prior.watermark if prior else None,
        applied_ts=prior.applied_ts if prior else -1,
        applied_batch=prior.applied_batch if prior else -1,
        rows=item.gold.rows(),
        columns=prior.columns if prior else "[]",
        handle_key=prior.handle_key if prior else [],
        dropped=bool(prior and prior.dropped),
        reason=FAILED + item.reasons[-1],
        generation=generation,
        gold_version=item.gold.version(),
    )


def _combined(effects: list[Effect]) -> list[Effect]:
    """Consecutive ADD/DROP COLUMN effects on one table as one (ALTER TABLE t ADD a, ADD b)."""
    combined: list[Effect] = []
    for effect in effects:
        last = combined[-1] if combined else None
        if (
            isinstance(effect, AddColumns)
            and isinstance(last, AddColumns)
            and last.table == effect.table
        ):
            combined[-1] = AddColumns(
                effect.table, last.columns + effect.columns, last.definitions + effect.definitions
            )
        elif (
            isinstance(effect, DropColumns)
            and isinstance(last, DropColumns)
            and last.table == effect.table
        ):
            combined[-1] = DropColumns(effect.table, last.names + effect.names)
        else:
            combined.append(effect)
    return combined


def _gold_arrow(spec: ColumnSpec) -> pa.DataType:
    return gold_type(spec).arrow


def _in_order(typed: TypedSegment, schema: pa.Schema) -> TypedSegment:
    """The segment's columns in ``schema``'s order, then any others: a table it creates
    (after a CREATE TABLE folded in) has the columns in the order the barrier path gives."""
    names = typed.data.column_names
    order = [n for n in schema.names if n in names] + [n for n in names if n not in schema.names]
    return dataclasses.replace(typed, data=typed.data.select(order))


def _create_schema(columns: tuple[tuple[str, ColumnSpec], ...]) -> pa.Schema:
    """The gold columns of a CREATE TABLE."""
    fields = [pa.field(n, _gold_arrow(spec)) for n, spec in columns]
    return pa.schema([*fields, pa.field(COMMIT_TS, pa.int64())])


__all__ = [
    "ChangefeedResult",
    "CompactResult",
    "TableResult",
    "compact",
    "target_of",
]
