"""A small real lake for the report's tests: Delta tables written with deltalake (watermarks,
gold state, silver quarantine) and data-quality results written through write_results, the
path the checks take. Times are fixed so the page's figures are known."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import yaml
from deltalake import write_deltalake
from ticdc_lake.config import PipelineConfig, load_config
from ticdc_lake.gold.state import STATE_ARROW
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.quality.results import CheckOutcome, StageValidation
from ticdc_lake.quality.store import write_results
from ticdc_lake.silver.decode import QUARANTINE_SCHEMA

NOW = dt.datetime(2026, 11, 20, 12, 0, tzinfo=dt.UTC)
WATERMARK = int((NOW - dt.timedelta(minutes=30)).timestamp() * 1000) << 18
LAGGING = int((NOW - dt.timedelta(hours=3)).timestamp() * 1000) << 18
BAD_KEY = "order-4711"  # in a failing check's sample


def write_config(root: Path) -> PipelineConfig:
    path = root / "pipeline.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "version": 1,
                "lake": "lake",
                "topics": {"orders": {"protocol": "open-protocol", "partitions": 2}},
                "changefeeds": {"shop": {"topics": ["orders"]}},
            }
        )
    )
    return load_config(path)


def fill_lake(config: PipelineConfig, runs: int = 4) -> None:
    layout = LakeLayout(config.lake)
    write_deltalake(
        str(layout.watermarks),
        pa.table(
            {
                "topic": ["orders", "orders"],
                "partition": pa.array([0, 1], pa.int32()),
                "resolved_ts": [WATERMARK + (5 << 18), WATERMARK],
            }
        ),
    )
    write_deltalake(str(layout.gold_state), pa.Table.from_pylist(_states(), STATE_ARROW))
    quarantined = [{"topic": "orders", "partition": 1, "offset": n} for n in range(3)]
    write_deltalake(str(layout.quarantine), _with_schema(quarantined, QUARANTINE_SCHEMA))
    for run in range(runs):
        for validation in _validations(run, last=run == runs - 1):
            write_results(layout, validation, app_id=f"quality-{validation.stage}",
                          version=validation.batch)  # fmt: skip


def _with_schema(rows: list[dict], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pylist(rows, pa.schema([field.with_nullable(True) for field in schema]))


def _states() -> list[dict]:
    base = {"changefeed": "shop", "schema": "shop", "applied_batch": 3, "columns": "[]"}
    base |= {"handle_key": ["id"], "dropped": False, "generation": 0, "gold_version": 3}
    return [
        base | {"table": "orders", "path": "gold/shop/orders", "mode": "watermark"}
        | {"watermark": WATERMARK, "applied_ts": WATERMARK, "rows": 118, "reason": None},
        base | {"table": "legacy", "path": "gold/shop/legacy", "mode": "inconsistent"}
        | {"watermark": None, "applied_ts": LAGGING, "rows": 7}
        | {"reason": "DDL gold cannot reproduce: ALTER TABLE legacy PARTITION BY HASH(id)"},
    ]  # fmt: skip


def _validations(run: int, last: bool) -> list[StageValidation]:
    started = NOW - dt.timedelta(hours=4 - run)
    finished = started + dt.timedelta(seconds=20)
    rate = 1.0 - 0.01 * run
    silver = StageValidation(f"silver-{run}", "silver", run + 1, started, finished)
    silver.outcomes = [
        (CheckOutcome("decode_rate", True, {"min_rate": rate, "quarantined": run}), "warn"),
        (CheckOutcome("commit_ts_plausible", True, {}), "fail"),
    ]
    if last:  # the newest silver run fails a `fail` check, with a sample
        unique = CheckOutcome(
            "handle_key_unique",
            False,
            {},
            2,
            ({"table": "shop.orders", "handle_key": BAD_KEY, "offset": 981},),
            "a handle key appears twice within one commit TS",
            "shop",
            "shop.orders",
        )
        silver.outcomes.append((unique, "fail"))
    gold = StageValidation(f"gold-{run}", "gold", 10 + run, started, finished)
    lag = {"lag_seconds": {"shop": 600.0 * (run + 1)}}
    gold.outcomes = [(CheckOutcome("freshness_lag", True, lag, changefeed="shop"), "warn")]
    return [silver, gold]


def hostile(field: str) -> str:
    """Markup a lake could hold in ``field``: a tag naming the field, and a script."""
    return f"<b id={field}><script>alert(1)</script>"


HOSTILE_FIELDS = ("gold_changefeed", "gold_schema", "gold_table", "ddl", "result_changefeed",
                  "result_table", "check", "policy", "message", "sample_column", "sample_value",
                  "quarantine_topic", "quarantine_check")  # fmt: skip


def fill_hostile_lake(config: PipelineConfig) -> None:
    """A lake whose every text a page shows is markup (``hostile(field)``): gold's table names
    and a DDL it cannot reproduce, a failed check's table, changefeed, policy, error text and
    sample (column names and values), the quarantines' topics and checks."""
    layout = LakeLayout(config.lake)
    state = _states()[1] | {
        "changefeed": hostile("gold_changefeed"),
        "schema": hostile("gold_schema"),
        "table": hostile("gold_table"),
        "reason": f"DDL gold cannot reproduce: ALTER TABLE {hostile('ddl')}",
    }
    write_deltalake(str(layout.gold_state), pa.Table.from_pylist([state], STATE_ARROW))
    quarantined = [{"topic": hostile("quarantine_topic"), "partition": 0, "offset": 1}]
    write_deltalake(str(layout.quarantine), _with_schema(quarantined, QUARANTINE_SCHEMA))
    write_deltalake(str(layout.quality_quarantine),
                    pa.table({"check": [hostile("quarantine_check")]}))  # fmt: skip
    silver = StageValidation("hostile", "silver", 1, NOW, NOW)
    failed = CheckOutcome(hostile("check"), False, {}, 1,
                          ({hostile("sample_column"): hostile("sample_value")},),
                          hostile("message"), hostile("result_changefeed"),
                          hostile("result_table"))  # fmt: skip
    silver.outcomes = [(failed, hostile("policy"))]
    write_results(layout, silver, app_id="quality-silver", version=1)
