"""Folded DDLs (one step per table per run) equal a barrier per DDL (the reference path).

Random change/DDL logs on two tables are compacted twice, once with ``fold_ddl=False`` (every
DDL a barrier with its own Delta commits) and once folded, in two runs each; gold must be the
same row for row and hold the same columns, and the folded path must take at most two gold
commits per table per run (a MODIFY COLUMN that narrows a type, still a barrier, adds its own;
RENAME, CHANGE and MODIFY COLUMN that keep or widen the values are folded).
"""

from __future__ import annotations

import datetime as dt
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from ticdc_lake.gold import changes as gold_changes
from ticdc_lake.gold import compact as compact_stage
from ticdc_lake.gold import steps as gold_steps
from ticdc_lake.gold import tables as gold_tables
from ticdc_lake.gold.compact import compact
from ticdc_lake.lake.layout import LakeLayout

from tests.gold.test_compact import _column, _Log, recorded_calls

TABLES = ("a", "b")
ADDED = ("c1", "c2", "c3")


@dataclass
class _Table:
    """What a generated table looks like upstream as the log goes."""

    columns: dict[str, str] = field(default_factory=lambda: {"v": "c_int"})
    rows: dict[int, dict[str, int]] = field(default_factory=dict)
    key_type: str = "c_int"

    @property
    def main(self) -> str:
        """The column MODIFY and RENAME COLUMN act on: v, or w once renamed."""
        return "v" if "v" in self.columns else "w"

    def image(self, key: int, seed: int) -> dict:
        image = {"id": _column(self.key_type, key, key=True)}
        for number, (name, type_name) in enumerate(self.columns.items()):
            value = None if (seed + number) % 5 == 0 else seed * 10 + number
            image[name] = _column(type_name, value)
        return image

    def rename(self, old: str, new: str) -> None:
        self.columns = {new if n == old else n: t for n, t in self.columns.items()}


# One operation: (kind, table, key or column, same TS as the operation before it).
KINDS = ["insert", "insert", "update", "update", "delete", "add", "drop", "truncate", "modify"]
OPERATIONS = st.tuples(
    st.sampled_from([*KINDS, "widen", "rename", "change", "widen_key", "narrow"]),
    st.sampled_from(TABLES),
    st.integers(1, 3),
    st.booleans(),
)
# MODIFY COLUMN from BIGINT to INT: its values may not fit, so it still splits the run.
SPLITTING = {"narrow"}
RENAMES = {"rename", "change"}
ROW_KINDS = {"insert", "update", "delete"}


def _log(operations) -> tuple[_Log, int, int]:
    """The change log of ``operations`` after each table's CREATE TABLE; its mid and last TS."""
    log, tables, ts = _Log(), {name: _Table() for name in TABLES}, 100
    for name in TABLES:
        log.ddl(ts, f"CREATE TABLE s.{name} (id int PRIMARY KEY, v int)", name)
        ts += 10
    mid = None
    changed_at = None  # the TS of the last row change
    for number, (kind, name, key, same_ts) in enumerate(operations):
        # A change at a DDL's TS is read as after it, so a change written before a RENAME at
        # its TS would carry a name gone by then (upstream, a DDL has a TS of its own).
        if not same_ts or (kind in RENAMES and changed_at == ts):
            ts += 10
        if kind in ROW_KINDS:
            changed_at = ts
        if number == len(operations) // 2:
            mid = ts - 1
        table = tables[name]
        if kind in ROW_KINDS:
            _row_change(log, ts, name, table, kind, key, seed=number)
        else:
            query = _ddl(table, f"s.{name}", kind, key)
            if query is not None:
                log.ddl(ts, query, name)
    log.resolved(ts + 10)
    return log, mid if mid is not None else ts, ts + 10


def _ddl(table: _Table, name: str, kind: str, key: int) -> str | None:
    """The query of a DDL operation on the table ``name``, with ``table`` changed by it; None
    when the table has nothing it applies to."""
    if kind == "truncate":
        table.rows.clear()
        return f"TRUNCATE TABLE {name}"
    clause = _alter_clause(table, kind, key)
    return None if clause is None else f"ALTER TABLE {name} {clause}"


