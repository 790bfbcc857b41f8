"""What a benchmark result records about the machine it ran on."""

from __future__ import annotations

import os
import platform


def machine_report(load_start: tuple[float, float, float]) -> dict:
    """Cores, Python, and the load average when the run started and now (figures taken under
    load are low: the load says how much to trust them)."""
    return {
        "platform": f"{platform.machine()}, {os.cpu_count()} cores",
        "python": platform.python_version(),
        "load_average_start": [round(v, 2) for v in load_start],
        "load_average_end": [round(v, 2) for v in os.getloadavg()],
    }
