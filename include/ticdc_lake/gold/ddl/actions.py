"""What a DDL query does, as gold needs it: one action per clause, and the column definitions."""

from __future__ import annotations

from dataclasses import dataclass

from ticdc_lake.lake.names import qualified_name


@dataclass(frozen=True)
class TableName:
    schema: str
    name: str

    def __str__(self) -> str:
        return qualified_name(self.schema, self.name)


# DefaultValue kinds
LITERAL, NULL_DEFAULT, NOW, EXPRESSION = "literal", "null", "now", "expression"


@dataclass(frozen=True)
class DefaultValue:
    """A column's DEFAULT: a literal (its text, or its bytes for b'..', x'..' and 0x..), NULL,
    the current time (CURRENT_TIMESTAMP and its synonyms), or an expression gold cannot run."""

    kind: str
    text: str | None = None
    binary: bytes | None = None


@dataclass(frozen=True)
class ColumnDef:
    """A column as a DDL defines it. ``type_text`` is in ``mysql.parse_column_type`` form."""

    name: str
    type_text: str
    nullable: bool = True
    primary_key: bool = False  # PRIMARY KEY written on the column itself
    unique: bool = False  # UNIQUE written on the column itself
    binary_charset: bool = False  # CHARACTER SET binary: a CHAR/VARCHAR/TEXT holding bytes
    generated: bool = False
    default: DefaultValue | None = None  # None: no DEFAULT clause


@dataclass(frozen=True)
class PartitionDef:
    name: str
    less_than: tuple[str, ...] | None = None  # literal texts; ("MAXVALUE",) for the last range
    values_in: tuple[tuple[str, ...], ...] | None = None  # LIST: each value (a tuple per COLUMNS)


@dataclass(frozen=True)
class Partitioning:
    kind: str  # range | list | hash | key
    columns: tuple[str, ...]  # the bare columns partitioned on; () when it is an expression
    expression: str  # the partitioning expression or column list as written
    definitions: tuple[PartitionDef, ...] = ()
    count: int | None = None  # PARTITIONS n (HASH/KEY without definitions)
    use_columns: bool = False  # RANGE COLUMNS / LIST COLUMNS

    @property
    def names(self) -> tuple[str, ...]:
        if self.definitions:
            return tuple(d.name for d in self.definitions)
        return tuple(f"p{i}" for i in range(self.count or 1))


@dataclass(frozen=True)
class Action:
    """One effect of a DDL query. ``table`` is the table it acts on (None for schema-wide)."""

    table: TableName | None


@dataclass(frozen=True)
class CreateTable(Action):
    columns: tuple[ColumnDef, ...] = ()
    primary_key: tuple[str, ...] | None = None
    unique_keys: tuple[tuple[str, ...], ...] = ()
    partitioning: Partitioning | None = None
    like: TableName | None = None  # CREATE TABLE t LIKE s: the columns are s's
    if_not_exists: bool = False


@dataclass(frozen=True)
class AddColumns(Action):
    columns: tuple[ColumnDef, ...] = ()


@dataclass(frozen=True)
class DropColumns(Action):
    names: tuple[str, ...] = ()


@dataclass(frozen=True)
class ModifyColumn(Action):
    """MODIFY (``old_name`` == column.name), CHANGE (a new definition and maybe a new name)."""

    old_name: str = ""
    column: ColumnDef | None = None


@dataclass(frozen=True)
class RenameColumn(Action):
    old_name: str = ""
    new_name: str = ""


@dataclass(frozen=True)
class SetPrimaryKey(Action):
    """ADD PRIMARY KEY (columns) or DROP PRIMARY KEY (columns None)."""

    columns: tuple[str, ...] | None = None


@dataclass(frozen=True)
class AddUniqueKey(Action):
    columns: tuple[str, ...] = ()


@dataclass(frozen=True)
class RenameTable(Action):
    new: TableName | None = None  # ``table`` is the old name


@dataclass(frozen=True)
class TruncateTable(Action):
    pass


@dataclass(frozen=True)
class DropTable(Action):
    pass


@dataclass(frozen=True)
class DropSchema(Action):
    schema: str = ""


@dataclass(frozen=True)
class AddPartitions(Action):
    definitions: tuple[PartitionDef, ...] = ()
    count: int | None = None  # ADD PARTITION PARTITIONS n (HASH/KEY)


@dataclass(frozen=True)
class DropPartitions(Action):
    names: tuple[str, ...] = ()


@dataclass(frozen=True)
class TruncatePartitions(Action):
    names: tuple[str, ...] = ()  # () means ALL


@dataclass(frozen=True)
class ReorganizePartitions(Action):
    names: tuple[str, ...] = ()
    definitions: tuple[PartitionDef, ...] = ()


@dataclass(frozen=True)
class ExchangePartition(Action):
    name: str = ""
    other: TableName | None = None


@dataclass(frozen=True)
class Repartition(Action):
    """PARTITION BY (new partitioning), REMOVE PARTITIONING (None), COALESCE PARTITION n."""

    partitioning: Partitioning | None = None
    coalesce: int | None = None


@dataclass(frozen=True)
class NoOp(Action):
    what: str = ""
