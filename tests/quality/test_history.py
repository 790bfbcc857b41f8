"""quality/results read a few files at a time (quality.history) and written so that stays cheap
(quality.store): what the bounded reads find equals what a full read finds, in the layout this
version writes, in the one older versions wrote, and in tables whose files mix stages and
batches or carry no statistics; the report opens only the files its page shows."""

from __future__ import annotations

import datetime as dt
import json
import random
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.transaction import CommitProperties, Transaction
from ticdc_lake.app import cli
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.quality import store
from ticdc_lake.quality.history import ORDER, SHOWN, ResultsHistory
from ticdc_lake.quality.lakeview import TREND_RUNS, lake_view
from ticdc_lake.quality.report import render_report
from ticdc_lake.quality.results import (
    RESULTS_SCHEMA,
    STATS_COLUMNS,
    CheckOutcome,
    StageValidation,
    results_table,
)
from ticdc_lake.quality.run import previous_validation
from ticdc_lake.quality.settings import CHECKS

from tests.quality.report_lake import write_config

START = dt.datetime(2026, 9, 30, 12, 0, tzinfo=dt.UTC)  # 12 hours of September, then October
OLD_COLUMNS = [name for name in RESULTS_SCHEMA.names if name != "month"]  # before this version
STAGE_CHECKS = {stage: [c for c, spec in CHECKS.items() if spec.stage == stage]
                for stage in ("bronze", "silver", "gold")}  # fmt: skip


def validations(count: int, seed: int = 0) -> list[StageValidation]:
    """``count`` hourly runs of the three stages, in commit order: every check of the stage,
    decode_rate and freshness_lag with changing values, a few failures with samples, freshness
    once per changefeed, and a run now and then that validated a stage twice in one hour."""
    rng = random.Random(seed)
    found = []
    for hour in range(count):
        for stage, checks in STAGE_CHECKS.items():
            started = START + dt.timedelta(hours=hour, seconds=rng.randrange(600))
            finished = started + dt.timedelta(seconds=rng.randrange(5, 90))
            validation = StageValidation(f"{stage}-{hour}-{seed}", stage, hour, started, finished)
            for check in checks:
                feeds = ["shop", "ledger"] if check == "freshness_lag" else [None]
                for feed in feeds:
                    ok = rng.random() > 0.1
                    observed = {"min_rate": rng.random(), "lag_seconds": {feed: rng.random()}}
                    sample = () if ok else ({"id": rng.randrange(1000), "table": "shop.t"},)
                    outcome = CheckOutcome(check, ok, observed, 0 if ok else 1, sample,
                                           "" if ok else f"{check} failed", feed,
                                           ge_result={"results": ["x" * 200]})  # fmt: skip
                    validation.outcomes.append((outcome, rng.choice(["fail", "warn"])))
            found.append(validation)
    return found


def commit(path: Path, table: pa.Table, stage: str, batch: int, **options) -> None:
    props = CommitProperties(app_transactions=[Transaction(f"quality-{stage}", batch)])
    write_deltalake(str(path), table, mode="append", commit_properties=props, **options)


def write_new(layout: LakeLayout, runs: list[StageValidation]) -> None:
    for validation in runs:
        store.write_results(layout, validation, app_id=f"quality-{validation.stage}",
                            version=validation.batch)  # fmt: skip


def write_old(layout: LakeLayout, runs: list[StageValidation], **options) -> None:
    """As versions before this one wrote it: one unpartitioned file per validation, every
    column's statistics, no month column."""
    for validation in runs:
        table = results_table(validation, OLD_COLUMNS)
        commit(layout.quality_results, table, validation.stage, validation.batch, **options)


def write_mixed(layout: LakeLayout, runs: list[StageValidation]) -> None:
    """Several validations of every stage per file, out of order: each file's statistics span
    stages and wide batch ranges (what a Spark job or a compaction of such a table leaves)."""
    shuffled = runs[:]
    random.Random(7).shuffle(shuffled)
    for start in range(0, len(shuffled), 7):
        chunk = shuffled[start : start + 7]
        rows = pa.concat_tables(results_table(v, OLD_COLUMNS) for v in chunk)
        write_deltalake(str(layout.quality_results), rows, mode="append")


LAYOUTS = {
    "this version's": write_new,
    "an older version's": write_old,
    "files mixing stages": write_mixed,
    "without statistics": lambda layout, runs: write_old(
        layout, runs, configuration={"delta.dataSkippingNumIndexedCols": "0"}
    ),
}


