"""Values that do not fit their column's declared type are a DecodeError of their record, in
every protocol and on both decoder paths (compiled and pure Python), naming the column, the
value, the type and what was expected; values at the edges of each type still decode."""

from __future__ import annotations

import math

import orjson
import pytest
from ticdc_lake.errors import DecodeError
from ticdc_lake.protocols import (
    CodecSettings,
    canal_json,
    craft,
    make_decoder,
    make_encoder,
    open_protocol,
)
from ticdc_lake.protocols.canal_json import CanalJsonDecoder
from ticdc_lake.protocols.craft import CraftDecoder
from ticdc_lake.protocols.open_protocol import OpenProtocolDecoder
from ticdc_lake.records import KafkaRecord
from ticdc_lake.sample.cases import BY_NAME, make_column
from ticdc_lake.silver import mysql
from ticdc_lake.silver.events import INSERT, Column, RowEvent
from ticdc_lake.silver.schema_registry import InMemorySchemaRegistry
from ticdc_lake.silver.values import events_problem, value_check

from tests.protocols.test_open_protocol import frame

TOPIC = "cdc.s.t"
ROW_KEY = '{"ts":1,"scm":"s","tbl":"t","t":1}'
ID = '"id":{"t":8,"h":true,"f":11,"v":1}'


def record(key: bytes | None, value: bytes | None) -> KafkaRecord:
    return KafkaRecord(TOPIC, 0, 5, key, value)


def both_decoders(protocol: str, settings: CodecSettings) -> list:
    """The default decoder (compiled when built) and the pure-Python reference."""
    reference = {
        "open-protocol": OpenProtocolDecoder,
        "canal-json": CanalJsonDecoder,
        "craft": CraftDecoder,
    }.get(protocol)
    decoders = [make_decoder(protocol, settings)]
    if reference is not None:
        decoders.append(reference(settings, speedups=None))
    return decoders


def assert_refused(protocol: str, settings: CodecSettings, message, *expected: str) -> None:
    """Every decoder raises a DecodeError at the record's coordinates whose reason holds each
    of `expected`; all give the same reason."""
    reasons = set()
    for decoder in both_decoders(protocol, settings):
        with pytest.raises(DecodeError) as caught:
            decoder.decode(record(message.key, message.value))
        error = caught.value
        assert (error.protocol, error.topic, error.offset) == (protocol, TOPIC, 5)
        for text in expected:
            assert text in error.reason, error.reason
        reasons.add(error.reason)
    assert len(reasons) == 1, reasons


class Message:
    def __init__(self, key: bytes | None, value: bytes | None):
        self.key, self.value = key, value


# --- the values of the issue, as each protocol writes them by hand ---------------------------

OPEN_CASES = [
    # (column JSON, what the error must say)
    ('{"t":1,"f":1,"v":300}', ["300", "TINYINT (type code 1)", "[-128, 127]"]),
    (
        '{"t":8,"f":1,"v":9223372036854775808}',
        ["9223372036854775808", "BIGINT", "9223372036854775807]"],
    ),
    ('{"t":8,"f":129,"v":-1}', ["-1", "BIGINT UNSIGNED", "[0, 18446744073709551615]"]),
    ('{"t":3,"f":129,"v":4294967296}', ["4294967296", "INT UNSIGNED", "[0, 4294967295]"]),
    ('{"t":9,"f":1,"v":8388608}', ["8388608", "MEDIUMINT", "[-8388608, 8388607]"]),
    ('{"t":248,"f":0,"v":-5}', ["-5", "SET (type code 248)", "[0, 18446744073709551615]"]),
    ('{"t":247,"f":0,"v":-1}', ["-1", "ENUM (type code 247)"]),
    ('{"t":16,"f":129,"v":-1}', ["-1", "BIT (type code 16)"]),
    ('{"t":13,"f":129,"v":-99999}', ["-99999", "YEAR (type code 13)", "0 or a year"]),
    ('{"t":13,"f":129,"v":1900}', ["1900", "YEAR"]),
    ('{"t":10,"f":1,"v":"garbage"}', ["'garbage'", "DATE (type code 10)", "YYYY-MM-DD"]),
    ('{"t":10,"f":1,"v":"2024-13-01"}', ["'2024-13-01'", "DATE"]),
    ('{"t":12,"f":1,"v":"2024-01-01 24:00:00"}', ["DATETIME", "HH:MM:SS"]),
    ('{"t":7,"f":1,"v":"2024-01-01T00:00:00"}', ["TIMESTAMP"]),
    # What TiCDC before v5.4.0 sent for a NOT NULL column added with this default.
    ('{"t":7,"f":1,"v":"CURRENT_TIMESTAMP"}', ["TIMESTAMP", "before v5.1.4", "not in the message"]),
    ('{"t":12,"f":1,"v":"CURRENT_TIMESTAMP"}', ["DATETIME", "CURRENT_TIMESTAMP is the column's"]),
    ('{"t":11,"f":1,"v":"839:00:00"}', ["'839:00:00'", "TIME", "838:59:59"]),
    ('{"t":246,"f":1,"v":"12a.5"}', ["'12a.5'", "DECIMAL (type code 246)", "decimal text"]),
    ('{"t":246,"f":1,"v":"' + "9" * 66 + '"}', ["DECIMAL", "65 digits"]),
    ('{"t":245,"f":1,"v":"{not json"}', ["'{not json'", "JSON (type code 245)", "JSON text"]),
]


