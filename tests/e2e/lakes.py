"""End-to-end lakes: a generated workload exported as TiCDC would send it, landed from real
export files in two rounds, and carried through land → decode → watermark → compact.

Round one lands a different share of every Kafka partition (one file per partition, landed in
reverse partition order), so partitions arrive out of step and the watermark sits mid-stream,
with transactions whose rows span partitions partly landed. Round two is a full re-export of
every topic in another export format: its offsets overlap round one's, so land must add only
the rest. The expected gold contents, typed, come from the generator's expected log through
``tests.gold.silver_input.expected_tables`` (independent of the gold package); which commit TS
each gold row must carry is worked out here from the generator's events.
"""

from __future__ import annotations

import dataclasses
import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pyarrow.compute as pc
import yaml
from deltalake import DeltaTable
from ticdc_lake import exports
from ticdc_lake import mysql as m
from ticdc_lake.config import PipelineConfig, load_config
from ticdc_lake.events import Column, DdlEvent, Image, ResolvedEvent
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.protocols import make_decoder
from ticdc_lake.records import KafkaRecord
from ticdc_lake.stages.compact import CompactResult, compact
from ticdc_lake.stages.decode import DecodeResult, decode
from ticdc_lake.stages.land import LandResult, land
from ticdc_lake.stages.watermark import WatermarkResult, watermark
from ticdc_lake.workload import Workload
from ticdc_lake.workload.output import GeneratedOutput, GenerateOptions, write_generated

from tests.gold import silver_input as si

PARTITIONS = 4  # the last one is idle: it only receives resolved (and DDL) events
# Share of each partition's records in the first round: partition 1 lags, so it holds the
# watermark while the others have landed transactions beyond it.
FIRST_ROUND = {0: 0.7, 1: 0.35, 2: 0.55, 3: 0.45}
LANDING = "landing"


@dataclass(frozen=True)
class Case:
    """One protocol's settings and the two export formats its rounds arrive in."""

    name: str
    protocol: str
    first_format: tuple[str, str]  # (layout, file compression)
    second_format: tuple[str, str]
    seed: int
    tidb_extension: bool = True
    avro_watermarks: bool = False
    time_zone: str = "UTC"  # the TiCDC zone TIMESTAMP text is read in

    def options(self) -> GenerateOptions:
        return GenerateOptions(
            protocol=self.protocol,
            partitions=PARTITIONS,
            seed=self.seed,
            transactions=120,
            layout=self.first_format[0],
            idle_partitions=1,
            replays=3,
            tidb_extension=self.tidb_extension,
            avro_watermarks=self.avro_watermarks,
        )

    @property
    def watermarks(self) -> bool:
        return self.options().carries_watermarks

    @property
    def commit_ts(self) -> bool:
        """Whether the protocol carries commit TSs (gold's ``_commit_ts`` can be checked)."""
        return self.tidb_extension


CASES = (
    Case("open-protocol", "open-protocol", ("parquet", "none"), ("jsonl", "gz"), seed=21,
         time_zone="Asia/Shanghai"),
    Case("craft", "craft", ("kcat", "zstd"), ("parquet", "none"), seed=22),
    Case("canal-json", "canal-json", ("jsonl", "none"), ("kcat", "none"), seed=23,
         time_zone="Europe/Berlin"),
    Case("avro-watermarks", "avro", ("parquet", "zstd"), ("avro", "none"), seed=24,
         avro_watermarks=True, time_zone="Asia/Shanghai"),
    Case("avro-cutoff", "avro", ("jsonl", "zstd"), ("parquet", "gz"), seed=25),
    Case("canal-json-no-extension", "canal-json", ("kcat", "gz"), ("jsonl", "none"), seed=26,
         tidb_extension=False),
)  # fmt: skip


