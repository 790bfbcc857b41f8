"""``exit_now``: end a command's process with its status, skipping the interpreter's teardown.

A native (C++) thread pool, Arrow's for one, can still be joinable while Python finalizes.
Then libstdc++ aborts the process ("terminate called without an active exception", SIGABRT)
after the work has succeeded and its result has been printed: CI saw a data-quality task whose
checks all passed fail in Airflow that way (apache/arrow#34314 describes the same abort).
Nothing of ours runs at exit, so skipping teardown loses nothing once the output is flushed.
"""

from __future__ import annotations

import logging
import os
import sys
from contextlib import suppress
from typing import NoReturn


def exit_now(status: int) -> NoReturn:
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with suppress(OSError, ValueError):  # a closed pipe (`... | head`) or a closed stream
            stream.flush()
    os._exit(status)