@pytest.mark.parametrize(("column", "expected"), OPEN_CASES)
def test_open_protocol_refuses_values_outside_their_type(column, expected):
    for value_json in (
        f'{{"u":{{{ID},"c":{column}}}}}',
        f'{{"u":{{{ID}}},"p":{{"c":{column}}}}}',  # old image, completed from the new one
        f'{{"d":{{{ID},"c":{column}}}}}',
    ):
        message = Message(*frame([ROW_KEY], [value_json]))
        assert_refused("open-protocol", CodecSettings(), message, "column 'c'", *expected)


def test_open_protocol_names_the_image_and_the_event_in_a_batch():
    good = f'{{"u":{{{ID}}}}}'
    bad = f'{{"u":{{{ID}}},"p":{{{ID},"c":{{"t":1,"f":1,"v":300}}}}}}'
    message = Message(*frame([ROW_KEY, ROW_KEY], [good, bad]))
    assert_refused("open-protocol", CodecSettings(), message, "row event 1 (s.t), old image")


def canal_row(mysql_type: str, text: str) -> Message:
    document = {
        "id": 0,
        "database": "s",
        "table": "t",
        "pkNames": ["id"],
        "isDdl": False,
        "type": "INSERT",
        "es": 1,
        "ts": 1,
        "sql": "",
        "sqlType": {"id": -5, "c": 12},
        "mysqlType": {"id": "bigint", "c": mysql_type},
        "old": None,
        "data": [{"id": "1", "c": text}],
        "_tidb": {"commitTs": 1 << 20},
    }
    return Message(None, orjson.dumps(document))


CANAL_CASES = [
    # (mysqlType, text, content-compatible, what the error must say)
    ("date", "garbage", False, ["'garbage'", "DATE", "YYYY-MM-DD"]),
    ("datetime", "2024-02-01 12:61:00", False, ["DATETIME"]),
    ("timestamp(3)", "yesterday", True, ["timestamp(3)"]),
    ("time", "12:00", False, ["TIME"]),
    ("decimal(5,2)", "123456.789", True, ["'123456.789'", "decimal(5,2)", "3 digits before"]),
    ("decimal(5,2)", "1.234", True, ["decimal(5,2)", "2 after"]),
    ("json", "{not json", False, ["'{not json'", "JSON", "JSON text"]),
    ("float", "1e400", False, ["inf", "FLOAT", "a finite number"]),
    ("double", "NaN", False, ["nan", "DOUBLE", "a finite number"]),
    ("double", "-Infinity", False, ["-inf", "DOUBLE"]),
    ("year", "1900", False, ["1900", "YEAR"]),
    ("enum('a','b')", "3", True, ["enum('a','b')", "[0, 2]"]),
    ("set('a','b')", "4", True, ["set('a','b')", "[0, 3]"]),
    # refused before this check existed, by the integer converters: still refused
    ("tinyint", "300", False, ["'300'", "tinyint"]),
    ("bigint unsigned", "-1", False, ["'-1'"]),
    ("set", "-5", False, ["'-5'"]),
]


@pytest.mark.parametrize(("mysql_type", "text", "compatible", "expected"), CANAL_CASES)
def test_canal_json_refuses_values_outside_their_type(mysql_type, text, compatible, expected):
    settings = CodecSettings(options=(("content_compatible", compatible),))
    message = canal_row(mysql_type, text)
    assert_refused("canal-json", settings, message, "column 'c'", *expected)


def test_canal_json_decimal_without_precision_is_only_checked_for_form():
    """Without content-compatible the mysqlType is a bare `decimal`: any precision fits."""
    [event] = CanalJsonDecoder().decode(record(None, canal_row("decimal", "123456.789").value))
    assert event.columns["c"].value == "123456.789"


