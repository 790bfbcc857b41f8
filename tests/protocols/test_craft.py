"""Craft (PROTOCOLS.md §3): primitives, the hand-derived vectors, round trips, errors, fuzzing.

Every decoding test runs against both decoders: the pure-Python reference and the compiled
extension (built here into a temporary directory when the install did not build it), and the two
must agree event for event and error for error.
"""

from __future__ import annotations

import dataclasses
import random
import struct
import warnings
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ticdc_lake.errors import ConfigError, DecodeError
from ticdc_lake.protocols import CodecSettings, craft, make_decoder, make_encoder
from ticdc_lake.protocols.craft import (
    CraftDecoder,
    CraftEncoder,
    _Reader,
    encode_delta_uvarint_chunk,
    encode_delta_varint_chunk,
    encode_nullable_bytes_chunk,
    encode_string_chunk,
    encode_uvarint,
    encode_uvarint_chunk,
    encode_uvarint_reversed,
    encode_varint,
    read_uvarint_reversed,
    unzigzag,
    zigzag,
)
from ticdc_lake.records import KafkaRecord
from ticdc_lake.sample.cases import BY_NAME, COLUMN_TYPES, make_column, random_value
from ticdc_lake.silver import mysql
from ticdc_lake.silver.events import (
    DELETE,
    INSERT,
    UPDATE,
    Column,
    DdlEvent,
    ResolvedEvent,
    RowEvent,
)

from tests.conftest import load_vector
from tests.speedups import build_extension, extension_built, native_source
from tests.strategies import partition_streams, without_coordinates

VECTORS = load_vector("craft/HAND_DERIVED_NOT_UPSTREAM_examples.json")["examples"]
SOURCE = native_source("_craft_speedups")


# ---------------------------------------------------------------------------------------------
# The two decoders


def _build_speedups(directory: Path):
    return craft.configure_speedups(build_extension(SOURCE, directory))


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """The compiled decoder module, or None where no C compiler can build it."""
    if craft.SPEEDUPS is not None:
        return craft.SPEEDUPS
    try:
        return _build_speedups(tmp_path_factory.mktemp("craft_speedups"))
    except Exception as exc:  # no compiler: the pure-Python decoder is still tested
        warnings.warn(f"craft extension not built, testing pure Python only: {exc}", stacklevel=1)
        return None


@pytest.fixture(scope="module")
def speedups(compiled):
    if compiled is None:
        pytest.skip("the craft extension cannot be built here")
    return compiled


@pytest.fixture(params=["python", "compiled"])
def decoder(request) -> CraftDecoder:
    if request.param == "python":
        return CraftDecoder(speedups=None)
    return CraftDecoder(speedups=request.getfixturevalue("speedups"))


def _record(value: bytes | None, offset: int = 7) -> KafkaRecord:
    return KafkaRecord("cdc", 3, offset, None, value)


def _encode(events, **options) -> list[bytes]:
    batch = options.pop("max_batch_size", 16)
    settings = CodecSettings(max_batch_size=batch, options=tuple(options.items()))
    return [message.value for message in CraftEncoder(settings).encode(events)]


def _strip_mysql_type(event):
    """What craft keeps of a generated event: everything but the full column type text."""
    if not isinstance(event, RowEvent):
        return event

    def image(columns):
        if columns is None:
            return None
        return {
            name: dataclasses.replace(column, mysql_type=None) for name, column in columns.items()
        }

    return dataclasses.replace(
        event, columns=image(event.columns), old_columns=image(event.old_columns)
    )


def test_speedups_are_used_when_built():
    if extension_built(SOURCE, "ticdc_lake.protocols.native._craft_speedups"):
        assert craft.SPEEDUPS is not None
    else:
        assert craft.SPEEDUPS is None
    assert CraftDecoder().speedups is craft.SPEEDUPS


