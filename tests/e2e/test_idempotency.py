"""Idempotency: every stage run twice gives identical tables, and the rerun adds no Delta
version to any table; exports that arrive later are only appended.

The reference lake built here is also the clean run tests/e2e/test_kill_and_rerun.py compares
its killed-and-rerun lake with (``reference_lake`` builds it once per session, for whichever
module asks first). One generated Open Protocol workload (replays, an idle partition, DDLs, key
changes) lands in two rounds: round one is the first share of every partition as Parquet, round
two a JSON Lines re-export that overlaps round one's offsets and carries the rest. In each round
every stage runs twice, in process on the test session, and the whole lake is read after each
run: every table's Delta version, schema and rows (sorted).
"""

from __future__ import annotations

import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from deltalake import DeltaTable
from ticdc_lake.bronze import exports
from ticdc_lake.bronze.land import land
from ticdc_lake.config import PipelineConfig, load_config
from ticdc_lake.gold.compact import compact
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.records import KafkaRecord
from ticdc_lake.sample.workload.output import GeneratedOutput, GenerateOptions, write_generated
from ticdc_lake.silver.decode import decode
from ticdc_lake.silver.watermark import watermark

from tests.e2e.lakes import assert_gold_is_expected

pytestmark = [pytest.mark.spark, pytest.mark.slow]

# Enough records that the killed jobs' bronze and silver writes stay in flight for seconds
# (measured: 5 s and 9 s on 2 busy cores), few enough for CI.
OPTIONS = GenerateOptions(protocol="open-protocol", partitions=4, seed=31, transactions=800)
FIRST_SHARE = 0.55  # of every partition's records, in round one
OVERLAP = 0.15  # round two re-exports this share of every partition before round one's end
ROUND_FORMATS = {1: ("parquet", "none"), 2: ("jsonl", "gz")}
STAGES = {"land": land, "decode": decode, "watermark": watermark, "compact": compact}
# Wall-clock times of a run: the only columns that differ between two correct lakes.
VOLATILE_COLUMNS = frozenset({"landed_at", "decoded_at", "quarantined_at"})


# --- reading a whole lake ---------------------------------------------------------------------


@dataclass(frozen=True)
class TableState:
    """What a reader of one Delta table sees: its version, schema and rows (sorted)."""

    version: int
    schema: str  # the Delta schema, as JSON
    partition_by: tuple[str, ...]
    columns: tuple[str, ...]  # of ``rows``
    rows: list[tuple]

    def column(self, name: str, rows: list[tuple] | None = None) -> list:
        """One column's values, of ``rows`` (some of this table's) or of every row."""
        at = self.columns.index(name)
        return [row[at] for row in (self.rows if rows is None else rows)]


def lake_tables(lake: Path) -> list[str]:
    """Every Delta table under ``lake``, by its path relative to it."""
    return sorted(str(log.parent.relative_to(lake)) for log in lake.glob("**/_delta_log"))


def read_table(
    lake: Path, name: str, version: int | None = None, *, copied_from: Path | None = None
) -> TableState:
    """One table as plain ``deltalake`` reads it, comparable across lakes: run times dropped,
    and the lake's own path (the state table names gold tables by path) made relative, also
    where the lake is a copy of the one at ``copied_from``."""
    table = DeltaTable(str(lake / name), version=version)
    data = table.to_pyarrow_table()
    data = data.select([c for c in data.column_names if c not in VOLATILE_COLUMNS])
    roots = [str(root) for root in (lake, copied_from) if root is not None]
    rows = [tuple(_relative(value, roots) for value in row.values()) for row in data.to_pylist()]
    return TableState(
        table.version(),
        table.schema().to_json(),
        tuple(table.metadata().partition_columns),
        tuple(data.column_names),
        sorted(rows, key=repr),
    )


def _relative(value: Any, roots: list[str]) -> Any:
    for root in roots if isinstance(value, str) else ():
        value = value.replace(root, "<lake>")
    return value


def read_lake(lake: Path, *, copied_from: Path | None = None) -> dict[str, TableState]:
    return {name: read_table(lake, name, copied_from=copied_from) for name in lake_tables(lake)}


