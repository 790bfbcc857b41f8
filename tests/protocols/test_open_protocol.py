"""TiCDC Open Protocol: the upstream vectors, round trips, large messages and robustness.

The default decoder uses the compiled fast path when it is built; the last section holds it to
the pure-Python reference (built here into a temporary directory when the install did not build
it): same events, value types included, and the same DecodeError on every input.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import random
import struct
import subprocess
import sys
import time
import warnings
from pathlib import Path

import orjson
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ticdc_lake.compression import decompress
from ticdc_lake.errors import ClaimCheckError, ConfigError, DecodeError
from ticdc_lake.limits import Limits
from ticdc_lake.protocols import (
    CodecSettings,
    KafkaMessage,
    make_decoder,
    make_encoder,
    open_protocol,
)
from ticdc_lake.protocols.open_protocol import (
    KAFKA_RECORD_OVERHEAD,
    OpenProtocolDecoder,
    OpenProtocolEncoder,
    go_float32_text,
    go_float64_text,
    go_json,
    split_entries,
)
from ticdc_lake.records import KafkaRecord
from ticdc_lake.sample.cases import BY_NAME, COLUMN_TYPES, make_column, random_value
from ticdc_lake.silver import mysql
from ticdc_lake.silver.claimcheck import ClaimCheckStore
from ticdc_lake.silver.events import (
    DELETE,
    INSERT,
    UPDATE,
    Column,
    DdlEvent,
    ResolvedEvent,
    RowEvent,
)
from ticdc_lake.silver.rows import ChangeRows
from ticdc_lake.silver.values import events_problem

from tests.conftest import VECTORS, load_vector
from tests.protocols.test_go_quote import PROTOCOL_EXAMPLES
from tests.speedups import build_extension, extension_built, native_source
from tests.strategies import partition_streams, row_events, without_coordinates

TOPIC, PARTITION = "tidb-cdc", 3
U64 = struct.Struct(">Q")
BRONZE_BATCH = 5


def record(key: bytes | None, value: bytes | None, offset: int = 42) -> KafkaRecord:
    return KafkaRecord(TOPIC, PARTITION, offset, key, value)


def frame(keys: list, values: list) -> tuple[bytes, bytes]:
    """Open Protocol framing of already-serialised key and value JSON documents."""
    key = U64.pack(1)
    for document in keys:
        data = document if isinstance(document, bytes) else document.encode()
        key += U64.pack(len(data)) + data
    value = b""
    for document in values:
        data = document if isinstance(document, bytes) else document.encode()
        value += U64.pack(len(data)) + data
    return key, value


def decode_hex(key_hex: str, value_hex: str, **settings) -> list:
    decoder = OpenProtocolDecoder(CodecSettings(**settings))
    return decoder.decode(record(bytes.fromhex(key_hex), bytes.fromhex(value_hex)))


def decode_json(key_json: str, value_json: str | None, **settings) -> list:
    key, value = frame([key_json], [value_json or ""])
    return OpenProtocolDecoder(CodecSettings(**settings)).decode(record(key, value))


def values(image: dict[str, Column] | None) -> dict | None:
    return None if image is None else {name: column.value for name, column in image.items()}


def decode_messages(messages: list[KafkaMessage], decoder: OpenProtocolDecoder) -> list:
    events = []
    for offset, message in enumerate(messages):
        events += decoder.decode(record(message.key, message.value, offset))
    return events


# ----------------------------------------------------------------------------------------------
# Every vector file, compared with its expected content
# ----------------------------------------------------------------------------------------------

COVERED_VECTORS = {
    "column_value_examples.json",
    "docs_event_stream_example.json",
    "java_example_ddl_0.json",
    "java_example_ddl_1.json",
    "java_example_ddl_2.json",
    "java_example_row_0.json",
    "java_example_row_1.json",
    "java_example_row_2.json",
    "java_example_rts_0.json",
    "java_example_rts_1.json",
    "java_example_rts_2.json",
    "thirdparty_captured_batch_with_rid.json",
    "ticdc_codec_test_assertions.json",
    "ticdc_encoder_batch_two_messages.json",
}


def test_every_open_protocol_vector_is_covered():
    present = {path.name for path in Path(VECTORS, "open_protocol").glob("*.json")}
    assert present == COVERED_VECTORS


JAVA_VECTORS = sorted(name for name in COVERED_VECTORS if name.startswith("java_example_"))


@pytest.mark.parametrize("name", JAVA_VECTORS)
def test_java_sample_data(name):
    """Old-format samples: N > 1 DDL and resolved events per message, rows without `f`."""
    vector = load_vector(f"open_protocol/{name}")
    expected = vector["expected"]
    events = decode_hex(vector["kafka_key_hex"], vector["kafka_value_hex"])
    assert len(events) == expected["event_count"]
    for index, (event, want) in enumerate(zip(events, expected["events"], strict=True)):
        key, value = want["key"], want["value"]
        assert (event.topic, event.partition, event.offset, event.index) == (
            TOPIC,
            PARTITION,
            42,
            index,
        )
        assert event.commit_ts == key["ts"]
        if key["t"] == 3:
            assert isinstance(event, ResolvedEvent) and value is None
        elif key["t"] == 2:
            assert isinstance(event, DdlEvent)
            assert (event.schema, event.table) == (key["scm"], key["tbl"])
            assert (event.query, event.ddl_type) == (value["q"], value["t"])
        else:
            assert isinstance(event, RowEvent) and event.op == INSERT
            assert (event.schema, event.table) == (key["scm"], key["tbl"])
            assert event.partition_id == key.get("ptn")
            assert event.old_columns is None
            assert {
                name: (column.type_code, column.value) for name, column in event.columns.items()
            } == {name: (column["t"], column["v"]) for name, column in value["u"].items()}


def test_thirdparty_capture_with_rid():
    vector = load_vector("open_protocol/thirdparty_captured_batch_with_rid.json")
    events = decode_hex(
        vector["kafka_key_hex_reconstructed"], vector["kafka_value_hex_reconstructed"]
    )
    assert len(events) == len(vector["expected_events"])
    for index, (event, want) in enumerate(zip(events, vector["expected_events"], strict=True)):
        assert event.index == index
        assert (event.commit_ts, event.schema, event.table, event.op) == (
            want["ts"],
            want["schema"],
            want["table"],
            want["op"],
        )
        assert values(event.columns) == want["new"]
        # `rid` (the deprecated integer handle) is dropped; the handle is the PK column itself.
        assert event.handle_key == ("id",)
        assert event.columns["id"].flags == 11 and event.columns["val"].flags == 64


def test_encoder_batch_vector_decodes():
    vector = load_vector("open_protocol/ticdc_encoder_batch_two_messages.json")
    for message in vector["messages"]:
        events = decode_hex(message["kafka_key_hex"], message["kafka_value_hex"])
        assert [
            (event.commit_ts, event.schema, event.table, event.op, values(event.columns))
            for event in events
        ] == [
            (want["ts"], want["schema"], want["table"], want["op"], want["new"])
            for want in message["expected_events"]
        ]


def test_encoder_reproduces_the_upstream_batch_split_byte_for_byte():
    """ticdc TestEncoderMultipleMessage: max-message-bytes 400 gives 2 rows + 1 row."""
    vector = load_vector("open_protocol/ticdc_encoder_batch_two_messages.json")
    assert vector["config"] == {"max-message-bytes": 400, "max-batch-size": 16}
    a_type = dataclasses.replace(BY_NAME["c_tinyint"], name="a")
    b_type = dataclasses.replace(BY_NAME["c_int"], name="b")
    events = [
        RowEvent(
            1,
            "test",
            "t",
            INSERT,
            {"a": make_column(a_type, a, key=True, nullable=False), "b": make_column(b_type, b)},
            None,
            "t",
            0,
            0,
        )
        for a, b in ((1, 123), (2, 223), (3, 333))
    ]
    settings = CodecSettings(max_batch_size=16, options=(("max_message_bytes", 400),))
    messages = OpenProtocolEncoder(settings).encode(events)
    assert [(message.key.hex(), message.value.hex()) for message in messages] == [
        (message["kafka_key_hex"], message["kafka_value_hex"]) for message in vector["messages"]
    ]


def codec_case(test: str) -> dict:
    cases = load_vector("open_protocol/ticdc_codec_test_assertions.json")["cases"]
    return next(case for case in cases if case["test"] == test)


def expected_basic_row(expected: dict) -> dict:
    """The vector's typed expectations in the event model (hex → bytes, FLOAT via float32)."""
    out = {}
    for field, value in expected.items():
        name, _, kind = field.rpartition("_")
        if kind == "hex":
            out[name] = bytes.fromhex(value)
        elif kind in ("text", "index", "bitmask"):
            out[name] = value
        elif kind in ("name", "names"):
            continue  # ENUM/SET names are not in the message: the DDL has them
        else:
            out[field] = value
    out["i"] = mysql.float32(out["i"])
    return out


def test_basic_type_row_decodes_to_the_typed_expectations():
    case = codec_case("TestBasicType")
    (event,) = decode_hex(case["reconstructed_wire_key_hex"], case["reconstructed_wire_value_hex"])
    assert (event.commit_ts, event.schema, event.table, event.op) == (1, "test", "t", INSERT)
    assert values(event.columns) == expected_basic_row(case["expected_decoded_new_row"])
    assert event.handle_key == ("a",)
    assert event.columns["y"].flags == 193 and event.columns["aa"].flags == 64


def test_basic_type_row_encodes_to_the_asserted_json():
    case = codec_case("TestBasicType")
    (event,) = decode_hex(case["reconstructed_wire_key_hex"], case["reconstructed_wire_value_hex"])
    (message,) = OpenProtocolEncoder().encode([event])
    ((key_json, value_json),) = split_entries(message.key, message.value)
    assert key_json == case["asserted_key_json"].encode()
    # ticdc writes columns in table order, tiflow (and we) sorted by name; every column's JSON
    # text is the same byte for byte, FLOAT 153.123 at float32 precision included.
    assert orjson.loads(value_json) == json.loads(case["asserted_value_json"])
    for name, column in json.loads(case["asserted_value_json"])["u"].items():
        fragment = json.dumps({name: column}, ensure_ascii=False, separators=(",", ":"))[1:-1]
        assert fragment.encode() in value_json


@pytest.mark.parametrize(
    "test", ["TestDMLEvent/insert", "TestDMLEvent/update", "TestDMLEvent/delete"]
)
def test_dml_events_both_ways(test):
    case = codec_case(test)
    (event,) = decode_hex(case["reconstructed_wire_key_hex"], case["reconstructed_wire_value_hex"])
    expected = case["expected"]
    assert event.commit_ts == case["commit_ts"] and event.op == expected["op"]
    assert values(event.columns) == expected.get("new")
    assert values(event.old_columns) == expected.get("old")
    (message,) = OpenProtocolEncoder().encode([event])
    assert message.key.hex() == case["reconstructed_wire_key_hex"]
    assert message.value.hex() == case["reconstructed_wire_value_hex"]


def test_only_updated_columns_old_image_is_completed_from_the_new_one():
    case = codec_case("TestOnlyOutputUpdatedEvent")
    (event,) = decode_json('{"ts":2,"scm":"test","tbl":"t","t":1}', case["asserted_value_json"])
    expected = case["expected"]
    new = {
        name.removesuffix("_hex"): bytes.fromhex(value) if name.endswith("_hex") else value
        for name, value in expected["new"].items()
    }
    assert event.op == UPDATE and values(event.columns) == new
    assert values(event.old_columns) == new | expected["old_changed_only"]
    assert list(event.old_columns) == list(event.columns)
    # and back: with the option on, `p` shrinks to the changed columns again, byte for byte
    settings = CodecSettings(options=(("only_output_updated_columns", True),))
    (message,) = OpenProtocolEncoder(settings).encode([event])
    ((_, value_json),) = split_entries(message.key, message.value)
    assert value_json == case["asserted_value_json"].encode()


