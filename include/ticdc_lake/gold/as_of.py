"""Gold as of a TSO: the Delta version of a gold table that held exactly the transactions up to
the largest TS at or below it that a compaction stopped at.

    as_of = version_as_of(layout, schema, table, tso)   # AsOf, or AsOfError saying why not
    rows = read_as_of(as_of)                            # a pyarrow Table, no JVM

Every compaction writes the state table once (one Delta version of ``state/gold`` per run),
each row with the TS its table reflects (``watermark``) and the gold version it left. So the
state's history is the table's: the newest state version whose watermark for the table is at
or below the TSO names the gold version to read. Watermarks only grow from one state version
to the next, so that version is found by bisection, a dozen state snapshots for a year of
hourly runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from ticdc_lake.delta import delta_table_exists, open_table, read_arrow
from ticdc_lake.errors import TicdcLakeError
from ticdc_lake.gold.state import INCONSISTENT
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.lake.names import qualified_name


class AsOfError(TicdcLakeError):
    """No gold version reflects the TSO asked for: the message says why."""


@dataclass(frozen=True)
class AsOf:
    schema: str
    table: str
    path: str
    version: int  # the gold table's Delta version
    watermark: int  # the TS it reflects: the largest compacted to at or below ``tso``
    tso: int

    @property
    def spark_sql(self) -> str:
        """The same read in Spark SQL (Delta's time travel)."""
        location = self.path.replace("`", "``")
        return f"SELECT * FROM delta.`{location}` VERSION AS OF {self.version}"


def version_as_of(layout: LakeLayout, schema: str, table: str, tso: int) -> AsOf:
    """The gold version of ``schema``.``table`` as of ``tso`` (AsOfError when none)."""
    name = qualified_name(schema, table)
    if not delta_table_exists(layout.gold_state):
        raise AsOfError(f"{layout.root} has no gold yet: no compaction has run")
    newest = open_table(layout.gold_state).version()
    now = _state_row(layout, newest, schema, table)
    if now is None:
        raise AsOfError(f"no gold table {name} in {layout.gold_state}")
    if now["mode"] == INCONSISTENT or now["watermark"] is None:
        raise AsOfError(
            f"gold table {name} is not consistent at any TS (mode {now['mode']}: "
            f"{now['reason']}), so it has no state as of a TS"
        )
    if tso > now["watermark"]:
        raise AsOfError(
            f"TS {tso} is above the watermark gold table {name} reflects ({now['watermark']}): "
            "gold does not hold it yet"
        )
    found = _newest_at_or_below(layout, schema, table, tso, newest)
    if found is None:
        raise AsOfError(
            f"TS {tso} is below the first TS gold table {name} was compacted to: it has no "
            "state that old"
        )
    as_of = AsOf(schema, table, found["path"], found["gold_version"], found["watermark"], tso)
    _check_retained(as_of, name)
    return as_of


def read_as_of(as_of: AsOf) -> pa.Table:
    """The gold table's rows at that version, read with delta-rs (no JVM)."""
    return read_arrow(as_of.path, as_of.version)


def _newest_at_or_below(layout, schema, table, tso, newest) -> dict | None:
    """The table's newest state row whose watermark is at or below ``tso`` (bisection over the
    state's versions: a version without the table's row, from before its first compaction,
    counts as below)."""
    low, high, found = 0, newest, None
    while low <= high:
        middle = (low + high) // 2
        row = _state_row(layout, middle, schema, table)
        if row is None or (row["watermark"] is not None and row["watermark"] <= tso):
            found = row if row is not None else found
            low = middle + 1
        else:
            high = middle - 1
    if found is None or found["gold_version"] is None:
        return None
    return found


def _state_row(layout: LakeLayout, version: int, schema: str, table: str) -> dict | None:
    rows = open_table(layout.gold_state, version).to_pyarrow_table()
    rows = rows.filter(pc.and_(pc.equal(rows["schema"], schema), pc.equal(rows["table"], table)))
    return rows.to_pylist()[0] if rows.num_rows else None


def _check_retained(as_of: AsOf, name: str) -> None:
    """AsOfError when the version is gone from the table's history (log retention) or its files
    are (VACUUM)."""
    try:
        files = open_table(as_of.path, as_of.version).file_uris()
    except Exception as exc:  # delta-rs names no error class for a version it cannot load
        raise AsOfError(
            f"TS {as_of.tso} is older than the retained history of gold table {name}: its "
            f"version {as_of.version} (TS {as_of.watermark}) is gone from the log: {exc}"
        ) from None
    gone = [f for f in files if "://" not in f and not Path(f).exists()]
    if gone:
        raise AsOfError(
            f"TS {as_of.tso} is older than the retained history of gold table {name}: the "
            f"data files of its version {as_of.version} were vacuumed ({len(gone)} gone)"
        )
