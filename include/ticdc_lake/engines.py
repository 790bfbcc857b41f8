"""The rules that run in two engines: a reference, and a faster one held equal to it.

``RULES`` names each: where its spec is, both engines, what picks one, and the tests that hold
them equal (tests/test_engines.py checks the list and runs them). ``TICDC_LAKE_PURE=1`` makes
every pick the reference, to rule out a fast engine while hunting a bug (on a cluster, set it
for the executors too: ``spark.executorEnv.TICDC_LAKE_PURE=1``). Standard library only: the
decoders import it on Spark's workers.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from types import ModuleType

PURE_ENV = "TICDC_LAKE_PURE"


def pure() -> bool:
    """Whether every rule runs on its reference engine ($TICDC_LAKE_PURE is 1)."""
    return os.environ.get(PURE_ENV) == "1"


def native(module: str) -> ModuleType | None:
    """The compiled module ``module``, or None when it is not built or the run is pure."""
    if pure():
        return None
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


@dataclass(frozen=True)
class Rule:
    """A rule and its two engines. Places are repository paths, ``path:name`` for a function
    or class in it."""

    name: str
    spec: str  # where the rule is written down (a doc's section, or the reference itself)
    reference: str
    fast: str
    picked_by: str  # what chooses a run's engine, and whether TICDC_LAKE_PURE does
    held_equal_by: str  # the test module that runs both on the same input


_LIB = "include/ticdc_lake"
RULES = (
    Rule(
        "decode a Craft message",
        "docs/protocols.md#craft-craft",
        f"{_LIB}/protocols/craft.py:decode_message",
        f"{_LIB}/protocols/native/_craft_speedups.c",
        "craft.SPEEDUPS: the extension when built, unless pure",
        "tests/protocols/test_craft.py",
    ),
    Rule(
        "decode an Open Protocol message",
        "docs/protocols.md#open-protocol-open-protocol",
        f"{_LIB}/protocols/open_protocol.py:decode_frames",
        f"{_LIB}/protocols/native/_open_speedups.c",
        "open_protocol.SPEEDUPS: the extension when built, unless pure",
        "tests/protocols/test_open_protocol.py",
    ),
    Rule(
        "decode a Canal-JSON row message",
        "docs/protocols.md#canal-json-canal-json",
        f"{_LIB}/protocols/canal_json.py:CanalJsonDecoder",
        f"{_LIB}/protocols/native/_canal_speedups.c",
        "canal_json.SPEEDUPS: the extension when built, unless pure",
        "tests/protocols/test_canal_json.py",
    ),
    Rule(
        "refuse values TiDB could never send",
        "docs/protocols.md#values-tidb-could-never-send-are-refused",
        f"{_LIB}/silver/values.py",
        f"{_LIB}/protocols/native/_speedups.h",
        "each decoder's extension: its events_fit passes the common values, values.py the rest",
        "tests/protocols/test_value_ranges.py",
    ),
    Rule(
        "build silver's rows from events",
        f"{_LIB}/silver/rows.py:ChangeRows",
        f"{_LIB}/silver/rows.py:ChangeRows",
        f"{_LIB}/silver/_silver_speedups.c",
        "rows.SPEEDUPS: the extension when built, unless pure",
        "tests/silver/test_rows.py",
    ),
    Rule(
        "reduce a run's changes to the last one per key",
        "docs/architecture.md#compact",
        f"{_LIB}/gold/reduce.py:last_per_key",
        f"{_LIB}/gold/changes.py:reduce_on_driver",
        "gold/changes.py: the driver up to DRIVER_REDUCE_LIMIT changes, Spark beyond or if pure",
        "tests/gold/test_reduce_arrow.py",
    ),
    Rule(
        "hash a bronze record",
        f"{_LIB}/bronze/land_batch.py:with_record_hash",
        f"{_LIB}/bronze/land_batch.py:with_record_hash",
        f"{_LIB}/bronze/record_hash.py:record_hashes",
        "where it runs (not pure): land's tasks hash in Python, having no Spark expression",
        "tests/bronze/test_record_hash.py",
    ),
)
