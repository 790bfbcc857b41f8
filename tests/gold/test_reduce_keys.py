"""``key_actions``: each change's actions and handle keys, against keys worked out in Python.

A one-column handle is found by position and any other through lambdas; both must give the
key the definition gives (the image's handle columns as (name, text, binary), sorted by name).
"""

from __future__ import annotations

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ticdc_lake.gold.reduce import key_actions
from ticdc_lake.silver.rows import CHANGES_SCHEMA

NAMES = ("id", "a", "b")
TEXTS = st.one_of(st.none(), st.sampled_from(["1", "2", "x", ""]))
BINARIES = st.one_of(st.none(), st.sampled_from([b"\x00", b"\xff\x01"]))


def _column(name: str, text: str | None, binary: bytes | None) -> dict:
    return {
        "name": name,
        "type_code": 3,
        "flags": 0,
        "mysql_type": None,
        "text": text,
        "binary": binary,
    }


IMAGES = st.one_of(
    st.none(),
    st.lists(st.sampled_from(NAMES), unique=True)
    .flatmap(lambda names: st.tuples(*[st.tuples(st.just(n), TEXTS, BINARIES) for n in names]))
    .map(lambda columns: [_column(*column) for column in columns]),
)
CHANGES = st.lists(
    st.tuples(
        st.sampled_from(["insert", "update", "delete"]),
        st.one_of(st.just([]), st.lists(st.sampled_from(NAMES), unique=True, max_size=3)),
        st.sampled_from(["t", "u"]),
        IMAGES,
        IMAGES,
    ),
    min_size=1,
    max_size=12,
)
FALLBACK = {("s", "u"): ("id",)}  # table u's handle when a change names none


def _key(image: list[dict] | None, handle: list[str]) -> list[tuple] | None:
    if image is None:
        return None
    return sorted((c["name"], c["text"], c["binary"]) for c in image if c["name"] in handle)


def _expected(changes: list[tuple]) -> list[tuple]:
    actions = []
    for number, (op, handle_key, table, columns, old_columns) in enumerate(changes):
        handle = handle_key or list(FALLBACK.get(("s", table), ()))
        new_key, old_key = _key(columns, handle), _key(old_columns, handle)
        if op == "delete":
            actions.append((number, 0, True, old_key))
        elif op == "update" and None not in (old_key, new_key) and old_key != new_key:
            actions += [(number, 0, True, old_key), (number, 1, False, new_key)]
        else:
            actions.append((number, 0, False, new_key))
    return sorted(actions, key=repr)


def silver_changes(changes: list[tuple]) -> pa.Table:
    rows = [
        {
            "event_id": str(number),
            "commit_ts": 1,
            "schema": "s",
            "table": table,
            "op": op,
            "partition_id": None,
            "handle_key": handle_key,
            "handle_key_only": False,
            "columns": columns,
            "old_columns": old_columns,
            "topic": "k",
            "partition": 0,
            "offset": number,
            "index": 0,
            "bronze_batch": 0,
        }
        for number, (op, handle_key, table, columns, old_columns) in enumerate(changes)
    ]
    return pa.Table.from_pylist(rows, schema=CHANGES_SCHEMA)


def _frame(spark, changes: list[tuple]):
    return spark.createDataFrame(silver_changes(changes))


def _found(frame) -> list[tuple]:
    rows = key_actions(frame, FALLBACK).select("event_id", "sub", "deleted", "key").collect()
    found = [
        (
            int(row.event_id),
            row.sub,
            row.deleted,
            None if row.key is None else [(p.n, p.t, p.b) for p in row.key],
        )
        for row in rows
    ]
    return sorted(found, key=repr)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(CHANGES)
def test_keys_are_the_handle_columns_of_each_image_sorted_by_name(spark, changes):
    assert _found(_frame(spark, changes)) == _expected(changes)


def test_one_and_two_column_handles_missing_columns_and_absent_images(spark):
    both = [_column("id", "7", None), _column("a", None, b"\x01")]
    changes = [
        ("insert", ["id"], "t", both, None),  # one column: found by position
        ("insert", ["a", "id"], "t", both, None),  # two: through the lambdas, sorted by name
        ("insert", ["b"], "t", both, None),  # the handle's column is not in the image
        ("insert", [], "t", both, None),  # no handle, none implied
        ("insert", [], "u", both, None),  # none sent: the table's implied handle
        ("update", ["id"], "t", [_column("id", "8", None)], [_column("id", "7", None)]),
        ("update", ["id"], "t", both, both),  # the key kept: one upsert
        ("delete", ["id"], "t", None, both),
    ]
    assert _found(_frame(spark, changes)) == _expected(changes)
    assert _expected(changes)[:3] == [
        (0, 0, False, [("id", "7", None)]),
        (1, 0, False, [("a", None, b"\x01"), ("id", "7", None)]),
        (2, 0, False, []),
    ]
