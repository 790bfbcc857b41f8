"""One Delta boundary: only ``ticdc_lake.delta`` touches delta-rs (``deltalake``), and the rest
of the code imports it through the package's interface (its ``__init__``), not its submodules.

Every .py under include/, plugins/, dags/ and spark_jobs/ is parsed, imports inside functions
included, so the boundary does not drift. Tests may use ``deltalake`` for their assertions.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import ticdc_lake.delta

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("include", "plugins", "dags", "spark_jobs")
DELTA = ROOT / "include" / "ticdc_lake" / "delta"
SUBMODULES = {path.stem for path in DELTA.glob("*.py")} - {"__init__"}

# The imports of delta's submodules that remain, file → submodules. Each is the file-level
# write protocol of a stage whose own Spark tasks write (or split) a table's files: the driver
# plans the write (write.plan_write, schema.TableSchema), the tasks write files (files.TaskFiles,
# write_files), the driver commits them once (files.commit_files) or deletes them
# (delete_write); decode and its splits read bronze by the snapshot's files (read.DataFile,
# present_files). The interface has no calls for these steps yet. Remove an entry once its
# imports are gone (the test fails on entries no longer needed).
ALLOWED_SUBMODULE_IMPORTS = {
    "include/ticdc_lake/bronze/land_batch.py": {"files", "read", "schema", "write"},
    "include/ticdc_lake/bronze/land_pass.py": {"files"},
    "include/ticdc_lake/silver/decode.py": {"files", "read", "schema", "write"},
    "include/ticdc_lake/silver/bronze_splits.py": {"read"},
}


def _sources() -> list[Path]:
    return sorted(path for top in SOURCES for path in (ROOT / top).rglob("*.py"))


def _package(path: Path) -> str | None:
    """The dotted package of a file under include/ (for relative imports), else None."""
    parts = path.relative_to(ROOT).parts
    return ".".join(parts[1:-1]) if parts[0] == "include" else None


def _imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """(line, module, names) of every import in the file, relative ones made absolute."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                package = (_package(path) or "").split(".")
                base = package[: len(package) - node.level + 1]
                module = ".".join([*base, module] if module else base)
            found.append((node.lineno, module, [alias.name for alias in node.names]))
    return found


def _inside_delta(path: Path) -> bool:
    return path.is_relative_to(DELTA)


def test_only_the_delta_package_imports_deltalake():
    found = [
        f"{path.relative_to(ROOT)}:{line}: imports {module}"
        for path in _sources()
        if not _inside_delta(path)
        for line, module, _ in _imports(path)
        if module == "deltalake" or module.startswith("deltalake.")
    ]
    assert not found, "use ticdc_lake.delta's interface instead:\n" + "\n".join(found)


def test_delta_submodules_are_imported_only_where_allowed():
    found: dict[str, set[str]] = {}
    lines = []
    for path in _sources():
        if _inside_delta(path):
            continue
        name = str(path.relative_to(ROOT))
        for line, module, names in _imports(path):
            if module.startswith("ticdc_lake.delta."):
                used = {module.split(".")[2]}
            elif module == "ticdc_lake.delta":
                used = SUBMODULES & set(names)
            else:
                continue
            if used:
                found.setdefault(name, set()).update(used)
                if not used <= ALLOWED_SUBMODULE_IMPORTS.get(name, set()):
                    lines.append(f"{name}:{line}: imports ticdc_lake.delta's {sorted(used)}")
    assert not lines, "import from ticdc_lake.delta (its __init__) instead:\n" + "\n".join(lines)
    assert found == ALLOWED_SUBMODULE_IMPORTS, "the allow-list is out of date"


def test_the_interface_lists_every_name_it_exports():
    """The package's docstring is its interface: one line per name."""
    doc = ticdc_lake.delta.__doc__ or ""
    listed = {word.split("(")[0].split(".")[0].rstrip(",") for line in doc.splitlines()
              if line.startswith("    ") for word in line.split()[:2]}  # fmt: skip
    assert set(ticdc_lake.delta.__all__) <= listed | {
        name for name in ticdc_lake.delta.__all__ if name.endswith("Error")
    }
    for name in ticdc_lake.delta.__all__:
        assert getattr(ticdc_lake.delta, name) is not None


def test_importing_the_interface_loads_no_spark():
    """The quality pages read tables through it and must not load Spark (pyspark, py4j)."""
    code = (
        "import sys; import ticdc_lake.delta as d; d.open_table; d.read_arrow; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
