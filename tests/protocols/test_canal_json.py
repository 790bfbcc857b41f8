"""Canal-JSON codec: upstream vectors, round trips over every column type, robustness."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import random
import re
import sys
import time
import warnings
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from ticdc_lake.errors import ClaimCheckError, ConfigError, DecodeError
from ticdc_lake.limits import Limits
from ticdc_lake.protocols import CodecSettings, canal_json, make_decoder, make_encoder
from ticdc_lake.protocols.canal_json import (
    CanalJsonDecoder,
    CanalJsonEncoder,
    dumps,
    go_float_text,
)
from ticdc_lake.records import KafkaRecord
from ticdc_lake.sample.cases import BY_NAME, COLUMN_TYPES, make_column, random_value
from ticdc_lake.silver import mysql
from ticdc_lake.silver.claimcheck import ClaimCheckStore
from ticdc_lake.silver.events import Column, DdlEvent, ResolvedEvent, RowEvent

from tests.conftest import load_vector
from tests.speedups import build_extension, extension_built, native_source
from tests.strategies import partition_streams, row_events, without_coordinates

BIN, UNS = mysql.FLAG_BINARY, mysql.FLAG_UNSIGNED
KEY = mysql.FLAG_PRIMARY_KEY | mysql.FLAG_HANDLE_KEY

# The oracle for bare mysqlType names, written out from PROTOCOLS.md §4 and TiDB's TypeToStr.
BARE_NAMES = {
    mysql.TYPE_TINY: "tinyint",
    mysql.TYPE_SHORT: "smallint",
    mysql.TYPE_INT24: "mediumint",
    mysql.TYPE_LONG: "int",
    mysql.TYPE_LONGLONG: "bigint",
    mysql.TYPE_FLOAT: "float",
    mysql.TYPE_DOUBLE: "double",
    mysql.TYPE_NEWDECIMAL: "decimal",
    mysql.TYPE_DATE: "date",
    mysql.TYPE_DATETIME: "datetime",
    mysql.TYPE_TIMESTAMP: "timestamp",
    mysql.TYPE_DURATION: "time",
    mysql.TYPE_YEAR: "year",
    mysql.TYPE_ENUM: "enum",
    mysql.TYPE_SET: "set",
    mysql.TYPE_BIT: "bit",
    mysql.TYPE_JSON: "json",
    mysql.TYPE_VARCHAR: "varchar",
    mysql.TYPE_STRING: "char",
    mysql.TYPE_TINY_BLOB: "tinytext",
    mysql.TYPE_BLOB: "text",
    mysql.TYPE_MEDIUM_BLOB: "mediumtext",
    mysql.TYPE_LONG_BLOB: "longtext",
}
CODES = {name: code for code, name in BARE_NAMES.items()} | {
    "binary": mysql.TYPE_STRING,
    "varbinary": mysql.TYPE_VARCHAR,
    "tinyblob": mysql.TYPE_TINY_BLOB,
    "blob": mysql.TYPE_BLOB,
    "mediumblob": mysql.TYPE_MEDIUM_BLOB,
    "longblob": mysql.TYPE_LONG_BLOB,
}
# Types whose bare name is the whole type: the decoder can keep it as Column.mysql_type.
PARAMETERLESS = {"date", "json", "tinytext", "text", "mediumtext", "longtext"} | {
    "tinyblob",
    "blob",
    "mediumblob",
    "longblob",
}
TEXT_BASES = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set"}


def bare_name(type_code: int, flags: int) -> str:
    name = BARE_NAMES[type_code]
    if mysql.is_binary_string(type_code, flags):
        name = name.replace("text", "blob").replace("char", "binary")
    if flags & UNS and name not in ("bit", "year"):
        name += " unsigned"
    return name


def record(value: bytes | None, offset: int = 0) -> KafkaRecord:
    return KafkaRecord(topic="canal", partition=0, offset=offset, key=None, value=value)


def decode(value: bytes | str, decoder: CanalJsonDecoder | None = None):
    """Decoded twice: the first time fills the table cache, so the second is answered by the
    compiled decoder when it is built (and must agree with the first)."""
    if isinstance(value, str):
        value = value.encode()
    decoder = decoder or CanalJsonDecoder()
    first = decoder.decode(record(value))
    second = decoder.decode(record(value))
    assert repr(second) == repr(first)
    return second


def dml(**fields) -> bytes:
    message = {
        "id": 0,
        "database": "db",
        "table": "t",
        "pkNames": ["a"],
        "isDdl": False,
        "type": "INSERT",
        "es": 1,
        "ts": 2,
        "sql": "",
        "sqlType": {"a": 4},
        "mysqlType": {"a": "int"},
        "old": None,
        "data": [{"a": "1"}],
        "_tidb": {"commitTs": 5 << 18},
    }
    message.update(fields)
    return orjson.dumps(message)


# ---------------------------------------------------------------------------------------------
# Upstream vectors
# ---------------------------------------------------------------------------------------------

COLUMN_VALUE_CASES = load_vector("canal_json/column_value_cases.json")["cases"]


def go_value(case: dict):
    """The test's Go input as an event-model value."""
    text, code = case["go_value_in_test"], case["mysql_type_code"]
    if text == "nil":
        return None
    if number := re.fullmatch(r"u?int64\((\d+)\)", text):
        return int(number.group(1))
    if literal := re.fullmatch(r'\[\]uint8\("(.*)"\)', text):
        raw = literal.group(1).encode()
        return raw if mysql.is_binary_string(code, case["flag"]) else raw.decode()
    value = json.loads(text)
    if code in mysql.INTEGER_TYPES or code == mysql.TYPE_YEAR:
        return int(value)
    if code == mysql.TYPE_FLOAT:
        return mysql.float32(value)
    return value


def wire_text(case: dict) -> str:
    """What TiCDC writes: binary columns carry their UTF-8 bytes as ISO-8859-1 characters
    (the vector's expected string for them is a placeholder, as its notes say)."""
    value = go_value(case)
    if isinstance(value, bytes):
        return value.decode("latin-1")
    return case["expected_canal_json_string"]


