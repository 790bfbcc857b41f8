"""TiCDC's dispatch of a workload to Kafka topics and partitions (PROTOCOLS.md §1.5).

* Every change of a row goes to one partition: `index-value` hashes schema, table and the
  handle-key values (CRC-32, as TiCDC's dispatcher hashes them, though not byte for byte), so a
  transaction spans partitions; `table` sends all rows of a table to one partition. A delete is
  placed by its old key, so a key change may move between partitions.
* Resolved events go to every partition of every topic; DDL events to every partition of their
  topic, except Canal-JSON, which sends DDL to partition 0 only.
* Avro has one topic per table (TiCDC requires `{schema}` and `{table}` in its topic rule) and
  no DDL or resolved events, unless its test-only watermark option is on.
* `idle_partitions` partitions (the last ones) receive no rows, only resolved (and DDL) events,
  as a partition no key hashes to would: rows are hashed over the others.
* At-least-once delivery: `replays` times, a stretch of a partition's earlier row (and resolved)
  events is sent again after a later resolved event, as after a TiCDC restart or a table moving
  between captures. Every replayed row has a commit TS at or below a watermark already sent.

A partition's stream is a list of segments; each live segment ends with a resolved event (TiCDC
flushes its batches before sending one), and replayed stretches are segments of their own.
"""

from __future__ import annotations

import dataclasses
import random
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field

from ticdc_lake.events import DdlEvent, Event, ResolvedEvent, RowEvent
from ticdc_lake.workload.generator import Workload, gc_paused

DISPATCHERS = ("index-value", "table")
MAX_REPLAY_EVENTS = 40


@dataclass
class Segment:
    events: list[Event]
    replay: bool = False


@dataclass
class Routing:
    """The event stream of every (topic, partition), ready for an encoder."""

    protocol: str
    partitions: int
    dispatcher: str
    idle_partitions: tuple[int, ...]
    streams: dict[tuple[str, int], list[Segment]]
    replays: list[dict] = field(default_factory=list)  # what was replayed where, for the manifest

    @property
    def topics(self) -> list[str]:
        return sorted({topic for topic, _ in self.streams})

    def events(self, topic: str, partition: int) -> list[Event]:
        return [event for segment in self.streams[(topic, partition)] for event in segment.events]

    def all_events(self) -> Iterator[Event]:
        for key in sorted(self.streams):
            yield from self.events(*key)


def topic_name(protocol: str, schema: str | None = None, table: str | None = None) -> str:
    """`ticdc-<protocol>`, or for Avro `ticdc-avro_<schema>_<table>` (one topic per table)."""
    if protocol == "avro":
        return f"ticdc-avro_{schema}_{table}"
    return f"ticdc-{protocol}"


def _key_bytes(value) -> bytes:
    if isinstance(value, bytes):
        return value
    return str(value).encode("utf-8")


def index_value_hash(event: RowEvent) -> int:
    """CRC-32 over schema, table and the handle-key columns' names and values."""
    image = event.old_columns if event.columns is None else event.columns
    digest = zlib.crc32(f"{event.schema}\x00{event.table}".encode())
    for name in event.handle_key:
        digest = zlib.crc32(name.encode() + b"\x00" + _key_bytes(image[name].value), digest)
    return digest


def row_partition(event: RowEvent, dispatcher: str, row_partitions: int) -> int:
    if dispatcher == "table":
        return zlib.crc32(f"{event.schema}.{event.table}".encode()) % row_partitions
    return index_value_hash(event) % row_partitions


