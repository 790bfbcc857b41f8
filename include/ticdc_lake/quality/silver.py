"""Silver checks, on the bronze batches decoded since the last validation.

One Spark validation of the batches' row events (row checks, each an SQL predicate so that the
rows a ``quarantine`` policy moves are exactly the ones GE counted), then pandas validations of
the small things: decode rate per topic, the counts reconciling per batch, the DDL log's order,
the watermarks never going back.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from ticdc_lake.delta import delta_table_exists, file_actions, open_table, read_arrow, read_delta
from ticdc_lake.quality.context import QualityContext, computed_once
from ticdc_lake.quality.results import CheckOutcome
from ticdc_lake.quality.validator import Expectation, expectations

EARLIEST_MS = 1_420_070_400_000  # 2015-01-01: TiDB's first release is later
UNROLLED_KEY_COLUMNS = 4
# What a failing row event of each row check is, for people (the SQL is row_predicates').
ROW_CHECK_MEANINGS = {
    "op_allowed": "row events whose op is not insert, update or delete",
    "commit_ts_plausible": (
        "row events without the commit TS their protocol carries, or with one before 2015 or "
        "after now (plus the allowed clock skew)"
    ),
    "handle_key_present": "row events whose handle key names a column that neither image holds",
}
_SHOWN_COLUMNS = ("topic", "partition", "offset", "index", "schema", "table", "op", "commit_ts",
                  "handle_key")  # fmt: skip
_SHOWN = ", ".join(f"`{name}`" for name in _SHOWN_COLUMNS)


def decoded_batches(ctx: QualityContext) -> list[int]:
    if not delta_table_exists(ctx.layout.decode_log):
        return []
    ids = open_table(ctx.layout.decode_log).to_pyarrow_table(columns=["bronze_batch"])
    return sorted(set(ids.column("bronze_batch").to_pylist()))


def row_predicates(ctx: QualityContext) -> dict[str, str]:
    """Check name → SQL condition true for a failing row event."""
    carrying = [
        name
        for name, topic in ctx.config.topics.items()
        if topic.protocol not in ("avro", "canal-json") or topic.enable_tidb_extension
    ]
    carrying = [name for name in carrying if ctx.config.topic(name).protocol != "avro"]
    names = _quoted(carrying)
    missing = f"(commit_ts IS NULL AND topic IN ({names}))" if carrying else "false"
    latest_ms = int((ctx.now + ctx.settings.clock_skew_seconds) * 1000)
    # Canal-JSON names only primary-key columns (pkNames): a table keyed by a unique index has
    # none, and compaction takes its key from the DDL log instead.
    no_handle = "(handle_key IS NULL OR size(handle_key) = 0)"
    keyless = _quoted(name for name, t in ctx.config.topics.items() if t.protocol == "canal-json")
    if keyless:
        no_handle = f"({no_handle} AND topic NOT IN ({keyless}))"
    return {
        "op_allowed": "op IS NULL OR op NOT IN ('insert', 'update', 'delete')",
        "commit_ts_plausible": (
            f"{missing} OR commit_ts <= 0 OR shiftright(commit_ts, 18) < {EARLIEST_MS} "
            f"OR shiftright(commit_ts, 18) > {latest_ms}"
        ),
        "handle_key_present": f"{no_handle} OR {key_not_in_images()}",
    }


def key_not_in_images() -> str:
    """SQL: a column of the row's handle key is named in neither image. Unrolled for keys of up
    to UNROLLED_KEY_COLUMNS columns: Spark evaluates a lambda row by row, interpreted (``forall``
    over the keys took 4.6-5.4 s of 1M realistic rows, unrolled 1.5 s); longer keys take it."""

    def named(key: str) -> str:
        return (f"coalesce(array_contains(columns.name, {key}), false) "
                f"OR coalesce(array_contains(old_columns.name, {key}), false)")  # fmt: skip

    cases = " ".join(
        f"WHEN {size} THEN NOT ("
        + " AND ".join(f"({named(f'try_element_at(handle_key, {n})')})" for n in range(1, size + 1))
        + ")"
        for size in range(1, UNROLLED_KEY_COLUMNS + 1)
    )
    return f"CASE size(handle_key) {cases} ELSE NOT forall(handle_key, k -> {named('k')}) END"


def _quoted(names) -> str:
    """SQL string literals, comma-separated."""
    return ", ".join("'" + name.replace("'", "''") + "'" for name in names)


def batch_changes(ctx: QualityContext, batches: Sequence[int]) -> DataFrame | None:
    if not delta_table_exists(ctx.layout.changes):
        return None
    changes = read_delta(ctx.spark, ctx.layout.changes)
    return changes.where(F.col("bronze_batch").isin(list(batches)))


def change_checks(ctx: QualityContext, changes: DataFrame) -> list[CheckOutcome]:
    """Each row check one GE query over the rows failing any of them: a flag per check is
    computed in one read of the batches (of the image's column names, not their values) and only
    the flagged rows are kept, so each query finds exactly the unexpected rows it would find in
    the whole batch without reading it again."""
    gxe = expectations()
    predicates = row_predicates(ctx)
    flags = {f"fails_{name}": _failing(predicate) for name, predicate in predicates.items()}
    flagged = changes.select(*_SHOWN_COLUMNS, *[flag.alias(n) for n, flag in flags.items()])
    with computed_once(flagged.where(" OR ".join(flags))) as failing:
        checks = [
            Expectation(
                name,
                gxe.UnexpectedRowsExpectation(
                    unexpected_rows_query=f"SELECT {_SHOWN} FROM {{batch}} WHERE fails_{name}"
                ),
                message=ROW_CHECK_MEANINGS[name],
            )
            for name in predicates
        ]
        return ctx.validator.run(failing, checks)


def _failing(predicate: str):
    return F.coalesce(F.expr(predicate), F.lit(False))


def failing_rows(ctx: QualityContext, changes: DataFrame, names: Sequence[str]) -> DataFrame:
    """The row events failing the named checks, each with the first check it fails."""
    predicates = row_predicates(ctx)
    which = None
    for name in names:
        condition = _failing(predicates[name])
        which = F.when(condition, name) if which is None else which.when(condition, name)
    return changes.withColumn("check", which).where(F.col("check").isNotNull())


def _bronze_counts(ctx: QualityContext, batches: Sequence[int]) -> dict[tuple[str, int], int]:
    """Bronze records per (topic, batch), from the Delta log's statistics when every file holds
    one batch (land writes them so); counted by Spark otherwise."""
    actions = file_actions(open_table(ctx.layout.bronze))
    names = {"partition.topic", "num_records", "min.batch_id", "max.batch_id"}
    counts: dict[tuple[str, int], int] = {}
    if names <= set(actions.column_names):
        rows = actions.select(sorted(names)).to_pylist()
        if all(r["min.batch_id"] == r["max.batch_id"] is not None for r in rows):
            for row in rows:
                if row["min.batch_id"] in batches:
                    key = (row["partition.topic"], row["min.batch_id"])
                    counts[key] = counts.get(key, 0) + row["num_records"]
            return counts
    grouped = (
        read_delta(ctx.spark, ctx.layout.bronze)
        .where(F.col("batch_id").isin(list(batches)))
        .groupBy("topic", "batch_id")
        .count()
        .collect()
    )
    return {(r.topic, r.batch_id): r["count"] for r in grouped}


def _quarantined(ctx: QualityContext, batches: Sequence[int]) -> dict[tuple[str, int], int]:
    if not delta_table_exists(ctx.layout.quarantine):
        return {}
    table = read_arrow(ctx.layout.quarantine, columns=["topic", "bronze_batch"])
    counts: dict[tuple[str, int], int] = {}
    for row in table.to_pylist():
        if row["bronze_batch"] in batches:
            key = (row["topic"], row["bronze_batch"])
            counts[key] = counts.get(key, 0) + 1
    return counts


def count_checks(ctx: QualityContext, batches: Sequence[int]) -> list[CheckOutcome]:
    gxe = expectations()
    bronze = _bronze_counts(ctx, batches)
    quarantined = _quarantined(ctx, batches)
    topics = sorted({topic for topic, _ in bronze} | {topic for topic, _ in quarantined})
    rates = []
    for topic in topics:
        records = sum(n for (t, _), n in bronze.items() if t == topic)
        bad = sum(n for (t, _), n in quarantined.items() if t == topic)
        rate = (records - bad) / records if records else 1.0
        rates.append({"topic": topic, "records": records, "quarantined": bad, "rate": rate})
    rates_frame = pd.DataFrame(rates, columns=["topic", "records", "quarantined", "rate"])
    low = rates_frame[rates_frame["rate"] < ctx.settings.min_decode_rate]
    outcomes = ctx.validator.run(
        rates_frame,
        [
            Expectation(
                "decode_rate",
                gxe.ExpectColumnValuesToBeBetween(
                    column="rate", min_value=ctx.settings.min_decode_rate
                ),
                observed={
                    "min_rate": float(rates_frame["rate"].min()) if rates else 1.0,
                    "per_topic": {r["topic"]: r["rate"] for r in rates},
                    "quarantined": sum(r["quarantined"] for r in rates),
                    "records": sum(r["records"] for r in rates),
                },
                sample=tuple(low.to_dict("records")),
                message=f"decode rate below {ctx.settings.min_decode_rate}",
            )
        ],
    )
    outcomes += ctx.validator.run(reconcile_rows(ctx, batches, bronze, quarantined), [
        Expectation(
            "bronze_silver_reconcile",
            gxe.ExpectColumnPairValuesToBeEqual(column_A="bronze", column_B="records"),
            message="bronze records of the batch != records the decode log read",
        ),
        Expectation(
            "bronze_silver_reconcile",
            gxe.ExpectColumnPairValuesToBeEqual(column_A="records", column_B="accounted"),
            message="records != decoded + quarantined",
        ),
        Expectation(
            "bronze_silver_reconcile",
            gxe.ExpectColumnPairValuesToBeEqual(column_A="quarantined", column_B="in_quarantine"),
            message="quarantined count != rows in silver/quarantine",
        ),
    ])  # fmt: skip
    return outcomes


def reconcile_rows(ctx, batches, bronze, quarantined) -> pd.DataFrame:
    log = open_table(ctx.layout.decode_log).to_pyarrow_table(
        columns=["bronze_batch", "records", "decoded", "quarantined"]
    )
    rows = []
    for row in log.to_pylist():
        batch = row["bronze_batch"]
        if batch not in batches:
            continue
        rows.append(
            {
                "bronze_batch": batch,
                "bronze": sum(n for (_, b), n in bronze.items() if b == batch),
                "records": row["records"],
                "accounted": row["decoded"] + row["quarantined"],
                "quarantined": row["quarantined"],
                "in_quarantine": sum(n for (_, b), n in quarantined.items() if b == batch),
            }
        )
    columns = ["bronze_batch", "bronze", "records", "accounted", "quarantined", "in_quarantine"]
    return pd.DataFrame(rows, columns=columns)


def ddl_order_rows(ctx: QualityContext, batches: Sequence[int]) -> pd.DataFrame:
    """The batches' DDL events with the commit TS of the table's previous DDL in the same
    Kafka partition (TiCDC sends a table's DDLs in commit order to every partition)."""
    columns = ["topic", "partition", "offset", "schema", "table", "commit_ts", "previous_ts"]
    if not delta_table_exists(ctx.layout.ddl):
        return pd.DataFrame(columns=columns)
    order = Window.partitionBy("topic", "partition", "schema", "table").orderBy("offset", "index")
    ddl = (
        read_delta(ctx.spark, ctx.layout.ddl)
        .where(F.col("bronze_batch").isin(list(batches)))
        .withColumn("previous_ts", F.lag("commit_ts").over(order))
        .select(*columns)
    )
    return ddl.toPandas()


def watermark_rows(ctx: QualityContext) -> tuple[pd.DataFrame, int]:
    """Per partition the watermark now and at the table's previous version, and the
    regressions the table counts."""
    columns = ["topic", "partition", "resolved_ts", "previous_ts"]
    if not delta_table_exists(ctx.layout.watermarks):
        return pd.DataFrame(columns=columns), 0
    table = open_table(ctx.layout.watermarks)
    now = table.to_pyarrow_table().to_pylist()
    before = {}
    if table.version() > 0:
        old = open_table(ctx.layout.watermarks, table.version() - 1).to_pyarrow_table()
        before = {(r["topic"], r["partition"]): r["resolved_ts"] for r in old.to_pylist()}
    rows = [
        {
            "topic": r["topic"],
            "partition": r["partition"],
            "resolved_ts": r["resolved_ts"],
            "previous_ts": before.get((r["topic"], r["partition"])),
        }
        for r in now
    ]
    return pd.DataFrame(rows, columns=columns), sum(r["regressions"] or 0 for r in now)


def order_checks(ctx: QualityContext, batches: Sequence[int]) -> list[CheckOutcome]:
    gxe = expectations()
    ddl = ddl_order_rows(ctx, batches)
    outcomes = ctx.validator.run(
        ddl,
        [
            Expectation(
                "ddl_ts_order",
                gxe.ExpectColumnPairValuesAToBeGreaterThanB(
                    column_A="commit_ts",
                    column_B="previous_ts",
                    or_equal=True,
                    ignore_row_if="either_value_is_missing",
                ),
                observed={"ddl": len(ddl)},
                message="a table's DDL with a commit TS below the one before it",
            )
        ],
    )
    marks, counted = watermark_rows(ctx)
    outcomes += ctx.validator.run(
        marks,
        [
            Expectation(
                "watermark_regression",
                gxe.ExpectColumnPairValuesAToBeGreaterThanB(
                    column_A="resolved_ts",
                    column_B="previous_ts",
                    or_equal=True,
                    ignore_row_if="either_value_is_missing",
                ),
                observed={"regressions_counted": counted},
                message="a partition's watermark went back (not a counted, ignored regression)",
            )
        ],
    )
    return outcomes


def validate_silver(
    ctx: QualityContext, batches: Sequence[int]
) -> tuple[list[CheckOutcome], DataFrame | None]:
    """The outcomes, and the batches' changes (for the quarantine policy)."""
    changes = batch_changes(ctx, batches)
    outcomes = change_checks(ctx, changes) if changes is not None else []
    outcomes += count_checks(ctx, batches) + order_checks(ctx, batches)
    return outcomes, changes
