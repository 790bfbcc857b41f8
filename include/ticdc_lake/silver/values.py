"""What a value of each MySQL column type can be: the ranges and text forms TiDB sends.

Every decoder's row events pass through `check_events`: a value TiDB could never send for its
column's declared type (TINYINT 300, signed BIGINT 2**63, YEAR -99999, a DATE 'garbage',
DECIMAL(5,2) '123456.789', JSON '{not json', a FLOAT that is infinite) makes its record a
DecodeError, so it goes to quarantine instead of stopping gold's typed conversion. Gold's
conversion takes its ENUM and SET bounds from here too.

The compiled decoders answer the common kinds themselves (`events_fit` in
protocols/native/_speedups.h, a C port of these checks that may only pass what these pass); whatever
they leave, and every pure-Python decode, is checked here.

The checks look at the event model's values (events.py): an integer type's int, a temporal,
DECIMAL or JSON column's str, a FLOAT/DOUBLE's float. A value of another kind is left as it is:
only the pre-v4.0.5 Open Protocol format keeps such values, exactly as sent (its Java sample's
TINYINT "aa"), and the Open Protocol keeps an ENUM or SET default that TiCDC before v8.0.0 sent
by member name (gold resolves the name from the DDL); every other decoder refuses them.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from ticdc_lake.errors import DecodeError
from ticdc_lake.silver import mysql
from ticdc_lake.silver.events import Event, Image, RowEvent

# A check returns None when the value fits, else what was expected.
Check = Callable[[Any], str | None]

_INTEGER_BITS = {
    mysql.TYPE_TINY: 8,
    mysql.TYPE_SHORT: 16,
    mysql.TYPE_INT24: 24,
    mysql.TYPE_LONG: 32,
    mysql.TYPE_LONGLONG: 64,
}
MAX_ENUM_MEMBERS = 65535  # MySQL's limit; index 0 is the invalid-value member ''
MAX_SET_MEMBERS = 64
MAX_DECIMAL_DIGITS = 65  # DECIMAL(65,30) is the widest TiDB column
MAX_DECIMAL_SCALE = 30

_TYPE_NAMES = {
    mysql.TYPE_DECIMAL_OLD: "DECIMAL",
    mysql.TYPE_TINY: "TINYINT",
    mysql.TYPE_SHORT: "SMALLINT",
    mysql.TYPE_LONG: "INT",
    mysql.TYPE_FLOAT: "FLOAT",
    mysql.TYPE_DOUBLE: "DOUBLE",
    mysql.TYPE_TIMESTAMP: "TIMESTAMP",
    mysql.TYPE_LONGLONG: "BIGINT",
    mysql.TYPE_INT24: "MEDIUMINT",
    mysql.TYPE_DATE: "DATE",
    mysql.TYPE_DURATION: "TIME",
    mysql.TYPE_DATETIME: "DATETIME",
    mysql.TYPE_YEAR: "YEAR",
    mysql.TYPE_NEWDATE: "DATE",
    mysql.TYPE_BIT: "BIT",
    mysql.TYPE_JSON: "JSON",
    mysql.TYPE_NEWDECIMAL: "DECIMAL",
    mysql.TYPE_ENUM: "ENUM",
    mysql.TYPE_SET: "SET",
}


def integer_bounds(type_code: int, unsigned: bool) -> tuple[int, int]:
    """Inclusive range of TINYINT..BIGINT, signed or unsigned."""
    bits = _INTEGER_BITS[type_code]
    if unsigned:
        return 0, (1 << bits) - 1
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


def year_fits(value: int) -> bool:
    """YEAR holds 0 (the zero year, '0000') or 1901..2155."""
    return value == 0 or 1901 <= value <= 2155


def enum_index_limit(members: tuple[str, ...] | None) -> int:
    """The largest ENUM index: the member count when known (0 is the invalid value '')."""
    return MAX_ENUM_MEMBERS if members is None else len(members)


def set_mask_limit(members: tuple[str, ...] | None) -> int:
    """The largest SET bitmask: one bit per member when the members are known."""
    return (1 << (MAX_SET_MEMBERS if members is None else len(members))) - 1


# --- checks per type -------------------------------------------------------------------------


def _integer_check(low: int, high: int) -> Check:
    expected = f"an integer in [{low}, {high}]"

    def check(value: Any) -> str | None:
        if type(value) is int and not low <= value <= high:
            return expected
        return None

    return check


def _year(value: Any) -> str | None:
    if type(value) is int and not year_fits(value):
        return "0 or a year in [1901, 2155]"
    return None


def _finite(value: Any) -> str | None:
    if type(value) is float and not math.isfinite(value):
        return "a finite number"
    return None


def _text_check(pattern: str, expected: str) -> Check:
    fullmatch = re.compile(pattern, re.ASCII).fullmatch

    def check(value: Any) -> str | None:
        if type(value) is str and fullmatch(value) is None:
            return expected
        return None

    return check


_DATE = r"\d{4}-(?:0\d|1[0-2])-(?:[0-2]\d|3[01])"
_FRACTION = r"(?:\.\d{1,6})?"
# Month and day may be 00: zero dates ('0000-00-00') and, in some SQL modes, zero parts.
_date = _text_check(_DATE, "a date YYYY-MM-DD")
_CLOCK = r" (?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d" + _FRACTION
_datetime_text = _text_check(_DATE + _CLOCK, "a date and time YYYY-MM-DD HH:MM:SS[.ffffff]")
# A TIMESTAMP is local time in the TiCDC zone, or with a Z an instant in UTC: Avro's
# timestamp-millis, as TiCDC up to v6.0 wrote TIMESTAMP (and DATE and DATETIME) columns.
_timestamp_text = _text_check(
    _DATE + _CLOCK + "Z?", "a date and time YYYY-MM-DD HH:MM:SS[.ffffff], Z if in UTC"
)


def _datetime(value: Any) -> str | None:
    return _named_default(value, _datetime_text(value))


def _timestamp(value: Any) -> str | None:
    return _named_default(value, _timestamp_text(value))


def _named_default(value: Any, expected: str | None) -> str | None:
    """What DATETIME/TIMESTAMP text ``value`` was expected to be, if it is not. CURRENT_TIMESTAMP
    itself is named: TiCDC before v5.1.4, v5.2.4, v5.3.1 and v5.4.0 filled a NOT NULL column
    missing from a row (added after it was written) with the column's DefaultValue, which TiDB
    keeps as that word for such a default."""
    if expected is not None and value.upper().startswith("CURRENT_TIMESTAMP"):
        return (
            f"{expected}; CURRENT_TIMESTAMP is the column's default, which TiCDC before v5.1.4, "
            "v5.2.4, v5.3.1 and v5.4.0 sent for a row written before the column was added: the "
            "time TiDB gave it is not in the message"
        )
    return expected


_TIME_TEXT = re.compile(r"-?(\d{2,3}):([0-5]\d):([0-5]\d)(?:\.(\d{1,6}))?", re.ASCII).fullmatch
_TIME_MAX = (838, 59, 59, 0)


def _time(value: Any) -> str | None:
    """TIME: [-]HH:MM:SS[.ffffff], hours in two digits below 100, within ±838:59:59."""
    if type(value) is not str:
        return None
    match = _TIME_TEXT(value)
    if match is None or (*map(int, match.groups("0")),) > _TIME_MAX:
        return "a time [-]HH:MM:SS[.ffffff] within ±838:59:59"
    return None


def _decimal_check(precision: int | None, scale: int | None) -> Check:
    """DECIMAL text `[-]digits[.digits]` within DECIMAL(precision, scale) when they are known,
    else within TiDB's widest, DECIMAL(65,30)."""
    if precision is None:
        whole_limit, scale_limit = MAX_DECIMAL_DIGITS, MAX_DECIMAL_SCALE
        expected = "decimal text [-]digits[.digits] of at most 65 digits, 30 after the point"
    else:
        scale_limit = scale or 0
        whole_limit = precision - scale_limit
        expected = (
            f"decimal text [-]digits[.digits] of at most {whole_limit} digits before the point "
            f"and {scale_limit} after it"
        )

    def check(value: Any) -> str | None:
        if type(value) is not str:
            return None
        whole, point, fraction = value.partition(".")
        digits = whole[1:] if whole[:1] == "-" else whole
        if (
            digits.isdigit()
            and value.isascii()
            and (fraction.isdigit() or not point)
            and len(digits.lstrip("0")) <= whole_limit
            and len(fraction) <= scale_limit
        ):
            return None
        return expected

    return check