@pytest.mark.parametrize("case", COLUMN_VALUE_CASES, ids=lambda case: case["column"])
def test_column_value_cases_decode_to_event_values(case):
    code, flags = case["mysql_type_code"], case["flag"]
    value = None if go_value(case) is None else wire_text(case)
    name = case["column"]
    [event] = decode(
        dml(pkNames=[], mysqlType={name: bare_name(code, flags)}, data=[{name: value}])
    )
    column = event.columns[name]
    assert column.value == go_value(case)
    assert type(column.value) is type(go_value(case))
    assert column.type_code == code
    assert column.flags & UNS == (
        flags & UNS or (UNS if code in (mysql.TYPE_BIT, mysql.TYPE_YEAR) else 0)
    )


@pytest.mark.parametrize("case", COLUMN_VALUE_CASES, ids=lambda case: case["column"])
def test_column_value_cases_encode_as_tiflow(case):
    code, flags = case["mysql_type_code"], case["flag"]
    column = Column(code, flags, go_value(case))
    event = RowEvent(7 << 18, "db", "t", "insert", {"c": column}, None, "t", 0, 0)
    [message] = CanalJsonEncoder().encode([event])
    document = orjson.loads(message.value)
    expected = None if go_value(case) is None else wire_text(case)
    assert document["data"] == [{"c": expected}]
    assert document["mysqlType"] == {"c": bare_name(code, flags)}
    assert document["pkNames"] == (["c"] if flags & mysql.FLAG_PRIMARY_KEY else [])


TYPE_CASES = load_vector("canal_json/mysqltype_sqltype_cases.json")["cases"]


def type_case_column(case: dict, value=None) -> Column:
    parsed = mysql.parse_column_type(case["mysqlType_content_compatible"])
    flags = 0 if parsed.base in TEXT_BASES else BIN
    if parsed.unsigned or parsed.base in ("bit", "year"):
        flags |= UNS
    return Column(CODES[parsed.base], flags, value, case["mysqlType_content_compatible"])


def type_case_value(case: dict, go_text: str):
    """A Go test value as the event model holds it (only integers matter for sqlType)."""
    if number := re.fullmatch(r"u?int64\((\d+)\)", go_text):
        return int(number.group(1))
    if go_text == "nil":
        return None
    if go_text == '"0"':
        return 0
    return "some text"


@pytest.mark.parametrize("case", TYPE_CASES, ids=lambda case: case["column"])
def test_mysql_type_and_sql_type_cases(case):
    column = type_case_column(case)
    event = RowEvent(1 << 18, "db", "t", "insert", {"c": column}, None, "t", 0, 0)
    for content_compatible, expected in (
        (False, case["mysqlType_default"]),
        (True, case["mysqlType_content_compatible"]),
    ):
        settings = CodecSettings(options=(("content_compatible", content_compatible),))
        [message] = CanalJsonEncoder(settings).encode([event])
        assert orjson.loads(message.value)["mysqlType"] == {"c": expected}
    for sample in case.get("sqlType_for_value") or []:
        value = type_case_value(case, sample["value"])
        valued = dataclasses.replace(event, columns={"c": dataclasses.replace(column, value=value)})
        [message] = CanalJsonEncoder().encode([valued])
        assert orjson.loads(message.value)["sqlType"] == {"c": sample["sqlType_code"]}


@pytest.mark.parametrize("case", TYPE_CASES, ids=lambda case: case["column"])
def test_mysql_type_cases_decode_in_both_forms(case):
    expected = type_case_column(case)
    settings = CodecSettings(options=(("content_compatible", True),))
    for type_text, decoder in (
        (case["mysqlType_default"], CanalJsonDecoder()),
        (case["mysqlType_content_compatible"], CanalJsonDecoder(settings)),
    ):
        [event] = decode(dml(pkNames=[], mysqlType={"c": type_text}, data=[{"c": None}]), decoder)
        column = event.columns["c"]
        assert (column.type_code, column.flags) == (expected.type_code, expected.flags)
    assert column.mysql_type == case["mysqlType_content_compatible"]


def test_full_types_are_kept_without_the_option_when_unambiguous():
    types = {"a": "int(11)", "b": "int", "c": "blob", "d": "datetime", "e": "enum('x','y')"}
    data = {"a": "1", "b": "2", "c": "", "d": None, "e": "2"}
    [event] = decode(dml(mysqlType=types, data=[data]))
    kept = {name: column.mysql_type for name, column in event.columns.items()}
    assert kept == {"a": "int(11)", "b": None, "c": "blob", "d": None, "e": "enum('x','y')"}


DOCS = {
    message["name"]: message for message in load_vector("canal_json/docs_examples.json")["messages"]
}


def test_docs_ddl_query_is_decoded_with_its_commit_ts():
    example = DOCS["ddl_drop_database"]
    [event] = decode(example["kafka_value"])
    assert event == DdlEvent(
        commit_ts=example["expected"]["commitTs"],
        schema="test",
        table="",
        query="drop database if exists test",
        ddl_type=mysql.ACTION_DROP_SCHEMA,  # QUERY, recognisable by its first words
        topic="canal",
        partition=0,
        offset=0,
    )


def test_docs_insert_is_decoded_with_typed_values():
    example = DOCS["dml_insert_tp_int"]
    [event] = decode(example["kafka_value"])
    expected = example["expected"]
    assert (event.op, event.schema, event.table) == ("insert", "test", "tp_int")
    assert event.commit_ts == expected["commitTs"]
    assert {name: column.value for name, column in event.columns.items()} == expected["row"]
    assert event.handle_key == tuple(expected["pk"])
    assert event.columns["id"].flags == BIN | KEY
    assert event.columns["c_bigint"].type_code == mysql.TYPE_LONGLONG


def test_docs_watermark_is_a_resolved_event():
    [event] = decode(DOCS["watermark"]["kafka_value"])
    assert event == ResolvedEvent(DOCS["watermark"]["expected"]["watermarkTs"], "canal", 0, 0)


