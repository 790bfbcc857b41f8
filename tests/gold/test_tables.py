"""Typing a segment on the driver (gold/tables.py)."""

from __future__ import annotations

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from hypothesis import given, settings
from hypothesis import strategies as st
from ticdc_lake.delta import open_table
from ticdc_lake.gold import tables
from ticdc_lake.gold.catalog import TableName
from ticdc_lake.gold.tables import (
    COMMIT_TS,
    DELETED,
    GoldSnapshot,
    GoldTable,
    TypedSegment,
    distinct_handles,
)

HANDLE = pa.list_(pa.string())


def test_distinct_handles_keep_order_within_a_key_and_read_every_chunk():
    wide = [f"k{i}" for i in range(12)]  # past ten positions: "10" sorts before "2"
    first = [["id"], ["id"], ["a", "b"], wide]
    second = [["b", "a"], ["a", "b"], [], ["x", None], wide]
    handles = pa.chunked_array([pa.array(first, HANDLE), pa.array(second, HANDLE)])
    assert distinct_handles(handles) == {
        ("id",), ("a", "b"), ("b", "a"), (), ("x", None), tuple(wide),
    }  # fmt: skip


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.lists(st.one_of(st.sampled_from(["id", "a", "b", ""]), st.none()), max_size=4),
        min_size=1,
        max_size=30,
    )
)
def test_distinct_handles_are_the_set_of_row_tuples(rows):
    assert distinct_handles(pa.array(rows, HANDLE)) == {tuple(row) for row in rows}


def _segment(keys: list[int], version: int) -> TypedSegment:
    data = pa.table(
        {
            "id": pa.array(keys, pa.int64()),
            "v": [f"v{version}"] * len(keys),
            COMMIT_TS: pa.array([version] * len(keys), pa.int64()),
            DELETED: [False] * len(keys),
        }
    )
    return TypedSegment(data, ("id",))


def test_a_gold_table_kept_open_sees_every_later_commit(spark, tmp_path, monkeypatch):
    """A run's gold table stays open between its reads and its own merges (each open reads
    the log); a commit by another writer (the DDL steps' app id, delta-rs, Spark) is seen at
    the next read."""
    opens = []

    def counted_open(path, version=None):
        opens.append(path)
        return open_table(path, version)

    monkeypatch.setattr(tables, "open_table", counted_open)
    path = tmp_path / "t"
    gold = GoldTable(spark, TableName("s", "t"), path, "compact:s.t#0")
    assert gold.snapshot() == GoldSnapshot(None, None, 0) and not opens
    gold.merge(_segment([1, 2, 3], 1), 1)  # creates the table
    assert gold.snapshot().version == 0 and len(opens) == 1
    gold.merge(_segment([3, 4], 2), 2)
    snapshot = gold.snapshot()
    assert (snapshot.version, snapshot.rows, len(opens)) == (1, 4, 1)  # no open since

    ddl = GoldTable(spark, TableName("s", "t"), path, "compact:s.t#0:ddl")
    ddl.merge(_segment([5], 3), 9)
    write_deltalake(str(path), _segment([6], 4).data.drop_columns([DELETED]), mode="append")
    gold.merge(_segment([7], 5), 3)
    snapshot = gold.snapshot()
    assert (snapshot.version, snapshot.rows) == (4, 7)
    values = DeltaTable(str(path)).to_pyarrow_table().sort_by("id").column("v").to_pylist()
    assert values == ["v1", "v1", "v2", "v2", "v3", "v4", "v5"]