# --- the same values through each protocol's encoder ------------------------------------------


def row(column: Column) -> RowEvent:
    image = {"id": make_column(BY_NAME["c_bigint"], 1, key=True, nullable=False), "c": column}
    return RowEvent(1 << 20, "s", "t", INSERT, image, None, TOPIC, 0, 0)


def typed(name: str, value) -> Column:
    return make_column(BY_NAME[name], value)


DECIMAL_5_2 = "decimal(5,2)"
# (protocol, column, what the error must say): each value as far as the protocol can carry it.
ENCODED_CASES = [
    ("craft", typed("c_tinyint", 300), ["300", "TINYINT", "[-128, 127]"]),
    ("craft", typed("c_tinyint_unsigned", 256), ["256", "TINYINT UNSIGNED", "[0, 255]"]),
    ("craft", typed("c_year", -99999), ["-99999", "YEAR"]),
    ("craft", typed("c_date", "garbage"), ["'garbage'", "DATE"]),
    ("craft", typed("c_time", "-839:00:00"), ["TIME"]),
    ("craft", typed("c_json", "{not json"), ["'{not json'", "JSON"]),
    ("craft", typed("c_decimal", "1.2.3"), ["'1.2.3'", "DECIMAL"]),
    ("craft", typed("c_float", math.inf), ["inf", "FLOAT", "finite"]),
    ("craft", typed("c_double", math.nan), ["nan", "DOUBLE", "finite"]),
    ("open-protocol", typed("c_smallint", -32769), ["-32769", "SMALLINT"]),
    ("open-protocol", typed("c_datetime", "0000-00-00 00:00:60"), ["DATETIME"]),
    ("canal-json", typed("c_float", math.inf), ["inf", "FLOAT"]),
    ("canal-json", typed("c_date", "2024-1-1"), ["'2024-1-1'", "DATE"]),
    ("avro", typed("c_int_unsigned", -1), ["-1", "INT UNSIGNED", "[0, 4294967295]"]),
    ("avro", typed("c_year", -99999), ["-99999", "YEAR"]),
    ("avro", typed("c_date", "garbage"), ["'garbage'", "DATE"]),
    ("avro", typed("c_timestamp", "2024-01-01"), ["TIMESTAMP"]),
    ("avro", typed("c_json", "{not json"), ["'{not json'", "JSON"]),
    ("avro", typed("c_float", math.inf), ["inf", "FLOAT"]),
    ("avro", typed("c_double", -math.inf), ["-inf", "DOUBLE"]),
    (
        "avro",
        Column(mysql.TYPE_NEWDECIMAL, mysql.FLAG_BINARY, "123456.78", DECIMAL_5_2),
        ["'123456.78'", DECIMAL_5_2, "3 digits before"],
    ),
]


def codec_settings(protocol: str) -> CodecSettings:
    if protocol == "avro":
        return CodecSettings(schema_source=InMemorySchemaRegistry())
    return CodecSettings()


@pytest.mark.parametrize(
    ("protocol", "column", "expected"),
    ENCODED_CASES,
    ids=[f"{protocol}-{column.value}" for protocol, column, _ in ENCODED_CASES],
)
def test_every_protocol_refuses_values_outside_their_type(protocol, column, expected):
    settings = codec_settings(protocol)
    [message] = make_encoder(protocol, settings).encode([row(column)])
    assert_refused(protocol, settings, message, "column 'c'", *expected)


EDGE_VALUES = [
    typed("c_year", 0),
    typed("c_year", 1901),
    typed("c_year", 2155),
    typed("c_date", "0000-00-00"),
    typed("c_date", "2024-00-15"),
    typed("c_datetime6", "0000-00-00 00:00:00.000000"),
    typed("c_datetime", "9999-12-31 23:59:59"),
    typed("c_timestamp", "1970-01-01 00:00:01.000"),
    typed("c_time", "-838:59:59.00"),
    typed("c_time", "838:59:59.00"),
    typed("c_time", "00:00:00.01"),
    typed("c_bigint", -(2**63)),
    typed("c_bigint", 2**63 - 1),
    typed("c_bigint_unsigned", 2**64 - 1),
    typed("c_mediumint_unsigned", 2**24 - 1),
    typed("c_set", 7),
    typed("c_enum", 0),
    typed("c_bit", 1023),
    typed("c_float", 3.4028234663852886e38),
    typed("c_double", -1.7976931348623157e308),
    typed("c_decimal_wide", "-" + "9" * 35 + "." + "9" * 30),
    Column(mysql.TYPE_NEWDECIMAL, mysql.FLAG_BINARY, "-999.99", DECIMAL_5_2),
    Column(mysql.TYPE_NEWDECIMAL, mysql.FLAG_BINARY, "0.50", DECIMAL_5_2),
    typed("c_json", '{"a": [1, 2.5, null, "x"], "b": {}}'),
    typed("c_json", "18446744073709551615"),
]


