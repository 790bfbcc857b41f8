"""Typing a segment on the driver (gold/tables.py)."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from ticdc_lake.gold.tables import distinct_handles

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
