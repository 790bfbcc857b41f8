"""The pipeline: the four stages in order on one SparkSession, and what to tell a person after.

    run_stages(spark, config, stages=STAGES, *, changefeeds=None, until_ts=None, rebuild=False)
        -> PipelineResult
    render_summary(result) -> str

Stages always run in pipeline order (land, decode, watermark, compact) whatever order they are
named in. Each stage's result and wall time are kept. A stage that fails as a whole (a
TicdcLakeError other than ConfigError: bronze or silver in a state it cannot work from, a schema
registry that cannot be reached) stops the run: the stages after it are skipped, since they
would work from stale input. Compaction failing for some gold tables (CompactError) is reported
with the tables that were compacted. A ConfigError is raised: nothing ran on a bad config.

The spark-submit entry points (spark_jobs/) share ``job_parser`` and ``job_main``: parse
``--config``, take the lake's lock (lake/lock.py: one run per lake at a time), build the session,
run one stage, print its result as one JSON object, exit 1 on failures and 2 on a bad config.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession

from ticdc_lake.app.terminal import printing
from ticdc_lake.config import PipelineConfig, load_config
from ticdc_lake.delta import delta_table_exists, file_problem, open_table
from ticdc_lake.errors import ConfigError, StageFailed, TicdcLakeError
from ticdc_lake.gold.exceptions import CompactError
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.lake.lock import LakeLockedError, add_lock_wait, lake_lock
from ticdc_lake.orchestration import QUALITY_AFTER
from ticdc_lake.quality.lakeview import report_file
from ticdc_lake.redact import redact_value
from ticdc_lake.runtime.spark import LazySession


def _imported_when_run(module: str, name: str) -> Callable[..., Any]:
    """``module.name``, imported when first called: a spark-submit job runs one stage, and
    importing all four cost it 0.35 s (compaction's pulls in pandas)."""

    def stage(*args, **kwargs):
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    return stage


# In pipeline order.
_STAGE_FUNCTIONS: dict[str, Callable[..., Any]] = {
    name: _imported_when_run(f"ticdc_lake.{layer}.{name}", name)
    for layer, name in (
        ("bronze", "land"),
        ("silver", "decode"),
        ("silver", "watermark"),
        ("gold", "compact"),
    )
}
STAGES = tuple(_STAGE_FUNCTIONS)


def pipeline_order(names: Iterable[str]) -> tuple[str, ...]:
    """The named stages in the order they must run; an unknown name is a ConfigError."""
    chosen = {name.strip() for name in names if name.strip()}
    unknown = sorted(chosen - set(STAGES))
    if unknown:
        raise ConfigError(
            f"unknown stage(s) {', '.join(unknown)}; the stages are {', '.join(STAGES)}"
        )
    if not chosen:
        raise ConfigError(f"no stage named; the stages are {', '.join(STAGES)}")
    return tuple(stage for stage in STAGES if stage in chosen)


@dataclass(frozen=True)
class StageRun:
    stage: str
    result: Any  # the stage's result (LandResult, ...); None when the stage failed as a whole
    seconds: float
    failures: dict[str, str] = field(default_factory=dict)  # what failed (table, stage): why

    def to_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "seconds": round(self.seconds, 3),
            "result": self.result.to_dict() if self.result is not None else None,
            "failures": dict(self.failures),
        }


@dataclass(frozen=True)
class PipelineResult:
    config: PipelineConfig
    runs: tuple[StageRun, ...]
    skipped: tuple[str, ...] = ()  # stages not run because an earlier one failed

    @property
    def failed(self) -> bool:
        return any(run.failures for run in self.runs)

    @property
    def seconds(self) -> float:
        return sum(run.seconds for run in self.runs)

    def result(self, stage: str) -> Any:
        """The stage's result, or None when it did not run or failed as a whole."""
        return next((run.result for run in self.runs if run.stage == stage), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": str(self.config.source),
            "lake": str(self.config.lake),
            "reports": str(self.config.reports),
            "stages": [run.to_dict() for run in self.runs],
            "skipped": list(self.skipped),
            "failed": self.failed,
            "seconds": round(self.seconds, 3),
        }


def timed_stage(stage: str, work: Callable[[], Any], lake: Path | None = None) -> StageRun:
    """Run one stage's work, timing it and turning its failures into a StageRun.

    Any other exception is looked into (``file_problem``): a table of ``lake`` missing a data
    file, or an unreadable file the error names, fails the stage with a message saying which
    and what to do; anything else is raised.
    """
    started = time.perf_counter()
    try:
        result, failures = work(), {}
    except (CompactError, StageFailed) as exc:  # the result says what was done nonetheless
        result, failures = exc.result, dict(exc.failures)
    except ConfigError:
        raise
    except TicdcLakeError as exc:
        result, failures = None, {stage: str(exc)}
    except Exception as exc:
        problem = file_problem(lake, exc) if lake is not None else None
        if problem is None:
            raise
        result, failures = None, {stage: str(problem)}
    return StageRun(stage, result, time.perf_counter() - started, failures)