def test_handle_key_only_event_both_ways():
    case = codec_case("TestHandleOnlyEvent")
    (event,) = decode_hex(case["reconstructed_wire_key_hex"], case["reconstructed_wire_value_hex"])
    assert event.handle_key_only and event.op == INSERT
    assert values(event.columns) == case["expected"]["new_partial"]
    (message,) = OpenProtocolEncoder().encode([event])
    assert message.key.hex() == case["reconstructed_wire_key_hex"]
    assert message.value.hex() == case["reconstructed_wire_value_hex"]


def test_ddl_and_resolved_events_both_ways():
    ddl_case, resolved_case = codec_case("TestDDLEvent"), codec_case("TestResolvedTsEvent")
    (ddl,) = decode_hex(
        ddl_case["reconstructed_wire_key_hex"], ddl_case["reconstructed_wire_value_hex"]
    )
    expected = ddl_case["expected"]
    assert isinstance(ddl, DdlEvent)
    assert (ddl.commit_ts, ddl.schema, ddl.table, ddl.query, ddl.ddl_type) == (
        expected["ts"],
        expected["schema"],
        expected["table"],
        expected["query"],
        expected["ddl_type"],
    )
    (resolved,) = decode_hex(
        resolved_case["reconstructed_wire_key_hex"], resolved_case["reconstructed_wire_value_hex"]
    )
    assert resolved == ResolvedEvent(12345678, TOPIC, PARTITION, 42, 0)
    messages = OpenProtocolEncoder().encode([ddl, resolved])
    assert [(message.key.hex(), message.value.hex()) for message in messages] == [
        (case["reconstructed_wire_key_hex"], case["reconstructed_wire_value_hex"])
        for case in (ddl_case, resolved_case)
    ]
    assert len(messages[1].value) == resolved_case["asserted_value_length"]


def doc_example_value(example: dict):
    """What a docs-table column decodes to: the stated bytes/text, else the JSON value itself."""
    if "decoded_bytes_hex" in example:
        return bytes.fromhex(example["decoded_bytes_hex"])
    if "decoded_utf8" in example:
        return example["decoded_utf8"]
    column = json.loads(example["column_json"])
    if column["t"] == mysql.TYPE_FLOAT:
        return mysql.float32(column["v"])
    return column["v"]


@pytest.mark.parametrize(
    "example",
    load_vector("open_protocol/column_value_examples.json")["doc_examples"],
    ids=lambda example: example["type"],
)
def test_docs_column_table(example):
    """The docs' per-type table: no `f`, Go-escaped binary, base64 TEXT/BLOB."""
    (event,) = decode_json(
        '{"ts":1,"scm":"s","tbl":"t","t":1}', f'{{"u":{{"c":{example["column_json"]}}}}}'
    )
    column = event.columns["c"]
    assert column.type_code == example["code"]
    assert column.value == doc_example_value(example)
    # Bytes come out flagged binary, so the event agrees with itself.
    assert bool(column.flags & mysql.FLAG_BINARY) == isinstance(column.value, bytes)


@pytest.mark.parametrize(
    "example",
    load_vector("open_protocol/column_value_examples.json")["test_derived"],
    ids=lambda example: example["test"],
)
def test_tiflow_column_tests_both_ways(example):
    given_input = example["input"]
    flag = given_input["flag"]
    if "value_utf8" in given_input:
        value = given_input["value_utf8"]
    else:
        raw = bytes.fromhex(given_input["value_bytes_hex"])
        value = raw if flag & mysql.FLAG_BINARY else raw.decode()
    (event,) = decode_json('{"ts":1,"scm":"s","tbl":"t","t":1}', example["value_json"])
    assert event.columns == {given_input["name"]: Column(given_input["mysql_type"], flag, value)}
    (message,) = OpenProtocolEncoder().encode([event])
    ((_, value_json),) = split_entries(message.key, message.value)
    assert value_json == example["value_json"].encode()


def test_docs_event_stream():
    """The docs' 14 logged events: pre-v4.0.5 base64 VARCHAR, no `f`, deletes with keys only."""
    vector = load_vector("open_protocol/docs_event_stream_example.json")
    assert len(vector["events"]) == 14
    for logged in vector["events"]:
        key = bytes.fromhex(logged["derived_single_event_wire_key_hex"])
        value = bytes.fromhex(logged["derived_single_event_wire_value_hex"])
        ((key_json, value_json),) = split_entries(key, value)
        assert key_json == logged["key_json"].encode()
        assert value_json == (logged["value_json"] or "").encode()
        (event,) = OpenProtocolDecoder().decode(record(key, value, logged["log_no"]))
        key_doc = json.loads(logged["key_json"])
        assert event.commit_ts == key_doc["ts"]
        if key_doc["t"] == 3:
            assert isinstance(event, ResolvedEvent)
        elif key_doc["t"] == 2:
            query = json.loads(logged["value_json"])
            assert (event.schema, event.table, event.query, event.ddl_type) == (
                "test",
                "t1",
                query["q"],
                3,
            )
        elif "u" in json.loads(logged["value_json"]):
            text = logged["note"].rsplit(": ", 1)[1]
            assert event.op == INSERT and event.handle_key == ("id",)
            assert values(event.columns) == {"id": event.columns["id"].value, "val": text}
        else:
            assert event.op == DELETE and list(event.old_columns) == ["id"]


# ----------------------------------------------------------------------------------------------
# Decoder behaviour beyond the vectors
# ----------------------------------------------------------------------------------------------

ROW_KEY = '{"ts":7,"scm":"s","tbl":"t","t":1}'


def test_mixed_batch_of_every_event_type():
    key, value = frame(
        [ROW_KEY, '{"ts":8,"scm":"s","tbl":"t","t":2}', '{"ts":9,"t":3}', ROW_KEY],
        [
            '{"u":{"id":{"t":8,"h":true,"f":11,"v":1}}}',
            '{"q":"TRUNCATE TABLE t","t":11}',
            "",
            '{"d":{"id":{"t":8,"h":true,"f":11,"v":1}}}',
        ],
    )
    events = OpenProtocolDecoder().decode(record(key, value))
    assert [(event.kind, event.index, event.commit_ts) for event in events] == [
        ("row", 0, 7),
        ("ddl", 1, 8),
        ("resolved", 2, 9),
        ("row", 3, 7),
    ]
    assert events[1].ddl_type == mysql.ACTION_TRUNCATE_TABLE


def test_unsigned_extremes_and_partition_id():
    (event,) = decode_json(
        '{"ts":18446744073709551615,"scm":"s","tbl":"t","ptn":104,"t":1}',
        '{"u":{"u":{"t":8,"f":193,"v":18446744073709551615},"b":{"t":16,"f":193,"v":1023},'
        '"s":{"t":8,"f":65,"v":-9223372036854775808}}}',
    )
    assert event.commit_ts == mysql.UINT64_MAX and event.partition_id == 104
    assert values(event.columns) == {"u": mysql.UINT64_MAX, "b": 1023, "s": -(2**63)}


def test_update_without_old_value_reads_as_insert():
    (event,) = decode_json(ROW_KEY, '{"u":{"id":{"t":3,"h":true,"f":11,"v":5}}}')
    assert event.op == INSERT and event.old_columns is None


def test_ticdc_claim_check_key_with_ohk_twice_is_followed(tmp_path):
    store = ClaimCheckStore([f"file://{tmp_path}"])
    full_key, full_value = frame(
        [ROW_KEY],
        ['{"u":{"id":{"t":3,"h":true,"f":11,"v":5},"big":{"t":252,"f":64,"v":"aGVsbG8="}}}'],
    )
    location = store.store(full_key, full_value)
    ticdc_key = f'{{"ts":7,"scm":"s","tbl":"t","t":1,"ohk":true,"ohk":false,"ccl":"{location}"}}'
    key, value = frame(
        [ROW_KEY, ticdc_key],
        [
            '{"u":{"id":{"t":3,"h":true,"f":11,"v":4}}}',
            '{"u":{"id":{"t":3,"h":true,"f":11,"v":5}}}',
        ],
    )
    events = OpenProtocolDecoder(CodecSettings(claim_check=store)).decode(record(key, value))
    assert [event.index for event in events] == [0, 1]
    assert values(events[1].columns) == {"id": 5, "big": "hello"}
    assert not events[1].handle_key_only


def test_claim_check_outside_the_roots_is_refused_with_coordinates(tmp_path):
    writer = ClaimCheckStore([f"file://{tmp_path}/elsewhere"])
    location = writer.store(*frame([ROW_KEY], ['{"u":{"id":{"t":3,"f":11,"v":5}}}']))
    key, value = frame([ROW_KEY.replace("}", f',"ccl":"{location}"}}')], ['{"u":{}}'])
    reader = ClaimCheckStore([f"file://{tmp_path}/claims"])
    with pytest.raises(ClaimCheckError, match="outside the configured storage roots") as raised:
        OpenProtocolDecoder(CodecSettings(claim_check=reader)).decode(record(key, value))
    assert (raised.value.topic, raised.value.partition, raised.value.offset) == (
        TOPIC,
        PARTITION,
        42,
    )


def test_claim_check_without_a_store_says_so():
    key, value = frame([ROW_KEY.replace("}", ',"ccl":"s3://bucket/x.json"}')], ['{"u":{}}'])
    with pytest.raises(DecodeError, match="no claim-check storage roots are configured"):
        OpenProtocolDecoder().decode(record(key, value))


# ----------------------------------------------------------------------------------------------
# Clear errors
# ----------------------------------------------------------------------------------------------


def assert_decode_error(key: bytes | None, value: bytes | None, match: str, byte_offset=None):
    with pytest.raises(DecodeError, match=match) as raised:
        OpenProtocolDecoder().decode(record(key, value, offset=99))
    error = raised.value
    assert (error.protocol, error.topic, error.partition, error.offset) == (
        "open-protocol",
        TOPIC,
        PARTITION,
        99,
    )
    if byte_offset is not None:
        assert error.byte_offset == byte_offset
    return error


def test_wrong_version():
    key, value = frame([ROW_KEY], ['{"u":{}}'])
    assert_decode_error(U64.pack(2) + key[8:], value, "unsupported batch version 2", 0)


def test_truncated_key():
    key, value = frame([ROW_KEY, ROW_KEY], ['{"u":{}}', '{"u":{}}'])
    error = assert_decode_error(key[:-5], value, f"truncated key: entry 1 declares {len(ROW_KEY)}")
    assert error.byte_offset == 8 + 8 + len(ROW_KEY)
    assert_decode_error(key[:12], value, r"truncated key: entry 0 needs an 8-byte length", 8)
    assert_decode_error(key[:5], value, "shorter than the 8-byte batch version", 0)


def test_value_count_mismatch():
    key, value = frame([ROW_KEY, ROW_KEY], ['{"u":{}}', '{"u":{}}'])
    one_key, _ = frame([ROW_KEY], [])
    assert_decode_error(one_key, value, "value count mismatch: the key holds 1 entries")
    _, one_value = frame([], ['{"u":{}}'])
    assert_decode_error(key, one_value, "value count mismatch: key entry 1 has no value entry")


