"""The equivalence harness of the rules that run in two engines (``ticdc_lake.engines``): the list
names places that exist and every compiled module; one generated workload goes through both
engines of each rule and comes out the same; TICDC_LAKE_PURE=1 takes every reference. Each
rule's own test module (``held_equal_by``) goes further: fuzzing, vectors, edge cases."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from ticdc_lake import engines
from ticdc_lake.app.pipeline import run_stages
from ticdc_lake.config import load_config
from ticdc_lake.gold import changes
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.protocols import CodecSettings, canal_json, craft, open_protocol
from ticdc_lake.sample.workload import generate_workload
from ticdc_lake.sample.workload.dispatch import route
from ticdc_lake.sample.workload.output import GenerateOptions, encode_routing, write_generated
from ticdc_lake.silver import rows
from ticdc_lake.silver.events import RowEvent

from tests.docs.test_links import _anchors

REPO = Path(__file__).resolve().parent.parent
COMPILED = (craft, open_protocol, canal_json, rows)
DECODERS = {
    "craft": craft.CraftDecoder,
    "open-protocol": open_protocol.OpenProtocolDecoder,
    "canal-json": canal_json.CanalJsonDecoder,
}


def _place_problem(place: str) -> str | None:
    """What is wrong with a ``path[#anchor|:name]`` place, or None."""
    path, _, name = place.partition(":")
    path, _, anchor = path.partition("#")
    file = REPO / path
    if not file.is_file():
        return f"{path}: no such file"
    if anchor and anchor not in _anchors(file):
        return f"{path}: no heading #{anchor}"
    if name and not re.search(rf"^\s*(def|class) {name}\b", file.read_text(), re.M):
        return f"{path}: defines no {name}"
    return None


def test_every_rule_names_places_that_exist():
    places = [
        place
        for rule in engines.RULES
        for place in (rule.spec, rule.reference, rule.fast, rule.held_equal_by)
    ]
    assert [problem for place in places if (problem := _place_problem(place))] == []


def test_every_compiled_module_is_the_fast_engine_of_a_rule():
    compiled = {
        str(path.relative_to(REPO))
        for path in (REPO / "include").rglob("_*speedups*.[ch]")
        if path.name != "_silver_speedups.h"  # the sink's interface, part of its .c's rule
    }
    assert compiled == {rule.fast for rule in engines.RULES if rule.fast.endswith((".c", ".h"))}


def _speedups_in(environment: dict[str, str]) -> list[bool]:
    """Which of the compiled modules a fresh interpreter with ``environment`` loads."""
    code = (
        "from ticdc_lake.protocols import craft, open_protocol, canal_json\n"
        "from ticdc_lake.silver import rows\n"
        "import json\n"
        "modules = (craft, open_protocol, canal_json, rows)\n"
        "print(json.dumps([m.SPEEDUPS is not None for m in modules]))"
    )
    found = subprocess.run(
        [sys.executable, "-c", code],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return json.loads(found.stdout)


def test_pure_takes_every_reference_engine():
    if not all(module.SPEEDUPS for module in COMPILED):
        pytest.skip("the compiled modules are not built here: nothing to choose between")
    environment = {k: v for k, v in os.environ.items() if k != engines.PURE_ENV}
    assert _speedups_in(environment) == [True] * 4
    assert _speedups_in(environment | {engines.PURE_ENV: "1"}) == [False] * 4


# --- both engines of each rule, on one workload ------------------------------------------------


@pytest.fixture(scope="module")
def workload():
    return generate_workload(seed=7, transactions=120)


def _records(workload, protocol: str):
    settings = CodecSettings()
    routing = route(workload, protocol, partitions=2, replays=1)
    streams = encode_routing(routing, settings).values()
    return settings, [record for stream in streams for record in stream.records]


@pytest.mark.parametrize("protocol", sorted(DECODERS))
def test_both_decoders_and_both_row_builders_agree(workload, protocol):
    decoder = DECODERS[protocol]
    settings, records = _records(workload, protocol)
    fast, reference = decoder(settings), decoder(settings, speedups=None)
    if fast.speedups is None:
        pytest.skip(f"{protocol}'s compiled reader is not built here")
    events = [event for record in records for event in fast.decode(record)]
    assert events == [event for record in records for event in reference.decode(record)]

    changes_fast, changes_reference = rows.ChangeRows(), rows.ChangeRows(speedups=None)
    for event in events:
        if isinstance(event, RowEvent):
            changes_fast.add(event, bronze_batch=1)
            changes_reference.add(event, bronze_batch=1)
    assert changes_fast.table().equals(changes_reference.table())


def _gold(lake: Path) -> dict[str, pa.Table]:
    tables = {}
    for log in sorted((lake / "gold").rglob("_delta_log")):
        table = DeltaTable(str(log.parent)).to_pyarrow_table()
        keys = [(name, "ascending") for name in table.column_names]
        tables[str(log.parent.relative_to(lake))] = table.sort_by(keys)
    return tables


def _pipeline_gold(spark, out: Path) -> dict[str, pa.Table]:
    options = GenerateOptions("craft", partitions=2, transactions=60, seed=7)
    generated = write_generated(out, options)
    config = load_config(generated.config_path)
    run_stages(spark, config)
    return _gold(LakeLayout(config.lake).root)


def test_both_reduces_give_the_same_gold(spark, tmp_path, monkeypatch):
    called = []
    on_driver = changes.reduce_on_driver
    monkeypatch.setattr(changes, "reduce_on_driver", lambda *a: called.append(a) or on_driver(*a))
    driver = _pipeline_gold(spark, tmp_path / "driver")
    assert called, "the workload was not reduced on the driver"
    called.clear()
    monkeypatch.setenv(engines.PURE_ENV, "1")
    in_spark = _pipeline_gold(spark, tmp_path / "spark")
    assert not called
    assert driver.keys() == in_spark.keys() and len(driver) >= 4
    for name, table in driver.items():
        assert table.equals(in_spark[name]), name
