"""The DDL grammar: statements, column definitions and partitioning, read through a Cursor."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ticdc_lake.gold.ddl.actions import (
    EXPRESSION,
    LITERAL,
    NOW,
    NULL_DEFAULT,
    Action,
    AddColumns,
    AddPartitions,
    AddUniqueKey,
    ColumnDef,
    CreateTable,
    DefaultValue,
    DropColumns,
    DropPartitions,
    DropSchema,
    DropTable,
    ExchangePartition,
    ModifyColumn,
    NoOp,
    PartitionDef,
    Partitioning,
    RenameColumn,
    RenameTable,
    ReorganizePartitions,
    Repartition,
    SetPrimaryKey,
    TableName,
    TruncatePartitions,
    TruncateTable,
)
from ticdc_lake.gold.ddl.cursor import Cursor
from ticdc_lake.gold.ddl.tokens import END, NUMBER, PUNCT, STRING, WORD
from ticdc_lake.gold.exceptions import DdlParseError

_NOW_WORDS = {"current_timestamp", "now", "localtime", "localtimestamp"}

# --- types -------------------------------------------------------------------------------------

# Synonyms, as MySQL resolves them when it stores a column type.
_TYPE_SYNONYMS = {
    "integer": "int",
    "int1": "tinyint",
    "int2": "smallint",
    "int3": "mediumint",
    "int4": "int",
    "int8": "bigint",
    "middleint": "mediumint",
    "dec": "decimal",
    "numeric": "decimal",
    "fixed": "decimal",
    "real": "double",
    "float4": "float",
    "float8": "double",
    "character": "char",
    "nchar": "char",
    "nvarchar": "varchar",
}
_ENUM_TYPES = {"enum", "set"}
_CHAR_TYPES = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set"}
_TYPE_NAMES = {
    "tinyint", "smallint", "mediumint", "int", "bigint", "float", "double", "decimal", "bit",
    "bool", "boolean", "serial", "date", "time", "datetime", "timestamp", "year", "char",
    "varchar", "binary", "varbinary", "tinytext", "text", "mediumtext", "longtext", "tinyblob",
    "blob", "mediumblob", "longblob", "enum", "set", "json", "vector", "geometry", "point",
    "linestring", "polygon", "multipoint", "multilinestring", "multipolygon",
    "geometrycollection", *_TYPE_SYNONYMS,
}  # fmt: skip


def _bytes_literal(base: str, digits: str) -> bytes:
    """The bytes of b'0101' or x'ff' (also 0b0101, 0xff): big-endian, as MySQL stores them."""
    if base == "x":
        return bytes.fromhex(digits if len(digits) % 2 == 0 else "0" + digits)
    value = int(digits or "0", 2)
    return value.to_bytes(max(1, (len(digits) + 7) // 8), "big")


def _quote_element(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


# --- the parser --------------------------------------------------------------------------------


@dataclass
class _Column:
    """A column definition being read."""

    name: str
    type_text: str
    nullable: bool = True
    primary_key: bool = False
    unique: bool = False
    binary_charset: bool = False
    generated: bool = False
    default: DefaultValue | None = None
    keys: list[str] = field(default_factory=list)

    def build(self) -> ColumnDef:
        return ColumnDef(
            self.name,
            self.type_text,
            nullable=self.nullable and not self.primary_key,
            primary_key=self.primary_key,
            unique=self.unique,
            binary_charset=self.binary_charset,
            generated=self.generated,
            default=self.default,
        )


class _Parser(Cursor):
    def key_columns(self) -> tuple[str, ...]:
        """``(a, b(10), c DESC)``: the column names of a key; () if a part is an expression."""
        self.expect_punct("(")
        columns: list[str] | None = []
        while True:
            if self.is_punct("("):  # a functional key part: no plain column
                self.skip_balanced()
                columns = None
            else:
                name = self.identifier("a key column")
                if columns is not None:
                    columns.append(name)
                if self.is_punct("("):  # prefix length
                    self.skip_balanced()
            self.accept("ASC", "DESC")
            if self.accept_punct(","):
                continue
            self.expect_punct(")")
            return tuple(columns) if columns is not None else ()

    # --- statements ----------------------------------------------------------------------

    def statement(self) -> list[Action]:
        while self.accept_punct(";"):
            pass
        verb = self.expect("CREATE", "ALTER", "DROP", "RENAME", "TRUNCATE", *_NOOP_VERBS)
        if verb in _NOOP_VERBS:
            return [NoOp(None, f"{verb} statement")]
        actions = getattr(self, f"_{verb.lower()}")()
        self.expect_end()
        return actions

    def _create(self) -> list[Action]:
        self.accept_sequence("OR", "REPLACE")
        if self.accept("TEMPORARY", "GLOBAL", "LOCAL"):
            self.accept("TEMPORARY")
            self.skip_rest()
            return [NoOp(None, "temporary table (not replicated)")]
        if self.accept("TABLE"):
            return [self._create_table()]
        if self.accept("DATABASE", "SCHEMA"):
            self.skip_rest()
            return [NoOp(None, "CREATE DATABASE")]
        word = self.accept(*_CREATE_NOOPS)
        if word is None:
            raise self.fail("TABLE, DATABASE, INDEX, VIEW or another CREATE target")
        self.skip_rest()
        return [NoOp(None, f"CREATE {word}")]

    def _create_table(self) -> CreateTable:
        if_not_exists = self.accept_sequence("IF", "NOT", "EXISTS")
        table = self.table_name()
        if self.accept("LIKE"):
            return CreateTable(table, like=self.table_name(), if_not_exists=if_not_exists)
        if self.is_punct("(") and self.is_word("LIKE", token=self.peek()):
            self.advance()
            self.advance()
            like = self.table_name()
            self.expect_punct(")")
            return CreateTable(table, like=like, if_not_exists=if_not_exists)
        if not self.is_punct("("):
            raise self.fail("'(' and column definitions, or LIKE (CREATE TABLE ... SELECT is "
                            "not supported)")  # fmt: skip
        self.advance()
        columns: list[_Column] = []
        primary: tuple[str, ...] | None = None
        uniques: list[tuple[str, ...]] = []
        while True:
            kind, keys = self._table_element(columns)
            if kind == "primary":
                primary = keys
            elif kind == "unique" and keys:
                uniques.append(keys)
            if self.accept_punct(","):
                continue
            self.expect_punct(")")
            break
        partitioning = self._table_options()
        for column in columns:
            if column.primary_key:
                primary = (column.name,)
            elif column.unique:
                uniques.append((column.name,))
        if primary:
            for column in columns:
                if column.name in primary:
                    column.nullable = False
        if self.is_word("AS", "SELECT", "IGNORE", "REPLACE") or self.is_punct("("):
            raise self.fail("the end of CREATE TABLE (CREATE TABLE ... SELECT is not supported)")
        return CreateTable(
            table,
            columns=tuple(c.build() for c in columns),
            primary_key=primary,
            unique_keys=tuple(uniques),
            partitioning=partitioning,
            if_not_exists=if_not_exists,
        )

    def _table_element(self, columns: list[_Column]) -> tuple[str, tuple[str, ...]]:
        """One element inside CREATE TABLE's parentheses: a column or a key/constraint."""
        self._constraint_name()
        if self.accept("PRIMARY"):
            self.expect("KEY")
            return "primary", self._index_rest()
        if self.accept("UNIQUE"):
            self.accept("KEY", "INDEX")
            return "unique", self._index_rest()
        # KEY, INDEX, FULLTEXT, ... are reserved words: a column with such a name is quoted.
        if self.is_word("KEY", "INDEX", "FULLTEXT", "SPATIAL", "FOREIGN", "CHECK") or (
            self.is_word("VECTOR", "COLUMNAR") and self.is_word("INDEX", "KEY", token=self.peek())
        ):
            self.skip_to_clause_end()
            return "other", ()
        columns.append(self._column_definition())
        return "column", ()

    def _index_rest(self) -> tuple[str, ...]:
        """After PRIMARY KEY / UNIQUE [KEY]: [name] [USING x] (columns) [options]."""
        if not self.is_punct("(") and not self.is_word("USING"):
            self.identifier("an index name")
        if self.accept("USING"):
            self.advance()
        keys = self.key_columns()
        self.skip_to_clause_end()
        return keys

    def _column_definition(self) -> _Column:
        name = self.identifier("a column name")
        column = _Column(name, self._column_type())
        self._column_attributes(column)
        return column

    def _column_type(self) -> str:
        start = self.token
        if start.kind != WORD or start.text.lower() not in _TYPE_NAMES | {
            "double", "long", "national", "char",
        }:  # fmt: skip
            raise self.fail("a column type")
        base = self.advance().text.lower()
        if base == "national":
            base = self.expect("CHAR", "CHARACTER", "VARCHAR").lower()
        if base == "long":  # LONG VARCHAR / LONG VARBINARY / LONG: MEDIUMTEXT / MEDIUMBLOB
            base = "mediumblob" if self.accept("VARBINARY") else "mediumtext"
            self.accept("VARCHAR")
        if base == "double":
            self.accept("PRECISION")
        if base in ("char", "character") and self.accept("VARYING"):
            base = "varchar"
        base = _TYPE_SYNONYMS.get(base, base)
        arguments: list[str] = []
        if self.is_punct("("):
            self.advance()
            while not self.is_punct(")"):
                token = self.advance()
                if token.kind == STRING:
                    arguments.append(_quote_element(token.text))
                elif token.kind == NUMBER:
                    arguments.append(token.text)
                elif token.kind == WORD and token.text.startswith("_") and base in _ENUM_TYPES:
                    continue  # a charset introducer before a member: _utf8mb4'a'
                elif not (token.kind == PUNCT and token.text == ","):
                    raise DdlParseError(
                        self.query, token.position, "a type argument", token.describe()
                    )
            self.advance()
        modifiers = []
        while word := self.accept("UNSIGNED", "SIGNED", "ZEROFILL"):
            if word != "SIGNED":
                modifiers.append(word.lower())
        return _type_text(base, arguments, modifiers)

    def _column_attributes(self, column: _Column) -> None:
        while not self.at_clause_end() and not self.is_punct(")"):
            if self.is_word("FIRST", "AFTER"):  # ALTER TABLE's column position follows
                return
            if self.accept("NOT"):
                self.expect("NULL")
                column.nullable = False
            elif self.accept("NULL"):
                column.nullable = True
            elif self.accept("PRIMARY"):
                self.expect("KEY")
                column.primary_key = True
            elif self.accept("KEY"):  # a bare KEY on a column means PRIMARY KEY
                column.primary_key = True
            elif self.accept("UNIQUE"):
                self.accept("KEY", "INDEX")
                column.unique = True
            elif self.accept("CHARACTER", "CHARSET"):
                self.accept("SET")
                self.accept_punct("=")
                column.binary_charset = self.identifier("a character set").lower() == "binary"
            elif self.accept("COLLATE"):
                self.accept_punct("=")
                self.identifier("a collation")
            elif self.accept("DEFAULT"):
                column.default = self._default_value()
            elif self.accept_sequence("ON", "UPDATE"):
                self._default_value()
            elif self.accept("COMMENT"):
                self.accept_punct("=")
                self.advance()
            elif self.accept("GENERATED"):
                self.expect("ALWAYS")
            elif self.accept("AS"):
                self.skip_balanced()
                column.generated = True
            elif self.accept("CHECK"):
                self.skip_balanced()
            elif self.accept("REFERENCES"):
                self.table_name()
                if self.is_punct("("):
                    self.skip_balanced()
                self.skip_to_clause_end()
            elif self.accept("AUTO_RANDOM", "AUTO_INCREMENT"):
                if self.is_punct("("):
                    self.skip_balanced()
            elif self.accept("SERIAL"):
                self.accept_sequence("DEFAULT", "VALUE")
            elif self.accept("COLUMN_FORMAT", "STORAGE") or self.is_word(*_COLUMN_FLAG_WORDS):
                self.advance()
            elif self.accept("CONSTRAINT"):
                if not self.is_word("CHECK"):
                    self.identifier("a constraint name")
            elif self.accept("BINARY"):  # CHAR(10) BINARY: a binary collation, still text
                pass
            else:
                raise self.fail("a column attribute (NOT NULL, DEFAULT, COMMENT, ...)")

    def _default_value(self) -> DefaultValue:
        """A DEFAULT or ON UPDATE value: a literal, a function call or an expression in ()."""
        sign = ""
        while self.is_punct("-") or self.is_punct("+"):
            if self.advance().text == "-":
                sign = "" if sign else "-"
        if self.is_punct("("):
            self.skip_balanced()
            return DefaultValue(EXPRESSION)
        token = self.advance()
        word = token.text.lower() if token.kind == WORD else None
        if token.kind == END:
            raise DdlParseError(self.query, token.position, "a value", token.describe())
        if token.kind == STRING:
            return DefaultValue(LITERAL, token.text)
        if token.kind == NUMBER:
            return DefaultValue(LITERAL, sign + token.text)
        if word is None:
            return DefaultValue(EXPRESSION)
        if self.token.kind == STRING and (
            word.startswith("_") or word in ("n", "date", "time", "timestamp")
        ):
            return DefaultValue(LITERAL, self.advance().text)  # _utf8mb4'a', N'a', DATE '...'
        if self.token.kind == STRING and word in ("b", "x"):
            return DefaultValue(LITERAL, binary=_bytes_literal(word, self.advance().text))
        if re.fullmatch(r"0x[0-9a-f]+|0b[01]+", word):
            return DefaultValue(LITERAL, binary=_bytes_literal(word[1], word[2:]))
        if word == "null":
            return DefaultValue(NULL_DEFAULT)
        if word in ("true", "false"):
            return DefaultValue(LITERAL, "1" if word == "true" else "0")
        if self.is_punct("("):
            self.skip_balanced()  # CURRENT_TIMESTAMP(3), NOW(), UUID()
        return DefaultValue(NOW if word in _NOW_WORDS else EXPRESSION)

    def _table_options(self) -> Partitioning | None:
        """Table options after CREATE TABLE's ')' (ignored) and the partitioning, if any."""
        partitioning = None
        while self.token.kind != END and not self.is_punct(";"):
            if self.is_word("PARTITION") and self.is_word("BY", token=self.peek()):
                self.at += 2
                partitioning = self._partition_by()
            elif self.is_word("AS", "SELECT"):
                raise self.fail("table options (CREATE TABLE ... SELECT is not supported)")
            elif self.is_punct("("):
                self.skip_balanced()
            else:
                self.advance()  # ENGINE=InnoDB, COMMENT='x', TTL=..., SHARD_ROW_ID_BITS=4, ...
        return partitioning

    # --- partitioning --------------------------------------------------------------------

    def _partition_by(self) -> Partitioning:
        self.accept("LINEAR")
        kind = self.expect("RANGE", "LIST", "HASH", "KEY").lower()
        use_columns = False
        if kind == "key":
            if self.accept("ALGORITHM"):
                self.expect_punct("=")
                self.advance()
            expression = self.skip_balanced()
            columns = tuple(_bare_columns(expression) or ())
        else:
            use_columns = self.accept("COLUMNS") is not None
            expression = self.skip_balanced()
            bare = _bare_columns(expression)
            columns = tuple(bare) if bare and (use_columns or len(bare) == 1) else ()
        count = None
        if self.accept("PARTITIONS"):
            count = int(self.advance().text)
        if self.accept("SUBPARTITION"):
            raise self.fail("no SUBPARTITION (subpartitions are not supported by TiDB)")
        definitions: tuple[PartitionDef, ...] = ()
        if self.is_punct("("):
            definitions = self._partition_definitions()
        return Partitioning(kind, columns, expression, definitions, count, use_columns)

    def _partition_definitions(self) -> tuple[PartitionDef, ...]:
        self.expect_punct("(")
        definitions = []
        while True:
            self.expect("PARTITION")
            name = self.identifier("a partition name")
            less_than = values_in = None
            if self.accept("VALUES"):
                if self.accept("LESS"):
                    self.expect("THAN")
                    if self.accept("MAXVALUE"):
                        less_than = ("MAXVALUE",)
                    else:
                        less_than = tuple(self._value_list())
                else:
                    self.expect("IN")
                    values_in = tuple(self._list_values())
            while not self.is_punct(",") and not self.is_punct(")"):
                if self.is_punct("("):
                    self.skip_balanced()
                else:
                    self.advance()  # partition options (COMMENT, placement, ...)
                if self.token.kind == END:
                    raise self.fail("',' or ')' after a partition definition")
            definitions.append(PartitionDef(name, less_than, values_in))
            if self.accept_punct(","):
                continue
            self.expect_punct(")")
            return tuple(definitions)

    def _value_list(self) -> list[str]:
        """``(v, ...)``: each value as a literal text, or the raw text of an expression."""
        text = self.skip_balanced()
        return [part.strip() for part in _split_top_level(text)]

    def _list_values(self) -> list[tuple[str, ...]]:
        text = self.skip_balanced()
        values = []
        for part in _split_top_level(text):
            part = part.strip()
            if part.startswith("(") and part.endswith(")"):
                values.append(tuple(p.strip() for p in _split_top_level(part[1:-1])))
            else:
                values.append((part,))
        return values

    # --- ALTER / DROP / RENAME / TRUNCATE ------------------------------------------------

    def _alter(self) -> list[Action]:
        self.accept("ONLINE", "OFFLINE")
        self.accept("IGNORE")
        if not self.accept("TABLE"):
            word = self.accept(*_ALTER_NOOPS)
            if word is None:
                raise self.fail("TABLE, DATABASE or another ALTER target")
            self.skip_rest()
            return [NoOp(None, f"ALTER {word}")]
        table = self.table_name()
        actions: list[Action] = []
        while self.token.kind != END and not self.is_punct(";"):
            actions.extend(self._alter_specification(table))
            if not self.accept_punct(","):
                break
        return actions or [NoOp(table, "ALTER TABLE without changes")]

    def _alter_specification(self, table: TableName) -> list[Action]:
        if self.is_word("PARTITION") and self.is_word("BY", token=self.peek()):
            self.at += 2
            return [Repartition(table, partitioning=self._partition_by())]
        verb = self.token.text.upper() if self.token.kind == WORD else ""
        handler = getattr(self, f"_alter_{verb.lower()}", None) if verb in _ALTER_VERBS else None
        if handler is not None:
            self.advance()
            return handler(table)
        if verb in _ALTER_OPTIONS:
            self.skip_to_clause_end()
            return [NoOp(table, f"table option {verb}")]
        raise self.fail(
            "an ALTER TABLE clause (ADD, DROP, MODIFY, CHANGE, RENAME, a partition clause or a "
            "table option)"
        )

    def _constraint_name(self) -> None:
        """``CONSTRAINT [symbol]`` before a key: the symbol is optional."""
        if self.accept("CONSTRAINT") and not self.is_word("PRIMARY", "UNIQUE", "FOREIGN", "CHECK"):
            self.identifier("a constraint name")

    def _alter_add(self, table: TableName) -> list[Action]:
        self._constraint_name()
        if self.accept("PRIMARY"):
            self.expect("KEY")
            return [SetPrimaryKey(table, columns=self._index_rest())]
        if self.accept("UNIQUE"):
            self.accept("KEY", "INDEX")
            return [AddUniqueKey(table, columns=self._index_rest())]
        if self.is_word("INDEX", "KEY", "FULLTEXT", "SPATIAL", "FOREIGN", "CHECK", "VECTOR"):
            word = self.advance().text.upper()
            self.skip_to_clause_end()
            return [NoOp(table, f"ADD {word}")]
        if self.accept("PARTITION"):
            if self.accept("PARTITIONS"):
                return [AddPartitions(table, count=int(self.advance().text))]
            return [AddPartitions(table, definitions=self._partition_definitions())]
        self.accept("COLUMN")
        self.accept_sequence("IF", "NOT", "EXISTS")
        if self.accept_punct("("):
            columns = [self._column_definition()]
            while self.accept_punct(","):
                columns.append(self._column_definition())
            self.expect_punct(")")
        else:
            columns = [self._column_definition()]
            self._column_position()
        return [AddColumns(table, columns=tuple(c.build() for c in columns))]

    def _column_position(self) -> None:
        if self.accept("FIRST"):
            return
        if self.accept("AFTER"):
            self.identifier("a column name")

    def _alter_drop(self, table: TableName) -> list[Action]:
        if self.accept("PRIMARY"):
            self.expect("KEY")
            return [SetPrimaryKey(table, columns=None)]
        if self.is_word("INDEX", "KEY", "FOREIGN", "CHECK", "CONSTRAINT"):
            word = self.advance().text.upper()
            self.accept("KEY")
            self.accept_sequence("IF", "EXISTS")
            self.identifier()
            return [NoOp(table, f"DROP {word}")]
        if self.accept("PARTITION"):
            self.accept_sequence("IF", "EXISTS")
            return [DropPartitions(table, names=self.name_list())]
        self.accept("COLUMN")
        self.accept_sequence("IF", "EXISTS")
        name = self.identifier("a column name")
        self.accept("RESTRICT", "CASCADE")
        return [DropColumns(table, names=(name,))]

    def _alter_modify(self, table: TableName) -> list[Action]:
        self.accept("COLUMN")
        self.accept_sequence("IF", "EXISTS")
        column = self._column_definition()
        self._column_position()
        return [ModifyColumn(table, old_name=column.name, column=column.build())]

    def _alter_change(self, table: TableName) -> list[Action]:
        self.accept("COLUMN")
        self.accept_sequence("IF", "EXISTS")
        old_name = self.identifier("a column name")
        column = self._column_definition()
        self._column_position()
        return [ModifyColumn(table, old_name=old_name, column=column.build())]

    def _alter_rename(self, table: TableName) -> list[Action]:
        if self.accept("COLUMN"):
            old = self.identifier("a column name")
            self.expect("TO")
            return [RenameColumn(table, old_name=old, new_name=self.identifier("a column name"))]
        if self.accept("INDEX", "KEY"):
            self.identifier()
            self.expect("TO")
            self.identifier()
            return [NoOp(table, "RENAME INDEX")]
        self.accept("TO", "AS")
        return [RenameTable(table, new=self.table_name())]

    def _alter_alter(self, table: TableName) -> list[Action]:
        word = self.accept("INDEX", "CHECK", "CONSTRAINT") or "COLUMN"
        self.skip_to_clause_end()
        return [NoOp(table, f"ALTER {word}")]

    def _alter_truncate(self, table: TableName) -> list[Action]:
        self.expect("PARTITION")
        if self.accept("ALL"):
            return [TruncatePartitions(table, names=())]
        return [TruncatePartitions(table, names=self.name_list())]

    def _alter_reorganize(self, table: TableName) -> list[Action]:
        self.expect("PARTITION")
        names = self.name_list()
        self.expect("INTO")
        return [ReorganizePartitions(table, names=names, definitions=self._partition_definitions())]

    def _alter_exchange(self, table: TableName) -> list[Action]:
        self.expect("PARTITION")
        name = self.identifier("a partition name")
        self.expect("WITH")
        self.expect("TABLE")
        other = self.table_name()
        if self.accept("WITH", "WITHOUT"):
            self.expect("VALIDATION")
        return [ExchangePartition(table, name=name, other=other)]

    def _alter_coalesce(self, table: TableName) -> list[Action]:
        self.expect("PARTITION")
        return [Repartition(table, partitioning=None, coalesce=int(self.advance().text))]

    def _alter_remove(self, table: TableName) -> list[Action]:
        if self.accept("TTL"):
            return [NoOp(table, "REMOVE TTL")]
        self.expect("PARTITIONING")
        return [Repartition(table, partitioning=None)]

    def _drop(self) -> list[Action]:
        if self.accept("TEMPORARY"):
            self.skip_rest()
            return [NoOp(None, "DROP TEMPORARY TABLE (not replicated)")]
        if self.accept("TABLE", "TABLES"):
            self.accept_sequence("IF", "EXISTS")
            tables = [self.table_name()]
            while self.accept_punct(","):
                tables.append(self.table_name())
            self.accept("RESTRICT", "CASCADE")
            return [DropTable(table) for table in tables]
        if self.accept("DATABASE", "SCHEMA"):
            self.accept_sequence("IF", "EXISTS")
            return [DropSchema(None, schema=self.identifier("a database name"))]
        word = self.accept(*_DROP_NOOPS)
        if word is None:
            raise self.fail("TABLE, DATABASE, INDEX, VIEW or another DROP target")
        self.skip_rest()
        return [NoOp(None, f"DROP {word}")]

    def _rename(self) -> list[Action]:
        self.expect("TABLE", "TABLES")
        actions: list[Action] = []
        while True:
            old = self.table_name()
            self.expect("TO")
            actions.append(RenameTable(old, new=self.table_name()))
            if not self.accept_punct(","):
                return actions

    def _truncate(self) -> list[Action]:
        self.accept("TABLE")
        return [TruncateTable(self.table_name())]