def test_docs_varbinary_round_trips_byte_for_byte():
    example = DOCS["varbinary_iso8859_1_encoding"]
    literal = example["json_string_literal"]
    raw = bytes(example["expected_bytes"])
    value = (
        '{"type":"INSERT","database":"d","table":"t","pkNames":[],"isDdl":false,'
        '"mysqlType":{"c_varbinary":"varbinary"},"old":null,"data":[{"c_varbinary":'
        + literal
        + "}]}"
    )
    [event] = decode(value)
    assert event.columns["c_varbinary"].value == raw
    column = Column(mysql.TYPE_VARCHAR, BIN | mysql.FLAG_NULLABLE, raw, "varbinary(16)")
    row = RowEvent(1 << 18, "d", "t", "insert", {"c_varbinary": column}, None, "t", 0, 0)
    [message] = CanalJsonEncoder().encode([row])
    assert b'"data":[{"c_varbinary":' + literal.encode() + b"}]" in message.value


EMPLOYEE = load_vector("canal_json/employee_insert_update_delete.json")


def test_employee_insert_update_delete_without_extension():
    decoder = CanalJsonDecoder()
    events = [decode(value, decoder)[0] for value in EMPLOYEE["kafka_values"]]
    for event, expected in zip(events, EMPLOYEE["expected_events"], strict=True):
        assert event.op == expected["type"].lower()
        assert event.commit_ts is None  # es is the physical time only; never a commit TS
        image = event.old_columns if event.op == "delete" else event.columns
        typed = dict(expected["data"], id=int(expected["data"]["id"]))
        assert {name: column.value for name, column in image.items()} == typed
        assert event.handle_key == ("id",)
    update = events[1]
    assert {n: c.value for n, c in update.old_columns.items()} == dict(
        EMPLOYEE["expected_events"][1]["old"], id=101
    )
    assert events[2].columns is None


TIFLOW = {
    message["name"]: message
    for message in load_vector("canal_json/tiflow_test_watermark_and_ddl.json")["messages"]
}
FIXED_BUILD_TIME = CodecSettings(options=(("build_time_ms", 1469579899),))


def test_tiflow_watermark_decodes_and_encodes_byte_for_byte():
    compact = TIFLOW["watermark"]["compact_equivalent"]
    [event] = decode(compact)
    assert event == ResolvedEvent(1024, "canal", 0, 0)
    [message] = CanalJsonEncoder(FIXED_BUILD_TIME).encode([event])
    assert message == type(message)(key=None, value=compact.encode())


def test_tiflow_ddl_decodes_and_encodes_byte_for_byte():
    example = TIFLOW["ddl_create_table"]
    [event] = decode(example["compact_equivalent"])
    expected = example["expected"]
    assert event == DdlEvent(
        expected["commitTs"],
        "cdc",
        "person",
        expected["query"],
        mysql.ACTION_CREATE_TABLE,
        "canal",
        0,
        0,
    )
    [message] = CanalJsonEncoder(FIXED_BUILD_TIME).encode([event])
    assert message.value == example["compact_equivalent"].encode()


def test_historical_hyphenated_extension_gives_the_commit_ts():
    vector = load_vector("canal_json/historical_hyphenated_tidb_ext_ddl.json")
    [event] = CanalJsonDecoder().decode(
        KafkaRecord("canal", 0, 9, vector["kafka_key"].encode(), vector["kafka_value"].encode())
    )
    assert event.commit_ts == vector["expected"]["commitTs"]
    assert (event.schema, event.query) == ("gc_safepoint", "CREATE DATABASE gc_safepoint")
    assert event.ddl_type == mysql.ACTION_CREATE_SCHEMA


# ---------------------------------------------------------------------------------------------
# Decoder behaviour
# ---------------------------------------------------------------------------------------------


def test_update_old_with_only_changed_columns_is_completed_from_data():
    types = {"a": "int", "b": "varchar", "c": "double"}
    [event] = decode(
        dml(
            type="UPDATE",
            mysqlType=types,
            data=[{"a": "1", "b": "new", "c": "2.5"}],
            old=[{"b": "old"}],
        )
    )
    assert {n: c.value for n, c in event.old_columns.items()} == {"a": 1, "b": "old", "c": 2.5}
    assert list(event.old_columns) == ["a", "b", "c"]
    assert event.old_columns["a"] is not event.columns["a"]  # separate objects, same value


@pytest.mark.parametrize(
    ("canal_type", "query", "ddl_type"),
    [
        ("CREATE", "create table t (a int)", mysql.ACTION_CREATE_TABLE),
        ("ERASE", "drop table t", mysql.ACTION_DROP_TABLE),
        ("TRUNCATE", "truncate table t", mysql.ACTION_TRUNCATE_TABLE),
        ("ALTER", "alter table t add column b int", None),
        ("RENAME", "rename table t to u", None),
        ("CINDEX", "create index i on t (a)", None),
        ("QUERY", "CREATE  DATABASE IF NOT EXISTS d", mysql.ACTION_CREATE_SCHEMA),
        ("QUERY", "create view v as select 1", None),
    ],
)
def test_ddl_types_map_to_action_types_only_when_unambiguous(canal_type, query, ddl_type):
    value = dml(isDdl=True, type=canal_type, sql=query, pkNames=None, data=None, mysqlType=None)
    [event] = decode(value)
    assert (event.ddl_type, event.query) == (ddl_type, query)


def test_unsigned_bigint_extremes_and_handle_key_only():
    [event] = decode(
        dml(
            mysqlType={"a": "bigint unsigned", "b": "bit"},
            data=[{"a": "18446744073709551615", "b": "0"}],
            _tidb={"commitTs": 1, "onlyHandleKey": True},
        )
    )
    assert event.columns["a"].value == 2**64 - 1
    assert event.columns["a"].flags == BIN | UNS | KEY
    assert event.columns["b"].flags == BIN | UNS
    assert event.handle_key_only


def test_delete_of_old_releases_repeating_the_row_in_old_uses_data():
    row = [{"a": "3"}]
    [event] = decode(dml(type="DELETE", data=row, old=row))
    assert event.columns is None
    assert event.old_columns["a"].value == 3


# ---------------------------------------------------------------------------------------------
# Encoder behaviour
# ---------------------------------------------------------------------------------------------


