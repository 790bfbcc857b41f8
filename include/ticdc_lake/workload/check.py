"""Read generated export files back, decode them, and check them against the generator.

Two checks, both up to what the protocol loses (losses.py):

* per partition, the decoded events, in offset order, equal the projections of the events that
  were dispatched to that partition (replays included), one for one;
* every row event of the logical workload arrived, and nothing else did (replays aside).

`run_demo` does this for every protocol; `ticdc-lake demo` prints its reports.
"""

from __future__ import annotations

import dataclasses
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ticdc_lake.errors import TicdcLakeError
from ticdc_lake.events import Event, RowEvent
from ticdc_lake.exports import decode_exports
from ticdc_lake.protocols import PROTOCOLS, CodecSettings, make_decoder
from ticdc_lake.schema_registry import DirectorySchemaSource
from ticdc_lake.workload.dispatch import Routing
from ticdc_lake.workload.generator import Workload, gc_paused, generate_workload
from ticdc_lake.workload.losses import canonical, kept
from ticdc_lake.workload.output import (
    GeneratedOutput,
    GenerateOptions,
    codec_settings,
    write_generated,
)

MAX_PROBLEMS = 20


@dataclass
class CheckReport:
    protocol: str
    out_dir: Path
    files: list[Path]
    messages: int = 0
    events: Counter = field(default_factory=Counter)  # "row/insert", "ddl", "resolved", ...
    errors: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def matched(self) -> bool:
        return not self.errors and not self.problems


def decoder_settings(generated: GeneratedOutput) -> CodecSettings:
    """What a reader of the files would configure: the topic settings and the schema directory."""
    source = DirectorySchemaSource(generated.schema_dir) if generated.schema_dir else None
    return codec_settings(_options(generated), source)


def _options(generated: GeneratedOutput) -> GenerateOptions:
    return GenerateOptions(
        **{
            name: value
            for name, value in generated.manifest["options"].items()
            if name in GenerateOptions.__dataclass_fields__
        }
    )


def read_back(generated: GeneratedOutput) -> CheckReport:
    """Decode the export files of `generated` from disk and check them."""
    with gc_paused():
        return _read_back(generated)


def _read_back(generated: GeneratedOutput) -> CheckReport:
    options = _options(generated)
    report = CheckReport(options.protocol, generated.out_dir, list(generated.export_files))
    settings = decoder_settings(generated)
    decoded: dict[tuple[str, int], list[tuple[int, Event]]] = {}
    for _, record, events in decode_exports(
        generated.export_files,
        make_decoder(options.protocol, settings),
        on_error=lambda error: report.errors.append(str(error)),
    ):
        report.messages += 1
        stream = decoded.setdefault((record.topic, record.partition), [])
        stream.extend((record.offset, event) for event in events)
    for stream in decoded.values():
        stream.sort(key=lambda item: item[0])  # files hold partitions interleaved
        for _, event in stream:
            report.events[_kind(event)] += 1
    events = {key: [event for _, event in stream] for key, stream in decoded.items()}
    routing = generated.routing
    report.problems += compare_streams(routing, events, settings)
    report.problems += compare_with_workload(generated.workload, routing, events, settings)
    del report.problems[MAX_PROBLEMS:]
    return report


def _kind(event: Event) -> str:
    return f"row/{event.op}" if isinstance(event, RowEvent) else event.kind


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


def run_demo(
    out_dir: str | os.PathLike,
    *,
    protocols: tuple[str, ...] = PROTOCOLS,
    seed: int = 0,
    transactions: int = 200,
    partitions: int = 4,
) -> list[CheckReport]:
    """One workload, written in every protocol under `out_dir/<protocol>`, read back, checked."""
    workload = generate_workload(seed, transactions)
    reports = []
    for protocol in protocols:
        options = GenerateOptions(
            protocol, partitions=partitions, seed=seed, transactions=transactions
        )
        try:
            generated = write_generated(Path(out_dir) / protocol, options, workload)
            reports.append(read_back(generated))
        except TicdcLakeError as exc:
            report = CheckReport(protocol, Path(out_dir) / protocol, [])
            report.errors.append(str(exc))
            reports.append(report)
    return reports
