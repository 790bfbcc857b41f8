"""Write a generated workload with bounded memory: the files of `write_generated`, byte for byte.

`write_generated` holds the whole workload, its dispatch and its Kafka records at once (near
10 GB at 1M row events). `stream_generated` holds at most one resolved interval of events:

1. the generator hands each event to TiCDC's dispatch as it is made (`iter_workload`); each
   partition's closed segments are pickled to a spill file, and each resolved TS's expected
   tables go straight to expected.jsonl;
2. replays are planned from the segments' sizes alone (`plan_replays`, the same draws as
   `route`), then each partition in turn is read back, its replays put in, encoded, and its
   records spilled (one encoder, partitions in the same order as `encode_routing`, so Avro's
   schema ids come out the same);
3. each topic's export is the merge of its partitions' records in produced order (timestamp,
   partition, offset), as `write_generated` sorts them; or, for the benchmarks, one export
   file per partition.

What stays in memory grows only with the tables (the generator's current rows), the DDLs and
the resolved TSs' row counts (for the manifest).
"""

from __future__ import annotations

import gc
import heapq
import io
import pickle
import random
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import orjson
import zstandard

from ticdc_lake.bronze import exports
from ticdc_lake.protocols import make_encoder
from ticdc_lake.records import KafkaRecord
from ticdc_lake.runtime.gc_pause import gc_paused
from ticdc_lake.sample.workload.dispatch import (
    Dispatcher,
    Routing,
    Segment,
    empty_routing,
    plan_replays,
    with_replays,
)
from ticdc_lake.sample.workload.expected import FORMAT, ExpectedLog
from ticdc_lake.sample.workload.generator import Workload, iter_workload, profile_named
from ticdc_lake.sample.workload.output import (
    GenerateOptions,
    SentMessages,
    codec_settings,
    encode_partition,
    manifest_of,
    write_manifest_and_config,
    write_schemas,
)
from ticdc_lake.silver.events import DdlEvent, Event, RowEvent
from ticdc_lake.silver.schema_registry import InMemorySchemaRegistry

_RECORDS_PER_CHUNK = 4096


@dataclass
class StreamedOutput:
    out_dir: Path
    workload: Workload  # counts, tables and resolved row counts; no events
    export_files: list[Path]
    manifest: dict[str, Any]
    config_path: Path
    schema_dir: Path | None


class ExpectedFile(ExpectedLog):
    """An expected log that writes each resolved TS's line as it comes (the format of
    `ExpectedLog.write_jsonl`) and keeps only the row counts."""

    def __init__(self, handle_keys: dict[str, tuple[str, ...]], sink: BinaryIO):
        super().__init__(handle_keys)
        self.sink = sink
        header = {"format": FORMAT, "handle_keys": self.handle_keys}
        sink.write(orjson.dumps(header, option=orjson.OPT_APPEND_NEWLINE))

    def add_point(self, resolved_ts: int, tables: dict, row_counts: dict | None = None) -> None:
        point = {"resolved_ts": resolved_ts, "row_counts": row_counts, "tables": tables}
        self.sink.write(orjson.dumps(point, option=orjson.OPT_APPEND_NEWLINE))
        super().add_point(resolved_ts, {}, row_counts)


class _Spill:
    """Per partition, a file of pickled items appended in order and read back in order.

    zstd-compressed: pickled events repeat their column names and types, and uncompressed they
    took about 8x the exports they become (18 GB of spill for a ddl-heavy run at 4M row events).
    """

    def __init__(self, directory: Path, suffix: str):
        self.directory = directory
        self.suffix = suffix
        self.sinks: dict[tuple[str, int], BinaryIO] = {}

    def path(self, key: tuple[str, int]) -> Path:
        return self.directory / f"{key[0]}-{key[1]}.{self.suffix}.zst"

    def append(self, key: tuple[str, int], item: Any) -> None:
        sink = self.sinks.get(key)
        if sink is None:
            file = open(self.path(key), "wb")  # noqa: SIM115 - closed with its sink, below
            # A compressor per file: one compressor's streams must not interleave.
            compressor = zstandard.ZstdCompressor(level=_SPILL_LEVEL)
            sink = self.sinks[key] = compressor.stream_writer(file)
        pickle.dump(item, sink, protocol=pickle.HIGHEST_PROTOCOL)

    def close(self) -> None:
        for sink in self.sinks.values():
            sink.close()  # ends the zstd frame, then closes the file
        self.sinks.clear()

    def read(self, key: tuple[str, int]) -> Iterator[Any]:
        if not self.path(key).exists():
            return
        with open(self.path(key), "rb") as file:
            source = io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(file))
            while True:
                try:
                    yield pickle.load(source)
                except EOFError:
                    return


# The spill is written once and read once, so speed matters more than size.
_SPILL_LEVEL = 1


