"""Encode a routed workload with a protocol's encoder and write it out as a Kafka export.

`write_generated(out_dir, options)` writes:

* `exports/<topic><suffix>`: the Kafka records of every partition of the topic, in the order
  they were produced (by timestamp, then partition and offset), in the chosen export layout;
* `schemas/<id>.avsc` and `registry/_schemas.jsonl` (Avro): the registered writer schemas, as
  a directory and as an export of the registry's `_schemas` topic;
* `expected.jsonl`: the expected contents of every table at each resolved TS (expected.py);
* `manifest.json`: the options, tables, DDLs, counts, replays, messages per partition, and the
  row count of every table at every resolved TS;
* `pipeline.yaml`: the pipeline config for the generated topics (`PIPELINE_CONFIG_DOC`).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ticdc_lake.bronze import exports
from ticdc_lake.lake.names import qualified_name, split_name
from ticdc_lake.protocols import PROTOCOLS, CodecSettings, make_encoder
from ticdc_lake.records import KafkaRecord
from ticdc_lake.runtime.gc_pause import gc_paused
from ticdc_lake.sample.workload.dispatch import Routing, Segment, route, topic_name
from ticdc_lake.sample.workload.generator import (
    DDL_HEAVY,
    REALISTIC,
    Workload,
    default_replays,
    generate_workload,
    profile_named,
)
from ticdc_lake.silver.events import DdlEvent, Event, ResolvedEvent, RowEvent
from ticdc_lake.silver.schema_registry import InMemorySchemaRegistry

TIME_ZONE = "UTC"  # the simulated TiCDC server's zone: TIMESTAMP values are local time there
# Per partition (topic, partition): the messages sent, and the offset ranges (inclusive) of
# those that were replays.
SentMessages = dict[tuple[str, int], tuple[int, list[tuple[int, int]]]]

PIPELINE_CONFIG_DOC = """\
# ticdc-lake pipeline config, written by `ticdc-lake generate`. Paths are relative to this file.
#   inputs:        glob patterns of Kafka export files (Parquet, JSON Lines or kcat -J)
#   time-zone:     the TiCDC server's time zone (TIMESTAMP values are local time there)
#   topics:        per topic: protocol (open-protocol | craft | canal-json | avro), partitions,
#                  compression (none | snappy | lz4; TiCDC never marks it in the message),
#                  enable-tidb-extension, schema-dir (Avro: a directory of <id>.avsc schemas),
#                  schemas-topic (Avro: an export of the registry's _schemas topic),
#                  schema (Avro from TiCDC up to v6.0: the schema its records do not name),
#                  claim-check-roots (storage roots claim-check objects may be read from)
#   changefeeds:   name -> topics whose watermarks are combined (the unit that gates gold);
#                  watermarks: false when the protocol sends none (Avro without the test-only
#                  watermark option, Canal-JSON without the extension): then gold needs a
#                  cutoff-ts from the user (else it is not transactionally consistent).
"""


@dataclass(frozen=True)
class GenerateOptions:
    """Everything `ticdc-lake generate` can be asked for."""

    protocol: str
    profile: str = DDL_HEAVY  # the library's default; `generate`, demo and bench use REALISTIC
    partitions: int = 4
    seed: int = 0
    transactions: int = 200
    layout: str = "parquet"  # parquet | jsonl | kcat | avro
    compression: str = "none"  # value compression: none | snappy | lz4
    file_compression: str = "none"  # whole-file compression: none | gz | zstd
    dispatcher: str = "index-value"  # index-value | table
    idle_partitions: int = 1
    replays: int | None = None  # None: the profile's (default_replays)
    tidb_extension: bool = True
    avro_watermarks: bool = False  # Avro's test-only DDL/checkpoint messages
    avro_layout: str = "current"  # Avro: "2022" writes as TiCDC up to v6.0 (no TiDB extension)
    max_batch_size: int = 16
    tenants: int = 1  # realistic: the shop's tables once per tenant schema (shop, shop_2, ...)

    def __post_init__(self):
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {', '.join(PROTOCOLS)}")
        if self.transactions < 0:
            raise ValueError("transactions must not be negative")
        profile_named(self.profile, self.tenants)
        if self.avro_layout not in ("current", "2022"):
            raise ValueError(f"avro_layout must be current or 2022, not {self.avro_layout!r}")
        if self.avro_layout == "2022" and (self.tidb_extension or self.avro_watermarks):
            raise ValueError(
                "the 2022 Avro layout (TiCDC up to v6.0) has no TiDB extension and no "
                "watermarks: generate it without them"
            )
        if self.avro_layout == "2022" and self.profile != REALISTIC:
            raise ValueError(
                f"the {self.profile} profile holds values TiCDC up to v6.0 stopped on in Avro "
                "(a zero DATETIME(6), names that are not Avro names): generate the 2022 "
                "layout from the realistic profile"
            )
        if self.replays is None:
            object.__setattr__(self, "replays", default_replays(self.profile, self.transactions))

    @property
    def carries_watermarks(self) -> bool:
        if self.protocol == "avro":
            return self.avro_watermarks and self.tidb_extension
        if self.protocol == "canal-json":
            return self.tidb_extension
        return True


def codec_settings(options: GenerateOptions, schema_source: Any = None) -> CodecSettings:
    codec_options: tuple = ()
    if options.protocol == "avro":
        codec_options = (("enable_watermark", options.avro_watermarks),)
        if options.avro_layout == "2022":
            codec_options = (("layout", "2022"), ("time_zone", TIME_ZONE))
    return CodecSettings(
        compression=options.compression,
        enable_tidb_extension=options.tidb_extension,
        schema_source=schema_source,
        max_batch_size=options.max_batch_size,
        options=codec_options,
    )


@dataclass
class EncodedStream:
    """One partition's Kafka records, and which offsets hold replayed (re-sent) messages."""

    records: list[KafkaRecord] = field(default_factory=list)
    replayed_offsets: list[tuple[int, int]] = field(default_factory=list)  # inclusive ranges