@pytest.mark.parametrize(
    ("key_json", "value_json", "match"),
    [
        (ROW_KEY, '{"u":{"c":{"t":3,"f":65,"v":"12a"}}}', r"`u`.'c': type 3 needs a JSON integer"),
        (ROW_KEY, '{"u":{"c":{"t":252,"f":65,"v":"not base64!"}}}', r"'c': TEXT/BLOB .* base64"),
        (ROW_KEY, '{"u":{"c":{"t":15,"f":65,"v":"\\\\q"}}}', r"'c': .*unknown escape"),
        (ROW_KEY, '{"u":{"c":{"t":200,"f":0,"v":1}}}', "unknown column type code 200"),
        (ROW_KEY, '{"u":{"c":{"t":3,"f":65}}}', "column object lacks 'v'"),
        (ROW_KEY, '{"u":{"c":[3,65,1]}}', "a column must be a JSON object"),
        (ROW_KEY, '{"x":{}}', "neither `u` nor `d`"),
        (ROW_KEY, "", "row event but its value is empty"),
        ('{"ts":1,"t":3}', '{"u":{}}', "resolved event but its value is 8 bytes"),
        ('{"ts":1,"t":4}', "", "unknown event type t=4"),
        ('{"ts":-1,"t":3}', "", "`ts` must be a uint64"),
        ('{"ts":1,"scm":"s","t":2}', '{"q":5,"t":3}', "`q` must be the query string"),
        ("[1]", "", "key entry 0 is not a JSON object"),
    ],
)
def test_bad_content_names_the_problem(key_json, value_json, match):
    key, value = frame([key_json], [value_json])
    assert_decode_error(key, value, match)


def test_missing_key():
    assert_decode_error(None, b"", "record has no key")


def test_wrong_compression_setting_is_a_decode_error():
    key, value = frame([ROW_KEY], ['{"u":{"id":{"t":3,"f":11,"v":5}}}'])
    with pytest.raises(DecodeError, match="looks like plain JSON"):
        OpenProtocolDecoder(CodecSettings(compression="snappy")).decode(record(key, value))


# ----------------------------------------------------------------------------------------------
# Encoder
# ----------------------------------------------------------------------------------------------


def simple_row(i: int, text: str = "x", op: str = INSERT) -> RowEvent:
    image = {
        "id": make_column(BY_NAME["c_bigint"], i, key=True, nullable=False),
        "note": make_column(BY_NAME["c_text"], text),
    }
    old = dict(image) if op != INSERT else None
    return RowEvent(
        100 + i, "s", "t", op, None if op == DELETE else image, old, TOPIC, PARTITION, 0
    )


def test_rows_batch_up_to_max_batch_size_and_ddl_resolved_stand_alone():
    events = [simple_row(i) for i in range(20)]
    events.insert(5, DdlEvent(200, "s", "t", "TRUNCATE TABLE t", 11, TOPIC, PARTITION, 0))
    events.append(ResolvedEvent(300, TOPIC, PARTITION, 0))
    messages = OpenProtocolEncoder(CodecSettings(max_batch_size=4)).encode(events)
    sizes = [len(split_entries(message.key, message.value)) for message in messages]
    assert sizes == [4, 1, 1, 4, 4, 4, 3, 1]
    assert model(decode_messages(messages, OpenProtocolDecoder())) == model(events)


def test_batches_respect_max_message_bytes():
    limit = 2_000
    events = [simple_row(i, "y" * (i * 7 % 300)) for i in range(60)]
    settings = CodecSettings(max_batch_size=64, options=(("max_message_bytes", limit),))
    messages = OpenProtocolEncoder(settings).encode(events)
    assert len(messages) > 5
    for message in messages:
        assert len(message.key) + len(message.value) + KAFKA_RECORD_OVERHEAD <= limit
    assert model(decode_messages(messages, OpenProtocolDecoder())) == model(events)


@pytest.mark.parametrize("codec", ["none", "snappy", "lz4"])
def test_compression_applies_to_each_value_never_to_keys(codec):
    events = [simple_row(i, "compressible " * 20) for i in range(3)]
    settings = CodecSettings(compression=codec)
    (message,) = OpenProtocolEncoder(settings).encode(events)
    for key_json, value_json in split_entries(message.key, message.value):
        assert orjson.loads(key_json)["t"] == 1
        assert "u" in orjson.loads(decompress(codec, value_json, Limits()))
    decoded = OpenProtocolDecoder(settings).decode(record(message.key, message.value))
    assert model(decoded) == model(events)


def test_delete_only_handle_key_and_no_old_value_options():
    settings = CodecSettings(
        options=(("delete_only_output_handle_key_columns", True), ("output_old_value", False))
    )
    messages = OpenProtocolEncoder(settings).encode(
        [simple_row(1, op=DELETE), simple_row(2, op=UPDATE)]
    )
    deleted, updated = decode_messages(messages, OpenProtocolDecoder())
    assert deleted.op == DELETE and values(deleted.old_columns) == {"id": 1}
    assert updated.op == INSERT and updated.old_columns is None  # indistinguishable without `p`


def test_large_message_handle_key_only():
    settings = CodecSettings(
        options=(("max_message_bytes", 300), ("large_message_handle_option", "handle_key_only"))
    )
    small, big = simple_row(1), simple_row(2, "z" * 1000)
    messages = OpenProtocolEncoder(settings).encode([small, big])
    first, second = decode_messages(messages, OpenProtocolDecoder())
    assert not first.handle_key_only and values(first.columns) == values(small.columns)
    assert second.handle_key_only and values(second.columns) == {"id": 2}


def test_large_message_claim_check_round_trip(tmp_path):
    store = ClaimCheckStore([f"file://{tmp_path}/claims"])
    settings = CodecSettings(
        compression="lz4",
        claim_check=store,
        options=(("max_message_bytes", 300), ("large_message_handle_option", "claim_check")),
    )
    big = simple_row(2, random.Random(1).randbytes(600).hex(), op=UPDATE)  # lz4 cannot shrink it
    (message,) = OpenProtocolEncoder(settings).encode([big])
    ((key_json, value_json),) = split_entries(message.key, message.value)
    location = orjson.loads(key_json)["ccl"]
    assert location.startswith(f"file://{tmp_path}/claims/") and "ohk" not in orjson.loads(key_json)
    assert set(orjson.loads(decompress("lz4", value_json, Limits()))["u"]) == {"id"}
    assert len(list((tmp_path / "claims").iterdir())) == 1
    (decoded,) = OpenProtocolDecoder(settings).decode(record(message.key, message.value))
    assert model([decoded]) == model([big])


def test_encoder_configuration_errors(tmp_path):
    with pytest.raises(ConfigError, match="large_message_handle_option"):
        OpenProtocolEncoder(CodecSettings(options=(("large_message_handle_option", "drop"),)))
    with pytest.raises(ConfigError, match=r"needs settings\.claim_check"):
        OpenProtocolEncoder(
            CodecSettings(options=(("large_message_handle_option", "claim_check"),))
        )
    encoder = OpenProtocolEncoder(CodecSettings(options=(("max_message_bytes", 200),)))
    with pytest.raises(ConfigError, match="above max_message_bytes 200"):
        encoder.encode([simple_row(1, "z" * 500)])


def test_registry_builds_these_classes():
    assert isinstance(make_decoder("open-protocol"), OpenProtocolDecoder)
    assert isinstance(make_encoder("open-protocol"), OpenProtocolEncoder)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (153.123, b"153.123"),
        (1e21, b"1e+21"),
        (1e20, b"100000000000000000000"),
        (1e-7, b"1e-7"),
        (1.5e-10, b"1.5e-10"),
        (0.000001, b"0.000001"),
        (-0.0, b"-0"),
        (100.0, b"100"),
        (5e-324, b"5e-324"),
        (1.7976931348623157e308, b"1.7976931348623157e+308"),
    ],
)
def test_double_text_is_what_go_prints(value, text):
    assert go_float64_text(value) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (153.123, b"153.123"),
        (0.1, b"0.1"),
        (16777216.0, b"16777216"),
        (3.4028234663852886e38, b"3.4028235e+38"),
        (1e-45, b"1e-45"),
        (mysql.float32(1e-6), b"0.000001"),
        (1e-7, b"1e-7"),
    ],
)
def test_float_text_is_what_go_prints_for_float32(value, text):
    assert go_float32_text(value) == text


@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_float32_text_is_shortest_and_exact(value):
    text = go_float32_text(value)
    assert mysql.float32(float(text)) == value
    assert len(text.lstrip(b"-").split(b"e")[0].replace(b".", b"").strip(b"0")) <= 9


def test_go_json_escapes_html_like_go():
    assert go_json({"q": "a<b>&c\u2028"}) == b'{"q":"a\\u003cb\\u003e\\u0026c\\u2028"}'


# ----------------------------------------------------------------------------------------------
# Round trips over every column type
# ----------------------------------------------------------------------------------------------


def model(events: list) -> list:
    """Events as the Open Protocol carries them: no coordinates, no `mysql_type` text."""
    out = []
    for event in without_coordinates(events):
        if isinstance(event, RowEvent):
            event = dataclasses.replace(
                event,
                columns=plain_image(event.columns),
                old_columns=plain_image(event.old_columns),
            )
        out.append(event)
    return out


def plain_image(image):
    if image is None:
        return None
    return {name: dataclasses.replace(column, mysql_type=None) for name, column in image.items()}


def round_trip(events: list, settings: CodecSettings) -> list:
    messages = OpenProtocolEncoder(settings).encode(events)
    return decode_messages(messages, OpenProtocolDecoder(settings))


@given(partition_streams())
def test_round_trip_partition_streams(events):
    assert model(round_trip(events, CodecSettings())) == model(events)


@settings(max_examples=25, suppress_health_check=[HealthCheck.too_slow])
@given(partition_streams(max_size=8), st.sampled_from(["snappy", "lz4"]), st.integers(1, 5))
def test_round_trip_compressed_small_batches(events, codec, batch_size):
    settings = CodecSettings(compression=codec, max_batch_size=batch_size)
    assert model(round_trip(events, settings)) == model(events)


def only_updated_expectation(event: RowEvent) -> RowEvent:
    """What a decoder can know with only-output-updated-columns: an update whose columns all kept
    their values sends no `p`, and reads as an insert."""
    if event.op == UPDATE and all(
        event.old_columns[name].value == column.value for name, column in event.columns.items()
    ):
        return dataclasses.replace(event, op=INSERT, old_columns=None)
    return event


@given(st.lists(row_events(ops=(UPDATE,)), min_size=1, max_size=6))
def test_round_trip_only_updated_columns(events):
    settings = CodecSettings(options=(("only_output_updated_columns", True),))
    expected = [only_updated_expectation(event) for event in events]
    assert model(round_trip(events, settings)) == model(expected)


@pytest.mark.parametrize("column_type", COLUMN_TYPES, ids=lambda column_type: column_type.name)
def test_every_column_type_round_trips_its_edge_values(column_type):
    rng = random.Random(column_type.name)
    image = {"id": make_column(BY_NAME["c_bigint"], 1, key=True, nullable=False)}
    for i in range(40):
        image[f"v{i}"] = make_column(column_type, random_value(column_type, rng))
    image["null"] = make_column(column_type, None)
    event = RowEvent(5, "s", "t", INSERT, image, None, TOPIC, PARTITION, 0)
    assert model(round_trip([event], CodecSettings())) == model([event])


