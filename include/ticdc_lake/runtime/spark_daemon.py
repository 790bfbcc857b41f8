"""Spark's Python daemon (``pyspark.daemon``), importing pyspark from its compiled install.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on its Python workers' path, and for a
pip-installed pyspark that zip is a copy of the package, without bytecode: a daemon compiled
pyspark for 0.7-1.0 s where the installed package imports in 0.15 s. ``build_session`` names
this module as the task workers' daemon (for local masters); before the daemon forks it
imports nothing more than ``huge_pages`` (ctypes), to turn transparent huge pages off for the
workers it forks: fresh processes, which first touch most of their memory.
"""

from __future__ import annotations

import os
import runpy
import sys


def installed_copy(zip_path: str) -> str | None:
    """The path entry holding the installed package ``zip_path`` is a copy of, if any:
    ``<site>/pyspark/python/lib/pyspark.zip`` is ``<site>``'s own pyspark."""
    lib = os.path.dirname(zip_path)
    package = os.path.dirname(os.path.dirname(lib))
    if os.path.basename(package) != "pyspark":
        return None
    if not os.path.isfile(os.path.join(package, "__init__.py")):
        return None
    return os.path.dirname(package)


def compiled_first(path: list[str]) -> list[str]:
    """``path`` with Spark's own zips moved to its end and the installed pyspark they copy in
    their place, so files shipped with ``--py-files`` still come first (unchanged when the zips
    belong to a Spark installation of its own, whose version may differ)."""
    zips = [entry for entry in path if os.path.basename(entry) == "pyspark.zip"]
    site = installed_copy(zips[0]) if len(zips) == 1 else None
    if site is None:
        return path
    lib = os.path.dirname(zips[0])
    moved = [entry for entry in path if os.path.dirname(entry) == lib and entry.endswith(".zip")]
    ordered = []
    for entry in path:
        if entry == zips[0]:
            ordered.append(site)
        elif entry not in moved and entry != site:
            ordered.append(entry)
    return [*ordered, *moved]


if __name__ == "__main__":
    from ticdc_lake.runtime.huge_pages import disable_huge_pages

    disable_huge_pages()
    sys.path[:] = compiled_first(sys.path)
    runpy.run_module("pyspark.daemon", run_name="__main__", alter_sys=True)