def versions(snapshot: dict[str, TableState]) -> dict[str, int]:
    return {name: state.version for name, state in snapshot.items()}


def stage_of(table: str) -> str:
    """The stage that writes ``table`` (each table has exactly one)."""
    if table.startswith("bronze/"):
        return "land"
    if table == "silver/watermarks":
        return "watermark"
    if table.startswith("silver/"):
        return "decode"
    return "compact"  # gold/ and state/


def assert_same_tables(found: dict[str, TableState], expected: dict[str, TableState]) -> None:
    """Table by table, so a failure names the table."""
    assert sorted(found) == sorted(expected)
    for name, state in expected.items():
        assert found[name] == state, name


# --- the reference lake -----------------------------------------------------------------------


@dataclass(frozen=True)
class StageRuns:
    """One stage run twice in one round, and the lake before and after each run."""

    round: int
    stage: str
    before: dict[str, TableState]
    first: dict[str, TableState]
    second: dict[str, TableState]
    first_result: dict[str, Any]
    second_result: dict[str, Any]


@dataclass
class ReferenceLake:
    output: GeneratedOutput
    landing: Path  # the landing area every lake of these tests reads
    config: PipelineConfig
    rounds: dict[int, list[KafkaRecord]]  # the records each round's export file holds
    after_round_one: Path  # a copy of the lake after round one, for others to go on from
    runs: list[StageRuns] = field(default_factory=list)

    @property
    def layout(self) -> LakeLayout:
        return LakeLayout(self.config.lake)

    def run(self, round_number: int, stage: str) -> StageRuns:
        (found,) = [r for r in self.runs if (r.round, r.stage) == (round_number, stage)]
        return found


def split_rounds(output: GeneratedOutput) -> dict[int, list[KafkaRecord]]:
    """Round one: the first share of every partition; round two: the rest, re-exported from a
    little earlier (those records are landed already and must not land again)."""
    rounds: dict[int, list[KafkaRecord]] = {1: [], 2: []}
    for stream in output.encoded.values():
        records = stream.records
        rounds[1].extend(records[: round(len(records) * FIRST_SHARE)])
        rounds[2].extend(records[round(len(records) * (FIRST_SHARE - OVERLAP)) :])
    for records in rounds.values():
        records.sort(key=lambda r: (r.timestamp_ms, r.partition, r.offset))  # produced order
    return rounds


def write_round(landing: Path, rounds: dict[int, list[KafkaRecord]], number: int) -> Path:
    layout, compression = ROUND_FORMATS[number]
    path = landing / exports.export_file_name(f"round-{number}", layout, compression)
    exports.write_export(path, rounds[number], layout, file_compression=compression)
    return path


def write_lake_config(directory: Path, output: GeneratedOutput, landing: Path) -> Path:
    """The generator's pipeline config with the lake in ``directory``, reading ``landing``
    (by absolute path, so lakes in other directories land the very same files)."""
    document = yaml.safe_load(output.config_path.read_text())
    document |= {"lake": "lake", "inputs": [str(landing / "*")]}
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "pipeline.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def _run_round(spark, reference: ReferenceLake, number: int) -> None:
    before = read_lake(reference.config.lake)
    for stage, function in STAGES.items():
        first_result = function(spark, reference.config).to_dict()
        first = read_lake(reference.config.lake)
        second_result = function(spark, reference.config).to_dict()
        second = read_lake(reference.config.lake)
        reference.runs.append(
            StageRuns(number, stage, before, first, second, first_result, second_result)
        )
        before = second


def build_reference(spark, root: Path) -> ReferenceLake:
    output = write_generated(root / "generated", OPTIONS)
    landing = root / "landing"
    landing.mkdir()
    rounds = split_rounds(output)
    config = load_config(write_lake_config(root / "reference", output, landing))
    reference = ReferenceLake(output, landing, config, rounds, root / "after-round-one")
    write_round(landing, rounds, 1)
    _run_round(spark, reference, 1)
    shutil.copytree(config.lake, reference.after_round_one)
    write_round(landing, rounds, 2)
    _run_round(spark, reference, 2)
    return reference


_BUILT: dict[str, ReferenceLake] = {}


