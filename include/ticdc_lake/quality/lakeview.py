"""What the lake holds, read with delta-rs and pyarrow alone (no JVM): the read API the CLI's
``dq-report``, the HTML report and the Airflow UI page share.

    view = lake_view(config)            # LakeView: changefeeds, gold tables, quarantine, DQ results
    view.changefeeds[0].lag_seconds     # now - physical time of the watermark
    view.latest                          # the last validation of each stage, failures first

Reads only small tables (watermarks, state, quarantine counts) and, of quality/results, each
stage's last validation and the last runs of the charted checks (quality.history): what the
page shows, whatever the table's size.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from ticdc_lake.config import PipelineConfig
from ticdc_lake.delta import delta_table_exists, file_actions, open_table, read_arrow
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.lake.names import qualified_name
from ticdc_lake.quality.history import ResultsHistory
from ticdc_lake.quality.settings import QualitySettings

STAGES = ("bronze", "silver", "gold")
TREND_CHECKS = ("decode_rate", "freshness_lag")  # the checks whose last runs the report charts
TREND_RUNS = 20


def tso_seconds(ts: int) -> float:
    """A TiDB TSO's physical time, in Unix seconds."""
    return (ts >> 18) / 1000


def tso_text(ts: int | None) -> str:
    if not ts:
        return "-"
    moment = dt.datetime.fromtimestamp(tso_seconds(ts), dt.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def duration_text(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = abs(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.0f}s"


@dataclass(frozen=True)
class PartitionView:
    topic: str
    partition: int
    resolved_ts: int  # 0: never seen
    behind_seconds: float  # behind the changefeed's most advanced partition
    stuck: bool


@dataclass(frozen=True)
class ChangefeedView:
    name: str
    watermarks: bool
    watermark: int | None  # the global watermark (None without watermarks)
    cutoff_ts: int | None
    lag_seconds: float | None  # now - physical time of the watermark
    partitions: tuple[PartitionView, ...] = ()

    @property
    def stuck(self) -> tuple[PartitionView, ...]:
        return tuple(p for p in self.partitions if p.stuck)


@dataclass(frozen=True)
class GoldView:
    changefeed: str
    table: str
    mode: str
    watermark: int | None
    rows: int
    dropped: bool
    reason: str | None


@dataclass
class LakeView:
    config: PipelineConfig
    settings: QualitySettings
    now: float  # Unix seconds: the clock freshness is measured against
    changefeeds: list[ChangefeedView] = field(default_factory=list)
    gold: list[GoldView] = field(default_factory=list)
    quarantine: dict[str, int] = field(default_factory=dict)  # silver: topic -> records
    quality_quarantine: dict[str, int] = field(default_factory=dict)  # check -> rows
    validations: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # stage -> last
    recent: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # check -> last runs

    @property
    def latest(self) -> dict[str, list[dict[str, Any]]]:
        """Per stage, the rows of its last validation, failures first (fail before warn)."""
        order = {"fail": 0, "quarantine": 1, "warn": 2}
        return {
            stage: sorted(
                self.validations[stage],
                key=lambda r: (r["success"], order.get(r["policy"], 3), r["check"]),
            )
            for stage in STAGES
            if self.validations.get(stage)
        }

    @property
    def failed_stages(self) -> list[str]:
        """Stages whose last validation failed a `fail` check."""
        return [
            stage
            for stage, rows in self.latest.items()
            if any(not r["success"] and r["policy"] == "fail" for r in rows)
        ]

    def trend(self, check: str, pick) -> list[tuple[str, float]]:
        """(run finished time, value) of ``check`` over its last runs (TREND_RUNS rows, oldest
        first), ``pick(observed)``; a run whose value is None has no point."""
        points = []
        for row in self.recent[check]:
            value = pick(json.loads(row["observed"] or "null") or {})
            if value is not None:
                points.append((row["finished_at"].strftime("%m-%d %H:%M"), float(value)))
        return points

    @property
    def report_path(self) -> Path:
        return report_file(self.config)

    def to_dict(self) -> dict[str, Any]:
        return {
            "lake": str(self.config.lake),
            "report": str(self.report_path),
            "failed_stages": self.failed_stages,
            "changefeeds": [
                {
                    "name": feed.name,
                    "watermark": feed.watermark,
                    "watermark_time": tso_text(feed.watermark),
                    "lag_seconds": feed.lag_seconds,
                    "stuck": [
                        {"topic": p.topic, "partition": p.partition, "resolved_ts": p.resolved_ts}
                        for p in feed.stuck
                    ],
                }
                for feed in self.changefeeds
            ],
            "gold": [vars(table) for table in self.gold],
            "quarantine": self.quarantine,
            "quality_quarantine": self.quality_quarantine,
            "latest": {
                stage: [
                    row
                    | {"started_at": str(row["started_at"])}
                    | {"finished_at": str(row["finished_at"])}
                    for row in rows
                ]
                for stage, rows in self.latest.items()
            },
        }


def report_file(config: PipelineConfig) -> Path:
    return config.reports / "quality.html"


def _table(path: Path, columns: Sequence[str] | None = None) -> pa.Table | None:
    if not delta_table_exists(path):
        return None
    return read_arrow(path, columns=columns)


def _rows_by(path: Path, column: str) -> dict[str, int]:
    """Rows per value of ``column`` (small tables: quarantines)."""
    table = _table(path, [column])
    if table is None:
        return {}
    counts: dict[str, int] = {}
    for value in table.column(column).to_pylist():
        counts[str(value)] = counts.get(str(value), 0) + 1
    return counts


def newest_kafka_time(layout: LakeLayout) -> float | None:
    """The newest Kafka timestamp landed in bronze, from file statistics (no data read)."""
    if not delta_table_exists(layout.bronze):
        return None
    actions = file_actions(open_table(layout.bronze))
    if "max.timestamp" not in actions.column_names:
        return None
    stamps = [s for s in actions.column("max.timestamp").to_pylist() if s is not None]
    if not stamps:
        return None
    newest = max(stamps)
    if newest.tzinfo is None:
        newest = newest.replace(tzinfo=dt.UTC)
    return newest.timestamp()


def clock(config: PipelineConfig, settings: QualitySettings) -> float:
    """Now, for freshness: the wall clock, or with ``clock: kafka`` the newest record landed
    (a replay of old exports measures lag against the data, not against today)."""
    if settings.clock == "kafka":
        newest = newest_kafka_time(LakeLayout(config.lake))
        if newest is not None:
            return newest
    return time.time()


def changefeed_views(
    config: PipelineConfig, settings: QualitySettings, now: float
) -> list[ChangefeedView]:
    layout = LakeLayout(config.lake)
    table = _table(layout.watermarks, ["topic", "partition", "resolved_ts"])
    seen = {}
    for row in table.to_pylist() if table is not None else []:
        seen[(row["topic"], row["partition"])] = row["resolved_ts"] or 0
    views = []
    for feed in config.changefeeds.values():
        if not feed.watermarks:
            views.append(ChangefeedView(feed.name, False, None, feed.cutoff_ts, None))
            continue
        marks = {
            (topic, partition): seen.get((topic, partition), 0)
            for topic in feed.topics
            for partition in range(config.topic(topic).partitions)
        }
        marks |= {key: ts for key, ts in seen.items() if key[0] in feed.topics}
        newest = max(marks.values(), default=0)
        partitions = []
        for (topic, partition), ts in sorted(marks.items()):
            behind = tso_seconds(newest) - tso_seconds(ts) if ts else None
            stuck = ts == 0 or behind > settings.stuck_after_seconds
            partitions.append(PartitionView(topic, partition, ts, behind or 0.0, stuck))
        watermark = min(marks.values(), default=0)
        lag = now - tso_seconds(watermark) if watermark else None
        views.append(ChangefeedView(feed.name, True, watermark, None, lag, tuple(partitions)))
    return views


def gold_views(config: PipelineConfig) -> list[GoldView]:
    table = _table(LakeLayout(config.lake).gold_state)
    if table is None:
        return []
    return sorted(
        (
            GoldView(
                row["changefeed"],
                qualified_name(row["schema"], row["table"]),
                row["mode"],
                row["watermark"],
                row["rows"] or 0,
                bool(row["dropped"]),
                row["reason"],
            )
            for row in table.to_pylist()
        ),
        key=lambda view: (view.changefeed, view.table),
    )


def quality_history(
    layout: LakeLayout,
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[dict[str, Any]]]]:
    """(each stage's last validation, the last runs of each charted check) from quality/results."""
    history = ResultsHistory.open(layout.quality_results)
    if history is None:
        return {}, {check: [] for check in TREND_CHECKS}
    validations = {stage: history.latest(stage) for stage in STAGES}
    recent = {check: history.recent(check, TREND_RUNS) for check in TREND_CHECKS}
    return {stage: rows for stage, rows in validations.items() if rows}, recent


def lake_view(
    config: PipelineConfig, settings: QualitySettings | None = None, now: float | None = None
) -> LakeView:
    settings = settings or config.quality
    layout = LakeLayout(config.lake)
    now = clock(config, settings) if now is None else now
    validations, recent = quality_history(layout)
    return LakeView(
        config=config,
        settings=settings,
        now=now,
        changefeeds=changefeed_views(config, settings, now),
        gold=gold_views(config),
        quarantine=_rows_by(layout.quarantine, "topic"),
        quality_quarantine=_rows_by(layout.quality_quarantine, "check"),
        validations=validations,
        recent=recent,
    )