# ----------------------------------------------------------------------------------------------
# Defaults TiCDC before tiflow #10804 sent as TiDB stores them
# ----------------------------------------------------------------------------------------------

# (canonical column, the text TiDB stores for its default, the value TiDB reads from it). Older
# TiCDC put the text in any image of a row written before the column was added: mostly an
# update's `p` and a delete's `d`, an insert's `u` when TiDB amended a transaction across the
# ALTER TABLE.
STORED_DEFAULTS = [
    ("c_tinyint", "-128", -128),
    ("c_tinyint_unsigned", "255", 255),
    ("c_bool", "1", 1),
    ("c_smallint", "-32768", -32768),
    ("c_smallint_unsigned", "65535", 65535),
    ("c_mediumint", "-8388608", -8388608),
    ("c_mediumint_unsigned", "16777215", 16777215),
    ("c_int", "5", 5),
    ("c_int", "-0", 0),
    ("c_int_unsigned", "4294967295", 4294967295),
    ("c_bigint", "-9223372036854775808", -(2**63)),
    ("c_bigint_unsigned", "18446744073709551615", 2**64 - 1),
    # TiDB prints FLOAT and DOUBLE defaults without an exponent; older releases kept the literal.
    ("c_float", "1.1", mysql.float32(1.1)),
    ("c_float", "340282350000000000000000000000000000000", mysql.float32(3.4028235e38)),
    ("c_float", "-0.5", -0.5),
    ("c_double", "0.1", 0.1),
    ("c_double", "-0.0000001", -1e-7),
    ("c_double", "1.5e300", 1.5e300),
    ("c_double", "5", 5.0),
    ("c_double", "0." + "0" * 323 + "5", 5e-324),
    # YEAR: the literal's digits, read as TiDB reads a string into a YEAR.
    ("c_year", "2020", 2020),
    ("c_year", "1901", 1901),
    ("c_year", "20", 2020),
    ("c_year", "69", 2069),
    ("c_year", "70", 1970),
    ("c_year", "0", 2000),
    ("c_year", "0000", 0),
    # BIT: the big-endian bytes of the value, as Go's JSON encoder writes a Go string of them.
    ("c_bit", "\x02\x01", 513),
    ("c_bit", "\x00\x00\x05", 5),
    ("c_bit", "", 0),
    ("c_bit", "5", 0x35),
    # ENUM and SET: the member names; the Open Protocol has no members to index them by.
    ("c_enum", "b", "b"),
    ("c_enum", "", 0),
    ("c_set", "x,z", "x,z"),
    ("c_set", "", 0),
]


def stored_default_message(name: str, text: str, image: str) -> KafkaMessage:
    """One row as the project's encoder writes it, then with column `c` of `image` (`u`, `p`
    or `d`) holding `text` as TiCDC before #10804 sent a default."""
    column_type = BY_NAME[name]
    placeholder = random_value(column_type, random.Random(name))
    row = {
        "id": make_column(BY_NAME["c_int"], 1, key=True, nullable=False),
        "c": make_column(column_type, placeholder),
    }
    op = {"u": INSERT, "p": UPDATE, "d": DELETE}[image]
    new = None if op == DELETE else row
    old = None if op == INSERT else row
    (message,) = OpenProtocolEncoder().encode([RowEvent(7, "s", "t", op, new, old, TOPIC, 0, 0)])
    ((key_json, value_json),) = split_entries(message.key, message.value)
    document = orjson.loads(value_json)
    document[image]["c"]["v"] = text
    return KafkaMessage(*frame([key_json], [go_json(document)]))


def image_of(event: RowEvent, image: str) -> dict[str, Column]:
    return event.old_columns if image in ("p", "d") else event.columns


@pytest.mark.parametrize("image", ["p", "d", "u"])
@pytest.mark.parametrize(("name", "text", "expected"), STORED_DEFAULTS)
def test_a_default_sent_as_stored_text_decodes_to_the_value_tidb_holds(name, text, expected, image):
    message = stored_default_message(name, text, image)
    for decoder in (OpenProtocolDecoder(), OpenProtocolDecoder(speedups=None)):
        (event,) = decoder.decode(record(message.key, message.value))
        column = image_of(event, image)["c"]
        assert exact(column.value) == exact(expected)
        assert column.type_code == BY_NAME[name].type_code


def test_the_issue_example_an_update_whose_old_image_holds_an_added_int_as_text():
    (event,) = decode_json(
        ROW_KEY,
        '{"u":{"id":{"t":3,"h":true,"f":11,"v":1},"priority":{"t":3,"f":1,"v":5}},'
        '"p":{"id":{"t":3,"h":true,"f":11,"v":1},"priority":{"t":3,"f":1,"v":"5"}}}',
    )
    assert event.op == UPDATE
    assert values(event.old_columns) == {"id": 1, "priority": 5}
    assert type(event.old_columns["priority"].value) is int


@pytest.mark.parametrize(("name", "text", "expected"), STORED_DEFAULTS)
def test_a_default_sent_as_stored_text_decodes_the_same_in_both(speedups, name, text, expected):
    """The compiled reader leaves such text to Python (it never takes it as the value as it
    stands, nor writes it into silver's buffers); both give the same events."""
    messages = [stored_default_message(name, text, image) for image in ("p", "d", "u")]
    rows = ChangeRows()
    decoder = OpenProtocolDecoder(speedups=speedups)
    for message in messages:
        assert not decoder.decode_into(record(message.key, message.value), rows, BRONZE_BATCH)
    assert len(rows) == 0
    assert_both_agree(speedups, messages)


# (canonical column, text, what the error says): text TiDB never stores for such a default, and
# stored text whose value is outside the column's type (the values checks refuse that).
STORED_TEXT_REFUSED = [
    ("c_int", "1.5", "type 3 needs a JSON integer, or decimal integer text (how TiCDC before"),
    ("c_int", " 5", "got str ' 5'"),
    ("c_int", "+5", "got str '+5'"),
    ("c_int", "5e2", "got str '5e2'"),
    ("c_int", "0x10", "got str '0x10'"),
    ("c_int", "", "got str ''"),
    ("c_int", "٣", "got str '٣'"),  # a digit to Python's int(), not to TiDB
    ("c_bigint", "1" * 21, "decimal integer text"),
    ("c_float", "inf", "type 4 needs a JSON number, or decimal number text of at most 400"),
    ("c_double", "NaN", "type 5 needs a JSON number"),
    ("c_double", "1_000", "got str '1_000'"),
    ("c_double", "0x1p3", "got str '0x1p3'"),
    ("c_double", "", "got str ''"),
    ("c_double", "1" * 401, "at most 400 characters"),
    ("c_year", "-1", "type 13 (YEAR) needs a JSON integer, or 1 to 4 digits"),
    ("c_year", "20200", "1 to 4 digits"),
    ("c_year", "2020 ", "1 to 4 digits"),
    ("c_bit", "\ufffd\x01", "holds U+FFFD: TiCDC before v6.5.9, v7.1.5, v7.5.2 and v8.0.0 sent a"),
    ("c_bit", "123456789", "BIT text of 9 bytes"),
    ("c_enum", "2", "ENUM text '2': TiCDC before v6.5.9, v7.1.5, v7.5.2 and v8.0.0 sent an ENUM"),
    ("c_set", "5", "a member named by a numeral cannot be told from an index"),
    ("c_float", "1e39", "FLOAT text '1e39' is beyond the FLOAT range"),
    # The same range limits as every other value.
    ("c_tinyint", "300", "value 300 does not fit TINYINT (type code 1); expected an integer in"),
    ("c_tinyint_unsigned", "-1", "[0, 255]"),
    ("c_int_unsigned", "4294967296", "[0, 4294967295]"),
    ("c_bigint", "9223372036854775808", "[-9223372036854775808, 9223372036854775807]"),
    ("c_bigint_unsigned", "18446744073709551616", "[0, 18446744073709551615]"),
    ("c_year", "100", "0 or a year in [1901, 2155]"),
    ("c_year", "2156", "0 or a year in [1901, 2155]"),
    ("c_double", "1e400", "expected a finite number"),
]


@pytest.mark.parametrize(("name", "text", "match"), STORED_TEXT_REFUSED)
def test_stored_text_tidb_never_stores_or_outside_the_type_is_refused(name, text, match):
    message = stored_default_message(name, text, "p")
    for decoder in (OpenProtocolDecoder(), OpenProtocolDecoder(speedups=None)):
        with pytest.raises(DecodeError) as error:
            decoder.decode(record(message.key, message.value))
        assert match in error.value.reason, error.value.reason
        assert "'c'" in error.value.reason and error.value.offset == 42


# ----------------------------------------------------------------------------------------------
# Robustness: mutated messages raise only DecodeError, with the record's coordinates
# ----------------------------------------------------------------------------------------------


def fuzz_corpus() -> list[tuple[CodecSettings, KafkaMessage]]:
    rng = random.Random(2)
    events = []
    for i in range(24):
        image = {"id": make_column(BY_NAME["c_bigint"], i, key=True, nullable=False)}
        for column_type in rng.sample(COLUMN_TYPES, 6):
            image[column_type.name] = make_column(column_type, random_value(column_type, rng))
        op = (INSERT, UPDATE, DELETE)[i % 3]
        events.append(
            RowEvent(
                i,
                "s",
                "t",
                op,
                None if op == DELETE else image,
                image if op != INSERT else None,
                TOPIC,
                PARTITION,
                0,
                partition_id=i if i % 4 == 0 else None,
            )
        )
        if i % 7 == 0:
            events.append(DdlEvent(i, "s", "t", "TRUNCATE TABLE t", 11, TOPIC, PARTITION, 0))
            events.append(ResolvedEvent(i, TOPIC, PARTITION, 0))
    corpus = []
    for codec in ("none", "none", "snappy"):
        settings = CodecSettings(compression=codec, max_batch_size=3)
        corpus += [(settings, message) for message in OpenProtocolEncoder(settings).encode(events)]
    for name in ("java_example_row_1.json", "java_example_rts_1.json"):
        vector = load_vector(f"open_protocol/{name}")
        message = KafkaMessage(
            bytes.fromhex(vector["kafka_key_hex"]), bytes.fromhex(vector["kafka_value_hex"])
        )
        corpus.append((CodecSettings(), message))
    return corpus


def mutate(rng: random.Random, data: bytes) -> bytes:
    choice = rng.randrange(5)
    if choice == 0 and data:  # truncate
        return data[: rng.randrange(len(data))]
    if choice == 1 and data:  # flip bits
        mutable = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            mutable[rng.randrange(len(mutable))] ^= 1 << rng.randrange(8)
        return bytes(mutable)
    if choice == 2 and data:  # overwrite a slice with random bytes
        at = rng.randrange(len(data))
        return data[:at] + rng.randbytes(rng.randint(1, 8)) + data[at + 8 :]
    if choice == 3:  # random bytes, sometimes behind a valid version
        junk = rng.randbytes(rng.randint(0, 64))
        return U64.pack(1) + junk if rng.random() < 0.5 else junk
    return data + rng.randbytes(rng.randint(1, 16))  # trailing garbage


JSON_NOISE = b'"\\{}[],:-.0123456789eEtfnux '


