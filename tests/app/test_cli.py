"""`ticdc-lake decode | generate | run | demo`."""

from __future__ import annotations

import contextlib
import io
import json
import re
import socket
from pathlib import Path

import orjson
import pytest
from deltalake import DeltaTable
from ticdc_lake.app import cli
from ticdc_lake.app.cli import decode_exports, main
from ticdc_lake.bronze.exports import write_export
from ticdc_lake.errors import DecodeError, TicdcLakeError
from ticdc_lake.gold.state import read_state
from ticdc_lake.protocols import make_decoder, make_encoder
from ticdc_lake.records import KafkaRecord
from ticdc_lake.sample.cases import BY_NAME, make_column
from ticdc_lake.sample.workload.expected_gold import ExpectedGold
from ticdc_lake.sample.workload.output import GenerateOptions, write_generated
from ticdc_lake.silver.codecs import codec_settings
from ticdc_lake.silver.events import INSERT, Column, RowEvent

from tests import hostile_avro
from tests.golden_files import assert_golden


def open_protocol_record(offset: int, **values) -> KafkaRecord:
    columns = {"id": make_column(BY_NAME["c_bigint"], offset, key=True, nullable=False)}
    columns |= {name: make_column(BY_NAME[name], value) for name, value in values.items()}
    event = RowEvent(2**62 + offset, "db", "t", INSERT, columns, None, "topic", 0, 0)
    (message,) = make_encoder("open-protocol").encode([event])
    return KafkaRecord("topic", 1, offset, message.key, message.value, 1_700_000_000_000)


def test_decode_prints_one_lossless_json_object_per_event(tmp_path, capsysbinary):
    path = tmp_path / "records.parquet"
    values = {
        "c_bigint_unsigned": 2**64 - 1,
        "c_decimal_wide": "-12345678901234567890123456789012345.123456789012345678901234567890",
        "c_blob": b"\x00\xff",
        "c_varchar": "中文 🎉",
        "c_int": None,
    }
    write_export(path, [open_protocol_record(5, **values), open_protocol_record(6)], "parquet")
    assert main(["decode", "--protocol", "open-protocol", str(path)]) == 0
    captured = capsysbinary.readouterr()
    lines = [orjson.loads(line) for line in captured.out.splitlines()]
    assert len(lines) == 2
    first = lines[0]
    assert first["kind"] == "row" and first["op"] == "insert"
    assert (first["schema"], first["table"], first["commit_ts"]) == ("db", "t", 2**62 + 5)
    assert (first["topic"], first["partition"], first["offset"], first["index"]) == (
        "topic",
        1,
        5,
        0,
    )
    assert first["columns"] == {
        "id": 5,
        "c_bigint_unsigned": 18446744073709551615,
        "c_decimal_wide": values["c_decimal_wide"],
        "c_blob": {"base64": "AP8="},
        "c_varchar": "中文 🎉",
        "c_int": None,
    }
    assert first["old_columns"] is None and first["handle_key"] == ["id"]
    assert b"decoded 2 records into 2 events; 0 could not" in captured.err


def test_decode_prints_the_golden_json_lines(tmp_path, capsysbinary):
    """The whole output (tests/golden/decode-open-protocol.jsonl: every key of an event, in
    order), and the count on stderr after it."""
    path = tmp_path / "records.parquet"
    values = {"c_bigint_unsigned": 2**64 - 1, "c_blob": b"\x00\xff", "c_varchar": "中文 🎉"}
    records = [open_protocol_record(5, **values, c_int=None), open_protocol_record(6)]
    write_export(path, records, "parquet")
    assert main(["decode", "--protocol", "open-protocol", str(path)]) == 0
    captured = capsysbinary.readouterr()
    assert_golden("decode-open-protocol.jsonl", captured.out.decode())
    assert captured.err == b"decoded 2 records into 2 events; 0 could not be read or decoded\n"