_NOOP_VERBS = ("GRANT", "REVOKE", "SET", "FLUSH", "ANALYZE", "USE")
_CREATE_NOOPS = (
    "INDEX", "UNIQUE", "FULLTEXT", "SPATIAL", "VECTOR", "VIEW", "ALGORITHM", "DEFINER", "SQL",
    "SEQUENCE", "PLACEMENT", "RESOURCE", "USER", "ROLE", "BINDING", "SESSION",
)  # fmt: skip
_ALTER_NOOPS = (
    "DATABASE", "SCHEMA", "VIEW", "SEQUENCE", "PLACEMENT", "RESOURCE", "USER", "INSTANCE",
    "ALGORITHM", "DEFINER", "SQL",
)  # fmt: skip
_DROP_NOOPS = (
    "INDEX", "VIEW", "SEQUENCE", "PLACEMENT", "RESOURCE", "USER", "ROLE", "BINDING", "STATS",
)  # fmt: skip
_COLUMN_FLAG_WORDS = (
    "VISIBLE", "INVISIBLE", "VIRTUAL", "STORED", "PERSISTENT", "CLUSTERED", "NONCLUSTERED",
)  # fmt: skip
_ALTER_VERBS = frozenset(
    {"ADD", "DROP", "MODIFY", "CHANGE", "RENAME", "ALTER", "TRUNCATE", "REORGANIZE", "EXCHANGE",
     "COALESCE", "REMOVE"}
)  # fmt: skip
# ALTER TABLE clauses that change neither columns, rows nor the table's name.
_ALTER_OPTIONS = frozenset(
    {"ENGINE", "AUTO_INCREMENT", "AUTO_ID_CACHE", "AUTO_RANDOM_BASE", "AVG_ROW_LENGTH",
     "DEFAULT", "CHARACTER", "CHARSET", "COLLATE", "CHECKSUM", "COMMENT", "COMPRESSION",
     "CONNECTION", "DATA", "INDEX", "DELAY_KEY_WRITE", "ENCRYPTION", "INSERT_METHOD",
     "KEY_BLOCK_SIZE", "MAX_ROWS", "MIN_ROWS", "PACK_KEYS", "PASSWORD", "ROW_FORMAT",
     "STATS_AUTO_RECALC", "STATS_PERSISTENT", "STATS_SAMPLE_PAGES", "STATS_BUCKETS",
     "STATS_TOPN", "STATS_COL_CHOICE", "STATS_COL_LIST", "STATS_SAMPLE_RATE", "TABLESPACE",
     "UNION", "SHARD_ROW_ID_BITS", "PRE_SPLIT_REGIONS", "TTL", "TTL_ENABLE", "TTL_JOB_INTERVAL",
     "PLACEMENT", "ATTRIBUTES", "SECONDARY_ENGINE", "ALGORITHM", "LOCK", "FORCE", "ORDER",
     "WITH", "WITHOUT", "ENABLE", "DISABLE", "DISCARD", "IMPORT", "OPTIMIZE", "REBUILD",
     "REPAIR", "CHECK", "ANALYZE", "CACHE", "NOCACHE", "COMPACT", "SET", "CONVERT"}
)  # fmt: skip


