"""Silver row images → typed gold columns, vectorised with pyarrow.

A silver image is a list of ``(name, type_code, flags, mysql_type, text, binary)`` structs
(silver/rows.py); gold wants one typed column per upstream column. ``column_values`` pulls every
wanted column's text and bytes out of a batch of images in one pass, aligned with the rows (NULL
where an image lacks the column), and ``convert`` turns them into the column's gold type.

Decoding already refused values outside their MySQL type (``ticdc_lake.silver.values``, whose ENUM
and SET bounds are used here too). A value that still does not fit its gold type (a DDL that
declares fewer members than the rows use) raises ``ConversionError`` naming the table, the
column, the value and the Kafka coordinates of the change it came from.
"""

from __future__ import annotations

import zoneinfo
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ticdc_lake.gold import types as gold_types
from ticdc_lake.gold.exceptions import ConversionError
from ticdc_lake.silver.values import enum_index_limit, set_mask_limit

# MySQL's zero dates and dates with a zero month or day (allowed by some SQL modes): they name
# no day, so gold holds NULL for them.
ZERO_DATE = r"^\d{4}-(00-\d\d|\d\d-00)|^0000-00-00"


@dataclass(frozen=True)
class Values:
    """One column's raw silver values for a batch of rows (NULL where absent)."""

    text: pa.Array  # string
    binary: pa.Array  # binary

    @property
    def present(self) -> pa.Array:
        return pc.or_(pc.is_valid(self.text), pc.is_valid(self.binary))


@dataclass
class Origin:
    """Where each row came from, for error messages: the table and Kafka coordinates."""

    table: str
    topics: pa.Array
    partitions: pa.Array
    offsets: pa.Array

    def describe(self, row: int) -> str:
        return (
            f"topic {self.topics[row].as_py()}, partition {self.partitions[row].as_py()}, "
            f"offset {self.offsets[row].as_py()}"
        )


def column_values(images: pa.Array, names: Sequence[str]) -> dict[str, Values]:
    """For each wanted column name, its text and bytes in every image, aligned with the rows."""
    if isinstance(images, pa.ChunkedArray):
        images = images.combine_chunks()
    rows = len(images)
    flat = pc.list_flatten(images)
    parents = pc.list_parent_indices(images).to_numpy(zero_copy_only=False)
    wanted = pa.array(list(names), pa.string())
    slot = pc.fill_null(pc.index_in(flat.field("name"), value_set=wanted), -1)
    # Sort the flattened elements by wanted-column slot once; each column is then a slice.
    # Slots as 16 bits where they fit (a table has at most 4,096 columns): numpy's stable sort
    # of them is a radix sort.
    narrow = np.int16 if len(names) < 2**15 else np.int64
    slot = slot.to_numpy(zero_copy_only=False).astype(narrow)
    order = np.argsort(slot, kind="stable")
    sorted_slots = slot[order]
    texts, binaries = flat.field("text"), flat.field("binary")
    # Only BINARY and BLOB columns carry bytes: the others share one array of NULLs.
    has_bytes = pc.is_valid(binaries).to_numpy(zero_copy_only=False)
    no_bytes = pa.nulls(rows, pa.binary())
    found: dict[str, Values] = {}
    for index, name in enumerate(names):
        low, high = np.searchsorted(sorted_slots, [index, index + 1])
        picked = order[low:high]
        element = np.full(rows, -1, dtype=np.int64)  # per row, its element of the column
        element[parents[picked]] = picked
        take = pa.array(element, mask=element < 0)
        binary = binaries.take(take) if has_bytes[picked].any() else no_bytes
        found[name] = Values(texts.take(take), binary)
    return found


