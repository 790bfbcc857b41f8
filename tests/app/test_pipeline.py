"""The pipeline library: stages in order on one session, the summary, the spark-submit helper,
the example config, and the typed expected gold the demo checks against."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from deltalake import DeltaTable
from ticdc_lake.app import pipeline
from ticdc_lake.app.cli import main as cli_main
from ticdc_lake.app.pipeline import STAGES, pipeline_order, render_summary, run_stages, tso_time
from ticdc_lake.backfill.run import run_backfill
from ticdc_lake.bronze.land import LandError
from ticdc_lake.config import load_config
from ticdc_lake.errors import ConfigError
from ticdc_lake.gold.compact import compact
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.lake.lock import LOCK_WAIT_ENV, LakeLockedError
from ticdc_lake.sample.workload import generate_workload
from ticdc_lake.sample.workload.expected_gold import ExpectedGold
from ticdc_lake.sample.workload.output import GenerateOptions, write_generated
from ticdc_lake.silver.watermark import ChangefeedWatermark

from tests.golden_files import assert_golden, mask_keys, mask_paths, mask_seconds
from tests.lake.test_lock import hold_lock

REPO = Path(__file__).resolve().parents[2]


def test_the_example_config_loads_with_every_section():
    config = load_config(REPO / "include" / "pipeline.example.yaml")
    assert {t.protocol for t in config.topics.values()} == {"open-protocol", "canal-json", "avro"}
    assert config.topic("tidb1-orders").compression == "lz4"
    assert config.topic("tidb1-orders").time_zone == "Asia/Shanghai"
    assert config.topic("tidb2-billing-invoices").schema_registry.password_env
    assert dict(config.topic("tidb1-inventory").options) == {"content_compatible": True}
    assert config.changefeeds["tidb1"].topics == ("tidb1-orders", "tidb1-inventory")
    billing = config.changefeeds["tidb2-billing"]
    assert (billing.watermarks, billing.cutoff_ts) == (False, 450153677196099584)


def test_stages_run_in_pipeline_order_and_unknown_names_are_config_errors():
    assert pipeline_order(["compact", " land", "watermark"]) == ("land", "watermark", "compact")
    assert pipeline_order(STAGES) == STAGES
    with pytest.raises(ConfigError, match=r"unknown stage.*silver.*the stages are land"):
        pipeline_order(["land", "silver"])
    with pytest.raises(ConfigError, match="no stage named"):
        pipeline_order([""])


def test_tso_time_is_the_physical_part_in_utc():
    assert tso_time(1_717_200_000_123 << 18 | 7) == "2024-06-01 00:00:00.123 UTC"


def test_the_watermark_line_says_what_holds_gold():
    config = load_config(REPO / "include" / "pipeline.example.yaml")
    cutoff = config.changefeeds["tidb2-billing"].cutoff_ts
    assert pipeline._watermark_text(config, ChangefeedWatermark("tidb2-billing", False, None)) == (
        f"no watermarks in this protocol: gold cut at cutoff-ts {cutoff} = {tso_time(cutoff)}"
    )
    held_back = ChangefeedWatermark("tidb1", True, 0, unseen=(("tidb1-orders", 5),))
    assert pipeline._watermark_text(config, held_back) == (
        "watermark 0: held back by partitions never seen: tidb1-orders[5]"
    )


# --- one small sample through the stages, in two runs ------------------------------------------


@pytest.fixture(scope="module")
def sample(spark, tmp_path_factory):
    """Open Protocol, 40 transactions, 3 partitions (one idle): land alone, then the rest."""
    out = tmp_path_factory.mktemp("pipeline")
    options = GenerateOptions("open-protocol", partitions=3, transactions=40, seed=3)
    generated = write_generated(out, options)
    config = load_config(generated.config_path)
    landed = run_stages(spark, config, ["land"])
    rest = run_stages(spark, config, ["compact", "decode", "watermark"])
    versions = delta_versions(config.lake)
    again = run_stages(spark, config)
    return generated, config, landed, rest, again, (versions, delta_versions(config.lake))


def delta_versions(lake: Path) -> dict[str, int]:
    """Every Delta table under the lake and its version."""
    return {
        str(log.parent.relative_to(lake)): DeltaTable(str(log.parent)).version()
        for log in lake.rglob("_delta_log")
    }


def test_each_run_holds_its_stages_results_in_order(sample):
    generated, _, landed, rest, *_ = sample
    assert [run.stage for run in landed.runs] == ["land"]
    assert [run.stage for run in rest.runs] == ["decode", "watermark", "compact"]
    assert not landed.failed and not rest.failed
    assert landed.result("land").records_added == generated.manifest["counts"]["messages"]
    decoded = rest.result("decode")
    assert decoded.records == decoded.decoded == landed.result("land").records_added
    assert all(run.seconds > 0 for run in rest.runs)
    document = json.loads(json.dumps(rest.to_dict()))
    assert [stage["stage"] for stage in document["stages"]] == ["decode", "watermark", "compact"]
    assert document["stages"][2]["result"]["changefeeds"][0]["mode"] == "watermark"


def test_gold_matches_the_generator_at_the_watermark(sample):
    generated, config, _, rest, *_ = sample
    (feed,) = rest.result("watermark").changefeeds
    assert feed.watermark == generated.workload.resolved_ts[-1]
    assert ExpectedGold.from_sample(generated.out_dir).compare(config.lake, feed.watermark) == []
    # The rows the pipeline reports are the rows plain deltalake reads.
    layout = LakeLayout(config.lake)
    for name, table in rest.result("compact").tables.items():
        schema, table_name = name.split(".")
        assert DeltaTable(str(layout.gold(schema, table_name))).to_pyarrow_table().num_rows == (
            table.rows
        ), name


def test_a_rerun_finds_nothing_new_adds_no_version_and_says_so(sample):
    _, _, _, rest, again, (before, after) = sample
    assert len(before) >= 10 and after == before
    assert again.result("land").batch_id is None
    assert again.result("decode").batches == ()
    assert again.result("compact").changefeeds[0].noop

    def rows(result) -> dict[str, int]:
        return {name: table.rows for name, table in result.result("compact").tables.items()}

    assert rows(again) == rows(rest)
    text = render_summary(again)
    assert "land" in text and "nothing new" in text
    assert "nothing new to decode" in text and "nothing new to apply" in text


def test_the_summary_names_counts_watermarks_gold_tables_and_paths(sample):
    generated, config, landed, rest, *_ = sample
    text = render_summary(rest)
    (feed,) = rest.result("watermark").changefeeds
    assert f"sample-open-protocol: watermark {feed.watermark} = {tso_time(feed.watermark)}" in text
    assert "gold: watermark at TS" in text
    orders = rest.result("compact").tables["shop.orders"]
    gold_line = ["shop.orders", f"{orders.rows:,}", "watermark", "@", str(feed.watermark)]
    assert gold_line in [line.split() for line in text.splitlines()]
    records = landed.result("land").records_added
    decoded = rest.result("decode")
    assert f"{records:,} records = {records:,} decoded + 0 quarantined" in text
    assert f"{decoded.events['delete']:,} delete" in text
    assert f"holds {records:,} bronze records" in text
    assert f"Lake: {config.lake}" in text and f"config:  {config.source}" in text
    assert f"reports: {config.reports} (no HTML report yet" in text  # no missing path promised
    assert len(generated.export_files) == 1
    assert f"batch 1: 1 file, {records:,} records read" in render_summary(landed)


def test_the_summary_and_its_json_are_the_golden_ones(sample):
    """The run's whole summary (tests/golden/run-summary.txt) and what `ticdc-lake run --json`
    prints of it (run-summary.json), with the sample's folder and the seconds masked."""
    generated, _, _, rest, *_ = sample
    folder = {generated.out_dir: "sample"}
    summary = mask_seconds(mask_paths(render_summary(rest), folder))
    assert_golden("run-summary.txt", summary + "\n")
    document = json.dumps(mask_keys(rest.to_dict(), {"seconds"}), indent=1)
    assert_golden("run-summary.json", mask_paths(document, folder) + "\n")


