"""The decode stage: bronze → silver on Spark, checked against the Python decoders.

Bronze is built here from generated export files with the Land stage's schema (the same rows
land would write), so these tests depend only on the decoders, the generator and the table IO.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
import yaml
from deltalake import DeltaTable
from pyspark.sql.pandas.types import to_arrow_schema
from ticdc_lake.bronze import exports
from ticdc_lake.bronze import land as land_stage
from ticdc_lake.config import PipelineConfig, load_config
from ticdc_lake.delta import delta_table_exists, read_delta, write_delta
from ticdc_lake.delta.read import DataFile
from ticdc_lake.errors import DecodeError
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.protocols import CodecSettings, make_encoder
from ticdc_lake.records import KafkaRecord
from ticdc_lake.sample.workload.output import GenerateOptions, write_generated
from ticdc_lake.silver import decode as stage
from ticdc_lake.silver import rows as silver
from ticdc_lake.silver.codecs import topic_decoder
from ticdc_lake.silver.decode import DecodeResult, DecodeStageError, decode, redecode
from ticdc_lake.silver.events import Column, DdlEvent, ResolvedEvent, RowEvent
from ticdc_lake.silver.schema_registry import SchemaRegistryUnavailableError

from tests import hostile_avro

pytestmark = pytest.mark.spark

PROTOCOLS = ("open-protocol", "craft", "canal-json", "avro")
TABLES = ("changes", "ddl", "resolved", "quarantine", "decode_log")
# Columns that say when a row was written, not what it is.
RUN_COLUMNS = {"quarantined_at", "decoded_at", "bronze_version", "run"}

# Bronze as the Land stage writes it: its columns, partitioned by topic.
BRONZE_SCHEMA = to_arrow_schema(land_stage.BRONZE_SCHEMA)  # timestamps in UTC


# --- helpers ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """One small generated workload per protocol, generated on first use."""
    made = {}

    def get(protocol: str):
        if protocol not in made:
            out = tmp_path_factory.mktemp(f"gen-{protocol}")
            options = GenerateOptions(protocol=protocol, transactions=120, partitions=3, seed=7)
            made[protocol] = write_generated(out, options)
        return made[protocol]

    return get


def export_records(files) -> list[tuple[str, KafkaRecord]]:
    return [(str(path), record) for path, record in exports.read_exports(files)]


def land(
    spark,
    config: PipelineConfig,
    batches: dict[int, list[tuple[str, KafkaRecord]]],
    app_id: str = "test-land",
):
    """Append batches of records to bronze in one commit, as the Land stage writes them
    (without its file bookkeeping and offset dedup, which decode does not depend on)."""
    rows = [
        {
            "topic": record.topic,
            "partition": record.partition,
            "offset": record.offset,
            "timestamp": None if record.timestamp_ms is None else record.timestamp_ms * 1000,
            "timestamp_type": 0,
            "key": record.key,
            "value": record.value,
            "headers": [{"key": k, "value": v} for k, v in record.headers],
            "record_hash": None,
            "source_file": source_file,
            "batch_id": batch_id,
            "landed_at": 0,
        }
        for batch_id, records in batches.items()
        for source_file, record in records
    ]
    table = pa.Table.from_pylist(rows, schema=BRONZE_SCHEMA)
    bronze = LakeLayout(config.lake).bronze
    write_delta(
        spark.createDataFrame(table),
        bronze,
        partition_by=land_stage.BRONZE_PARTITION_BY,
        app_id=app_id,
        version=max(batches),
    )


def write_config(path: Path, topics: dict[str, dict], limits: dict | None = None) -> PipelineConfig:
    document = {
        "version": 1,
        "lake": "lake",
        "topics": topics,
        **({"limits": limits} if limits else {}),
    }
    path.write_text(yaml.safe_dump(document))
    return load_config(path)


def generated_config(tmp_path: Path, generated_output, write: bool = True):
    """The generator's pipeline config with the lake under tmp_path (or only its topics)."""
    document = yaml.safe_load(generated_output.config_path.read_text())
    base = generated_output.config_path.parent
    for settings in document["topics"].values():
        for key in ("schema-dir", "schemas-topic"):
            if key in settings:
                settings[key] = str(base / settings[key])
    if not write:
        return document["topics"]
    tmp_path.mkdir(parents=True, exist_ok=True)
    return write_config(tmp_path / "pipeline.yaml", document["topics"])


