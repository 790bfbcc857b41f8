"""RENAME TABLE: one action per renamed table."""

from __future__ import annotations

from ticdc_lake.gold.ddl.actions import Action, RenameTable
from ticdc_lake.gold.ddl.cursor import Cursor


def rename(cursor: Cursor) -> list[Action]:
    """What follows RENAME: ``TABLE a TO b, c TO d``."""
    cursor.expect("TABLE", "TABLES")
    actions: list[Action] = []
    while True:
        old = cursor.table_name()
        cursor.expect("TO")
        actions.append(RenameTable(old, new=cursor.table_name()))
        if not cursor.accept_punct(","):
            return actions