def mutate_inside_an_entry(rng: random.Random, key: bytes, value: bytes) -> tuple[bytes, bytes]:
    """Damage one key or value JSON but keep the framing valid, to reach the content checks."""
    entries = split_entries(key, value)
    at = rng.randrange(len(entries))
    in_key = rng.random() < 0.3
    damaged = bytearray(entries[at][0 if in_key else 1])
    for _ in range(rng.randint(1, 3)):
        position = rng.randrange(len(damaged) or 1)
        action = rng.randrange(3)
        if action == 0 and damaged:
            damaged[position] ^= 1 << rng.randrange(8)
        elif action == 1 and damaged:
            damaged[position] = rng.choice(JSON_NOISE)
        else:
            damaged[position:position] = bytes([rng.choice(JSON_NOISE)])
    key_json, value_json = entries[at]
    entries[at] = (bytes(damaged), value_json) if in_key else (key_json, bytes(damaged))
    return frame([k for k, _ in entries], [v for _, v in entries])


def test_fuzz_mutated_messages_raise_only_decode_errors_and_both_decoders_agree(compiled):
    rng = random.Random(20260611)
    corpus = fuzz_corpus()
    decoders = {}
    outcomes = {"events": 0, "errors": 0, "decoded in C": 0, "into silver": 0}
    for offset in range(12_000):
        settings, message = rng.choice(corpus)
        key, value = message.key, message.value
        target = rng.random()
        if target < 0.5 and settings.compression == "none":
            key, value = mutate_inside_an_entry(rng, key, value)
        elif target < 0.7:
            key = mutate(rng, key)
        elif target < 0.9:
            value = mutate(rng, value)
        else:
            key, value = mutate(rng, key), mutate(rng, value)
        python = decoders.setdefault(
            settings.compression, OpenProtocolDecoder(settings, speedups=None)
        )
        fuzzed = KafkaRecord("fuzz", 7, offset, key, value)
        expected = outcome(python, fuzzed)  # anything but DecodeError fails the test here
        if compiled is not None:
            outcomes["decoded in C"] += agrees(compiled, settings, fuzzed, expected) == "decoded"
            outcomes["into silver"] += written_into(compiled, settings, fuzzed, expected)
        if expected[0] == "error":
            _, _, reason, (protocol, *coordinates, _), _ = expected
            assert protocol == "open-protocol" and reason
            assert coordinates == ["fuzz", 7, offset]
            outcomes["errors"] += 1
        else:
            outcomes["events"] += 1
    assert outcomes["errors"] > 5_000 and outcomes["events"] > 100
    assert compiled is None or outcomes["decoded in C"] > 100
    if compiled is not None and ChangeRows().compiled_buffers() is not None:
        assert outcomes["into silver"] > 50


# ----------------------------------------------------------------------------------------------
# The compiled fast path (_open_speedups) against the pure-Python reference
# ----------------------------------------------------------------------------------------------

SOURCE = native_source("_open_speedups")


def _build_speedups(directory: Path):
    return open_protocol.configure_speedups(build_extension(SOURCE, directory))


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """The compiled module, or None where no C compiler can build it."""
    if open_protocol.SPEEDUPS is not None:
        return open_protocol.SPEEDUPS
    try:
        return _build_speedups(tmp_path_factory.mktemp("open_speedups"))
    except Exception as exc:  # no compiler: the pure-Python decoder is still tested
        warnings.warn(
            f"open-protocol extension not built, testing Python only: {exc}", stacklevel=1
        )
        return None


@pytest.fixture(scope="module")
def speedups(compiled):
    if compiled is None:
        pytest.skip("the open-protocol extension cannot be built here")
    return compiled


def exact(value):
    """A value with its type: 1, 1.0 and True are equal, but the decoders must agree on which."""
    return (type(value).__name__, repr(value))


def exact_image(image):
    if image is None:
        return None
    return [
        (name, exact(column.type_code), exact(column.flags), exact(column.value), column.mysql_type)
        for name, column in image.items()
    ]


def exact_event(event):
    fields = {field.name: getattr(event, field.name) for field in dataclasses.fields(event)}
    for name in ("columns", "old_columns"):
        if name in fields:
            fields[name] = exact_image(fields[name])
    return type(event).__name__, {name: exact(value) for name, value in fields.items()}


def outcome(decoder: OpenProtocolDecoder, fuzzed: KafkaRecord):
    """The events in exact form, or the DecodeError's type, text, coordinates and cause."""
    try:
        events = decoder.decode(fuzzed)
    except DecodeError as error:
        return (
            "error",
            type(error).__name__,
            error.reason,
            (error.protocol, error.topic, error.partition, error.offset, error.byte_offset),
            type(error.__cause__).__name__,
        )
    return ("events", [exact_event(event) for event in events])


def test_speedups_are_used_when_built():
    if extension_built(SOURCE, "ticdc_lake.protocols.native._open_speedups"):
        assert open_protocol.SPEEDUPS is not None
    else:
        assert open_protocol.SPEEDUPS is None
    assert OpenProtocolDecoder().speedups is open_protocol.SPEEDUPS


def agrees(speedups, settings: CodecSettings, fuzzed: KafkaRecord, expected) -> str:
    """Check both compiled paths, to events and straight to silver rows (`written_into`),
    against the reference outcome `expected`; say what the events path did."""
    written_into(speedups, settings, fuzzed, expected)
    return agrees_on_events(speedups, settings, fuzzed, expected)


def silver_rows(events: list) -> pa.Table:
    rows = ChangeRows()
    for event in events:
        rows.add(event, BRONZE_BATCH)
    return rows.table()


def written_into(speedups, settings: CodecSettings, fuzzed: KafkaRecord, expected) -> bool:
    """decode_into (the decode stage's path) against the reference: when it takes a record,
    the rows it wrote are the silver rows of the reference's events, all of them row events;
    when it does not, it wrote nothing (the events path then decides)."""
    rows = ChangeRows()
    taken = OpenProtocolDecoder(settings, speedups=speedups).decode_into(fuzzed, rows, BRONZE_BATCH)
    if not taken:
        assert len(rows) == 0, (fuzzed.key, fuzzed.value)
        return False
    assert expected[0] == "events", (fuzzed.key, fuzzed.value)
    events = OpenProtocolDecoder(settings, speedups=None).decode(fuzzed)
    assert all(isinstance(event, RowEvent) for event in events)
    assert rows.table().equals(silver_rows(events)), (fuzzed.key, fuzzed.value)
    return True


def agrees_on_events(speedups, settings: CodecSettings, fuzzed: KafkaRecord, expected) -> str:
    """Check the compiled path to events against the reference outcome `expected`; say what it
    did.

    The decoder returns the extension's events when it gives any; when it declines (None) or
    raises, the reference decoder decides. So besides the decoder's outcome, the extension's own
    answer is checked: events only if they are the reference's, an exception only where the
    reference refuses the record too. Values are range-checked after either path, in Python:
    events with a value that does not fit its type are refused like the reference refuses them.
    """
    fast = OpenProtocolDecoder(settings, speedups=speedups)
    assert outcome(fast, fuzzed) == expected, (fuzzed.key, fuzzed.value)
    key, value = fuzzed.key, fuzzed.value or b""
    if type(key) is not bytes:
        return "declined"
    try:
        events = speedups.decode(
            key, value, fast._decompress, fuzzed.topic, fuzzed.partition, fuzzed.offset
        )
    except Exception:
        assert expected[0] == "error", (fuzzed.key, fuzzed.value)
        return "raised"
    if events is None:
        return "declined"
    if events_problem(events) is not None:
        assert expected[0] == "error", (fuzzed.key, fuzzed.value)
        return "refused"
    assert ("events", [exact_event(event) for event in events]) == expected
    return "decoded"


def assert_both_agree(speedups, messages, settings=None) -> list[str]:
    settings = settings or CodecSettings()
    python = OpenProtocolDecoder(settings, speedups=None)
    return [
        agrees(speedups, settings, fuzzed, outcome(python, fuzzed))
        for offset, message in enumerate(messages)
        for fuzzed in [record(message.key, message.value, offset)]
    ]


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(partition_streams(), st.sampled_from(["none", "snappy"]), st.integers(1, 16))
def test_round_trip_corpus_decodes_the_same_in_both(speedups, events, codec, batch_size):
    settings = CodecSettings(compression=codec, max_batch_size=batch_size)
    messages = OpenProtocolEncoder(settings).encode(events)
    handled = assert_both_agree(speedups, messages, settings)
    python = OpenProtocolDecoder(settings, speedups=None)
    for message, how in zip(messages, handled, strict=True):
        # not a vacuous agreement: the extension decodes rows and watermarks itself
        entries = split_entries(message.key, message.value)
        kinds = {orjson.loads(key)["t"] for key, _ in entries}
        assert how == ("declined" if kinds == {2} else "decoded")
        # and writes messages of rows it reads in place straight into silver's buffers
        fuzzed = record(message.key, message.value)
        taken = written_into(speedups, settings, fuzzed, outcome(python, fuzzed))
        rows = kinds == {1}
        assert taken == (rows and all(reads_in_place(speedups, v, codec) for _, v in entries))


ROW_KEY_AT = '{"ts":%d,"scm":"s","tbl":"t","t":1}'
ROW_VALUE_OF = '{"u":{"id":{"t":3,"h":true,"f":11,"v":%d}}}'


def test_decode_into_appends_a_message_of_rows_after_the_rows_before(speedups):
    rows = ChangeRows()
    if rows.compiled_buffers() is None:
        pytest.skip("silver's buffers are not built here")
    rows.add(simple_row(0), BRONZE_BATCH)
    fuzzed = record(*frame([ROW_KEY_AT % 1, ROW_KEY_AT % 2], [ROW_VALUE_OF % 1, ROW_VALUE_OF % 2]))
    assert OpenProtocolDecoder(speedups=speedups).decode_into(fuzzed, rows, BRONZE_BATCH)
    events = OpenProtocolDecoder(speedups=None).decode(fuzzed)
    assert rows.table().equals(silver_rows([simple_row(0), *events]))


@pytest.mark.parametrize(
    ("keys", "values"),
    [
        # a TS beyond silver's BIGINT, after a row that fits: decode_record names it
        ([ROW_KEY_AT % 1, ROW_KEY_AT % 2**63], [ROW_VALUE_OF % 1, ROW_VALUE_OF % 2]),
        # a row and a watermark: the events path writes both
        ([ROW_KEY_AT % 1, '{"ts":5,"t":3}'], [ROW_VALUE_OF % 1, ""]),
        # a value beyond its column's type (INT): the events path names it
        ([ROW_KEY_AT % 1, ROW_KEY_AT % 2], [ROW_VALUE_OF % 1, ROW_VALUE_OF % 2**31]),
        # an update that sent only its changed columns: completed by the events path
        ([ROW_KEY_AT % 1], ['{"u":{"id":{"t":3,"f":11,"v":1},"a":{"t":3,"f":0,"v":2}},'
                         '"p":{"a":{"t":3,"f":0,"v":1}}}']),
    ],
)  # fmt: skip
def test_decode_into_leaves_a_message_it_cannot_take_whole_to_the_events_path(
    speedups, keys, values
):
    rows = ChangeRows()
    if rows.compiled_buffers() is None:
        pytest.skip("silver's buffers are not built here")
    rows.add(simple_row(0), BRONZE_BATCH)  # what the batch held before is kept
    fuzzed = record(*frame(keys, values))
    assert not OpenProtocolDecoder(speedups=speedups).decode_into(fuzzed, rows, BRONZE_BATCH)
    assert rows.table().equals(silver_rows([simple_row(0)]))


