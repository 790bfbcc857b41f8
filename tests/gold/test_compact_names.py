"""Compaction of upstream names that would misdirect a path or a Spark column reference.

TiDB accepts nearly any character in a quoted identifier, and exports are untrusted: a schema
named like an absolute path or ``../quality`` must not put a gold table outside ``gold/`` nor
over a table of the lake; names that differ only in case, in a dot against a slash or in
Unicode normalisation are distinct tables; columns named with a backtick, a dot, a space, a
keyword or a non-ASCII letter are read, keyed on and rewritten like any other. And one table
that cannot be compacted leaves the others compacted and recorded.
"""

from __future__ import annotations

import dataclasses
import unicodedata
from pathlib import Path

import pytest
from deltalake import DeltaTable
from ticdc_lake.gold import tables as gold_tables
from ticdc_lake.gold.compact import compact
from ticdc_lake.gold.exceptions import CompactError
from ticdc_lake.gold.state import read_state
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.lake.names import qualified_name
from ticdc_lake.limits import Limits
from ticdc_lake.quality.run import validate_stage

from tests.gold.test_compact import _column, _Log

pytestmark = pytest.mark.spark

CAFE = "café"
NAMES = [
    ("../quality", "results"),
    ("../silver", "watermarks"),
    ("Shop", "Orders"),
    ("shop", "orders"),
    ("a.b", "t"),
    ("a/b", "t"),
    (unicodedata.normalize("NFC", CAFE), "t"),
    (unicodedata.normalize("NFD", CAFE), "t"),
    ("s", "\x1b[2J\x1b[HEvery check passed"),
]
# Every table has these columns; its key is the first two, or (in every other table) the last
# three, so each name is a key column somewhere and a plain column elsewhere.
COLUMNS = ("a`b", "a.b", "a b", "é", "select")
MODIFIED = "a b"  # MODIFY COLUMN int -> varchar: not a widening, so Spark rewrites the table


def quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def key_of(number: int) -> tuple[str, ...]:
    return COLUMNS[:2] if number % 2 == 0 else COLUMNS[2:]


def image(number: int, row: int, value: int, *, modified: bool = False) -> dict:
    keys = key_of(number)
    values = {
        "a`b": ("c_int", row),
        "a.b": ("c_varchar", f"k{row}"),
        MODIFIED: ("c_varchar", str(value)) if modified else ("c_int", value),
        "é": ("c_varchar", f"é{value}"),
        "select": ("c_int", row * 10),
    }
    return {name: _column(kind, v, key=name in keys) for name, (kind, v) in values.items()}


def hostile_log(names: list[tuple[str, str]]) -> _Log:
    """Per table: CREATE TABLE, three inserts, an update, a delete, MODIFY COLUMN, an insert."""
    log = _Log()
    for number, (schema, table) in enumerate(names):
        columns = ", ".join(
            f"{quoted(c)} {'varchar(20)' if c in ('a.b', 'é') else 'int'} NOT NULL" for c in COLUMNS
        )
        keys = ", ".join(map(quoted, key_of(number)))
        create = f"CREATE TABLE {quoted(schema)}.{quoted(table)} ({columns}, PRIMARY KEY ({keys}))"
        log.ddl(100, create, table, schema)
        for row in (1, 2, 3):
            log.row(110, table, "insert", image(number, row, row), schema=schema)
        log.row(120, table, "update", image(number, 2, 20), image(number, 2, 2), schema=schema)
        log.row(120, table, "delete", None, image(number, 3, 3), schema=schema)
        modify = f"ALTER TABLE {quoted(schema)}.{quoted(table)} MODIFY COLUMN `a b` varchar(20)"
        log.ddl(130, modify, table, schema)
        log.row(140, table, "insert", image(number, 4, 4, modified=True), schema=schema)
    log.resolved(150)
    return log


def expected_rows() -> list[dict]:
    return [
        {"a`b": row, "a.b": f"k{row}", MODIFIED: str(value), "é": f"é{value}",
         "select": row * 10}
        for row, value in ((1, 1), (2, 20), (4, 4))
    ]  # fmt: skip


def gold_of(layout: LakeLayout, schema: str, table: str) -> list[dict]:
    rows = DeltaTable(str(layout.gold(schema, table))).to_pyarrow_table().to_pylist()
    return sorted(({k: v for k, v in r.items() if k != "_commit_ts"} for r in rows),
                  key=lambda r: r["a`b"])  # fmt: skip


def lake_versions(layout: LakeLayout) -> dict[str, int]:
    return {
        name: DeltaTable(str(path)).version()
        for name, path in layout.tables().items()
        if DeltaTable.is_deltatable(str(path))
    }