@dataclass(frozen=True)
class Round:
    files: tuple[Path, ...]
    records: int  # Kafka records in the round's files
    land: LandResult
    decode: DecodeResult
    watermark: WatermarkResult
    compact: CompactResult | None  # None: gold waits for everything up to the cut-off to land


@dataclass
class Lake:
    case: Case
    output: GeneratedOutput
    config: PipelineConfig
    layout: LakeLayout
    cutoff_ts: int | None
    first_records: dict[tuple[str, int], list[KafkaRecord]]
    first: Round
    second: Round

    @property
    def workload(self) -> Workload:
        return self.output.workload

    @property
    def all_records(self) -> dict[tuple[str, int], list[KafkaRecord]]:
        return {key: stream.records for key, stream in self.output.encoded.items()}

    def watermark_of(self, stage_round: Round) -> int | None:
        (feed,) = stage_round.watermark.changefeeds
        return feed.watermark


def write_config(output: GeneratedOutput, case: Case, cutoff_ts: int | None) -> PipelineConfig:
    """The generator's pipeline config, reading the landing area in the case's time zone."""
    document = yaml.safe_load(output.config_path.read_text())
    document |= {"lake": "lake", "inputs": [f"{LANDING}/*"], "time-zone": case.time_zone}
    (feed,) = document["changefeeds"].values()
    if cutoff_ts is not None:
        feed["cutoff-ts"] = cutoff_ts
    output.config_path.write_text(yaml.safe_dump(document, sort_keys=False))
    return load_config(output.config_path)


def write_round(
    directory: Path, name: str, records: list[KafkaRecord], export_format: tuple[str, str]
) -> Path:
    layout, compression = export_format
    path = directory / exports.export_file_name(name, layout, compression)
    exports.write_export(path, records, layout, file_compression=compression)
    return path


def run_stages(spark, config: PipelineConfig, *, compacting: bool) -> tuple:
    return (
        land(spark, config),
        decode(spark, config),
        watermark(spark, config),
        compact(spark, config) if compacting else None,
    )