def reference_lake(spark, tmp_path_factory) -> ReferenceLake:
    """The reference lake, built once per test session."""
    if "lake" not in _BUILT:
        _BUILT["lake"] = build_reference(spark, tmp_path_factory.mktemp("reference"))
    return _BUILT["lake"]


@pytest.fixture(scope="module")
def reference(spark, tmp_path_factory) -> ReferenceLake:
    return reference_lake(spark, tmp_path_factory)


# --- tests ------------------------------------------------------------------------------------

RUNS = [(number, stage) for number in (1, 2) for stage in STAGES]


@pytest.mark.parametrize(("round_number", "stage"), RUNS, ids=[f"round{n}-{s}" for n, s in RUNS])
def test_a_stage_run_twice_gives_identical_tables_and_no_new_version(
    reference, round_number, stage
):
    runs = reference.run(round_number, stage)
    # The first run did write: some table of the stage has a new version.
    committed = [
        name
        for name, state in runs.first.items()
        if stage_of(name) == stage
        and (name not in runs.before or state.version > runs.before[name].version)
    ]
    assert committed, f"round {round_number}: the first {stage} run committed nothing"
    # Other stages' tables are not touched.
    assert {n: s for n, s in runs.first.items() if stage_of(n) != stage} == {
        n: s for n, s in runs.before.items() if stage_of(n) != stage
    }
    # The second run changes nothing anywhere, not even a Delta version.
    assert versions(runs.second) == versions(runs.first)
    assert_same_tables(runs.second, runs.first)


def added_rows(before: TableState, after: TableState) -> list[tuple]:
    """The rows ``after`` holds beyond ``before``, asserting it kept every row of ``before``."""
    old, new = Counter(map(repr, before.rows)), Counter(map(repr, after.rows))
    assert not old - new, "rows of the earlier version are gone"
    added = new - old
    return [row for row in after.rows if added[repr(row)]]


APPEND_ONLY = {
    "land": {"bronze/records": "batch_id", "bronze/landed_files": "batch_id"},
    "decode": {
        f"silver/{name}": "bronze_batch" for name in ("changes", "ddl", "resolved", "decode_log")
    },
}


@pytest.mark.parametrize("stage", sorted(APPEND_ONLY))
def test_exports_arriving_later_are_only_appended(reference, stage):
    runs = reference.run(2, stage)
    for name, batch_column in APPEND_ONLY[stage].items():
        before, after = runs.before[name], runs.first[name]
        added = added_rows(before, after)
        assert added and set(after.column(batch_column, added)) == {2}, name
        # Appended in new files: the earlier version's files are all still the table's.
        path = str(reference.config.lake / name)
        kept = DeltaTable(path, version=before.version).file_uris()
        assert set(kept) <= set(DeltaTable(path, version=after.version).file_uris()), name


def test_only_offsets_not_landed_before_are_added(reference):
    runs = reference.run(2, "land")
    before, after = runs.before["bronze/records"], runs.first["bronze/records"]
    added = added_rows(before, after)
    offsets = {
        number: {(r.topic, r.partition, r.offset) for r in records}
        for number, records in reference.rounds.items()
    }
    assert offsets[1] & offsets[2], "round two must overlap round one"
    landed = zip(
        after.column("topic", added), after.column("partition", added),
        after.column("offset", added), strict=True,
    )  # fmt: skip
    assert sorted(landed) == sorted(offsets[2] - offsets[1])
    assert len(before.rows) == len(offsets[1])
    result = runs.first_result
    assert (result["records_added"], result["duplicates"]) == (
        len(offsets[2] - offsets[1]),
        len(offsets[2] & offsets[1]),
    )


def test_gold_holds_the_generated_tables_at_each_rounds_watermark(reference):
    for number in (1, 2):
        (feed,) = reference.run(number, "watermark").first_result["changefeeds"]
        gold = reference.run(number, "compact").second
        gold_versions = {
            name.removeprefix("gold/").replace("/", "."): state.version
            for name, state in gold.items()
            if name.startswith("gold/")
        }
        assert_gold_is_expected(
            reference.layout, reference.output.workload, feed["watermark"],
            versions=gold_versions,
        )  # fmt: skip
    assert feed["watermark"] == reference.output.workload.resolved_ts[-1]