def test_hostile_names_stay_inside_gold_one_table_each_with_their_columns(spark, tmp_path):
    outside = tmp_path / "outside"
    names = [(str(outside), "t"), *NAMES]
    config, layout = hostile_log(names).landed(spark, tmp_path)
    before = lake_versions(layout)

    result = compact(spark, config)

    assert not result.failures
    assert not outside.exists()
    assert sorted(p.name for p in layout.root.iterdir()) == ["gold", "silver", "state"]
    after = lake_versions(layout)
    assert {n: v for n, v in after.items() if n != "gold_state"} == before
    states = read_state(layout.gold_state)
    assert sorted((s.schema, s.table) for s in states) == sorted(names)
    paths = {Path(s.path).resolve() for s in states}
    assert len(paths) == len(names)
    gold_root = layout.gold_root.resolve()
    assert all(p.parent.parent == gold_root for p in paths)
    for schema, table in names:
        assert gold_of(layout, schema, table) == expected_rows(), (schema, table)
    assert {t.table for t in result.changefeeds[0].tables} == {qualified_name(*n) for n in names}

    validation = validate_stage(spark, config, "gold")
    checked = {outcome.check for outcome, _ in validation.outcomes}
    assert {"gold_key_unique", "gold_row_count", "gold_column_types"} <= checked
    # The log's TSs are tiny, so its watermark is decades old: only freshness may fail.
    assert {o.check for o in validation.failures()} <= {"freshness_lag"}

    assert compact(spark, config).changefeeds[0].noop  # a rerun finds everything done


def test_a_table_that_fails_leaves_the_others_compacted_and_recorded(spark, tmp_path, monkeypatch):
    log = _Log()
    for table in ("good", "bad"):
        log.ddl(100, f"CREATE TABLE s.{table} (id int PRIMARY KEY, v int)", table)
        log.row(110, table, "insert", {"id": _column("c_int", 1, key=True),
                                       "v": _column("c_int", 7)})  # fmt: skip
    log.resolved(120)
    config, layout = log.landed(spark, tmp_path)
    merge = gold_tables.GoldTable.merge

    def failing_merge(self, segment, version):
        if self.name.name == "bad":
            raise OSError(28, "No space left on device")
        return merge(self, segment, version)

    monkeypatch.setattr(gold_tables.GoldTable, "merge", failing_merge)
    with pytest.raises(CompactError) as failed:
        compact(spark, config)

    assert set(failed.value.failures) == {"s.bad"}
    assert "No space left on device" in failed.value.failures["s.bad"]
    states = {s.table: s for s in read_state(layout.gold_state)}
    assert states["good"].mode == "watermark" and states["good"].watermark == 120
    assert states["bad"].reason.startswith("compaction failed: OSError")
    good = DeltaTable(str(layout.gold("s", "good"))).to_pyarrow_table().to_pylist()
    assert good == [{"id": 1, "v": 7, "_commit_ts": 110}]

    monkeypatch.setattr(gold_tables.GoldTable, "merge", merge)
    again = compact(spark, config)  # the failed table is retried; the other is done
    assert not again.failures
    bad = DeltaTable(str(layout.gold("s", "bad"))).to_pyarrow_table().to_pylist()
    assert bad == [{"id": 1, "v": 7, "_commit_ts": 110}]


def test_changes_that_would_widen_a_table_past_max_table_columns_fail_that_table(spark, tmp_path):
    """Each image within the limit, but together naming more columns than a table may have:
    the table fails, naming the limit, instead of growing (a 40k-column table held compaction
    for 96 s, again on every run); the other table is compacted."""
    log = _Log()
    for number in range(3):
        image = {"id": _column("c_int", number, key=True)}
        image |= {f"c{number}_{i}": _column("c_int", i) for i in range(8)}
        log.row(110, "wide", "insert", image)
    log.row(110, "narrow", "insert", {"id": _column("c_int", 1, key=True)})
    log.resolved(120)
    config, layout = log.landed(spark, tmp_path)
    config = dataclasses.replace(config, limits=Limits(max_table_columns=20))

    with pytest.raises(CompactError) as failed:
        compact(spark, config)

    assert set(failed.value.failures) == {"s.wide"}
    assert "25 columns, more than limits.max-table-columns = 20" in failed.value.failures["s.wide"]
    assert not (layout.gold("s", "wide") / "_delta_log").exists()
    assert DeltaTable(str(layout.gold("s", "narrow"))).to_pyarrow_table().num_rows == 1