def python_decode(config: PipelineConfig, batches: dict[int, list[tuple[str, KafkaRecord]]]):
    """What the Python decoders make of the records: silver rows per table, and the records
    that do not decode (coordinates → error)."""
    expected: dict[str, list] = {"changes": [], "ddl": [], "resolved": []}
    failed: dict[tuple, DecodeError] = {}
    decoders = {}
    for batch, records in batches.items():
        for _, record in records:
            if record.topic not in decoders:
                decoders[record.topic] = topic_decoder(config.topic(record.topic), config.limits)
            try:
                events = decoders[record.topic].decode(record)
            except DecodeError as error:
                failed[(record.topic, record.partition, record.offset)] = error
                continue
            for event in events:
                if isinstance(event, RowEvent):
                    expected["changes"].append(silver.change_row(event, batch))
                elif isinstance(event, DdlEvent):
                    expected["ddl"].append(silver.ddl_row(event, batch))
                else:
                    expected["resolved"].append(silver.resolved_row(event, batch))
    return expected, failed


def _order(row: dict) -> tuple:
    return (row["bronze_batch"], row["topic"], row["partition"], row["offset"], row.get("index"))


def rows(path, drop=RUN_COLUMNS) -> list[dict]:
    """A table's rows read with plain delta-rs (what any Delta reader sees), in Kafka order."""
    table = DeltaTable(str(path)).to_pyarrow_table()
    found = [{k: v for k, v in row.items() if k not in drop} for row in table.to_pylist()]
    return sorted(found, key=lambda r: _order(r) if "topic" in r else (r["bronze_batch"],))


def lake_rows(config: PipelineConfig) -> dict[str, list[dict]]:
    layout = LakeLayout(config.lake)
    return {name: rows(getattr(layout, name)) for name in TABLES}


def versions(config: PipelineConfig) -> dict[str, int]:
    layout = LakeLayout(config.lake)
    return {name: DeltaTable(str(getattr(layout, name))).version() for name in TABLES}


def assert_reconciles(config: PipelineConfig, bronze_records: int) -> list[dict]:
    log = rows(LakeLayout(config.lake).decode_log)
    for row in log:
        assert row["records"] == row["decoded"] + row["quarantined"], row
    assert sum(row["records"] for row in log) == bronze_records
    quarantined = rows(LakeLayout(config.lake).quarantine)
    assert sum(row["quarantined"] for row in log) == len(quarantined)
    return log


# --- per protocol: silver equals the Python decoders -----------------------------------------


@pytest.fixture(scope="module")
def every_protocol(spark, generated, tmp_path_factory):
    """Every protocol's workload landed as one bronze batch, and decoded."""
    tmp_path = tmp_path_factory.mktemp("every-protocol")
    topics, by_protocol = {}, {}
    for protocol in PROTOCOLS:
        output = generated(protocol)
        topics |= generated_config(tmp_path / protocol, output, write=False)
        by_protocol[protocol] = export_records(output.export_files)
    config = write_config(tmp_path / "pipeline.yaml", topics)
    land(spark, config, {1: [r for records in by_protocol.values() for r in records]})
    result = decode(spark, config)
    return config, by_protocol, result


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_silver_equals_python_decoder(every_protocol, generated, protocol):
    config, by_protocol, _ = every_protocol
    records = by_protocol[protocol]
    topics = {record.topic for _, record in records}

    expected, failed = python_decode(config, {1: records})

    assert failed == {}
    found = {
        name: [row for row in table if row.get("topic") in topics]
        for name, table in lake_rows(config).items()
    }
    for name in ("changes", "ddl", "resolved"):
        assert found[name] == sorted(expected[name], key=_order), name
    assert found["quarantine"] == []
    # event_id identifies replays: the same change at two offsets has one id (at least as
    # many: Avro deletes carry no commit TS, so equal deletes share an id).
    ids = Counter(row["event_id"] for row in found["changes"])
    replayed = sum(n - 1 for n in ids.values())
    assert replayed >= generated(protocol).manifest["counts"]["replayed_row_events"] > 0
    ddl = len(generated(protocol).manifest["ddl"])
    if protocol == "avro":  # DDL and resolved events only with a test-only option
        assert expected["ddl"] == expected["resolved"] == []
    else:  # each DDL is sent to every partition (canal-json: to partition 0)
        assert len(expected["ddl"]) >= ddl > 0 and expected["resolved"]


