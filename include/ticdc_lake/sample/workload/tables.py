"""The simulated upstream schema: tables, their columns and handle keys, and their DDL text.

Between them the tables hold every column type of `cases.COLUMN_TYPES`, and they cover the
kinds of table TiCDC treats differently: an integer primary key, a composite primary key, a
table whose handle is a NOT NULL unique key (no primary key), and a hash-partitioned table whose
rows carry their physical partition id.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field, replace

from ticdc_lake.lake.names import backticked, qualified_name
from ticdc_lake.sample.cases import BY_NAME, COLUMN_TYPES, ColumnType
from ticdc_lake.silver import mysql
from ticdc_lake.silver.events import Column

SCHEMA = "shop"
PRIMARY = "primary"
UNIQUE = "unique"


@dataclass(frozen=True)
class ColumnDef:
    """One column of a table: its name, its canonical type and how it takes part in keys."""

    name: str
    column_type: ColumnType
    nullable: bool = True
    flags: int = 0  # TiCDC flags, set by `TableDef.build` from the type and the table's keys

    @property
    def mysql_type(self) -> str:
        return self.column_type.mysql_type

    @property
    def type_code(self) -> int:
        return self.column_type.type_code

    @property
    def is_key(self) -> bool:
        return bool(self.flags & mysql.FLAG_HANDLE_KEY)

    def column(self, value) -> Column:
        return Column(self.column_type.type_code, self.flags, value, self.column_type.mysql_type)

    def sql(self) -> str:
        return (
            f"{backticked(self.name)} {self.mysql_type} {'NULL' if self.nullable else 'NOT NULL'}"
        )


@dataclass(frozen=True)
class TableDef:
    """A table as it is at one moment: DDLs give new TableDefs (`with_columns`, `truncated`)."""

    schema: str
    name: str
    table_id: int
    columns: tuple[ColumnDef, ...]
    handle: tuple[str, ...]  # handle-key column names, in key order
    key_kind: str  # PRIMARY or UNIQUE (a NOT NULL unique key serving as the handle)
    partition_ids: tuple[int, ...] = ()  # physical partitions (PARTITION BY HASH on the key)
    by_name: dict[str, ColumnDef] = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "by_name", {column.name: column for column in self.columns})

    @property
    def full_name(self) -> str:
        return qualified_name(self.schema, self.name)

    @property
    def quoted(self) -> str:
        return f"{backticked(self.schema)}.{backticked(self.name)}"

    @classmethod
    def build(
        cls,
        name: str,
        table_id: int,
        columns: list[ColumnDef],
        handle: tuple[str, ...],
        key_kind: str = PRIMARY,
        partitions: int = 0,
        schema: str = SCHEMA,
    ) -> TableDef:
        """Give every column the flags TiCDC would (PROTOCOLS.md §1.3)."""
        flagged = tuple(_with_flags(column, handle, key_kind) for column in columns)
        partition_ids = tuple(table_id + 1 + i for i in range(partitions))
        return cls(schema, name, table_id, flagged, handle, key_kind, partition_ids)

    def add_column(self, column: ColumnDef) -> TableDef:
        """ALTER TABLE ADD COLUMN: the new column is last, flagged like the others."""
        flagged = _with_flags(column, self.handle, self.key_kind)
        return replace(self, columns=(*self.columns, flagged))

    def drop_column(self, name: str) -> TableDef:
        return replace(self, columns=tuple(c for c in self.columns if c.name != name))

    def modify_column(self, column: ColumnDef) -> TableDef:
        """ALTER TABLE MODIFY COLUMN: the column of that name takes the new type, in place."""
        flagged = _with_flags(column, self.handle, self.key_kind)
        return replace(
            self, columns=tuple(flagged if c.name == column.name else c for c in self.columns)
        )

    def rename_column(self, old: str, new: str) -> TableDef:
        """ALTER TABLE RENAME COLUMN: the key follows its column's name."""
        columns = tuple(replace(c, name=new) if c.name == old else c for c in self.columns)
        handle = tuple(new if name == old else name for name in self.handle)
        return replace(self, columns=columns, handle=handle)

    def truncated(self, new_table_id: int) -> TableDef:
        """TRUNCATE TABLE gives the table (and each partition) a new physical id."""
        partition_ids = tuple(new_table_id + 1 + i for i in range(len(self.partition_ids)))
        return replace(self, table_id=new_table_id, partition_ids=partition_ids)

    def partition_of(self, key: tuple) -> int | None:
        """Physical partition of a row: HASH partitioning, MOD(key, n) on the first key column."""
        if not self.partition_ids:
            return None
        return self.partition_ids[abs(key[0]) % len(self.partition_ids)]

    def create_sql(self) -> str:
        parts = [column.sql() for column in self.columns]
        key_list = ", ".join(map(backticked, self.handle))
        if self.key_kind == PRIMARY:
            parts.append(f"PRIMARY KEY ({key_list})")
        else:
            parts.append(f"UNIQUE KEY {backticked('uk_' + '_'.join(self.handle))} ({key_list})")
        text = f"CREATE TABLE {self.quoted} ({', '.join(parts)})"
        if self.partition_ids:
            partitions = len(self.partition_ids)
            text += f" PARTITION BY HASH ({backticked(self.handle[0])}) PARTITIONS {partitions}"
        return text

    def describe(self) -> dict:
        """The table for manifest.json."""
        return {
            "schema": self.schema,
            "table": self.name,
            "table_id": self.table_id,
            "handle_key": list(self.handle),
            "key_kind": self.key_kind,
            "partition_ids": list(self.partition_ids),
            "columns": [
                {
                    "name": column.name,
                    "mysql_type": column.mysql_type,
                    "type_code": column.type_code,
                    "flags": column.flags,
                    "nullable": column.nullable,
                }
                for column in self.columns
            ],
        }


