"""Hypothesis strategies over the event model, built from the canonical column types (cases.py).

Events come with placeholder coordinates (topic "t", partition 0, offset 0, index 0); compare
decoded events with `without_coordinates`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json

from hypothesis import strategies as st
from ticdc_lake.sample.cases import (
    BY_NAME,
    COLUMN_TYPES,
    ColumnType,
    format_decimal,
    fraction,
    integer_range,
    make_column,
)
from ticdc_lake.silver import mysql
from ticdc_lake.silver.events import DELETE, OPS, UPDATE, DdlEvent, ResolvedEvent, RowEvent

KEY_TYPE = BY_NAME["c_bigint"]
TSO = st.integers(min_value=1, max_value=2**63 - 1)
NAMES = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=12)
# Identifiers every protocol keeps as they are (Avro sanitises anything else to `_`).
SAFE_NAMES = st.from_regex(r"[a-z_][a-z0-9_]{0,10}", fullmatch=True)
texts = st.text(st.characters(codec="utf-8"), max_size=40)


def _datetime_text(column_type: ColumnType) -> st.SearchStrategy[str]:
    fsp = column_type.parsed.length or 0
    if column_type.type_code == mysql.TYPE_TIMESTAMP:
        moments = st.datetimes(dt.datetime(1970, 1, 2), dt.datetime(2038, 1, 18))
        zero = st.nothing()
    else:
        moments = st.datetimes(dt.datetime(1000, 1, 1), dt.datetime(9999, 12, 31))
        zero = st.just(
            "0000-00-00"
            if column_type.type_code == mysql.TYPE_DATE
            else "0000-00-00 00:00:00" + fraction(fsp, 0)
        )
    if column_type.type_code == mysql.TYPE_DATE:
        return zero | moments.map(lambda moment: moment.strftime("%Y-%m-%d"))
    return zero | moments.map(
        lambda moment: moment.strftime("%Y-%m-%d %H:%M:%S") + fraction(fsp, moment.microsecond)
    )


def values(column_type: ColumnType) -> st.SearchStrategy:
    """Non-NULL values of `column_type`, in the event model's representation."""
    code, parsed = column_type.type_code, column_type.parsed
    if code in (
        mysql.TYPE_TINY,
        mysql.TYPE_SHORT,
        mysql.TYPE_INT24,
        mysql.TYPE_LONG,
        mysql.TYPE_LONGLONG,
        mysql.TYPE_YEAR,
        mysql.TYPE_BIT,
    ):
        low, high = integer_range(column_type)
        if code == mysql.TYPE_YEAR:
            return st.just(0) | st.integers(low, high)
        return st.integers(low, high)
    if code == mysql.TYPE_FLOAT:
        return st.floats(width=32, allow_nan=False, allow_infinity=False)
    if code == mysql.TYPE_DOUBLE:
        return st.floats(allow_nan=False, allow_infinity=False)
    if code == mysql.TYPE_NEWDECIMAL:
        limit = 10**parsed.length - 1
        return st.integers(-limit, limit).map(lambda n: format_decimal(n, parsed.scale or 0))
    if code in (mysql.TYPE_DATE, mysql.TYPE_DATETIME, mysql.TYPE_TIMESTAMP):
        return _datetime_text(column_type)
    if code == mysql.TYPE_DURATION:
        return st.builds(
            lambda negative, h, mi, s, us: (
                f"{'-' if negative else ''}{h:02d}:{mi:02d}:{s:02d}"
                + fraction(parsed.length, 0 if h == 838 else us)  # TIME stops at 838:59:59
            ),
            st.booleans(),
            st.integers(0, 838),
            st.integers(0, 59),
            st.integers(0, 59),
            st.integers(0, 999999),
        )
    if code == mysql.TYPE_ENUM:
        return st.integers(1, len(parsed.elements))
    if code == mysql.TYPE_SET:
        return st.integers(0, (1 << len(parsed.elements)) - 1)
    if code == mysql.TYPE_JSON:
        documents = st.dictionaries(
            texts, st.integers(-(2**53), 2**53) | texts | st.none(), max_size=3
        )
        return documents.map(lambda d: json.dumps(d, ensure_ascii=False, separators=(", ", ": ")))
    if mysql.is_binary_string(code, column_type.flags):
        if code == mysql.TYPE_STRING:
            return st.binary(min_size=parsed.length, max_size=parsed.length)
        return st.binary(max_size=parsed.length or 300)
    text = st.text(st.characters(codec="utf-8"), max_size=min(parsed.length or 300, 300))
    return text.map(lambda s: s.rstrip(" ")) if code == mysql.TYPE_STRING else text