def test_counts_reconcile_and_a_rerun_adds_nothing(spark, every_protocol):
    config, by_protocol, result = every_protocol
    records = sum(len(records) for records in by_protocol.values())
    assert result.batches == (1,)
    assert result.records == result.decoded == records
    assert result.quarantined == 0
    found = lake_rows(config)
    kinds = Counter(row["op"] for row in found["changes"])
    assert found["decode_log"] == [
        {
            "bronze_batch": 1,
            "records": records,
            "decoded": records,
            "quarantined": 0,
            "inserts": kinds["insert"],
            "updates": kinds["update"],
            "deletes": kinds["delete"],
            "ddl": len(found["ddl"]),
            "resolved": len(found["resolved"]),
        }
    ]
    assert result.events == {
        "insert": kinds["insert"],
        "update": kinds["update"],
        "delete": kinds["delete"],
        "ddl": len(found["ddl"]),
        "resolved": len(found["resolved"]),
    }
    before, tables = versions(config), lake_rows(config)

    again = decode(spark, config)

    assert again == DecodeResult(bronze_version=result.bronze_version)
    assert versions(config) == before
    assert lake_rows(config) == tables
    # Readers of the lake see the same rows through Spark.
    changes = read_delta(spark, LakeLayout(config.lake).changes)
    assert changes.count() == len(tables["changes"])
    assert changes.columns == silver.CHANGES_SCHEMA.names


# --- bad input -------------------------------------------------------------------------------


def _corrupt(record: KafkaRecord, value: bytes) -> KafkaRecord:
    return KafkaRecord(record.topic, record.partition, record.offset, record.key, value)


def _moved(record: KafkaRecord, *, topic: str | None = None, offset: int) -> KafkaRecord:
    return KafkaRecord(
        topic or record.topic, record.partition, offset, record.key, record.value,
        record.timestamp_ms,
    )  # fmt: skip


# Writer schemas a hostile registry could hold (ids far above the generated ones), and a
# record of each: each crashed or exhausted a decode run before the checks.
HOSTILE_SCHEMAS = {
    900_001: json.dumps(hostile_avro.recursive_schema()),
    900_002: json.dumps(hostile_avro.collection_schema("array")),
    900_003: hostile_avro.nested_schema_text(100),
    900_004: json.dumps(hostile_avro.huge_bit_schema()),
}
MAX_MESSAGE = 1024 * 1024  # the bad batch's limits.max-message-bytes
HOSTILE_VALUES = {
    "self-containing schema": (900_001, hostile_avro.recursive_record(20_000)),
    "count bomb": (900_002, hostile_avro.count_bomb(2**40)),
    "deep schema": (900_003, hostile_avro.nested_record()),
    "huge BIT": (900_004, hostile_avro.huge_bit_record()),
}


@pytest.fixture(scope="module")
def bad_batch(spark, generated, tmp_path_factory):
    """One bronze batch mixing good records with every kind of bad one, and its config with
    open-protocol data configured as craft, decoded."""
    tmp_path = tmp_path_factory.mktemp("bad-input")
    canal, opened, avro = generated("canal-json"), generated("open-protocol"), generated("avro")
    canal_topic = canal.routing.topics[0]
    open_topic = opened.routing.topics[0]
    avro_topics = avro.routing.topics
    schema_dir = tmp_path / "schemas"
    shutil.copytree(avro.schema_dir, schema_dir)
    for schema_id, text in HOSTILE_SCHEMAS.items():
        (schema_dir / f"{schema_id}.avsc").write_text(text)
    schema_dir = str(schema_dir)
    topics = {
        canal_topic: {"protocol": "canal-json", "partitions": 3},
        open_topic: {"protocol": "craft", "partitions": 3},  # wrong: the data is open-protocol
        **{t: {"protocol": "avro", "partitions": 3, "schema-dir": schema_dir} for t in avro_topics},
    }
    config = write_config(tmp_path / "pipeline.yaml", topics, {"max-message-bytes": MAX_MESSAGE})

    good = export_records(canal.export_files)
    avro_records = export_records(avro.export_files)
    wrong = export_records(opened.export_files)[:20]
    source = "bad-input.jsonl"
    too_late = make_encoder("canal-json", CodecSettings()).encode(
        [ResolvedEvent(2**63 + 5, canal_topic, 0, 0)]
    )[0]
    first_value = next(r for _, r in good if r.value and r.partition == 1)
    avro_row = next(r for _, r in avro_records if r.value and r.value[0] == 0)
    bad = {
        "corrupt": _corrupt(_moved(first_value, offset=90_001), first_value.value[:-7]),
        "unknown topic": _moved(first_value, topic="orders-unconfigured", offset=0),
        "too large TS": KafkaRecord(canal_topic, 2, 90_002, too_late.key, too_late.value),
        "too large value": _corrupt(_moved(first_value, offset=90_004), b"[" * (MAX_MESSAGE + 1)),
        # Schema id 999999 in the Confluent header.
        "unknown schema id": _corrupt(
            _moved(avro_row, offset=90_003), b"\x00\x00\x0f\x42\x3f" + avro_row.value[5:]
        ),
        **{
            name: KafkaRecord(avro_row.topic, 0, 90_010 + i, None, hostile_avro.framed(*value))
            for i, (name, value) in enumerate(HOSTILE_VALUES.items())
        },
    }
    records = good + avro_records + wrong + [(source, record) for record in bad.values()]
    land(spark, config, {1: records})
    result = decode(spark, config)
    return config, records, good + avro_records, wrong, bad, result


