"""Silver change rows: the compiled image loop (_silver_speedups.c) against Python's."""

from __future__ import annotations

import dataclasses
import math
import warnings
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ticdc_lake.silver import rows as silver
from ticdc_lake.silver.events import Column, RowEvent
from ticdc_lake.silver.mysql import FLAG_HANDLE_KEY
from ticdc_lake.silver.rows import ChangeRows

from tests.speedups import build_extension, extension_built
from tests.strategies import row_events

SOURCE = Path(silver.__file__).with_name("_silver_speedups.c")


@pytest.fixture(scope="module")
def speedups(tmp_path_factory):
    if silver.SPEEDUPS is not None:
        return silver.SPEEDUPS
    try:
        return build_extension(SOURCE, tmp_path_factory.mktemp("silver_speedups"))
    except Exception as exc:  # no compiler: the Python reference is what runs, and is tested
        warnings.warn(f"silver extension not built: {exc}", stacklevel=1)
        pytest.skip("the silver extension cannot be built here")


def test_speedups_are_used_when_built():
    if extension_built(SOURCE, "ticdc_lake.silver._silver_speedups"):
        assert silver.SPEEDUPS is not None
    else:
        assert silver.SPEEDUPS is None
    assert ChangeRows().speedups is silver.SPEEDUPS


def _both(speedups, events):
    """The same events built by C and by Python; each must give RowEvent.handle_key."""
    compiled, reference = ChangeRows(speedups), ChangeRows(None)
    for event in events:
        compiled.add(event, 7)
        reference.add(event, 7)
    handle_keys = [list(event.handle_key) for event in events]
    assert compiled.table().column("handle_key").to_pylist() == handle_keys
    return compiled.table(), reference.table()


@settings(max_examples=150, deadline=None)
@given(st.lists(row_events(), max_size=6))
def test_compiled_rows_equal_the_reference(speedups, events):
    compiled, reference = _both(speedups, events)
    assert compiled.equals(reference)
    assert compiled.column("event_id").to_pylist() == reference.column("event_id").to_pylist()


class Texty:
    """A value of a kind no decoder makes: converted by str(), as in Python."""

    def __str__(self):
        return "texty"


class BytesLike(bytes):
    pass


class StrLike(str):
    pass


ODD_VALUES = [
    None, "", "ü\x00\n", StrLike("sub"), b"", b"\xff\x00", BytesLike(b"sub"), 0, -1, 2**70,
    -(2**70), True, 1.5, -0.0, math.inf, -math.inf, math.nan, 1e300, Decimal("-0.000100"),
    Decimal("1E+5"), Texty(), bytearray(b"ab"),
]  # fmt: skip
ODD_FLAGS = [0, FLAG_HANDLE_KEY, FLAG_HANDLE_KEY | 1, -1, -4, 2**62 | FLAG_HANDLE_KEY, 2**62]


def test_odd_values_and_flags_convert_as_in_python(speedups):
    flags = ODD_FLAGS * len(ODD_VALUES)
    image = {
        f"c{i}": Column(i % 3 or None, flags[i], value, "t" if i % 2 else None)
        for i, value in enumerate(ODD_VALUES)
    }
    events = [
        RowEvent(1, "s", "t", "insert", image, None, "topic", 0, 1),
        RowEvent(2, "s", "t", "update", {"c0": Column(1, 0, 5)}, image, "topic", 0, 2),
        RowEvent(3, "s", "t", "delete", None, image, "topic", 0, 3),
        RowEvent(None, "s", "t", "insert", {}, None, "topic", 0, 4),
    ]
    compiled, reference = _both(speedups, events)
    assert compiled.equals(reference)


class Exploding:
    def __str__(self):
        raise ValueError("no text")


def test_a_failure_part_way_raises_and_truncate_undoes_it(speedups):
    rows = ChangeRows(speedups)
    good = RowEvent(1, "s", "t", "insert", {"a": Column(1, FLAG_HANDLE_KEY, 1)}, None, "t", 0, 1)
    rows.add(good, 1)
    bad = {"a": Column(1, 0, 2), "b": Column(1, 0, Exploding())}
    with pytest.raises(ValueError, match="no text"):
        rows.add(RowEvent(2, "s", "t", "insert", bad, None, "t", 0, 2), 1)
    rows.truncate(1)
    reference = ChangeRows(None)
    reference.add(good, 1)
    assert rows.table().equals(reference.table())


