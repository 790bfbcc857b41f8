"""The lake's tables: where each lives (layout) and what its rows hold (silver contract)."""
