"""Bad input in one run, end to end: what cannot be read or decoded is recorded with a clear
reason, and everything else lands, decodes and reaches gold exactly.

The landing area holds an Avro changefeed (with its test-only watermarks) in good export files,
some of whose partitions also carry a bad record after their last good one: a message under a
schema id the registry never issued, a message cut short, and a replayed row whose DATE (or
DATETIME, YEAR) value TiDB could never send, which must not stop gold's typed conversion. Beside
it: a topic of Open Protocol data configured as Craft, a file of garbage bytes that claims to be
Parquet, the Open Protocol export with its last line cut off, and a gzip re-export of one Avro
topic cut off
mid-stream.
"""

from __future__ import annotations

import io
from pathlib import Path

import fastavro
import pytest
import yaml
from ticdc_lake.bronze.land import LandTables
from ticdc_lake.config import load_config
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.sample.workload.output import GenerateOptions, write_generated
from ticdc_lake.silver.schema_registry import DirectorySchemaSource

from tests.e2e import lakes

pytestmark = [pytest.mark.spark, pytest.mark.slow]

UNKNOWN_SCHEMA_ID = 999_999
WRONG_TOPIC = "ticdc-open-protocol"


def appended(records, value: bytes):
    """A record after the partition's last one (no offset gap), holding ``value``."""
    last = records[-1]
    return lakes.with_record(last, offset=last.offset + 1, value=value)


def a_row_message(records):
    return next(r for r in records if r.value and r.value[0] == 0 and len(r.value) > 40)


# A value of each of these tidb_types that TiDB could never send.
IMPOSSIBLE_VALUES = {
    "DATE": "garbage",
    "DATETIME": "2024-13-01 00:00:00",
    "TIMESTAMP": "yesterday",
    "JSON": "{not json",
    "YEAR": -99999,
}


def impossible_value(schema_dir: Path, record) -> tuple[bytes, str] | None:
    """The value of a row message rewritten with one column value outside its type (as a replay
    of that row would carry it) and that column's name; None if it has no such column."""
    if not record.value or record.value[0] != 0:
        return None
    writer = DirectorySchemaSource(schema_dir).get_schema(int.from_bytes(record.value[1:5], "big"))
    schema = fastavro.parse_schema(writer.definition)
    row = fastavro.schemaless_reader(io.BytesIO(record.value[5:]), schema, None)
    for field in schema["fields"]:
        branches = field["type"] if isinstance(field["type"], list) else [field["type"]]
        for branch in branches:
            parameters = branch.get("connect.parameters", {}) if isinstance(branch, dict) else {}
            tidb_type = parameters.get("tidb_type")
            if tidb_type in IMPOSSIBLE_VALUES and row[field["name"]] is not None:
                row[field["name"]] = IMPOSSIBLE_VALUES[tidb_type]
                out = io.BytesIO()
                fastavro.schemaless_writer(out, schema, row)
                return record.value[:5] + out.getvalue(), field["name"]
    return None


