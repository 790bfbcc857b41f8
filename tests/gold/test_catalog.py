"""The DDL catalog, each DDL's effects on gold, partition row sets and the run's DDL timeline."""

from __future__ import annotations

from decimal import Decimal
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ticdc_lake.gold import catalog as gold_catalog
from ticdc_lake.gold import ddl
from ticdc_lake.gold.catalog import (
    _NOT_LITERAL,
    AddColumns,
    AlterColumn,
    Catalog,
    CatalogHistory,
    Create,
    Drop,
    DropColumns,
    Effect,
    Inconsistent,
    Move,
    PartitionRows,
    TableInfo,
    TableName,
    Truncate,
    literal,
)
from ticdc_lake.gold.ddl import parse_ddl
from ticdc_lake.gold.plan import DdlRecord, build_timeline, parse_record, unique_records
from ticdc_lake.sample.workload import generate_workload
from ticdc_lake.silver import mysql

T = TableName


def fold(*queries: str) -> tuple[Catalog, list[list[Effect]]]:
    catalog = Catalog()
    effects = []
    for query in queries:
        found = []
        for action in parse_ddl(query, "db"):
            found.extend(catalog.apply(action))
        effects.append(found)
    return catalog, effects


def test_folding_the_generated_ddl_log_gives_the_final_tables():
    workload = generate_workload(seed=5, transactions=1500)
    catalog = Catalog()
    for event in workload.ddl_events:
        for action in parse_ddl(event.query, event.schema):
            catalog.apply(action)
    for name, table in workload.final_tables.items():
        info = catalog.info(T(*name.split(".")))
        assert info.complete and info.exists
        assert [(col.name, col.type_text) for col in info.columns] == [
            (col.name, col.mysql_type) for col in table.columns
        ]
        assert info.handle == table.handle  # a NOT NULL unique key where there is no PK


def test_every_kind_of_ddl_action_has_its_step_on_the_catalog():
    kinds = set(ddl.Action.__subclasses__())
    assert kinds and kinds <= set(gold_catalog._HANDLERS)


def test_column_ddls_and_their_effects():
    catalog, effects = fold(
        "CREATE TABLE t (id int PRIMARY KEY, a int, b varchar(5))",
        "ALTER TABLE t ADD COLUMN c enum('x','y'), DROP COLUMN a",
        "ALTER TABLE t MODIFY b varchar(50) NOT NULL",
        "ALTER TABLE t CHANGE id key_id bigint",
        "ALTER TABLE t RENAME COLUMN c TO e",
    )
    create, change, modify, change_key, rename = effects
    assert isinstance(create[0], Create) and [n for n, _ in create[0].columns] == ["id", "a", "b"]
    assert isinstance(change[0], AddColumns) and change[0].columns[0][1].elements == ("x", "y")
    assert change[1] == DropColumns(T("db", "t"), ("a",))
    assert modify[0].old_name == modify[0].new_name == "b"
    assert modify[0].spec.mysql_type == "varchar(50)"
    assert (change_key[0].old_name, change_key[0].new_name) == ("id", "key_id")
    assert rename[0] == AlterColumn(T("db", "t"), "c", "e", None)
    info = catalog.info(T("db", "t"))
    assert [col.name for col in info.columns] == ["key_id", "b", "e"]
    assert info.handle == ("key_id",)  # the key follows its column's new name


