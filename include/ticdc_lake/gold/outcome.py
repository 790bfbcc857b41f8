"""What a compaction run leaves: a state row and a result per gold table it worked on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ticdc_lake.gold.catalog import TableInfo, TableName
from ticdc_lake.gold.changes import Batches, TableCounts, in_parallel
from ticdc_lake.gold.feed import FeedPlan
from ticdc_lake.gold.plan import Timeline
from ticdc_lake.gold.reasons import FAILED, carried_reasons, failed, held_reason, join_reasons
from ticdc_lake.gold.state import INCONSISTENT, TableState
from ticdc_lake.gold.steps import STEPS_PER_RUN, TableWork, failure_text
from ticdc_lake.gold.tables import GoldSnapshot, describe_schema

FAILED_MODE = "failed"  # a TableResult's mode when the table could not be compacted


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
class Outcome:
    """The state rows to write (at ``version``) and the results to report."""

    states: list[TableState]
    results: list[TableResult]
    version: int  # the state table's app-transaction version


def outcome_of(
    plan: FeedPlan,
    timeline: Timeline,
    counts: dict[TableName, TableCounts],
    batches: Batches,
    work: dict[TableName, TableWork],
    missing: dict[TableName, str],
) -> Outcome:
    """The state rows and results of a run; ``missing``: per table, why quarantined records
    may hold changes gold lacks (missing.py)."""
    final = timeline.barriers[-1].catalog if timeline.barriers else timeline.history
    latest = max(plan.low_batch, batches.latest if batches.latest is not None else -1)
    # Batches up to the first holding a change left for later are settled.
    held = plan.consistent and batches.pending is not None
    settled = batches.pending - 1 if held else latest
    states, results = [], []
    items = sorted(work.items(), key=lambda pair: str(pair[0]))
    # Each table's log read at once with a few others (a run over 600 tables: 2.1 s one by one).
    snapshots = in_parallel(_snapshot, ((item,) for _, item in items))
    for (name, item), gold in zip(items, snapshots, strict=True):
        count = counts.get(name, TableCounts())
        if item.failed:
            # The table keeps what it reflected before (nothing, if it is new), so the next
            # run reads its changes again and retries.
            prior = item.prior
            states.append(_failed_state(plan, item, gold))
            results.append(
                TableResult(
                    str(name),
                    FAILED_MODE,
                    None,
                    prior.applied_ts if prior else None,
                    reason=item.reasons[-1],
                )
            )
            continue
        state = _state(plan, item, count, final.info(name), settled, gold, missing.get(name))
        states.append(state)
        results.append(_table_result(plan, item, count, state))
    version = plan.target if plan.consistent else (settled + 1) * STEPS_PER_RUN
    return Outcome(states, results, version)


def _snapshot(item: TableWork) -> GoldSnapshot:
    """The gold table as it is now; one that cannot be read fails (the others are recorded)."""
    try:
        return item.gold.snapshot()
    except Exception as exc:  # one table's failure: recorded, the others go on
        item.fail(f"its gold table cannot be read: {failure_text(exc)}")
        return GoldSnapshot(None, None, 0)


def _reason(
    plan: FeedPlan, item: TableWork, count: TableCounts, missing: str | None
) -> tuple[str, str | None]:
    """A table's mode and reason after the run."""
    prior = item.prior
    carried = prior and prior.reason and not plan.rebuild and not failed(prior)
    marks = carried_reasons(prior.reason) if carried else []
    marked = join_reasons(*dict.fromkeys(marks + item.reasons))
    # A DDL or a failure makes the table inconsistent; the run's own reasons (the
    # changefeed's mode, changes held back) leave the mode as it is.
    mode = INCONSISTENT if marked else plan.mode
    held = count.pending if plan.consistent else 0
    held_back = held_reason(held, plan.mode, plan.target) if held else None
    return mode, join_reasons(plan.mode_reason, held_back, missing, marked)


def _state(
    plan: FeedPlan,
    item: TableWork,
    count: TableCounts,
    info: TableInfo,
    settled: int,
    gold: GoldSnapshot,
    missing: str | None,
) -> TableState:
    """The state row of a table compacted in this run."""
    prior = item.prior
    applied_ts = plan.target
    if not plan.consistent:
        seen = [count.max_ts, prior.applied_ts if prior else None]
        applied_ts = max((v for v in seen if v is not None), default=plan.low_ts)
    mode, reason = _reason(plan, item, count, missing)
    return _state_row(
        plan,
        item,
        gold,
        mode=mode,
        watermark=plan.target_ts,
        applied_ts=applied_ts,
        applied_batch=settled,
        columns=describe_schema(gold.schema, info.specs),
        handle_key=list(item.keys or info.handle or (prior.handle_key if prior else []) or []),
        dropped=item.dropped if item.dropped is not None else bool(prior and prior.dropped),
        reason=reason,
        zero_dates=(prior.zero_dates if prior and not plan.rebuild else 0) + item.zero_dates,
    )


def _table_result(
    plan: FeedPlan, item: TableWork, count: TableCounts, state: TableState
) -> TableResult:
    prior = item.prior
    return TableResult(
        table=str(item.name),
        mode=state.mode,
        watermark=state.watermark,
        previous=prior.applied_ts if prior and not plan.rebuild else None,
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


def _failed_state(plan: FeedPlan, item: TableWork, gold: GoldSnapshot) -> TableState:
    """The state of a table whose compaction failed: as before the run, with the reason."""
    prior = item.prior
    return _state_row(
        plan,
        item,
        gold,
        mode=INCONSISTENT,
        watermark=prior.watermark if prior else None,
        applied_ts=prior.applied_ts if prior else -1,
        applied_batch=prior.applied_batch if prior else -1,
        columns=prior.columns if prior else "[]",
        handle_key=prior.handle_key if prior else [],
        dropped=bool(prior and prior.dropped),
        reason=FAILED + item.reasons[-1],
        zero_dates=prior.zero_dates if prior else 0,
    )


def _state_row(
    plan: FeedPlan, item: TableWork, gold: GoldSnapshot, **what_it_reflects
) -> TableState:
    """A state row: which table and changefeed, ``gold`` as it is now, and
    ``what_it_reflects``."""
    return TableState(
        changefeed=plan.name,
        schema=item.name.schema,
        table=item.name.name,
        path=str(item.gold.path),
        rows=gold.rows,
        generation=plan.generation,
        gold_version=gold.version,
        **what_it_reflects,
    )
