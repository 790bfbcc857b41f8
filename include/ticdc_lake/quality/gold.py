"""Gold checks, on the gold tables a compaction changed since the last validation.

Key uniqueness and the TS bound are invariants of whole tables (over all their merged files):
one Spark validation reads the changed tables' keys and commit TSs as one frame (table, key as
JSON, _commit_ts, the state's TS). The rest are pandas validations of small frames: the row count
against the compaction's own commits (Delta merge metrics), column types against the state's
declared columns, the mode, and per changefeed the watermark's lag and stuck partitions.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ticdc_lake.delta import (
    ROWS_KEY,
    commits_after,
    delta_table_exists,
    file_actions,
    open_table,
    read_delta,
)
from ticdc_lake.gold.reasons import QUARANTINED
from ticdc_lake.lake.names import qualified_name
from ticdc_lake.quality import lakeview
from ticdc_lake.quality.context import QualityContext, candidates, computed_once
from ticdc_lake.quality.results import CheckOutcome
from ticdc_lake.quality.validator import Expectation, expectations
from ticdc_lake.runtime.spark_columns import named_column

COMMIT_TS = "_commit_ts"


def state_version(ctx: QualityContext) -> int | None:
    if not delta_table_exists(ctx.layout.gold_state):
        return None
    return open_table(ctx.layout.gold_state).version()


def changed_tables(ctx: QualityContext, since: int | None) -> tuple[list[dict], dict]:
    """State rows whose gold version moved since state version ``since`` (all when None), and
    the state rows at ``since`` by table. ``path`` is the layout's (a moved lake still checks)."""
    now = open_table(ctx.layout.gold_state).to_pyarrow_table().to_pylist()
    for row in now:
        row["path"] = str(ctx.layout.gold(row["schema"], row["table"]))
    before = {}
    if since is not None:
        old = open_table(ctx.layout.gold_state, since).to_pyarrow_table().to_pylist()
        before = {(r["schema"], r["table"]): r for r in old}
    changed = [
        row
        for row in now
        if (row["schema"], row["table"]) not in before
        or before[(row["schema"], row["table"])]["gold_version"] != row["gold_version"]
    ]
    return changed, before


def key_frame(ctx: QualityContext, states: Sequence[dict]) -> DataFrame | None:
    """(table, key, _commit_ts, ts_bound) of every row of the given gold tables."""
    frames = []
    for state in states:
        if state["dropped"] or not delta_table_exists(state["path"]):
            continue
        gold = read_delta(ctx.spark, state["path"])
        key = [named_column(c) for c in state["handle_key"] or [] if c in gold.columns]
        frames.append(
            gold.select(
                F.lit(qualified_name(state["schema"], state["table"])).alias("table"),
                F.to_json(F.struct(*key)).alias("key") if key else F.lit(None).alias("key"),
                F.col(COMMIT_TS).cast("long").alias("commit_ts"),
                F.lit(state["watermark"]).cast("long").alias("ts_bound"),
            )
        )
    if not frames:
        return None
    union = frames[0]
    for frame in frames[1:]:
        union = union.unionByName(frame)
    return union


def key_checks(ctx: QualityContext, keys: DataFrame) -> list[CheckOutcome]:
    """Both checks, validated on the keys' rows that can fail either (see ``candidates``)."""
    gxe = expectations()
    above_bound = "commit_ts > ts_bound"
    checks = [
        Expectation(
            "gold_key_unique",
            gxe.ExpectCompoundColumnsToBeUnique(column_list=["table", "key"]),
            message="two gold rows with one handle key",
        ),
        Expectation(
            "gold_ts_bound",
            gxe.UnexpectedRowsExpectation(
                unexpected_rows_query=(
                    f"SELECT `table`, key, commit_ts, ts_bound FROM {{batch}} WHERE {above_bound}"
                )
            ),
            message="gold rows whose commit TS is above the TS the state says they reflect",
        ),
    ]
    with computed_once(candidates(keys, ["table", "key"], [above_bound])) as failing:
        return ctx.validator.run(failing, checks)


def expected_rows(path: str, start: int | None, rows_before: int) -> int | None:
    """Rows the gold table should hold after its commits since version ``start``, from each
    commit's own counts: merges add inserts and take deletes, an overwrite sets the count, an
    append adds. None when a commit does not say."""
    rows = 0 if start is None else rows_before
    for info in commits_after(path, start):
        metrics = info.get("operationMetrics") or {}
        operation = info.get("operation")
        mode = (info.get("operationParameters") or {}).get("mode")
        if operation == "MERGE":
            rows += metrics["num_target_rows_inserted"] - metrics["num_target_rows_deleted"]
        elif operation in ("WRITE", "CREATE TABLE") or ROWS_KEY in info:
            added = info.get(ROWS_KEY, metrics.get("num_added_rows"))
            if added is None:
                return None
            rows = added if mode == "Overwrite" else rows + added
        elif operation not in ("UPDATE METADATA", "SET TBLPROPERTIES", "ADD COLUMN"):
            return None
    return rows


