"""Hostile upstream names end to end, with the data-quality checks on, in every protocol that
carries names as TiDB holds them (Avro's encoder reduces every name to [A-Za-z0-9_]).

The exports hold the hostile-names workload (workload.tables.hostile_tables): a schema that is
an absolute path, schemas ``../quality`` and ``../silver`` over the lake's own tables, names
that differ only in case, in a dot against a slash and in Unicode normalisation, a table named
with terminal control characters, and columns named with a backtick, a dot, a space, a keyword
and a non-ASCII letter, as keys and not, renamed by CHANGE COLUMN. Beside them, a table of
5,000 columns (TiDB allows 4,096): its CREATE TABLE and its row go to quarantine.

Gold must equal the generator's tables at the watermark, nothing may be written outside the
lake's gold folder, and no lake table may be overwritten.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.compute as pc
import pytest
import yaml
from deltalake import DeltaTable
from ticdc_lake.app.pipeline import run_stages
from ticdc_lake.bronze import exports
from ticdc_lake.config import load_config
from ticdc_lake.gold.state import read_state
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.protocols import make_encoder
from ticdc_lake.quality.results import RESULTS_SCHEMA
from ticdc_lake.records import KafkaRecord
from ticdc_lake.sample.workload.expected_gold import ExpectedGold
from ticdc_lake.sample.workload.generator import HOSTILE_NAMES
from ticdc_lake.sample.workload.output import GenerateOptions, codec_settings, write_generated
from ticdc_lake.sample.workload.tables import ABSOLUTE_SCHEMA
from ticdc_lake.silver.events import DdlEvent, RowEvent

from tests.gold.test_compact import _column

pytestmark = [pytest.mark.spark, pytest.mark.slow]

PROTOCOLS = ("open-protocol", "craft", "canal-json")
WIDE_COLUMNS = 5_000
LAKE_FOLDERS = {"bronze", "silver", "gold", "state", "quality", "_scratch"}
PATH_TOPIC = "../../escape"  # a record's topic, as an untrusted export may give it


def wide_records(options: GenerateOptions, topic: str, ts: int, first_offset: int):
    """A CREATE TABLE of WIDE_COLUMNS columns and a row of them, as TiCDC would send them."""
    names = [f"c{i}" for i in range(WIDE_COLUMNS)]
    create = "CREATE TABLE `wide`.`t` (" + ", ".join(f"`{n}` int" for n in names) + ")"
    row = {n: _column("c_int", i, key=n == "c0") for i, n in enumerate(names)}
    where = {"topic": topic, "partition": 0, "offset": 0}
    events = [
        DdlEvent(ts, "wide", "t", create, 3, **where),
        RowEvent(ts, "wide", "t", "insert", row, None, **where),
    ]
    encoder = make_encoder(options.protocol, codec_settings(options))
    messages = [m for event in events for m in encoder.encode([event])]
    return [KafkaRecord(topic, 0, first_offset + i, m.key, m.value) for i, m in enumerate(messages)]


@pytest.fixture(scope="module", params=PROTOCOLS)
def hostile(request, spark, tmp_path_factory):
    shutil.rmtree(ABSOLUTE_SCHEMA, ignore_errors=True)
    protocol = request.param
    directory = tmp_path_factory.mktemp(protocol)
    options = GenerateOptions(
        protocol=protocol, profile=HOSTILE_NAMES, partitions=3, seed=52, transactions=150,
        layout="jsonl",
    )  # fmt: skip
    output = write_generated(directory / "sample", options)
    (topic, _), stream = sorted(output.encoded.items())[0]
    extra = wide_records(options, topic, output.workload.resolved_ts[0], len(stream.records))
    extra.append(KafkaRecord(PATH_TOPIC, 0, 0, b"key", b"value"))
    exports.write_export(output.out_dir / "exports" / "wide.jsonl", extra, "jsonl")
    document = yaml.safe_load(output.config_path.read_text())
    document["lake"] = str(directory / "lake")
    # The wide table's records and the stray topic's are quarantined: the run goes on, warning.
    document["quality"] = {"policies": {"decode_rate": "warn"}}
    output.config_path.write_text(yaml.safe_dump(document, sort_keys=False))
    config = load_config(output.config_path)
    first = run_stages(spark, config, quality=True)
    versions = table_versions(LakeLayout(config.lake))
    second = run_stages(spark, config, quality=True)
    return output, config, first, second, versions


def table_versions(layout: LakeLayout) -> dict[str, int]:
    found = {}
    for path in layout.root.rglob("_delta_log"):
        found[str(path.parent.relative_to(layout.root))] = DeltaTable(str(path.parent)).version()
    return found


def test_gold_is_the_workload_at_the_watermark(hostile):
    output, config, first, _, _ = hostile
    assert not first.failed, first.to_dict()
    (feed,) = first.result("compact").changefeeds
    expected = ExpectedGold.from_workload(output.workload)
    assert expected.compare(config.lake, feed.target) == []
    assert len(feed.tables) == len(output.workload.tables)


def test_nothing_is_written_outside_the_gold_folder(hostile):
    _, config, *_ = hostile
    layout = LakeLayout(config.lake)
    assert not Path(ABSOLUTE_SCHEMA).exists()
    assert {p.name for p in layout.root.iterdir()} <= LAKE_FOLDERS
    gold = layout.gold_root.resolve()
    states = read_state(layout.gold_state)
    paths = {Path(s.path).resolve() for s in states}
    assert len(paths) == len(states) == 10
    assert all(p.parent.parent == gold for p in paths)
    gold_tables = {Path(k) for k in table_versions(layout) if k.startswith("gold/")}
    assert gold_tables == {Path(s.path).relative_to(layout.root) for s in states}


def test_the_lakes_own_tables_keep_their_schemas_and_rows(hostile):
    _, config, *_ = hostile
    layout = LakeLayout(config.lake)
    results = DeltaTable(str(layout.quality_results)).to_pyarrow_table()
    assert set(RESULTS_SCHEMA.names) <= set(results.column_names)
    assert set(results.column("stage").to_pylist()) == {"bronze", "silver", "gold"}
    watermarks = DeltaTable(str(layout.watermarks)).to_pyarrow_table()
    assert watermarks.num_rows == 3


def test_a_table_wider_than_tidb_allows_goes_to_quarantine(hostile):
    _, config, *_ = hostile
    layout = LakeLayout(config.lake)
    quarantine = DeltaTable(str(layout.quarantine)).to_pyarrow_table()
    wide = quarantine.filter(pc.match_substring(quarantine.column("error"), "max-table-columns"))
    assert wide.num_rows == 2
    assert all("limits.max-table-columns = 4,096" in e for e in wide.column("error").to_pylist())
    assert not any(s.schema == "wide" for s in read_state(layout.gold_state))


def test_a_topic_named_like_a_path_stays_a_partition_of_bronze(hostile):
    _, config, *_ = hostile
    layout = LakeLayout(config.lake)
    assert not list(layout.root.parent.rglob("escape"))  # only as a partition value
    bronze = DeltaTable(str(layout.bronze)).to_pyarrow_table(columns=["topic"])
    assert PATH_TOPIC in bronze.column("topic").to_pylist()
    quarantine = DeltaTable(str(layout.quarantine)).to_pyarrow_table(columns=["topic", "error"])
    assert quarantine.filter(pc.equal(quarantine.column("topic"), PATH_TOPIC)).num_rows == 1


def test_a_second_run_changes_nothing(hostile):
    _, config, _, second, versions = hostile
    assert not second.failed
    assert table_versions(LakeLayout(config.lake)) == versions | {
        # Each run's checks are recorded, as its report shows.
        "quality/results": table_versions(LakeLayout(config.lake))["quality/results"]
    }


def test_names_reach_the_terminal_escaped(hostile):
    """A table named with ESC sequences cleared the screen and printed a fake verdict."""
    _, config, *_ = hostile
    shown = subprocess.run(
        [sys.executable, "-m", "ticdc_lake", "dq-report", "--config", str(config.source)],
        capture_output=True, check=False, timeout=120,
    )  # fmt: skip
    assert shown.returncode in (0, 1), shown.stderr
    assert b"\x1b" not in shown.stdout + shown.stderr and b"\r" not in shown.stdout
    assert b"\\x1b[2J\\x1b[HEvery check passed\\x0d" in shown.stdout
