"""The documentation in docs/: it exists, what it names exists, and nothing cites
documents that are not in the repository."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import workbench as wb
from workbench.config import RunConfig

ROOT = Path(__file__).resolve().parents[1]
DOCS = {name: ROOT / "docs" / f"{name}.md" for name in ("architecture", "algorithms", "contributing", "install", "usage",
                                                         "simulator", "reproductions", "benchmarks", "gpu", "binder",
                                                         "testing", "lessons", "index", "api")}
IN_THE_README = {"architecture", "algorithms", "contributing", "install", "usage", "simulator", "reproductions",
                 "benchmarks", "gpu", "binder", "testing"}
OUTSIDE = re.compile(r"\b(DESIGN|ALGORITHMS|STYLE)\.md\b")


def _text(name: str) -> str:
    return DOCS[name].read_text()


def test_no_file_cites_documents_outside_the_repository():
    offenders = []
    for pattern in ("workbench/**/*.py", "tests/**/*.py", "*.md", "docs/*.md", "notebooks/*.ipynb",
                    "experiments/*", "Makefile", "pyproject.toml"):
        for path in ROOT.glob(pattern):
            if path.is_file() and path.name != "CHANGELOG.md" and path != Path(__file__):
                offenders += [f"{path.relative_to(ROOT)}:{i}" for i, line in
                              enumerate(path.read_text(errors="replace").splitlines(), 1) if OUTSIDE.search(line)]
    assert not offenders, f"cite docs/ instead: {offenders}"


def test_the_readme_and_the_docs_link_to_files_that_exist():
    for path in [ROOT / "README.md", *DOCS.values()]:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", path.read_text()):
            if "{" in target:       # a placeholder filled in elsewhere (the Binder badge)
                continue
            assert (path.parent / target).exists(), f"{path.name} links to {target}, which does not exist"
    readme = (ROOT / "README.md").read_text()
    assert all(f"docs/{name}.md" in readme for name in IN_THE_README)


def _named_paths(text: str) -> set[str]:
    """Backticked paths in a doc: `algorithms/easgd.py`, `tests/test_data.py`, `experiments/`."""
    return {m for m in re.findall(r"`([\w./-]+(?:\.py|\.sh|/))`", text) if "/" in m}


@pytest.mark.parametrize("name", list(DOCS), ids=lambda n: f"{n}.md")
def test_every_path_a_doc_names_exists(name):
    missing = []
    generated = {"test-artifacts/browser/", "runs/", "docs/_build/html/", "docs/_lessons/", "wheels/",
                 "runs/demo/"}     # written by the tests, by runs, by make docs and by gpu_wheels.sh
    for p in _named_paths(_text(name)) - generated:
        if not any((base / p).exists() for base in (ROOT, ROOT / "workbench")):
            missing.append(p)
    assert not missing, f"docs/{name}.md names {sorted(missing)}, not in the repository"


def test_every_algorithm_has_its_section_and_every_knob_is_a_config_field():
    text = _text("algorithms")
    for algorithm in wb.ALGORITHMS:
        assert f"`{algorithm}`" in text, f"docs/algorithms.md does not describe {algorithm}"
    knobs = set()
    for line in re.findall(r"Knobs: (.*?)(?:\.\s|\n\S|$)", text, re.S):
        knobs |= set(re.findall(r"`(\w+)`", line))
    fields = set(RunConfig.model_fields)
    assert knobs, "no Knobs: lines found"
    assert knobs <= fields, f"knobs that are not RunConfig fields: {sorted(knobs - fields)}"
    table = set(re.findall(r"^\|(?! symbol)[^|]+\|[^|]+\| (`\w+`(?:, `\w+`)*)", text, re.M))
    named = {f for row in table for f in re.findall(r"`(\w+)`", row)}
    assert named <= fields, f"notation table names {sorted(named - fields)}"


def test_the_architecture_names_every_subpackage():
    text = _text("architecture")
    packages = sorted(p.parent.name for p in (ROOT / "workbench").glob("*/__init__.py"))
    for package in packages:
        assert f"{package}/" in text, f"docs/architecture.md does not place workbench/{package}/"


def test_the_simulator_doc_names_every_profile_a_run_can_ask_for():
    """docs/simulator.md's list of profiles is every device, timing model, network and host
    link `--device`, `--timing-model` and `--network` accept (it had lost h200, the language
    models and mcdram as they were added)."""
    from workbench.analysis.costmodel import NETWORKS
    from workbench.sim import profiles
    from workbench.sim.timing_models import TIMING_MODELS
    text = _text("simulator")
    names = [*profiles.DEVICES, *TIMING_MODELS, *NETWORKS, *profiles.LINKS]
    missing = [n for n in names if f"`{n}`" not in text]
    assert not missing, f"docs/simulator.md does not name {missing}"


def test_every_class_name_a_doc_quotes_is_in_the_code():
    """A CamelCase name in backticks (`ParameterServer`, `FigureSlot`) is one the code, the tests
    or the benchmarks still use: docs/algorithms.md named the server's old class three times after it was
    split into comm/roles.py's classes."""
    code = "\n".join(p.read_text() for pattern in ("workbench/**/*.py", "tests/**/*.py", "benchmarks/*.py")
                     for p in ROOT.glob(pattern))
    stale = {f"{path.name}: {name}" for path in [ROOT / "README.md", *ROOT.glob("docs/*.md")]
             for name in re.findall(r"`([A-Z][a-z]+[A-Z][A-Za-z0-9]*)`", path.read_text()) if name not in code}
    assert not stale, sorted(stale)