def _with_flags(column: ColumnDef, handle: tuple[str, ...], key_kind: str) -> ColumnDef:
    flags = column.column_type.flags
    if column.name in handle:
        flags |= mysql.FLAG_HANDLE_KEY
        flags |= mysql.FLAG_PRIMARY_KEY if key_kind == PRIMARY else mysql.FLAG_UNIQUE_KEY
        if len(handle) > 1:
            flags |= mysql.FLAG_MULTIPLE_KEY
        return replace(column, nullable=False, flags=flags)
    if column.nullable:
        flags |= mysql.FLAG_NULLABLE
    return replace(column, flags=flags)


def _types(*names: str) -> list[ColumnDef]:
    return [ColumnDef(name, BY_NAME[name]) for name in names]


def _key(name: str, type_name: str) -> ColumnDef:
    return ColumnDef(name, BY_NAME[type_name], nullable=False)


_NUMERIC = mysql.INTEGER_TYPES | {
    mysql.TYPE_FLOAT,
    mysql.TYPE_DOUBLE,
    mysql.TYPE_NEWDECIMAL,
    mysql.TYPE_BIT,
    mysql.TYPE_YEAR,
}
_TEMPORAL = mysql.TEMPORAL_TEXT_TYPES


def canonical_tables() -> tuple[TableDef, ...]:
    """The tables of every generated workload (table ids as TiDB might have given them)."""
    numeric = [t.name for t in COLUMN_TYPES if t.type_code in _NUMERIC]
    temporal = [t.name for t in COLUMN_TYPES if t.type_code in _TEMPORAL]
    strings = [t.name for t in COLUMN_TYPES if t.name not in numeric and t.name not in temporal]
    tables = (
        TableDef.build("numbers", 100, [_key("id", "c_bigint"), *_types(*numeric)], ("id",)),
        TableDef.build("strings", 110, [_key("id", "c_bigint"), *_types(*strings)], ("id",)),
        TableDef.build("times", 120, [_key("id", "c_bigint"), *_types(*temporal)], ("id",)),
        TableDef.build(
            "orders",
            130,
            [
                _key("id", "c_bigint"),
                ColumnDef("customer", BY_NAME["c_varchar"], nullable=False),
                ColumnDef("amount", BY_NAME["c_decimal"]),
                ColumnDef("status", BY_NAME["c_enum"]),
                ColumnDef("created_at", BY_NAME["c_datetime6"]),
                ColumnDef("note", BY_NAME["c_text"]),
            ],
            ("id",),
            partitions=4,
        ),
        TableDef.build(
            "accounts",
            140,
            [
                _key("code", "c_varchar"),
                ColumnDef("owner", BY_NAME["c_varchar"]),
                ColumnDef("balance", BY_NAME["c_decimal_wide"], nullable=False),
                ColumnDef("limits", BY_NAME["c_bigint_unsigned"]),
                ColumnDef("updated_at", BY_NAME["c_timestamp"]),
            ],
            ("code",),
            key_kind=UNIQUE,
        ),
        TableDef.build(
            "order_items",
            150,
            [
                _key("order_id", "c_bigint_unsigned"),
                _key("line_no", "c_int"),
                ColumnDef("sku", BY_NAME["c_char"]),
                ColumnDef("qty", BY_NAME["c_smallint_unsigned"], nullable=False),
                ColumnDef("price", BY_NAME["c_decimal_int"]),
                ColumnDef("picture", BY_NAME["c_blob"]),
            ],
            ("order_id", "line_no"),
        ),
    )
    covered = {column.column_type.name for table in tables for column in table.columns}
    missing = {t.name for t in COLUMN_TYPES} - covered
    assert not missing, f"canonical tables miss column types {missing}"
    return tables


