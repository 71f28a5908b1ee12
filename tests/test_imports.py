"""Layering: who may import what (docs/architecture.md, "Layers"), checked on the source and at import time."""
import ast
import functools
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
    return [p for p in PKG.rglob("*.py") if p.name != "conftest.py"]   # conftest: pytest's, not the library's


@pytest.mark.parametrize("library, allowed", [
    ("cupy", {"maths/backend.py"}),
    ("plotly", {"ui"}),
    ("ipywidgets", {"ui"}),
    ("distributed", {"execution/cluster.py", "comm", "execution/engine.py", "execution/transports/dask.py",
                     "execution/transports/dask_worker.py"}),
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
    assert set(REGISTRY) == set(ALGORITHMS)


# ------------------------------------------------------------------ the module graph (static, on the AST)
def module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in modules()}


def _lazy_reexports(tree: ast.Module) -> set[int]:
    """Nodes inside a package's module-level `__getattr__`: lazy re-exports of public names
    (`workbench.run`, `workbench.ui.Dashboard`), which run on attribute access, never on
    import, and are aliases rather than dependencies of the package."""
    return {id(n) for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == "__getattr__"
            for n in ast.walk(f)}


def _function_bodies(tree: ast.Module) -> set[int]:
    """Nodes that run only when a function is called (lazy imports live there)."""
    return {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            for n in ast.walk(f) if n is not f}


@functools.cache
def workbench_imports(name: str, eager_only: bool = False) -> frozenset[str]:
    """The workbench modules `name` imports anywhere in its source (module level, inside
    functions, under TYPE_CHECKING): a lazy import is still a dependency. `eager_only`:
    only the imports that run when the module itself is imported."""
    path = MODULES[name]
    is_pkg = path.name == "__init__.py"
    base = name.split(".") if is_pkg else name.split(".")[:-1]
    tree = ast.parse(path.read_text())
    skip = _lazy_reexports(tree) if is_pkg else set()
    if eager_only:
        skip |= _function_bodies(tree)
    out = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = alias.name
                while target and target not in MODULES:
                    target = target.rpartition(".")[0]
                if target:
                    out.add(target)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                target = ".".join(base[:len(base) - node.level + 1] + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target not in MODULES:
                continue
            for alias in node.names:   # `from . import api` imports the module workbench.api
                sub = f"{target}.{alias.name}"
                out.add(sub if sub in MODULES else target)
    out.discard(name)
    return frozenset(out)


def import_graph(eager_only: bool = False) -> dict[str, set[str]]:
    """Module -> the workbench modules it imports (`eager_only`: at import time only)."""
    return {name: set(workbench_imports(name, eager_only)) for name in MODULES}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as [a, b, ..., a], or None (iterative depth-first search)."""
    state: dict[str, int] = {}      # 1: on the current path, 2: done
    for root in sorted(graph):
        if root in state:
            continue
        path, stack = [root], [iter(sorted(graph[root]))]
        state[root] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph.get(nxt, ()))))
    return None


def test_the_cycle_finder_finds_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None
    graph = import_graph()
    assert "workbench.analysis.sweep" in graph["workbench.api"]                  # a lazy import counts
    assert "workbench.api" in graph["workbench.apps.cli"]                        # `from .. import api`
    assert "workbench.data.order" in graph["workbench.data"]                     # a package's re-export
    eager = import_graph(eager_only=True)
    assert "workbench.analysis.sweep" not in eager["workbench.api"]              # ... but not at import time
    assert "workbench.config" in eager["workbench.api"]


def test_no_import_cycle_among_the_modules():
    # lazy imports count: a cycle through a function-level import is still a cycle
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


# Layers, lowest first: a module may import its own layer and the ones below it. The
# entry points (api, apps, ui) sit on top; `workbench` itself (the package root) only
# holds the version and lazy re-exports, so anything may read it. An entry names a
# subpackage or top-level module, or one module ("data.dataset": a dataset's facts, read
# before its data). The algorithms' declarations are `config.registry`: they import nothing
# of the workbench.
LAYERS = [
    {"workbench", "util", "config", "usercode", "data.dataset", "data.files"},
    {"results", "measure", "data", "learning", "checkpoint"},
    {"maths"},
    {"problem", "trained"},                   # trained: a run's parameters put to use (predict, generate)
    {"comm"},
    {"algorithms"},
    {"sim"},                                  # the simulator's clock, costs and profiles
    {"execution", "sim.transport", "sim.lockstep", "sim.server", "sim.roles"},   # the simulator's transport
    #                                           and its fast drivers: a transport beside threads and Dask
    {"analysis"},
    {"sim.run", "sim.validate", "sim.crossover"},  # what runs simulations: above the engine
    {"bench"},                                # the benchmarks and measurement tools: they run all of the above
    {"api"},                                  # wb.run, wb.sweep, wb.load: what the apps and the ui call
    {"apps", "ui", "__main__"},
]
# The upward imports kept on purpose, each with its reason.
UPWARD: set[tuple[str, str]] = {
    # a saved run's report.html is written by the run that saves it, and the report is the
    # ui's plotly figures (`api.write_run_report`, refused in a line without the `lab` extra)
    ("workbench.api", "workbench.ui.report"),
}


def layer_of(module: str) -> int:
    parts = module.split(".")[1:] or [module]
    for n in range(len(parts), 0, -1):           # the most specific entry wins
        for rank, names in enumerate(LAYERS):
            if ".".join(parts[:n]) in names:
                return rank
    raise AssertionError(f"{module}: in no layer of LAYERS (add its subpackage there)")


def test_every_import_points_down_the_layers():
    upward = []
    for module, targets in import_graph().items():
        for target in targets:
            if layer_of(target) > layer_of(module) and (module, target) not in UPWARD:
                upward.append(f"{module} -> {target}")
    assert not upward, "imports that point up the layers: " + ", ".join(sorted(upward))


def test_the_upward_exceptions_are_still_needed():
    graph = import_graph()
    assert all(target in graph[module] for module, target in UPWARD)


def test_transports_never_import_the_engine():
    # the engine hands them worker_main; a transport that reads the engine closes a cycle
    graph = import_graph()
    transports = [m for m in graph if m.startswith("workbench.execution.transports")
                  or m in ("workbench.sim.transport", "workbench.sim.lockstep", "workbench.sim.server")]
    offenders = [m for m in transports if "workbench.execution.engine" in graph[m]]
    assert not offenders, offenders
    assert "workbench.sim.transport" in transports                  # the simulator is one of them


def test_the_network_model_has_one_home():
    # costmodel and the simulator charge the same alpha-beta formulas, from comm.network
    from workbench.analysis import costmodel
    from workbench.comm import network
    from workbench.sim import costs
    assert costmodel.NETWORKS is network.NETWORKS and costmodel.Network is network.Network
    assert costs.ring_allreduce_time is network.ring_allreduce_time is costmodel.ring_allreduce_time


@pytest.mark.parametrize("package, below", [
    ("maths", {"config", "data", "util", "usercode"}),   # the maths of a step: no transport, no engine
    ("comm", {"maths", "config", "util"}),            # transports move arrays, never read runs
    ("data", {"util"}),                               # datasets and the minibatch order stand alone
])
def test_low_subpackages_import_only_what_is_below_them(package, below):
    for module, targets in import_graph().items():
        if module.split(".")[1:2] != [package]:
            continue
        outside = {t.split(".")[1] for t in targets if "." in t and t.split(".")[1] != package}
        assert outside <= below, f"{module} imports {sorted(outside - below)}"


def test_validating_a_config_reads_the_registry_without_loading_the_algorithms():
    # the declarations sit at the bottom (config.registry imports nothing of the
    # workbench); the algorithms, and pandas with them, load only when a run needs them
    code = ("import sys; from workbench.config import RunConfig; RunConfig(algorithm='ltfb', cpus=4, trainers=2); "
            "print(sorted(m for m in sys.modules if m.startswith('workbench.algorithms')), 'pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[] False", out
    assert workbench_imports("workbench.config.registry") == frozenset()
    from workbench.algorithms import REGISTRY
    assert REGISTRY["sync_sgd"].cls.__name__ == "SyncSGD" and REGISTRY["sync_sgd"].cls.spec is REGISTRY["sync_sgd"]