def test_bad_records_are_quarantined_and_the_rest_decodes(spark, bad_batch):
    config, records, good, wrong, bad, result = bad_batch

    assert result.records == len(records)
    assert result.quarantined == len(wrong) + len(bad)
    assert result.decoded == len(good)
    found = lake_rows(config)
    expected, failed = python_decode(config, {1: good})
    assert failed == {}
    for name in ("changes", "ddl", "resolved"):
        assert found[name] == sorted(expected[name], key=_order), name

    quarantined = {(r["topic"], r["partition"], r["offset"]): r for r in found["quarantine"]}
    assert len(quarantined) == len(wrong) + len(bad)
    for _, record in wrong:
        row = quarantined[(record.topic, record.partition, record.offset)]
        assert row["protocol"] == "craft"
        assert row["error"].startswith("craft: ")
        assert f"offset {record.offset}" in row["error"]
        assert (row["key"], row["value"]) == (record.key, record.value)  # the raw record
        assert row["source_file"].endswith(".parquet")
    reasons = {
        "corrupt": "canal-json: ",
        "unknown topic": "topic 'orders-unconfigured' is not in the pipeline config",
        "too large TS": r"TS 9223372036854775813 exceeds 2\^63-1",
        # Refused before it is parsed (a JSON parser would nest a million arrays).
        "too large value": r"canal-json: .*Kafka record value \(1,048,577\) exceeds "
        r"limits\.max-message-bytes = 1,048,576",
        "unknown schema id": "schema id 999999 is not in schema directory",
        "self-containing schema": "named type 't' contains itself.*limits.max-nesting-depth",
        "count bomb": "schema id 900002 holds an Avro array",
        "deep schema": r"nesting depth \(65\) exceeds limits\.max-nesting-depth = 64",
        # Refused by the protocol's value checks, or else when its silver row is built.
        "huge BIT": "flags|BIT|silver row|4300 digits",
    }
    for name, record in bad.items():
        row = quarantined[(record.topic, record.partition, record.offset)]
        assert re.search(reasons[name], row["error"]), (name, row["error"])
        assert "file bad-input.jsonl" in row["error"]
        assert row["value"] == record.value
        assert row["bronze_batch"] == 1
    assert quarantined[_at(bad["unknown topic"])]["protocol"] is None
    assert quarantined[_at(bad["unknown schema id"])]["protocol"] == "avro"
    stamps = read_delta(spark, LakeLayout(config.lake).quarantine).select("quarantined_at")
    assert stamps.where("quarantined_at IS NULL").count() == 0
    assert_reconciles(config, len(records))


def _at(record: KafkaRecord) -> tuple:
    return (record.topic, record.partition, record.offset)