def run_stage(spark: SparkSession, config: PipelineConfig, stage: str, **options) -> StageRun:
    """One stage; ``options`` go to its function (compact: changefeeds, until_ts, rebuild)."""
    function = _STAGE_FUNCTIONS[pipeline_order([stage])[0]]
    return timed_stage(stage, lambda: function(spark, config, **options), config.lake)


def run_stages(
    spark: SparkSession,
    config: PipelineConfig,
    stages: Iterable[str] = STAGES,
    *,
    changefeeds: Sequence[str] | None = None,
    until_ts: int | None = None,
    rebuild: bool = False,
    lock_wait: float | None = None,
    quality: bool = False,
) -> PipelineResult:
    """Run the chosen stages in pipeline order; compact gets ``changefeeds``, ``until_ts`` and
    ``rebuild`` (empty the changefeeds' gold tables and apply silver again). With ``quality``,
    each stage of QUALITY_AFTER is followed by its data-quality checks (one GE context for the
    run), and the HTML report is written at the end; a failed `fail` check stops the run.

    The lake's lock is held for the whole run; another run's lock is waited for ``lock_wait``
    seconds (None: $TICDC_LAKE_LOCK_WAIT or 600), then LakeLockedError is raised."""
    order = pipeline_order(stages)
    if changefeeds is not None:
        unknown = sorted(set(changefeeds) - set(config.changefeeds))
        if unknown:  # before any stage runs, not when compact finally gets to it
            raise ConfigError(
                f"{config.source}: unknown changefeed(s) {', '.join(unknown)}; known: "
                f"{', '.join(sorted(config.changefeeds))}"
            )
    compact_options = {"changefeeds": changefeeds, "until_ts": until_ts, "rebuild": rebuild}
    with lake_lock(config.lake, lock_wait):
        result = _run_in_order(spark, config, order, compact_options, quality)
    if quality:
        from ticdc_lake.quality.report import write_report

        write_report(config)
    return result


def _run_in_order(spark, config, order, compact_options, quality: bool) -> PipelineResult:
    runs: list[StageRun] = []
    checks = _QualityChecks(spark, config) if quality else None
    for position, stage in enumerate(order):
        run = run_stage(spark, config, stage, **(compact_options if stage == "compact" else {}))
        runs.append(run)
        if run.result is not None and checks is not None and stage in QUALITY_AFTER:
            run = checks.run(QUALITY_AFTER[stage])
            runs.append(run)
        if run.result is None or (run.stage.startswith("quality-") and run.failures):
            return PipelineResult(config, tuple(runs), order[position + 1 :])
    return PipelineResult(config, tuple(runs))


class _QualityChecks:
    """A run's data-quality checks, sharing one GE context (built on first use)."""

    def __init__(self, spark: SparkSession, config: PipelineConfig):
        from ticdc_lake.quality.validator import Validator

        self.spark, self.config = spark, config
        self.validator = Validator(config.quality.sample_rows)
        self.validator.warm_up()

    def run(self, stage: str) -> StageRun:
        from ticdc_lake.quality.run import check_stage

        return timed_stage(
            f"quality-{stage}",
            lambda: check_stage(self.spark, self.config, stage, validator=self.validator),
            self.config.lake,
        )


# --- what the lake holds, from the Delta logs alone ------------------------------------------


def table_rows(path) -> int | None:
    """Rows of a Delta table from its file statistics (no data read); None when unknown."""
    if not delta_table_exists(path):
        return 0
    actions = pa.table(open_table(path).get_add_actions(flatten=True))
    if "num_records" not in actions.column_names:
        return None
    counts = actions.column("num_records").to_pylist()
    return None if None in counts else sum(counts)


def lake_totals(config: PipelineConfig) -> dict[str, int | None]:
    layout = LakeLayout(config.lake)
    return {
        "bronze records": table_rows(layout.bronze),
        "silver changes": table_rows(layout.changes),
        "DDL": table_rows(layout.ddl),
        "resolved events": table_rows(layout.resolved),
        "quarantined": table_rows(layout.quarantine),
    }


# --- the summary ----------------------------------------------------------------------------