def full_read(layout: LakeLayout) -> list[dict]:
    return DeltaTable(str(layout.quality_results)).to_pyarrow_table().to_pylist()


def expected_latest(rows: list[dict], stage: str) -> list[dict]:
    """The rule the report always had: the run of the stage's highest (batch, finish)."""
    mine = [r for r in rows if r["stage"] == stage]
    last = max(mine, key=lambda r: (r["batch"], r["finished_at"]))["run_id"]
    return [r for r in mine if r["run_id"] == last]


def expected_recent(rows: list[dict], check: str, count: int) -> list[dict]:
    """The check's last ``count`` rows in ORDER (a null first)."""
    mine = sorted((r for r in rows if r["check"] == check),
                  key=lambda r: [(r[c] is not None, r[c] if r[c] is not None else "")
                                 for c in ORDER])  # fmt: skip
    return mine[-count:]


def key(row: dict, columns) -> tuple:
    return tuple(json.dumps(row[c], default=str) for c in columns)


@pytest.fixture
def small_compaction(monkeypatch):
    monkeypatch.setattr(store, "COMPACT_AT", 5)


@pytest.mark.slow  # a few seconds: out of the fast tier
@pytest.mark.parametrize("layout_name", list(LAYOUTS))
def test_bounded_reads_find_what_a_full_read_finds(tmp_path, small_compaction, layout_name):
    layout = LakeLayout(write_config(tmp_path).lake)
    runs = validations(20, seed=len(layout_name))
    runs += [runs[-2]]  # a replay: commits nothing in this version's layout
    LAYOUTS[layout_name](layout, runs)
    rows = full_read(layout)
    history = ResultsHistory.open(layout.quality_results)
    for stage in STAGE_CHECKS:
        found = history.latest(stage)
        assert sorted(key(r, SHOWN) for r in found) == sorted(
            key(r, SHOWN) for r in expected_latest(rows, stage)
        ), stage
        assert "ge_result" not in found[0]
    for check in ("decode_rate", "freshness_lag", "bronze_offset_gaps"):
        for count in (1, 3, TREND_RUNS, 1000):
            found = history.recent(check, count)
            wanted = expected_recent(rows, check, count)
            columns = ("batch", "check", "observed", "finished_at", "changefeed")
            assert [key(r, columns) for r in found] == [key(r, columns) for r in wanted]


def test_an_empty_stage_or_table_has_no_validation(tmp_path):
    layout = LakeLayout(write_config(tmp_path).lake)
    assert ResultsHistory.open(layout.quality_results) is None
    write_new(layout, [v for v in validations(2) if v.stage == "bronze"])
    history = ResultsHistory.open(layout.quality_results)
    assert history.latest("gold") == [] and history.recent("freshness_lag", 5) == []
    assert len(history.latest("bronze")) == len(STAGE_CHECKS["bronze"])


@pytest.mark.slow  # a few seconds: out of the fast tier
def test_results_are_partitioned_by_stage_and_month_and_months_compacted(
    tmp_path, small_compaction
):
    layout = LakeLayout(write_config(tmp_path).lake)
    runs = validations(20)  # hourly: 12 runs of each stage in September, then 8 in October
    write_new(layout, runs)
    table = DeltaTable(str(layout.quality_results))
    assert table.metadata().partition_columns == ["stage", "month"]
    files = pa.table(table.get_add_actions(flatten=True))
    per_partition: dict[tuple, int] = {}
    for stage, month in zip(files.column("partition.stage").to_pylist(),
                            files.column("partition.month").to_pylist(), strict=True):  # fmt: skip
        per_partition[stage, month] = per_partition.get((stage, month), 0) + 1
    for stage in STAGE_CHECKS:
        assert per_partition[stage, "2026-09"] == 1  # over: compacted into one file
        assert per_partition[stage, "2026-10"] == 4  # compacted at its 5th file, then 3 more
    statistics = {name.split(".", 1)[1] for name in files.column_names if name.startswith("max.")}
    assert statistics == set(STATS_COLUMNS)
    assert len(full_read(layout)) == sum(len(v.outcomes) for v in runs)  # compaction lost none
    for stage in STAGE_CHECKS:  # the app versions a rerun is refused by are kept
        last = max(v.batch for v in runs if v.stage == stage)
        assert table.transaction_version(f"quality-{stage}") == last
    again = store.write_results(layout, runs[-1], app_id="quality-gold", version=runs[-1].batch)
    assert again.skipped and not again.committed