def _alter_clause(table: _Table, kind: str, key: int) -> str | None:
    main, other = table.main, {"v": "w", "w": "v"}[table.main]
    types = {"c_int": "int(11)", "c_bigint": "bigint(20)"}
    if kind == "add":
        column = next((c for c in ADDED if c not in table.columns), None)
        if column is None:
            return None
        table.columns[column] = "c_int"
        return f"ADD COLUMN {column} int DEFAULT 7"
    if kind == "drop":
        column = [c for c in table.columns if c != main][key % 2 :][:1]
        if not column:
            return None
        del table.columns[column[0]]
        return f"DROP COLUMN {column[0]}"
    if kind == "widen":  # the same gold type: INT(11) is an INT
        return f"MODIFY COLUMN {main} {types[table.columns[main]]} NOT NULL"
    if kind == "rename":
        table.rename(main, other)
        return f"RENAME COLUMN {main} TO {other}"
    if kind == "change":  # renamed and widened at once
        table.rename(main, other)
        table.columns[other] = "c_bigint"
        return f"CHANGE COLUMN {main} {other} bigint"
    if kind == "widen_key":
        if table.key_type == "c_bigint":
            return None
        table.key_type = "c_bigint"
        return "MODIFY COLUMN id bigint"
    if kind == "narrow":
        if table.columns[main] != "c_bigint":
            return None
        table.columns[main] = "c_int"
        return f"MODIFY COLUMN {main} int"
    if table.columns[main] != "c_int":  # modify: INT to BIGINT, a widening
        return None
    table.columns[main] = "c_bigint"
    return f"MODIFY COLUMN {main} bigint"


def _row_change(log: _Log, ts: int, name: str, table: _Table, kind: str, key: int, seed: int):
    old = table.rows.get(key)
    if kind == "delete":
        if old is not None:
            log.row(ts, name, "delete", None, table.image(key, old["seed"]))
            del table.rows[key]
        return
    new = table.image(key, seed)
    if old is None:
        log.row(ts, name, "insert", new)
    else:
        log.row(ts, name, "update", new, table.image(key, old["seed"]))
    table.rows[key] = {"seed": seed}


def _gold(layout: LakeLayout) -> dict[str, tuple[list[str], list[dict]]]:
    found = {}
    for name in TABLES:
        path = layout.gold("s", name)
        if not DeltaTable.is_deltatable(str(path)):
            found[name] = None
            continue
        table = DeltaTable(str(path)).to_pyarrow_table()
        # Gold's columns are matched by name (docs/architecture.md, Compact), so they are
        # compared as a set.
        columns = sorted(table.column_names)
        found[name] = (columns, sorted(table.to_pylist(), key=lambda r: r["id"]))
    return found


def _compacted(spark, root: Path, log: _Log, mid: int, *, fold: bool):
    """Gold after a run to ``mid`` and after a run to the end; the commits per table per run."""
    root.mkdir()
    config, layout = log.landed(spark, root)
    states, commits = [], []
    for until in (mid, None):
        result = compact(spark, config, until_ts=until, fold_ddl=fold)
        states.append(_gold(layout))
        commits.append({name: table.commits for name, table in result.tables.items()})
    return states, commits


def assert_fold_equals_barriers(spark, operations):
    log, mid, _ = _log(operations)
    with tempfile.TemporaryDirectory(prefix="fold-") as directory:
        root = Path(directory)
        reference, _ = _compacted(spark, root / "barriers", log, mid, fold=False)
        folded, commits = _compacted(spark, root / "folded", log, mid, fold=True)
    assert folded == reference
    # A splitting MODIFY COLUMN takes its own rewrite, and a segment (a reshape and a merge)
    # on either side of it; every other DDL rides with its table's one reshape and merge.
    splits = Counter(f"s.{name}" for kind, name, *_ in operations if kind in SPLITTING)
    for run in commits:
        assert all(count <= 2 + 3 * splits[n] for n, count in run.items()), run


ADD_BEFORE = [("insert", "a", 1, False), ("add", "a", 1, False), ("update", "a", 2, False)]
TRUNCATE_BETWEEN = [
    ("insert", "a", 1, False),
    ("insert", "a", 2, False),
    ("truncate", "a", 1, False),
    ("update", "a", 2, False),
    ("insert", "a", 1, False),
]
# c1 gets values in the first run; the second drops it and adds it again: the rows already
# there hold the new column's default, not the old column's values.
ADDED_AGAIN = [
    ("insert", "a", 1, False),
    ("add", "a", 1, False),
    ("update", "a", 1, False),
    ("insert", "a", 2, False),
    ("drop", "a", 0, False),
    ("add", "a", 1, False),
    ("insert", "a", 3, False),
]
SAME_TS = [
    ("insert", "a", 1, False),
    ("add", "a", 1, True),
    ("update", "a", 1, True),
    ("drop", "a", 1, True),
    ("insert", "b", 2, True),
    ("truncate", "b", 1, True),
    ("insert", "b", 3, True),
]

