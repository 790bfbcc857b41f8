"""The DDL parser: the generator's DDLs, the common real ones, and clear errors for the rest."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ticdc_lake.gold import ddl
from ticdc_lake.gold.ddl import defined_columns
from ticdc_lake.gold.exceptions import DdlParseError
from ticdc_lake.limits import LimitExceededError, Limits
from ticdc_lake.sample.cases import COLUMN_TYPES
from ticdc_lake.sample.workload import generate_workload
from ticdc_lake.sample.workload.tables import PRIMARY, canonical_tables
from ticdc_lake.silver.decode import check_ddl_widths
from ticdc_lake.silver.events import DdlEvent


def one(query: str, schema: str = "db") -> ddl.Action:
    actions = ddl.parse_ddl(query, schema)
    assert len(actions) == 1, actions
    return actions[0]


def T(name: str, schema: str = "db") -> ddl.TableName:  # reads like a constructor
    return ddl.TableName(schema, name)


@pytest.mark.parametrize("table", canonical_tables(), ids=lambda t: t.name)
def test_generator_create_table_gives_every_column_key_and_partitioning(table):
    action = one(table.create_sql(), "other")
    assert isinstance(action, ddl.CreateTable)
    assert action.table == T(table.name, table.schema)
    assert [(c.name, c.type_text, c.nullable) for c in action.columns] == [
        (c.name, c.mysql_type, c.nullable) for c in table.columns
    ]
    if table.key_kind == PRIMARY:
        assert action.primary_key == table.handle
    else:
        assert action.primary_key is None and action.unique_keys == (table.handle,)
    if table.partition_ids:
        assert action.partitioning.kind == "hash"
        assert action.partitioning.columns == (table.handle[0],)
        assert action.partitioning.names == tuple(f"p{i}" for i in range(4))
    else:
        assert action.partitioning is None


def test_every_generated_ddl_parses():
    workload = generate_workload(seed=5, transactions=1500)
    kinds = {type(one(e.query, e.schema)).__name__ for e in workload.ddl_events}
    assert kinds == {"CreateTable", "AddColumns", "DropColumns", "TruncateTable"}


def test_tidb_show_create_table_output():
    query = (
        "CREATE TABLE `t1` (\n"
        "  `id` bigint(20) NOT NULL /*T![auto_rand] AUTO_RANDOM(5) */,\n"
        "  `name` varchar(32) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT 'a''b' "
        "COMMENT 'who',\n"
        "  `amount` decimal DEFAULT NULL,\n"
        "  `flag` bool NOT NULL DEFAULT '0',\n"
        "  `ts` timestamp(3) NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),\n"
        "  `raw` varchar(8) CHARACTER SET binary,\n"
        "  `bits` bit(3) DEFAULT b'101',\n"
        "  `doc` json DEFAULT (json_object()),\n"
        "  `g` int GENERATED ALWAYS AS (`id` + 1) VIRTUAL,\n"
        "  PRIMARY KEY (`id`) /*T![clustered_index] CLUSTERED */,\n"
        "  UNIQUE KEY `uk_name` (`name`(10)),\n"
        "  KEY `idx_ts` (`ts` DESC),\n"
        "  CONSTRAINT `fk` FOREIGN KEY (`id`) REFERENCES `t2` (`id`) ON DELETE CASCADE\n"
        ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin "
        "/*T![auto_rand_base] AUTO_RANDOM_BASE=39456621 */ COMMENT='x'"
    )
    action = one(query)
    assert action.table == T("t1")
    assert [(c.name, c.type_text) for c in action.columns] == [
        ("id", "bigint(20)"),
        ("name", "varchar(32)"),
        ("amount", "decimal(10,0)"),
        ("flag", "tinyint(1)"),
        ("ts", "timestamp(3)"),
        ("raw", "varchar(8)"),
        ("bits", "bit(3)"),
        ("doc", "json"),
        ("g", "int"),
    ]
    columns = {c.name: c for c in action.columns}
    assert not columns["id"].nullable and not columns["flag"].nullable
    assert columns["ts"].nullable and columns["raw"].binary_charset
    assert columns["g"].generated
    assert action.primary_key == ("id",)
    assert action.unique_keys == (("name",),)


@pytest.mark.parametrize(
    ("text", "type_text"),
    [
        ("INTEGER UNSIGNED", "int unsigned"),
        ("int(10) unsigned zerofill", "int(10) unsigned zerofill"),
        ("BOOLEAN", "tinyint(1)"),
        ("DEC(12)", "decimal(12,0)"),
        ("NUMERIC(12, 4)", "decimal(12,4)"),
        ("FLOAT(30)", "double"),
        ("FLOAT(7)", "float"),
        ("DOUBLE PRECISION", "double"),
        ("REAL", "double"),
        ("NATIONAL VARCHAR(5)", "varchar(5)"),
        ("CHARACTER VARYING(5)", "varchar(5)"),
        ("LONG VARBINARY", "mediumblob"),
        ("SERIAL", "bigint(20) unsigned"),
        ("ENUM('a', 'it''s', 'b\\\\c')", "enum('a','it''s','b\\\\c')"),
        ("SET(_utf8mb4'x', 'y')", "set('x','y')"),
        ("VECTOR(3)", "vector(3)"),
    ],
)
def test_column_types_as_mysql_stores_them(text, type_text):
    action = one(f"ALTER TABLE t ADD COLUMN c {text}")
    assert action.columns[0].type_text == type_text


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (
            "ALTER TABLE `s`.`t` ADD COLUMN `a` int NOT NULL DEFAULT 1 AFTER `b`",
            [
                ddl.AddColumns(
                    T("t", "s"),
                    (
                        ddl.ColumnDef(
                            "a", "int", nullable=False, default=ddl.DefaultValue("literal", "1")
                        ),
                    ),
                )
            ],
        ),
        (
            "alter table t add (a int, b text)",
            [ddl.AddColumns(T("t"), (ddl.ColumnDef("a", "int"), ddl.ColumnDef("b", "text")))],
        ),
        (
            "ALTER TABLE t ADD a int FIRST, ADD COLUMN IF NOT EXISTS b int",
            [
                ddl.AddColumns(T("t"), (ddl.ColumnDef("a", "int"),)),
                ddl.AddColumns(T("t"), (ddl.ColumnDef("b", "int"),)),
            ],
        ),
        (
            "ALTER TABLE t DROP COLUMN a, DROP b",
            [ddl.DropColumns(T("t"), ("a",)), ddl.DropColumns(T("t"), ("b",))],
        ),
        (
            "ALTER TABLE t MODIFY COLUMN a bigint unsigned NOT NULL COMMENT 'x' AFTER b",
            [ddl.ModifyColumn(T("t"), "a", ddl.ColumnDef("a", "bigint unsigned", nullable=False))],
        ),
        (
            "ALTER TABLE t CHANGE a b varchar(10) CHARACTER SET binary FIRST",
            [ddl.ModifyColumn(T("t"), "a", ddl.ColumnDef("b", "varchar(10)", binary_charset=True))],
        ),
        ("ALTER TABLE t RENAME COLUMN a TO b", [ddl.RenameColumn(T("t"), "a", "b")]),
        ("ALTER TABLE t RENAME TO u2.t2", [ddl.RenameTable(T("t"), T("t2", "u2"))]),
        ("ALTER TABLE t RENAME AS t2", [ddl.RenameTable(T("t"), T("t2"))]),
        ("ALTER TABLE t ADD PRIMARY KEY (a, b)", [ddl.SetPrimaryKey(T("t"), ("a", "b"))]),
        ("ALTER TABLE t DROP PRIMARY KEY", [ddl.SetPrimaryKey(T("t"), None)]),
        (
            "ALTER TABLE t ADD CONSTRAINT uk UNIQUE KEY (c)",
            [ddl.AddUniqueKey(T("t"), ("c",))],
        ),
        (
            "RENAME TABLE a TO b, x.c TO x.d",
            [ddl.RenameTable(T("a"), T("b")), ddl.RenameTable(T("c", "x"), T("d", "x"))],
        ),
        ("TRUNCATE TABLE `s`.`t`", [ddl.TruncateTable(T("t", "s"))]),
        ("truncate t", [ddl.TruncateTable(T("t"))]),
        ("DROP TABLE IF EXISTS a, s.b", [ddl.DropTable(T("a")), ddl.DropTable(T("b", "s"))]),
        ("DROP DATABASE IF EXISTS `shop`", [ddl.DropSchema(None, "shop")]),
        ("CREATE TABLE b LIKE a", [ddl.CreateTable(T("b"), like=T("a"))]),
        (
            "CREATE TABLE IF NOT EXISTS b (LIKE s.a)",
            [ddl.CreateTable(T("b"), like=T("a", "s"), if_not_exists=True)],
        ),
    ],
)
def test_alter_rename_truncate_drop(query, expected):
    assert ddl.parse_ddl(query, "db") == expected


def test_partition_ddls():
    create = one(
        "CREATE TABLE p (id int, d date) PARTITION BY RANGE (id) ("
        "PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN (20) COMMENT 'x', "
        "PARTITION pmax VALUES LESS THAN MAXVALUE)"
    )
    partitioning = create.partitioning
    assert (partitioning.kind, partitioning.columns) == ("range", ("id",))
    assert [(p.name, p.less_than) for p in partitioning.definitions] == [
        ("p0", ("10",)),
        ("p1", ("20",)),
        ("pmax", ("MAXVALUE",)),
    ]
    listed = one(
        "CREATE TABLE l (c varchar(3)) PARTITION BY LIST COLUMNS (c) "
        "(PARTITION a VALUES IN ('x', 'y'), PARTITION b VALUES IN (NULL))"
    ).partitioning
    assert listed.use_columns and listed.definitions[0].values_in == (("'x'",), ("'y'",))
    by_expression = one(
        "CREATE TABLE e (d date) PARTITION BY RANGE (YEAR(d)) (PARTITION p VALUES LESS THAN (2000))"
    ).partitioning
    assert by_expression.columns == () and by_expression.expression == "YEAR(d)"
    assert one("CREATE TABLE k (id int) PARTITION BY KEY() PARTITIONS 3").partitioning.names == (
        "p0",
        "p1",
        "p2",
    )
    table = T("t")
    assert ddl.parse_ddl(
        "ALTER TABLE t ADD PARTITION (PARTITION p2 VALUES LESS THAN (30))", "db"
    ) == [ddl.AddPartitions(table, (ddl.PartitionDef("p2", ("30",)),))]
    assert ddl.parse_ddl("ALTER TABLE t ADD PARTITION PARTITIONS 2", "db") == [
        ddl.AddPartitions(table, count=2)
    ]
    assert ddl.parse_ddl("ALTER TABLE t DROP PARTITION p0, p1", "db") == [
        ddl.DropPartitions(table, ("p0", "p1"))
    ]
    assert ddl.parse_ddl("ALTER TABLE t TRUNCATE PARTITION ALL", "db") == [
        ddl.TruncatePartitions(table, ())
    ]
    reorganized = one(
        "ALTER TABLE t REORGANIZE PARTITION p0, p1 INTO (PARTITION p01 VALUES LESS THAN (20))"
    )
    assert reorganized.names == ("p0", "p1") and reorganized.definitions[0].name == "p01"
    assert one("ALTER TABLE t EXCHANGE PARTITION p0 WITH TABLE u WITHOUT VALIDATION") == (
        ddl.ExchangePartition(table, "p0", T("u"))
    )
    assert one("ALTER TABLE t REMOVE PARTITIONING") == ddl.Repartition(table, None)
    assert one("ALTER TABLE t COALESCE PARTITION 2") == ddl.Repartition(table, None, 2)
    assert one("ALTER TABLE t PARTITION BY HASH (id) PARTITIONS 8").partitioning.count == 8


@pytest.mark.parametrize(
    "query",
    [
        "CREATE INDEX i ON t (a)",
        "CREATE UNIQUE INDEX i ON t (a)",
        "ALTER TABLE t ADD INDEX i (a), ALTER INDEX i INVISIBLE",
        "ALTER TABLE t DROP INDEX i",
        "ALTER TABLE t SET TIFLASH REPLICA 1 LOCATION LABELS 'zone'",
        "ALTER TABLE t COMMENT = 'x', ENGINE = InnoDB, AUTO_INCREMENT = 10",
        "ALTER TABLE t ALTER COLUMN a SET DEFAULT 3",
        "ALTER TABLE t RENAME INDEX a TO b",
        "ALTER TABLE t TTL = `created_at` + INTERVAL 1 DAY",
        "CREATE DATABASE IF NOT EXISTS shop",
        "ALTER DATABASE shop CHARACTER SET utf8mb4",
        "CREATE OR REPLACE VIEW v AS SELECT 1",
        "DROP VIEW v",
        "CREATE SEQUENCE s",
        "-- a comment\nCREATE INDEX i ON t (a); ",
    ],
)
def test_statements_gold_ignores_are_no_ops(query):
    assert all(isinstance(action, ddl.NoOp) for action in ddl.parse_ddl(query, "db"))


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("CREATE TABLE t (a int) AS SELECT 1", "CREATE TABLE ... SELECT is not supported"),
        ("CREATE TABLE t SELECT 1", "'(' and column definitions"),
        ("ALTER TABLE t FROB a", "an ALTER TABLE clause"),
        ("ALTER TABLE t ADD COLUMN a int WHATEVER", "a column attribute"),
        ("ALTER TABLE t ADD COLUMN a nosuchtype", "a column type"),
        ("CREATE TABLE t (a varchar(10) DEFAULT 'x", "a closing '"),
        ("RECOVER TABLE t", "CREATE or ALTER"),
        ("", "CREATE or ALTER"),
        ("ALTER TABLE t COALESCE PARTITION", "a number of partitions"),
        ("ALTER TABLE t ADD PARTITION PARTITIONS", "a number of partitions"),
        ("ALTER TABLE t PARTITION BY HASH (id) PARTITIONS x", "a number of partitions"),
    ],
)
def test_unreadable_ddl_says_where_and_what_was_expected(query, expected):
    with pytest.raises(DdlParseError) as error:
        ddl.parse_ddl(query, "db")
    assert expected in str(error.value)
    assert error.value.query == query
    assert 0 <= error.value.position <= len(query)


_names = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=8)


@given(
    table=_names,
    columns=st.lists(
        st.tuples(_names, st.sampled_from(COLUMN_TYPES), st.booleans()),
        min_size=1,
        max_size=6,
        unique_by=lambda c: c[0].lower(),
    ),
)
def test_any_quoted_names_and_canonical_types_round_trip(table, columns):
    def quote(name: str) -> str:
        return "`" + name.replace("`", "``") + "`"

    definitions = ", ".join(
        f"{quote(name)} {column_type.mysql_type} {'NULL' if nullable else 'NOT NULL'}"
        for name, column_type, nullable in columns
    )
    key = quote(columns[0][0])
    action = one(f"CREATE TABLE {quote('s')}.{quote(table)} ({definitions}, PRIMARY KEY ({key}))")
    assert action.table == ddl.TableName("s", table)
    assert [(c.name, c.type_text, c.nullable) for c in action.columns] == [
        (name, column_type.mysql_type, nullable and i > 0)
        for i, (name, column_type, nullable) in enumerate(columns)
    ]
    assert action.primary_key == (columns[0][0],)


def _create(columns: int) -> str:
    return "CREATE TABLE s.t (" + ", ".join(f"c{i} int" for i in range(columns)) + ")"


@pytest.mark.parametrize(
    "query",
    [_create(5000), "ALTER TABLE s.t " + ", ".join(f"ADD COLUMN c{i} int" for i in range(5000))],
)
def test_a_ddl_defining_more_columns_than_the_limit_goes_to_quarantine(query):
    """Checked as decode reads the DDL, so no such table reaches gold (TiDB allows 4096)."""
    event = DdlEvent(1, "s", "t", query, None, "topic", 0, 7)
    with pytest.raises(LimitExceededError, match=r"\(5,000\) exceeds limits.max-table-columns"):
        check_ddl_widths([event], Limits())
    check_ddl_widths([event], Limits(max_table_columns=5000))  # raised by the config
    assert defined_columns(_create(4096), "s", 4096) == 4096
    assert defined_columns(_create(100), "s", 4096) == 0  # too short to pass it: not parsed


@pytest.mark.parametrize(
    "query",
    [
        "ALTER TABLE t COALESCE PARTITION 4",
        "ALTER TABLE t ADD PARTITION PARTITIONS 2",
        "CREATE TABLE t (id int, v varchar(8) DEFAULT 'x', PRIMARY KEY (id)) "
        "PARTITION BY HASH (id) PARTITIONS 4",
        "ALTER TABLE t PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (10))",
        "ALTER TABLE t ADD COLUMN (a decimal(12,2) NOT NULL, b enum('x','y')) , DROP c",
    ],
)
def test_a_query_cut_anywhere_parses_or_says_what_was_expected(query):
    """Silver counts a DDL's columns with the parser and goes on only past DdlParseError."""
    for end in range(len(query) + 1):
        with contextlib.suppress(DdlParseError):
            ddl.parse_ddl(query[:end], "db")
