"""Run a backfill: re-derive silver for the planned batches, rebuild the planned changefeeds'
gold to the watermark, and record what the lake looked like after (plan.py's ``done``).

    run_backfill(spark, config, start_ts, end_ts, tables=(), dry_run=False) -> BackfillResult

Gold is rebuilt per changefeed (``compact(..., rebuild=True)``): every gold table of a changefeed
whose topics had records in a re-derived batch is emptied and the change log applied again up to
the watermark, so gold ends exactly as a full run from the same silver would leave it. A
changefeed with nothing in the range is left alone. The record is written last: a backfill
killed before it runs again in full. The lake's lock is held throughout (one run per lake).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession

from ticdc_lake.backfill.plan import (
    BACKFILLS_SCHEMA,
    BackfillPlan,
    config_fingerprint,
    lake_versions,
    plan_backfill,
)
from ticdc_lake.config import PipelineConfig
from ticdc_lake.delta import append_rows
from ticdc_lake.gold.compact import CompactResult, compact
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.lake.lock import lake_lock
from ticdc_lake.silver.decode import DecodeResult, redecode


@dataclass(frozen=True)
class BackfillResult:
    plan: BackfillPlan
    redecode: DecodeResult | None = None  # None: nothing re-derived (done before, dry run)
    compact: CompactResult | None = None
    dry_run: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "plan": self.plan.to_dict(),
            "redecode": self.redecode.to_dict() if self.redecode else None,
            "compact": self.compact.to_dict() if self.compact else None,
            "dry_run": self.dry_run,
        }

    def __str__(self) -> str:
        lines = self.plan.lines()
        if self.dry_run:
            lines.append("dry run: nothing written")
        lines += [str(part) for part in (self.redecode, self.compact) if part is not None]
        return "\n".join(lines)


def run_backfill(
    spark: SparkSession,
    config: PipelineConfig,
    start_ts: int,
    end_ts: int,
    tables: Iterable[str] = (),
    *,
    dry_run: bool = False,
) -> BackfillResult:
    # Planned under the lock too: a run finishing meanwhile would change what needs doing.
    with lake_lock(config.lake):
        plan = plan_backfill(config, start_ts, end_ts, tables)
        if dry_run or plan.done:
            return BackfillResult(plan, dry_run=dry_run)
        redecoded = redecode(spark, config, batches=plan.batches) if plan.batches else None
        compacted = None
        if plan.changefeeds:
            compacted = compact(spark, config, changefeeds=list(plan.changefeeds), rebuild=True)
        record_backfill(config, plan)
        return BackfillResult(plan, redecoded, compacted)


def record_backfill(config: PipelineConfig, plan: BackfillPlan) -> None:
    """Append the finished backfill with the table versions it left (after its own writes)."""
    layout = LakeLayout(config.lake)
    row = {
        "start_ts": plan.start_ts,
        "end_ts": plan.end_ts,
        "tables": json.dumps(list(plan.tables)),
        "config_sha256": config_fingerprint(config),
        "versions": json.dumps(lake_versions(layout)),
        "batches": list(plan.batches),
        "changefeeds": list(plan.changefeeds),
        "finished_at": dt.datetime.now(dt.UTC),
    }
    append_rows(layout.backfills, pa.Table.from_pylist([row], BACKFILLS_SCHEMA))
