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
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pyarrow.compute as pc
import yaml
from deltalake import DeltaTable
from ticdc_lake.bronze import exports
from ticdc_lake.bronze.land import LandResult, land
from ticdc_lake.config import PipelineConfig, load_config
from ticdc_lake.gold.compact import CompactResult, compact
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.lake.names import qualified_name, split_name
from ticdc_lake.records import KafkaRecord
from ticdc_lake.sample.workload import Workload
from ticdc_lake.sample.workload.output import GeneratedOutput, GenerateOptions, write_generated
from ticdc_lake.silver import mysql
from ticdc_lake.silver.codecs import topic_decoder
from ticdc_lake.silver.decode import DecodeResult, decode
from ticdc_lake.silver.events import Column, DdlEvent, Image, ResolvedEvent, RowEvent, json_value
from ticdc_lake.silver.watermark import WatermarkResult, watermark

from tests.gold import silver_input as si

PARTITIONS = 4  # the last one is idle: it only receives resolved (and DDL) events
# Share of each partition's records in the first round: partition 1 lags, so it holds the
# watermark while the others have landed transactions beyond it.
FIRST_ROUND = {0: 0.7, 1: 0.35, 2: 0.55, 3: 0.45}
LANDING = "landing"
_DROPPED = re.compile(r"DROP COLUMN `([^`]+)`")


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
    # Without commit TSs (Canal-JSON without the extension) a cut-off cannot apply.
    cutoff_ts = None
    if not case.watermarks and case.commit_ts:
        cutoff_ts = resolved[2 * len(resolved) // 3]
    config = write_config(output, case, cutoff_ts)
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


def decoded(config: PipelineConfig, records: dict[tuple[str, int], list[KafkaRecord]]):
    """Per configured (topic, partition), the events of ``records``, decoded in process with
    the topic's protocol (no Spark: an independent view of what the stages should see)."""
    found = {}
    for topic, settings in config.topics.items():
        decoder = topic_decoder(settings, config.limits)
        for partition in range(settings.partitions):
            found[(topic, partition)] = [
                event
                for record in records.get((topic, partition), [])
                for event in decoder.decode(record)
            ]
    return found


def resolved_in(config: PipelineConfig, records: dict[tuple[str, int], list[KafkaRecord]]):
    """Per configured (topic, partition), the highest resolved TS in ``records``, or 0."""
    return {
        key: max((e.ts for e in events if isinstance(e, ResolvedEvent)), default=0)
        for key, events in decoded(config, records).items()
    }


def held_deletes(lake: Lake, cutoff: int) -> set[tuple[str, tuple[str, ...]]]:
    """(table, handle key) of the changes without a commit TS (Avro deletes) that compaction
    must hold at ``cutoff``: it places such a change at the next commit TS of its partition,
    and one lying between the last commit TS at or below the cut-off and the first above it
    may belong on either side of it, so gold keeps the row until a later run."""
    held = set()
    for events in decoded(lake.config, lake.all_records).values():
        rows = [e for e in events if isinstance(e, RowEvent)]
        previous = 0
        for index, event in enumerate(rows):
            if event.commit_ts is not None:
                previous = event.commit_ts
                continue
            following = next((e.commit_ts for e in rows[index + 1 :] if e.commit_ts), None)
            if previous <= cutoff and (following is None or cutoff < following):
                name = qualified_name(event.schema, event.table)
                keys = lake.workload.expected.handle_keys[name]
                held.add((name, key_text(event.old_columns, keys)))
    return held


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
        name = qualified_name(event.schema, event.table)
        if isinstance(event, DdlEvent):
            if event.ddl_type == mysql.ACTION_TRUNCATE_TABLE:
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
    schema, table = split_name(name)
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
    held: set[tuple[str, tuple[str, ...]]] = frozenset(),
    tables: set[str] | None = None,
    keeps_dropped_columns: bool = False,
) -> None:
    """Every table at ``ts`` (or only ``tables``), row by row with typed values; with
    ``commit_ts``, each row's ``_commit_ts`` is the commit TS of the last change to its key,
    else null. ``held``: (table, key) whose delete gold holds back (``held_deletes``).
    ``keeps_dropped_columns``: no DDL was sent, so gold still has the columns DROP COLUMN
    removed upstream (and only those)."""
    expected = si.expected_tables(workload, ts, time_zone)
    assert expected, "the workload created its tables before the first resolved TS"
    writers = last_writers(workload, ts)
    kept = kept_rows(workload, ts, time_zone, held)
    for name, (columns, rows) in expected.items():
        if tables is not None and name not in tables:
            continue
        keys = workload.expected.handle_keys[name]
        # A held delete whose change came after ``ts`` anyway leaves the expected row as it is.
        present = {key_text(row, keys) for row in rows}
        kept_here = {k: row for k, row in kept.get(name, {}).items() if k not in present}
        rows = rows + [{c: row.get(c) for c in columns} for row in kept_here.values()]
        found = gold_rows(layout, name, versions[name] if versions else None)
        if keeps_dropped_columns and found:
            extra = set(found[0]) - {*columns, "_commit_ts"}
            assert extra <= dropped_columns(workload, ts)[name], name
            found = [{c: row[c] for c in [*columns, "_commit_ts"]} for row in found]
        stamps = {key_text(row, keys): row.pop("_commit_ts") for row in found}
        assert sorted(found, key=lambda r: key_text(r, keys)) == sorted(
            rows, key=lambda r: key_text(r, keys)
        ), name
        assert not found or set(found[0]) == set(columns), name
        if commit_ts:
            stamped = writers[name] | {k: row["_commit_ts"] for k, row in kept_here.items()}
            assert stamps == stamped, name
        else:
            assert set(stamps.values()) <= {None}, name