def test_easyjson_escaping():
    text = '<a>&\b\f\\b\u2028\u2029\x01\x7f\t"é'
    assert dumps({"s": text}) == (
        b'{"s":"\\u003ca\\u003e\\u0026\\u0008\\u000c\\\\b\\u2028\\u2029\\u0001\x7f\\t\\"\xc3\xa9"}'
    )
    assert orjson.loads(dumps({"s": text})) == {"s": text}


@pytest.mark.parametrize(
    ("value", "bits", "text"),
    [
        (mysql.float32(3.14), 32, "3.14"),
        (2.71, 64, "2.71"),
        (1.0, 64, "1"),
        (-0.0, 64, "-0"),
        (1e-7, 64, "0.0000001"),
        (1e21, 64, "1000000000000000000000"),
        (mysql.float32(3.4028234663852886e38), 32, "340282350000000000000000000000000000000"),
        (mysql.float32(1e-45), 32, "0.000000000000000000000000000000000000000000001"),
        (float("nan"), 64, "NaN"),
        (float("-inf"), 64, "-Inf"),
    ],
)
def test_go_float_formatting(value, bits, text):
    assert go_float_text(value, bits) == text


def test_float32_text_reads_back_at_every_power_of_two():
    for exponent in range(-149, 128):
        value = mysql.float32(2.0**exponent)
        assert mysql.float32(float(go_float_text(value, 32))) == value


def test_watermarks_need_the_extension_and_ddl_loses_it():
    ddl = DdlEvent(3 << 18, "d", "t", "truncate table t", mysql.ACTION_TRUNCATE_TABLE, "t", 0, 0)
    plain = CanalJsonEncoder(CodecSettings(enable_tidb_extension=False))
    [message] = plain.encode([ResolvedEvent(9, "t", 0, 0), ddl])
    document = orjson.loads(message.value)
    assert "_tidb" not in document
    assert (document["type"], document["es"]) == ("TRUNCATE", 3)


def test_large_message_handling_needs_its_settings():
    for options in (
        (("large_message_handle", "drop-it"),),
        (("large_message_handle", "handle-key-only"),),
        (("large_message_handle", "claim-check"), ("max_message_bytes", 10)),
    ):
        with pytest.raises(ConfigError):
            CanalJsonEncoder(CodecSettings(options=options))


# ---------------------------------------------------------------------------------------------
# Round trips
# ---------------------------------------------------------------------------------------------

KEPT_DDL_TYPES = {
    mysql.ACTION_CREATE_TABLE: mysql.ACTION_CREATE_TABLE,
    mysql.ACTION_DROP_TABLE: mysql.ACTION_DROP_TABLE,
    mysql.ACTION_TRUNCATE_TABLE: mysql.ACTION_TRUNCATE_TABLE,
}


def canal_view(column: Column, content_compatible: bool) -> Column:
    """What Canal-JSON keeps of a column: type, value, the type-implied flags, the PK."""
    flags = column.flags & (BIN | UNS) | (KEY if column.flags & mysql.FLAG_PRIMARY_KEY else 0)
    kept = content_compatible or column.mysql_type in PARAMETERLESS
    return Column(column.type_code, flags, column.value, column.mysql_type if kept else None)


def expected_events(events, *, extension: bool, content_compatible: bool = False):
    """The events Canal-JSON gives back: the losses listed in docs/protocols.md, nothing else."""
    expected = []
    for event in events:
        if isinstance(event, ResolvedEvent):
            if extension:
                expected.append(event)
            continue
        commit_ts = event.commit_ts if extension else None
        if isinstance(event, DdlEvent):
            ddl_type = KEPT_DDL_TYPES.get(event.ddl_type)
            expected.append(dataclasses.replace(event, commit_ts=commit_ts, ddl_type=ddl_type))
            continue
        images = {}
        for field in ("columns", "old_columns"):
            image = getattr(event, field)
            images[field] = (
                None
                if image is None
                else {
                    name: canal_view(column, content_compatible) for name, column in image.items()
                }
            )
        expected.append(
            dataclasses.replace(event, commit_ts=commit_ts, partition_id=None, **images)
        )
    return expected


def round_trip(events, settings: CodecSettings):
    messages = make_encoder("canal-json", settings).encode(events)
    decoder = make_decoder("canal-json", settings)
    decoded = []
    for offset, message in enumerate(messages):
        assert message.key is None
        decoded.extend(decoder.decode(record(message.value, offset)))
    return without_coordinates(decoded)


ROUND_TRIP_MODES = {
    "extension": (True, ()),
    "no-extension": (False, ()),
    "content-compatible": (True, (("content_compatible", True),)),
    "only-updated-columns": (False, (("only_output_updated_columns", True),)),
}


@pytest.mark.parametrize("mode", ROUND_TRIP_MODES)
@given(events=partition_streams())
def test_round_trip_of_mixed_partition_streams(mode, events):
    extension, options = ROUND_TRIP_MODES[mode]
    settings = CodecSettings(enable_tidb_extension=extension, options=options)
    content_compatible = dict(options).get("content_compatible", False)
    assert round_trip(events, settings) == expected_events(
        events, extension=extension, content_compatible=content_compatible
    )


@given(event=row_events(), codec=st.sampled_from(["snappy", "lz4"]))
def test_round_trip_with_value_compression(event, codec):
    settings = CodecSettings(compression=codec)
    assert round_trip([event], settings) == expected_events([event], extension=True)


def test_compression_setting_must_match():
    [message] = CanalJsonEncoder(CodecSettings(compression="lz4")).encode(
        [ResolvedEvent(5, "t", 0, 0)]
    )
    with pytest.raises(DecodeError, match="snappy"):
        CanalJsonDecoder(CodecSettings(compression="snappy")).decode(record(message.value))
    with pytest.raises(DecodeError, match="not JSON"):
        CanalJsonDecoder().decode(record(message.value))


