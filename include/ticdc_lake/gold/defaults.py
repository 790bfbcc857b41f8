"""What ADD COLUMN gives the rows a table already has: TiDB's "original default".

Those rows read the column's DEFAULT literal; the time the DDL ran (its commit TS) for
CURRENT_TIMESTAMP and its synonyms; NULL for a nullable column without a DEFAULT; the type's
zero value for a NOT NULL one. Other expressions (``DEFAULT (UUID())``) cannot be run here:
those rows hold NULL. The value is kept as a change image carries it (text or bytes), so the
rows a run changed before the DDL and the rows gold already holds are typed by one converter.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ticdc_lake.gold import ddl
from ticdc_lake.gold import types as gold_types
from ticdc_lake.gold.convert import Origin, Values, convert
from ticdc_lake.gold.types import ColumnSpec
from ticdc_lake.silver import mysql

_ZERO_TEXT = {
    gold_types.INTEGER: "0",
    gold_types.DECIMAL: "0",
    gold_types.FLOAT: "0",
    gold_types.TEXT: "",
    gold_types.SET_NAMES: "0",
    gold_types.ENUM_NAME: "1",
    gold_types.DATE: "0000-00-00",
    gold_types.DATETIME: "0000-00-00 00:00:00",
    gold_types.TIMESTAMP: "0000-00-00 00:00:00",
}
_ZERO_TEXT_BY_TYPE = {mysql.TYPE_JSON: "null", mysql.TYPE_DURATION: "00:00:00"}
_INTEGER_CODES = {*mysql.INTEGER_TYPES, mysql.TYPE_BIT, mysql.TYPE_YEAR}


@dataclass(frozen=True)
class AddedValue:
    """The value an added column holds in the rows written before it, as an image carries it."""

    name: str
    spec: ColumnSpec
    text: str | None
    binary: bytes | None
    zone: str  # the time zone upstream's time values are read in

    @property
    def is_null(self) -> bool:
        return self.text is None and self.binary is None

    def image_element(self) -> dict[str, Any]:
        """The element a change image written before the DDL gains (silver/rows.py's image)."""
        return {
            "name": self.name,
            "type_code": self.spec.type_code,
            "flags": 0,
            "mysql_type": self.spec.mysql_type,
            "text": self.text,
            "binary": self.binary,
        }

    def gold_value(self, arrow: pa.DataType, where: str) -> pa.Scalar:
        """The value typed as gold's column ``arrow``; ``where`` names the DDL in errors."""
        if self.is_null:
            return pa.scalar(None, arrow)
        values = Values(pa.array([self.text], pa.string()), pa.array([self.binary], pa.binary()))
        origin = Origin(where, pa.array([None]), pa.array([None]), pa.array([None]))
        typed, _ = convert(
            values, gold_types.gold_type(self.spec), arrow, self.name, origin, pa.array([self.zone])
        )
        return typed[0]


def added_values(
    columns: tuple[ddl.ColumnDef, ...], ddl_ts: int | None, zone: str
) -> tuple[AddedValue, ...]:
    """The value each added column holds in the rows already there (``zone``: the time zone
    upstream's time literals and the DDL's own time are read in; without the DDL's TS, the
    current time is not known: NULL)."""
    return tuple(
        AddedValue(column.name, spec, *_image_value(column, spec, ddl_ts, zone), zone)
        for column in columns
        for spec in [ColumnSpec.from_ddl(column)]
    )


def _image_value(
    column: ddl.ColumnDef, spec: ColumnSpec, ddl_ts: int | None, zone: str
) -> tuple[str | None, bytes | None]:
    default = column.default
    kind = gold_types.gold_type(spec).kind
    if column.generated or (default is not None and default.kind == ddl.NULL_DEFAULT):
        return None, None
    if default is None or default.kind == ddl.EXPRESSION:
        return (None, None) if column.nullable else _zero(spec, kind)
    if default.kind == ddl.NOW:
        return (None, None) if ddl_ts is None else (_ddl_time(ddl_ts, zone, kind), None)
    return _literal(default, spec, kind)


def _zero(spec: ColumnSpec, kind: str) -> tuple[str | None, bytes | None]:
    if kind == gold_types.BYTES:
        return None, b"\0" * (spec.length or 0) if spec.type_code == mysql.TYPE_STRING else b""
    if kind == gold_types.ENUM_NAME and not spec.elements:
        return None, None
    return _ZERO_TEXT_BY_TYPE.get(spec.type_code, _ZERO_TEXT.get(kind)), None


def _ddl_time(ddl_ts: int, zone: str, kind: str) -> str:
    physical = dt.datetime.fromtimestamp((ddl_ts >> 18) / 1000, zoneinfo.ZoneInfo(zone))
    if kind == gold_types.DATE:
        return physical.strftime("%Y-%m-%d")
    return physical.strftime("%Y-%m-%d %H:%M:%S.%f")


def _literal(
    default: ddl.DefaultValue, spec: ColumnSpec, kind: str
) -> tuple[str | None, bytes | None]:
    if kind == gold_types.BYTES:
        return None, default.binary if default.binary is not None else default.text.encode()
    if default.binary is not None and spec.type_code in _INTEGER_CODES:
        return str(int.from_bytes(default.binary, "big")), None
    text = default.text
    if text is None:
        text = default.binary.decode("utf-8", errors="replace")
    members = [member.lower() for member in spec.elements or ()]
    if kind == gold_types.ENUM_NAME:
        # MySQL compares members case-insensitively; an unknown one is its invalid value, 0.
        return str(members.index(text.lower()) + 1 if text.lower() in members else 0), None
    if kind == gold_types.SET_NAMES:
        chosen = {name.lower() for name in text.split(",") if name}
        return str(sum(1 << i for i, member in enumerate(members) if member in chosen)), None
    return text, None
