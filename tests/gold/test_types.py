"""Gold types from MySQL columns, and silver images typed into them."""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from ticdc_lake.gold import types as gold_types
from ticdc_lake.gold.convert import Origin, column_values, convert
from ticdc_lake.gold.ddl import ColumnDef
from ticdc_lake.gold.exceptions import ConversionError
from ticdc_lake.sample.cases import BY_NAME, COLUMN_TYPES, make_column, random_value
from ticdc_lake.sample.workload.expected_gold import typed_value
from ticdc_lake.silver import mysql
from ticdc_lake.silver.events import json_value
from ticdc_lake.silver.rows import ImageColumns

# Every canonical column, typed from its CREATE TABLE definition.
DDL_TYPES = {
    "c_tinyint": "byte",
    "c_tinyint_unsigned": "short",
    "c_bool": "byte",
    "c_smallint": "short",
    "c_smallint_unsigned": "integer",
    "c_mediumint": "integer",
    "c_mediumint_unsigned": "integer",
    "c_int": "integer",
    "c_int_unsigned": "long",
    "c_bigint": "long",
    "c_bigint_unsigned": "decimal(20,0)",
    "c_float": "float",
    "c_double": "double",
    "c_decimal": "decimal(20,6)",
    "c_decimal_int": "decimal(10,0)",
    "c_decimal_wide": "string",
    "c_date": "date",
    "c_datetime": "timestamp_ntz",
    "c_datetime6": "timestamp_ntz",
    "c_timestamp": "timestamp",
    "c_time": "string",
    "c_year": "integer",
    "c_char": "string",
    "c_varchar": "string",
    "c_tinytext": "string",
    "c_text": "string",
    "c_mediumtext": "string",
    "c_longtext": "string",
    "c_binary": "binary",
    "c_varbinary": "binary",
    "c_tinyblob": "binary",
    "c_blob": "binary",
    "c_mediumblob": "binary",
    "c_longblob": "binary",
    "c_enum": "string",
    "c_set": "string",
    "c_bit": "long",
    "c_json": "string",
}


def test_every_canonical_column_has_its_documented_gold_type():
    assert set(DDL_TYPES) == {c.name for c in COLUMN_TYPES}
    for column_type in COLUMN_TYPES:
        spec = gold_types.ColumnSpec.from_ddl(ColumnDef(column_type.name, column_type.mysql_type))
        assert spec.type_code == column_type.type_code, column_type.name
        assert gold_types.gold_type(spec).delta == DDL_TYPES[column_type.name], column_type.name


def test_row_types_without_the_full_type_keep_what_cannot_be_typed_exactly():
    """Open Protocol and Craft send type codes and flags only."""

    def from_code(name: str) -> str:
        column_type = BY_NAME[name]
        return gold_types.gold_type(
            gold_types.ColumnSpec.from_row(column_type.type_code, column_type.flags, None)
        )

    assert from_code("c_decimal").delta == "string"  # precision unknown: the exact text
    assert from_code("c_enum").delta == "integer"  # members unknown: the index
    assert from_code("c_set").delta == "long"  # the bitmask
    assert from_code("c_bit").delta == "decimal(20,0)"  # width unknown: up to 2^64 - 1
    assert from_code("c_bigint_unsigned").delta == "decimal(20,0)"
    assert from_code("c_varbinary").delta == "binary"
    assert from_code("c_varchar").delta == "string"
    assert from_code("c_timestamp").delta == "timestamp"
    # Canal-JSON's bare mysqlType, and Avro's full DECIMAL/ENUM types.
    assert (
        gold_types.gold_type(gold_types.ColumnSpec.from_row(None, 0, "int unsigned")).delta
        == "long"
    )
    assert (
        gold_types.gold_type(gold_types.ColumnSpec.from_row(None, 0, "varbinary")).delta == "binary"
    )
    assert (
        gold_types.gold_type(
            gold_types.ColumnSpec.from_row(mysql.TYPE_NEWDECIMAL, 0, "decimal")
        ).delta
        == "string"
    )
    enum = gold_types.gold_type(gold_types.ColumnSpec.from_row(mysql.TYPE_ENUM, 0, "enum('x','y')"))
    assert (enum.delta, enum.members) == ("string", ("x", "y"))


def _image_array(images: list[dict]) -> pa.Array:
    columns = ImageColumns()
    for image in images:
        columns.add(image)
    return columns.array()