# A MODIFY COLUMN that leaves gold's type between changes of one key: folded, one commit.
WIDEN_BETWEEN = [
    ("insert", "a", 1, False),
    ("widen", "a", 1, False),
    ("update", "a", 1, False),
    ("modify", "a", 1, False),
    ("widen", "a", 1, False),
    ("insert", "a", 2, False),
]

# Renamed, renamed back and widened, the key widened, between changes of one key and across
# the two runs; then a narrowing that still splits the run.
RENAME_AND_WIDEN_BETWEEN = [
    ("insert", "a", 1, False),
    ("add", "a", 1, False),
    ("rename", "a", 1, False),
    ("update", "a", 1, False),
    ("widen_key", "a", 1, True),
    ("insert", "a", 2, False),
    ("change", "a", 1, False),
    ("update", "a", 2, False),
    ("rename", "a", 1, False),
    ("update", "a", 1, False),
    ("narrow", "a", 1, False),
    ("insert", "a", 3, False),
]

# Found by the property test in CI: a TRUNCATE and a MODIFY COLUMN at one TS, no change
# between the last run's target and them: emptying gold must not take the version that
# run's merge took.
TRUNCATE_AND_MODIFY_AT_ONE_TS = [
    ("insert", "a", 2, True),
    ("insert", "a", 2, True),
    ("insert", "a", 1, True),
    ("insert", "a", 2, False),
    ("insert", "a", 2, False),
    ("insert", "a", 2, True),
    ("insert", "a", 3, True),
    ("insert", "a", 1, False),
    ("truncate", "a", 1, True),
    ("insert", "a", 1, True),
    ("modify", "a", 3, True),
    ("insert", "a", 1, False),
    ("insert", "a", 1, False),
    ("insert", "a", 1, False),
]


@pytest.mark.slow
@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(OPERATIONS, min_size=4, max_size=14))
@example(ADD_BEFORE)
@example(TRUNCATE_BETWEEN)
@example(SAME_TS)
@example(ADDED_AGAIN)
@example(TRUNCATE_AND_MODIFY_AT_ONE_TS)
@example(WIDEN_BETWEEN)
@example(RENAME_AND_WIDEN_BETWEEN)
def test_folded_ddls_equal_a_barrier_per_ddl(spark, operations):
    assert_fold_equals_barriers(spark, operations)


def _reduced_rows(reduced: gold_changes.Reduced) -> list[str]:
    rows = [row for key in sorted(reduced.keys) for row in reduced.rows(key).to_pylist()]
    return sorted(map(repr, rows))


@pytest.mark.slow
@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(OPERATIONS, min_size=4, max_size=14), st.booleans())
@example(RENAME_AND_WIDEN_BETWEEN, True)
@example(SAME_TS + ADDED_AGAIN, True)
@example(TRUNCATE_AND_MODIFY_AT_ONE_TS, False)
def test_the_driver_reduces_a_run_as_spark_does(spark, operations, fold):
    """gold/reduce_arrow.py against gold/reduce.py: each run's reduced change set and counts,
    the same row for row, folded and with a barrier per DDL, whole and chunk by chunk."""
    reduce_changes = compact_stage.reduce_changes
    compared = []

    def both_ways(spark, layout, plan, timeline):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(gold_changes, "DRIVER_REDUCE_LIMIT", -1)
            in_spark = reduce_changes(spark, layout, plan, timeline)
        by_chunk = []
        # A chunk per row group, its winners ranked with those before it after every chunk,
        # or once, at the end.
        for rank_elements in (1, 10**9):
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(gold_changes, "DRIVER_CHUNK_ROWS", 1)
                patch.setattr(gold_changes, "RANK_ELEMENTS", rank_elements)
                by_chunk.append(reduce_changes(spark, layout, plan, timeline))
        on_driver = reduce_changes(spark, layout, plan, timeline)
        for driver in (on_driver, *by_chunk):
            assert driver[0].dataset is None  # reduced on the driver, not spilled
            assert _reduced_rows(driver[0]) == _reduced_rows(in_spark[0])
            assert driver[1:] == in_spark[1:]
        compared.append(plan.name)
        return on_driver

    log, mid, _ = _log(operations)
    with (
        tempfile.TemporaryDirectory(prefix="reduce-") as directory,
        pytest.MonkeyPatch.context() as patch,
    ):
        patch.setattr(compact_stage, "reduce_changes", both_ways)
        _compacted(spark, Path(directory) / "lake", log, mid, fold=fold)
    assert compared


