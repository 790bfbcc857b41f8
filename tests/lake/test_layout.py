"""Upstream names as folders of the lake: one reversible encoding, and gold paths that cannot
leave ``gold/`` whatever a name holds."""

from __future__ import annotations

import os
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ticdc_lake.lake.layout import (
    MAX_SEGMENT_BYTES,
    LakeLayout,
    UnsafeNameError,
    name_of_segment,
    path_segment,
)

NAMES = st.text(min_size=1, max_size=40)


@given(NAMES)
def test_a_segment_reads_back_as_its_name_and_is_one_safe_folder_name(name):
    segment = path_segment(name)
    assert name_of_segment(segment) == name
    assert segment not in (".", "..") and "/" not in segment and "\\" not in segment
    assert not os.path.isabs(segment) and "\x00" not in segment
    # Nothing a case-insensitive or normalising file system would fold into another segment.
    assert segment == segment.casefold() == unicodedata.normalize("NFC", segment)


@given(NAMES, NAMES)
def test_distinct_names_give_distinct_folders(one, other):
    if one != other:
        assert path_segment(one) != path_segment(other)


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("orders", "Orders"),  # case only
        ("a.b", "a/b"),  # a dot against a slash
        (unicodedata.normalize("NFC", "café"), unicodedata.normalize("NFD", "café")),
        ("..", "~2e~2e"),
        ("ǅ", "ǆ"),  # title case against lower case
    ],
)
def test_names_that_differ_in_case_punctuation_or_normalisation_get_their_own_folders(one, other):
    assert path_segment(one).casefold() != path_segment(other).casefold()


@pytest.mark.parametrize(
    ("name", "segment"),
    [
        ("orders", "orders"),
        ("order_items", "order_items"),
        ("Orders", "~4frders"),
        ("..", "~2e~2e"),
        ("/some/abs/dir", "~2fsome~2fabs~2fdir"),
        ("订单", "订单"),
        ("a b", "a~20b"),
        ("x~y", "x~7ey"),
    ],
)
def test_plain_names_keep_their_spelling_and_the_rest_is_escaped(name, segment):
    assert path_segment(name) == segment


def test_a_name_that_cannot_be_a_folder_is_refused():
    with pytest.raises(UnsafeNameError, match="empty"):
        path_segment("")
    with pytest.raises(UnsafeNameError, match=f"more than the {MAX_SEGMENT_BYTES}"):
        path_segment("É" * 64)
    path_segment("订" * 64)  # TiDB's longest names in most scripts fit


@pytest.mark.parametrize("segment", ["~", "~4", "~zz", "A", "a/b", "~61", "~c3"])
def test_a_folder_name_no_name_gives_is_not_read_as_one(segment):
    with pytest.raises(ValueError):
        name_of_segment(segment)


@pytest.mark.parametrize(
    ("schema", "table"),
    [("/some/abs/dir", "t"), ("../quality", "results"), ("..", ".."), ("shop", "../../x")],
)
def test_gold_paths_stay_under_gold(tmp_path, schema, table):
    layout = LakeLayout(tmp_path / "lake")
    path = layout.gold(schema, table)
    assert path.parent.parent == layout.gold_root
    assert path.resolve().is_relative_to(layout.gold_root.resolve())


def test_a_gold_folder_linked_outside_the_lake_is_refused(tmp_path):
    layout = LakeLayout(tmp_path / "lake")
    layout.gold_root.mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (layout.gold_root / "shop").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UnsafeNameError, match="outside"):
        layout.gold("shop", "orders")
