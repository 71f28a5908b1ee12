"""Layering: who may import what (STYLE.md), checked on the source and at import time."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "workbench"


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def modules():
    return [p for p in PKG.rglob("*.py")]


@pytest.mark.parametrize("library, allowed", [
    ("cupy", {"maths/backend.py"}),
    ("plotly", {"ui"}),
    ("ipywidgets", {"ui"}),
    ("distributed", {"execution/cluster.py", "comm", "execution/engine.py", "execution/transports/dask.py"}),
])
def test_only_the_allowed_modules_import(library, allowed):
    offenders = []
    for path in modules():
        rel = path.relative_to(PKG)
        if rel.parts[0] in allowed or str(rel) in allowed:
            continue
        if library in imported_modules(path):
            offenders.append(str(rel))
    assert not offenders, f"{library} imported by {offenders}"


def test_import_workbench_is_light():
    code = ("import sys, workbench; heavy = [m for m in ('plotly', 'ipywidgets', 'distributed', 'dask', 'cupy', "
            "'pandas', 'sklearn') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]", out


TOP = {"api.py", "apps/cli.py", "apps/reproduce.py"}   # entry points above every layer


def test_nothing_below_ui_imports_ui():
    for path in modules():
        rel = path.relative_to(PKG)
        if rel.parts[0] == "ui" or str(rel) in TOP:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                module = node.module or ""
                assert not (node.level and (module == "ui" or module.startswith("ui."))), rel
                assert not module.startswith("workbench.ui"), rel
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("workbench.ui") for a in node.names), rel


def test_registry_matches_the_algorithm_table():
    from workbench.algorithms import REGISTRY
    from workbench.config import ALGORITHMS
    assert set(REGISTRY) == set(ALGORITHMS) - {"sgd"}