def build_lake(spark, directory: Path, case: Case) -> Lake:
    output = write_generated(directory, case.options())
    resolved = output.workload.resolved_ts
    cutoff_ts = None if case.watermarks else resolved[2 * len(resolved) // 3]
    config = write_config(output, case, cutoff_ts if case.tidb_extension else None)
    landing = directory / LANDING
    landing.mkdir()

    first_records = {
        key: stream.records[: round(len(stream.records) * FIRST_ROUND[key[1]])]
        for key, stream in output.encoded.items()
    }
    first_files = []
    for (topic, partition), records in sorted(first_records.items()):
        if records:
            path = write_round(landing, f"r1-{topic}-p{partition}", records, case.first_format)
            # Planned oldest first: the last partitions' files arrive first.
            os.utime(path, (1_000 - partition, 1_000 - partition))
            first_files.append(path)
    first = Round(
        tuple(first_files),
        sum(map(len, first_records.values())),
        *run_stages(spark, config, compacting=case.watermarks),
    )

    by_topic: dict[str, list[KafkaRecord]] = defaultdict(list)
    for (topic, _), stream in sorted(output.encoded.items()):
        by_topic[topic].extend(stream.records)
    second_files = [
        write_round(landing, f"r2-{topic}", records, case.second_format)
        for topic, records in sorted(by_topic.items())
    ]
    second = Round(
        tuple(second_files),
        sum(map(len, by_topic.values())),
        *run_stages(spark, config, compacting=True),
    )
    return Lake(
        case, output, config, LakeLayout(config.lake), cutoff_ts, first_records, first, second
    )


# --- what the lake should hold, from the generator's side ----------------------------------------


def resolved_in(config: PipelineConfig, records: dict[tuple[str, int], list[KafkaRecord]]):
    """Per configured (topic, partition), the highest resolved TS in ``records``, decoded in
    process with the topic's protocol; 0 for a partition without any."""
    found = {}
    for topic, settings in config.topics.items():
        decoder = make_decoder(settings.protocol, config.codec_settings(topic))
        for partition in range(settings.partitions):
            found[(topic, partition)] = max(
                (
                    event.ts
                    for record in records.get((topic, partition), [])
                    for event in decoder.decode(record)
                    if isinstance(event, ResolvedEvent)
                ),
                default=0,
            )
    return found


def key_text(image: Image | dict, keys: tuple[str, ...]) -> tuple[str, ...]:
    """A handle key comparable between event images and gold rows (Decimal and int alike)."""
    values = (image[k] for k in keys)
    return tuple(str(v.value if isinstance(v, Column) else v) for v in values)


def last_writers(workload: Workload, ts: int) -> dict[str, dict[tuple[str, ...], int]]:
    """Per table, per handle key of a row that exists at ``ts``, the commit TS that wrote it."""
    writers: dict[str, dict[tuple[str, ...], int]] = defaultdict(dict)
    for event in workload.events:
        if isinstance(event, ResolvedEvent) or event.commit_ts > ts:
            continue
        name = f"{event.schema}.{event.table}"
        if isinstance(event, DdlEvent):
            if event.ddl_type == m.ACTION_TRUNCATE_TABLE:
                writers[name].clear()
            continue
        keys = workload.expected.handle_keys[name]
        if event.old_columns is not None:
            writers[name].pop(key_text(event.old_columns, keys), None)
        if event.op != "delete":
            writers[name][key_text(event.columns, keys)] = event.commit_ts
    return writers


def gold_rows(layout: LakeLayout, name: str, version: int | None = None) -> list[dict]:
    """A gold table's rows as plain ``deltalake`` reads them."""
    schema, table = name.split(".")
    path = str(layout.gold(schema, table))
    return DeltaTable(path, version=version).to_pyarrow_table().to_pylist()


def assert_gold_is_expected(
    layout: LakeLayout,
    workload: Workload,
    ts: int,
    *,
    time_zone: str = "UTC",
    commit_ts: bool = True,
    versions: dict[str, int] | None = None,
) -> None:
    """Every table at ``ts``, row by row with typed values; with ``commit_ts``, each row's
    ``_commit_ts`` is the commit TS of the last change to its key, else it is null."""
    expected = si.expected_tables(workload, ts, time_zone)
    assert expected, "the workload created its tables before the first resolved TS"
    writers = last_writers(workload, ts)
    for name, (columns, rows) in expected.items():
        keys = workload.expected.handle_keys[name]
        found = gold_rows(layout, name, versions[name] if versions else None)
        stamps = {key_text(row, keys): row.pop("_commit_ts") for row in found}
        assert sorted(found, key=lambda r: key_text(r, keys)) == sorted(
            rows, key=lambda r: key_text(r, keys)
        ), name
        assert not found or set(found[0]) == set(columns), name
        if commit_ts:
            assert stamps == writers[name], name
        else:
            assert set(stamps.values()) <= {None}, name


def assert_lake_gold_is_expected(lake: Lake, ts: int, versions=None) -> None:
    assert_gold_is_expected(
        lake.layout,
        lake.workload,
        ts,
        time_zone=lake.case.time_zone,
        commit_ts=lake.case.commit_ts,
        versions=versions,
    )


def silver_changes(layout: LakeLayout) -> list[dict]:
    columns = ["event_id", "commit_ts", "topic", "partition", "op", "bronze_batch"]
    return DeltaTable(str(layout.changes)).to_pyarrow_table(columns=columns).to_pylist()


def table_rows(path: Path, **where) -> list[dict]:
    """A lake table's rows (plain deltalake), those whose columns equal ``where``."""
    table = DeltaTable(str(path)).to_pyarrow_table()
    for column, value in where.items():
        table = table.filter(pc.equal(table[column], value))
    return table.to_pylist()


def with_record(record: KafkaRecord, **changes) -> KafkaRecord:
    return dataclasses.replace(record, **changes)