def test_an_older_versions_table_is_read_and_appended_to_as_it_is(tmp_path, small_compaction):
    layout = LakeLayout(write_config(tmp_path).lake)
    runs = validations(6)
    write_old(layout, runs[:9])
    write_new(layout, runs[9:])
    table = DeltaTable(str(layout.quality_results))
    assert table.metadata().partition_columns == []
    assert [f.name for f in table.schema().fields] == OLD_COLUMNS
    assert len(table.file_uris()) == len(runs)  # one file per validation: not compacted
    history = ResultsHistory.open(layout.quality_results)
    assert {r["run_id"] for r in history.latest("gold")} == {runs[-1].run_id}
    assert len(history.recent("decode_rate", 100)) == 6


def test_a_rerun_with_nothing_new_reports_the_stages_last_validation(tmp_path):
    layout = LakeLayout(write_config(tmp_path).lake)
    runs = validations(5)
    write_new(layout, runs)
    last = runs[-2]  # silver's last
    found = previous_validation(layout, "silver", START)
    assert found.run_id == last.run_id and found.batch is None
    assert sorted((o.check, o.success, p) for o, p in found.outcomes) == sorted(
        (o.check, o.success, p) for o, p in last.outcomes
    )
    assert found.failed == last.failed


@pytest.mark.slow  # a few seconds: out of the fast tier
def test_the_report_opens_only_the_results_files_its_page_shows(tmp_path):
    """A report over a results table an older version wrote (one file per validation) whose
    older files cannot be read: the page still renders, from the newest files alone. A full
    read, as the report did, fails on the first of them."""
    config = write_config(tmp_path)
    layout = LakeLayout(config.lake)
    runs = validations(40)
    write_old(layout, runs)
    newest = {v.run_id for v in runs[-3 * (TREND_RUNS + 1) :]}
    table = DeltaTable(str(layout.quality_results))
    for path, run_id in zip(table.file_uris(),
                            pa.table(table.get_add_actions(flatten=True)).column("min.run_id")
                            .to_pylist(), strict=True):  # fmt: skip
        if run_id not in newest:
            Path(path).write_bytes(b"not a parquet file" * 100)
    html = render_report(lake_view(config, now=START.timestamp()))
    assert f"batch {runs[-1].batch}" in html and "(20 runs)" in html


def test_dq_relayout_moves_an_older_versions_table_to_this_layout_keeping_every_row(
    tmp_path, small_compaction, capsys
):
    config = write_config(tmp_path)
    layout = LakeLayout(config.lake)
    runs = validations(20)  # September and October
    write_old(layout, runs)
    before = full_read(layout)
    history = ResultsHistory.open(layout.quality_results)
    pages = [history.latest(stage) for stage in STAGE_CHECKS]

    assert cli.main(["dq-relayout", "--config", str(config.source), "--lock-wait", "0"]) == 0
    assert "partitioned by stage and month" in capsys.readouterr().out
    table = DeltaTable(str(layout.quality_results))
    assert table.metadata().partition_columns == ["stage", "month"]
    assert len(table.file_uris()) == 6  # a file per stage and month
    after = full_read(layout)
    assert all(row["month"] == row["started_at"].strftime("%Y-%m") for row in after)
    assert sorted(key(r, OLD_COLUMNS) for r in after) == sorted(key(r, OLD_COLUMNS) for r in before)
    for stage in STAGE_CHECKS:  # a rerun is still refused for what was validated
        last = max(v.batch for v in runs if v.stage == stage)
        assert table.transaction_version(f"quality-{stage}") == last
    history = ResultsHistory.open(layout.quality_results)
    assert [history.latest(stage) for stage in STAGE_CHECKS] == pages
    (kept,) = layout.quality_results.parent.glob("results.before-relayout-*")
    assert len(DeltaTable(str(kept)).to_pyarrow_table()) == len(before)  # the old one, aside

    write_new(layout, validations(22)[-3:])  # appended in the layout, and compacted
    assert len(full_read(layout)) == len(before) + 3 * len(STAGE_CHECKS["bronze"]) + 1
    assert cli.main(["dq-relayout", "--config", str(config.source)]) == 0
    assert "nothing to do" in capsys.readouterr().out
