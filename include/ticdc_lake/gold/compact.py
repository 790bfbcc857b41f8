"""Compact: the silver change log → one typed gold Delta table per upstream table.

    compact(spark, config, *, changefeeds=None, until_ts=None, rebuild=False) -> CompactResult

Per changefeed (config.changefeeds), the target of a run is

- ``watermark`` mode: the changefeed's global watermark W (silver/watermark.py), capped by
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
run, ADD/DROP/RENAME COLUMN, TRUNCATE, CREATE TABLE and a MODIFY/CHANGE COLUMN that keeps or
widens the values reach gold with the changes in at most two commits (a column reshape, then
one merge, or after a TRUNCATE one commit replacing the rows).
Only the DDLs a merge cannot carry are barriers, and only for the tables they alter: the
table's changes before one are merged under the old schema, then its effect is carried out on
gold (``gold/tables.py``), then the changes after it (``gold/steps.py``).
Types come from CREATE TABLE/ALTER in the DDL log, else from the change rows
(``gold/types.py``); TIMESTAMP text is read in the topic's configured time zone.

Incremental: silver is partitioned by bronze batch, and the state records the last batch that is
settled (every change in it applied, none still above the target); a run reads only the later
batches (partition pruning), and of those only changes above the applied TS (pushed down to
Parquet statistics). Gold is changed by ``merge_delta`` (delta-rs, on the driver), which
rewrites only the files holding changed keys (files loaded by the executors are sorted key
ranges, so recent keys share few files); a segment too large for the driver is merged by
delta-spark on the executors. Only DDL rewrites (DROP/MODIFY COLUMN, partition drops,
RENAME) rewrite a table.

A cut-off TS is the user's word that every change up to it has landed: changes with a TS at or
below it that land later are not applied (raise the cut-off, or ``rebuild``).

Idempotent: each gold commit carries an app transaction (``compact:<schema>.<table>#<gen>`` for
merges with version = the segment's last TS, ``...:ddl`` for DDL effects and reshapes with
version = DDL TS x 8 + n, n counting the table's effects at that TS),
and the state table (gold/state.py) is written last with version = the target. A rerun
changes nothing and adds no Delta version; a run killed anywhere resumes where it stopped.

A gold table's path does not name its changefeed, so a table belongs to the changefeed whose
state row it has (or that wrote it first in the run): another changefeed carrying changes of it
leaves it alone, and the table fails there with what to change (``_TableClaims.taken``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from ticdc_lake.config import PipelineConfig
from ticdc_lake.errors import ConfigError
from ticdc_lake.gold.catalog import Catalog, TableInfo, TableName
from ticdc_lake.gold.changes import Reduced, read_ddl_records, reduce_changes
from ticdc_lake.gold.exceptions import CompactError
from ticdc_lake.gold.feed import FeedPlan, plan_feed, target_of
from ticdc_lake.gold.missing import checked_out, missing_reasons, quarantined_at_or_below
from ticdc_lake.gold.outcome import FAILED_MODE, TableResult, outcome_of
from ticdc_lake.gold.plan import Timeline, build_timeline, parse_record
from ticdc_lake.gold.state import read_state, write_state
from ticdc_lake.gold.steps import DDL, Steps, TableWork, versions_of
from ticdc_lake.gold.tables import GoldTable
from ticdc_lake.lake.layout import LakeLayout, UnsafeNameError
from ticdc_lake.silver.watermark import changefeed_watermarks, column_max, read_watermarks


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
    marks = changefeed_watermarks(config, read_watermarks(layout))
    states = read_state(layout.gold_state)
    owners = {TableName(state.schema, state.table): state.changefeed for state in states}
    results, failures = [], {}
    for name in names:
        prior = [state for state in states if state.changefeed == name]
        feed = config.changefeeds[name]
        plan = plan_feed(config, feed, marks[name], prior, until_ts=until_ts, rebuild=rebuild)
        run = _ChangefeedRun(spark, config, plan, owners, fold_ddl=fold_ddl)
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


class _ChangefeedRun:
    """One changefeed's compaction: plan, reduce, then steps in order, then the state."""

    def __init__(
        self,
        spark: SparkSession,
        config: PipelineConfig,
        plan: FeedPlan,
        owners: dict[TableName, str],
        *,
        fold_ddl: bool,
    ):
        self.spark = spark
        self.config = config
        self.layout = LakeLayout(config.lake)
        self.plan = plan
        self.fold_ddl = fold_ddl
        self.tables = set(plan.prior)  # the gold tables this run keeps state rows of
        self.notes = list(plan.notes)
        self.failures: dict[str, str] = {}
        self.claims = _TableClaims(spark, config, plan, owners, self.failures)

    def run(self) -> ChangefeedResult:
        plan = self.plan
        noop = self._noop()
        if noop is not None:
            return noop
        timeline = self._timeline()
        # Quarantined records name tables too: one none of whose changes decoded still gets a
        # state row, saying what it lacks.
        records = quarantined_at_or_below(self.config, plan, self.layout)
        named = {table for record in records for table in record.tables or ()}
        reduced, counts, batches = reduce_changes(self.spark, self.layout, plan, timeline)
        try:
            found = self._tables(timeline, reduced) | named
            tables = [n for n in sorted(found, key=str) if not self.claims.taken(n)]
            golds = {n: self.claims.gold(n) for n in tables}
            work = {n: TableWork(n, g, plan.prior.get(n)) for n, g in golds.items() if g}
            self.tables |= set(work)
            if plan.rebuild:
                _empty_for_rebuild(work)
            steps = Steps(plan.zones, self.failures, self.config.limits.max_table_columns)
            steps.execute(timeline, reduced, work, versions_of(plan, batches))
        finally:
            reduced.release()
        missing = missing_reasons(plan, work, records, checked_out(plan, self.layout))
        outcome = outcome_of(plan, timeline, counts, batches, work, missing)
        if outcome.states:
            write_state(
                self.layout.gold_state, plan.name, outcome.states, outcome.version,
                plan.generation,
            )  # fmt: skip
        self.failures.update({r.table: r.reason for r in outcome.results if r.mode == FAILED_MODE})
        pending = sum(count.pending for count in counts.values())
        return self._result(outcome.results, pending=pending)

    def _timeline(self) -> Timeline:
        plan = self.plan
        records = read_ddl_records(self.layout, plan)
        initial = Catalog(
            {name: TableInfo(name) for name, p in plan.prior.items() if not p.dropped}
        )
        return build_timeline(
            [parse_record(record) for record in records],
            initial=initial,
            applied_ts=plan.low_ts,
            applied_batch=plan.low_batch,
            target_ts=plan.target_ts,
            fold=self.fold_ddl,
            gold_columns={name: p.column_types for name, p in plan.prior.items()},
        )

    def _noop(self) -> ChangefeedResult | None:
        plan = self.plan
        if plan.rebuild or not plan.prior:
            return None
        if plan.consistent:
            if all(p.applied_ts >= plan.target for p in plan.prior.values()):
                if plan.target < plan.low_ts:
                    self.notes.append(
                        f"target {plan.target} is below the TS already applied "
                        f"({plan.low_ts}): gold stays (was a partition added to the config?)"
                    )
                return self._unchanged()
            return None
        latest = column_max(self.layout.changes, "bronze_batch")
        if latest is None or latest <= plan.low_batch:
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
            for p in sorted(self.plan.prior.values(), key=lambda p: p.full_name)
        )
        return self._result(tables, noop=True)

    def _result(self, tables: Sequence[TableResult], **outcome: Any) -> ChangefeedResult:
        return ChangefeedResult(
            self.plan.name,
            self.plan.mode,
            self.plan.target,
            self.plan.low_ts,
            self.plan.generation,
            tuple(tables),
            notes=tuple(self.notes),
            **outcome,
        )

    def _tables(self, timeline: Timeline, reduced: Reduced) -> set[TableName]:
        names = set(self.plan.prior)
        for barrier in timeline.barriers:
            names |= barrier.tables
        names |= timeline.latest_infos(lambda info: info.complete).keys()
        names |= {TableName(schema, table) for schema, table, _ in reduced.keys}
        return names