def nullable_values(column_type: ColumnType) -> st.SearchStrategy:
    return st.none() | values(column_type)


@st.composite
def images(draw, column_types=COLUMN_TYPES, key_value=None):
    """(new image, key value): the key column `id` plus a random subset of `column_types`."""
    chosen = draw(st.lists(st.sampled_from(column_types), unique_by=lambda c: c.name, max_size=12))
    key = draw(values(KEY_TYPE)) if key_value is None else key_value
    image = {"id": make_column(KEY_TYPE, key, key=True, nullable=False)}
    for column_type in chosen:
        image[column_type.name] = make_column(column_type, draw(nullable_values(column_type)))
    return image


@st.composite
def row_events(draw, column_types=COLUMN_TYPES, ops=OPS, partition_ids=True, names=NAMES):
    """Row events over every column type; updates keep the key (key changes are delete+insert)."""
    op = draw(st.sampled_from(ops))
    image = draw(images(column_types))
    old = None
    if op == UPDATE:
        old = {
            name: dataclasses.replace(column, value=draw(nullable_values(BY_NAME[name])))
            if name != "id"
            else column
            for name, column in image.items()
        }
    return RowEvent(
        commit_ts=draw(TSO),
        schema=draw(names),
        table=draw(names),
        op=op,
        columns=None if op == DELETE else image,
        old_columns=image if op == DELETE else old,
        topic="t",
        partition=0,
        offset=0,
        partition_id=draw(st.none() | st.integers(1, 2**40)) if partition_ids else None,
    )


DDL_TYPES = (
    mysql.ACTION_CREATE_TABLE,
    mysql.ACTION_ADD_COLUMN,
    mysql.ACTION_DROP_COLUMN,
    mysql.ACTION_TRUNCATE_TABLE,
    mysql.ACTION_MODIFY_COLUMN,
    mysql.ACTION_RENAME_TABLE,
)


@st.composite
def ddl_events(draw, names=NAMES):
    schema, table = draw(names), draw(names)
    column = draw(NAMES).replace("`", "")
    query = draw(
        st.sampled_from(
            (
                f"ALTER TABLE `{schema}`.`{table}` ADD COLUMN `{column}` int",
                f"ALTER TABLE `{schema}`.`{table}` DROP COLUMN `{column}`",
                f"TRUNCATE TABLE `{schema}`.`{table}`",
                f"CREATE TABLE `{schema}`.`{table}` (`id` bigint PRIMARY KEY, `{column}` text)",
            )
        )
    )
    return DdlEvent(
        commit_ts=draw(TSO),
        schema=schema,
        table=table,
        query=query,
        ddl_type=draw(st.sampled_from(DDL_TYPES)),
        topic="t",
        partition=0,
        offset=0,
    )


def resolved_events() -> st.SearchStrategy[ResolvedEvent]:
    return st.builds(
        ResolvedEvent, ts=TSO, topic=st.just("t"), partition=st.just(0), offset=st.just(0)
    )


def partition_streams(column_types=COLUMN_TYPES, max_size=20):
    """What one Kafka partition carries: rows, DDLs and resolved events interleaved."""
    return st.lists(
        row_events(column_types) | ddl_events() | resolved_events(), min_size=1, max_size=max_size
    )


def without_coordinates(events):
    """Events with Kafka coordinates zeroed, for comparing decoded events with generated ones."""
    return [
        dataclasses.replace(event, topic="t", partition=0, offset=0, index=0) for event in events
    ]