def test_decode_into_binds_silver_however_the_modules_are_imported(speedups):
    if ChangeRows().compiled_buffers() is None:
        pytest.skip("silver's buffers are not built here")
    # A fresh interpreter importing the decoder before silver's rows (ticdc_lake.silver.rows), as
    # Spark's Python workers do when they unpickle the decode function.
    script = (
        "from ticdc_lake.protocols.open_protocol import OpenProtocolDecoder\n"
        "from ticdc_lake.silver.rows import ChangeRows\n"
        "from ticdc_lake.records import KafkaRecord\n"
        f"key, value = {frame([ROW_KEY_AT % 1], [ROW_VALUE_OF % 1])!r}\n"
        "rows = ChangeRows()\n"
        "assert OpenProtocolDecoder().decode_into(KafkaRecord('t', 0, 0, key, value), rows, 5)\n"
        "assert len(rows) == 1\n"
    )
    subprocess.run([sys.executable, "-W", "error", "-c", script], check=True)


# Values the in-place path writes as the message's own text, no object made, and their
# neighbours it must leave to objects or refuse: (column JSON, taken straight into silver).
TEXT_EDGES = [
    ('{"t":1,"f":0,"v":127}', True),  # TINYINT's largest
    ('{"t":1,"f":0,"v":128}', False),  # beyond it: the events path names it
    ('{"t":1,"f":128,"v":255}', True),  # TINYINT UNSIGNED's largest
    ('{"t":1,"f":128,"v":-1}', False),
    ('{"t":3,"f":0,"v":-2147483648}', True),
    ('{"t":3,"f":0,"v":-0}', True),  # str(0) is "0", not the message's "-0"
    ('{"t":8,"f":128,"v":18446744073709551615}', True),  # BIGINT UNSIGNED, beyond int64
    ('{"t":8,"f":0,"v":9223372036854775808}', False),
    ('{"t":8,"f":0,"v":-9223372036854775808}', True),
    ('{"t":8,"f":0,"v":18446744073709551616}', False),  # beyond 64 bits: a float to orjson
    ('{"t":13,"f":0,"v":1900}', False),  # YEAR
    ('{"t":13,"f":0,"v":2155}', True),
    ('{"t":3,"f":0,"v":1.0}', False),  # a float for an INT
    ('{"t":3,"f":0,"v":"1"}', False),  # a string for an INT
    ('{"t":3,"f":0,"v":1e2}', False),
    ('{"t":15,"f":0,"v":"plain"}', True),
    ('{"t":15,"f":0,"v":""}', True),
    ('{"t":15,"f":0,"v":"tab\\tand \\"quotes\\""}', True),  # escaped: made as an object
    ('{"t":15,"f":0,"v":"caf\u00e9"}', True),  # not ASCII: made as an object
    ('{"t":15,"f":0,"v":7}', False),  # a number for a VARCHAR
    ('{"t":15,"f":1,"v":"\\\\x00bin"}', True),  # binary: Go-quoted bytes
    ('{"t":246,"f":0,"v":"-12.50"}', True),  # DECIMAL
    ('{"t":246,"f":0,"v":"1.2.3"}', False),
    ('{"t":10,"f":0,"v":"2024-02-29"}', True),  # DATE
    ('{"t":10,"f":0,"v":"2024-13-01"}', False),
    ('{"t":12,"f":0,"v":"2024-01-02 03:04:05.123456"}', True),  # DATETIME
    ('{"t":245,"f":0,"v":"{\\"a\\":1}"}', True),  # JSON: orjson must parse it
    ('{"t":245,"f":0,"v":"{"}', False),
    ('{"t":225,"f":0,"v":"[1,2]"}', True),  # VECTOR
    ('{"v":"late","t":15,"f":0}', True),  # the value before its type
    ('{"t":15,"f":0,"v":"first","v":"last"}', True),  # a repeated key: the last
    ('{"t":3,"f":0,"v":null}', True),
]


@pytest.mark.parametrize(("column", "taken"), TEXT_EDGES)
def test_values_read_as_their_text_agree_with_the_reference(speedups, column, taken):
    if ChangeRows().compiled_buffers() is None:
        pytest.skip("silver's buffers are not built here")
    fuzzed = row_of('"c":' + column)
    expected = outcome(OpenProtocolDecoder(speedups=None), fuzzed)
    assert written_into(speedups, CodecSettings(), fuzzed, expected) == taken
    agrees_on_events(speedups, CodecSettings(), fuzzed, expected)


ID_COLUMN = '"id":{"t":3,"h":true,"f":11,"v":1}'  # the handle key of row_of's images


def row_of(columns: str) -> KafkaRecord:
    """A record of one row event whose new image is `id` and then `columns` (JSON members)."""
    return record(*frame([ROW_KEY_AT % 1], ['{"u":{' + ID_COLUMN + "," + columns + "}}"]))


def taken_as_the_reference_decodes_it(speedups, fuzzed: KafkaRecord) -> bool:
    expected = outcome(OpenProtocolDecoder(speedups=None), fuzzed)
    return written_into(speedups, CodecSettings(), fuzzed, expected)


DECIMAL_TEXTS = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.builds(
        lambda negative, whole, zeros, fraction: f"{'-' * negative}{whole}.{'0' * zeros}{fraction}",
        st.booleans(),
        st.integers(0, 10**17),
        st.integers(0, 6),
        st.integers(0, 10**17),
    ),
)


@settings(max_examples=300)
@given(DECIMAL_TEXTS)
def test_doubles_read_as_their_text_agree_with_the_reference(speedups, text):
    """A DOUBLE written as repr() writes it goes to silver as its text; any other decimal is
    made a float first. Either way silver holds repr() of the float."""
    if ChangeRows().compiled_buffers() is None:
        pytest.skip("silver's buffers are not built here")
    assert taken_as_the_reference_decodes_it(speedups, row_of('"c":{"t":5,"f":0,"v":' + text + "}"))


def _columns(names) -> str:
    """JSON members of an INT column per name, each valued by its place."""
    return ",".join(f'"{name}":{{"t":3,"f":0,"v":{i}}}' for i, name in enumerate(names))


def _fnv(name: str) -> int:
    """The compiled reader's name_hash (FNV-1a of the name's bytes)."""
    hash_ = 2166136261
    for byte in name.encode():
        hash_ = ((hash_ ^ byte) * 16777619) % 2**32
    return hash_


# 100 names whose name_hash agree in their low 9 bits: in one run of the slot table, whose 512
# slots hold up to 128 names.
COLLIDING = [name for name in (f"k{i}" for i in range(60_000)) if _fnv(name) % 512 == 0][:100]


@pytest.mark.parametrize(
    ("image", "taken"),
    [
        # a repeated name keeps its first place and its last column
        ('"c":{"t":15,"f":0,"v":"a"},"d":{"t":3,"f":0,"v":2},"c":{"t":15,"f":0,"v":"b"}', True),
        # the same name escaped once: equal as text, not as bytes
        ('"c":{"t":15,"f":0,"v":"a"},"\\u0063":{"t":3,"f":0,"v":2}', True),
        ('"\\u0063":{"t":15,"f":0,"v":"a"},"d":{"t":3,"f":0,"v":2},"c":{"t":3,"f":0,"v":3}', True),
        # many names, so that their filter bits meet
        (_columns(f"c{i}" for i in range(300)) + ',"c7":{"t":3,"f":0,"v":-1}', True),
        # past 32 names they are found through a table by hash, rebuilt as it fills: repeats
        # just after it is built and after each rebuild (65, 129, 257 names)
        (
            _columns(
                f"c{i % 300}"
                for i in [*range(33), 0, 32, *range(33, 66), 1, 64, *range(66, 300), 31, 65, 128]
            ),
            True,
        ),
        # an escaped name turns the table off (its bytes are not its text, nor its hash its
        # text's): up to 32 names (`id` and 31) are compared one by one, more are left to Python
        (_columns(f"\\u0063{i}" for i in range(31)) + ',"c7":{"t":3,"f":0,"v":-7}', True),
        (_columns(f"\\u0063{i}" for i in range(33)) + ',"c7":{"t":3,"f":0,"v":-7}', False),
        (_columns(f"c{i}" for i in range(100)) + ',"\\u0063\\u0035":{"t":3,"f":0,"v":-5}', False),
        # names whose hashes crowd one run of the table: past 64 probes for one name, the
        # message is left to Python; as many names whose hashes spread out are taken
        (_columns(COLLIDING[:64]), True),
        (_columns(COLLIDING), False),
        (_columns(f"k{i}" for i in range(3000)), True),
    ],
)
def test_repeated_names_in_an_image_agree_with_the_reference(speedups, image, taken):
    if ChangeRows().compiled_buffers() is None:
        pytest.skip("silver's buffers are not built here")
    assert taken_as_the_reference_decodes_it(speedups, row_of(image)) == taken


def test_a_wide_image_of_escaped_names_is_read_in_time_proportional_to_its_names(speedups):
    """Escaped names were compared one by one however many: a 4.5 MB image of 128k took 22 s
    (a few such messages would hold a decode task for minutes). Past 32 names such an image is
    left to the events path, which reads it into a dict."""
    fuzzed = row_of(_columns(f'c\\"{i}' for i in range(128_000)))
    wide = CodecSettings(limits=Limits(max_table_columns=128_001))  # past TiDB's 4096
    decoder = OpenProtocolDecoder(wide, speedups=speedups)
    started = time.process_time()
    assert decoder.decode_into(fuzzed, ChangeRows(), 1) or decoder.decode(fuzzed)
    assert time.process_time() - started < 5  # generous: the compares took 22 s


def wide_image(names) -> str:
    """An image of `id` (the handle key) and an INT column per name."""
    return "{" + ID_COLUMN + "," + _columns(names) + "}"


WIDE = [f"c{i:03d}" for i in range(200)]


@pytest.mark.parametrize(
    ("old", "taken"),
    [
        (WIDE, True),  # in the new image's order, as TiCDC writes them
        (WIDE[::-1], True),  # in another order: the same names
        (WIDE[:100] + WIDE[101:], False),  # one missing: only the changed columns were sent
        ([*WIDE[:199], "c999"], False),  # one other name
        ([f"\\u0063{name[1:]}" for name in WIDE], False),  # escaped: left to Python
    ],
)
def test_a_wide_update_agrees_with_the_reference(speedups, old, taken):
    """An update's old image holds the new image's names, whatever their order, or the update
    is left to the events path (which fills in the unsent columns)."""
    if ChangeRows().compiled_buffers() is None:
        pytest.skip("silver's buffers are not built here")
    value = '{"u":' + wide_image(WIDE) + ',"p":' + wide_image(old) + "}"
    fuzzed = record(*frame([ROW_KEY_AT % 1], [value]))
    assert taken_as_the_reference_decodes_it(speedups, fuzzed) == taken


def reads_in_place(speedups, value_json: bytes, codec: str) -> bool:
    """Whether the in-place reader takes this value document (else orjson reads it)."""
    if codec != "none":
        value_json = decompress(codec, value_json, Limits())
    return speedups.row_value(value_json, 0) is not None


@given(st.lists(row_events(ops=(UPDATE,)), min_size=1, max_size=6))
def test_only_updated_columns_decode_the_same_in_both(speedups, events):
    settings = CodecSettings(options=(("only_output_updated_columns", True),))
    assert_both_agree(speedups, OpenProtocolEncoder(settings).encode(events))