def tso_time(ts: int) -> str:
    """A TiDB TSO's physical time, in UTC."""
    moment = dt.datetime.fromtimestamp((ts >> 18) / 1000, dt.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def _n(value: int | None) -> str:
    return "?" if value is None else f"{value:,}"


def _files(count: int) -> str:
    return f"{count} file{'' if count == 1 else 's'}"


def _land_line(result) -> str:
    if result.batch_id is None:
        return f"nothing new ({_files(result.files_seen)} seen, all landed before)"
    return (
        f"batch {result.batch_id}{' (finished a killed run)' if result.recovered else ''}: "
        f"{_files(result.files_landed)}, {_n(result.records_read)} records read, "
        f"{_n(result.records_added)} added to bronze ({_n(result.duplicates)} duplicates, "
        f"{_n(result.conflicts)} conflicts, {_n(result.errors)} unreadable); "
        f"{result.offset_gaps} offset gaps ({_n(result.missing_offsets)} offsets)"
    )


def _decode_line(result) -> str:
    if not result.batches:
        return "nothing new to decode"
    events = ", ".join(f"{count:,} {kind}" for kind, count in result.events.items())
    return (
        f"{_n(result.records)} records = {_n(result.decoded)} decoded + "
        f"{_n(result.quarantined)} quarantined; events: {events}"
    )


def _watermark_line(result) -> str:
    return (
        f"{_n(result.resolved_read)} resolved events read, {result.advanced} of "
        f"{result.partitions} partitions advanced, {result.regressions} regressions ignored"
    )


def _compact_line(result) -> str:
    tables = [t for feed in result.changefeeds for t in feed.tables]
    if all(feed.noop for feed in result.changefeeds):
        return f"nothing new to apply ({len(tables)} gold tables up to date)"
    return (
        f"{len(tables)} gold tables: {sum(t.changes for t in tables):,} changes applied, "
        f"{sum(t.duplicates for t in tables):,} replays skipped, "
        f"{sum(t.upserts for t in tables):,} upserts, {sum(t.deletes for t in tables):,} "
        f"deletes, {sum(t.ddl for t in tables)} DDL effects"
    )


def _warnings(run: StageRun) -> list[str]:
    """A validation's failed checks whose policy let the run go on (warn, quarantine)."""
    if not run.stage.startswith("quality-") or run.result is None:
        return []
    outcomes = run.result.outcomes
    return [
        f"[{policy}] {o.describe()}" for o, policy in outcomes if not o.success and policy != "fail"
    ]


def _quality_line(validation) -> str:
    return validation.headline()


_LINES = {
    "land": _land_line,
    "quality-bronze": _quality_line,
    "decode": _decode_line,
    "quality-silver": _quality_line,
    "watermark": _watermark_line,
    "compact": _compact_line,
    "quality-gold": _quality_line,
}


def _changefeed_lines(result: PipelineResult) -> list[str]:
    marks = result.result("watermark")
    compacted = result.result("compact")
    marks_by_name = {mark.name: mark for mark in marks.changefeeds} if marks else {}
    feeds = {feed.name: feed for feed in compacted.changefeeds} if compacted else {}
    lines = []
    for name in dict.fromkeys([*marks_by_name, *feeds]):
        mark = marks_by_name.get(name)
        text = _watermark_text(result.config, mark) if mark else "watermark stage not run"
        feed = feeds.get(name)
        if feed is not None:
            target = "no TS" if feed.target is None else f"TS {feed.target}"
            text += f"\n      gold: {feed.mode} at {target}"
            text += "".join(f"\n      note: {note}" for note in feed.notes)
        lines.append(f"  {name}: {text}")
    return lines


def _watermark_text(config: PipelineConfig, mark) -> str:
    if not mark.watermarks:
        cutoff = config.changefeeds[mark.name].cutoff_ts
        return "no watermarks in this protocol: " + (
            f"gold cut at cutoff-ts {cutoff} = {tso_time(cutoff)}"
            if cutoff is not None
            else "no cutoff-ts, so gold is not transactionally consistent"
        )
    if mark.unseen:
        unseen = ", ".join(f"{t}[{p}]" for t, p in mark.unseen[:3])
        return f"watermark {mark.watermark}: held back by partitions never seen: {unseen}"
    held = ", ".join(f"{t}[{p}]" for t, p in mark.holding[:3])
    more = f" and {len(mark.holding) - 3} more" if len(mark.holding) > 3 else ""
    return f"watermark {mark.watermark} = {tso_time(mark.watermark)}; held by {held}{more}"


def _gold_lines(result: PipelineResult) -> list[str]:
    compacted = result.result("compact")
    if compacted is None:
        return []
    tables = sorted(compacted.tables.values(), key=lambda t: t.table)
    width = max((len(t.table) for t in tables), default=10)
    lines = [f"  {'table':<{width}}  {'rows':>9}  mode"]
    for table in tables:
        mode = table.mode if table.watermark is None else f"{table.mode} @ {table.watermark}"
        flags = " (dropped)" if table.dropped else ""
        flags += f" (not consistent: {table.reason})" if table.reason else ""
        lines.append(f"  {table.table:<{width}}  {table.rows:>9,}  {mode}{flags}")
    for table, reason in sorted(compacted.failures.items()):
        lines.append(f"  {table:<{width}}  {'FAILED':>9}  {reason}")
    return lines


def render_summary(result: PipelineResult, *, gold_tables: bool = True) -> str:
    """The run as a person reads it: each stage, the changefeeds, the gold tables (unless the
    caller shows them its own way), the lake."""
    config = result.config
    lines = [f"Stages ({result.seconds:.1f} s):"]
    for run in result.runs:
        text = _LINES[run.stage](run.result) if run.result is not None else "FAILED"
        lines.append(f"  {run.stage:<14}{run.seconds:6.1f} s  {text}")
        lines.extend(f"    ! {what}: {why}" for what, why in sorted(run.failures.items()))
        lines.extend(f"    ~ {warning}" for warning in _warnings(run))
    lines.extend(f"  {stage:<14}  skipped (an earlier stage failed)" for stage in result.skipped)
    feeds = _changefeed_lines(result)
    if feeds:
        lines += ["Changefeeds:", *feeds]
    gold = _gold_lines(result) if gold_tables else []
    if gold:
        lines += ["Gold tables:", *gold]
    totals = ", ".join(f"{_n(count)} {name}" for name, count in lake_totals(config).items())
    lines += [
        f"Lake: {config.lake}",
        f"  holds {totals}",
        f"  config:  {config.source}",
        f"  reports: {config.reports}"
        + (
            f" (data quality: {report_file(config)})"
            if report_file(config).exists()
            else " (no HTML report yet: see ticdc-lake dq-report)"
        ),
    ]
    return "\n".join(lines)


def query_hint(config: PipelineConfig, schema: str | None = None, table: str | None = None) -> str:
    """A one-line command that reads a gold table with plain deltalake (``<schema>`` and
    ``<table>`` placeholders when no table is given)."""
    layout = LakeLayout(config.lake)
    path = layout.gold(schema, table) if schema and table else layout.gold_root / "<schema>/<table>"
    return (
        f"python -c \"from deltalake import DeltaTable; print(DeltaTable('{path}').to_pandas())\""
    )


# --- spark-submit entry points ----------------------------------------------------------------


def job_parser(doc: str) -> argparse.ArgumentParser:
    """The parser every spark_jobs entry point starts from: its docstring's first line, and
    ``--config``."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--config", required=True, help="the pipeline config (YAML)")
    parser.add_argument(
        "--result-file",
        type=Path,
        help="also write the result JSON here (for a scheduler task to read; replaced whole)",
    )
    add_lock_wait(parser)
    return parser


def write_result_file(path: Path, run: StageRun) -> None:
    """The stage's result and failures as one JSON file, replaced whole (never half-written),
    with any credential in its text masked (redact.py)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(redact_value(run.to_dict())))
    partial.replace(path)