def kept_rows(workload: Workload, ts: int, time_zone: str, held) -> dict[str, dict]:
    """Per table, the rows whose delete is held: as the last change before it left them, typed
    as gold holds them, with that change's commit TS."""
    types = si.column_types(workload)
    kept: dict[str, dict] = defaultdict(dict)
    for event in workload.events:
        if not isinstance(event, RowEvent) or event.commit_ts > ts or event.op == "delete":
            continue
        name = qualified_name(event.schema, event.table)
        key = key_text(event.columns, workload.expected.handle_keys[name])
        if (name, key) in held:
            kept[name][key] = {
                column: si.typed_value(types[name][column], json_value(value.value), time_zone)
                for column, value in event.columns.items()
            } | {"_commit_ts": event.commit_ts}
    return kept


def assert_lake_gold_is_expected(lake: Lake, ts: int, versions=None) -> None:
    held, tables = frozenset(), None
    if lake.case.protocol == "avro" and not lake.case.watermarks:
        held = held_deletes(lake, ts)
    if not lake.case.watermarks:
        tables = untruncated_tables(lake.workload)
    assert_gold_is_expected(
        lake.layout,
        lake.workload,
        ts,
        time_zone=lake.case.time_zone,
        commit_ts=lake.case.commit_ts,
        versions=versions,
        held=held,
        tables=tables,
        keeps_dropped_columns=lake.case.protocol == "avro" and not lake.case.watermarks,
    )


def dropped_columns(workload: Workload, ts: int) -> dict[str, set[str]]:
    dropped: dict[str, set[str]] = defaultdict(set)
    for event in workload.ddl_events:
        match = _DROPPED.search(event.query)
        if match and event.commit_ts <= ts:
            dropped[qualified_name(event.schema, event.table)].add(match.group(1))
    return dropped


def untruncated_tables(workload: Workload) -> set[str]:
    """The tables gold can get right without watermarks: those never truncated. Avro sends
    no DDL at all, and Canal-JSON without the extension sends a TRUNCATE to partition 0 with
    no commit TS, so nothing orders it against the rows of the other partitions."""
    truncate = mysql.ACTION_TRUNCATE_TABLE
    truncated = {
        qualified_name(e.schema, e.table) for e in workload.ddl_events if e.ddl_type == truncate
    }
    assert truncated, "the workload truncates a table"
    return set(workload.expected.handle_keys) - truncated


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