@pytest.mark.slow
def test_large_runs_fold_as_small_ones_do(spark, monkeypatch):
    # Every segment spilled and read by Spark, every rewrite by Spark: the executors' paths.
    monkeypatch.setattr(gold_changes, "COLLECT_LIMIT", 0)
    monkeypatch.setattr(gold_changes, "DRIVER_REDUCE_LIMIT", -1)
    monkeypatch.setattr(gold_tables, "DRIVER_REWRITE_ROWS", 0)
    mixed = [("insert", "a", 3, False), ("drop", "a", 0, False), ("insert", "a", 2, False)]
    assert_fold_equals_barriers(
        spark, mixed + TRUNCATE_BETWEEN + SAME_TS + ADD_BEFORE + ADDED_AGAIN
    )


def test_add_column_with_a_default_after_a_row_and_a_truncate_between_changes_of_one_key(
    spark, tmp_path
):
    log = _Log()
    log.ddl(100, "CREATE TABLE s.a (id int PRIMARY KEY, v int)", "a")
    log.row(110, "a", "insert", {"id": _column("c_int", 1, key=True), "v": _column("c_int", 5)})
    log.ddl(120, "ALTER TABLE s.a ADD COLUMN c1 int DEFAULT 7", "a")
    for ts in range(130, 1130, 20):  # fifty DDLs and the changes between them: one step
        log.ddl(ts, "ALTER TABLE s.a ADD COLUMN c2 int", "a")
        log.ddl(ts + 10, "ALTER TABLE s.a DROP COLUMN c2", "a")
    log.row(1200, "a", "insert", {"id": _column("c_int", 2, key=True), "v": _column("c_int", 6)})
    log.ddl(1210, "TRUNCATE TABLE s.a", "a")
    image = {"id": _column("c_int", 2, key=True), "v": _column("c_int", 8)}
    log.row(1210, "a", "insert", image | {"c1": _column("c_int", 9)})  # at the DDL's TS: after
    log.resolved(1300)
    config, layout = log.landed(spark, tmp_path)

    first = compact(spark, config, until_ts=1205).tables["s.a"]
    rows = DeltaTable(str(layout.gold("s", "a"))).to_pyarrow_table()
    # The row written before ADD COLUMN holds its default, as upstream's does.
    assert rows.column_names == ["id", "v", "_commit_ts", "c1"]
    assert sorted(rows.to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "v": 5, "_commit_ts": 110, "c1": 7},
        {"id": 2, "v": 6, "_commit_ts": 1200, "c1": None},
    ]
    assert first.commits <= 2 and first.ddl == 102

    second = compact(spark, config).tables["s.a"]
    rows = DeltaTable(str(layout.gold("s", "a"))).to_pyarrow_table().to_pylist()
    assert rows == [{"id": 2, "v": 8, "_commit_ts": 1210, "c1": 9}]
    assert second.commits == 1  # TRUNCATE and the merge after it: one commit


def test_column_ddls_that_keep_or_widen_values_are_folded_and_a_narrowing_splits(spark, tmp_path):
    log = _Log()
    log.ddl(100, "CREATE TABLE s.a (id int PRIMARY KEY, v varchar(10), n int)", "a")
    image = {"id": _column("c_int", 1, key=True), "v": _column("c_varchar", "x")}
    log.row(110, "a", "insert", image | {"n": _column("c_int", 5)})
    log.resolved(120)
    log.ddl(130, "ALTER TABLE s.a MODIFY COLUMN v varchar(255) NOT NULL", "a")  # same type
    changed = {"id": _column("c_int", 1, key=True), "v": _column("c_varchar", "y")}
    log.row(
        140, "a", "update", changed | {"n": _column("c_int", 6)}, image | {"n": _column("c_int", 5)}
    )
    log.ddl(150, "ALTER TABLE s.a MODIFY COLUMN n bigint", "a")  # widened
    log.ddl(155, "ALTER TABLE s.a RENAME COLUMN v TO label", "a")  # renamed
    added = {"id": _column("c_int", 2, key=True), "label": _column("c_varchar", "z")}
    log.row(160, "a", "insert", added | {"n": _column("c_bigint", 7)})
    log.ddl(165, "ALTER TABLE s.a MODIFY COLUMN n smallint", "a")  # narrowed: a barrier
    third = {"id": _column("c_int", 3, key=True), "label": _column("c_varchar", "w")}
    log.row(170, "a", "insert", third | {"n": _column("c_smallint", 8)})
    log.resolved(180)
    config, layout = log.landed(spark, tmp_path)
    compact(spark, config, until_ts=120)

    run = compact(spark, config).tables["s.a"]
    rows = DeltaTable(str(layout.gold("s", "a"))).to_pyarrow_table()
    assert rows.column_names == ["id", "label", "n", "_commit_ts"]  # renamed in its place
    assert rows.schema.field("n").type == pa.int16()
    assert sorted(rows.to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "label": "y", "n": 6, "_commit_ts": 140},
        {"id": 2, "label": "z", "n": 7, "_commit_ts": 160},
        {"id": 3, "label": "w", "n": 8, "_commit_ts": 170},
    ]
    # The first three DDLs ride with the changes before the narrowing (one reshape, one
    # merge); the narrowing splits the run: its rewrite, then a merge after it.
    assert (run.ddl, run.commits) == (4, 4)


