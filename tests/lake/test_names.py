"""Qualified table names as people read and type them: unambiguous whatever the parts hold."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ticdc_lake.lake.names import qualified_name, split_name

PARTS = st.text(min_size=1, max_size=20)


@given(PARTS, PARTS)
def test_a_qualified_name_splits_back_into_its_parts(schema, table):
    assert split_name(qualified_name(schema, table)) == (schema, table)


@pytest.mark.parametrize(
    ("schema", "table", "text"),
    [
        ("shop", "orders", "shop.orders"),
        ("a.b", "c", "`a.b`.c"),
        ("a", "b.c", "a.`b.c`"),
        ("x`y", "z", "`x``y`.z"),
        ("../quality", "results", "`../quality`.results"),
        ("1", "订单", "`1`.订单"),
    ],
)
def test_parts_that_would_mislead_are_quoted_as_mysql_quotes_them(schema, table, text):
    assert qualified_name(schema, table) == text


@pytest.mark.parametrize("text", ["orders", "a.b.c", "`a", ".a", "a.", "`a`b.c", ""])
def test_text_that_is_not_one_table_name_is_refused(text):
    with pytest.raises(ValueError):
        split_name(text)