def convert(
    values: Values,
    gold: gold_types.GoldType,
    target: pa.DataType,
    column: str,
    origin: Origin,
    zones: pa.Array | None = None,
) -> tuple[pa.Array, int]:
    """The column's gold values (of Arrow type ``target``) and how many zero dates became NULL.

    ``zones`` holds each row's TiCDC time zone (TIMESTAMP columns only).
    """
    try:
        typed, nulled = _convert(values, gold, zones)
        if typed.type != target:
            typed = typed.cast(target)
        return typed, nulled
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError, IndexError) as exc:
        raise _explain(values, gold, target, column, origin, zones, exc) from exc


def _text(values: Values) -> pa.Array:
    """The values as text: bytes where only bytes were sent must be UTF-8."""
    if values.binary.null_count == len(values.binary):
        return values.text
    return pc.coalesce(values.text, values.binary.cast(pa.string()))


def _convert(
    values: Values, gold: gold_types.GoldType, zones: pa.Array | None
) -> tuple[pa.Array, int]:
    kind = gold.kind
    if kind == gold_types.BYTES:
        if values.text.null_count == len(values.text):
            return values.binary, 0
        return pc.coalesce(values.binary, values.text.cast(pa.binary())), 0
    text = _text(values)
    if kind == gold_types.TEXT:
        return text, 0
    if kind == gold_types.INTEGER:
        return text.cast(pa.int64()).cast(gold.arrow), 0
    if kind == gold_types.DECIMAL:
        return text.cast(gold.arrow), 0
    if kind == gold_types.FLOAT:
        return text.cast(gold.arrow), 0
    if kind in (gold_types.DATE, gold_types.DATETIME, gold_types.TIMESTAMP):
        zero = pc.fill_null(pc.match_substring_regex(text, ZERO_DATE), False)
        nulled = pc.sum(zero).as_py() or 0
        text = pc.if_else(zero, pa.scalar(None, pa.string()), text)
        if kind == gold_types.DATE:
            return text.cast(pa.date32()), nulled
        if kind == gold_types.DATETIME:
            return text.cast(gold_types.WALL_CLOCK), nulled
        return _timestamps(text, zones), nulled
    if kind == gold_types.ENUM_NAME:
        index = _member_numbers(text, gold.members, _enum_index)
        # Index 0 is MySQL's "invalid value" member, the empty string.
        names = pa.array(["", *gold.members], pa.string())
        if len(index) and (pc.max(index).as_py() or 0) > enum_index_limit(gold.members):
            raise ValueError(f"ENUM index above the {len(gold.members)} members")
        return names.take(index), 0
    if kind == gold_types.SET_NAMES:
        return _set_names(_member_numbers(text, gold.members, _set_mask), gold.members), 0
    raise ValueError(f"unknown conversion kind {kind!r}")


def _member_numbers(text: pa.Array, members: tuple[str, ...], number_of) -> pa.Array:
    """ENUM indexes / SET bitmasks of silver's text: decimal digits as TiCDC sends them, or the
    member names TiCDC before v6.5.9, v7.1.5, v7.5.2 and v8.0.0 sent for a default in the
    Open Protocol (its decoder keeps them, refusing numerals), each read by ``number_of``."""
    try:
        return text.cast(pa.int64())
    except pa.ArrowInvalid:
        pass  # names among the digits
    numeral = pc.fill_null(pc.match_substring_regex(text, r"^[0-9]+$"), True)
    named = pc.unique(text.filter(pc.invert(numeral)))
    numbers = pa.array([number_of(name, members) for name in named.to_pylist()], pa.int64())
    by_name = numbers.take(pc.index_in(text, value_set=named))
    digits = pc.if_else(numeral, text, pa.scalar(None, pa.string())).cast(pa.int64())
    return pc.if_else(numeral, digits, by_name)


def _enum_index(name: str, members: tuple[str, ...]) -> int:
    """The 1-based index of an ENUM member named exactly ``name`` (TiDB stores it as declared);
    the empty name is index 0, MySQL's '' member."""
    if not name:
        return 0
    if name not in members:
        raise ValueError(f"ENUM name {name!r} is not one of the {len(members)} members")
    return members.index(name) + 1