def encode_routing(
    routing: Routing, settings: CodecSettings
) -> dict[tuple[str, int], EncodedStream]:
    """Encode every partition's segments in order; offsets count from 0 per partition.

    Each segment is encoded on its own (TiCDC flushes its batches before a resolved event, and
    a replay starts afresh), and its messages are stamped with the time of its newest commit TS.
    """
    encoder = make_encoder(routing.protocol, settings)
    encoded: dict[tuple[str, int], EncodedStream] = {}
    with gc_paused():
        for key, segments in sorted(routing.streams.items()):
            stream = encoded[key] = EncodedStream()
            stream.records.extend(encode_partition(encoder, key, segments, stream.replayed_offsets))
    return encoded


def encode_partition(
    encoder, key: tuple[str, int], segments: Iterable[Segment], replayed: list[tuple[int, int]]
) -> Iterator[KafkaRecord]:
    """One partition's records, offsets from 0; the offset ranges of replays go to `replayed`."""
    topic, partition = key
    clock_ms = offset = 0
    for segment in segments:
        newest = max((_ts(event) for event in segment.events), default=0) >> 18
        clock_ms = clock_ms + 1 if segment.replay else max(clock_ms, newest)
        first = offset
        for message in encoder.encode(segment.events):
            yield KafkaRecord(topic, partition, offset, message.key, message.value, clock_ms)
            offset += 1
        if segment.replay and offset > first:
            replayed.append((first, offset - 1))


def _ts(event: Event) -> int:
    return (event.ts if isinstance(event, ResolvedEvent) else event.commit_ts) or 0


@dataclass
class GeneratedOutput:
    out_dir: Path
    workload: Workload
    routing: Routing
    encoded: dict[tuple[str, int], EncodedStream]
    export_files: list[Path]
    manifest: dict[str, Any]
    config_path: Path
    schema_dir: Path | None


def write_generated(
    out_dir: str | os.PathLike, options: GenerateOptions, workload: Workload | None = None
) -> GeneratedOutput:
    """Generate (unless `workload` is given), dispatch, encode and write everything to `out_dir`."""
    with gc_paused():
        return _write_generated(Path(out_dir), options, workload)