def test_a_failure_inside_a_column_leaves_no_half_entry(speedups):
    """The C columns take a column's entries one by one: a value refused after some of them
    (here its MySQL type, after its name, type code and flags) must leave none behind."""
    rows = ChangeRows(speedups)
    good = RowEvent(1, "s", "t", "insert", {"a": Column(1, FLAG_HANDLE_KEY, 1)}, None, "t", 0, 1)
    rows.add(good, 1)
    bad = {"a": Column(1, 0, 2), "b": Column(1, 0, 3, mysql_type=5)}
    with pytest.raises(TypeError, match="MySQL type must be str or None, not int"):
        rows.add(RowEvent(2, "s", "t", "insert", bad, None, "t", 0, 2), 1)
    rows.truncate(1)
    later = RowEvent(3, "s", "t", "update", {"a": Column(2, 0, "x")}, {"a": Column(2, 0, None)},
                     "t", 0, 3)  # fmt: skip
    rows.add(later, 1)
    reference = ChangeRows(None)
    for event in (good, later):
        reference.add(event, 1)
    assert rows.table().equals(reference.table())


@pytest.mark.parametrize(
    ("column", "error"),
    [
        (Column(2**31, 0, 1), "type code 2147483648 does not fit 32 bits"),
        (Column(1, 2**63, 1), "int too big to convert"),
        (Column("7", 0, 1), "type code must be int or None, not str"),
    ],
)
def test_numbers_silver_cannot_hold_fail_the_change_not_the_batch(speedups, column, error):
    """A type code or flags out of range fails the change as it is added (the decode stage then
    quarantines its record) instead of the whole batch when the columns become Arrow."""
    rows = ChangeRows(speedups)
    with pytest.raises((OverflowError, TypeError), match=error):
        rows.add(RowEvent(1, "s", "t", "insert", {"a": column}, None, "t", 0, 1), 1)
    rows.truncate(0)
    assert rows.table().num_rows == 0


@dataclasses.dataclass(slots=True)
class SlotsColumn:
    type_code: object
    flags: object
    value: object
    mysql_type: object = None


@dataclasses.dataclass
class DictColumn:  # no slots: read by name
    type_code: object
    flags: object
    value: object
    mysql_type: object = None


def test_attributes_are_read_as_getattr_reads_them(speedups):
    """The C loop reads a slots class's attributes from its slots; other columns, and a class
    changed since (its slot shadowed here by a property), are read by name."""

    def event(make):
        image = {"a": make(8, FLAG_HANDLE_KEY, 1), "b": make(15, 0, "x", "varchar(4)")}
        return RowEvent(1, "s", "t", "insert", image, None, "topic", 0, 1)

    events = [event(Column), event(SlotsColumn), event(DictColumn), event(SlotsColumn)]
    compiled, reference = _both(speedups, events)
    assert compiled.equals(reference)
    patched = type("Patched", (SlotsColumn,), {"__slots__": ()})
    patched_event = event(patched)
    _both(speedups, [patched_event])  # its slots learnt
    patched.value = property(lambda column: "patched")
    compiled, reference = _both(speedups, [patched_event])
    assert compiled.equals(reference)
    assert compiled.column("columns").to_pylist()[0][0]["text"] == "patched"


def test_an_unset_slot_raises_as_getattr_does(speedups):
    column = Column.__new__(Column)
    column.type_code, column.flags, column.mysql_type = 8, 0, None
    rows = ChangeRows(speedups)
    with pytest.raises(AttributeError, match="value"):
        rows.add(RowEvent(1, "s", "t", "insert", {"a": column}, None, "t", 0, 1), 1)
    rows.truncate(0)
    assert rows.table().num_rows == 0


def test_image_buffers_take_no_arguments(speedups):
    with pytest.raises(TypeError, match="takes no arguments"):
        speedups.ImageBuffers(1)