def test_every_command_a_docs_code_block_shows_parses():
    """Each `python -m workbench ...` line of the docs' code blocks (continuation lines
    joined, comments dropped) is a command the CLI accepts: its subcommand and every flag
    exist (argparse exits 2 on one that does not). The README's own test runs its commands."""
    import contextlib
    import io
    import shlex

    from workbench.apps.cli import build_parser
    refused, seen = [], 0
    for path in ROOT.glob("docs/*.md"):
        for block in re.findall(r"^```[a-z]*\n(.*?)^```", path.read_text(), re.M | re.S):
            for line in block.replace("\\\n", " ").splitlines():
                line = line.split(" #")[0].strip()
                if not line.startswith("python -m workbench ") or " --help" in line:
                    continue
                seen += 1
                said = io.StringIO()
                try:
                    with contextlib.redirect_stderr(said):
                        build_parser().parse_args(shlex.split(line)[3:])
                except SystemExit:
                    refused.append(f"{path.name}: {line} -> {said.getvalue().strip().splitlines()[-1]}")
    assert seen >= 20 and not refused, refused


STARTS_WORKERS = re.compile(r"\bwb\.(?:run|resume|sweep|grid|make_cluster|connect)\(|\bDashboard\(")


def test_every_python_snippet_that_starts_workers_is_guarded():
    """A Python block of the README or docs/ that starts workers (wb.run, wb.resume, wb.sweep,
    wb.grid, a cluster, a dashboard) does it under `if __name__ == "__main__":`: copied into a
    script without it, the local cluster's worker processes import the file again and start
    their own (docs/checkpoints.md's wb.resume snippet did: `Nanny failed to start`)."""
    unguarded, seen = [], 0
    for path in [ROOT / "README.md", *sorted(ROOT.glob("docs/*.md"))]:
        text = path.read_text()
        for block in re.finditer(r"^```python\n(.*?)^```", text, re.M | re.S):
            code = block.group(1)
            if not STARTS_WORKERS.search(code):
                continue
            seen += 1
            if 'if __name__ == "__main__":' not in code:
                unguarded.append(f"{path.name}:{text[:block.start()].count(chr(10)) + 1}")
    assert seen >= 4 and not unguarded, f"snippets that start workers without the guard: {unguarded}"


def test_the_extras_tables_name_every_extra_and_the_base_dependencies():
    """README's and docs/install.md's extras tables left out the `torch` extra pyproject.toml
    defines, and install.md's base row left out cryptography and threadpoolctl."""
    import tomllib
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = set(project["optional-dependencies"])
    for path in (ROOT / "README.md", DOCS["install"]):
        rows = [line for line in path.read_text().splitlines() if line.startswith("| `") or line.startswith("| (none)")]
        named = {e for row in rows for e in re.findall(r"`([\w-]+)`", row.split("|")[1])}
        assert extras <= named, f"{path.name}'s extras table leaves out {sorted(extras - named)}"
    base_row, = [line for line in _text("install").splitlines() if line.startswith("| (none)")]
    names = {"numpy": "NumPy", "dask": "Dask", "distributed": "distributed", "pandas": "pandas", "pyyaml": "PyYAML",
             "tqdm": "tqdm", "pydantic": "pydantic", "pooch": "pooch", "greenlet": "greenlet",
             "cryptography": "cryptography", "threadpoolctl": "threadpoolctl"}
    deps = {re.match(r"[\w-]+", d).group(0).lower() for d in project["dependencies"]}
    assert deps <= set(names), f"a new base dependency: name it here and in install.md: {sorted(deps - set(names))}"
    missing = [names[d] for d in deps if names[d] not in base_row]
    assert not missing, f"docs/install.md's base install leaves out {missing}"