def _file_rows(path: str, version: int | None) -> int:
    if version is None:
        return 0
    actions = file_actions(open_table(path, version))
    return sum(actions.column("num_records").to_pylist()) if actions.num_rows else 0


def count_rows(states: Sequence[dict], before: dict, counted: dict[str, int]) -> pd.DataFrame:
    rows = []
    for state in states:
        if state["dropped"] or not delta_table_exists(state["path"]):
            continue
        name = qualified_name(state["schema"], state["table"])
        old = before.get((state["schema"], state["table"]))
        start = old["gold_version"] if old else None
        expected = expected_rows(state["path"], start, _file_rows(state["path"], start))
        rows.append(
            {
                "table": name,
                "rows": counted.get(name, 0),
                "state_rows": state["rows"],
                "expected": expected if expected is not None else counted.get(name, 0),
                "change": counted.get(name, 0) - (_file_rows(state["path"], start)),
            }
        )
    return pd.DataFrame(rows, columns=["table", "rows", "state_rows", "expected", "change"])


def _mismatches(counts: pd.DataFrame, found: str, wanted: str) -> tuple[dict, ...]:
    """The tables whose ``found`` count is not the ``wanted`` one, named (GE gives bare pairs)."""
    rows = counts[counts[found] != counts[wanted]][["table", found, wanted]]
    return tuple(rows.to_dict("records"))


def type_rows(states: Sequence[dict]) -> pd.DataFrame:
    """Per gold column: the type the state declares (from the DDL log) and the table's."""
    rows = []
    for state in states:
        if state["dropped"] or not delta_table_exists(state["path"]):
            continue
        fields = open_table(state["path"]).schema().fields
        actual = {f.name: getattr(f.type, "type", str(f.type)) for f in fields}
        for column in json.loads(state["columns"] or "[]"):
            rows.append(
                {
                    "table": qualified_name(state["schema"], state["table"]),
                    "column": column["name"],
                    "declared": column["type"],
                    "actual": actual.get(column["name"], "(missing)"),
                }
            )
    return pd.DataFrame(rows, columns=["table", "column", "declared", "actual"])


def table_checks(ctx, states, before, counted) -> list[CheckOutcome]:
    gxe = expectations()
    counts = count_rows(states, before, counted)
    outcomes = ctx.validator.run(
        counts,
        [
            Expectation(
                "gold_row_count",
                gxe.ExpectColumnPairValuesToBeEqual(column_A="rows", column_B="expected"),
                observed={"tables": len(counts), "row_change": int(counts["change"].sum())},
                sample=_mismatches(counts, "rows", "expected"),
                message="gold rows != rows before + inserts - deletes of the compaction's commits",
            ),
            Expectation(
                "gold_row_count",
                gxe.ExpectColumnPairValuesToBeEqual(column_A="rows", column_B="state_rows"),
                sample=_mismatches(counts, "rows", "state_rows"),
                message="gold rows != rows the state table records",
            ),
        ],
    )
    types = type_rows(states)
    outcomes += ctx.validator.run(
        types,
        [
            Expectation(
                "gold_column_types",
                gxe.ExpectColumnPairValuesToBeEqual(column_A="declared", column_B="actual"),
                observed={"columns": len(types)},
                message="a gold column's type differs from the one its DDL declares",
            )
        ],
    )
    return outcomes


def changefeed_checks(ctx: QualityContext) -> list[CheckOutcome]:
    """Per changefeed: its gold tables' mode and quarantines, its watermark's lag, and its
    stuck partitions."""
    feeds = lakeview.changefeed_views(ctx.config, ctx.settings, ctx.now)
    states = open_table(ctx.layout.gold_state).to_pyarrow_table().to_pylist()
    return (
        mode_checks(ctx, feeds, states)
        + quarantine_checks(ctx, states)
        + lag_checks(ctx, feeds)
        + stuck_partition_checks(ctx, feeds)
    )


def mode_checks(
    ctx: QualityContext, feeds: Sequence[lakeview.ChangefeedView], states: Sequence[dict]
) -> list[CheckOutcome]:
    """The gold tables of a changefeed with watermarks are in watermark mode."""
    gxe = expectations()
    with_marks = {feed.name for feed in feeds if feed.watermarks}
    modes = pd.DataFrame(
        [
            {"table": qualified_name(s["schema"], s["table"]), "changefeed": s["changefeed"],
             "mode": s["mode"]}
            for s in states
            if s["changefeed"] in with_marks and not s["dropped"]
        ],
        columns=["table", "changefeed", "mode"],
    )  # fmt: skip
    return ctx.validator.run(
        modes,
        [
            Expectation(
                "gold_mode",
                gxe.ExpectColumnValuesToBeInSet(column="mode", value_set=["watermark"]),
                sample=tuple(modes[modes["mode"] != "watermark"].to_dict("records")),
                message="a gold table of a changefeed with watermarks is not in watermark mode",
            )
        ],
    )