@pytest.fixture(scope="module")
def bad_lake(spark, tmp_path_factory):
    directory = tmp_path_factory.mktemp("bad-input")
    avro = write_generated(
        directory / "avro",
        GenerateOptions(
            protocol="avro", partitions=3, transactions=60, seed=31, avro_watermarks=True
        ),
    )
    wrong = write_generated(
        directory / "open", GenerateOptions(protocol="open-protocol", partitions=2, seed=32,
                                            transactions=20)
    )  # fmt: skip
    landing = directory / "landing"
    landing.mkdir()

    streams = {key: list(stream.records) for key, stream in avro.encoded.items()}
    first_topic, second_topic = avro.routing.topics[:2]
    unknown_id = a_row_message(streams[(first_topic, 0)])
    header = b"\x00" + UNKNOWN_SCHEMA_ID.to_bytes(4, "big")
    bad = {
        "unknown schema id": appended(streams[(first_topic, 0)], header + unknown_id.value[5:]),
    }
    cut = a_row_message(streams[(second_topic, 1)])
    half = cut.value[: len(cut.value) // 2]
    bad["truncated message"] = appended(streams[(second_topic, 1)], half)
    streams[(first_topic, 0)].append(bad["unknown schema id"])
    streams[(second_topic, 1)].append(bad["truncated message"])
    impossible_at, (impossible, impossible_column) = next(
        (key, found)
        for key, records in sorted(streams.items())
        for record in records
        if record not in bad.values()
        for found in [impossible_value(avro.schema_dir, record)]
        if found is not None
    )
    bad["value outside its type"] = appended(streams[impossible_at], impossible)
    streams[impossible_at].append(bad["value outside its type"])
    for index, topic in enumerate(avro.routing.topics):
        records = [r for (t, _), rs in sorted(streams.items()) if t == topic for r in rs]
        layout, compression = [("parquet", "none"), ("jsonl", "zstd"), ("kcat", "none")][index % 3]
        lakes.write_round(landing, topic, records, (layout, compression))

    # Garbage that claims to be Parquet by its first bytes.
    (landing / "garbage.parquet").write_bytes(b"PAR1" + bytes(range(256)) * 8)
    # The wrong protocol's export, its last line cut off in the middle.
    wrong_records = [r for _, stream in sorted(wrong.encoded.items()) for r in stream.records]
    truncated_jsonl = lakes.write_round(landing, "open-truncated", wrong_records, ("jsonl", "none"))
    text = truncated_jsonl.read_bytes()
    truncated_jsonl.write_bytes(text[: len(text) - len(text.splitlines()[-1]) // 2 - 1])
    # A gzip re-export of the first Avro topic, cut off mid-stream.
    again = [r for (t, _), rs in sorted(streams.items()) if t == first_topic for r in rs]
    gz = lakes.write_round(landing, "reexport", again, ("jsonl", "gz"))
    gz.write_bytes(gz.read_bytes()[: gz.stat().st_size * 2 // 3])

    config_path = directory / "pipeline.yaml"
    avro_topic = {"protocol": "avro", "partitions": 3, "schema-dir": str(avro.schema_dir)}
    config_path.write_text(
        yaml.safe_dump(
            {
                "lake": "lake",
                "inputs": ["landing/*"],
                "topics": {
                    **{topic: avro_topic for topic in avro.routing.topics},
                    WRONG_TOPIC: {"protocol": "craft", "partitions": 2},  # it is open-protocol
                },
                "changefeeds": {
                    "avro": {"topics": avro.routing.topics, "watermarks": True},
                    "open": {"topics": [WRONG_TOPIC]},
                },
            }
        )
    )
    config = load_config(config_path)
    results = lakes.run_stages(spark, config, compacting=True)
    return {
        "avro": avro, "wrong": wrong, "config": config, "layout": LakeLayout(config.lake),
        "bad": bad, "wrong_records": wrong_records, "results": results, "landing": landing,
        "truncated_jsonl": truncated_jsonl, "gz": gz, "streams": streams,
        "impossible_column": impossible_column,
    }  # fmt: skip


def test_unreadable_files_and_lines_are_reported_with_file_and_position(bad_lake):
    land_result = bad_lake["results"][0]
    errors = lakes.table_rows(LandTables.of(bad_lake["layout"]).export_errors)
    by_file = {Path(e["source_file"]).name: e for e in errors}
    assert land_result.errors == len(errors) == 3, errors
    garbage = by_file["garbage.parquet"]
    assert garbage["line"] is None and "parquet" in garbage["reason"], garbage
    cut_line = by_file[bad_lake["truncated_jsonl"].name]
    assert cut_line["line"] == len(bad_lake["wrong_records"]), cut_line
    assert "not valid JSON" in cut_line["reason"] and cut_line["raw"], cut_line
    cut_stream = by_file[bad_lake["gz"].name]
    assert "truncated" in cut_stream["reason"] or "ended" in cut_stream["reason"], cut_stream
    # What could be read of the cut files landed; the gzip copy repeats records already there.
    files = {Path(r["path"]).name: r for r in lakes.table_rows(bad_lake["layout"].landed_files)}
    assert (
        files[bad_lake["truncated_jsonl"].name]["records_added"]
        == len(bad_lake["wrong_records"]) - 1
    )
    assert files[bad_lake["gz"].name]["records_added"] == 0
    assert land_result.duplicates > 0 and land_result.conflicts == 0


def test_bad_records_are_quarantined_with_their_reason_and_the_counts_reconcile(bad_lake):
    decode_result = bad_lake["results"][1]
    layout = bad_lake["layout"]
    bronze = len(lakes.table_rows(layout.bronze))
    wrong_landed = len(bad_lake["wrong_records"]) - 1
    assert decode_result.records == bronze
    assert decode_result.quarantined == wrong_landed + len(bad_lake["bad"])
    assert decode_result.decoded == bronze - decode_result.quarantined
    (log,) = lakes.table_rows(layout.decode_log)
    assert log["records"] == log["decoded"] + log["quarantined"] == bronze
    quarantined = {
        (r["topic"], r["partition"], r["offset"]): r for r in lakes.table_rows(layout.quarantine)
    }
    assert len(quarantined) == decode_result.quarantined
    for record in bad_lake["wrong_records"][:-1]:
        row = quarantined[(record.topic, record.partition, record.offset)]
        assert row["protocol"] == "craft" and row["error"].startswith("craft: "), row["error"]
        assert f"offset {record.offset}" in row["error"], row["error"]
        assert row["value"] == record.value  # kept raw, for a redecode with the right protocol
    reasons = {
        "unknown schema id": f"schema id {UNKNOWN_SCHEMA_ID} is not in schema directory",
        "truncated message": "avro: ",
        "value outside its type": f"column {bad_lake['impossible_column']!r}: value ",
    }
    for name, record in bad_lake["bad"].items():
        row = quarantined[(record.topic, record.partition, record.offset)]
        assert reasons[name] in row["error"], (name, row["error"])
        assert f"offset {record.offset}" in row["error"], (name, row["error"])
        assert f"partition {record.partition}" in row["error"], (name, row["error"])
        assert row["protocol"] == "avro" and row["value"] == record.value


def test_the_good_changefeed_still_reaches_gold_exactly(bad_lake):
    _, _, marks, compacted = bad_lake["results"]
    feeds = {feed.name: feed for feed in marks.changefeeds}
    workload = bad_lake["avro"].workload
    assert feeds["avro"].watermark == workload.resolved_ts[-1]
    # Nothing of the misconfigured topic decoded: it holds its own changefeed at 0, alone.
    assert feeds["open"].watermark == 0 and set(feeds["open"].unseen) == {
        (WRONG_TOPIC, 0),
        (WRONG_TOPIC, 1),
    }
    by_feed = {feed.name: feed for feed in compacted.changefeeds}
    assert not by_feed["open"].tables
    assert not compacted.failures
    lakes.assert_gold_is_expected(bad_lake["layout"], workload, workload.resolved_ts[-1])
    rows = {t.table: t.rows for t in by_feed["avro"].tables}
    expected = lakes.si.expected_tables(workload, workload.resolved_ts[-1])
    assert rows == {name: len(table[1]) for name, table in expected.items()}


def test_no_offset_gaps_and_no_export_records_lost(bad_lake):
    land_result = bad_lake["results"][0]
    assert land_result.offset_gaps == 0
    bronze = lakes.table_rows(bad_lake["layout"].bronze)
    landed = {(r["topic"], r["partition"], r["offset"]) for r in bronze}
    sent = {
        (r.topic, r.partition, r.offset)
        for records in bad_lake["streams"].values()
        for r in records
    } | {(r.topic, r.partition, r.offset) for r in bad_lake["wrong_records"][:-1]}
    assert landed == sent
