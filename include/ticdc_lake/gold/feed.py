"""What one changefeed's compaction run is to do: its mode, target TS and starting point."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ticdc_lake.config import ChangefeedConfig, PipelineConfig
from ticdc_lake.gold.catalog import TableName
from ticdc_lake.gold.reasons import changefeed_mode, inconsistent_reason
from ticdc_lake.gold.state import CUTOFF, INCONSISTENT, WATERMARK, TableState

if TYPE_CHECKING:
    from ticdc_lake.silver.watermark import ChangefeedWatermark


@dataclass(frozen=True)
class FeedPlan:
    name: str
    topics: tuple[str, ...]
    mode: str
    target: int | None  # the TS compacted to (None: inconsistent)
    prior: dict[TableName, TableState]  # the changefeed's state rows before the run
    zones: dict[str, str]  # topic -> the time zone its TIMESTAMP text is read in
    lacks_ts: bool  # some changes come without a commit TS
    mode_reason: str | None  # why an inconsistent changefeed has no consistent cut
    rebuild: bool  # gold is emptied and the change log applied from the start
    generation: int
    low_ts: int  # changes at or below this TS are applied in every table
    low_batch: int  # bronze batches up to this one are settled in every table
    notes: tuple[str, ...] = field(default=())

    @property
    def consistent(self) -> bool:
        return self.mode != INCONSISTENT

    @property
    def target_ts(self) -> int | None:
        """The TS a consistent run stops at; None for an inconsistent one."""
        return self.target if self.consistent else None


def plan_feed(
    config: PipelineConfig,
    feed: ChangefeedConfig,
    mark: ChangefeedWatermark,
    prior: list[TableState],
    *,
    until_ts: int | None,
    rebuild: bool,
) -> FeedPlan:
    mode, target, notes = target_of(config, feed, mark, until_ts)
    generation = max((p.generation for p in prior), default=0)
    modes = {mode for mode in map(changefeed_mode, prior) if mode is not None}
    rebuilt = bool(prior) and (rebuild or bool(modes - {mode}))
    if rebuilt:
        if not rebuild:
            notes.append(f"mode changed from {sorted(modes)} to {mode}: rebuilt")
        generation += 1
    applied = [] if rebuilt else prior
    return FeedPlan(
        name=feed.name,
        topics=tuple(feed.topics),
        mode=mode,
        target=target,
        prior={TableName(p.schema, p.table): p for p in prior},
        zones={topic: config.topic(topic).time_zone for topic in feed.topics},
        lacks_ts=any(_lacks_commit_ts(config, t) for t in feed.topics),
        mode_reason=inconsistent_reason(config, feed) if mode == INCONSISTENT else None,
        rebuild=rebuilt,
        generation=generation,
        low_ts=min((p.applied_ts for p in applied), default=-1),
        low_batch=min((p.applied_batch for p in applied), default=-1),
        notes=tuple(notes),
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