def _set_mask(names: str, members: tuple[str, ...]) -> int:
    """The bitmask of SET members named, joined by ',', as TiDB stores a SET default."""
    mask = 0
    for name in names.split(",") if names else ():
        if name not in members:
            raise ValueError(f"SET name {name!r} is not one of the {len(members)} members")
        mask |= 1 << members.index(name)
    return mask


def _timestamps(text: pa.Array, zones: pa.Array | None) -> pa.Array:
    """TIMESTAMP text as UTC instants: local time in each row's zone, or, ending in Z, an
    instant in UTC already (Avro's timestamp-millis, which TiCDC up to v6.0 wrote)."""
    in_utc = pc.fill_null(pc.ends_with(text, "Z"), False)
    if not pc.any(in_utc).as_py():
        return _to_utc(text.cast(gold_types.WALL_CLOCK), zones)
    none = pa.scalar(None, pa.string())
    instants = pc.if_else(in_utc, text, none).cast(gold_types.UTC_TIMESTAMP)
    if pc.all(in_utc).as_py():
        return instants
    local = pc.if_else(in_utc, none, text).cast(gold_types.WALL_CLOCK)
    return pc.coalesce(instants, _to_utc(local, zones))


def _to_utc(wall_clock: pa.Array, zones: pa.Array | None) -> pa.Array:
    """Local times in each row's zone → UTC instants. Ambiguous times (a DST fall-back hour)
    take the earlier instant; a time that does not exist in the zone is an error."""
    if zones is None:
        raise ValueError("TIMESTAMP values need the TiCDC time zone")
    result = None
    for zone in pc.unique(zones).to_pylist():
        zoneinfo.ZoneInfo(zone)  # a clear error for a bad zone name
        local = pc.assume_timezone(
            wall_clock, zone, ambiguous="earliest", nonexistent="raise"
        ).cast(gold_types.UTC_TIMESTAMP)
        result = local if result is None else pc.if_else(pc.equal(zones, zone), local, result)
    return result if result is not None else wall_clock.cast(gold_types.UTC_TIMESTAMP)


def _set_names(mask: pa.Array, members: tuple[str, ...]) -> pa.Array:
    distinct = pc.unique(mask.drop_null())
    names = []
    for bits in distinct.to_pylist():
        if not 0 <= bits <= set_mask_limit(members):
            raise ValueError(f"SET bitmask {bits} names more than the {len(members)} members")
        names.append(",".join(name for i, name in enumerate(members) if bits >> i & 1))
    slot = pc.index_in(mask, value_set=distinct)
    return pa.array(names, pa.string()).take(slot)


def _explain(
    values: Values,
    gold: gold_types.GoldType,
    target: pa.DataType,
    column: str,
    origin: Origin,
    zones: pa.Array | None,
    exc: Exception,
) -> ConversionError:
    """Find the first value that fails on its own, to name it and the change it came from."""
    text = values.text
    for row in range(len(text)):
        single = Values(values.text.slice(row, 1), values.binary.slice(row, 1))
        try:
            typed, _ = _convert(single, gold, None if zones is None else zones.slice(row, 1))
            typed.cast(target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError, IndexError) as error:
            value = text[row].as_py()
            if value is None:
                value = values.binary[row].as_py()
            reason = " ".join(str(error).split())
            if gold.kind == gold_types.TIMESTAMP:
                reason += "; is the topic's time-zone in the pipeline config TiCDC's?"
            return ConversionError(
                f"{origin.table}.{column}: value {value!r} does not fit the gold type "
                f"{gold_types.delta_type_name(target)} ({reason}); change at {origin.describe(row)}"
            )
    return ConversionError(
        f"{origin.table}.{column}: values do not fit the gold type "
        f"{gold_types.delta_type_name(target)}: {exc}"
    )
