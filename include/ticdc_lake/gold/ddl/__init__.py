"""A small parser of the DDL queries TiCDC sends, down to what gold needs from them.

TiCDC forwards the query text of every DDL job (PROTOCOLS.md §1.4); gold needs the column
definitions of CREATE TABLE (types, nullability, keys, partitioning) and what a later DDL does
to a table's columns, rows or name. ``parse_ddl(query, default_schema)`` returns one action per
clause; anything gold can ignore (indexes, comments, options, views, users, placement) is a
``NoOp`` that names what it was. A query it cannot read raises ``DdlParseError`` with the
character position, what was expected and what was found.

Understood: CREATE TABLE (columns with types and attributes, PRIMARY/UNIQUE keys inline or as
constraints, LIKE, table options, PARTITION BY RANGE/LIST [COLUMNS]/HASH/KEY), ALTER TABLE
(ADD/DROP/MODIFY/CHANGE/RENAME COLUMN, ADD/DROP PRIMARY KEY and UNIQUE keys, RENAME TO,
ADD/DROP/TRUNCATE/REORGANIZE/EXCHANGE/COALESCE PARTITION, PARTITION BY, REMOVE PARTITIONING,
options), RENAME TABLE, TRUNCATE TABLE, DROP TABLE, DROP DATABASE, and TiDB's executable
comments (``/*T![clustered_index] CLUSTERED */``).

The modules: ``actions`` (what a query does), ``tokens`` and ``cursor`` (reading a query),
``parse`` (by its first word, to a statement's grammar: ``create``, ``alter``, ``drop``,
``rename``), and the grammar those share: ``columns``, ``column_types``, ``keys``, ``partitions``.
"""

from __future__ import annotations

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
from ticdc_lake.gold.ddl.parse import SHORTEST_COLUMN_TEXT, defined_columns, parse_ddl
from ticdc_lake.gold.ddl.tokens import Token, tokenize

__all__ = [
    "EXPRESSION",
    "LITERAL",
    "NOW",
    "NULL_DEFAULT",
    "SHORTEST_COLUMN_TEXT",
    "Action",
    "AddColumns",
    "AddPartitions",
    "AddUniqueKey",
    "ColumnDef",
    "CreateTable",
    "DefaultValue",
    "DropColumns",
    "DropPartitions",
    "DropSchema",
    "DropTable",
    "ExchangePartition",
    "ModifyColumn",
    "NoOp",
    "PartitionDef",
    "Partitioning",
    "RenameColumn",
    "RenameTable",
    "ReorganizePartitions",
    "Repartition",
    "SetPrimaryKey",
    "TableName",
    "Token",
    "TruncatePartitions",
    "TruncateTable",
    "defined_columns",
    "parse_ddl",
    "tokenize",
]