def every_type_row(seed: int = 7) -> RowEvent:
    rng = random.Random(seed)
    columns = {"id": make_column(BY_NAME["c_bigint"], 42, key=True, nullable=False)}
    for column_type in COLUMN_TYPES:
        columns[column_type.name] = make_column(column_type, random_value(column_type, rng))
    return RowEvent(450_000_000_000_000_000, "shop", "wide", "insert", columns, None, "t", 0, 0)


@pytest.mark.parametrize("codec", ["none", "lz4"])
def test_claim_check_inside_the_roots_is_fetched(tmp_path, codec):
    store = ClaimCheckStore([f"file://{tmp_path}/claims"])
    settings = CodecSettings(
        compression=codec,
        claim_check=store,
        options=(("large_message_handle", "claim-check"), ("max_message_bytes", 256)),
    )
    event = every_type_row()
    [message] = CanalJsonEncoder(settings).encode([event])
    reference = orjson.loads(message.value if codec == "none" else _lz4(message.value))
    assert reference["_tidb"]["claimCheckLocation"].startswith(f"file://{tmp_path}/claims/")
    assert list(reference["data"][0]) == ["id"]  # the reference holds only the handle key
    [decoded] = CanalJsonDecoder(settings).decode(record(message.value))
    assert without_coordinates([decoded]) == expected_events([event], extension=True)


def _lz4(value: bytes) -> bytes:
    from ticdc_lake.compression import decompress
    from ticdc_lake.limits import Limits

    return decompress("lz4", value, Limits())


def test_claim_check_outside_the_roots_is_never_read(tmp_path):
    secret = tmp_path / "secret.json"
    secret.write_text('{"key": null, "value": "eyJ0eXBlIjoiVElEQl9XQVRFUk1BUksifQ=="}')
    store = ClaimCheckStore([f"file://{tmp_path}/claims"])
    decoder = CanalJsonDecoder(CodecSettings(claim_check=store))
    for location in (f"file://{secret}", f"file://{tmp_path}/claims/../secret.json"):
        value = dml(_tidb={"commitTs": 1, "claimCheckLocation": location})
        with pytest.raises(ClaimCheckError, match="outside the configured storage roots") as info:
            decoder.decode(KafkaRecord("canal", 4, 77, None, value))
        assert (info.value.topic, info.value.partition, info.value.offset) == ("canal", 4, 77)


def test_claim_check_without_configured_roots_is_an_error():
    value = dml(_tidb={"commitTs": 1, "claimCheckLocation": "s3://bucket/x.json"})
    with pytest.raises(DecodeError, match="no claim-check storage"):
        decode(value)


def test_claim_check_raw_value_objects(tmp_path):
    (tmp_path / "raw.json").write_bytes(dml(data=[{"a": "8"}]))
    settings = CodecSettings(
        claim_check=ClaimCheckStore([f"file://{tmp_path}"]),
        options=(("claim_check_raw_value", True),),
    )
    value = dml(_tidb={"commitTs": 1, "claimCheckLocation": f"file://{tmp_path}/raw.json"})
    [event] = CanalJsonDecoder(settings).decode(record(value))
    assert event.columns["a"].value == 8


def test_handle_key_only_large_messages():
    settings = CodecSettings(
        options=(("large_message_handle", "handle-key-only"), ("max_message_bytes", 256))
    )
    event = every_type_row()
    [decoded] = round_trip([event], settings)
    assert decoded.handle_key_only
    assert decoded.columns == {"id": Column(mysql.TYPE_LONGLONG, BIN | KEY, 42, None)}


# ---------------------------------------------------------------------------------------------
# Errors and robustness
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"not json", "value is not JSON"),
        (b"[1, 2]", "JSON list, not an object"),
        (dml(type="UPSERT"), "unknown canal-json type 'UPSERT'"),
        (dml(type=None), "type must be a string"),
        (dml(isDdl=True, type="INSERT"), "DDL message .* has type 'INSERT'"),
        (dml(data=[]), "data must be a one-element array"),
        (dml(data=[{"a": "1"}, {"a": "2"}]), "data must be a one-element array"),
        (dml(data={"a": "1"}), "data must be a one-element array"),
        (dml(data=[["1"]]), r"data\[0\] must be an object"),
        (dml(data=[{"a": "x1"}]), r"column 'a': 'x1' is not a valid int value"),
        (dml(data=[{"a": "2147483648"}]), r"column 'a': .* not a valid int value"),
        (dml(data=[{"a": 1}]), "column 'a': value 1 is not a string or null"),
        (dml(data=[{"b": "1"}]), "column 'b' has no mysqlType entry"),
        (dml(mysqlType={"a": "geometry"}), "column 'a': unknown mysqlType 'geometry'"),
        (dml(mysqlType={"a": 3}), "mysqlType of column 'a' is 3"),
        (dml(mysqlType={"a": "varbinary"}, data=[{"a": "\u0100"}]), "column 'a'"),
        (dml(mysqlType={"a": "decimal"}, data=[{"a": "1e5"}]), "column 'a'"),
        (dml(mysqlType={"a": "float"}, data=[{"a": "1e40"}]), "column 'a'"),
        (dml(type="UPDATE", old=[{"a": "y"}]), "column 'a'"),
        (dml(old=[{"a": "1"}]), "INSERT message carries an `old` row"),
        (dml(database=None), "database and table must be strings"),
        (dml(_tidb={"commitTs": -1}), "unsigned 64-bit TSO"),
        (dml(_tidb={"commitTs": True}), "unsigned 64-bit TSO"),
        (dml(type="TIDB_WATERMARK", _tidb=None), "without _tidb.watermarkTs"),
        (dml(isDdl=True, type="QUERY", sql=None), "DDL message has no query text"),
        (dml(isDdl="yes"), "isDdl must be true or false"),
    ],
)
def test_bad_messages_raise_a_clear_decode_error(value, reason):
    with pytest.raises(DecodeError, match=reason) as info:
        CanalJsonDecoder().decode(KafkaRecord("orders", 2, 1234, None, value))
    error = info.value
    assert (error.protocol, error.topic, error.partition, error.offset) == (
        "canal-json",
        "orders",
        2,
        1234,
    )


def test_tombstones_are_an_error():
    with pytest.raises(DecodeError, match="needs a value"):
        CanalJsonDecoder().decode(record(None))