def _write_generated(
    out: Path, options: GenerateOptions, workload: Workload | None
) -> GeneratedOutput:
    out.mkdir(parents=True, exist_ok=True)
    if workload is None:
        workload = generate_workload(
            options.seed, options.transactions, profile=options.profile, tenants=options.tenants
        )
    routing = route(
        workload,
        options.protocol,
        partitions=options.partitions,
        dispatcher=options.dispatcher,
        idle_partitions=options.idle_partitions,
        replays=options.replays,
        avro_watermarks=options.avro_watermarks,
    )
    registry = InMemorySchemaRegistry() if options.protocol == "avro" else None
    encoded = encode_routing(routing, codec_settings(options, registry))
    export_files = _write_exports(out / "exports", encoded, options)
    schema_dir = write_schemas(out, registry)
    workload.expected.write_jsonl(out / "expected.jsonl")
    manifest = build_manifest(workload, routing, encoded, options, out, export_files, schema_dir)
    config_path = write_manifest_and_config(out, manifest, options, routing, schema_dir)
    return GeneratedOutput(
        out, workload, routing, encoded, export_files, manifest, config_path, schema_dir
    )


def write_manifest_and_config(
    out: Path, manifest: dict, options: GenerateOptions, routing: Routing, schema_dir: Path | None
) -> Path:
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
    config_path = out / "pipeline.yaml"
    config_path.write_text(
        PIPELINE_CONFIG_DOC
        + yaml.safe_dump(
            pipeline_config(options, routing, schema_dir is not None, list(manifest["tables"])),
            sort_keys=False,
        )
    )
    return config_path


def write_schemas(out: Path, registry: InMemorySchemaRegistry | None) -> Path | None:
    """Avro's registered schemas, as a directory and as the registry's `_schemas` topic; the
    directory (None without a registry)."""
    if registry is None:
        return None
    schema_dir = registry.write_directory(out / "schemas")
    exports.write_export(out / "registry" / "_schemas.jsonl", registry.schemas_records(), "jsonl")
    return schema_dir


def _write_exports(
    directory: Path, encoded: dict[tuple[str, int], EncodedStream], options: GenerateOptions
) -> list[Path]:
    by_topic: dict[str, list[KafkaRecord]] = {}
    for (topic, _), stream in encoded.items():
        by_topic.setdefault(topic, []).extend(stream.records)
    paths = []
    for topic, records in sorted(by_topic.items()):
        # Produced order: what a consumer of the whole topic (kcat) would have seen.
        records.sort(key=lambda r: (r.timestamp_ms, r.partition, r.offset))
        name = exports.export_file_name(topic, options.layout, options.file_compression)
        exports.write_export(
            directory / name, records, options.layout, file_compression=options.file_compression
        )
        paths.append(directory / name)
    return paths


def build_manifest(
    workload: Workload,
    routing: Routing,
    encoded: dict[tuple[str, int], EncodedStream],
    options: GenerateOptions,
    out: Path,
    export_files: list[Path],
    schema_dir: Path | None,
) -> dict[str, Any]:
    sent = {key: (len(stream.records), stream.replayed_offsets) for key, stream in encoded.items()}
    row_ts = (e.commit_ts for e in workload.events if isinstance(e, RowEvent))
    return manifest_of(
        workload,
        workload.ddl_events,
        max(row_ts, default=None),
        routing,
        sent,
        options,
        out,
        export_files,
        schema_dir,
    )


