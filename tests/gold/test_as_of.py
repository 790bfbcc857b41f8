"""Gold as of a TSO: after two runs with different watermarks, the earlier TSO gives the earlier
gold exactly, through the library, the CLI and Spark SQL; TSOs gold cannot answer are refused
with the reason."""

from __future__ import annotations

import json

import pytest
from deltalake import DeltaTable
from ticdc_lake.app.cli import main
from ticdc_lake.gold.as_of import AsOfError, read_as_of, version_as_of
from ticdc_lake.gold.compact import compact

from tests.gold.test_compact import _column, _Log

pytestmark = pytest.mark.spark


def row(key: int, value: int) -> dict:
    return {"id": _column("c_int", key, key=True), "v": _column("c_int", value)}


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory):
    return two_runs(spark, tmp_path_factory.mktemp("as-of"))


def two_runs(spark, directory):
    """Run one compacts to TS 150 (rows 1 and 2), run two to 250 (2 changed, 3 added, 1 gone)."""
    log = _Log()
    log.ddl(100, "CREATE TABLE s.t (id int PRIMARY KEY, v int)", "t")
    log.row(110, "t", "insert", row(1, 10))
    log.row(120, "t", "insert", row(2, 20))
    log.resolved(150)
    log.row(210, "t", "update", row(2, 21), row(2, 20))
    log.row(220, "t", "insert", row(3, 30))
    log.row(230, "t", "delete", None, row(1, 10))
    log.resolved(250)
    config, layout = log.landed(spark, directory)
    compact(spark, config, until_ts=150)
    first = DeltaTable(str(layout.gold("s", "t"))).to_pyarrow_table().to_pylist()
    compact(spark, config)
    return config, layout, first


def by_key(rows) -> list[dict]:
    return sorted(rows, key=lambda r: r["id"])


def test_an_earlier_tso_gives_the_earlier_gold_exactly(spark, lake):
    _, layout, first = lake
    for tso in (150, 200, 249):
        as_of = version_as_of(layout, "s", "t", tso)
        assert as_of.watermark == 150
        assert by_key(read_as_of(as_of).to_pylist()) == by_key(first)
        through_spark = [r.asDict() for r in spark.sql(as_of.spark_sql).collect()]
        assert by_key(through_spark) == by_key(first)
    latest = version_as_of(layout, "s", "t", 250)
    assert latest.watermark == 250 and latest.version > version_as_of(layout, "s", "t", 150).version
    assert [r["id"] for r in by_key(read_as_of(latest).to_pylist())] == [2, 3]


def test_the_cli_prints_the_rows_the_version_and_its_spark_sql(lake, capsys):
    config, _, first = lake
    argv = ["query", "--config", str(config.source), "--table", "s.t", "--as-of", "200"]
    assert main([*argv, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["reflects"] == 150 and by_key(printed["rows"]) == by_key(first)
    assert printed["spark_sql"].endswith(f"VERSION AS OF {printed['version']}")
    assert main([*argv, "--csv"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "id,v,_commit_ts"
    assert main(argv) == 0
    assert "s.t as of TS 200: gold version" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("tso", "why"),
    [
        (251, "above the watermark gold table s.t reflects (250)"),
        (149, "below the first TS gold table s.t was compacted to"),
    ],
)
def test_a_tso_gold_cannot_answer_is_refused_saying_why(lake, tso, why, capsys):
    config, layout, _ = lake
    with pytest.raises(AsOfError, match=why.replace("(", r"\(").replace(")", r"\)")):
        version_as_of(layout, "s", "t", tso)
    argv = ["query", "--config", str(config.source), "--table", "s.t", "--as-of", str(tso)]
    assert main(argv) == 1
    assert why in capsys.readouterr().err


def test_a_table_not_in_gold_or_a_bad_as_of_is_refused(lake, capsys):
    config, layout, _ = lake
    with pytest.raises(AsOfError, match=r"no gold table s\.other"):
        version_as_of(layout, "s", "other", 200)
    argv = ["query", "--config", str(config.source), "--table", "s.t", "--as-of", "soon"]
    assert main(argv) == 2
    assert "neither a TSO" in capsys.readouterr().err


def test_a_tso_older_than_the_retained_history_is_refused(spark, tmp_path):
    _, layout, _ = two_runs(spark, tmp_path)
    gold = DeltaTable(str(layout.gold("s", "t")))
    gold.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    with pytest.raises(AsOfError, match=r"older than the retained history of gold table s\.t"):
        version_as_of(layout, "s", "t", 200)
    assert version_as_of(layout, "s", "t", 250).watermark == 250  # the newest is kept