def fuzz_seeds() -> list[bytes]:
    """Valid messages of every kind, in both the default and content-compatible forms."""
    rng = random.Random(11)
    events = []
    for op in ("insert", "update", "delete"):
        row = every_type_row(rng.randrange(1000))
        new = row.columns
        old = {n: dataclasses.replace(c, value=None) if n != "id" else c for n, c in new.items()}
        events.append(
            dataclasses.replace(
                row,
                op=op,
                columns=None if op == "delete" else new,
                old_columns={"insert": None, "update": old, "delete": new}[op],
            )
        )
    events.append(
        DdlEvent(5 << 18, "shop", "wide", "alter table wide add column x int", 5, "t", 0, 0)
    )
    events.append(ResolvedEvent(6 << 18, "t", 0, 0))
    seeds = []
    for options in ((), (("content_compatible", True),)):
        seeds += [
            message.value
            for message in CanalJsonEncoder(CodecSettings(options=options)).encode(events)
        ]
    return seeds


JSON_JUNK = (None, True, 0, -1, 2**64, 1.5, "", "x", "18446744073709551616", [], [{}], {}, {"a": 1})


def mutate(seed: bytes, rng: random.Random) -> bytes:
    kind = rng.randrange(5)
    if kind == 0:  # truncation
        return seed[: rng.randrange(len(seed))]
    if kind == 1:  # bit flips
        data = bytearray(seed)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        return bytes(data)
    if kind == 2:  # random bytes
        return rng.randbytes(rng.randrange(64))
    if kind == 3:  # a byte run copied elsewhere
        start, end = sorted(rng.randrange(len(seed)) for _ in range(2))
        at = rng.randrange(len(seed))
        return seed[:at] + seed[start:end] + seed[at:]
    return _mutate_structure(orjson.loads(seed), rng)


def _mutate_structure(document: dict, rng: random.Random) -> bytes:
    """Valid JSON with one field or value swapped for something of another shape."""
    target = document
    while True:
        keys = list(target) if isinstance(target, dict) else list(range(len(target)))
        if not keys:
            break
        key = rng.choice(keys)
        if isinstance(target[key], (dict, list)) and target[key] and rng.random() < 0.6:
            target = target[key]
            continue
        target[key] = rng.choice(JSON_JUNK)
        break
    return json.dumps(document).encode()  # the stdlib writes integers beyond 64 bits


def test_fuzzed_messages_raise_only_decode_errors_with_coordinates():
    rng = random.Random(20240601)
    seeds = fuzz_seeds()
    decoder = CanalJsonDecoder()
    outcomes = {"events": 0, "errors": 0}
    for offset in range(10_000):
        value = mutate(rng.choice(seeds), rng)
        try:
            events = decoder.decode(KafkaRecord("fuzz", 3, offset, None, value))
        except DecodeError as error:
            assert (error.topic, error.partition, error.offset) == ("fuzz", 3, offset)
            assert error.reason
            outcomes["errors"] += 1
        else:
            assert len(events) == 1
            outcomes["events"] += 1
    assert outcomes["events"] > 500 and outcomes["errors"] > 500, outcomes


def test_a_wide_row_keyed_by_every_column_is_read_in_time_proportional_to_its_columns():
    """pkNames is a list: looked up per column, a 3.5 MB row of 64k columns all in the key took
    14 s; a set makes it a fraction of a second. (Past TiDB's 4096 columns only with
    limits.max-table-columns raised.)"""
    names = [f"c{i}" for i in range(64_000)]
    value = dml(
        pkNames=names,
        sqlType=dict.fromkeys(names, 4),
        mysqlType=dict.fromkeys(names, "int"),
        data=[dict.fromkeys(names, "1")],
    )
    started = time.process_time()
    wide = CodecSettings(limits=Limits(max_table_columns=len(names)))
    (event,) = CanalJsonDecoder(wide).decode(record(value))
    assert time.process_time() - started < 5  # generous: the lookup per column takes 14 s
    assert event.handle_key == tuple(names)