# --- failures --------------------------------------------------------------------------------


def test_run_rebuild_reapplies_silver_into_a_new_generation_of_the_same_gold(sample, spark):
    # Last of the sample's tests: it rewrites the sample's gold (to the same rows).
    generated, config, _, rest, *_ = sample
    (before,) = rest.result("compact").changefeeds
    rebuilt = run_stages(spark, config, ["compact"], rebuild=True)
    (feed,) = rebuilt.result("compact").changefeeds
    assert feed.generation == before.generation + 1 and not feed.noop
    assert feed.target == before.target
    assert ExpectedGold.from_sample(generated.out_dir).compare(config.lake, feed.target) == []


def test_many_tables_merged_several_at_once_match_the_generator(spark, tmp_path):
    """Four tenants' shops (24 gold tables, their small merges run four at a time): gold is
    what the generator expects after a first compaction to a middle resolved TS, and after a
    second that merges the rest into every table."""
    options = GenerateOptions(
        "open-protocol", profile="realistic", partitions=3, transactions=160, seed=5, tenants=4
    )
    generated = write_generated(tmp_path / "out", options)
    config = load_config(generated.config_path)
    run_stages(spark, config, ["land", "decode", "watermark"])
    expected = ExpectedGold.from_sample(generated.out_dir)
    resolved = generated.workload.resolved_ts
    middle = resolved[len(resolved) // 2]
    first = compact(spark, config, until_ts=middle)
    assert expected.compare(config.lake, middle) == []
    assert len(first.tables) == 24
    second = run_stages(spark, config, ["compact"]).result("compact")
    assert expected.compare(config.lake, resolved[-1]) == []
    merged = [table for table in second.tables.values() if table.upserts or table.deletes]
    assert len(merged) == 24 and all(table.commits <= 2 for table in merged)
    # The ALTERs are the first tenant's: every other tenant's table is one merge.
    assert {t.commits for t in merged if not t.table.startswith("shop.")} == {1}
    layout = LakeLayout(config.lake)
    for name, table in second.tables.items():  # the state rows: each table's own version
        schema, table_name = name.split(".")
        gold = DeltaTable(str(layout.gold(schema, table_name)))
        assert (table.version, table.rows) == (gold.version(), len(gold.to_pyarrow_table()))


def test_a_stage_that_fails_stops_the_stages_after_it(spark, tmp_path, monkeypatch):
    config_path = tmp_path / "pipeline.yaml"
    config_path.write_text("topics: {t: {protocol: craft, partitions: 1}}\n")
    config = load_config(config_path)

    def broken_land(spark, config):
        raise LandError("bronze is in a state land cannot work from")

    monkeypatch.setitem(pipeline._STAGE_FUNCTIONS, "land", broken_land)
    result = run_stages(spark, config)
    assert result.failed and [run.stage for run in result.runs] == ["land"]
    assert result.skipped == ("decode", "watermark", "compact")
    assert result.runs[0].failures == {"land": "bronze is in a state land cannot work from"}
    text = render_summary(result)
    assert "FAILED" in text and "skipped (an earlier stage failed)" in text
    with pytest.raises(ConfigError, match="unknown changefeed"):
        run_stages(spark, config, changefeeds=["nope"])


# --- the spark-submit entry points --------------------------------------------------------------


def _job(name: str):
    spec = importlib.util.spec_from_file_location(f"job_{name}", REPO / "spark_jobs" / f"{name}.py")
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)
    return job