def manifest_of(
    workload: Workload,
    ddl_events: list[DdlEvent],
    last_commit_ts: int | None,
    routing: Routing,
    sent: SentMessages,
    options: GenerateOptions,
    out: Path,
    export_files: list[Path],
    schema_dir: Path | None,
) -> dict[str, Any]:
    """The manifest from what was generated and sent, whether the workload is held or not."""
    return {
        "options": dataclasses.asdict(options) | {"time_zone": TIME_ZONE},
        "files": _files(out, export_files, schema_dir),
        "counts": _counts(workload, routing, sent, export_files),
        "topics": _topics(routing, sent),
        "idle_partitions": list(routing.idle_partitions),
        "replays": _replays(routing, sent),
        "tables": {table.full_name: table.describe() for table in workload.tables},
        "final_tables": {name: table.describe() for name, table in workload.final_tables.items()},
        "ddl": [_ddl_entry(event) for event in ddl_events],
        "resolved": [
            {"ts": point["resolved_ts"], "row_counts": point["row_counts"]}
            for point in workload.expected.points
        ],
        "last_commit_ts": last_commit_ts,
    }


def _files(out: Path, export_files: list[Path], schema_dir: Path | None) -> dict[str, Any]:
    return {
        "exports": [str(path.relative_to(out)) for path in export_files],
        "expected": "expected.jsonl",
        "pipeline_config": "pipeline.yaml",
        "schema_dir": str(schema_dir.relative_to(out)) if schema_dir else None,
        "schemas_topic": "registry/_schemas.jsonl" if schema_dir else None,
    }


def _counts(
    workload: Workload, routing: Routing, sent: SentMessages, export_files: list[Path]
) -> dict[str, int]:
    """The workload's counts, and what was sent and written of it."""
    counts = dict(workload.counts)
    counts["messages"] = sum(count for count, _ in sent.values())
    counts["replayed_row_events"] = sum(replay["row_events"] for replay in routing.replays)
    counts["replayed_messages"] = sum(
        last - first + 1 for _, spans in sent.values() for first, last in spans
    )
    counts["export_bytes"] = sum(path.stat().st_size for path in export_files)
    return counts


def _topics(routing: Routing, sent: SentMessages) -> dict[str, dict[str, Any]]:
    """Per topic: its partitions, and the messages sent to each."""
    return {
        topic: {
            "partitions": routing.partitions,
            "messages_per_partition": {
                str(partition): count
                for (t, partition), (count, _) in sorted(sent.items())
                if t == topic
            },
        }
        for topic in routing.topics
    }


def _replays(routing: Routing, sent: SentMessages) -> list[dict[str, Any]]:
    """Each replay, with the offset ranges its messages were sent at again."""
    return [
        replay
        | {"offsets": [list(span) for span in sent[(replay["topic"], replay["partition"])][1]]}
        for replay in routing.replays
    ]


def _ddl_entry(event: DdlEvent) -> dict[str, Any]:
    return {
        "commit_ts": event.commit_ts,
        "table": qualified_name(event.schema, event.table),
        "ddl_type": event.ddl_type,
        "query": event.query,
    }


def pipeline_config(
    options: GenerateOptions, routing: Routing, has_schemas: bool, tables: Iterable[str] = ()
) -> dict:
    """The generated topics' config; ``tables`` (``schema.table``) name the schema of each
    Avro topic of the 2022 layout, whose records do not."""
    topic_settings: dict[str, Any] = {
        "protocol": options.protocol,
        "partitions": options.partitions,
        "compression": options.compression,
        "enable-tidb-extension": options.tidb_extension,
    }
    if has_schemas:
        topic_settings |= {"schema-dir": "schemas", "schemas-topic": "registry/_schemas.jsonl"}
    topics = {topic: topic_settings | {"claim-check-roots": []} for topic in routing.topics}
    if options.protocol == "avro" and options.avro_layout == "2022":
        schemas = {topic_name("avro", *split_name(name)): split_name(name)[0] for name in tables}
        for topic, settings in topics.items():
            del settings["schema-dir"]  # the _schemas export knows their subjects too
            if topic in schemas:
                settings["schema"] = schemas[topic]
    return {
        "version": 1,
        "time-zone": TIME_ZONE,
        "inputs": ["exports/*"],
        "topics": topics,
        "changefeeds": {
            f"sample-{options.protocol}": {
                "topics": routing.topics,
                "watermarks": options.carries_watermarks,
            }
        },
        # The sample replays a past day: its freshness is measured from its newest record, not
        # from the wall clock (which would call every sample stale).
        "quality": {"clock": "kafka"},
    }