def _type_text(base: str, arguments: list[str], modifiers: list[str]) -> str:
    """The type in ``mysql.parse_column_type`` form, with MySQL's defaults filled in."""
    if base in ("bool", "boolean"):
        return "tinyint(1)"
    if base == "serial":
        return "bigint(20) unsigned"
    if base == "float" and len(arguments) == 1:
        # FLOAT(p): a FLOAT up to 24 bits of precision, a DOUBLE above.
        base = "double" if int(arguments[0]) > 24 else "float"
        arguments = []
    if base == "decimal":  # DECIMAL is DECIMAL(10,0), DECIMAL(p) is DECIMAL(p,0)
        arguments = [*arguments, "10", "0"][:2] if not arguments else [*arguments, "0"][:2]
    text = base if not arguments else f"{base}({','.join(arguments)})"
    return " ".join([text, *modifiers])


_BARE_COLUMN = re.compile(r"^\s*`?([A-Za-z0-9_$\u0080-\uffff]+)`?\s*$")


def _bare_columns(expression: str) -> list[str] | None:
    """``a``, `` `a`, `b` ``: the plain column names of a partitioning expression, else None."""
    names = []
    for part in _split_top_level(expression):
        match = _BARE_COLUMN.match(part)
        if match is None:
            return None
        names.append(match.group(1))
    return names or None


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside parentheses and quotes."""
    parts, depth, start, quote = [], 0, 0, None
    i = 0
    while i < len(text):
        char = text[i]
        if quote:
            if char == "\\":
                i += 1
            elif char == quote:
                quote = None
        elif char in "'\"`":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return [part for part in parts if part.strip()]