def test_registry_finds_the_craft_codec():
    assert isinstance(make_decoder("craft"), CraftDecoder)
    assert isinstance(make_encoder("craft"), CraftEncoder)


# ---------------------------------------------------------------------------------------------
# Primitives against hand-computed bytes


def _uvarint(value: int) -> bytes:
    out = bytearray()
    encode_uvarint(out, value)
    return bytes(out)


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, "00"),
        (1, "01"),
        (127, "7f"),
        (128, "8001"),
        (300, "ac02"),  # 300 = 0b10_0101100: 0x2c|0x80, then 0x02
        (2**64 - 1, "ffffffffffffffffff01"),
    ],
)
def test_uvarint_bytes(value, encoded):
    assert _uvarint(value).hex() == encoded
    reader = _Reader(bytes.fromhex(encoded), 0, len(encoded) // 2, "test")
    assert reader.uvarint("v") == value
    assert reader.pos == reader.end


@pytest.mark.parametrize(
    ("value", "zigzagged", "encoded"),
    [
        (0, 0, "00"),
        (-1, 1, "01"),
        (1, 2, "02"),
        (-2, 3, "03"),
        (-5, 9, "09"),  # the meta table's second entry in §3.4
        (2**63 - 1, 2**64 - 2, "feffffffffffffffff01"),
        (-(2**63), 2**64 - 1, "ffffffffffffffffff01"),
    ],
)
def test_zigzag_varint_bytes(value, zigzagged, encoded):
    assert zigzag(value) == zigzagged
    assert unzigzag(zigzagged) == value
    out = bytearray()
    encode_varint(out, value)
    assert out.hex() == encoded
    assert _Reader(bytes(out), 0, len(out), "test").varint("v") == value


def test_uvarint_refuses_more_than_64_bits():
    with pytest.raises(DecodeError, match="starting at byte 0 overflows 64 bits"):
        _Reader(bytes.fromhex("ffffffffffffffffff02"), 0, 10, "test").uvarint("v")
    with pytest.raises(DecodeError, match="runs past the end of the test \\(byte 2\\)"):
        _Reader(bytes.fromhex("8080"), 0, 2, "test").uvarint("v")


@pytest.mark.parametrize(
    ("value", "trailer"), [(5, "05"), (14, "0e"), (127, "7f"), (128, "0180"), (300, "02ac")]
)
def test_reversed_trailer(value, trailer):
    assert encode_uvarint_reversed(value).hex() == trailer
    message = b"\x01" + bytes.fromhex(trailer)
    assert read_uvarint_reversed(message, 1) == (value, len(trailer) // 2)


def test_reversed_trailer_may_not_reach_the_version():
    with pytest.raises(DecodeError, match="runs past the start of the message body \\(byte 1\\)"):
        read_uvarint_reversed(bytes.fromhex("0180"), 1)


def test_chunk_bytes():
    out = bytearray()
    encode_uvarint_chunk(out, [1, 300, 0])
    assert out.hex() == "01ac0200"

    out = bytearray()
    encode_delta_uvarint_chunk(out, [5, 8, 3])  # 8-5 = 3; 3-8 wraps to 2**64-5
    assert out.hex() == "0503fbffffffffffffffff01"
    assert _Reader(bytes(out), 0, len(out), "t").delta_uvarint_chunk(3, "ts") == [5, 8, 3]

    out = bytearray()
    encode_delta_varint_chunk(out, [-1, -1, 4, 2])  # zz(-1), zz(0), zz(5), zz(-2)
    assert out.hex() == "01000a03"
    assert _Reader(bytes(out), 0, len(out), "t").delta_varint_chunk(4, "id") == [-1, -1, 4, 2]

    out = bytearray()
    encode_string_chunk(out, [b"test", b"t1"])
    assert out.hex() == "0402" + b"testt1".hex()

    out = bytearray()
    encode_nullable_bytes_chunk(out, [b"ab", None, b""])  # lengths zz(2), zz(-1), zz(0)
    assert out.hex() == "040100" + b"ab".hex()


def test_delta_varint_wraps_like_go_int64():
    out = bytearray()
    encode_delta_varint_chunk(out, [2**63 - 1, -(2**63)])  # the difference wraps to +1
    assert out.hex() == "feffffffffffffffff01" + "02"
    assert _Reader(bytes(out), 0, len(out), "t").delta_varint_chunk(2, "x") == [
        2**63 - 1,
        -(2**63),
    ]


# ---------------------------------------------------------------------------------------------
# The hand-derived examples (vectors/craft): decoded, and reproduced byte for byte


def _vector_events(name: str):
    example = VECTORS[name]
    given_input = example["input"]
    if "resolved_ts" in given_input:
        return [ResolvedEvent(given_input["resolved_ts"], "cdc", 3, 7, 0)]
    if "query" in given_input:
        return [
            DdlEvent(
                commit_ts=given_input["commit_ts"],
                schema=given_input["schema"],
                table=given_input["table"],
                query=given_input["query"],
                ddl_type=given_input["ddl_action_type"],
                topic="cdc",
                partition=3,
                offset=7,
            )
        ]
    flags = given_input["flags_assumed"]
    types = {"id": mysql.TYPE_LONG, "val": mysql.TYPE_VARCHAR}

    def image(values):
        if values is None:
            return None
        return {name: Column(types[name], flags[name], value) for name, value in values.items()}

    return [
        RowEvent(
            commit_ts=event["commit_ts"],
            schema="test",
            table="t1",
            op=event["op"],
            columns=image(event.get("new")),
            old_columns=image(event.get("old")),
            topic="cdc",
            partition=3,
            offset=7,
            index=index,
        )
        for index, event in enumerate(given_input["events"])
    ]


@pytest.mark.parametrize("name", sorted(VECTORS))
def test_hand_derived_vector_decodes(decoder, name):
    value = bytes.fromhex(VECTORS[name]["kafka_value_hex"])
    assert decoder.decode(_record(value)) == _vector_events(name)


@pytest.mark.parametrize("name", sorted(VECTORS))
def test_hand_derived_vector_layout(name):
    example = VECTORS[name]
    value = bytes.fromhex(example["kafka_value_hex"])
    layout = craft._Layout(value)
    assert layout.tables == example["layout"]["size_tables"]
    assert len(value) - layout.dict_end - 1 == example["layout"]["size_tables_len"]
    terms = craft._term_dictionary(value, layout.dict_start, layout.dict_end)
    assert terms == example["layout"]["dict_terms"]
    headers = craft._Headers(value, 1, layout.headers_end, len(layout.body_sizes), terms)
    expected = example["decoded_headers"]
    assert headers.timestamps == expected["ts"]
    assert headers.types == expected["type"]
    assert [-1 if p is None else p for p in headers.partitions] == expected["partition"]
    assert headers.schemas == [s or "" for s in expected["schema"]]
    assert headers.tables == [t or "" for t in expected["table"]]


@pytest.mark.parametrize("name", sorted(VECTORS))
def test_encoder_reproduces_hand_derived_vector(name):
    assert [m.hex() for m in _encode(_vector_events(name))] == [VECTORS[name]["kafka_value_hex"]]


def test_section_3_4_worked_example():
    (message,) = _encode([ResolvedEvent(1, "t", 0, 0)])
    assert message.hex() == "01" + "0103010101" + "020a09" + "0100" + "05"


# ---------------------------------------------------------------------------------------------
# Round trips over every column type


@given(partition_streams(), st.integers(1, 5))
def test_round_trip_over_every_column_type(compiled, events, max_batch_size):
    messages = _encode(events, max_batch_size=max_batch_size)
    expected = [_strip_mysql_type(event) for event in without_coordinates(events)]
    decoders = [("python", craft.decode_message)]
    if compiled is not None:
        decoders.append(("compiled", compiled.decode))
    for name, decode in decoders:
        batches = [decode(value, "t", 0, offset) for offset, value in enumerate(messages)]
        decoded = [event for batch in batches for event in batch]
        assert without_coordinates(decoded) == expected, name
    assert [len(batch) for batch in batches] == _tiflow_batch_sizes(events, max_batch_size)
    for offset, batch in enumerate(batches):
        assert [(event.offset, event.index) for event in batch] == [
            (offset, index) for index in range(len(batch))
        ]


def _tiflow_batch_sizes(events, max_batch_size: int) -> list[int]:
    """Events per message: runs of rows cut every `max_batch_size`; DDL and resolved alone."""
    sizes = []
    run = 0
    for event in [*events, None]:
        if isinstance(event, RowEvent):
            run += 1
            if run == max_batch_size:
                sizes.append(run)
                run = 0
            continue
        if run:
            sizes.append(run)
            run = 0
        if event is not None:
            sizes.append(1)
    return sizes


def test_message_size_estimate_closes_a_batch():
    rows = [_row(INSERT, key) for key in range(6)]
    # tiflow estimates a row at 32 + 4 + 2 header bytes plus (2 + 9 + 16) for `id` and
    # (3 + 5 + 16) for `val`: 89 bytes, so the second row passes 100
    (one,) = _encode(rows[:1])
    assert len(_encode(rows, max_message_bytes=100)) == 3
    assert len(_encode(rows)) == 1
    assert len(one) < 100


def _row(op, key, val="hello", partition_id=None, schema="test", table="t1"):
    image = {
        "id": make_column(BY_NAME["c_bigint"], key, key=True, nullable=False),
        "val": make_column(BY_NAME["c_varchar"], val),
    }
    image = {name: dataclasses.replace(column, mysql_type=None) for name, column in image.items()}
    return RowEvent(
        commit_ts=400000000000000000 + key,
        schema=schema,
        table=table,
        op=op,
        columns=None if op == DELETE else image,
        old_columns=image if op in (DELETE, UPDATE) else None,
        topic="t",
        partition=0,
        offset=0,
        index=key,
        partition_id=partition_id,
    )


def test_every_column_type_with_canonical_values(decoder):
    rng = random.Random(20260521)
    image = {"id": make_column(BY_NAME["c_bigint"], 1, key=True, nullable=False)}
    for column_type in COLUMN_TYPES:
        image[column_type.name] = make_column(column_type, random_value(column_type, rng))
    image["c_null"] = Column(mysql.TYPE_VARCHAR, mysql.FLAG_NULLABLE, None)
    event = _strip_mysql_type(RowEvent(1, "db", "all_types", INSERT, image, None, "cdc", 3, 7))
    (message,) = _encode([event])
    (decoded,) = decoder.decode(_record(message))
    assert decoded == event
    assert isinstance(decoded.columns["c_varbinary"].value, bytes)
    assert isinstance(decoded.columns["c_text"].value, str)


@pytest.mark.parametrize(
    ("type_code", "flags", "value", "encoded"),
    [
        (mysql.TYPE_LONGLONG, mysql.FLAG_UNSIGNED, 2**64 - 1, "ffffffffffffffffff01"),
        (mysql.TYPE_LONGLONG, 0, -(2**63), "ffffffffffffffffff01"),
        (mysql.TYPE_TINY, 0, -1, "01"),
        (mysql.TYPE_YEAR, mysql.FLAG_UNSIGNED, 2020, "c81f"),  # zigzag even when unsigned
        (mysql.TYPE_ENUM, 0, 2, "02"),
        (mysql.TYPE_SET, 0, 5, "05"),
        (mysql.TYPE_BIT, mysql.FLAG_UNSIGNED, 683, "ab05"),
        (mysql.TYPE_DOUBLE, 0, 1.5, "000000000000f83f"),
        (mysql.TYPE_FLOAT, 0, mysql.float32(0.1), "000000a09999b93f"),
        (mysql.TYPE_NEWDECIMAL, 0, "-129012.1230000", b"-129012.1230000".hex()),
        (mysql.TYPE_VARCHAR, 0, "测试", "测试".encode().hex()),
        (mysql.TYPE_BLOB, mysql.FLAG_BINARY, b"\x89PNG\r\n", "89504e470d0a"),
        (mysql.TYPE_JSON, mysql.FLAG_BINARY, '{"a": 1}', b'{"a": 1}'.hex()),
    ],
)
def test_value_bytes(decoder, type_code, flags, value, encoded):
    assert craft.encode_value(type_code, flags, value).hex() == encoded
    event = RowEvent(1, "s", "t", INSERT, {"c": Column(type_code, flags, value)}, None, "cdc", 3, 7)
    (decoded,) = decoder.decode(_record(_encode([event])[0]))
    assert decoded.columns["c"].value == value
    assert type(decoded.columns["c"].value) is type(value)


def test_geometry_and_null_types_are_sent_as_null(decoder):
    image = {
        "g": Column(mysql.TYPE_GEOMETRY, 0, b"\x00\x01"),
        "n": Column(mysql.TYPE_NULL, 0, 5),
    }
    event = RowEvent(1, "s", "t", INSERT, image, None, "cdc", 3, 7)
    (decoded,) = decoder.decode(_record(_encode([event])[0]))
    assert [column.value for column in decoded.columns.values()] == [None, None]


def test_names_partition_ids_and_missing_ddl_type_survive(decoder):
    events = [
        _row(INSERT, 1, partition_id=2**40, schema="", table="表"),
        DdlEvent(5, "", "", "CREATE DATABASE x", None, "cdc", 3, 7),
    ]
    decoded = [e for m in _encode(events) for e in decoder.decode(_record(m))]
    assert decoded[0].schema == "" and decoded[0].table == "表"
    assert decoded[0].partition_id == 2**40
    assert decoded[1].ddl_type is None and decoded[1].schema == ""


def test_delete_only_handle_key_columns(decoder):
    events = [_row(DELETE, 1), _row(UPDATE, 2)]
    (message,) = _encode(events, delete_only_output_handle_key_columns=True)
    settings = CodecSettings(options=(("delete_only_output_handle_key_columns", True),))
    keyed = CraftDecoder(settings, speedups=decoder.speedups)
    deleted, updated = keyed.decode(_record(message))
    assert list(deleted.old_columns) == ["id"] and deleted.handle_key_only
    assert list(updated.old_columns) == ["id", "val"] and not updated.handle_key_only


def test_update_without_old_values_reads_as_insert(decoder):
    event = dataclasses.replace(_row(UPDATE, 1), old_columns=None)
    (decoded,) = decoder.decode(_record(_encode([event])[0]))
    assert decoded.op == INSERT  # craft has no op field: the column groups are all it has


def test_encoder_refuses_what_craft_cannot_carry():
    with pytest.raises(ValueError, match="commit TS"):
        _encode([dataclasses.replace(_row(INSERT, 1), commit_ts=None)])
    with pytest.raises(ValueError, match="no type code"):
        _encode([RowEvent(1, "s", "t", INSERT, {"c": Column(None, 0, 1)}, None, "t", 0, 0)])
    with pytest.raises(ValueError, match="integer"):
        _encode([RowEvent(1, "s", "t", INSERT, {"c": Column(247, 0, "a")}, None, "t", 0, 0)])
    with pytest.raises(ValueError, match="no columns"):
        _encode([RowEvent(1, "s", "t", INSERT, {}, None, "t", 0, 0)])


def test_compression_is_a_config_error():
    with pytest.raises(ConfigError, match="never compressed"):
        CraftDecoder(CodecSettings(compression="snappy"))


# ---------------------------------------------------------------------------------------------
# Clear errors


def _raises(decoder, value: bytes, reason: str, byte: int | None) -> None:
    with pytest.raises(DecodeError) as info:
        decoder.decode(_record(value))
    error = info.value
    assert error.reason == reason
    assert (error.byte_offset, error.topic, error.partition, error.offset) == (byte, "cdc", 3, 7)
    assert error.protocol == "craft"


ROW = bytes.fromhex(VECTORS["row_batch_insert_update_delete"]["kafka_value_hex"])
DDL = bytes.fromhex(VECTORS["ddl_create_table"]["kafka_value_hex"])
RESOLVED = bytes.fromhex(VECTORS["resolved_ts_1"]["kafka_value_hex"])


def _with_size_tables(body: bytes, tables) -> bytes:
    out = bytearray(body)
    craft.encode_size_tables(out, tables)
    return bytes(out)


def _patched(value: bytes, at: int, new: bytes) -> bytes:
    return value[:at] + new + value[at + len(new) :]


@pytest.mark.parametrize(
    ("value", "reason", "byte"),
    [
        (b"", "version: uvarint starting at byte 0 runs past the end of the message (byte 0)", 0),
        (b"\x02" + RESOLVED[1:], "unsupported craft version 2 at byte 0; expected 1", 0),
        (
            RESOLVED[:-1] + b"\x20",
            "size tables claim 32 bytes but only 10 bytes lie between the version and the trailer",
            11,
        ),
        (
            b"\x01" + RESOLVED[2:],  # one header byte lost: the tables no longer tile
            "size tables claim 5 bytes of headers (5), bodies (0) and term dictionary (0) but "
            "4 bytes lie between the version and the size tables",
            1,
        ),
        (
            _with_size_tables(b"\x01\x01\x03\x01\x01\x01", [[5, 0]]),
            "size tables hold 1 table(s); expected at least 2 (meta sizes, body sizes)",
            6,
        ),
        (
            _with_size_tables(b"\x01\x01\x07\x01\x01\x01", [[5, 0], [0]]),
            "event type 7 at byte 2; expected 1 (row), 2 (DDL) or 3 (resolved)",
            2,
        ),
        (
            _with_size_tables(b"\x01\x01\x03\x03\x01\x01", [[5, 0], [0]]),
            "partition id -2 at byte 3; expected -1 (none) or a physical table id",
            3,
        ),
        (
            _with_size_tables(b"\x01\x01\x03\x01\x04\x01", [[5, 0], [0]]),
            "schema id 2 at byte 4 is not in the term dictionary (0 terms)",
            4,
        ),
        (
            _with_size_tables(b"\x01\x01\x03\x01\x01\x01\x00", [[5, 0], [1]]),
            "resolved event 0 has a 1-byte body at byte 6; expected an empty body",
            6,
        ),
        (
            _with_size_tables(b"\x01\x01\x03\x01\x01\x01", [[5, 0], [0], [3]]),
            "size tables hold 3 tables; expected 2 for 1 events",
            6,
        ),
        (
            _patched(DDL, 14, b"\x03\x7f"),  # query length 127 in a 59-byte body
            "query (127 bytes at byte 16) runs past the end of the body of event 0 (byte 73)",
            16,
        ),
        (
            _patched(DDL, 16, b"\xff"),
            "query at byte 16 is not valid UTF-8 (bad byte at 16)",
            16,
        ),
        (
            _patched(DDL, 76, b"\xc3"),  # first byte of the term "test"
            "term 0 at byte 76 is not valid UTF-8 (bad byte at 76)",
            76,
        ),
        (
            _patched(ROW, 24, b"\x03"),  # group type of event 0
            "column group type 3 at byte 24; expected 1 (new values) or 2 (old values)",
            24,
        ),
        (
            _patched(ROW, 26, b"\x04\x00"),  # names: ids 2, 2
            "column 'id' appears twice in the column group 0 of event 0",
            27,
        ),
        (
            _patched(ROW, 26, b"\x0a"),  # first name id 5 with 4 terms
            "column name id 5 at byte 26 is not in the term dictionary (4 terms)",
            26,
        ),
        (
            _patched(ROW, 32, b"\x05"),  # value length of `id`: zz(-3)
            "value length -3 at byte 32; expected -1 (NULL) or a byte count",
            32,
        ),
        (
            _patched(ROW, 33, b"\x08"),  # `val` claims 4 bytes, 2 remain
            "value of column 'val' (4 bytes at byte 35) runs past the end of the column group 0 "
            "of event 0 (byte 37)",
            35,
        ),
        (
            _patched(ROW, 28, b"\x05"),  # `id` typed DOUBLE: its 1-byte value cannot be one
            "DOUBLE value of column 'id' at byte 34 is 1 bytes; expected 8",
            34,
        ),
        (
            _patched(ROW, 28, b"\x06"),  # type code 6 (NULL) cannot carry a value
            "column 'id' has type code 6, which carries no value in craft, but a 1-byte value "
            "is at byte 34",
            34,
        ),
        (
            _patched(ROW, 34, b"\x82"),  # a uvarint running into `val`'s bytes
            "signed integer: varint starting at byte 34 runs past the end of the value of "
            "column 'id' (byte 35)",
            34,
        ),
    ],
)
def test_errors_name_the_byte_and_what_was_expected(decoder, value, reason, byte):
    _raises(decoder, value, reason, byte)


def test_tombstone_is_a_decode_error(decoder):
    _raises(decoder, None, "craft message has no value (a tombstone); TiCDC always sends one", None)


def test_bad_utf8_in_a_text_column(decoder):
    event = RowEvent(
        1, "s", "t", INSERT, {"c": Column(mysql.TYPE_VARCHAR, 0, "ab")}, None, "t", 0, 0
    )
    (message,) = _encode([event])
    at = message.index(b"ab")
    _raises(
        decoder,
        _patched(message, at + 1, b"\xe9"),
        f"value of column 'c' at byte {at} is not valid UTF-8 (bad byte at {at + 1})",
        at + 1,
    )


def test_float_outside_float32_range(decoder):
    event = RowEvent(
        1, "s", "t", INSERT, {"f": Column(mysql.TYPE_DOUBLE, 0, 1e300)}, None, "t", 0, 0
    )
    (message,) = _encode([event])
    # retype the column FLOAT: its 8 bytes now hold a double no float32 can represent
    types_at = message.index(bytes([mysql.TYPE_DOUBLE]) + b"\x00" + b"\x10")
    at = message.index(struct.pack("<d", 1e300))
    _raises(
        decoder,
        _patched(message, types_at, bytes([mysql.TYPE_FLOAT])),
        f"FLOAT value of column 'f' at byte {at} (1e+300) is outside the float32 range",
        at,
    )


# ---------------------------------------------------------------------------------------------
# Robustness: 10,000+ mutated messages; both decoders agree on every one


def _fuzz_corpus(rng: random.Random) -> list[bytes]:
    """Valid messages: row batches over every column type, DDLs and resolved events."""
    events = []
    for key in range(40):
        chosen = rng.sample(COLUMN_TYPES, 6)
        image = {"id": make_column(BY_NAME["c_bigint"], key, key=True, nullable=False)}
        for column_type in chosen:
            value = random_value(column_type, rng) if rng.random() < 0.8 else None
            image[column_type.name] = make_column(column_type, value)
        op = rng.choice((INSERT, UPDATE, DELETE))
        events.append(
            RowEvent(
                commit_ts=rng.randrange(1, 2**63),
                schema=rng.choice(("db", "")),
                table=rng.choice(("t1", "t2", "ü")),
                op=op,
                columns=None if op == DELETE else image,
                old_columns=image if op != INSERT else None,
                topic="t",
                partition=0,
                offset=0,
                partition_id=rng.choice((None, 77)),
            )
        )
        if key % 9 == 0:
            events.append(DdlEvent(rng.randrange(2**63), "db", "t1", "TRUNCATE t1", 11, "t", 0, 0))
        if key % 7 == 0:
            events.append(ResolvedEvent(rng.randrange(2**64), "t", 0, 0))
    return _encode(events, max_batch_size=3)


def _mutate(rng: random.Random, value: bytes) -> bytes:
    data = bytearray(value)
    kind = rng.randrange(7)
    if kind == 0:  # truncation
        return bytes(data[: rng.randrange(len(data))])
    if kind == 1:  # bit flips
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif kind == 2:  # byte replaced with an interesting value
        data[rng.randrange(len(data))] = rng.choice(
            (0x00, 0x01, 0x7F, 0x80, 0xFF, rng.randrange(256))
        )
    elif kind == 3:  # bytes inserted or deleted: every later offset shifts
        at = rng.randrange(len(data))
        if rng.random() < 0.5:
            data[at:at] = rng.randbytes(rng.randint(1, 4))
        else:
            del data[at : at + rng.randint(1, 4)]
    elif kind == 4:  # a trailer claiming some other length
        data[-1] = rng.randrange(256)
    elif kind == 5:  # random bytes behind a valid version
        return b"\x01" + rng.randbytes(rng.randint(0, 40))
    else:  # two messages spliced
        return bytes(data[: rng.randrange(len(data))]) + bytes(data[rng.randrange(len(data)) :])
    return bytes(data)


def _same(left, right) -> bool:
    """Equal outcomes, where a NaN read from mutated FLOAT/DOUBLE bytes counts as equal."""
    return left == right or ("nan" in repr(left) and repr(left) == repr(right))


def _outcome(decoder: CraftDecoder, record: KafkaRecord):
    try:
        return decoder.decode(record)
    except DecodeError as error:
        assert (error.topic, error.partition, error.offset) == (record.topic, 3, record.offset)
        assert error.protocol == "craft" and error.reason
        return ("error", error.reason, error.byte_offset)


def test_fuzzed_messages_raise_only_decode_error_and_both_decoders_agree(compiled):
    rng = random.Random(0xC0FFEE)
    corpus = _fuzz_corpus(rng)
    python = CraftDecoder(speedups=None)
    fast = CraftDecoder(speedups=compiled) if compiled is not None else None
    errors = 0
    for offset in range(12_000):
        value = _mutate(rng, rng.choice(corpus))
        record = KafkaRecord("cdc", 3, offset, None, value)
        expected = _outcome(python, record)  # anything but DecodeError fails the test here
        if fast is not None:
            assert _same(_outcome(fast, record), expected), value.hex()
        errors += isinstance(expected, tuple)
    # most mutations break a message somewhere; enough survive to exercise the value paths
    assert errors > 6_000 and 12_000 - errors > 500


def test_random_bytes_never_crash_either_decoder(speedups):
    rng = random.Random(7)
    python, compiled = CraftDecoder(speedups=None), CraftDecoder(speedups=speedups)
    for offset in range(3_000):
        value = rng.randbytes(rng.randint(0, 64))
        record = KafkaRecord("cdc", 3, offset, None, value)
        assert _same(_outcome(compiled, record), _outcome(python, record))


def test_huge_counts_are_refused_before_allocation(decoder):
    # a column count of 2**60 in an 18-byte group must fail on the count, not on memory
    group = b"\x01" + _uvarint(2**60) + b"\x00" * 8
    header = bytearray(b"\x01")
    craft._encode_headers(header, [1], [1], [-1], [-1], [-1])
    message = _with_size_tables(bytes(header) + group, [[5, 0], [len(group)], [len(group)]])
    _raises(
        decoder,
        message,
        f"column count {2**60} at byte 7 cannot fit in the 8 bytes left in the column group 0 "
        f"of event 0",
        7,
    )
