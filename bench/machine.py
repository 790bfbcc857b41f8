"""What a benchmark result records about the machine it ran on and what its processes took."""

from __future__ import annotations

import os
import platform
import threading
from dataclasses import dataclass, field
from pathlib import Path


def machine_report(load_start: tuple[float, float, float]) -> dict:
    """Cores, Python, and the load average when the run started and now (figures taken under
    load are low: the load says how much to trust them)."""
    return {
        "platform": f"{platform.machine()}, {os.cpu_count()} cores",
        "python": platform.python_version(),
        "load_average_start": [round(v, 2) for v in load_start],
        "load_average_end": [round(v, 2) for v in os.getloadavg()],
    }


_PAGE_MB = os.sysconf("SC_PAGE_SIZE") / 2**20


def _rss_mb(pid: int) -> float:
    """A process's resident memory now, in MB (0 once it is gone), from the kernel's counters
    (/proc/<pid>/statm): reading smaps walks the process's page tables, 30-60 ms of a core
    for a sample of a decode's JVM and two workers, every half second, which slowed the stage
    it measured by 5%."""
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE_MB
    except (OSError, IndexError, ValueError):
        return 0.0


def _pss_mb(pid: int) -> float:
    """A process's proportional share of memory now, in MB (0 once it is gone): its shared
    pages divided among their sharers (forked Python workers share most of theirs). Only
    smaps has it, by walking the page tables."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _children(pid: int) -> list[int]:
    found = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            found += [int(child) for child in (task / "children").read_text().split()]
    except OSError:
        pass
    return found


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@dataclass
class MemoryPeaks:
    """Peak resident memory (MB) by role: this Python process (the PySpark driver's Python
    side), the JVM (Spark's driver and, on local[N], its executors), and the Python workers
    Spark starts (the largest one's RSS, and all of them together by PSS, so that pages
    forked workers share count once); and the 1-minute load average seen."""

    python_driver: float = 0.0
    jvm_driver: float = 0.0
    python_worker_max: float = 0.0
    python_workers_total: float = 0.0
    load_average_max: float = 0.0
    load_samples: list[float] = field(default_factory=list)

    def report(self) -> dict:
        mean = sum(self.load_samples) / len(self.load_samples) if self.load_samples else None
        return {
            "peak_rss_mb": {
                "python_driver": round(self.python_driver),
                "jvm_driver": round(self.jvm_driver),
                "python_worker_max": round(self.python_worker_max),
                "python_workers_total_pss": round(self.python_workers_total),
            },
            "load_average_1m": {
                "max": round(self.load_average_max, 2),
                "mean": None if mean is None else round(mean, 2),
            },
        }


class ProcessSampler:
    """Samples this process's tree every `interval` s in a thread, the workers' PSS (the page
    walk) every `pss_every`th time and at the end: `with ProcessSampler() as peaks: ...`
    leaves the peaks of the block in `peaks`."""

    def __init__(self, interval: float = 0.5, pss_every: int = 4):
        self.interval = interval
        self.pss_every = pss_every
        self.peaks = MemoryPeaks()
        self._samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> MemoryPeaks:
        self._thread.start()
        return self.peaks

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()
        self.sample(pss=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._samples += 1
            self.sample(pss=self._samples % self.pss_every == 0)

    def sample(self, pss: bool = True) -> None:
        peaks, me = self.peaks, os.getpid()
        peaks.python_driver = max(peaks.python_driver, _rss_mb(me))
        workers, shares = [], []
        pending = _children(me)
        while pending:
            pid = pending.pop()
            pending += _children(pid)
            command = _command(pid)
            if "java" in command.split(" ", 1)[0]:
                peaks.jvm_driver = max(peaks.jvm_driver, _rss_mb(pid))
            elif "pyspark" in command or "python" in command.split(" ", 1)[0]:
                workers.append(_rss_mb(pid))
                shares.append(_pss_mb(pid) if pss else 0.0)
        if workers:
            peaks.python_worker_max = max(peaks.python_worker_max, max(workers))
            peaks.python_workers_total = max(peaks.python_workers_total, sum(shares))
        load = os.getloadavg()[0]
        peaks.load_samples.append(load)
        peaks.load_average_max = max(peaks.load_average_max, load)
