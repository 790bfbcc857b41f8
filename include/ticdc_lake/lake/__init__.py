"""The lake's tables: where each lives (layout), the names it allows (names) and its lock."""