def job_main(
    name: str,
    args: argparse.Namespace,
    build_session: Callable[[str], SparkSession],
    work: Callable[[SparkSession, PipelineConfig], Any],
) -> int:
    """Load ``args.config``, run ``work`` on a session built when it first uses one (by the
    job's own ``build_session``, so a test can hand in its session), print its result as one
    JSON object on stdout and any failures on stderr. Exit status 0, 1 when something failed
    (another run holding the lake past ``args.lock_wait`` too), 2 on a bad config. What it
    prints goes through terminal.printing, as the CLI's does: control characters escaped,
    credentials masked."""
    with printing():
        return _run_job(name, args, build_session, work)


def _run_job(name, args, build_session, work) -> int:
    try:
        config = load_config(args.config)
        # The lock before the session: a job waiting for the lake holds no Spark resources.
        with lake_lock(config.lake, getattr(args, "lock_wait", None)):
            spark = LazySession(lambda: build_session(f"ticdc-lake-{name}"))
            run = timed_stage(name, lambda: work(spark, config), config.lake)
    except ConfigError as exc:
        print(f"{name}: configuration error: {exc}", file=sys.stderr)
        return 2
    except LakeLockedError as exc:
        run = StageRun(name, None, 0.0, {"lake lock": str(exc)})
    if run.result is not None:
        print(json.dumps(redact_value(run.result.to_dict())))
    if getattr(args, "result_file", None) is not None:
        write_result_file(args.result_file, run)
    for what, why in sorted(run.failures.items()):
        print(f"{name}: {what}: {why}", file=sys.stderr)
    return 1 if run.failures else 0
