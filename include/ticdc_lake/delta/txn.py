"""Idempotent commits and finding one's own commit in a table's history.

Every commit this package makes records ``(app_id, version)`` as a Delta app transaction when the
caller gives one. delta-rs records it but does not refuse a replay, so the check is ours: a
commit whose version is not above the table's recorded version for that app id is a replay and
is skipped (the Delta streaming rule: versions only grow). Each commit also carries a random
write id in its commitInfo, which is how the caller finds the version its write produced.
"""

from __future__ import annotations

import os
from typing import Any

from deltalake import DeltaTable
from deltalake.transaction import CommitProperties, Transaction

from ticdc_lake.delta.tables import open_table

WRITE_ID_KEY = "ticdcLake.writeId"
ROWS_KEY = "ticdcLake.numRecords"
FILES_KEY = "ticdcLake.numFiles"


def check_app_version(app_id: str | None, version: int | None) -> None:
    if (app_id is None) != (version is None):
        raise ValueError("give app_id and version together, or neither")
    if version is not None and (not isinstance(version, int) or version < 0):
        raise ValueError(f"version must be a non-negative int, not {version!r}")


def already_committed(table: DeltaTable, app_id: str | None, version: int | None) -> bool:
    """Whether ``(app_id, version)`` or a later version of that app is in the table."""
    if app_id is None or version is None:
        return False
    recorded = table.transaction_version(app_id)
    return recorded is not None and recorded >= version


def commit_properties(
    write_id: str,
    app_id: str | None,
    version: int | None,
    **metadata: Any,
) -> CommitProperties:
    transactions = [Transaction(app_id, version)] if app_id is not None else None
    return CommitProperties(
        custom_metadata={WRITE_ID_KEY: write_id, **metadata},
        app_transactions=transactions,
    )


def find_commit(path: str, write_id: str, after_version: int | None) -> dict[str, Any] | None:
    """The commitInfo (with its ``version``) carrying ``write_id``, among versions after
    ``after_version`` (None: the table did not exist yet)."""
    if not DeltaTable.is_deltatable(path):
        return None
    return commit_in(DeltaTable(path), write_id, after_version)


def commit_in(table: DeltaTable, write_id: str, after_version: int | None) -> dict[str, Any] | None:
    """``find_commit`` in a table already open at (or after) the commit, as delta-rs leaves
    the table it merged into."""
    newer = table.version() - (-1 if after_version is None else after_version)
    if newer <= 0:
        return None
    for info in table.history(limit=newer):
        # delta-rs commits carry it as a key of their own, delta-spark's as userMetadata.
        if write_id in (info.get(WRITE_ID_KEY), info.get("userMetadata")):
            return info
    return None


def commits_after(path: str | os.PathLike, version: int | None) -> list[dict[str, Any]]:
    """The commitInfos (each with its ``version``) of the table's versions after ``version``
    (None: all of them), oldest first. TableNotFoundError for a missing table."""
    table = open_table(path)
    newer = table.version() - (-1 if version is None else version)
    return sorted(table.history(limit=max(newer, 0)), key=lambda info: info["version"])