@pytest.mark.parametrize("protocol", ["open-protocol", "craft", "canal-json", "avro"])
def test_edge_values_of_every_type_still_decode(protocol):
    settings = codec_settings(protocol)
    encoder = make_encoder(protocol, settings)
    for column in EDGE_VALUES:
        [message] = encoder.encode([row(column)])
        for decoder in both_decoders(protocol, settings):
            [event] = decoder.decode(record(message.key, message.value))
            decoded = event.columns["c"].value
            assert decoded == column.value or (protocol == "avro" and column.value == 0)


# --- the check itself -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("type_code", "unsigned", "mysql_type", "fits", "does_not_fit"),
    [
        (mysql.TYPE_TINY, False, None, [-128, 127, "aa"], [-129, 128]),
        (mysql.TYPE_TINY, True, None, [0, 255], [-1, 256]),
        (mysql.TYPE_SHORT, True, None, [65535], [65536]),
        (mysql.TYPE_INT24, False, None, [-(2**23)], [2**23]),
        (mysql.TYPE_LONG, False, None, [2**31 - 1], [2**31]),
        (mysql.TYPE_LONGLONG, True, None, [2**64 - 1], [2**64]),
        (mysql.TYPE_YEAR, True, None, [0, 1901, 2155], [1, 1900, 2156, -1]),
        (mysql.TYPE_BIT, True, "bit(1)", [683, 2**64 - 1], [-1, 2**64]),
        (mysql.TYPE_SET, False, None, [0, 2**64 - 1], [-5, 2**64]),
        (mysql.TYPE_SET, False, "set('a','b','c')", [7], [8]),
        (mysql.TYPE_ENUM, False, None, [0, 65535], [-1, 65536]),
        (mysql.TYPE_ENUM, False, "enum('a')", [0, 1], [2]),
        (mysql.TYPE_FLOAT, False, None, [0.0, -3.4e38], [math.inf, -math.inf, math.nan]),
        (mysql.TYPE_DOUBLE, False, None, [5e-324], [math.nan]),
        (
            mysql.TYPE_NEWDECIMAL,
            False,
            None,
            ["0", "-1.5", "007.10"],
            ["", "1.", ".5", "+1", "1e5"],
        ),
        (mysql.TYPE_NEWDECIMAL, False, "decimal(5,2)", ["999.99", "0.00"], ["1000.00", "1.234"]),
        (mysql.TYPE_NEWDECIMAL, False, "decimal(10,0)", ["1234567890"], ["1.5", "12345678901"]),
        (mysql.TYPE_DATE, False, None, ["0000-00-00", "9999-12-31"], ["2024-02-32", "24-01-01"]),
        (mysql.TYPE_DATE, False, None, [], ["2024-01-01 00:00:00", "２０２４-01-01"]),
        (
            mysql.TYPE_DATETIME,
            False,
            None,
            ["2024-01-01 00:00:00", "2024-01-01 23:59:59.123456"],
            ["2024-01-01", "2024-01-01 00:00:00.1234567", "2024-01-01 00:00:00."],
        ),
        (
            mysql.TYPE_DURATION,
            False,
            None,
            ["-838:59:59", "100:00:00", "-00:00:01.5"],
            ["24:60:00"],
        ),
        (mysql.TYPE_JSON, False, None, ["null", "[]", '"x"', "1e308"], ["", "{", "1e400", "NaN"]),
        (mysql.TYPE_VARCHAR, False, None, ["anything"], []),
    ],
)
def test_value_check(type_code, unsigned, mysql_type, fits, does_not_fit):
    check = value_check(type_code, unsigned, mysql_type)
    for value in fits:
        assert check is None or check(value) is None, value
    for value in does_not_fit:
        assert check(value) is not None, value


# --- the compiled check agrees with values.py -------------------------------------------------