def test_a_column_ddl_folds_when_earlier_rows_read_the_same_under_it():
    _, effects = fold(
        "CREATE TABLE t (id int PRIMARY KEY, a int, b varchar(5), c enum('x','y'), "
        "d decimal(10,2), f float, u int unsigned, s smallint unsigned)",
        "ALTER TABLE t MODIFY b varchar(50) NOT NULL",  # a string before and after
        "ALTER TABLE t MODIFY a int(11) COMMENT 'n'",  # an INT before and after
        "ALTER TABLE t MODIFY a bigint",  # int32 -> int64: a widening
        "ALTER TABLE t MODIFY c enum('x','y','z')",  # the members convert the values
        "ALTER TABLE t CHANGE b b2 varchar(50)",  # renamed
        "ALTER TABLE t RENAME COLUMN b2 TO b3",  # renamed
        "ALTER TABLE t MODIFY e int",  # a column no DDL defined before
        "ALTER TABLE t MODIFY d decimal(14,2)",  # more digits, the same scale
        "ALTER TABLE t MODIFY d decimal(14,3)",  # another scale: the text changes
        "ALTER TABLE t MODIFY a int",  # narrowed
        "ALTER TABLE t MODIFY f double",  # a float's text reads otherwise as a double
        "ALTER TABLE t MODIFY u bigint",  # unsigned to a wider signed type
        "ALTER TABLE t MODIFY s int unsigned",
        "ALTER TABLE t MODIFY id bigint unsigned",  # signed to unsigned
        "ALTER TABLE t MODIFY b3 int",  # a string to a number
    )
    (
        longer, same_int, to_bigint, members, changed, renamed, unknown, more_digits,
        other_scale, narrowed, to_double, unsigned_to_signed, unsigned_wider, to_unsigned,
        to_number,
    ) = (e[0] for e in effects[1:])  # fmt: skip
    assert longer.folds(None) and longer.folds("string")
    assert not longer.folds("long")  # gold holds another type: carried out as a barrier
    assert same_int.folds("integer") and to_bigint.folds("integer")
    assert not to_bigint.folds("long")
    assert not members.folds("string")
    assert changed.folds("string") and renamed.spec is None and renamed.folds("long")
    assert unknown.previous is None and not unknown.folds(None)
    assert more_digits.folds("decimal(10,2)") and not other_scale.folds("decimal(14,2)")
    assert not narrowed.folds("long") and not to_double.folds("float")
    assert unsigned_to_signed.folds("long") and unsigned_wider.folds("integer")
    assert not to_unsigned.folds("integer") and not to_number.folds("string")


def test_table_ddls_and_their_effects():
    catalog, effects = fold(
        "CREATE TABLE a (id int PRIMARY KEY)",
        "CREATE TABLE IF NOT EXISTS a (id int PRIMARY KEY)",
        "RENAME TABLE a TO b",
        "TRUNCATE TABLE b",
        "CREATE TABLE c LIKE b",
        "DROP TABLE c",
        "DROP DATABASE db",
    )
    _, if_not_exists, rename, truncate, like, drop, drop_schema = effects
    assert if_not_exists == []  # the table exists: nothing happens
    assert rename == [Move(T("db", "a"), T("db", "b"))]
    assert truncate == [Truncate(T("db", "b"))]
    assert isinstance(like[0], Create) and [n for n, _ in like[0].columns] == ["id"]
    assert drop == [Drop(T("db", "c"))]
    assert drop_schema == [Drop(T("db", "b"))]  # a and c are gone already
    assert not catalog.known(T("db", "b"))


def test_primary_key_changes_move_the_handle():
    catalog, _ = fold(
        "CREATE TABLE t (a int NOT NULL, b int, UNIQUE KEY (a))",
        "ALTER TABLE t ADD PRIMARY KEY (b)",
    )
    assert catalog.info(T("db", "t")).handle == ("b",)
    catalog, _ = fold("CREATE TABLE t (a int NULL, UNIQUE KEY (a))")
    assert catalog.info(T("db", "t")).handle == ()  # a nullable unique key is no handle


RANGE = (
    "CREATE TABLE r (id int PRIMARY KEY) PARTITION BY RANGE (id) ("
    "PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN (20), "
    "PARTITION p2 VALUES LESS THAN MAXVALUE)"
)


def test_dropped_and_truncated_partitions_name_their_rows():
    _, effects = fold(
        RANGE,
        "ALTER TABLE r TRUNCATE PARTITION p0, p2",
        "ALTER TABLE r DROP PARTITION p1",
        "ALTER TABLE r TRUNCATE PARTITION p2",
    )
    truncated, dropped, after_drop = effects[1:]
    assert truncated[0].rows == PartitionRows("range", "id", ranges=((None, 10), (20, None)))
    assert dropped[0].rows == PartitionRows("range", "id", ranges=((10, 20),))
    # With p1 gone, p2 starts where p0 ends.
    assert after_drop[0].rows == PartitionRows("range", "id", ranges=((10, None),))
    _, effects = fold(
        "CREATE TABLE l (c varchar(2)) PARTITION BY LIST COLUMNS (c) "
        "(PARTITION a VALUES IN ('x', NULL), PARTITION b VALUES IN ('y'))",
        "ALTER TABLE l TRUNCATE PARTITION a",
    )
    assert effects[1][0].rows == PartitionRows("list", "c", values=("x", None))
    _, effects = fold(
        "CREATE TABLE h (id int) PARTITION BY HASH (id) PARTITIONS 4",
        "ALTER TABLE h TRUNCATE PARTITION p1, p3",
    )
    assert effects[1][0].rows == PartitionRows("hash", "id", remainders=(1, 3), modulus=4)