def _json(value: Any) -> str | None:
    if type(value) is str:
        try:
            orjson.loads(value)
        except orjson.JSONDecodeError:
            return "JSON text"
    return None


_TEXT_CHECKS: dict[int, Check] = {
    mysql.TYPE_DATE: _date,
    mysql.TYPE_NEWDATE: _date,
    mysql.TYPE_DATETIME: _datetime,
    mysql.TYPE_TIMESTAMP: _timestamp,
    mysql.TYPE_DURATION: _time,
    mysql.TYPE_JSON: _json,
    mysql.TYPE_FLOAT: _finite,
    mysql.TYPE_DOUBLE: _finite,
    mysql.TYPE_YEAR: _year,
}


@functools.lru_cache(maxsize=4096)  # few distinct column types; every row repeats them
def value_check(type_code: int | None, unsigned: bool, mysql_type: str | None) -> Check | None:
    """The check of a column's values (None: any value fits, e.g. strings and blobs)."""
    parsed = mysql.parsed_column_type_or_none(mysql_type)
    if type_code in _INTEGER_BITS:
        return _integer_check(*integer_bounds(type_code, unsigned))
    if type_code in (mysql.TYPE_NEWDECIMAL, mysql.TYPE_DECIMAL_OLD):
        if parsed is not None and parsed.length is not None:
            return _decimal_check(parsed.length, parsed.scale)
        return _decimal_check(None, None)
    if type_code == mysql.TYPE_ENUM:
        return _integer_check(0, enum_index_limit(parsed.elements if parsed else None))
    if type_code == mysql.TYPE_SET:
        return _integer_check(0, set_mask_limit(parsed.elements if parsed else None))
    if type_code == mysql.TYPE_BIT:
        # Not the declared width: TiCDC's own Avro tests send BIT 683 with a length of 1.
        return _integer_check(0, mysql.UINT64_MAX)
    return _TEXT_CHECKS.get(type_code)