ORIGIN = Origin("s.t", pa.array(["topic"] * 3), pa.array([1] * 3), pa.array([10, 11, 12]))


def test_column_values_align_with_rows_whatever_the_order_and_absences():
    images = _image_array(
        [
            {"a": make_column(BY_NAME["c_int"], 1), "b": make_column(BY_NAME["c_blob"], b"\x00")},
            {"b": make_column(BY_NAME["c_blob"], None), "a": make_column(BY_NAME["c_int"], 2)},
            {},
        ]
    )
    values = column_values(images, ["b", "a", "missing"])
    assert values["a"].text.to_pylist() == ["1", "2", None]
    assert values["b"].binary.to_pylist() == [b"\x00", None, None]
    assert values["missing"].text.to_pylist() == [None, None, None]


def _convert(name: str, raw: list, zone: str = "UTC", mysql_type: str | None = None):
    column_type = BY_NAME[name]
    definition = ColumnDef(name, mysql_type or column_type.mysql_type)
    gold = gold_types.gold_type(gold_types.ColumnSpec.from_ddl(definition))
    images = _image_array([{name: make_column(column_type, value)} for value in raw])
    values = column_values(images, [name])[name]
    origin = Origin("s.t", *(pa.array([v] * len(raw)) for v in ("topic", 1, 7)))
    zones = pa.array([zone] * len(raw))
    return convert(values, gold, gold.arrow, name, origin, zones)


def test_timestamps_are_read_in_the_ticdc_zone_and_stored_in_utc():
    typed, _ = _convert(
        "c_timestamp",
        ["2024-06-01 08:00:00.000", "2024-10-27 02:30:00.500", None],
        zone="Europe/Berlin",
    )
    assert typed.to_pylist() == [
        dt.datetime(2024, 6, 1, 6, 0, tzinfo=dt.UTC),
        # The fall-back hour happens twice: the earlier instant (CEST, UTC+2) is taken.
        dt.datetime(2024, 10, 27, 0, 30, 0, 500000, tzinfo=dt.UTC),
        None,
    ]
    typed, _ = _convert("c_timestamp", ["2024-06-01 08:00:00.000"], zone="Asia/Shanghai")
    assert typed.to_pylist() == [dt.datetime(2024, 6, 1, 0, 0, tzinfo=dt.UTC)]
    with pytest.raises(ConversionError, match=r"2024-03-31 02:30:00.*offset 7"):
        _convert("c_timestamp", ["2024-03-31 02:30:00.000"], zone="Europe/Berlin")


def test_timestamps_given_in_utc_are_kept_whatever_the_zone():
    """Avro's timestamp-millis (TiCDC up to v6.0) is an instant: silver says so with a Z, and
    it is not read again in the topic's zone, where it could be repeated or skipped."""
    typed, _ = _convert(
        "c_timestamp",
        ["2024-10-27 01:30:00.500Z", "2024-03-31 02:30:00Z", "2024-06-01 08:00:00.000", None],
        zone="Europe/Berlin",
    )
    assert typed.to_pylist() == [
        dt.datetime(2024, 10, 27, 1, 30, 0, 500000, tzinfo=dt.UTC),
        dt.datetime(2024, 3, 31, 2, 30, tzinfo=dt.UTC),
        dt.datetime(2024, 6, 1, 6, 0, tzinfo=dt.UTC),
        None,
    ]
    typed, _ = _convert("c_timestamp", ["1970-01-01 00:00:00Z"], zone="Asia/Shanghai")
    assert typed.to_pylist() == [dt.datetime(1970, 1, 1, tzinfo=dt.UTC)]


@pytest.mark.parametrize(
    ("type_code", "flags", "mysql_type", "delta"),
    [
        (mysql.TYPE_LONG, 0, None, "integer"),  # Avro int
        (mysql.TYPE_LONGLONG, 0, None, "long"),  # long
        (mysql.TYPE_LONGLONG, mysql.FLAG_UNSIGNED, None, "decimal(20,0)"),  # bytes decimal(64,0)
        (mysql.TYPE_FLOAT, 0, None, "float"),
        (mysql.TYPE_DOUBLE, 0, None, "double"),
        (mysql.TYPE_VARCHAR, 0, None, "string"),
        (mysql.TYPE_LONG_BLOB, mysql.FLAG_BINARY, None, "binary"),  # bytes
        (mysql.TYPE_TIMESTAMP, 0, None, "timestamp"),  # timestamp-millis
        (mysql.TYPE_DURATION, 0, None, "string"),  # time-millis
        (mysql.TYPE_NEWDECIMAL, 0, "decimal(8,2)", "decimal(8,2)"),  # column-types
        (mysql.TYPE_DATE, 0, None, "date"),  # column-types
    ],
)
def test_columns_of_ticdc_v6_0s_avro_get_gold_types(type_code, flags, mysql_type, delta):
    spec = gold_types.ColumnSpec.from_row(type_code, flags, mysql_type)
    assert gold_types.gold_type(spec).delta == delta


