"""Schemas across Spark, Delta and Arrow.

Delta's schema serialisation is Spark's ``StructType`` JSON, so Spark → Delta is a JSON
round trip and Delta → Spark is ``StructType.fromJson``; Arrow schemas for the data files come
from delta-rs (``Schema.to_arrow``), so files hold exactly the physical types delta-rs expects.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from deltalake import Schema as DeltaSchema
from pyspark.sql.types import StructType

from ticdc_lake.delta.exceptions import SchemaMismatchError

# Partition values live in directory names and the log as text; these types have one obvious
# text form that Spark's partition discovery parses back exactly.
PARTITION_TYPES = frozenset({"string", "byte", "short", "integer", "long", "date", "boolean"})

# Types a column may be written as while the table holds the wider one (the files are cast).
_INTEGRAL_RANK = {"byte": 0, "short": 1, "integer": 2, "long": 3}

_UNSUPPORTED = ("interval", "variant", "char(", "varchar(", "void", "geometry", "geography")


def _nullable_type(type_json: Any) -> Any:
    """The type with every nested field, element and value nullable and no field metadata.

    Spark marks literals and many expressions non-nullable; a Delta column created non-nullable
    would make the next append that holds a null fail, so (like Spark's own file sources) every
    column is stored nullable.
    """
    if not isinstance(type_json, dict):
        return type_json
    kind = type_json["type"]
    if kind == "struct":
        return {
            "type": "struct",
            "fields": [
                {
                    "name": f["name"],
                    "type": _nullable_type(f["type"]),
                    "nullable": True,
                    "metadata": {},
                }
                for f in type_json["fields"]
            ],
        }
    if kind == "array":
        return {
            "type": "array",
            "elementType": _nullable_type(type_json["elementType"]),
            "containsNull": True,
        }
    if kind == "map":
        return {
            "type": "map",
            "keyType": _nullable_type(type_json["keyType"]),
            "valueType": _nullable_type(type_json["valueType"]),
            "valueContainsNull": True,
        }
    return type_json


def _check_supported(name: str, type_json: Any) -> None:
    text = json.dumps(type_json)
    for marker in _UNSUPPORTED:
        if f'"{marker}' in text:
            raise SchemaMismatchError(f"column {name!r}: Spark type {text} has no Delta equivalent")


@dataclass(frozen=True)
class TableSchema:
    """A Delta table schema as ``name → type JSON`` in column order, plus partition columns."""

    columns: tuple[tuple[str, Any], ...]
    partition_by: tuple[str, ...] = ()

    @classmethod
    def from_spark(
        cls, schema: StructType, partition_by: list[str] | tuple[str, ...] = ()
    ) -> TableSchema:
        columns = []
        for field in schema.jsonValue()["fields"]:
            _check_supported(field["name"], field["type"])
            columns.append((field["name"], _nullable_type(field["type"])))
        table = cls(tuple(columns), tuple(partition_by))
        table.check_partitioning()
        return table

    @classmethod
    def from_delta(cls, schema: DeltaSchema, partition_by: list[str]) -> TableSchema:
        fields = json.loads(schema.to_json())["fields"]
        return cls(tuple((f["name"], f["type"]) for f in fields), tuple(partition_by))

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.columns]

    def type_of(self, name: str) -> Any:
        return dict(self.columns)[name]

    def check_partitioning(self) -> None:
        types = dict(self.columns)
        if len({n.lower() for n in types}) != len(types):
            raise SchemaMismatchError(f"column names differ only in case: {self.names}")
        for name in self.partition_by:
            if name not in types:
                raise SchemaMismatchError(
                    f"partition column {name!r} is not a column: {self.names}"
                )
            if types[name] not in PARTITION_TYPES:
                raise SchemaMismatchError(
                    f"partition column {name!r} has type {types[name]}; "
                    f"partition by one of {sorted(PARTITION_TYPES)}"
                )
        if self.partition_by and len(self.partition_by) == len(types):
            raise SchemaMismatchError(
                "a table needs at least one column that is not a partition column"
            )

    def to_json(self) -> str:
        fields = [{"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in self.columns]
        return json.dumps({"type": "struct", "fields": fields})

    def to_delta(self) -> DeltaSchema:
        return DeltaSchema.from_json(self.to_json())

    def to_spark(self) -> StructType:
        return StructType.fromJson(json.loads(self.to_json()))

    def to_arrow(self) -> pa.Schema:
        return pa.schema(self.to_delta().to_arrow())

    def file_schema(self, present: list[str]) -> pa.Schema:
        """Arrow schema of a data file: the present columns in table order, minus partitions."""
        arrow = self.to_arrow()
        keep = set(present) - set(self.partition_by)
        return pa.schema([f for f in arrow if f.name in keep])

    def evolve(self, incoming: TableSchema) -> tuple[TableSchema, list[str]]:
        """The table schema after writing ``incoming`` into it, and the columns it adds.

        New columns are appended (nullable); a column may arrive as a narrower integral, float
        or decimal type (its files are cast up); any other type change, and a change of
        partitioning, is refused.
        """
        if incoming.partition_by and incoming.partition_by != self.partition_by:
            raise SchemaMismatchError(
                f"table is partitioned by {list(self.partition_by)}, "
                f"the write by {list(incoming.partition_by)}"
            )
        current = dict(self.columns)
        lowered = {n.lower(): n for n in current}
        added = []
        for name, type_json in incoming.columns:
            if name not in current:
                if name.lower() in lowered:
                    raise SchemaMismatchError(
                        f"column {name!r} differs only in case from "
                        f"table column {lowered[name.lower()]!r}"
                    )
                added.append(name)
            elif not _fits(type_json, current[name]):
                raise SchemaMismatchError(
                    f"column {name!r}: cannot write {json.dumps(type_json)} "
                    f"into a table column of type {json.dumps(current[name])}"
                )
        columns = self.columns + tuple((n, incoming.type_of(n)) for n in added)
        return TableSchema(columns, self.partition_by), added


def _decimal(type_json: Any) -> tuple[int, int] | None:
    if isinstance(type_json, str) and type_json.startswith("decimal("):
        precision, scale = type_json[len("decimal(") : -1].split(",")
        return int(precision), int(scale)
    return None


def _fits(source: Any, target: Any) -> bool:
    """Whether values of Delta type ``source`` can be stored in a column of type ``target``."""
    if _nullable_type(source) == _nullable_type(target):
        return True
    if source in _INTEGRAL_RANK and target in _INTEGRAL_RANK:
        return _INTEGRAL_RANK[source] <= _INTEGRAL_RANK[target]
    if source == "float" and target == "double":
        return True
    src, dst = _decimal(source), _decimal(target)
    if src and dst:
        # Same scale, no fewer integer digits: every value fits without rounding.
        return src[1] == dst[1] and src[0] <= dst[0]
    return False