def test_every_vector_decodes_the_same_in_both(speedups):
    messages = []
    for path in sorted(Path(VECTORS, "open_protocol").glob("*.json")):
        text = path.read_text()
        for key_name, value_name in (
            ("kafka_key_hex", "kafka_value_hex"),
            ("reconstructed_wire_key_hex", "reconstructed_wire_value_hex"),
            ("kafka_key_hex_reconstructed", "kafka_value_hex_reconstructed"),
            ("derived_single_event_wire_key_hex", "derived_single_event_wire_value_hex"),
        ):
            for document in _documents_with(json.loads(text), key_name):
                key, value = document[key_name], document.get(value_name) or ""
                messages.append(KafkaMessage(bytes.fromhex(key), bytes.fromhex(value)))
    assert len(messages) > 25
    assert_both_agree(speedups, messages)


def _documents_with(node, field: str):
    if isinstance(node, dict):
        if field in node:
            yield node
        for child in node.values():
            yield from _documents_with(child, field)
    elif isinstance(node, list):
        for child in node:
            yield from _documents_with(child, field)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


GO_QUOTED = [quoted for _, quoted in PROTOCOL_EXAMPLES] + [
    r"\101\377",
    r"\u00e9\U0001F389",
    r"\xAB",
    r"\\u0041",
    r"\u005cx41",
    "tab\there",
    "abc\\",
    r"\q",
    r"ok\xZZ",
    r"\x4",
    r"\u12",
    r"\ud800",
    r"\U00110000",
    r"\400",
    r"\12",
    'a"b',
    "a\nb",
    r"\'",
    "\U0001f389 and \\U0001F389",
]
# (type code, flags, value) of columns the decoders must treat alike, the awkward ones included.
TRICKY_COLUMNS = (
    [(15, 1, text) for text in GO_QUOTED]
    + [(254, 65, text) for text in GO_QUOTED[:6]]
    + [
        (code, flags, text)
        for code in (252, 249)
        for flags in (0, 1)
        for text in [
            "",
            "QQ==",
            "QR==",
            "QUI=",
            "QUJD",
            "Q===",
            "QQ=",
            "QQ",
            "=QQ=",
            "QQ==QQ==",
            "Q Q=",
            "QUJD\n",
            "4pyT",
            _b64("中文 ✓ 🎉".encode()),
            _b64(b"\xff\xfe"),
            _b64(bytes(range(256))),
            _b64(b"x" * 5000),
            "ü" + "QQ==",
            5,
            None,
        ]
    ]
    + [
        (4, 1, number)
        for number in (0, -0.0, 153.123, 1e-45, 1e-46, 3.4028234663852886e38, 3.5e38, -3.5e38)
    ]
    + [(4, 1, number) for number in (2**63, -(2**63), 16777217, "1.5", True, None, [1])]
    + [(5, 1, number) for number in [0, -0.0, 1.5, 2**64 - 1, -(2**63), "1", False, None]]
    + [(code, 129, v) for code in (1, 8, 13, 16, 247) for v in (0, 2**64 - 1, -1, 1.0, "1", True)]
    + [(code, 129, None) for code in (1, 6, 15, 252, 4, 5, 246, 10)]
    + [(code, 1, v) for code in (246, 10, 12, 7, 11, 245, 225, 0) for v in ("1.50", "", 5, 1.5)]
    + [(6, 0, 1), (6, 0, None), (255, 0, None), (255, 0, "x"), (200, 0, 1), (-1, 0, 1)]
    + [(2**64 - 1, 0, 1), (3, 2**64 - 1, 1), (3, -1, 1), (15, -1, "\\x41"), (15, 2**63 + 1, "a")]
    + [(3.0, 0, 1), ("3", 0, 1), (True, 0, 1), (3, 1.0, 1), (3, True, 1), (15, True, r"\x41")]
    + [(15, 0, "plain"), (15, 0, 7), (253, 0, ["x"]), (15, 1, 7), (15, 1, None)]
)


@pytest.mark.parametrize(("code", "flags", "value"), TRICKY_COLUMNS)
def test_tricky_values_decode_the_same_in_both(speedups, code, flags, value):
    """One awkward column next to an ordinary one, in `u`, `p` and `d` images."""
    column = orjson.dumps({"t": code, "f": flags, "v": value}).decode()
    ordinary = '"id":{"t":8,"h":true,"f":11,"v":1}'
    messages = [
        KafkaMessage(*frame([ROW_KEY], [value_json]))
        for value_json in (
            f'{{"u":{{{ordinary},"c":{column}}}}}',
            f'{{"u":{{{ordinary},"c":{column}}},"p":{{{ordinary},"c":{column}}}}}',
            f'{{"u":{{{ordinary}}},"p":{{"c":{column}}}}}',
            f'{{"d":{{"c":{column},{ordinary}}}}}',
        )
    ]
    assert_both_agree(speedups, messages)


COMMON_VALUES = (
    [(15, 1, quoted) for _, quoted in PROTOCOL_EXAMPLES]
    + [(15, 1, quoted) for quoted in GO_QUOTED[:6]]
    + [(code, flags, _b64(b"")) for code in (249, 252) for flags in (0, 1)]
    + [(252, 0, _b64("中文 ✓ 🎉".encode() * 100)), (252, 1, _b64(bytes(range(256))))]
    + [(252, 0, "QR=="), (251, 1, "QUJ=")]
    + [(4, 1, 153.123), (4, 1, 7), (4, 1, 3.4028234663852886e38), (4, 1, -1e-46)]
    + [(5, 1, 0.1), (5, 1, 2**64 - 1), (5, 1, -(2**63))]
    + [(code, 129, 2**64 - 1) for code in (1, 2, 3, 8, 9, 13, 16, 247, 248)]
    + [(code, 1, "2024-05-01") for code in (0, 7, 10, 11, 12, 14, 225, 245, 246)]
    + [(code, 0, "text ✓") for code in (15, 253, 254)]
    + [(code, 64, None) for code in (1, 4, 5, 6, 15, 246, 252)]
)


def test_common_values_are_converted_in_c(speedups):
    """Valid values of every kind never call back into decode_value."""
    calls = []

    def counting_decode_value(*args):
        calls.append(args)
        return open_protocol.decode_value(*args)

    raw = {
        f"c{i}": {"t": code, "f": flags, "v": value}
        for i, (code, flags, value) in enumerate(COMMON_VALUES)
    }
    raw = orjson.loads(orjson.dumps(raw))
    speedups.configure(
        Column,
        RowEvent,
        ResolvedEvent,
        orjson.loads,
        open_protocol.decode_image,
        counting_decode_value,
        INSERT,
        UPDATE,
        DELETE,
        open_protocol._VALUE_KINDS,
    )
    try:
        image = speedups.decode_image(raw, 0, "u")
    finally:
        assert open_protocol.configure_speedups(speedups) is speedups
    assert calls == []
    assert exact_image(image) == exact_image(open_protocol.decode_image(raw, 0, "u"))


@pytest.mark.parametrize(
    "column",
    [
        '{"t":15,"v":"YWE="}',  # pre-v4.0.5: no `f`
        r'{"t":15,"h":true,"v":"\\x89PNG"}',
        '{"t":3,"f":"1","v":1}',
        '{"t":3,"f":1,"v":1,"x":2}',
        '{"t":3}',
        '{"f":1,"v":1}',
        "[3,1,1]",
        '"c"',
        "null",
        "{}",
    ],
)
def test_unusual_columns_decode_the_same_in_both(speedups, column):
    ordinary = '"id":{"t":8,"h":true,"f":11,"v":1}'
    messages = [
        KafkaMessage(*frame([ROW_KEY], [value_json]))
        for value_json in (
            f'{{"u":{{{ordinary},"c":{column}}}}}',
            f'{{"u":{{{ordinary}}},"p":{{"c":{column}}}}}',
            f'{{"d":{{"c":{column}}}}}',
        )
    ]
    assert_both_agree(speedups, messages)


# Value documents read in place: _open_speedups reads the shape TiCDC writes without orjson.
# Whatever it reads must be what orjson's document decodes to; anything else it declines.


def in_place(speedups, document: bytes):
    """The in-place reader's (op, new image, old image), exact; None where it declines."""
    read = speedups.row_value(document, 0)
    return None if read is None else (read[0], exact_image(read[1]), exact_image(read[2]))


def through_orjson(document: bytes):
    op, columns, old_columns = open_protocol.decode_row_value(orjson.loads(document), 0)
    return op, exact_image(columns), exact_image(old_columns)


# (type code, flags, values) of the column kinds a value document holds, read in place.
_READ_IN_PLACE = [
    (8, 11, st.integers(-(2**63), 2**63 - 1)),
    (8, 129, st.integers(0, 2**64 - 1)),
    (5, 1, st.floats(allow_nan=False, allow_infinity=False)),
    (5, 1, st.integers(-(2**53), 2**53)),
    (15, 0, st.text()),
    (246, 1, st.text()),
    (252, 0, st.text().map(lambda text: _b64(text.encode()))),
    (252, 1, st.binary().map(_b64)),
    (3, 0, st.none()),
]


_OWN_KEYS = {"u", "p", "d", "t", "h", "f", "v"}


@st.composite
def spelled_json(draw, node) -> str:
    """``node`` as JSON the way any writer may spell it: spaces between tokens, strings with
    escapes (short, \\u, surrogate pairs) where plain characters would do, floats with exponents.
    The document's own keys (``u``, ``t``, ...) stay plain: the reader declines them escaped."""

    def space() -> str:
        return draw(st.sampled_from(["", "", "", " ", "\n\t ", "\r"]))

    def string(text: str) -> str:
        out = []
        for char in text:
            code = ord(char)
            plain = char not in '"\\' and code >= 0x20
            how = draw(st.sampled_from(["plain", "plain", "plain", "u", "short"]))
            if how == "u" or not plain:
                if code > 0xFFFF:
                    high, low = divmod(code - 0x10000, 0x400)
                    out.append(f"\\u{0xD800 + high:04x}\\u{0xDC00 + low:04X}")
                elif how == "short" and char in '"\\/\b\f\n\r\t':
                    out.append(json.dumps(char)[1:-1] if char != "/" else "\\/")
                else:
                    out.append(f"\\u{code:04x}")
            else:
                out.append(char)
        return '"' + "".join(out) + '"'

    if isinstance(node, dict):
        members = [
            f"{space()}{json.dumps(key) if key in _OWN_KEYS else string(key)}{space()}:"
            f"{draw(spelled_json(value))}"
            for key, value in node.items()
        ]
        return space() + "{" + ",".join(members) + space() + "}" + space()
    if isinstance(node, str):
        return space() + string(node) + space()
    if isinstance(node, float):
        return (
            space() + draw(st.sampled_from([repr(node), f"{node:.17e}", f"{node:.17E}"])) + space()
        )
    return space() + json.dumps(node) + space()


@st.composite
def value_documents(draw):
    def image():
        columns = {}
        for name in draw(st.lists(st.text(max_size=6), min_size=1, max_size=5)):
            code, flags, values = draw(st.sampled_from(_READ_IN_PLACE))
            column = {"t": code, "f": flags, "v": draw(values)}
            if draw(st.booleans()):
                column = {"h": True, **column}
            columns[name] = column
        return columns

    shape = draw(st.sampled_from(["u", "up", "d"]))
    return {part: image() for part in shape}


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_value_documents_read_in_place_are_what_orjson_reads(speedups, data):
    document = data.draw(value_documents())
    spelled = data.draw(spelled_json(document)).encode()
    assert orjson.loads(spelled) == document
    assert in_place(speedups, spelled) == through_orjson(spelled), spelled


