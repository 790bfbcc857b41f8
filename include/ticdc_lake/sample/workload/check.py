"""Check decoded events against the generator, up to what the protocol loses (losses.py):

* ``compare_streams``: per partition, the decoded events, in offset order, equal the
  projections of the events that were dispatched to that partition (replays included), one
  for one;
* ``compare_with_workload``: every row event of the logical workload arrived, and nothing else
  did (replays aside).

Both return a list of problems (empty: it matches). tests/protocols/test_cross_protocol.py runs
them for every protocol; gold is checked by expected_gold.py.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from ticdc_lake.protocols import CodecSettings
from ticdc_lake.sample.workload.dispatch import Routing
from ticdc_lake.sample.workload.generator import Workload
from ticdc_lake.sample.workload.losses import canonical, kept
from ticdc_lake.silver.events import Event, RowEvent


def _plain(event: Event) -> bytes:
    return canonical(dataclasses.replace(event, offset=0, index=0))


def compare_streams(
    routing: Routing, decoded: dict[tuple[str, int], list[Event]], settings: CodecSettings
) -> list[str]:
    """Per partition: decoded events == projections of the dispatched ones, in order."""
    problems = []
    for key in sorted(set(routing.streams) | set(decoded)):
        dispatched = routing.events(*key) if key in routing.streams else []
        expected = kept(routing.protocol, dispatched, settings)
        actual = decoded.get(key, [])
        for position, (want, got) in enumerate(zip(expected, actual, strict=False)):
            if _plain(want) != _plain(got):
                problems.append(
                    f"{key[0]}[{key[1]}] event {position} (offset {got.offset}): expected "
                    f"{_plain(want)[:300]!r}, decoded {_plain(got)[:300]!r}"
                )
                break
        if len(expected) != len(actual):
            problems.append(
                f"{key[0]}[{key[1]}]: expected {len(expected)} events, decoded {len(actual)}"
            )
    return problems


def compare_with_workload(
    workload: Workload,
    routing: Routing,
    decoded: dict[tuple[str, int], list[Event]],
    settings: CodecSettings,
) -> list[str]:
    """Every logical row event arrived (wherever it was dispatched), and nothing else did."""

    def rows(events) -> Counter:
        return Counter(
            canonical(dataclasses.replace(e, topic="", partition=0, offset=0, index=0))
            for e in events
            if isinstance(e, RowEvent)
        )

    want = rows(kept(routing.protocol, workload.events, settings))
    replayed = Counter()
    for segments in routing.streams.values():
        resent = [event for segment in segments if segment.replay for event in segment.events]
        replayed += rows(kept(routing.protocol, resent, settings))
    got = Counter()
    for events in decoded.values():
        got += rows(events)
    problems = []
    missing = want + replayed - got
    unexpected = got - want - replayed
    if missing:
        problems.append(f"{sum(missing.values())} generated row events were not decoded")
    if unexpected:
        problems.append(f"{sum(unexpected.values())} decoded row events were never generated")
    return problems