@pytest.mark.parametrize(
    ("create", "ddl", "reason"),
    [
        ("CREATE TABLE k (id int) PARTITION BY KEY (id) PARTITIONS 2",
         "ALTER TABLE k TRUNCATE PARTITION p0", "KEY partitioning"),
        ("CREATE TABLE e (d date) PARTITION BY RANGE (YEAR(d)) "
         "(PARTITION p VALUES LESS THAN (2000))", "ALTER TABLE e DROP PARTITION p", "one plain"),
        ("CREATE INDEX i ON k (a)", "ALTER TABLE k DROP PARTITION p", "partitioning is unknown"),
        (RANGE, "ALTER TABLE r DROP PARTITION nope", "unknown partition"),
        (RANGE, "ALTER TABLE r EXCHANGE PARTITION p0 WITH TABLE x", "EXCHANGE PARTITION"),
    ],
)  # fmt: skip
def test_partition_changes_gold_cannot_reproduce_mark_the_table(create, ddl, reason):
    _, effects = fold(create, ddl)
    assert effects[1] and all(isinstance(e, Inconsistent) for e in effects[1])
    assert reason in effects[1][0].reason


def test_partition_ddls_that_move_no_rows_have_no_effect():
    catalog, effects = fold(
        RANGE,
        "ALTER TABLE r ADD PARTITION (PARTITION p3 VALUES LESS THAN (40))",
        "ALTER TABLE r REORGANIZE PARTITION p0, p1 INTO (PARTITION p01 VALUES LESS THAN (20))",
        "ALTER TABLE r REMOVE PARTITIONING",
    )
    assert effects[1:] == [[], [], []]
    assert catalog.info(T("db", "r")).partitioning is None


def test_literals():
    assert literal("10") == 10 and literal("-3") == -3
    assert literal("1.50") == Decimal("1.50")
    assert literal("'it''s'") == "it's" and literal("NULL") is None
    assert literal("TO_DAYS('2020-01-01')") is _NOT_LITERAL


def _record(ts, query, *, partition=0, offset=0, batch=0, ddl_type=None, event_id=None):
    return {
        "event_id": event_id or f"{ts}:{query}",
        "commit_ts": ts,
        "schema": "db",
        "table": query.split()[2] if query.startswith(("ALTER", "CREATE")) else "t",
        "query": query,
        "ddl_type": ddl_type,
        "topic": "t",
        "partition": partition,
        "offset": offset,
        "index": 0,
        "bronze_batch": batch,
    }


def test_broadcast_copies_count_once_in_commit_order():
    rows = [
        _record(20, "TRUNCATE TABLE t", partition=p, offset=5 - p, event_id="b") for p in range(3)
    ] + [_record(10, "CREATE TABLE t (id int PRIMARY KEY)", partition=p, event_id="a")
         for p in range(3)]  # fmt: skip
    records = unique_records(rows)
    assert [(r.event_id, r.partition) for r in records] == [("a", 0), ("b", 0)]
    assert isinstance(records[0], DdlRecord)


def test_timeline_splits_history_from_barriers_and_keeps_what_is_not_yet_due():
    parsed = [
        parse_record(r)
        for r in unique_records(
            [
                _record(10, "CREATE TABLE t (id int PRIMARY KEY, a int)"),
                _record(20, "ALTER TABLE t ADD COLUMN b int", offset=1),
                _record(30, "ALTER TABLE t DROP COLUMN a", offset=2),
                _record(40, "TRUNCATE TABLE t", offset=3),
                _record(
                    35, "ALTER TABLE t ADD INDEX i (b)", offset=4, ddl_type=mysql.ACTION_ADD_INDEX
                ),
            ]
        )
    ]
    timeline = build_timeline(
        parsed, initial=Catalog(), applied_ts=20, applied_batch=-1, target_ts=35
    )
    name = T("db", "t")
    assert [col.name for col in timeline.history.info(name).columns] == ["id", "a", "b"]
    assert [b.ts for b in timeline.barriers] == [30, 35]
    assert [b.ts for b in timeline.barriers_of(name)] == [30]  # ADD INDEX changes nothing
    assert timeline.catalog_for_segment(name, 0) is timeline.history
    last = timeline.catalog_for_segment(name, 1).info(name)
    assert [col.name for col in last.columns] == ["id", "b"]


