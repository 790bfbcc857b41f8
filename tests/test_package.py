"""The package as a whole: what it declares it needs, and which way its imports point."""

from __future__ import annotations

import ast
import importlib.metadata
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "include" / "ticdc_lake"


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at the top or inside a function (absolute imports)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def test_pyproject_declares_every_library_the_package_imports():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = [r for group in project.get("optional-dependencies", {}).values() for r in group]
    declared = {canonicalize_name(Requirement(r).name) for r in [*project["dependencies"], *extras]}
    distributions = importlib.metadata.packages_distributions()
    tops = {
        module.split(".")[0] for path in PACKAGE.rglob("*.py") for module in imported_modules(path)
    }
    libraries = tops - set(sys.stdlib_module_names) - {"ticdc_lake"}
    undeclared = {
        top: names
        for top in libraries
        if not (names := {canonicalize_name(d) for d in distributions.get(top, [top])}) & declared
    }
    assert not undeclared, f"imported but not in pyproject.toml's dependencies: {undeclared}"


def test_no_import_points_up_or_round():
    """spark.py builds sessions and knows nothing of the lake (delta/ imports it); reading
    export files knows nothing of the protocols (decoding them is the CLI's and the stages')."""
    spark = imported_modules(PACKAGE / "runtime" / "spark.py")
    assert not {m for m in spark if m.startswith("ticdc_lake.delta")}
    exports = imported_modules(PACKAGE / "bronze" / "exports.py")
    assert not {m for m in exports if m.startswith("ticdc_lake.protocols")}


# Units a reader takes in whole: a class past this many lines is several things, a function past
# that many several steps (docstrings and comments count: they are read too).
CLASS_LINES, FUNCTION_LINES = 150, 60


def oversized_units(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            limit = (
                CLASS_LINES
                if isinstance(node, ast.ClassDef)
                else FUNCTION_LINES
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                else None
            )
            if limit and node.end_lineno - node.lineno + 1 > limit:
                lines = node.end_lineno - node.lineno + 1
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {lines} lines")
    return found


def test_no_class_or_function_is_too_long_to_take_in_whole():
    folders = [PACKAGE, ROOT / "dags", ROOT / "plugins", ROOT / "spark_jobs"]
    assert [unit for folder in folders for unit in oversized_units(folder)] == []