def stream_generated(
    out_dir: str | Path, options: GenerateOptions, *, export_per_partition: bool = False
) -> StreamedOutput:
    """Generate, dispatch, encode and write `options`' workload to `out_dir` with bounded
    memory. `export_per_partition`: one export file per Kafka partition
    (`exports/part-<partition>-<topic><suffix>`, as a Spark batch read of Kafka writes them)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob(".spill-*"):  # left by a run that was killed
        shutil.rmtree(stale, ignore_errors=True)
    spill_dir = Path(tempfile.mkdtemp(prefix=".spill-", dir=out))
    try:
        with gc_paused():
            return _stream(out, options, spill_dir, export_per_partition)
    finally:
        shutil.rmtree(spill_dir, ignore_errors=True)


def _stream(
    out: Path, options: GenerateOptions, spill_dir: Path, per_partition: bool
) -> StreamedOutput:
    routing = empty_routing(
        options.protocol, options.partitions, options.dispatcher, options.idle_partitions
    )
    segments = _Spill(spill_dir, "segments")
    dispatcher = Dispatcher(
        routing,
        profile_named(options.profile, options.tenants).tables(),
        options.avro_watermarks,
        segments.append,
    )
    generated = _generate(out / "expected.jsonl", options, dispatcher)
    dispatcher.finish()
    segments.close()
    gc.collect()  # once: whatever cycles generation left go before encoding starts

    registry = InMemorySchemaRegistry() if options.protocol == "avro" else None
    records = _Spill(spill_dir, "records")
    sent = _encode(routing, dispatcher.live_rows, segments, records, options, registry)
    export_files = _write_exports(out / "exports", routing.streams, records, options, per_partition)
    schema_dir = write_schemas(out, registry)
    manifest = manifest_of(
        generated.workload,
        generated.ddl_events,
        generated.last_row_ts,
        routing,
        sent,
        options,
        out,
        export_files,
        schema_dir,
    )
    config_path = write_manifest_and_config(out, manifest, options, routing, schema_dir)
    return StreamedOutput(out, generated.workload, export_files, manifest, config_path, schema_dir)


@dataclass
class _Generated:
    """What the manifest needs of generation: the workload (without its events), its DDLs and
    the newest row change's commit TS."""

    workload: Workload
    ddl_events: list[DdlEvent]
    last_row_ts: int | None


def _generate(expected_path: Path, options: GenerateOptions, dispatcher: Dispatcher) -> _Generated:
    """Generate the workload into `dispatcher`, each resolved TS's expected tables into
    `expected_path`."""
    ddl_events: list[DdlEvent] = []
    last_row_ts = None

    def emit(event: Event) -> None:
        nonlocal last_row_ts
        if isinstance(event, RowEvent):
            last_row_ts = (
                event.commit_ts if last_row_ts is None else max(last_row_ts, event.commit_ts)
            )
        elif isinstance(event, DdlEvent):
            ddl_events.append(event)
        dispatcher.send(event)

    with open(expected_path, "wb") as expected_sink:
        workload = iter_workload(
            emit,
            lambda handle_keys: ExpectedFile(handle_keys, expected_sink),
            options.seed,
            options.transactions,
            profile=options.profile,
            tenants=options.tenants,
        )
    return _Generated(workload, ddl_events, last_row_ts)


def _encode(
    routing: Routing,
    live_rows: dict[tuple[str, int], list[int]],
    segments: _Spill,
    records: _Spill,
    options: GenerateOptions,
    registry: InMemorySchemaRegistry | None,
) -> SentMessages:
    """Plan the replays from the segments' sizes (`live_rows`), then encode each partition's
    segments with its replays into `records`: one encoder, partitions in the order of
    `encode_routing`, so Avro's schema ids come out the same."""
    plan = plan_replays(live_rows, options.replays, random.Random(options.seed))
    encoder = make_encoder(options.protocol, codec_settings(options, registry))
    sent: SentMessages = {}
    for key in sorted(routing.streams):
        live: Iterator[Segment] = segments.read(key)
        sent[key] = _encode_partition(encoder, key, with_replays(key, live, plan), records)
    records.close()
    routing.replays.extend(plan.described)
    return sent


def _encode_partition(
    encoder, key: tuple[str, int], segments: Iterable[Segment], records: _Spill
) -> tuple[int, list[tuple[int, int]]]:
    """One partition's records spilled in chunks; how many, and the offset ranges replayed."""
    replayed: list[tuple[int, int]] = []
    count = 0
    chunk: list[KafkaRecord] = []
    for record in encode_partition(encoder, key, segments, replayed):
        chunk.append(record)
        count += 1
        if len(chunk) == _RECORDS_PER_CHUNK:
            records.append(key, chunk)
            chunk = []
    if chunk:
        records.append(key, chunk)
    return count, replayed


def _produced_order(record: KafkaRecord) -> tuple:
    return (record.timestamp_ms, record.partition, record.offset)


def _write_exports(
    directory: Path, keys, records: _Spill, options: GenerateOptions, per_partition: bool
) -> list[Path]:
    def partition_records(key) -> Iterator[KafkaRecord]:
        for chunk in records.read(key):
            yield from chunk

    paths = []
    if per_partition:
        for key in sorted(keys):
            topic, partition = key
            name = exports.export_file_name(topic, options.layout, options.file_compression)
            path = directory / f"part-{partition:05d}-{name}"
            exports.write_export(
                path,
                partition_records(key),
                options.layout,
                file_compression=options.file_compression,
            )
            paths.append(path)
        return paths
    for topic in sorted({topic for topic, _ in keys}):
        # Each partition's records are in produced order already (offsets and timestamps both
        # grow): merging them gives the order `write_generated` sorts into.
        merged = heapq.merge(
            *(partition_records(key) for key in sorted(keys) if key[0] == topic),
            key=_produced_order,
        )
        name = exports.export_file_name(topic, options.layout, options.file_compression)
        exports.write_export(
            directory / name, merged, options.layout, file_compression=options.file_compression
        )
        paths.append(directory / name)
    return paths