# The hostile-names profile: a schema that is an absolute path (tests check nothing is written
# there), and names a lake must not take for paths or column references.
ABSOLUTE_SCHEMA = "/tmp/ticdc-lake-hostile-names"
HOSTILE_COLUMNS = {  # canonical name -> hostile name, in the tables that have them
    "id": "select",
    "customer": "a`b",
    "amount": "a.b",
    "status": "a b",
    "created_at": "é",
    "order_id": "a.b",
    "line_no": "a`b",
}


def hostile_tables() -> tuple[TableDef, ...]:
    """The canonical tables, first four in the same roles, under names that break naive code:
    paths (absolute, ``..`` onto the lake's own tables), names that differ only in case, in a
    dot against a slash, in Unicode normalisation, and control characters; and columns named
    with a backtick, a dot, a space, a keyword and a non-ASCII letter, in keys and out."""
    numbers, strings, times, orders, accounts, order_items = canonical_tables()
    nfc, nfd = unicodedata.normalize("NFC", "café"), unicodedata.normalize("NFD", "café")
    renamed = [
        (numbers, ABSOLUTE_SCHEMA, "numbers", 0),
        (strings, "../quality", "results", 0),
        (times, "../silver", "watermarks", 0),
        (_hostile_columns(orders), "Shop", "Orders", 0),
        (accounts, "shop", "orders", 0),
        (_hostile_columns(order_items), "a.b", "t", 0),
        (_hostile_columns(order_items), "a/b", "t", 200),
        (accounts, nfc, "t", 210),
        (accounts, nfd, "t", 220),
        (accounts, "shop", "\x1b[2J\x1b[HEvery check passed\r", 230),
    ]
    return tuple(_moved(*entry) for entry in renamed)


def _moved(table: TableDef, schema: str, name: str, table_id: int) -> TableDef:
    """``table`` as ``schema``.``name``, with a new table id (and partition ids) unless 0."""
    shift = table_id - table.table_id if table_id else 0
    partition_ids = tuple(p + shift for p in table.partition_ids)
    return replace(table, schema=schema, name=name, table_id=table.table_id + shift,
                   partition_ids=partition_ids)  # fmt: skip


def _hostile_columns(table: TableDef) -> TableDef:
    for old, new in HOSTILE_COLUMNS.items():
        if old in table.by_name:
            table = table.rename_column(old, new)
    return table
