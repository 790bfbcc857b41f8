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
`Dispatcher` takes events one at a time and hands each closed segment on; replays are drawn
from the live segments' sizes alone (`plan_replays`) and put in as a partition's segments go by
(`with_replays`), so `route` and the streaming writer (streaming.py) share one algorithm and
neither needs more than three segments of a partition at once to make a replay.
"""

from __future__ import annotations

import dataclasses
import random
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from ticdc_lake.runtime.gc_pause import gc_paused
from ticdc_lake.sample.workload.generator import Workload
from ticdc_lake.silver.events import DdlEvent, Event, ResolvedEvent, RowEvent

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
    routing = empty_routing(protocol, partitions, dispatcher, idle_partitions)

    def keep(key: tuple[str, int], segment: Segment) -> None:
        routing.streams[key].append(segment)

    with gc_paused():
        dispatching = Dispatcher(routing, workload.tables, avro_watermarks, keep)
        for event in workload.events:
            dispatching.send(event)
        dispatching.finish()
        plan = plan_replays(
            dispatching.live_rows, replays, random.Random(workload.seed if seed is None else seed)
        )
        for key, segments in routing.streams.items():
            routing.streams[key] = list(with_replays(key, iter(segments), plan))
        routing.replays.extend(plan.described)
    return routing


def empty_routing(protocol: str, partitions: int, dispatcher: str, idle: int) -> Routing:
    if dispatcher not in DISPATCHERS:
        raise ValueError(f"dispatcher must be one of {', '.join(DISPATCHERS)}, not {dispatcher!r}")
    if partitions < 1 or not 0 <= idle < partitions:
        raise ValueError("need partitions >= 1 and 0 <= idle_partitions < partitions")
    return Routing(
        protocol=protocol,
        partitions=partitions,
        dispatcher=dispatcher,
        idle_partitions=tuple(range(partitions - idle, partitions)),
        streams={},
    )


class Dispatcher:
    """Sends events one by one to their partitions' open segments; a resolved event closes every
    partition's segment and hands it to `closed` (to keep, or to write out)."""

    def __init__(
        self,
        routing: Routing,
        tables,
        avro_watermarks: bool,
        closed: Callable[[tuple[str, int], Segment], None],
    ):
        self.protocol = protocol = routing.protocol
        self.dispatcher = routing.dispatcher
        self.all_partitions = range(routing.partitions)
        self.row_partitions = routing.partitions - len(routing.idle_partitions)
        self.carries_control = protocol != "avro" or avro_watermarks
        self.closed = closed
        topics = _topics(tables, protocol)
        self.open = {(t, p): [] for t in topics for p in self.all_partitions}
        routing.streams.update((key, []) for key in self.open)
        # Per partition, the row events of each live segment: what replays are planned from.
        self.live_rows: dict[tuple[str, int], list[int]] = {key: [] for key in self.open}

    def _put(self, event: Event, topic: str, partition: int) -> None:
        self.open[(topic, partition)].append(
            dataclasses.replace(event, topic=topic, partition=partition)
        )

    def send(self, event: Event) -> None:
        protocol = self.protocol
        if isinstance(event, RowEvent):
            topic = topic_name(protocol, event.schema, event.table)
            self._put(event, topic, row_partition(event, self.dispatcher, self.row_partitions))
        elif isinstance(event, DdlEvent):
            if not self.carries_control:
                return
            topic = topic_name(protocol, event.schema, event.table)
            for partition in [0] if protocol == "canal-json" else self.all_partitions:
                self._put(event, topic, partition)
        elif isinstance(event, ResolvedEvent):
            # A resolved TS closes every partition's segment, even where it is not sent (Avro).
            for key in self.open:
                if self.carries_control:
                    self._put(event, *key)
                self._close(key)

    def finish(self) -> None:
        for key in self.open:
            self._close(key)

    def _close(self, key: tuple[str, int]) -> None:
        events = self.open[key]
        if events:
            self.live_rows[key].append(sum(isinstance(e, RowEvent) for e in events))
            self.closed(key, Segment(events))
            self.open[key] = []