def test_spark_jobs_keep_their_arguments_and_print_one_json_object(
    spark, sample, monkeypatch, capsys
):
    _, config, *_ = sample
    compact_args = _job("compact").parse_args(
        ["--config", "c.yaml", "--changefeed", "a", "--changefeed", "b", "--until-ts", "9"]
    )
    assert compact_args.changefeeds == ["a", "b"] and compact_args.until_ts == 9
    decode_args = _job("decode").parse_args(["--config", "c", "--redecode-batches", "3", "4"])
    assert decode_args.redecode_batches == [3, 4]
    with pytest.raises(SystemExit):
        _job("decode").parse_args(["--config", "c", "--start-ts", "1"])
    land = _job("land")
    monkeypatch.setattr(land, "build_session", lambda name: spark)
    assert land.main(["--config", str(config.source)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["batch_id"] is None and printed["files_seen"] >= 1
    assert land.main(["--config", str(config.source.parent / "missing.yaml")]) == 2
    assert "land: configuration error: cannot read pipeline config" in capsys.readouterr().err


def test_jobs_with_nothing_new_build_no_spark_session(sample, monkeypatch, capsys):
    """The sample has been through every stage: each job's rerun reads only Delta logs and
    small tables, so under spark-submit it skips the seconds of starting a SparkContext."""
    _, config, *_ = sample
    for name in STAGES:
        job = _job(name)
        monkeypatch.setattr(job, "build_session", lambda name: pytest.fail(f"{name}: session"))
        assert job.main(["--config", str(config.source)]) == 0, name
        printed = json.loads(capsys.readouterr().out)
        assert printed, name
    argv = ["run", "--config", str(config.source), "--no-quality", "--json"]
    monkeypatch.setattr(
        "ticdc_lake.runtime.spark.build_session", lambda name: pytest.fail("run: session")
    )
    assert cli_main(argv) == 0


def test_a_locked_lake_fails_the_run_and_every_job_with_exit_1_naming_the_holder(
    tmp_path, monkeypatch, capsys
):
    """Two runs on one lake both added the same records; the second now waits, then refuses
    before any stage runs or any Spark session is built (no Spark needed here)."""
    config_path = tmp_path / "pipeline.yaml"
    config_path.write_text("topics: {t: {protocol: craft, partitions: 1}}\n")
    config = load_config(config_path)
    holder = hold_lock(config.lake, 60)
    try:
        with pytest.raises(LakeLockedError, match=f"pid {holder.pid} "):
            run_stages(None, config, lock_wait=0)
        argv = ["run", "--config", str(config_path), "--lock-wait", "0"]
        assert cli_main(argv, spark=object()) == 1
        err = capsys.readouterr().err
        assert err.startswith("ticdc-lake: the lake is locked by another run: ")
        assert f"pid {holder.pid} " in err and "Traceback" not in err

        land = _job("land")
        monkeypatch.setattr(land, "build_session", lambda name: pytest.fail("session built"))
        result_file = tmp_path / "result.json"
        argv = ["--config", str(config_path), "--lock-wait", "0", "--result-file", str(result_file)]
        assert land.main(argv) == 1
        out, err = capsys.readouterr()
        assert out == "" and err.startswith("land: lake lock: the lake is locked by another run")
        failures = json.loads(result_file.read_text())["failures"]
        assert f"pid {holder.pid} " in failures["lake lock"]
        monkeypatch.setenv(LOCK_WAIT_ENV, "0")  # the default of --lock-wait
        assert land.main(["--config", str(config_path)]) == 1
        assert "the lake is locked" in capsys.readouterr().err
        with pytest.raises(LakeLockedError):  # called as a library, not only as a job
            run_backfill(None, config, 1, 2)
    finally:
        holder.kill()
        holder.wait()
    backfill_args = ["--config", "c", "--start-ts", "1", "--end-ts", "2", "--lock-wait", "5"]
    assert _job("backfill").parse_args(backfill_args).lock_wait == 5
    with pytest.raises(SystemExit):
        _job("compact").parse_args(["--config", "c", "--lock-wait", "-1"])


# --- expected gold ------------------------------------------------------------------------------


def test_expected_gold_from_the_files_equals_the_one_from_memory(tmp_path):
    workload = generate_workload(seed=8, transactions=40)
    write_generated(tmp_path, GenerateOptions("craft", transactions=40, seed=8), workload)
    from_files = ExpectedGold.from_sample(tmp_path)
    in_memory = ExpectedGold.from_workload(workload)
    for ts in workload.resolved_ts[::3]:
        assert from_files.tables_at(ts, "Asia/Shanghai") == in_memory.tables_at(ts, "Asia/Shanghai")
    # A column added by DDL is typed from its ADD COLUMN.
    added = [e for e in workload.ddl_events if "ADD COLUMN" in e.query]
    assert added
    for event in added:
        column = event.query.split("ADD COLUMN `")[1].split("`")[0]
        assert column in from_files.types[f"{event.schema}.{event.table}"], event.query


# --- a lake under a folder named with spaces and non-ASCII characters ---------------------------


@pytest.mark.slow
def test_every_stage_and_the_demo_work_under_a_path_with_spaces_and_non_ascii(spark, tmp_path):
    """Delta's file URIs percent-encode such names; Spark must be given paths it can open."""
    out = tmp_path / "lake dir" / "数据 ü"
    options = GenerateOptions("open-protocol", partitions=2, transactions=20, seed=5)
    generated = write_generated(out / "run", options)
    config = load_config(generated.config_path)
    assert " " in str(config.lake) and "数据" in str(config.lake)
    first = run_stages(spark, config)
    assert not first.failed, render_summary(first)
    (feed,) = first.result("compact").changefeeds
    assert feed.target == generated.workload.resolved_ts[-1]
    assert ExpectedGold.from_sample(generated.out_dir).compare(config.lake, feed.target) == []
    # A second run reads every table back (decode of nothing new, compact's no-op).
    again = run_stages(spark, config)
    assert not again.failed and again.result("compact").changefeeds[0].noop
    demo = out / "demo"
    code = cli_main(
        ["demo", "--out", str(demo), "--protocol", "canal-json", "--transactions", "20"],
        spark=spark,
    )
    assert code == 0


# --- a data file deleted from under a table -----------------------------------------------------


@pytest.fixture
def small_lake(spark, tmp_path):
    options = GenerateOptions("open-protocol", partitions=2, transactions=20, seed=4)
    generated = write_generated(tmp_path / "sample", options)
    config = load_config(generated.config_path)
    assert not run_stages(spark, config).failed
    return config


def test_a_deleted_table_file_fails_the_stage_naming_table_file_and_remedy(
    spark, small_lake, monkeypatch, capsys
):
    layout = LakeLayout(small_lake.lake)
    gone = sorted(layout.ddl.rglob("*.parquet"))[0]
    gone.unlink()
    result = run_stages(spark, small_lake, ["compact"], rebuild=True)
    assert result.failed and result.result("compact") is None
    message = result.runs[0].failures["compact"]
    assert f"Delta table {layout.ddl}" in message and f"data file {gone} is missing" in message
    assert "restore it from a backup" in message and "--rebuild" in message
    assert "! compact: Delta table" in render_summary(result)
    # The spark-submit entry point: the message on stderr, exit status 1.
    job = _job("compact")
    monkeypatch.setattr(job, "build_session", lambda name: spark)
    assert job.main(["--config", str(small_lake.source), "--rebuild"]) == 1
    assert f"compact: compact: Delta table {layout.ddl}" in capsys.readouterr().err


def test_a_file_deleted_where_delta_rs_reads_it_is_found_by_the_stage_runner(spark, small_lake):
    """delta-rs fails without naming the table; the runner looks at the lake's tables."""
    layout = LakeLayout(small_lake.lake)
    gone = sorted(layout.landed_files.rglob("*.parquet"))[0]
    gone.unlink()
    result = run_stages(spark, small_lake, ["land"])
    message = result.runs[0].failures["land"]
    assert f"Delta table {layout.landed_files}" in message and str(gone) in message


def test_an_unreadable_table_file_fails_the_stage_naming_it(spark, small_lake):
    layout = LakeLayout(small_lake.lake)
    broken = sorted(layout.ddl.rglob("*.parquet"))[0]
    broken.write_bytes(broken.read_bytes()[:40])  # truncated, as a half-copied restore
    result = run_stages(spark, small_lake, ["compact"], rebuild=True)
    message = result.runs[0].failures["compact"]
    assert f"Delta table {layout.ddl}: data file {broken} cannot be read" in message