def quarantine_checks(ctx: QualityContext, states: Sequence[dict]) -> list[CheckOutcome]:
    """No gold table lacks changes its changefeed quarantined."""
    gxe = expectations()
    lacking = pd.DataFrame(
        [
            {"table": qualified_name(s["schema"], s["table"]), "changefeed": s["changefeed"],
             "quarantined": QUARANTINED in (s["reason"] or ""), "reason": s["reason"]}
            for s in states
            if not s["dropped"]
        ],
        columns=["table", "changefeed", "quarantined", "reason"],
    )  # fmt: skip
    flagged = lacking[lacking["quarantined"].astype(bool)]
    return ctx.validator.run(
        lacking.drop(columns=["reason"]),
        [
            Expectation(
                "gold_mode",
                gxe.ExpectColumnValuesToBeInSet(column="quarantined", value_set=[False]),
                observed={"lacking": len(flagged)},
                sample=tuple(flagged.drop(columns=["quarantined"]).to_dict("records")),
                message=(
                    "a gold table may lack changes: records of its changefeed at or below the "
                    "TS it reflects are quarantined (its state's reason says which)"
                ),
            )
        ],
    )


def lag_checks(ctx: QualityContext, feeds: Sequence[lakeview.ChangefeedView]) -> list[CheckOutcome]:
    """Each watermark is at most max-lag behind."""
    gxe = expectations()
    lags = pd.DataFrame(
        [
            {"changefeed": f.name, "watermark": f.watermark, "lag_seconds": f.lag_seconds}
            for f in feeds
            if f.watermarks
        ],
        columns=["changefeed", "watermark", "lag_seconds"],
    )
    late = lags[lags["lag_seconds"].isna() | (lags["lag_seconds"] > ctx.settings.max_lag_seconds)]
    return ctx.validator.run(
        lags.fillna({"lag_seconds": float("inf")}),
        [
            Expectation(
                "freshness_lag",
                gxe.ExpectColumnValuesToBeBetween(
                    column="lag_seconds", max_value=ctx.settings.max_lag_seconds
                ),
                observed={"lag_seconds": {f.name: f.lag_seconds for f in feeds if f.watermarks}},
                sample=tuple(late.to_dict("records")),
                message=f"watermark lag above max-lag ({ctx.settings.max_lag_seconds:.0f} s)",
            )
        ],
    )


def stuck_partition_checks(
    ctx: QualityContext, feeds: Sequence[lakeview.ChangefeedView]
) -> list[CheckOutcome]:
    """No partition's resolved TS is stuck behind its changefeed's newest."""
    gxe = expectations()
    partitions = pd.DataFrame(
        [
            {"changefeed": f.name, "topic": p.topic, "partition": p.partition,
             "resolved_ts": p.resolved_ts, "stuck": p.stuck,
             "behind_seconds": p.behind_seconds}
            for f in feeds
            for p in f.partitions
        ],
        columns=["changefeed", "topic", "partition", "resolved_ts", "stuck", "behind_seconds"],
    )  # fmt: skip
    # As booleans: with no partitions (a changefeed without watermarks) the column is empty and
    # of no type, and indexing by it would select columns instead of rows.
    stuck = partitions[partitions["stuck"].astype(bool)]
    return ctx.validator.run(
        partitions,
        [
            Expectation(
                "stuck_partition",
                gxe.ExpectColumnValuesToBeInSet(column="stuck", value_set=[False]),
                observed={"stuck": len(stuck)},
                sample=tuple(stuck.drop(columns=["stuck"]).to_dict("records")),
                message=(
                    "partitions whose resolved TS is more than stuck-after "
                    f"({ctx.settings.stuck_after_seconds:.0f} s) behind their changefeed's "
                    "newest, or never seen: they hold all of gold back"
                ),
            )
        ],
    )


def validate_gold(ctx: QualityContext, since: int | None) -> list[CheckOutcome]:
    states, before = changed_tables(ctx, since)
    outcomes = []
    counted: dict[str, int] = {}
    keys = key_frame(ctx, states)
    if keys is not None:
        keys = keys.cache()
        try:
            # Counting rows per table computes the cache before GE's queries read it.
            counted = {r.table: r["count"] for r in keys.groupBy("table").count().collect()}
            outcomes += key_checks(ctx, keys)
        finally:
            keys.unpersist()
    outcomes += table_checks(ctx, states, before, counted)
    return outcomes + changefeed_checks(ctx)