def _topics(tables, protocol: str) -> list[str]:
    if protocol == "avro":
        return [topic_name(protocol, t.schema, t.name) for t in tables]
    return [topic_name(protocol)]


@dataclass(frozen=True)
class _Replay:
    """A replayed stretch: after live segment `after` of its partition, `length` events of the
    live segments `window` (DDLs left out) from their `first_row`th row event on."""

    number: int
    after: int
    window: tuple[int, ...]
    first_row: int
    length: int


@dataclass
class ReplayPlan:
    """Where replays go (drawn from segment sizes alone, so streams need not be held), and,
    once `with_replays` has made them, what each was (for the manifest), in drawn order."""

    order: dict[tuple[str, int], list[tuple[int, _Replay | None]]]  # live ordinal or replay
    described: list[dict] = field(default_factory=list)


def plan_replays(live_rows: dict[tuple[str, int], list[int]], count: int, rng) -> ReplayPlan:
    """`count` replays, each after a live segment of a partition with rows, replaying a stretch
    of that segment and the two before it (as far as they are live segments)."""
    candidates = [key for key, rows in sorted(live_rows.items()) if sum(rows)]
    order: dict[tuple[str, int], list[tuple[int, _Replay | None]]] = {}
    drawn = 0
    for _ in range(count if candidates else 0):
        key = rng.choice(candidates)
        entries = order.setdefault(key, [(i, None) for i in range(len(live_rows[key]))])
        live = [i for i, (_, replay) in enumerate(entries) if replay is None]
        after = rng.choice(live)  # replayed once this segment (and its watermark) has been sent
        window = tuple(
            ordinal for ordinal, replay in entries[max(0, after - 2) : after + 1] if replay is None
        )
        rows = sum(live_rows[key][ordinal] for ordinal in window)
        if not rows:
            continue
        first_row = rng.randrange(rows)
        replay = _Replay(
            drawn, entries[after][0], window, first_row, rng.randint(1, MAX_REPLAY_EVENTS)
        )
        entries.insert(after + 1, (-1, replay))
        drawn += 1
    return ReplayPlan(order)


def with_replays(
    key: tuple[str, int], live: Iterator[Segment], plan: ReplayPlan
) -> Iterator[Segment]:
    """A partition's live segments, in order, with its planned replays among them."""
    entries = plan.order.get(key)
    if entries is None:
        yield from live
        return
    recent: dict[int, Segment] = {}
    watermark = None
    for ordinal, replay in entries:
        if replay is None:
            segment = recent[ordinal] = next(live)
            recent.pop(ordinal - 3, None)
            watermark = _last_resolved([segment], watermark)
            yield segment
            continue
        earlier = [
            event
            for ordinal in replay.window
            for event in recent[ordinal].events
            if not isinstance(event, DdlEvent)
        ]
        rows = [i for i, event in enumerate(earlier) if isinstance(event, RowEvent)]
        start = rows[replay.first_row]
        stretch = earlier[start : start + replay.length]
        yield Segment(stretch, replay=True)
        described = {
            "topic": key[0],
            "partition": key[1],
            "events": len(stretch),
            "row_events": sum(isinstance(e, RowEvent) for e in stretch),
            "min_commit_ts": min(e.commit_ts for e in stretch),
            "watermark_already_sent": watermark,
        }
        plan.described.extend([None] * (replay.number + 1 - len(plan.described)))
        plan.described[replay.number] = described
    yield from live  # none left: every live segment has an entry


def _last_resolved(segments: list[Segment], found: int | None = None) -> int | None:
    for segment in segments:
        for event in segment.events:
            if isinstance(event, ResolvedEvent) and (found is None or event.ts > found):
                found = event.ts
    return found
