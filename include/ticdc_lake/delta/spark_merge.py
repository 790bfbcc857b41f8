"""Upserts and deletes of a change set by key on Spark's executors: delta-spark's MERGE.

For change sets too large to bring to the driver, where ``merge.merge_delta`` (delta-rs) works.
The step's ``(app_id, version)`` goes through Delta's own idempotent-write settings, so the
commit records it as an app transaction and a replay of the step commits nothing; the write id
rides in the commit's ``userMetadata``, which is how the version the merge made is found.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Sequence

from delta.tables import DeltaTable as SparkDeltaTable
from pyspark.sql import DataFrame

from ticdc_lake.delta.exceptions import MergeSourceError
from ticdc_lake.delta.read import check_plain_files, table_path
from ticdc_lake.delta.tables import MergeResult, open_table
from ticdc_lake.delta.txn import already_committed, check_app_version, commit_in
from ticdc_lake.runtime.spark import job_settings

TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"
USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
# Those settings belong to the session, not to one merge: two merges at once would trade them.
_SETTINGS_LOCK = threading.Lock()


def quoted(name: str) -> str:
    """A column name as Spark's SQL and delta-rs's predicates read it."""
    return "`" + name.replace("`", "``") + "`"


def merge_frame(
    changes: DataFrame,
    path: str | os.PathLike,
    keys: Sequence[str],
    *,
    delete_column: str | None = None,
    app_id: str | None = None,
    version: int | None = None,
) -> MergeResult:
    """Apply ``changes`` (at most one row per key) to the existing table at ``path``, as
    ``merge_delta`` does: rows whose ``delete_column`` is true delete their key's row, the
    others replace it or are inserted; columns the table lacks are added (schema evolution);
    the delete column is not stored."""
    check_app_version(app_id, version)
    needed = [*keys, *([delete_column] if delete_column else [])]
    missing = [name for name in needed if name not in changes.columns]
    if not keys or missing:
        raise MergeSourceError(
            f"change set lacks key or delete columns {missing or '(no key given)'}: it has "
            f"{changes.columns}"
        )
    location = table_path(path)
    table = open_table(location)
    check_plain_files(table)
    if already_committed(table, app_id, version):
        return MergeResult(committed=False, version=table.version(), skipped=True)
    start_version = table.version()
    write_id = uuid.uuid4().hex
    stored = {quoted(c): f"s.{quoted(c)}" for c in changes.columns if c != delete_column}
    predicate = " AND ".join(f"t.{quoted(k)} = s.{quoted(k)}" for k in keys)
    spark = changes.sparkSession
    merger = (
        SparkDeltaTable.forPath(spark, location).alias("t").merge(changes.alias("s"), predicate)
    )
    if delete_column is None:
        merger = merger.whenMatchedUpdate(set=stored).whenNotMatchedInsert(values=stored)
    else:
        deleted = f"s.{quoted(delete_column)}"
        merger = (
            merger.whenMatchedDelete(condition=deleted)
            .whenMatchedUpdate(set=stored)
            .whenNotMatchedInsert(condition=f"NOT {deleted}", values=stored)
        )
    settings = {USER_METADATA: write_id}
    if app_id is not None:
        settings |= {TXN_APP_ID: app_id, TXN_VERSION: str(version)}
    with _SETTINGS_LOCK, job_settings(spark, settings):
        merger.withSchemaEvolution().execute()
    info = commit_in(open_table(location), write_id, start_version)
    return MergeResult(
        committed=info is not None,
        version=info["version"] if info else table.version(),
    )