@pytest.mark.parametrize("fold", [False, True])
def test_two_ddls_at_one_ts_on_one_table_are_both_carried_out(spark, tmp_path, monkeypatch, fold):
    # Both effects used to get the version TS x 8: the DROP was skipped as already done.
    log = _Log()
    log.ddl(100, "CREATE TABLE s.a (id int PRIMARY KEY, v int)", "a")
    log.row(110, "a", "insert", {"id": _column("c_int", 1, key=True), "v": _column("c_int", 5)})
    log.resolved(120)
    log.ddl(130, "ALTER TABLE s.a ADD COLUMN c1 int", "a")
    log.ddl(130, "ALTER TABLE s.a DROP COLUMN v", "a")
    log.resolved(140)
    config, layout = log.landed(spark, tmp_path)
    compact(spark, config, until_ts=120, fold_ddl=fold)
    with monkeypatch.context() as patch:  # a run killed before it wrote its state
        patch.setattr(compact_stage, "write_state", lambda *args: None)
        compact(spark, config, fold_ddl=fold)
    gold = DeltaTable(str(layout.gold("s", "a")))
    version = gold.version()
    rerun = compact(spark, config, fold_ddl=fold).tables["s.a"]
    assert rerun.commits == 0 and rerun.version == version  # every step found done
    rows = gold.to_pyarrow_table()
    assert rows.column_names == ["id", "_commit_ts", "c1"]
    assert rows.to_pylist() == [{"id": 1, "_commit_ts": 110, "c1": None}]


@pytest.mark.parametrize("fold", [False, True], ids=["barriers", "folded"])
@pytest.mark.parametrize("executors", [False, True], ids=["driver", "spark"])
def test_rows_already_in_gold_get_an_added_columns_default(
    spark, tmp_path, monkeypatch, fold, executors
):
    if executors:  # the rewrite by Spark that a large table takes
        monkeypatch.setattr(gold_tables, "DRIVER_REWRITE_ROWS", 0)
    ddl_ts = 1 << 40  # 1970-01-13 17:55:41.7760 UTC as a TSO's physical time
    log = _Log()
    log.ddl(100, "CREATE TABLE s.a (id int PRIMARY KEY, v int)", "a")
    log.row(110, "a", "insert", {"id": _column("c_int", 1, key=True), "v": _column("c_int", 5)})
    log.row(110, "a", "insert", {"id": _column("c_int", 2, key=True), "v": _column("c_int", 6)})
    log.resolved(120)
    log.row(130, "a", "update", {"id": _column("c_int", 2, key=True), "v": _column("c_int", 7)})
    log.ddl(
        ddl_ts,
        "ALTER TABLE s.a ADD COLUMN status enum('new','paid') NOT NULL DEFAULT 'paid', "
        "ADD COLUMN note varchar(8) NOT NULL, ADD COLUMN amount decimal(6,2) DEFAULT '1.5', "
        "ADD COLUMN at timestamp(3) NULL DEFAULT CURRENT_TIMESTAMP(3), ADD COLUMN gone int",
        "a",
    )
    log.row(
        ddl_ts + 10,
        "a",
        "insert",
        {
            "id": _column("c_int", 3, key=True),
            "v": _column("c_int", 8),
            "status": _column("c_enum", 1),
            "note": _column("c_varchar", "x"),
        },
    )
    log.resolved(ddl_ts + 20)
    config, layout = log.landed(spark, tmp_path)
    compact(spark, config, until_ts=120, fold_ddl=fold)
    compact(spark, config, fold_ddl=fold)

    rows = DeltaTable(str(layout.gold("s", "a"))).to_pyarrow_table().to_pylist()
    at = dt.datetime.fromtimestamp((ddl_ts >> 18) / 1000, dt.UTC)
    already = {"status": "paid", "note": "", "amount": Decimal("1.50"), "at": at, "gone": None}
    assert sorted(rows, key=lambda r: r["id"]) == [
        {"id": 1, "v": 5, "_commit_ts": 110, **already},  # in gold before the DDL
        {"id": 2, "v": 7, "_commit_ts": 130, **already},  # changed by the run, before it
        {"id": 3, "v": 8, "_commit_ts": ddl_ts + 10, "status": "new", "note": "x",
         "amount": None, "at": None, "gone": None},  # written after it, as its image says
    ]  # fmt: skip