@given(value=st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_float32_text_is_positional_and_reads_back(value):
    text = go_float_text(value, 32)
    assert "e" not in text.lower()
    assert mysql.float32(float(text)) == value


@given(value=st.floats(allow_nan=False, allow_infinity=False))
def test_double_text_is_positional_and_reads_back(value):
    text = go_float_text(value, 64)
    assert "e" not in text.lower() and not text.endswith(".0")
    assert float(text) == value


# ---------------------------------------------------------------------------------------------
# The compiled decoder (_canal_speedups) against the pure-Python reference
# ---------------------------------------------------------------------------------------------

SOURCE = native_source("_canal_speedups")


def _build_speedups(directory: Path):
    return canal_json.configure_speedups(build_extension(SOURCE, directory))


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """The compiled module, or None where no C compiler can build it."""
    if canal_json.SPEEDUPS is not None:
        return canal_json.SPEEDUPS
    try:
        return _build_speedups(tmp_path_factory.mktemp("canal_speedups"))
    except Exception as exc:  # no compiler: the pure-Python decoder is still tested
        warnings.warn(f"canal extension not built, testing pure Python only: {exc}", stacklevel=1)
        return None


@pytest.fixture(scope="module")
def speedups(compiled):
    if compiled is None:
        pytest.skip("the canal-json extension cannot be built here")
    return compiled


class Counting:
    """The compiled module, counting the messages its shortcut answered (not handed back)."""

    def __init__(self, module):
        self.module = module
        self.answered = 0

    def __getattr__(self, name):
        return getattr(self.module, name)

    def row_event(self, *args):
        events = self.module.row_event(*args)
        self.answered += events is not None
        return events


def outcome(decoder: CanalJsonDecoder, value: bytes | None, offset: int = 0):
    """What decoding gives, comparable across decoders: the events' repr (which tells 1 from
    1.0 and -0.0 from 0.0, and keeps NaN equal to itself) or the error's reason and place."""
    try:
        return repr(decoder.decode(KafkaRecord("t", 1, offset, None, value)))
    except DecodeError as error:
        return (type(error).__name__, error.reason, error.byte_offset, error.offset)


class BothPaths:
    """Decodes each value with the reference and, twice (cold, then with the table cached),
    with the compiled decoder; all three must agree. `answered` counts the second decodes the
    compiled shortcut answered itself."""

    def __init__(self, speedups, settings: CodecSettings | None = None):
        self.counting = Counting(speedups)
        self.python = CanalJsonDecoder(settings, speedups=None)
        self.compiled = CanalJsonDecoder(settings, speedups=self.counting)
        self.answered = 0

    def check(self, value: bytes | None, offset: int = 0):
        expected = outcome(self.python, value, offset)
        assert outcome(self.compiled, value, offset) == expected, value
        before = self.counting.answered
        assert outcome(self.compiled, value, offset) == expected, value
        self.answered += self.counting.answered - before
        return expected


def test_speedups_are_used_when_built():
    if extension_built(SOURCE, "ticdc_lake.protocols.native._canal_speedups"):
        assert canal_json.SPEEDUPS is not None
    else:
        assert canal_json.SPEEDUPS is None
    assert CanalJsonDecoder().speedups is canal_json.SPEEDUPS
    assert CanalJsonDecoder(speedups=None).speedups is None


@pytest.mark.parametrize("mode", ROUND_TRIP_MODES)
@given(events=partition_streams())
def test_both_paths_agree_on_round_trips(speedups, mode, events):
    extension, options = ROUND_TRIP_MODES[mode]
    settings = CodecSettings(enable_tidb_extension=extension, options=options)
    paths = BothPaths(speedups, settings)
    for offset, message in enumerate(make_encoder("canal-json", settings).encode(events)):
        paths.check(message.value, offset)
    assert paths.answered == sum(isinstance(event, RowEvent) for event in events)


@given(events=partition_streams(), codec=st.sampled_from(["snappy", "lz4"]))
def test_both_paths_agree_on_compressed_round_trips(speedups, events, codec):
    settings = CodecSettings(compression=codec)
    paths = BothPaths(speedups, settings)
    for offset, message in enumerate(make_encoder("canal-json", settings).encode(events)):
        paths.check(message.value, offset)
    assert paths.answered == sum(isinstance(event, RowEvent) for event in events)


def test_both_paths_agree_on_fuzzed_messages(speedups):
    rng = random.Random(20240601)
    seeds = fuzz_seeds()
    paths = BothPaths(speedups)
    kinds = set()
    for offset in range(10_000):
        kinds.add(type(paths.check(mutate(rng.choice(seeds), rng), offset)))
    assert kinds == {str, tuple}  # events and errors both
    assert paths.answered > 300, paths.answered


# Texts around each fast path's edges: forms the C code converts itself, forms it hands to the
# Python converter (valid or not), and invalid ones.
UNUSUAL_VALUES = {
    "int": [
        "0",
        "-0",
        "007",
        "+5",
        "1_000",
        "\u0663",
        "-",
        "--1",
        "1e3",
        "0x10",
        "2147483647",
        "2147483648",
        "-2147483648",
        "-2147483649",
        "",
        " 5",
        "5 ",
        "1" + "0" * 30,
        "9" * 5000,
    ],
    "tinyint unsigned": ["0", "255", "256", "-0", "-1"],
    "bigint": [
        "9223372036854775807",
        "9223372036854775808",
        "-9223372036854775808",
        "-9223372036854775809",
        "18446744073709551615",
        "18446744073709551616",
    ],
    "bigint unsigned": ["18446744073709551615", "18446744073709551616", "99999999999999999999"],
    "bit": ["0", "18446744073709551615", "-1"],
    "year": ["0", "2155", "2156", "1901"],
    "double": [
        "1.5",
        "-0",
        "-0.0",
        "0.1",
        "2.5e-3",
        "1E5",
        "inf",
        "-Infinity",
        "nan",
        "NaN",
        "1_0.5",
        "1.",
        ".5",
        "+1.5",
        "1e400",
        "-1e400",
        "\u0663.\u0665",
        "9007199254740993",
        "9007199254740992.5",
        "0.30000000000000004",
        "123456789012345.678",
        "4.9e-324",
        "2.4703282292062328e-324",
        "x",
        " 1.5",
        "1.5 ",
        "1.5\x00",
        "1" + "0" * 400,
        "0." + "0" * 30 + "1",
    ],
    "float": [
        "3.14",
        "-0",
        "3.4028235e38",
        "3.4028236e38",
        "3.5e38",
        "1e39",
        "-1e39",
        "1.17549435e-38",
        "1e-46",
        "16777217",
        "0.1",
        "inf",
        "nan",
        "1e400",
        " 1",
    ],
    "decimal": ["1.5", "-1.5", "0", "-0", "1.", ".5", "--1", "1.2.3", "+1", "\u0661", "1e5", ""],
    "varbinary": ["", "abc", "\x00\xe9\xff", "\u0100", "\u20ac", "\U0001f600"],
    "varchar": ["", "\x00", "\u20ac\U0001f600"],
    "datetime": ["2024-01-01 00:00:00", "not checked"],
    "enum": ["1", "0", "65535", "x"],
}


@pytest.mark.parametrize("mysql_type", UNUSUAL_VALUES)
def test_both_paths_agree_on_unusual_values(speedups, mysql_type):
    paths = BothPaths(speedups)
    for text in UNUSUAL_VALUES[mysql_type]:
        paths.check(dml(mysqlType={"a": "int", "b": mysql_type}, data=[{"a": "1", "b": text}]))
    assert paths.answered > 0


DECIMAL_TEXT = st.from_regex(r"\A-?[0-9]{1,20}(\.[0-9]{1,25})?\Z")


@given(texts=st.lists(DECIMAL_TEXT, min_size=1, max_size=20))
def test_compiled_floats_are_the_reference_floats(speedups, texts):
    """The C fast path (Clinger's, for up to 2**53 and 22 decimals) and the dtoa fallback give
    float()'s double and struct's float32 rounding, bit for bit."""
    paths = BothPaths(speedups)
    types = {"d": "double", "f": "float"}
    for text in texts:
        paths.check(dml(pkNames=[], mysqlType=types, data=[{"d": text, "f": text}]))


@pytest.mark.parametrize(
    "fields",
    [
        {"data": [{"b": "x", "a": "1"}]},  # columns in another order than mysqlType
        {"data": [{"a": "1"}]},  # fewer columns than mysqlType
        {"data": [{"a": "1", "b": "x", "c": "2"}]},  # a column without a mysqlType
        {"data": [{"a": "1", "b": 2}]},
        {"type": "UPDATE", "old": [{"b": "old"}]},  # only the changed columns
        {"type": "UPDATE", "old": [{"b": "old", "a": "0"}]},
        {"type": "UPDATE", "old": [{"c": "9"}]},
        {"type": "UPDATE", "old": [{"a": "1", "b": "y"}, {"a": "2"}]},
        {"type": "UPDATE", "old": None},
        {"type": "UPDATE", "old": []},
        {"type": "DELETE", "old": "ignored"},
        {"type": "INSERT", "old": [{"a": "1"}]},
        {"type": "insert"},
        {"type": "WATERMARK"},
        {"type": "TIDB_WATERMARK", "_tidb": {"watermarkTs": 5}},
        {"isDdl": None},
        {"isDdl": 0},
        {"isDdl": True, "type": "QUERY", "sql": "create database d"},
        {"_tidb": None},
        {"_tidb": {}},
        {"_tidb": []},
        {"_tidb": {"commit-ts": 7}},
        {"_tidb": {"commitTs": None, "commit-ts": 8}},
        {"_tidb": {"commitTs": 2**64 - 1, "onlyHandleKey": True}},
        {"_tidb": {"commitTs": 2**63}},
        {"_tidb": {"commitTs": 2**64}},
        {"_tidb": {"commitTs": -1}},
        {"_tidb": {"commitTs": 1.0}},
        {"_tidb": {"commitTs": 1, "onlyHandleKey": 1}},
        {"_tidb": {"commitTs": 1, "claimCheckLocation": "file:///nowhere"}},
        {"_tidb": {"commitTs": 1, "claimCheckLocation": None}},
        {"database": 1},
        {"table": None},
        {"pkNames": ["b"]},
        {"pkNames": None},
        {"pkNames": "a"},
        {"mysqlType": {"b": "varchar", "a": "int"}},  # the same types in another order
        {"mysqlType": {"a": "int", "b": "text"}},
        {"mysqlType": {"a": "int"}},
        {"mysqlType": None},
        {"data": None},
        {"data": [None]},
    ],
    ids=repr,
)
def test_both_paths_agree_on_message_shapes(speedups, fields):
    """Each variant follows a plain message of the same table, so the table is cached and the
    compiled decoder either answers or hands the message back."""
    base = orjson.loads(dml(mysqlType={"a": "int", "b": "varchar"}, data=[{"a": "1", "b": "x"}]))
    paths = BothPaths(speedups)
    paths.check(orjson.dumps(base))
    paths.check(json.dumps(base | fields).encode())  # the stdlib writes integers beyond 64 bits
    paths.check(orjson.dumps(base))
    assert paths.answered >= 2


def test_compiled_decoder_leaks_nothing(speedups):
    """Allocated blocks stay flat over decoding, whether the compiled path answers, hands the
    message back, or raises inside a converter."""
    messages = [
        dml(type=op, mysqlType=types, data=[row], old=old)
        for op, old in (("INSERT", None), ("UPDATE", [{"a": "0"}]), ("DELETE", None))
        for types, row in (
            ({"a": "int", "b": "double", "c": "varbinary"}, {"a": "1", "b": "2.5", "c": "\xff"}),
            ({"a": "int", "b": "float"}, {"a": "+1", "b": "1e39"}),
            ({"a": "int", "b": "decimal"}, {"a": "x", "b": "1."}),
        )
    ] + [b"{", b"[]", dml(type="TIDB_WATERMARK")]
    decoder = CanalJsonDecoder(speedups=Counting(speedups))

    def run():
        for value in messages:
            for offset in range(200):
                with contextlib.suppress(DecodeError):
                    decoder.decode(KafkaRecord("t", 0, offset, None, value))

    run()  # warm every cache
    gc.collect()
    before = sys.getallocatedblocks()
    run()
    gc.collect()
    assert sys.getallocatedblocks() - before < 200
    assert decoder.speedups.answered > 1000


def test_compiled_entry_points_refuse_junk(speedups):
    tables = {}
    decoder = CanalJsonDecoder(speedups=speedups)
    decoder.decode(record(dml()))
    for message in (None, 1, "x", b"", b"{", b"[]", [], {}, {"type": "INSERT"}, bytearray(b"{}")):
        assert speedups.row_event(message, tables, "t", 0, 0) is None
        assert speedups.row_event(message, decoder._tables, "t", 0, 0) is None
    value = orjson.loads(dml())
    assert speedups.row_event(value, None, "t", 0, 0) is None
    for entry in ((), (1, 2, 3, 4), [1, 2, 3, 4], None):
        assert speedups.row_event(value, {("db", "t"): entry}, "t", 0, 0) is None
    with pytest.raises(TypeError):
        speedups.row_event(value, tables)
    with pytest.raises((TypeError, ValueError)):
        speedups.column_plan(99, 1, 0, None, None)
    with pytest.raises(TypeError):
        speedups.column_plan(speedups.KIND_INTEGER, 1, 0, None, None)
    with pytest.raises(ValueError):
        speedups.column_plan(speedups.KIND_INTEGER, 1, 0, None, int, 1, 5)
    with pytest.raises(ValueError):
        speedups.table_plan({"a": "int"}, {})
    with pytest.raises(ValueError):
        speedups.table_plan({"a": 1}, {"a": None})
    with pytest.raises(TypeError):
        speedups.configure(Column, RowEvent, "insert", "update", "delete", None)
    canal_json.configure_speedups(speedups)  # the failed configure left it unconfigured
    [event] = speedups.row_event(dml(), decoder._tables, "canal", 0, 0)
    assert repr(event) == repr(CanalJsonDecoder(speedups=None).decode(record(dml()))[0])