def test_decode_reports_bad_records_and_goes_on(tmp_path, capsysbinary):
    good = tmp_path / "good.jsonl"
    write_export(good, [open_protocol_record(1)], "jsonl")
    bad = tmp_path / "bad.jsonl"
    write_export(
        bad,
        [
            open_protocol_record(2),
            KafkaRecord("topic", 3, 77, b"\x00\x00\x00", b"junk"),
            open_protocol_record(4),
        ],
        "jsonl",
    )
    with bad.open("ab") as sink:
        sink.write(b"this line is not JSON\n")
    status = main(["decode", "--protocol", "open-protocol", str(good), str(bad), str(bad)])
    captured = capsysbinary.readouterr()
    assert status == 1
    offsets = [orjson.loads(line)["offset"] for line in captured.out.splitlines()]
    assert offsets == [1, 2, 4, 2, 4]
    errors = captured.err.decode().splitlines()
    decode_errors = [line for line in errors if "offset 77" in line]
    assert len(decode_errors) == 2
    assert f"file {bad}" in decode_errors[0] and "partition 3" in decode_errors[0]
    assert sum(f"file {bad}, line 4" in line for line in errors) == 2
    assert "decoded 5 records into 5 events; 4 could not be read or decoded" in errors[-1]


def test_decode_prints_bytes_inside_nested_records_and_goes_on(tmp_path, capsysbinary):
    """A nested record's bytes had no JSON form: the printer crashed, and the records after it
    were never printed. A BIT of 4 KiB (an integer past JSON's 64 bits) is refused and skipped;
    had it reached the printer, it would be reported the same way."""
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / "1.avsc").write_text(json.dumps(hostile_avro.huge_bit_schema()))
    nested = hostile_avro.nested_schema(3)
    nested["fields"][0]["type"]["fields"][0]["type"] = "bytes"
    (schemas / "2.avsc").write_text(json.dumps(nested))
    values = [
        hostile_avro.framed(1, hostile_avro.huge_bit_record(8)),
        hostile_avro.framed(1, hostile_avro.huge_bit_record(4096)),
        hostile_avro.framed(2, hostile_avro.zigzag(2) + b"\x00\xff"),
        hostile_avro.framed(1, hostile_avro.huge_bit_record(2)),
    ]
    path = tmp_path / "records.jsonl"
    write_export(path, [KafkaRecord("t", 0, i, None, v) for i, v in enumerate(values)], "jsonl")

    status = main(["decode", "--protocol", "avro", "--schema-dir", str(schemas), str(path)])

    captured = capsysbinary.readouterr()
    assert status == 1
    lines = [orjson.loads(line) for line in captured.out.splitlines()]
    assert [line["offset"] for line in lines] == [0, 2, 3]
    assert lines[1]["columns"] == {"x": {"x": {"base64": "AP8="}}}
    [error, summary] = captured.err.decode().splitlines()
    assert error.startswith("error: avro: ")
    assert f"file {path}, topic t, partition 0, offset 1" in error
    assert summary == "decoded 3 records into 3 events; 1 could not be read or decoded"


def test_an_event_json_cannot_hold_is_the_records_error():
    deep: object = 1
    for _ in range(300):  # orjson stops at 255 levels
        deep = {"x": deep}
    for value in (deep, 2**70):
        event = RowEvent(5, "s", "t", INSERT, {"c": Column(None, 0, value)}, None, "t", 2, 9)
        with pytest.raises(cli._UNPRINTABLE) as caught:
            cli._json_line(event)
        error = cli._unprintable(
            caught.value, [event], "avro", KafkaRecord("t", 2, 9, None, None), "f"
        )
        assert str(error).startswith("avro: its row event cannot be printed as JSON: TypeError")
        assert str(error).endswith("(file f, topic t, partition 2, offset 9)")


def test_decode_exports_reports_undecodable_records_with_file_and_coordinates(tmp_path):
    good_key = (1).to_bytes(8, "big") + (len(b'{"ts":5,"t":3}')).to_bytes(8, "big")
    good = KafkaRecord("t", 0, 0, good_key + b'{"ts":5,"t":3}', (0).to_bytes(8, "big"))
    bad = KafkaRecord("t", 3, 41, b"\x00\x00", b"junk")
    path = tmp_path / "records.jsonl"
    write_export(path, [good, bad, good], "jsonl")
    errors: list[TicdcLakeError] = []
    decoded = list(decode_exports([path], make_decoder("open-protocol"), on_error=errors.append))
    assert [events[0].ts for _, _, events in decoded] == [5, 5]
    (error,) = errors
    assert isinstance(error, DecodeError)
    assert (error.source_file, error.partition, error.offset) == (str(path), 3, 41)
    assert f"file {path}" in str(error) and "partition 3, offset 41" in str(error)


