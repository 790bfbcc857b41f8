"""Validate one stage's new data, apply each check's policy, record the results.

    validation = validate_stage(spark, config, "bronze" | "silver" | "gold", validator=None)

What is new: bronze, the land batches above the last one validated; silver, the decoded bronze
batches above it; gold, the state table's versions since the last one validated (the tables
whose gold version moved). The last one validated is the version recorded with the stage's
commits to quality/results (Delta app id ``quality-<stage>``), so a rerun with nothing new
validates nothing and appends nothing: it reports the stage's last recorded validation instead,
so that a job rerun after a failed `fail` check fails again.
"""

from __future__ import annotations

import datetime as dt
import sys
import uuid
from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ticdc_lake.config import PipelineConfig
from ticdc_lake.delta import delta_table_exists, open_table, write_delta
from ticdc_lake.errors import StageFailed
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.quality import bronze, gold, lakeview, silver
from ticdc_lake.quality.context import QualityContext
from ticdc_lake.quality.history import ResultsHistory
from ticdc_lake.quality.results import CheckOutcome, StageValidation
from ticdc_lake.quality.settings import CHECKS, QUARANTINE, QualitySettings
from ticdc_lake.quality.store import write_results
from ticdc_lake.quality.validator import Validator

STAGES = ("bronze", "silver", "gold")


def app_id(stage: str) -> str:
    return f"quality-{stage}"


def last_validated(layout: LakeLayout, stage: str) -> int | None:
    if not delta_table_exists(layout.quality_results):
        return None
    return open_table(layout.quality_results).transaction_version(app_id(stage))


def _pending(ctx: QualityContext, stage: str) -> tuple[int | None, list[int]]:
    """(the batch key to record, the batches to validate); (None, []) when nothing is new."""
    last = last_validated(ctx.layout, stage)
    if stage == "gold":
        version = gold.state_version(ctx)
        if version is None or (last is not None and version <= last):
            return None, []
        return version, [] if last is None else [last]
    found = bronze.landed_batches(ctx) if stage == "bronze" else silver.decoded_batches(ctx)
    new = [batch for batch in found if last is None or batch > last]
    return (max(new), new) if new else (None, [])


def validate_stage(
    spark: SparkSession,
    config: PipelineConfig,
    stage: str,
    *,
    validator: Validator | None = None,
    settings: QualitySettings | None = None,
) -> StageValidation:
    """Validate what the stage added since its last validation and record the results."""
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {STAGES}, not {stage!r}")
    settings = settings or config.quality
    started = dt.datetime.now(dt.UTC)
    validation = StageValidation(uuid.uuid4().hex, stage, None, started)
    layout = LakeLayout(config.lake)
    now = lakeview.clock(config, settings)
    validator = validator or Validator(settings.sample_rows)  # GE is imported on first use
    ctx = QualityContext(spark, config, settings, validator, now)
    key, batches = _pending(ctx, stage)
    if key is None:
        return previous_validation(layout, stage, started)
    validator.warm_up()  # while the checks' first Spark job starts the session
    validation.batch = key
    quarantine: DataFrame | None = None
    if stage == "bronze":
        outcomes = bronze.validate_bronze(ctx, batches)
    elif stage == "silver":
        outcomes, changes = silver.validate_silver(ctx, batches)
        quarantine = _quarantine_rows(ctx, outcomes, changes, validation)
    else:
        outcomes = gold.validate_gold(ctx, batches[0] if batches else None)
    validation.outcomes = [(o, settings.policy(o.check)) for o in outcomes]
    validation.finished_at = dt.datetime.now(dt.UTC)
    if quarantine is not None:
        result = write_delta(quarantine, layout.quality_quarantine, app_id=app_id(stage),
                             version=key)  # fmt: skip
        validation.quarantined = result.num_records
    # A few rows, written from the driver: as a Spark job, the job's first write, they took
    # about a second of a checks job run as a spark-submit.
    written = write_results(layout, validation, app_id=app_id(stage), version=key)
    validation.written = written.committed
    return validation


def _quarantine_rows(
    ctx: QualityContext,
    outcomes: Sequence[CheckOutcome],
    changes: DataFrame | None,
    validation: StageValidation,
) -> DataFrame | None:
    failing = [
        o.check
        for o in outcomes
        if not o.success and CHECKS[o.check].rows and ctx.settings.policy(o.check) == QUARANTINE
    ]
    if changes is None or not failing:
        return None
    rows = silver.failing_rows(ctx, changes, list(dict.fromkeys(failing)))
    return rows.withColumns(
        {
            "run_id": F.lit(validation.run_id),
            "quarantined_at": F.lit(validation.started_at).cast("timestamp"),
        }
    )


def previous_validation(layout: LakeLayout, stage: str, started: dt.datetime) -> StageValidation:
    """Nothing new: the stage's last recorded validation (its policies decide the exit)."""
    history = ResultsHistory.open(layout.quality_results)
    mine = history.latest(stage) if history is not None else []
    if not mine:
        return StageValidation("", stage, None, started)
    validation = StageValidation(mine[0]["run_id"], stage, None, started, started)
    validation.outcomes = [
        (
            CheckOutcome(
                check=r["check"],
                success=r["success"],
                unexpected_count=r["unexpected_count"],
                message=r["message"] or "",
                changefeed=r["changefeed"],
                table=r["table"],
            ),
            r["policy"],
        )
        for r in mine
    ]
    return validation


class QualityCheckFailed(StageFailed):
    """A check whose policy is `fail` failed: the stage's job exits non-zero naming it."""

    def __init__(self, validation: StageValidation):
        failures = {}
        for outcome in validation.failures("fail"):
            where = "/".join(part for part in (outcome.changefeed, outcome.table) if part)
            name = f"{outcome.check} [{where}]" if where else outcome.check
            failures[name] = outcome.describe()
        super().__init__(validation, failures)


def check_stage(
    spark: SparkSession,
    config: PipelineConfig,
    stage: str,
    *,
    validator: Validator | None = None,
    echo: bool = False,
) -> StageValidation:
    """The checks as a pipeline step: validate the stage's new data, refresh the HTML report,
    and raise QualityCheckFailed when a `fail` check failed. ``echo`` prints every failed check
    on stderr (a job's log), whatever its policy."""
    from ticdc_lake.quality.report import write_report

    validation = validate_stage(spark, config, stage, validator=validator)
    if echo:
        print(validation.summary(), file=sys.stderr)
    write_report(config)
    if validation.failed:
        raise QualityCheckFailed(validation)
    return validation