@pytest.mark.parametrize("fold", [False, True], ids=["barriers", "folded"])
def test_replays_are_counted_once_also_of_changes_a_truncate_discards(spark, tmp_path, fold):
    log = _Log()
    log.ddl(100, "CREATE TABLE s.a (id int PRIMARY KEY, v int)", "a")
    for id_, ts, copies in ((1, 110, 2), (2, 115, 3), (3, 130, 2)):
        image = {"id": _column("c_int", id_, key=True), "v": _column("c_int", id_)}
        for _ in range(copies):  # TiCDC sending the change again (at least once)
            log.row(ts, "a", "insert", image)
        if ts == 115:
            log.ddl(120, "TRUNCATE TABLE s.a", "a")
    log.resolved(140)
    config, layout = log.landed(spark, tmp_path)

    run = compact(spark, config, fold_ddl=fold).tables["s.a"]
    assert (run.changes, run.duplicates, run.upserts) == (3, 4, 1 if fold else 3)
    assert DeltaTable(str(layout.gold("s", "a"))).to_pyarrow_table().to_pylist() == [
        {"id": 3, "v": 3, "_commit_ts": 130}
    ]


@pytest.mark.slow
@pytest.mark.parametrize("new_column", [False, True], ids=["same-columns", "new-column"])
def test_column_names_delta_spark_refuses_are_merged_on_the_driver(spark, monkeypatch, new_column):
    """A space in a column name (MySQL allows it) is refused by delta-spark when it writes a
    schema: a large segment that adds a column to such a table goes to the driver's merge;
    one that keeps the columns is merged by delta-spark. Gold is a small run's either way."""
    log = _Log()  # no CREATE TABLE: the columns come from the rows

    def image(key: int, value: int, added: bool = False) -> dict:
        row = {"id": _column("c_int", key, key=True), "v w": _column("c_int", value)}
        return row | ({"x y": _column("c_int", -value)} if added else {})

    for key in range(1, 6):
        log.row(110 + key, "a", "insert", image(key, key))
    log.row(130, "a", "update", image(2, 20, new_column), image(2, 2))
    log.row(131, "a", "delete", None, image(3, 3))
    log.row(132, "a", "insert", image(9, 9, new_column))
    log.resolved(140)
    merged_by_spark = recorded_calls(monkeypatch, gold_tables.GoldTable, "merge_frame")
    asked = recorded_calls(monkeypatch, gold_steps, "spark_can_merge")
    found = {}
    for limit in (0, 10**9):  # every segment large, then none
        monkeypatch.setattr(gold_changes, "COLLECT_LIMIT", limit)
        monkeypatch.setattr(gold_changes, "DRIVER_REDUCE_LIMIT", -1 if limit == 0 else 8_000_000)
        with tempfile.TemporaryDirectory(prefix="names-") as directory:
            found[limit], _ = _compacted(spark, Path(directory) / "lake", log, 120, fold=True)
    assert asked and bool(merged_by_spark) is not new_column
    assert found[0] == found[10**9]
    columns, rows = found[0][-1]["a"]
    assert columns == ["_commit_ts", "id", "v w", *(["x y"] if new_column else [])]
    added = {2: -20, 9: -9} if new_column else {}
    assert [(r["id"], r["v w"], r.get("x y")) for r in rows] == [
        (1, 1, None), (2, 20, added.get(2)), (4, 4, None), (5, 5, None), (9, 9, added.get(9))
    ]  # fmt: skip