def test_redecode_after_fixing_the_config(spark, bad_batch):
    config, records, good, wrong, bad, _ = bad_batch
    before = lake_rows(config)

    # Fix the open-protocol topic's protocol and re-derive batch 1.
    document = yaml.safe_load(config.source.read_text())
    open_topic = wrong[0][1].topic
    document["topics"][open_topic]["protocol"] = "open-protocol"
    config.source.write_text(yaml.safe_dump(document))
    fixed = load_config(config.source)

    result = redecode(spark, fixed, batches=[1])

    assert result.run == "redecode"
    assert result.quarantined == len(bad)
    assert result.decoded == len(good) + len(wrong)
    after = lake_rows(fixed)
    expected, _ = python_decode(fixed, {1: good + wrong})
    for name in ("changes", "ddl", "resolved"):
        assert after[name] == sorted(expected[name], key=_order), name
    assert {_at_row(r) for r in after["quarantine"]} == {_at(r) for r in bad.values()}
    assert len(after["changes"]) > len(before["changes"])
    assert_reconciles(fixed, len(records))
    [log] = after["decode_log"]
    assert log["quarantined"] == len(bad)
    assert read_delta(spark, LakeLayout(fixed.lake).decode_log).first()["run"] == "redecode"

    # Again, by TS range: the batch holding the range's changes is re-derived the same way.
    commit_ts = sorted(r["commit_ts"] for r in after["changes"] if r["commit_ts"] is not None)
    again = redecode(spark, fixed, start_ts=commit_ts[5], end_ts=commit_ts[6])
    assert again.batches == (1,)
    assert lake_rows(fixed) == after


def _at_row(row: dict) -> tuple:
    return (row["topic"], row["partition"], row["offset"])


def test_unreachable_registry_fails_the_stage(spark, generated, tmp_path):
    avro = generated("avro")
    registry = {"url": "http://127.0.0.1:9"}  # nothing listens on the discard port
    topics = {t: {"protocol": "avro", "partitions": 3, "schema-registry": registry}
              for t in avro.routing.topics}  # fmt: skip
    config = write_config(tmp_path / "pipeline.yaml", topics)
    land(spark, config, {1: export_records(avro.export_files[:1])})

    with pytest.raises(SchemaRegistryUnavailableError, match=r"127\.0\.0\.1:9 could not be"):
        decode(spark, config)

    layout = LakeLayout(config.lake)
    assert not any(delta_table_exists(getattr(layout, name)) for name in TABLES)


# --- idempotency -----------------------------------------------------------------------------


def test_bronze_is_split_for_every_core_to_stay_busy(spark):
    """Up to four splits per core, none much under 32 MiB; a session's own choice stands."""
    cores = spark.sparkContext.defaultParallelism
    mib = 1024 * 1024

    def splits(size: int) -> int:
        return stage.BronzeBatches((DataFile("bronze.parquet", size),)).split_count(spark)

    assert splits(448 * mib) == 4 * cores
    assert splits(3 * 32 * mib) == max(cores, 3)
    assert splits(5 * mib) == cores
    spark.conf.set("spark.sql.files.minPartitionNum", "5")
    try:
        assert splits(448 * mib) == 5
    finally:
        spark.conf.unset("spark.sql.files.minPartitionNum")


def test_a_crash_between_the_writes_then_a_rerun_recovers(spark, generated, tmp_path):
    output = generated("craft")
    config = generated_config(tmp_path, output)
    records = export_records(output.export_files)
    batches = {10: records[0::3], 20: records[1::3], 30: records[2::3]}
    layout = LakeLayout(config.lake)
    land(spark, config, {10: batches[10]})
    assert decode(spark, config).batches == (10,)

    # Batch 20 is decoded, but the run dies after writing changes and DDL only ...
    land(spark, config, {20: batches[20]})
    snapshot = DeltaTable(str(layout.bronze))
    bronze_version = snapshot.version()
    bronze = stage.BronzeBatches.read(snapshot, [20])
    expected_counts = {20: len(batches[20])}
    plans = stage.silver_plans(layout, version=20)
    run = stage.decode_batches(
        spark, config, bronze, expected_counts, bronze_version, plans, run="decode"
    )
    for name in ("changes", "ddl"):
        run.commit(name)
    run.release()
    # ... and batch 30 lands before the rerun.
    land(spark, config, {30: batches[30]})

    result = decode(spark, config)

    assert result.batches == (20, 30)
    expected, _ = python_decode(config, batches)
    found = lake_rows(config)
    for name in ("changes", "ddl", "resolved"):
        assert found[name] == sorted(expected[name], key=_order), name
    assert [r["bronze_batch"] for r in found["decode_log"]] == [10, 20, 30]
    assert_reconciles(config, len(records))
    done = versions(config)
    assert decode(spark, config).batches == ()
    # A TS range holding no event selects no batch: nothing is rewritten.
    assert redecode(spark, config, start_ts=2**62, end_ts=2**62 + 1).batches == ()
    assert versions(config) == done

    # A batch landed below a decoded one cannot be taken in order: refused, nothing written.
    land(spark, config, {25: batches[10][:10]}, app_id="late-land")
    with pytest.raises(DecodeStageError, match=r"batch\(es\) \[25\] appeared after batch 30"):
        decode(spark, config)
    assert versions(config) == done


