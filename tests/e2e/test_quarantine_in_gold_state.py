"""Gold never claims to be what upstream held when a record it needs is quarantined.

An Open Protocol changefeed (one event per message) whose widest table's messages are all
quarantined by a too-low ``limits.max-table-columns``: the table's state says which records
(topic, partition, offsets) may hold its changes, though none of them decoded, the other tables'
states say nothing, and the gold checks warn. Raising the limit (the fix) and backfilling the
range decodes the records: the reason is gone, the check passes and gold is the workload.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
import yaml
from ticdc_lake.app.pipeline import run_stages
from ticdc_lake.backfill.run import run_backfill
from ticdc_lake.config import load_config
from ticdc_lake.gold.state import read_state
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.lake.names import qualified_name
from ticdc_lake.sample.workload.expected_gold import ExpectedGold
from ticdc_lake.sample.workload.output import GenerateOptions, write_generated
from ticdc_lake.silver.events import RowEvent

from tests.e2e.lakes import decoded

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def widths(config, records) -> dict[str, tuple[int, int]]:
    """Per table, the narrowest and widest image its row events carry."""
    found = defaultdict(list)
    for events in decoded(config, records).values():
        for event in events:
            if isinstance(event, RowEvent):
                for image in (event.columns, event.old_columns):
                    if image is not None:
                        found[qualified_name(event.schema, event.table)].append(len(image))
    return {name: (min(sizes), max(sizes)) for name, sizes in found.items()}


def set_limit(path, limit: int | None) -> None:
    document = yaml.safe_load(path.read_text())
    if limit is None:
        document.pop("limits", None)
    else:
        document["limits"] = {"max-table-columns": limit}
    path.write_text(yaml.safe_dump(document, sort_keys=False))


def gold_checks(result) -> list:
    (checks,) = [run for run in result.runs if run.stage == "quality-gold"]
    return [o for o, _ in checks.result.outcomes if o.check == "gold_mode"]


def test_a_quarantined_change_is_said_in_gold_state_until_a_backfill_brings_it_in(spark, tmp_path):
    options = GenerateOptions(
        protocol="open-protocol", partitions=2, seed=53, transactions=80, max_batch_size=1,
        layout="jsonl",
    )  # fmt: skip
    output = write_generated(tmp_path / "sample", options)
    document = yaml.safe_load(output.config_path.read_text())
    document["lake"] = str(tmp_path / "lake")
    # A fifth of the records will be quarantined: the run goes on, warning, to show gold.
    document["quality"] = {"policies": {"decode_rate": "warn"}}
    output.config_path.write_text(yaml.safe_dump(document, sort_keys=False))
    config = load_config(output.config_path)
    records = {key: stream.records for key, stream in output.encoded.items()}
    sizes = widths(config, records)
    widest = max(sizes, key=lambda name: sizes[name][0])
    limit = max(high for name, (_, high) in sizes.items() if name != widest)
    assert sizes[widest][0] > limit, sizes  # only the widest table's messages are refused
    set_limit(output.config_path, limit)

    first = run_stages(spark, load_config(output.config_path), quality=True)

    states = {s.full_name: s for s in read_state(LakeLayout(config.lake).gold_state)}
    lacking = states[widest]
    assert lacking.mode == "watermark" and lacking.rows == 0
    assert lacking.reason.startswith("quarantined: ")
    assert "could not be decoded (in silver's quarantine: topic " in lacking.reason
    assert all(s.reason is None for name, s in states.items() if name != widest)
    (warned,) = [o for o in gold_checks(first) if not o.success]
    assert [row["table"] for row in warned.sample] == [widest]

    set_limit(output.config_path, None)  # the fix
    fixed = load_config(output.config_path)
    watermark = lacking.watermark
    backfill = run_backfill(spark, fixed, output.workload.resolved_ts[0] - 1, watermark)
    assert backfill.plan.batches, backfill.plan

    states = {s.full_name: s for s in read_state(LakeLayout(config.lake).gold_state)}
    assert all(s.reason is None for s in states.values()), states
    assert ExpectedGold.from_workload(output.workload).compare(config.lake, watermark) == []
