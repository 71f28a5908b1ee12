"""Doctest collection of the workbench package (`--doctest-modules`, see pyproject.toml).

Test infrastructure, not part of the library (pytest loads it when it collects this
folder): setup.py leaves it out of the wheel. It sits here rather than at the repository
root: a root conftest.py would be the module `conftest` that the tests' `from conftest
import ...` (tests/conftest.py) must find, also inside Dask worker processes, which
unpickle test functions.

Collecting a module's doctests imports the module. A module whose top-level imports
(plain, or inside a top-level `try:` that turns a missing extra into one line) need an
optional extra that is not installed here (plotly/ipywidgets of the `lab` extra, Dask on
the GPU host, CuPy, torch; or named in a module-level `DOCTEST_NEEDS` tuple, for a module
that imports it lazily) is left out of doctest collection instead of failing it; the
end of the session names each module left out and the package it lacks, so nothing is
skipped silently. Tests under tests/ are untouched: they skip with their own reasons.
"""
from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
LEFT_OUT: dict[str, str] = {}      # module path -> the missing package


def _doctest_needs(node: ast.stmt) -> list[str]:
    """The packages a module-level `DOCTEST_NEEDS = ("torch", ...)` names: what its doctests
    import lazily (inside the functions they call), so no top-level import shows it."""
    if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "DOCTEST_NEEDS" for t in node.targets)
            and isinstance(node.value, (ast.Tuple, ast.List))):
        return [e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def _missing_top_level_import(path: Path) -> str | None:
    """The first third-party package `path` imports at module level (or names in its
    `DOCTEST_NEEDS`) that is not installed."""
    tree = ast.parse(path.read_text())
    nodes = [n for top in tree.body for n in ([top] + (top.body if isinstance(top, ast.Try) else []))]
    for node in nodes:
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            names = _doctest_needs(node)
        if not names:
            continue
        for name in names:
            top = name.split(".")[0]
            if top in sys.stdlib_module_names or top == "workbench":
                continue
            try:
                found = importlib.util.find_spec(top) is not None
            except (ImportError, ValueError):    # a package blocked in sys.modules
                found = False
            if not found:
                return top
    return None


def pytest_ignore_collect(collection_path: Path, config) -> bool | None:
    path = Path(collection_path)
    if path.name == "__main__.py" and PACKAGE in path.parents:
        return True                 # importing it runs the CLI
    if path.name == "sitecustomize.py" and PACKAGE in path.parents:
        return True                 # a worker's start-up hook (execution/spawnhook): importing it ignores Ctrl-C
    if path.suffix != ".py" or PACKAGE not in path.parents or path.name == "conftest.py":
        return None
    missing = _missing_top_level_import(path)
    if missing is None:
        return None
    LEFT_OUT[str(path.relative_to(PACKAGE.parent))] = missing
    return True


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if LEFT_OUT:
        terminalreporter.write_line("doctests not collected (optional package missing): " + ", ".join(
            f"{module} (needs {package})" for module, package in sorted(LEFT_OUT.items())))