def type_label(type_code: int | None, unsigned: bool, mysql_type: str | None) -> str:
    """How an error names a column's type: its full type when sent, else name and code."""
    if mysql_type:
        return mysql_type.upper() if "(" not in mysql_type else mysql_type
    name = _TYPE_NAMES.get(type_code, "type")
    if unsigned and type_code in _INTEGER_BITS:
        name += " UNSIGNED"
    return f"{name} (type code {type_code})"


# --- events ----------------------------------------------------------------------------------


# Checks that depend only on the type code and the unsigned flag, by `type code | flag`.
_PLAIN_CHECKS: dict[int, Check] = {}
# Types whose check also depends on the full type text (precision, members), when it is sent.
_TYPE_TEXT_MATTERS = frozenset(
    {mysql.TYPE_NEWDECIMAL, mysql.TYPE_DECIMAL_OLD, mysql.TYPE_ENUM, mysql.TYPE_SET}
)


def _plain_checks() -> None:
    for code in range(256):
        for flag in (0, mysql.FLAG_UNSIGNED):
            check = value_check(code, bool(flag), None)
            if check is not None:
                _PLAIN_CHECKS[code << 8 | flag] = check


def image_problem(image: Image) -> str | None:
    """What is wrong with the first value of `image` that does not fit its type, or None.

    The hot loop of every decoder: most columns cost a dict lookup and one comparison.
    """
    plain = _PLAIN_CHECKS.get
    for name, column in image.items():
        value = column.value
        code = column.type_code
        if value is None or code is None:
            continue
        if type(code) is int and (column.mysql_type is None or code not in _TYPE_TEXT_MATTERS):
            check = plain(code << 8 | column.flags & 0x80)  # mysql.FLAG_UNSIGNED
        else:  # a full type that matters, or an odd type code such as 3.0 (== INT)
            check = value_check(code, bool(column.flags & mysql.FLAG_UNSIGNED), column.mysql_type)
        if check is not None:
            expected = check(value)
            if expected is not None:
                unsigned = bool(column.flags & mysql.FLAG_UNSIGNED)
                return (
                    f"column {name!r}: value {value!r:.100} does not fit "
                    f"{type_label(code, unsigned, column.mysql_type)}; expected {expected}"
                )
    return None


_plain_checks()


def events_problem(events: Iterable[Event]) -> str | None:
    """What is wrong with the first row value that does not fit its column's type, or None."""
    for event in events:
        if type(event) is not RowEvent:
            continue
        for which, image in (("new", event.columns), ("old", event.old_columns)):
            if image:
                problem = image_problem(image)
                if problem is not None:
                    return (
                        f"row event {event.index} ({event.schema}.{event.table}), {which} "
                        f"image: {problem}"
                    )
    return None


def check_events(events: Iterable[Event]) -> None:
    """Raise DecodeError for the first row value that does not fit its column's type."""
    problem = events_problem(events)
    if problem is not None:
        raise DecodeError(problem)
