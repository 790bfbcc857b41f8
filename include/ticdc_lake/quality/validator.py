"""One Great Expectations context per job, and checks as expectations tagged with their name.

    validator = Validator()                      # ephemeral context, offline, no progress bars
    outcomes = validator.run(df, [Expectation("op_allowed", gxe.ExpectColumnValuesToBeInSet(...))])

A Spark DataFrame is validated through the context's Spark data source, a pandas one through its
pandas data source (for the small per-table and per-batch summaries: ~0.1 s instead of seconds).
Several expectations may serve one check (e.g. not-null on three columns); their results fold
into one CheckOutcome. GE's import costs seconds, so it happens on first use.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import itertools
import logging
import sys
import threading
import types
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ticdc_lake.quality.results import CheckOutcome

# GE's package imports itself in cycles: two threads importing it at once (a validator warming
# up, a suite being built) can see it half-initialised, so it is imported under one lock.
_IMPORTING = threading.RLock()

# Modules GE imports with itself for expectations no check here uses: scipy.stats for its
# Kolmogorov-Smirnov metrics, altair for the charts of its KL-divergence expectation.
DEFERRED_MODULES = ("scipy.stats", "altair")


class DeferredModule(types.ModuleType):
    """Stands in ``sys.modules`` for a module not imported yet, and imports it at the first
    attribute anything asks of it: what uses the module gets it whole, what only imports it
    never pays for it."""

    def __getattr__(self, name: str) -> Any:
        with _IMPORTING:
            if sys.modules.get(self.__name__) is self:
                del sys.modules[self.__name__]
                try:
                    loaded = importlib.import_module(self.__name__)
                except BaseException:
                    sys.modules.setdefault(self.__name__, self)
                    raise
                self.__dict__.update(vars(loaded))
        module = sys.modules.get(self.__name__)
        if module is None or module is self:  # no such module loaded (taken out of sys.modules)
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        return getattr(module, name)


def defer_unused_modules(names: Sequence[str] = DEFERRED_MODULES) -> None:
    """Put a DeferredModule in place of each of ``names`` that is installed and not yet
    imported."""
    with _IMPORTING:
        for name in names:
            if name not in sys.modules and _installed(name):
                sys.modules[name] = DeferredModule(name)


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a submodule of a package that is not installed
        return False


def expectations():
    """``great_expectations.expectations``, imported quietly on first use."""
    with _IMPORTING:
        defer_unused_modules()
        logging.getLogger("great_expectations").setLevel(logging.WARNING)
        import great_expectations.expectations as gxe

    return gxe


@dataclass(frozen=True)
class Expectation:
    check: str
    expectation: Any  # a great_expectations Expectation
    changefeed: str | None = None
    table: str | None = None
    observed: Any = None  # what the check measured, when GE's observed value does not say it
    sample: tuple[dict, ...] = ()  # failing rows, when GE's unexpected list does not hold them
    message: str = ""  # shown when the check fails


class Validator:
    """Runs suites in one ephemeral GE context (one per job: building one costs seconds)."""

    def __init__(self, sample_rows: int = 5):
        self.sample_rows = sample_rows
        self._context = None
        self._building = threading.Lock()
        self._sources: dict[str, Any] = {}
        self._names = itertools.count()

    def warm_up(self) -> None:
        """Import GE and build the context on a background thread: seconds of Python that a
        job can spend while it waits on Spark. Not the data sources: adding GE's Spark source
        starts a default SparkSession when none runs yet, which the job's own would then be
        (``getOrCreate`` keeps the first one's master and memory)."""
        threading.Thread(target=lambda: self.context, name="ge-warm-up", daemon=True).start()

    @property
    def context(self):
        """The ephemeral context, built on first use: a job with nothing new to validate does
        not pay for GE's import."""
        with self._building, _IMPORTING:
            if self._context is None:
                defer_unused_modules()
                logging.getLogger("great_expectations").setLevel(logging.WARNING)
                import great_expectations as gx
                from great_expectations.data_context.types.base import ProgressBarsConfig

                context = gx.get_context(mode="ephemeral")
                context.variables.progress_bars = ProgressBarsConfig(globally=False)
                self._context = context
            return self._context

    def _batch_definition(self, kind: str):
        context = self.context
        with self._building:
            if kind not in self._sources:
                add = context.data_sources.add_spark if kind == "spark" else None
                add = add or context.data_sources.add_pandas
                asset = add(kind).add_dataframe_asset(f"{kind}_frames")
                self._sources[kind] = asset.add_batch_definition_whole_dataframe("whole")
            return self._sources[kind]

    def run(self, frame: Any, checks: Sequence[Expectation]) -> list[CheckOutcome]:
        """Validate ``frame`` (Spark or pandas DataFrame) against ``checks``: one outcome per
        check name (and changefeed/table), in the order first given."""
        if not checks:
            return []
        context = self.context
        import great_expectations as gx

        kind = "pandas" if type(frame).__module__.startswith("pandas") else "spark"
        number = next(self._names)
        suite = gx.ExpectationSuite(f"suite_{number}")
        for index, item in enumerate(checks):
            item.expectation.meta = {"index": index}
            suite.add_expectation(item.expectation)
        suite = context.suites.add(suite)
        definition = context.validation_definitions.add(
            gx.ValidationDefinition(
                name=f"validation_{number}", data=self._batch_definition(kind), suite=suite
            )
        )
        result = definition.run(
            batch_parameters={"dataframe": frame},
            result_format={
                "result_format": "SUMMARY",
                "partial_unexpected_count": max(self.sample_rows, 1),
            },
        )
        by_index = {r.expectation_config.meta["index"]: r for r in result.results}
        if kind == "spark":
            checks = [
                self._with_query_rows(frame, item, by_index[i]) for i, item in enumerate(checks)
            ]
        return self._fold(checks, by_index)

    def _with_query_rows(self, frame: Any, item: Expectation, result: Any) -> Expectation:
        """A failed SQL check with a sample of the rows its query finds: GE returns them only
        in its COMPLETE result format, which would fetch every one (clean runs pay nothing)."""
        query = getattr(item.expectation, "unexpected_rows_query", None)
        if result.success or query is None or item.sample or self.sample_rows <= 0:
            return item
        view = f"unexpected_rows_{next(self._names)}"
        frame.createOrReplaceTempView(view)
        try:
            query = query.replace("{batch}", view)
            rows = frame.sparkSession.sql(query).limit(self.sample_rows).collect()
        finally:
            frame.sparkSession.catalog.dropTempView(view)
        return dataclasses.replace(item, sample=tuple(row.asDict() for row in rows))

    def _fold(self, checks: Sequence[Expectation], results: dict[int, Any]) -> list[CheckOutcome]:
        groups: dict[tuple, list[tuple[Expectation, Any]]] = {}
        for index, item in enumerate(checks):
            key = (item.check, item.changefeed, item.table)
            groups.setdefault(key, []).append((item, results[index]))
        return [self._outcome(key, members) for key, members in groups.items()]

    def _outcome(self, key: tuple, members: list[tuple[Expectation, Any]]) -> CheckOutcome:
        check, changefeed, table = key
        unexpected, sample, observed = 0, [], {}
        for _item, result in members:
            found = result.result or {}
            name = result.expectation_config.type
            if "observed_value" in found:
                observed[name] = found["observed_value"]
            count = found.get("unexpected_count")
            if count is None and not result.success:
                count = found.get("observed_value") if name == "unexpected_rows_expectation" else 1
            unexpected += int(count or 0)
            rows = found.get("details", {}).get("unexpected_rows") or found.get(
                "partial_unexpected_list", []
            )
            sample.extend(rows[: self.sample_rows - len(sample)])
        success = all(result.success for _, result in members)
        mine = [item.observed for item, _ in members if item.observed is not None]
        given = [row for item, _ in members for row in item.sample]
        if given:
            sample = given
        messages = [item.message for item, _ in members if item.message]
        return CheckOutcome(
            check=check,
            success=success,
            observed=mine[0] if mine else observed or None,
            message="" if success else "; ".join(dict.fromkeys(messages)),
            unexpected_count=unexpected,
            sample=tuple(_plain(row) for row in sample[: self.sample_rows]),
            changefeed=changefeed,
            table=table,
            ge_result={"results": [result.to_json_dict() for _, result in members]},
        )


def _plain(row: Any) -> dict:
    if isinstance(row, dict):
        return {str(k): _value(v) for k, v in row.items()}
    return {"value": _value(row)}


def _value(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return value[:64].hex() + ("..." if len(value) > 64 else "")
    if isinstance(value, list | tuple):
        return [_value(v) for v in value][:20]
    if isinstance(value, dict):
        return {str(k): _value(v) for k, v in value.items()}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)