# --- executor side, without Spark --------------------------------------------------------------


def test_partition_decoder_stops_with_one_fatal_row(tmp_path):
    registry = {"url": "http://127.0.0.1:9"}
    config = write_config(
        tmp_path / "pipeline.yaml",
        {"avro-topic": {"protocol": "avro", "partitions": 1, "schema-registry": registry}},
    )
    value = b"\x00\x00\x00\x00\x01\x02"  # schema id 1, which only the registry knows

    def record(topic: str, offset: int) -> dict:
        return {"topic": topic, "partition": 0, "offset": offset, "key": None, "value": value,
                "source_file": "f", "batch_id": 3}  # fmt: skip

    batches = [
        pa.RecordBatch.from_pylist([record("other", 0), record("avro-topic", 1)]),
        pa.RecordBatch.from_pylist([record("avro-topic", 2)]),
    ]
    decoder = stage.PartitionDecoder.for_config(config)
    out = pa.Table.from_batches(list(decoder(iter(batches))), schema=stage.DECODED_SCHEMA)

    assert out.column("kind").to_pylist() == ["quarantine", "fatal"]
    fatal = out.column("fatal")[1].as_py()
    assert fatal["error_type"] == "SchemaRegistryUnavailableError"
    assert "127.0.0.1:9" in fatal["message"]


def test_a_hostile_avro_record_is_quarantined_alone(tmp_path):
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "7.avsc").write_text(json.dumps(hostile_avro.huge_bit_schema()))
    config = write_config(
        tmp_path / "pipeline.yaml",
        {"bits": {"protocol": "avro", "partitions": 1, "schema-dir": str(tmp_path / "schemas")}},
    )
    values = [hostile_avro.huge_bit_record(size) for size in (8, 4096, 2)]

    def record(offset: int, value: bytes) -> dict:
        value = hostile_avro.framed(7, value)
        return {"topic": "bits", "partition": 0, "offset": offset, "key": None, "value": value,
                "source_file": "f", "batch_id": 3}  # fmt: skip

    batch = pa.RecordBatch.from_pylist([record(i, value) for i, value in enumerate(values)])
    decoder = stage.PartitionDecoder.for_config(config)
    out = pa.Table.from_batches(list(decoder(iter([batch]))), schema=stage.DECODED_SCHEMA)

    assert out.column("kind").to_pylist() == ["change", "change", "quarantine", "tally"]
    first, second = (out.column("change")[i].as_py() for i in (0, 1))
    # The hostile record's columns built before the failure are gone from the next row.
    assert [(c["name"], c["text"]) for c in first["columns"]] == [
        ("id", "1"),
        ("flags", str(2**64 - 1)),
    ]
    assert [(c["name"], c["text"]) for c in second["columns"]] == [("id", "1"), ("flags", "65535")]
    quarantined = out.column("quarantine")[2].as_py()
    assert (quarantined["offset"], quarantined["protocol"]) == (1, "avro")
    assert "offset 1" in quarantined["error"] and "file f" in quarantined["error"]
    assert out.column("tally")[3].as_py() == {"records": 3, "decoded": 2, "quarantined": 1}


def test_the_rows_of_a_record_are_added_all_or_none():
    """An event whose silver row cannot be built (a value Python will not turn into text)
    raised out of the partition decoder and failed the task; the rows built before it stayed."""
    out = stage.OutputBuilder()
    image = {"id": Column(8, 0, 1), "note": Column(15, 0, "a")}
    good = RowEvent(5, "s", "t", "insert", image, None, "t", 0, 1)
    out.add_events([good], 3)
    bad = dataclasses.replace(good, columns={**image, "huge": Column(8, 0, 10**5000)}, offset=2)

    with pytest.raises(DecodeError, match="silver row of its row event cannot be built"):
        out.add_events([good, ResolvedEvent(7, "t", 0, 2), bad], 3)

    out.add_events([dataclasses.replace(good, offset=3)], 3)
    changes = pa.Table.from_batches(out.drain()).column("change").to_pylist()
    assert [change["offset"] for change in changes] == [1, 3]
    assert [[c["name"] for c in change["columns"]] for change in changes] == [["id", "note"]] * 2