def _ids(rows: ChangeRows) -> list[str]:
    return rows.table().column("event_id").to_pylist()


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.text(max_size=8),
        st.one_of(st.none(), st.text(max_size=12), st.binary(max_size=6), st.integers()),
        max_size=5,
    ),
    st.one_of(st.none(), st.integers(min_value=-1, max_value=2**63 - 1)),
)
def test_change_rows_event_ids_are_event_id(speedups, values, partition_id):
    """Both paths hash what event_id hashes, whatever the names and values hold (escapes,
    non-ASCII, binaries)."""
    image = {name: Column(1, 0, value) for name, value in values.items()}
    event = RowEvent(5, 'a"\\\n', "t\x01é", "update", image, image, "topic", 0, 1,
                     partition_id=partition_id)  # fmt: skip
    for rows in (ChangeRows(speedups), ChangeRows(None)):
        rows.add(event, 1)
        assert _ids(rows) == [silver.event_id(event)]


EVERY_ASCII = "".join(map(chr, range(128)))


@pytest.mark.parametrize(
    ("commit_ts", "schema", "name"),
    [
        (0, EVERY_ASCII, "é\u2028\U0001f600"),
        (2**63 - 1, "s", EVERY_ASCII),
        (-(2**63), "", ""),
        (None, "x" * 300, "y" * 127),  # identities around BLAKE2b's 128-byte blocks
        (5, StrLike("a str subclass: hashed by event_id itself"), StrLike("c")),
    ],
)
def test_event_ids_hash_every_escape_and_extreme_as_event_id(speedups, commit_ts, schema, name):
    """The compiled path writes the identity's JSON and hashes it itself; what it would not
    write as orjson does (a str subclass) it leaves to event_id."""
    image = {name: Column(1, 0, EVERY_ASCII), "b": Column(1, 0, bytes(range(256)))}
    for size in (0, 1, 60, 61, 62, 63, 64, 200):
        padded = {**image, "pad": Column(1, 0, "p" * size)}
        event = RowEvent(commit_ts, schema, "t", "delete", None, padded, "topic", 0, 1)
        rows = ChangeRows(speedups)
        rows.add(event, 1)
        assert _ids(rows) == [silver.event_id(event)]


def test_a_ts_beyond_64_bits_fails_the_change_in_both_paths(speedups):
    """The compiled writer leaves such an integer to event_id, whose orjson refuses it."""
    event = RowEvent(2**64, "s", "t", "insert", {"a": Column(1, 0, 1)}, None, "t", 0, 1)
    for rows in (ChangeRows(speedups), ChangeRows(None)):
        with pytest.raises(TypeError, match="64-bit"):
            rows.add(event, 1)


def test_text_that_is_not_utf8_fails_the_change_in_both_paths(speedups):
    event = RowEvent(1, "s", "t", "insert", {"a": Column(1, 0, "\ud800")}, None, "t", 0, 1)
    for rows in (ChangeRows(speedups), ChangeRows(None)):
        with pytest.raises((UnicodeEncodeError, TypeError)):
            rows.add(event, 1)
        rows.truncate(0)
        assert rows.table().num_rows == 0


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"partition": 2**31}, "partition 2147483648 does not fit 32 bits"),
        ({"index": -(2**31) - 1}, "index -2147483649 does not fit 32 bits"),
        ({"schema": 5}, "schema must be str or None, not int"),
        ({"offset": 2**63}, "int too big to convert"),
    ],
)
def test_a_row_silver_cannot_hold_fails_whole_and_leaves_nothing(speedups, changes, error):
    """The compiled rows refuse the row as it is added, after its images were written: none of
    its columns keeps anything, and the rows before and after it are whole."""
    rows = ChangeRows(speedups)
    image = {"a": Column(1, FLAG_HANDLE_KEY, 1), "b": Column(2, 0, b"\x00")}
    good = RowEvent(1, "s", "t", "update", image, image, "t", 0, 1)
    rows.add(good, 1)
    bad = dataclasses.replace(good, **changes)
    with pytest.raises((OverflowError, TypeError), match=error):
        rows.add(bad, 1)
    rows.add(good, 2)
    reference = ChangeRows(None)
    reference.add(good, 1)
    reference.add(good, 2)
    assert rows.table().equals(reference.table())