def test_zero_dates_become_null_and_are_counted():
    typed, nulled = _convert("c_datetime", ["0000-00-00 00:00:00", "2020-00-10 01:02:03", None])
    assert typed.to_pylist() == [None, None, None] and nulled == 2
    typed, nulled = _convert("c_date", ["0000-00-00", "1000-01-01", "9999-12-31"])
    assert typed.to_pylist() == [None, dt.date(1000, 1, 1), dt.date(9999, 12, 31)]
    assert nulled == 1


def test_enum_and_set_become_member_names():
    assert _convert("c_enum", [1, 3, 0])[0].to_pylist() == ["a", "c", ""]
    assert _convert("c_set", [0, 5, 7])[0].to_pylist() == ["", "x,z", "x,y,z"]
    with pytest.raises(ConversionError, match=r"c_enum: value '4'"):
        _convert("c_enum", [4])
    with pytest.raises(ConversionError, match=r"c_set: value '8'"):
        _convert("c_set", [8])


def test_enum_and_set_names_older_ticdc_sent_for_a_default_become_member_names():
    """Open Protocol from TiCDC before v6.5.9, v7.1.5, v7.5.2 and v8.0.0 carries a default it
    filled in by name (the decoder keeps the name: the message has no members)."""
    typed, _ = _convert("c_enum", [1, "b", None, "c", 0])
    assert typed.to_pylist() == ["a", "b", None, "c", ""]
    typed, _ = _convert("c_set", ["x,z", 2, "y", 0, "z,x"])
    assert typed.to_pylist() == ["x,z", "y", "y", "", "x,z"]
    with pytest.raises(ConversionError, match=r"c_enum: value 'd' .*not one of the 3 members"):
        _convert("c_enum", [1, "d"])
    with pytest.raises(ConversionError, match=r"c_set: value 'x,w' .*'w' is not one of"):
        _convert("c_set", ["x,w"])
    # Without the members (the column's DDL not seen) a name has no index: refused, named.
    with pytest.raises(ConversionError, match=r"c_enum: value 'b' does not fit"):
        _convert("c_enum", ["b"], mysql_type="enum")


def test_extremes_fit_exactly():
    typed, _ = _convert("c_bigint_unsigned", [2**64 - 1, 0])
    assert typed.to_pylist() == [Decimal(2**64 - 1), Decimal(0)]
    typed, _ = _convert("c_decimal", ["-99999999999999.999999", "0.000001"])
    assert typed.to_pylist() == [Decimal("-99999999999999.999999"), Decimal("0.000001")]
    typed, _ = _convert("c_float", [mysql.float32(3.4028234663852886e38)])
    assert typed.to_pylist() == [3.4028234663852886e38]
    typed, _ = _convert("c_decimal_wide", ["1." + "0" * 30])
    assert typed.to_pylist() == ["1." + "0" * 30]


def test_a_value_that_does_not_fit_names_column_value_and_kafka_coordinates():
    with pytest.raises(ConversionError) as error:
        _convert("c_tinyint", [1, 300])
    message = str(error.value)
    assert "s.t.c_tinyint" in message and "'300'" in message
    assert "topic topic, partition 1, offset 7" in message


@given(
    name=st.sampled_from([c.name for c in COLUMN_TYPES]),
    seed=st.integers(0, 2**32),
    zone=st.sampled_from(["UTC", "Asia/Shanghai", "America/New_York"]),
)
def test_every_generated_value_types_as_the_independent_oracle_says(name, seed, zone):
    column_type = BY_NAME[name]
    rng = random.Random(seed)
    raw = [random_value(column_type, rng) for _ in range(5)] + [None]
    typed, _ = _convert(name, raw, zone)
    expected = [typed_value(column_type.mysql_type, json_value(v), zone) for v in raw]
    assert typed.to_pylist() == expected