def test_decode_of_avro_needs_a_schema_source(tmp_path, capsys):
    path = tmp_path / "x.jsonl"
    write_export(path, [], "jsonl")
    assert main(["decode", "--protocol", "avro", str(path)]) == 2
    assert "--schema-dir" in capsys.readouterr().err


def test_decode_reads_the_registry_password_from_the_named_variable(tmp_path, capsys):
    path = tmp_path / "x.jsonl"
    write_export(path, [], "jsonl")
    argv = ["decode", "--protocol", "avro", "--schema-registry", "http://localhost:1"]
    argv += ["--schema-registry-user", "u", "--schema-registry-password-env", "NO_SUCH_VAR_X"]
    assert main([*argv, str(path)]) == 2
    assert "NO_SUCH_VAR_X is not set" in capsys.readouterr().err


def test_run_with_a_mistyped_config_exits_2_naming_file_line_and_key(tmp_path, capsys):
    path = tmp_path / "pipeline.yaml"
    path.write_text("lake: 123\ntopics:\n  orders:\n    protocol: craft\n    partitions: three\n")
    assert main(["run", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path} line 1: lake: expected a path, got 123" in err
    assert f"{path} line 5: topics.orders.partitions: expected a whole number >= 1" in err
    assert "Traceback" not in err


def test_decode_builds_its_topic_with_the_pipelines_factory(tmp_path, monkeypatch):
    """The flags make a TopicConfig: a relative claim-check root is resolved, like the config's."""
    monkeypatch.chdir(tmp_path)
    args = cli._parser().parse_args(
        ["decode", "--protocol", "canal-json", "--compression", "lz4", "--no-tidb-extension",
         "--claim-check-root", "claims", "--option", "a=1", "x.jsonl"]
    )  # fmt: skip
    settings = codec_settings(cli.decode_topic(args))
    assert (settings.compression, settings.enable_tidb_extension) == ("lz4", False)
    assert settings.claim_check.roots == [str(tmp_path.resolve() / "claims")]
    assert settings.options == (("a", 1),)
    args = cli._parser().parse_args(
        ["decode", "--protocol", "avro", "--schema-dir", ".", "--schema", "shop",
         "--column-type", "orders.amount=decimal(12,2)", "x.jsonl"]
    )  # fmt: skip
    settings = codec_settings(cli.decode_topic(args))
    assert settings.upstream_schema == "shop"
    assert settings.column_types == (("orders.amount", "decimal(12,2)"),)


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_decode_with_an_unreachable_registry_says_so_without_the_password(tmp_path, capsys, caplog):
    generated = write_generated(tmp_path, GenerateOptions(protocol="avro", transactions=1))
    url = f"http://lake:Zecret-99@127.0.0.1:{closed_port()}"
    argv = ["decode", "--protocol", "avro", "--schema-registry", url]
    assert main([*argv, *map(str, generated.export_files)]) == 1
    err = capsys.readouterr().err
    assert "could not be reached" in err and "Traceback" not in err
    assert "http://lake:***@127.0.0.1" in caplog.text  # the warning: use password-env
    assert "Zecret-99" not in err + caplog.text


def test_generate_writes_exports_manifest_and_config(tmp_path, capsys):
    out = tmp_path / "gen"
    argv = ["generate", "--out", str(out), "--protocol", "canal-json", "--transactions", "20"]
    argv += ["--partitions", "3", "--format", "kcat", "--file-compression", "gz"]
    argv += ["--compression", "snappy", "--seed", "5"]
    assert main(argv) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["options"]["compression"] == "snappy"
    assert manifest["files"]["exports"] == ["exports/ticdc-canal-json.kcat.jsonl.gz"]
    assert (out / "expected.jsonl").is_file() and (out / "pipeline.yaml").is_file()
    assert "canal-json: 20 transactions" in capsys.readouterr().out
    export = str(out / manifest["files"]["exports"][0])
    assert main(["decode", "--protocol", "canal-json", "--compression", "snappy", export]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == manifest["counts"]["messages"]  # Canal-JSON: one event per message


def test_generate_is_realistic_by_default_and_edge_cases_are_one_option_away(tmp_path, capsys):
    argv = ["generate", "--protocol", "craft", "--transactions", "40", "--seed", "3"]
    assert main([*argv, "--out", str(tmp_path / "default")]) == 0
    manifest = json.loads((tmp_path / "default" / "manifest.json").read_text())
    assert manifest["options"]["profile"] == "realistic"
    assert "shop.customers" in manifest[
        "tables"
    ] and "craft: 40 transactions (realistic profile)" in (capsys.readouterr().out)
    assert main([*argv, "--out", str(tmp_path / "edge"), "--profile", "ddl-heavy"]) == 0
    held = write_generated(
        tmp_path / "held", GenerateOptions("craft", transactions=40, seed=3, profile="ddl-heavy")
    )
    for name in ("expected.jsonl", "manifest.json", *held.manifest["files"]["exports"]):
        assert (tmp_path / "edge" / name).read_bytes() == (held.out_dir / name).read_bytes()


def test_generate_options_out_of_range_are_configuration_errors(tmp_path, capsys):
    argv = ["generate", "--protocol", "craft", "--out", str(tmp_path / "out")]
    for wrong, said in (
        (["--tenants", "0"], "tenants must be from 1 to 1000"),
        (["--tenants", "2", "--profile", "ddl-heavy"], "more than 1 only in the realistic"),
        (["--transactions", "-1"], "transactions must not be negative"),
    ):
        assert main([*argv, *wrong]) == 2
        err = capsys.readouterr().err
        assert said in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_unknown_subcommand_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["bogus"])
    assert exit_info.value.code == 2


# --- run and demo, in-process on the tests' session ---------------------------------------------


def delta_versions(root: Path) -> dict[str, int]:
    return {
        str(log.parent.relative_to(root)): DeltaTable(str(log.parent)).version()
        for log in root.rglob("_delta_log")
    }


@pytest.fixture(scope="module")
def demo(spark, tmp_path_factory):
    """`ticdc-lake demo` with two protocols, then again into the same directory."""
    out = tmp_path_factory.mktemp("demo")
    argv = ["demo", "--out", str(out), "--transactions", "30", "--partitions", "2"]
    argv += ["--protocol", "craft", "--protocol", "avro"]

    def run() -> tuple[int, str]:
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            status = main(argv, spark=spark)
        return status, printed.getvalue()

    first = run()
    versions = delta_versions(out)
    second = run()
    return out, first, second, (versions, delta_versions(out))


def test_demo_runs_every_stage_and_gold_matches(demo):
    out, (status, text), *_ = demo
    assert status == 0, text
    for protocol in ("craft", "avro"):
        assert f"=== {protocol}: sample generated in {out / protocol}/" in text
        assert (out / protocol / "manifest.json").is_file()
        assert (out / protocol / "lake" / "gold" / "shop" / "orders" / "_delta_log").is_dir()
    assert text.count("Check: gold MATCHES the generator's tables at TS") == 2
    assert "DOES NOT MATCH" not in text
    assert "gold matches the generated workload in all 2 protocols" in text
    # Each stage's data-quality checks passed on the clean workload, and each lake has its report.
    for stage, checks in (("quality-bronze", 7), ("quality-silver", 7), ("quality-gold", 8)):
        passed = rf"  {stage} .* batch \d+: {checks} of {checks} checks passed\n"
        assert len(re.findall(passed, text)) == 2
    for protocol in ("craft", "avro"):
        assert (out / protocol / "reports" / "quality.html").is_file()
    manifest = json.loads((out / "craft" / "manifest.json").read_text())
    messages = manifest["counts"]["messages"]
    assert f"{messages:,} records read, {messages:,} added to bronze" in text
    assert "sample-craft: watermark " in text and " UTC; held by ticdc-craft[" in text
    assert "sample-avro: watermark " in text and "avro-enable-watermark" in text
    # Gold rows side by side, as the generator counted them at the last resolved TS.
    lines = [line.split() for line in text.splitlines()]
    assert ["craft", "avro"] in lines and ["mode", "watermark", "watermark"] in lines
    for name, rows in manifest["resolved"][-1]["row_counts"].items():
        assert [name, f"{rows:,}", f"{rows:,}"] in lines, name
    assert f"Lake: {out / 'craft' / 'lake'}" in text
    assert "from deltalake import DeltaTable" in text
    assert f"ticdc-lake run --config {out / 'craft' / 'pipeline.yaml'}" in text


def test_demo_again_reuses_the_sample_adds_nothing_and_still_matches(demo):
    _, _, (status, text), (before, after) = demo
    assert status == 0, text
    assert text.count("sample reused from an earlier demo") == 2
    assert "nothing new (" in text and "nothing new to decode" in text
    assert "nothing new to apply" in text
    assert text.count("Check: gold MATCHES") == 2
    assert len(before) > 20 and after == before


def test_run_takes_stages_in_any_order_and_prints_json(demo, spark, capsys):
    out, *_ = demo
    config = out / "craft" / "pipeline.yaml"
    argv = ["run", "--config", str(config), "--stages", "compact,watermark", "--json"]
    assert main(argv, spark=spark) == 0
    printed = json.loads(capsys.readouterr().out)
    stages = [stage["stage"] for stage in printed["stages"]]
    assert stages == ["watermark", "compact", "quality-gold"]  # gold's checks follow compact
    (feed,) = printed["stages"][1]["result"]["changefeeds"]
    assert feed["name"] == "sample-craft" and feed["noop"] is True
    assert printed["failed"] is False and printed["lake"] == str(out / "craft" / "lake")
    assert main(["run", "--config", str(config), "--stages", "compact"], spark=spark) == 0
    text = capsys.readouterr().out
    assert "  compact " in text and "  land " not in text
    assert "sample-craft: watermark stage not run\n      gold: watermark at TS " in text


class NoSpark:
    def __getattr__(self, name):
        raise AssertionError(f"a stage ran (spark.{name})")


@pytest.mark.parametrize("stages", ["", " ", ",", " , "])
def test_run_refuses_a_stage_list_naming_no_stage(tmp_path, capsys, stages):
    """`--stages ''` (a script's unset variable) is a mistake, not "every stage"."""
    config = tmp_path / "pipeline.yaml"
    config.write_text("topics: {t: {protocol: craft, partitions: 1}}\n")
    argv = ["run", "--config", str(config), "--stages", stages]
    assert main(argv, spark=NoSpark()) == 2
    assert "no stage named; the stages are land, decode" in capsys.readouterr().err
    assert not (tmp_path / "lake").exists()


def test_run_refuses_unknown_stages_and_changefeeds(demo, spark, capsys):
    out, *_ = demo
    config = str(out / "craft" / "pipeline.yaml")
    assert main(["run", "--config", config, "--stages", "land,gold"], spark=spark) == 2
    assert "unknown stage(s) gold; the stages are land, decode" in capsys.readouterr().err
    assert main(["run", "--config", config, "--changefeed", "x"], spark=spark) == 2
    assert "unknown changefeed(s) x" in capsys.readouterr().err


def test_backfill_runs_the_dags_job_and_a_dry_run_writes_nothing(demo, spark, capsys):
    out, *_ = demo
    sample = out / "craft"
    config = ["--config", str(sample / "pipeline.yaml")]
    (state,) = {s.watermark for s in read_state(sample / "lake" / "state" / "gold")}
    whole = ["--start-ts", "1", "--end-ts", str(state)]
    before = delta_versions(out)
    assert main(["backfill", *config, *whole, "--dry-run", "--json"], spark=spark) == 0
    planned = json.loads(capsys.readouterr().out)
    assert planned["dry_run"] is True and planned["plan"]["batches"]
    assert delta_versions(out) == before

    assert main(["backfill", *config, *whole], spark=spark) == 0
    assert "gold tables rewritten" in capsys.readouterr().out
    assert ExpectedGold.from_sample(sample).compare(sample / "lake", state) == []
    after = delta_versions(out)
    assert main(["backfill", *config, *whole], spark=spark) == 0  # done already: no writes
    assert delta_versions(out) == after

    assert main(["backfill", *config, "--start-ts", "9", "--end-ts", "2"], spark=spark) == 2
    assert "configuration error" in capsys.readouterr().err