def test_a_drained_builder_starts_empty_and_leaves_what_it_gave_alone():
    """The builder's buffers are reused after a drain: the batches it gave stay as they were
    when the next rows overwrite the memory."""
    out = stage.OutputBuilder()
    image = {"id": Column(8, 0, 1), "note": Column(15, 0, "first batch")}
    out.add_events([RowEvent(5, "s", "t", "insert", image, None, "t", 0, 1)], 3)
    out.add(stage.RESOLVED, 3, {"topic": "t", "partition": 0, "ts": 5, "offset": 2, "index": 0,
                                "bronze_batch": 3})  # fmt: skip
    first = pa.Table.from_batches(out.drain())
    before = first.to_pylist()

    later = {"id": Column(8, 0, 2), "note": Column(15, 0, "second, longer batch")}
    out.add_events([RowEvent(6, "s", "t", "update", later, image, "t", 1, 7)], 4)
    second = pa.Table.from_batches(out.drain())

    assert first.to_pylist() == before
    assert [row["kind"] for row in before] == [stage.CHANGE, stage.RESOLVED]
    assert second.column("change").to_pylist()[0]["offset"] == 7
    assert second.num_rows == 1 and not out.drain()


def test_decode_result_prints_and_serialises():
    result = DecodeResult(
        batches=(3, 4), records=10, decoded=9, quarantined=1,
        events={"insert": 5, "update": 0, "delete": 1, "ddl": 1, "resolved": 2},
        bronze_version=7,
    )  # fmt: skip
    assert str(result) == (
        "decode: 2 bronze batch(es) [3, 4]: 10 records = 9 decoded + 1 quarantined; "
        "events: insert 5, update 0, delete 1, ddl 1, resolved 2"
    )
    assert json.loads(json.dumps(result.to_dict()))["batches"] == [3, 4]
    assert str(DecodeResult()) == "decode: nothing to decode"


# --- the spark-submit entry point --------------------------------------------------------------


def test_spark_job_prints_the_result_as_json(spark, tmp_path, capsys):
    from spark_jobs import decode as job

    config = write_config(tmp_path / "pipeline.yaml", {"t": {"protocol": "craft", "partitions": 1}})
    assert job.main(["--config", str(config.source)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["batches"] == [] and printed["records"] == 0


# --- throughput --------------------------------------------------------------------------------


@pytest.mark.slow
def test_decode_throughput(spark, tmp_path_factory):
    """~100k events through decode on local Spark; prints events/s beside one core decoding the
    same records in-process into silver rows (the Python floor). Only counts are asserted.

    A small first batch is decoded before the timed one, so the Python workers have imported
    the decoders and the JVM has compiled the plan, as in a session that has run before.
    """
    out = tmp_path_factory.mktemp("bench")
    transactions = int(os.environ.get("DECODE_BENCH_TRANSACTIONS", "20000"))
    protocol = os.environ.get("DECODE_BENCH_PROTOCOL", "canal-json")
    options = GenerateOptions(protocol=protocol, transactions=transactions, partitions=4)
    output = write_generated(out, options)
    config = generated_config(out, output)
    records = export_records(output.export_files)
    warm, timed = records[:1000], records[1000:]
    land(spark, config, {1: warm})
    decode(spark, config)
    land(spark, config, {2: timed})

    started = time.perf_counter()
    result = decode(spark, config)
    seconds = time.perf_counter() - started

    started = time.perf_counter()
    expected, _ = python_decode(config, {2: timed})
    floor = time.perf_counter() - started

    events = sum(result.events.values())
    assert result.records == result.decoded == len(timed)
    assert events == sum(len(rows) for rows in expected.values())
    print(
        f"\ndecode {protocol}: {len(timed)} records, {events} events {result.events}\n"
        f"  stage on local Spark ({spark.sparkContext.defaultParallelism} cores): "
        f"{seconds:.1f} s = {events / seconds:,.0f} events/s (decode, split, 5 Delta commits)\n"
        f"  one core, in-process Python decoders → silver rows: {floor:.1f} s = "
        f"{events / floor:,.0f} events/s"
    )
    shutil.rmtree(config.lake)
