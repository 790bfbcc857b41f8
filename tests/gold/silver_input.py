"""Silver inputs for the Watermark and Compact tests, written as the Decode stage would write them.

A generated workload is dispatched as TiCDC would (workload.dispatch.route), projected through
what the protocol keeps (workload.losses), given Kafka offsets per partition, and written to
layout.changes / layout.ddl / layout.resolved with write_delta, partitioned by bronze batch.
``land`` writes a chosen part of every partition's stream as one bronze batch, so tests can make
partitions arrive unevenly and in several batches. The expected gold contents, typed, come from
the generator's expected log (``expected_tables``, through ``workload.expected_gold``, an
implementation independent of gold's).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import yaml
from ticdc_lake.config import PipelineConfig, load_config
from ticdc_lake.delta import write_delta
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.protocols import CodecSettings
from ticdc_lake.sample.workload import Workload
from ticdc_lake.sample.workload.dispatch import Routing, route
from ticdc_lake.sample.workload.expected_gold import ExpectedGold, typed_value
from ticdc_lake.sample.workload.losses import kept
from ticdc_lake.silver.events import DdlEvent, Event, ResolvedEvent, RowEvent
from ticdc_lake.silver.rows import (
    CHANGES_SCHEMA,
    DDL_SCHEMA,
    RESOLVED_SCHEMA,
    change_row,
    ddl_row,
    resolved_row,
)


@dataclass
class Streams:
    """Every partition's decoded events in offset order, and how much of each has landed."""

    routing: Routing
    events: dict[tuple[str, int], list[Event]]
    landed: dict[tuple[str, int], int] = field(default_factory=dict)
    next_batch: int = 0

    @property
    def topics(self) -> list[str]:
        return sorted({topic for topic, _ in self.events})

    def resolved_ts(self, key: tuple[str, int], upto: int) -> int:
        found = [e.ts for e in self.events[key][:upto] if isinstance(e, ResolvedEvent)]
        return max(found, default=0)


def dispatch(
    workload: Workload,
    protocol: str = "open-protocol",
    *,
    partitions: int = 4,
    idle_partitions: int = 1,
    replays: int = 3,
    settings: CodecSettings | None = None,
) -> Streams:
    """The workload as the decoder would give it back, per partition, with offsets."""
    settings = settings or CodecSettings()
    routing = route(
        workload,
        protocol,
        partitions=partitions,
        idle_partitions=idle_partitions,
        replays=replays,
        avro_watermarks=bool(settings.option("enable_watermark", False)),
    )
    events = {}
    for key in sorted(routing.streams):
        decoded = kept(protocol, routing.events(*key), settings)
        events[key] = [dataclasses.replace(e, offset=i) for i, e in enumerate(decoded)]
    return Streams(routing, events)


def land(spark, layout: LakeLayout, streams: Streams, upto: dict | float = 1.0) -> int:
    """Write the next part of every partition (up to ``upto``: a fraction of each stream, or
    per (topic, partition) a fraction) as one bronze batch; return the batch id."""
    batch = streams.next_batch
    streams.next_batch += 1
    changes, ddls, resolved = [], [], []
    for key, events in streams.events.items():
        fraction = upto if isinstance(upto, float) else upto.get(key, 1.0)
        end = round(len(events) * fraction)
        start = streams.landed.get(key, 0)
        for event in events[start:end]:
            if isinstance(event, RowEvent):
                changes.append(change_row(event, batch))
            elif isinstance(event, DdlEvent):
                ddls.append(ddl_row(event, batch))
            else:
                resolved.append(resolved_row(event, batch))
        streams.landed[key] = max(start, end)
    # Decode's order: changes and DDL before the resolved events that vouch for them.
    for path, rows, schema in (
        (layout.changes, changes, CHANGES_SCHEMA),
        (layout.ddl, ddls, DDL_SCHEMA),
        (layout.resolved, resolved, RESOLVED_SCHEMA),
    ):
        frame = spark.createDataFrame(pa.Table.from_pylist(rows, schema=schema))
        write_delta(frame, path, partition_by=["bronze_batch"], app_id="test-land", version=batch)
    return batch


def write_config(
    directory: Path,
    streams: Streams,
    protocol: str,
    *,
    partitions: int = 4,
    watermarks: bool = True,
    cutoff_ts: int | None = None,
    time_zone: str = "UTC",
    extension: bool = True,
    changefeeds: dict[str, list[str]] | None = None,
) -> PipelineConfig:
    """One changefeed ``feed`` of every topic, or ``changefeeds`` (name -> topics)."""
    topics = {
        topic: {
            "protocol": protocol,
            "partitions": partitions,
            "enable-tidb-extension": extension,
            "time-zone": time_zone,
            **({"schema-dir": "schemas"} if protocol == "avro" else {}),
        }
        for topic in streams.topics
    }
    feed: dict[str, Any] = {"watermarks": watermarks}
    if cutoff_ts is not None:
        feed["cutoff-ts"] = cutoff_ts
    feeds = changefeeds or {"feed": streams.topics}
    document = {
        "version": 1,
        "lake": "lake",
        "inputs": ["exports/*"],
        "topics": topics,
        "changefeeds": {name: {"topics": carried, **feed} for name, carried in feeds.items()},
    }
    path = directory / "pipeline.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return load_config(path)


# --- expected gold, typed independently of the gold package (workload.expected_gold) --------


def column_types(workload: Workload) -> dict[str, dict[str, str]]:
    """Per table, every column's MySQL type, including columns added by DDL."""
    return ExpectedGold.from_workload(workload).types


def expected_tables(
    workload: Workload, ts: int, zone: str = "UTC"
) -> dict[str, tuple[list[str], list[dict[str, Any]]]]:
    """Per table (``schema.table``), its columns and typed rows at ``ts``."""
    return ExpectedGold.from_workload(workload).tables_at(ts, zone)


__all__ = [
    "RESOLVED_SCHEMA",
    "Streams",
    "column_types",
    "dispatch",
    "expected_tables",
    "land",
    "typed_value",
    "write_config",
]
