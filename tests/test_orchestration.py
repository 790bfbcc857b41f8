"""The light module the DAGs parse with: TSO <-> time, backfill ranges, config discovery."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys

import pytest
from ticdc_lake.orchestration import (
    STAGES,
    TSO_MAX,
    BackfillParamError,
    ConfigNameCollisionError,
    check_range,
    discover_configs,
    interval_range,
    moment_of,
    parse_ts,
    requested_range,
    tso_of,
)

UTC = dt.UTC
NOON = dt.datetime(2026, 1, 2, 12, 0, tzinfo=UTC)
NOON_TSO = int(NOON.timestamp() * 1000) << 18


def test_stages_are_the_pipelines():
    from ticdc_lake.app.pipeline import STAGES as PIPELINE_STAGES

    assert STAGES == PIPELINE_STAGES


def test_module_imports_nothing_heavy():
    code = (
        "import sys, ticdc_lake.orchestration; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('pyspark', 'deltalake', 'pyarrow', 'airflow', 'yaml')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_tso_is_unix_millis_shifted_18():
    assert tso_of(NOON) == NOON_TSO
    assert moment_of(NOON_TSO + 12345) == NOON  # the logical part is below a millisecond
    with pytest.raises(ValueError, match="no time zone"):
        tso_of(NOON.replace(tzinfo=None))


@pytest.mark.parametrize(
    "text",
    [str(NOON_TSO), f" {NOON_TSO} ", "2026-01-02T12:00:00+00:00", "2026-01-02T12:00:00Z",
     "2026-01-02T20:00:00+08:00", "2026-01-02T12:00:00.000+00:00"],
)  # fmt: skip
def test_parse_ts_takes_a_tso_or_a_zoned_time(text):
    assert parse_ts(text, "start_ts") == NOON_TSO


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("yesterday", r"start_ts: 'yesterday' is neither a TSO .* nor an ISO-8601 time"),
        ("", r"start_ts: '' is neither a TSO"),
        ("-5", r"start_ts: '-5' is neither a TSO"),
        ("2026-01-02T12:00:00", r"has no time zone; add one"),
        (str(1 << 64), r"larger than any TSO"),
        ("1969-12-31T00:00:00+00:00", r"before 1970"),
    ],
)
def test_parse_ts_says_what_is_wrong(text, message):
    with pytest.raises(BackfillParamError, match=message):
        parse_ts(text, "start_ts")


@pytest.mark.parametrize("end", [False, True], ids=["start", "end"])
@pytest.mark.parametrize(
    "text",
    ["9999-12-31T23:59:59.999+00:00", "9999-12-31T23:00:00-05:00", "3084-12-12T12:41:28.832Z",
     "5000-01-01T00:00:00+14:00"],
)  # fmt: skip
def test_a_time_past_the_last_tso_is_refused_not_overflowed(text, end):
    """A TSO is kept as a signed 64-bit number: its last millisecond is in 3084. A later time,
    up to datetime's own end (where adding a millisecond or a zone overflowed), is refused
    with the reason, as the DAG's plan task and spark_jobs/backfill.py (exit 2) report it."""
    with pytest.raises(BackfillParamError, match=r"is after 3084-12-12T12:41:28\.831\+00:00, the "):
        parse_ts(text, "end_ts", end=end)


def test_the_last_millisecond_a_tso_can_hold_is_accepted():
    last = "3084-12-12T12:41:28.831+00:00"
    assert parse_ts(last, "end_ts", end=True) == TSO_MAX
    assert parse_ts(last, "start_ts") == TSO_MAX - (1 << 18) + 1
    assert parse_ts("1970-01-01T00:00:00Z", "start_ts") == 0
    with pytest.raises(BackfillParamError, match="before 1970"):
        parse_ts("0001-01-01T00:30:00+01:00", "start_ts")  # converting it to UTC overflowed


def test_a_tso_of_thousands_of_digits_is_larger_than_any():
    with pytest.raises(BackfillParamError, match=r"start_ts: 1{20}\.\.\.\(5000 digits\) is larger"):
        parse_ts("1" * 5000, "start_ts")
    assert parse_ts("0" * 5000 + "7", "start_ts") == 7


def test_an_end_time_takes_its_whole_millisecond():
    assert parse_ts("2026-01-02T12:00:00Z", "end_ts", end=True) == NOON_TSO + (1 << 18) - 1
    assert parse_ts(str(NOON_TSO), "end_ts", end=True) == NOON_TSO  # a TSO is taken as given