def route(
    workload: Workload,
    protocol: str,
    *,
    partitions: int = 4,
    dispatcher: str = "index-value",
    idle_partitions: int = 1,
    replays: int = 3,
    avro_watermarks: bool = False,
    seed: int | None = None,
) -> Routing:
    """Dispatch `workload` as TiCDC would for `protocol`; the same arguments, the same result."""
    if dispatcher not in DISPATCHERS:
        raise ValueError(f"dispatcher must be one of {', '.join(DISPATCHERS)}, not {dispatcher!r}")
    if partitions < 1 or not 0 <= idle_partitions < partitions:
        raise ValueError("need partitions >= 1 and 0 <= idle_partitions < partitions")
    row_partitions = partitions - idle_partitions
    routing = Routing(
        protocol=protocol,
        partitions=partitions,
        dispatcher=dispatcher,
        idle_partitions=tuple(range(row_partitions, partitions)),
        streams={},
    )
    with gc_paused():
        _dispatch(workload, routing, row_partitions, protocol != "avro" or avro_watermarks)
        _add_replays(routing, replays, random.Random(workload.seed if seed is None else seed))
    return routing


def _dispatch(
    workload: Workload, routing: Routing, row_partitions: int, carries_control: bool
) -> None:
    """Fill `routing.streams`: segments of events per partition, each closed by a resolved TS."""
    protocol = routing.protocol
    topics = _topics(workload, protocol)
    open_segments = {(t, p): [] for t in topics for p in range(routing.partitions)}
    streams = routing.streams
    streams.update((key, []) for key in open_segments)

    def send(event: Event, topic: str, partition: int) -> None:
        open_segments[(topic, partition)].append(
            dataclasses.replace(event, topic=topic, partition=partition)
        )

    for event in workload.events:
        if isinstance(event, RowEvent):
            topic = topic_name(protocol, event.schema, event.table)
            send(event, topic, row_partition(event, routing.dispatcher, row_partitions))
        elif isinstance(event, DdlEvent):
            if not carries_control:
                continue
            topic = topic_name(protocol, event.schema, event.table)
            for partition in [0] if protocol == "canal-json" else range(routing.partitions):
                send(event, topic, partition)
        elif isinstance(event, ResolvedEvent):
            # A resolved TS closes every partition's segment, even where it is not sent (Avro).
            for key in open_segments:
                if carries_control:
                    send(event, *key)
                if open_segments[key]:
                    streams[key].append(Segment(open_segments[key]))
                    open_segments[key] = []
    for key, events in open_segments.items():
        if events:
            streams[key].append(Segment(events))


def _topics(workload: Workload, protocol: str) -> list[str]:
    if protocol == "avro":
        return [topic_name(protocol, t.schema, t.name) for t in workload.tables]
    return [topic_name(protocol)]


def _add_replays(routing: Routing, count: int, rng: random.Random) -> None:
    """Insert `count` replayed stretches, each after a live segment of a partition with rows."""
    candidates = [
        key
        for key, segments in sorted(routing.streams.items())
        if any(isinstance(e, RowEvent) for e in _flat(segments))
    ]
    for _ in range(count if candidates else 0):
        key = rng.choice(candidates)
        segments = routing.streams[key]
        live = [i for i, segment in enumerate(segments) if not segment.replay]
        after = rng.choice(live)  # replayed once this segment (and its watermark) has been sent
        earlier = [
            event
            for segment in segments[max(0, after - 2) : after + 1]
            if not segment.replay
            for event in segment.events
            if not isinstance(event, DdlEvent)
        ]
        rows = [i for i, event in enumerate(earlier) if isinstance(event, RowEvent)]
        if not rows:
            continue
        start = rng.choice(rows)
        stretch = earlier[start : start + rng.randint(1, MAX_REPLAY_EVENTS)]
        segments.insert(after + 1, Segment(stretch, replay=True))
        watermark = _last_resolved(segments[: after + 1])
        routing.replays.append(
            {
                "topic": key[0],
                "partition": key[1],
                "events": len(stretch),
                "row_events": sum(isinstance(e, RowEvent) for e in stretch),
                "min_commit_ts": min(e.commit_ts for e in stretch),
                "watermark_already_sent": watermark,
            }
        )


def _flat(segments: list[Segment]) -> Iterator[Event]:
    for segment in segments:
        yield from segment.events


def _last_resolved(segments: list[Segment]) -> int | None:
    found = None
    for event in _flat(segments):
        if isinstance(event, ResolvedEvent) and (found is None or event.ts > found):
            found = event.ts
    return found
