"""``disable_huge_pages``: transparent huge pages off for this process and the ones it forks.

numpy and Arrow's allocator ask the kernel for huge pages (``madvise``; a system set to
``always`` gives them to all memory), and the kernel zeroes each 2 MB page whole at its first
touch. A stage's processes (a fresh spark-submit driver, fresh Python workers) touch most of
their memory once, so they paid for zeroing far more than they used: compaction's first reduce
of 1M realistic changes spent 3.0-3.3 s in the kernel against 1.1 with them off (wall 5.9
against 4.6 s), a worker's first decode 1.1-1.4 against 0.7 s, and neither's user time changed
(bench.pipeline, realistic 1M: 17.0-17.7 s against 18.5-18.9).
"""

from __future__ import annotations

import ctypes
import sys

# prctl(2): the process and its children (fork, execve) get no transparent huge pages.
_PR_SET_THP_DISABLE = 41


def disable_huge_pages() -> bool:
    """Turn them off (Linux); False where the kernel or platform cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return False
    return prctl(_PR_SET_THP_DISABLE, 1, 0, 0, 0) == 0