def test_a_data_interval_maps_to_its_tsos_end_excluded():
    start, end = interval_range(NOON, NOON + dt.timedelta(hours=1))
    assert start == NOON_TSO
    assert end == (int((NOON + dt.timedelta(hours=1)).timestamp() * 1000) << 18) - 1
    assert moment_of(end) < NOON + dt.timedelta(hours=1)


def test_airflows_pendulum_intervals_map_too():
    import pendulum

    start = pendulum.datetime(2026, 1, 2, 12, tz="UTC")
    assert interval_range(start, start.add(hours=1)) == interval_range(
        NOON, NOON + dt.timedelta(hours=1)
    )
    assert tso_of(pendulum.datetime(2026, 1, 2, 20, tz="Asia/Shanghai")) == NOON_TSO


def test_requested_range_prefers_params_then_the_interval():
    interval = (NOON, NOON + dt.timedelta(hours=1))
    assert requested_range("5", "9", interval) == (5, 9)
    noon = "2026-01-02T12:00:00Z"
    assert requested_range(noon, noon, None) == (NOON_TSO, NOON_TSO + (1 << 18) - 1)
    assert requested_range("", "", interval) == interval_range(*interval)
    assert requested_range("", None, None) is None
    with pytest.raises(BackfillParamError, match="end_ts is empty"):
        requested_range("5", "", interval)


def test_check_range_refuses_backwards_and_past_the_watermark():
    check_range(10, 20, watermark=20)
    with pytest.raises(BackfillParamError, match=r"end_ts 10 .* is before start_ts 20"):
        check_range(20, 10, watermark=30)
    with pytest.raises(BackfillParamError, match=r"end_ts 40 .* above the lake's current"):
        check_range(10, 40, watermark=30)
    with pytest.raises(BackfillParamError, match=r"starts at 35 .* above the lake's current"):
        check_range(35, 40, watermark=30)
    with pytest.raises(BackfillParamError, match="no gold watermark yet: run the pipeline"):
        check_range(10, 20, watermark=None)


def test_discovery_defaults_to_the_demo_sample(tmp_path):
    (source,) = discover_configs({"AIRFLOW_HOME": str(tmp_path)})
    assert source.demo
    assert source.config == tmp_path / "ticdc_lake_demo" / "open-protocol" / "pipeline.yaml"
    assert (source.pipeline_dag_id, source.backfill_dag_id) == ("ticdc_lake", "ticdc_lake_backfill")


def test_discovery_of_a_file_the_variable_or_a_folder(tmp_path):
    one = tmp_path / "one.yaml"
    (source,) = discover_configs({"TICDC_LAKE_CONFIGS": str(one)})  # need not exist at parse time
    assert (source.config, source.pipeline_dag_id, source.demo) == (one, "ticdc_lake", False)
    (source,) = discover_configs({"AIRFLOW_VAR_TICDC_LAKE_CONFIGS": str(one)})
    assert source.config == one

    folder = tmp_path / "configs"
    folder.mkdir()
    assert discover_configs({"TICDC_LAKE_CONFIGS": str(folder)}) == []
    (folder / "orders.yaml").touch()
    (folder / "notes.txt").touch()
    (source,) = discover_configs({"TICDC_LAKE_CONFIGS": str(folder)})
    assert source.pipeline_dag_id == "ticdc_lake"
    (folder / "billing eu.yml").touch()
    ids = [s.backfill_dag_id for s in discover_configs({"TICDC_LAKE_CONFIGS": str(folder)})]
    assert ids == ["ticdc_lake_backfill__billing_eu", "ticdc_lake_backfill__orders"]


@pytest.mark.parametrize(
    ("names", "shared"),
    [(("prod.yaml", "prod.yml"), "ticdc_lake__prod"),
     (("team a.yaml", "team_a.yaml"), "ticdc_lake__team_a"),
     (("t_am.yml", "téam.yaml"), "ticdc_lake__t_am")],
)  # fmt: skip
def test_configs_whose_names_give_one_dag_id_are_refused_naming_both(tmp_path, names, shared):
    """One pipeline would replace the other silently: the DAG files fail to import instead."""
    for name in (*names, "orders.yaml"):
        (tmp_path / name).touch()
    with pytest.raises(ConfigNameCollisionError) as refused:
        discover_configs({"TICDC_LAKE_CONFIGS": str(tmp_path)})
    message = str(refused.value)
    assert f"{names[0]!r} and {names[1]!r} both give the DAG ids {shared} and " in message
    assert shared.replace("ticdc_lake", "ticdc_lake_backfill") in message
    assert "orders" not in message and str(tmp_path) in message