class _TableClaims:
    """Which gold tables a changefeed's run may write: its own, not another changefeed's, and
    no Delta table compaction did not write. A table refused fails, saying what to do."""

    def __init__(
        self,
        spark: SparkSession,
        config: PipelineConfig,
        plan: FeedPlan,
        owners: dict[TableName, str],
        failures: dict[str, str],
    ):
        self.spark = spark
        self.config = config
        self.layout = LakeLayout(config.lake)
        self.plan = plan
        self.owners = owners  # gold table -> the changefeed it belongs to
        self.failures = failures  # the run's: a refused table's reason is added

    def taken(self, name: TableName) -> bool:
        """Whether the gold table is another changefeed's; if so, it fails in this one."""
        owner = self.owners.get(name, self.plan.name)
        if owner == self.plan.name or name in self.plan.prior:
            return False
        feed = self.plan.name
        message = (
            f"gold table {name} belongs to "
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

    def gold(self, name: TableName) -> GoldTable | None:
        """The table's gold; None (and a failure of the table) when its name cannot be a folder
        of the lake, or its folder holds a Delta table compaction did not write: no run
        overwrites a table that is not gold's own."""
        try:
            path = self.layout.gold(name.schema, name.name)
        except UnsafeNameError as exc:
            self.failures[str(name)] = f"no gold table can be made for it: {exc}"
            return None
        generation = self.plan.generation
        gold = GoldTable(self.spark, name, path, app_id(name, generation))
        prior = self.plan.prior.get(name)
        if prior is not None and Path(prior.path).parts[-2:] != path.parts[-2:]:
            self.failures[str(name)] = (
                f"its gold table was written at {prior.path} by an earlier version, which named "
                f"gold folders otherwise; it now belongs at {path}: rebuild the changefeed "
                f"(ticdc-lake run --config ... --stages compact --changefeed {self.plan.name} "
                "--rebuild), then remove the old folder"
            )
            return None
        if prior is not None or not gold.exists():
            return gold
        ours = [app_id(name, g) + suffix for g in range(generation + 1) for suffix in ("", DDL)]
        if gold.written_by(ours):
            return gold
        self.failures[str(name)] = (
            f"{path} holds a Delta table that compaction did not write for {name} (a table "
            "made by hand, or by a version that named gold folders otherwise): it is left "
            "alone; move it away and run again"
        )
        return None


def app_id(name: TableName, generation: int) -> str:
    """The app id of a gold table's merges in a generation (DDL effects: + ``DDL``)."""
    return f"compact:{name}#{generation}"


def _empty_for_rebuild(work: dict[TableName, TableWork]) -> None:
    for item in work.values():
        if item.gold.exists():
            # Version 0 of the new generation's ddl app: before every later step.
            item.commits += item.ddl_gold().empty(0)


__all__ = [
    "ChangefeedResult",
    "CompactResult",
    "TableResult",
    "compact",
    "target_of",
]