COMPILED = [
    module.SPEEDUPS for module in (open_protocol, craft, canal_json) if module.SPEEDUPS is not None
]
INTEGERS = [0, 1, -1, 127, 128, 255, 256, 1900, 1901, 2155, 2156, 65535, 65536, 2**31, 2**32]
INTEGERS += [2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, "7", 1.0]
ODD_VALUES = (
    [
        Column(code, flags, value, mysql_type)
        for code, flags, mysql_type in [
            (mysql.TYPE_TINY, 0, None),
            (mysql.TYPE_TINY, mysql.FLAG_UNSIGNED, None),
            (mysql.TYPE_INT24, mysql.FLAG_UNSIGNED, None),
            (mysql.TYPE_LONG, 0, None),
            (mysql.TYPE_LONGLONG, 0, None),
            (mysql.TYPE_LONGLONG, mysql.FLAG_UNSIGNED, None),
            (mysql.TYPE_YEAR, mysql.FLAG_UNSIGNED, None),
            (mysql.TYPE_BIT, mysql.FLAG_UNSIGNED, "bit(3)"),
            (mysql.TYPE_SET, 0, None),
            (mysql.TYPE_SET, 0, "set('a')"),
            (mysql.TYPE_ENUM, 0, None),
        ]
        for value in INTEGERS
    ]
    + [
        Column(code, 1, text, mysql_type)
        for code, mysql_type in [
            (mysql.TYPE_DATE, None),
            (mysql.TYPE_DATETIME, None),
            (mysql.TYPE_TIMESTAMP, None),
            (mysql.TYPE_DURATION, None),
            (mysql.TYPE_NEWDECIMAL, None),
            (mysql.TYPE_NEWDECIMAL, "decimal(5,2)"),
            (mysql.TYPE_DECIMAL_OLD, None),
            (mysql.TYPE_JSON, None),
        ]
        for text in [
            "",
            "0",
            "-0.5",
            "1.",
            ".5",
            "-",
            "12345.678",
            "9" * 65,
            "9" * 66,
            "1." + "0" * 30,
            "1." + "0" * 31,
            "0000-00-00",
            "2024-12-31",
            "2024-13-01",
            "2024-01-32",
            "2024-1-01",
            "2024-01-01 23:59:59",
            "2024-01-01 24:00:00",
            "2024-01-01 00:00:00.",
            "2024-01-01 00:00:00.123456",
            "2024-01-01 00:00:00.1234567",
            "00:00:00",
            "-838:59:59",
            "838:59:59",
            "838:59:59.1",
            "838:59:59.000000",
            "-838:59:59.000001",
            "838:59:59.0000000",
            "838:59:58.999999",
            "838:58:59.5",
            "-838:00:00.1",
            "837:59:59.999999",
            "839:00:00",
            "99:60:00",
            "1:00:00",
            "100:00:00",
            "-12:00:00.5",
            '{"a": 1}',
            "{not json",
            "２０２４-01-01",
            5,
        ]
    ]
    + [
        Column(code, 1, value, None)
        for code in (mysql.TYPE_FLOAT, mysql.TYPE_DOUBLE)
        for value in (0.0, -1.5, math.inf, -math.inf, math.nan, 1, "1.5")
    ]
    + [Column(mysql.TYPE_VARCHAR, 0, "x", None), Column(None, 0, 5, None), Column(300, 0, 5, None)]
)


@pytest.mark.skipif(not COMPILED, reason="no compiled decoder is built here")
@pytest.mark.parametrize("module", COMPILED, ids=lambda module: module.__name__.split(".")[-1])
def test_the_compiled_check_never_passes_what_values_py_refuses(module):
    """`events_fit` may leave a value to Python (False) but must never pass one values.py
    refuses; and it does answer for the common kinds, or it would save nothing."""
    for column in ODD_VALUES + EDGE_VALUES:
        events = [row(column)]
        if module.events_fit(events):
            assert events_problem(events) is None, column
    # Only full types naming DECIMAL precision or members are left.
    typed_codes = {mysql.TYPE_NEWDECIMAL, mysql.TYPE_ENUM, mysql.TYPE_SET}
    for column in EDGE_VALUES:
        fits = module.events_fit([row(column)])
        assert fits or column.type_code in typed_codes, column


@pytest.mark.skipif(not COMPILED, reason="no compiled decoder is built here")
@pytest.mark.parametrize("module", COMPILED, ids=lambda module: module.__name__.split(".")[-1])
def test_the_compiled_check_leaves_objects_with_unset_fields_to_python(module):
    """An event or column made without its fields (no decoder makes one) is left to Python,
    which reports it, instead of being read as empty memory."""
    no_flags = Column.__new__(Column)
    no_flags.type_code, no_flags.value = mysql.TYPE_TINY, 5
    for event in (row(Column.__new__(Column)), row(no_flags), RowEvent.__new__(RowEvent)):
        assert not module.events_fit([event])