@pytest.mark.parametrize(
    "document",
    [
        '{"u":{"a":{"t":8,"f":11,"v":1}},"u":{"a":{"t":8,"f":11,"v":2}}}',  # `u` twice
        '{"u":{"a":{"t":8,"f":11,"v":1}},"x":1}',  # another key
        '{"u":{"a":{"t":8,"f":11,"v":1,"x":2}}}',
        '{"u":{"a":{"t":8,"f":11,"v":18446744073709551616}}}',  # orjson: a float
        '{"u":{"a":{"t":8,"f":11,"v":-9223372036854775809}}}',
        '{"u":{"a":{"t":5,"f":1,"v":1e999}}}',
        '{"u":{"a":{"t":5,"f":1,"v":01}}}',
        '{"u":{"a":{"t":5,"f":1,"v":1.}}}',
        '{"u":{"a":{"t":5,"f":1,"v":.5}}}',
        '{"u":{"a":{"t":5,"f":1,"v":+1}}}',
        '{"u":{"a":{"t":15,"f":0,"v":"\\ud800"}}}',  # a lone surrogate
        '{"u":{"a":{"t":15,"f":0,"v":"\\udc00\\ud800"}}}',
        '{"u":{"a":{"t":15,"f":0,"v":"\\x41"}}}',
        '{"u":{"a":{"t":15,"f":0,"v":"\\u12"}}}',
        '{"u":{"a":{"t":15,"f":0,"v":"tab\there"}}}',  # a raw control character
        '{"u":{"a":{"t":15,"f":0,"v":"\xff"}}}',  # not UTF-8
        '{"u":{"a":{"t":15,"f":0,"v":"\xed\xa0\x80"}}}',  # a surrogate in UTF-8
        '{"u":{"a":{"t":15,"f":0,"v":["x"]}}}',
        '{"u":{"a":{"t":15,"f":0,"v":{}}}}',
        '{"u":{"a":{"t":15,"v":"x"}}}',  # pre-v4.0.5: no `f`
        '{"u":{"a":{"t":"15","f":0,"v":"x"}}}',
        '{"u":{"a":[15,0,"x"]}}',
        '{"u":{"a":{"t":8,"f":11,"v":1}}',  # cut short
        '{"u":{"a":{"t":8,"f":11,"v":1}}} x',
        '{"u":{"a":{"t":8,"f":11,"v":1},}}',
        '{"u":{"a":{"t":8,"f":11,"v":1}}}\x00',
        '{"u":{"a":{"t":8,"f":11,"v":nul}}}',
        '{"u":{"\\u0061":{"t\\u0000":8,"f":11,"v":1}}}',
        "",
        "{",
        "[]",
    ],
)
def test_the_in_place_reader_declines_what_it_does_not_read_as_orjson_does(speedups, document):
    raw = document.encode("latin-1")
    assert in_place(speedups, raw) is None
    assert_both_agree(speedups, [KafkaMessage(*frame([ROW_KEY], [raw]))])


@pytest.mark.parametrize(
    "document",
    [
        '{"u":{"a":{"t":8,"f":11,"v":1},"a":{"t":8,"f":11,"v":2},"b":{"t":3,"f":0,"v":null}}}',
        # the same name spelled two ways: two str objects, one column
        '{"u":{"\\u00e9a":{"t":8,"f":11,"v":1},"b":{"t":3,"f":0,"v":2},"\u00e9a":{"t":8,"f":11,"v":3}}}',
        '{"u":{"a":{"t":8,"t":3,"f":11,"v":1,"v":2,"h":"x"}}}',
        ' {"p" :{"b":{"t":3,"f":0,"v":2}} , "u":{"a":{"t":3,"f":0,"v":1}}}\n',
        '{"u":{},"p":{}}',
        '{"d":null,"u":{"a":{"t":3,"f":0,"v":-0}}}',
        '{"d":{"\\u00e9\\/":{"t":15,"f":0,"v":"\\ud83c\\udf89 \\"\\\\"}}}',
        '{"u":{"a":{"t":5,"f":1,"v":-0.0},"b":{"t":5,"f":1,"v":2.5E-3},"c":{"t":4,"f":1,"v":1e-46}}}',
        '{"u":{"a":{"t":5,"f":1,"v":0.1e-400},"b":{"t":8,"f":129,"v":18446744073709551615}}}',
    ],
)
def test_the_in_place_reader_reads_these_as_orjson_does(speedups, document):
    raw = document.encode()
    assert in_place(speedups, raw) == through_orjson(raw)
    assert_both_agree(speedups, [KafkaMessage(*frame([ROW_KEY], [raw]))])


def test_ticdc_documents_are_read_in_place(speedups):
    """Not a vacuous agreement: what TiCDC writes (our encoder's spelling of it) is read in
    place, every column type's values included, NULLs too."""
    rng = random.Random(11)
    image = {"id": make_column(BY_NAME["c_bigint"], 1, key=True, nullable=False)}
    for column_type in COLUMN_TYPES:
        for i in range(8):
            image[f"{column_type.name}_{i}"] = make_column(
                column_type, random_value(column_type, rng)
            )
        image[f"{column_type.name}_null"] = make_column(column_type, None)
    old_image = {"id": image["id"], "c_varchar_0": make_column(BY_NAME["c_varchar"], "x")}
    events = [
        RowEvent(7, "s", "t", INSERT, image, None, TOPIC, PARTITION, 0),
        RowEvent(8, "s", "t", UPDATE, image, old_image | image, TOPIC, PARTITION, 0),
        RowEvent(9, "s", "t", DELETE, None, image, TOPIC, PARTITION, 0),
    ]
    read = 0
    for message in OpenProtocolEncoder().encode(events):
        for key_json, value_json in split_entries(message.key, message.value):
            if orjson.loads(key_json)["t"] == 1:
                assert in_place(speedups, value_json) == through_orjson(value_json)
                read += 1
    assert read == len(events)


@pytest.mark.parametrize(
    ("key_json", "value_json"),
    [
        (ROW_KEY, '{"u":{},"p":{}}'),
        (ROW_KEY, '{"u":{"a":{"t":3,"f":0,"v":1}},"p":{"b":{"t":3,"f":0,"v":2}}}'),
        (
            ROW_KEY,
            '{"u":{"a":{"t":3,"f":0,"v":1},"b":{"t":3,"f":0,"v":3}},"p":{"b":{"t":3,"f":0,"v":2},"a":{"t":3,"f":0,"v":4}}}',
        ),
        (ROW_KEY, '{"u":null,"d":{"a":{"t":3,"f":0,"v":1}}}'),
        (ROW_KEY, '{"d":null,"u":{"a":{"t":3,"f":0,"v":1}}}'),
        (ROW_KEY, '{"d":{},"p":null}'),
        (ROW_KEY, '{"u":{},"p":null}'),
        (ROW_KEY, '{"u":[]}'),
        (ROW_KEY, '{"p":{}}'),
        (ROW_KEY, "[]"),
        (ROW_KEY, "nul"),
        ('{"ts":7,"t":1}', '{"u":{}}'),
        ('{"ts":7,"scm":null,"tbl":"t","t":1}', '{"u":{}}'),
        ('{"ts":7,"scm":"s","tbl":5,"t":1}', '{"u":{}}'),
        ('{"ts":7,"ptn":null,"ohk":1,"t":1}', '{"u":{}}'),
        ('{"ts":7,"ptn":"1","t":1}', '{"u":{}}'),
        ('{"ts":7,"ptn":-3,"ohk":true,"t":1}', '{"u":{}}'),
        ('{"ts":18446744073709551615,"t":1}', '{"u":{}}'),
        ('{"ts":-1,"t":1}', '{"u":{}}'),
        ('{"ts":1.0,"t":1}', '{"u":{}}'),
        ('{"ts":true,"t":1}', '{"u":{}}'),
        ('{"ts":1,"t":true}', '{"u":{}}'),
        ('{"ts":1,"t":1.0}', '{"u":{}}'),
        ('{"ts":1,"t":3}', ""),
        ('{"ts":1,"t":3}', "{}"),
        ('{"ts":1}', ""),
        ('{"t":3}', ""),
        ("[1]", ""),
        ('{"ts":1,"t":2,"scm":"s"}', '{"q":"DROP TABLE t","t":4}'),
        ('{"ts":1,"t":1,"ccl":5}', '{"u":{}}'),
        # keys read in place, or declined to orjson: spaces, escapes, repeats, other keys
        (' {"ts" : 7 , "scm":"s","tbl":"t","t":3,"t":1} ', '{"u":{"a":{"t":3,"f":0,"v":1}}}'),
        ('{"ts":7,"scm":"\\u0073","tbl":"t\\u00e9","t":1}', '{"u":{"a":{"t":3,"f":0,"v":1}}}'),
        ('{"ts":7,"sc\\u006d":"x","tbl":"t","t":1}', '{"u":{"a":{"t":3,"f":0,"v":1}}}'),
        ('{"ts":7,"scm":"s","tbl":"t","t":1,"x":[1]}', '{"u":{"a":{"t":3,"f":0,"v":1}}}'),
        ('{"ts":7,"tbl":"t","t":1,"ptn":5,"ohk":false}', '{"d":{"a":{"t":3,"f":0,"v":1}}}'),
        ('{"ts":7,"scm":"s","tbl":["t"],"t":1}', '{"u":{"a":{"t":3,"f":0,"v":1}}}'),
        ('{"ts":7,"scm":"s","tbl":"t","t":1', '{"u":{"a":{"t":3,"f":0,"v":1}}}'),
        ('{"ts":7,"scm":"\xff","tbl":"t","t":1}', '{"u":{"a":{"t":3,"f":0,"v":1}}}'),
    ],
)
def test_unusual_entries_decode_the_same_in_both(speedups, key_json, value_json):
    good_key, good_value = ROW_KEY, '{"u":{"id":{"t":8,"f":11,"v":1}}}'
    messages = [
        KafkaMessage(*frame([key_json], [value_json])),
        KafkaMessage(*frame([good_key, key_json], [good_value, value_json])),
        KafkaMessage(*frame([key_json, good_key], [value_json, good_value])),
    ]
    assert_both_agree(speedups, messages)


def test_random_bytes_never_crash_either_decoder(speedups):
    rng = random.Random(7)
    python = OpenProtocolDecoder(speedups=None)
    for offset in range(3_000):
        key = rng.randbytes(rng.randint(0, 48))
        if rng.random() < 0.7:
            key = U64.pack(1) + key
        value = rng.randbytes(rng.randint(0, 48))
        fuzzed = KafkaRecord("fuzz", 7, offset, key, value)
        agrees(speedups, CodecSettings(), fuzzed, outcome(python, fuzzed))


def test_extension_refuses_an_event_model_of_another_shape(speedups):
    @dataclasses.dataclass(slots=True)
    class OtherColumn:
        type_code: int
        flags: int

    with pytest.raises(ValueError, match="slots"):
        speedups.configure(
            OtherColumn,
            RowEvent,
            ResolvedEvent,
            orjson.loads,
            open_protocol.decode_image,
            open_protocol.decode_value,
            INSERT,
            UPDATE,
            DELETE,
            {},
        )
    # the module is left unconfigured until it is configured again with the real model
    with pytest.raises(RuntimeError, match="configure"):
        speedups.decode(b"", b"", None, TOPIC, PARTITION, 0)
    assert open_protocol.configure_speedups(speedups) is speedups
    assert OpenProtocolDecoder().decode(record(*frame([ROW_KEY], ['{"u":{}}'])))
