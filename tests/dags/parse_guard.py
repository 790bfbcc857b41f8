"""Run as a script: import every DAG file in a folder with file and socket access blocked and
warnings recorded, then print what the DAGs are as one JSON object.

    python tests/dags/parse_guard.py DAGS_FOLDER

Airflow and the Spark provider are imported first, unguarded (croniter runs `file` and urllib3
probes IPv6 with a socket when imported: theirs, not the DAGs'). While a DAG file (and the
project modules it imports) runs, an audit hook refuses any file opened other than Python
source or bytecode being imported, every socket, and any subprocess; what was refused is
reported and fails the test.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import warnings
from pathlib import Path

import airflow.providers.apache.spark.operators.spark_submit
import airflow.sdk.definitions.timetables.interval  # noqa: F401 - before the guard
from airflow.sdk import DAG

_CODE_SUFFIXES = (".py", ".pyc", ".so", ".pyi")
_BLOCKED_EVENTS = ("socket.connect", "socket.bind", "socket.getaddrinfo", "subprocess.Popen",
                   "os.system", "os.exec", "os.posix_spawn")  # fmt: skip
_guarding = False
refused: list[str] = []


def _audit(event: str, args: tuple) -> None:
    if not _guarding:
        return
    if event == "open":
        path, mode = str(args[0]), args[1]
        if isinstance(args[0], int) or (path.endswith(_CODE_SUFFIXES) and mode in ("r", "rb")):
            return
        refused.append(f"open({path!r}, {mode!r})")
    elif event in _BLOCKED_EVENTS:
        refused.append(f"{event}{args!r}")


def import_dags(folder: Path) -> dict:
    global _guarding
    report: dict = {"errors": {}, "warnings": [], "refused": {}, "dags": {}, "modules": []}
    sys.addaudithook(_audit)
    for path in sorted(folder.glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"dag_file_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        refused.clear()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _guarding = True
            try:
                spec.loader.exec_module(module)
            except Exception as exc:
                report["errors"][path.name] = f"{type(exc).__name__}: {exc}"
            finally:
                _guarding = False
        report["warnings"] += [f"{path.name}: {w.category.__name__}: {w.message}" for w in caught]
        if refused:
            report["refused"][path.name] = list(refused)
        for value in vars(module).values():
            if isinstance(value, DAG):
                report["dags"][value.dag_id] = describe(value, path.name)
    heavy = ("pyspark", "deltalake")
    report["modules"] = sorted(m for m in sys.modules if m.split(".")[0] in heavy)
    return report


def describe(dag: DAG, file: str) -> dict:
    return {
        "file": file,
        "tags": sorted(dag.tags),
        "doc_md": dag.doc_md or "",
        "max_active_runs": dag.max_active_runs,
        "catchup": dag.catchup,
        "timetable": type(dag.timetable).__name__,
        "params": sorted(dag.params.keys()),
        "tasks": {
            task.task_id: {
                "owner": task.owner,
                "retries": task.retries,
                "retry_exponential_backoff": task.retry_exponential_backoff,
                "pool": task.pool,
                "operator": type(task).__name__,
                "upstream": sorted(task.upstream_task_ids),
                "outlets": [getattr(o, "name", str(o)) for o in task.outlets],
                "arguments": [str(a) for a in getattr(task, "application_args", None) or []],
                "conf": dict(getattr(task, "conf", None) or {}),
                "env": dict(getattr(task, "env_vars", None) or {}),
            }
            for task in dag.tasks
        },
    }


if __name__ == "__main__":
    print(json.dumps(import_dags(Path(sys.argv[1]))))