def test_a_ddl_without_ts_in_a_changefeed_with_ts_only_marks_the_table():
    parsed = [parse_record(r) for r in unique_records([_record(None, "TRUNCATE TABLE t")])]
    timeline = build_timeline(
        parsed, initial=Catalog(), applied_ts=0, applied_batch=-1, target_ts=100
    )
    (barrier,) = timeline.barriers
    assert isinstance(barrier.effects[0], Inconsistent)
    assert "cannot be placed" in barrier.effects[0].reason


def test_an_unreadable_ddl_marks_its_table_and_says_why():
    parsed = parse_record(unique_records([_record(5, "ALTER TABLE t FROB")])[0])
    assert parsed.error and "FROB" in parsed.error
    timeline = build_timeline(
        [parsed], initial=Catalog(), applied_ts=0, applied_batch=-1, target_ts=10
    )
    (effect,) = timeline.barriers[0].effects
    assert isinstance(effect, Inconsistent) and "not understood" in effect.reason
    assert "commit TS 5" in effect.reason and "offset 0" in effect.reason


_KEYED_DDLS = [
    "CREATE TABLE {t} (id int PRIMARY KEY, a int NOT NULL, b int)",
    "CREATE TABLE {t} (id int, a int NOT NULL, UNIQUE KEY u (a))",
    "CREATE TABLE {t} (id int, a int)",
    "CREATE TABLE {t} LIKE {u}",
    "ALTER TABLE {t} ADD PRIMARY KEY (a)",
    "ALTER TABLE {t} DROP PRIMARY KEY",
    "ALTER TABLE {t} ADD UNIQUE KEY k (id)",
    "ALTER TABLE {t} ADD COLUMN c int",
    "ALTER TABLE {t} RENAME COLUMN a TO z",
    "RENAME TABLE {t} TO {u}",
    "DROP TABLE {t}",
    "DROP DATABASE db",
]


@settings(max_examples=400, deadline=None)
@given(
    ddls=st.lists(
        st.tuples(
            st.sampled_from(_KEYED_DDLS),
            st.sampled_from("tuv"),
            st.sampled_from("tuv"),
            st.one_of(st.none(), st.integers(1, 60)),
            st.integers(0, 3),
        ),
        max_size=25,
    ),
    applied=st.integers(0, 40),
    prior=st.dictionaries(st.sampled_from("tuv"), st.booleans()),
)
def test_each_barriers_catalog_and_the_latest_infos_equal_copies_of_the_catalog(
    ddls, applied, prior
):
    """Each barrier's catalog (a view of the run's history of infos) equals a copy of the
    catalog taken at the barrier, and ``latest_infos`` a walk over those copies: also with DDLs
    without a TS applied after the barriers, and tables known before the run with a key,
    which the barriers' catalogs hold until a DDL changes them."""
    rows = [
        {**_record(ts, query.format(t=t, u=u), offset=i, batch=batch), "table": t}
        for i, (query, t, u, ts, batch) in enumerate(ddls)
    ]
    copies, record = [], CatalogHistory.record

    def recording(history, catalog):
        copies.append(catalog.copy())
        return record(history, catalog)

    with mock.patch.object(CatalogHistory, "record", recording):
        timeline = build_timeline(
            [parse_record(r) for r in unique_records(rows)],
            initial=Catalog(
                {
                    T("db", name): TableInfo(
                        T("db", name), complete=keyed, primary_key=("id",) * keyed
                    )
                    for name, keyed in prior.items()
                }
            ),
            applied_ts=applied,
            applied_batch=1,
            target_ts=50,
        )
    names = [T("db", name) for name in "tuv"]
    for barrier, copy in zip(timeline.barriers, copies, strict=True):
        assert barrier.catalog.tables == copy.tables
        assert [barrier.catalog.info(n) for n in names] == [copy.info(n) for n in names]
        assert [barrier.catalog.known(n) for n in names] == [copy.known(n) for n in names]
    for wanted in (lambda info: bool(info.handle), lambda info: info.complete):
        walked = {}
        for catalog in [timeline.history, *copies]:
            walked.update({name: info for name, info in catalog.tables.items() if wanted(info)})
        assert timeline.latest_infos(wanted) == walked
