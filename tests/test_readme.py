"""The README as an entrance: short, no placeholder showing, and every command it shows does
what it says (the Python example as a script and in a notebook, each shell command)."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
MAX_LINES = 200


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", README, re.M | re.S)


def _workbench_commands() -> list[list[str]]:
    """Each `python -m workbench ...` line of the README's shell blocks, as argv after `python -m workbench`."""
    commands = []
    for block in _blocks("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #")[0].strip()
            if line.startswith("python -m workbench "):
                commands.append(shlex.split(line)[3:])
    return commands


def test_the_readme_is_an_entrance():
    assert len(README.splitlines()) <= MAX_LINES
    for heading in ("## Install", "## Two commands", "## A first run", "## Lessons", "## Read more"):
        assert heading in README
    assert "![" in README and "docs/_static/dashboard.png" in README      # one picture of the dashboard


def test_no_placeholder_shows():
    visible = re.sub(r"\]\([^)]*\)", "]", README)          # link targets are not shown
    assert "{" not in re.sub(r"```.*?```", "", visible, flags=re.S), "a {PLACEHOLDER} shows in the README"
    assert not re.search(r"TBD|TODO|XXX", visible)
    assert "<!--" not in README


def test_the_address_is_written_in_one_place(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "binder" / "address.py"), "--check"], capture_output=True,
                          text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # setting it rewrites every link at once (on a copy)
    import shutil
    for name in ("pyproject.toml", "README.md", "CITATION.cff"):
        shutil.copy(ROOT / name, tmp_path / name)
    sys.path.insert(0, str(ROOT / "binder"))
    try:
        import address
    finally:
        sys.path.remove(str(ROOT / "binder"))
    assert set(address.set_address("someone/workbench", root=tmp_path)) == {"pyproject.toml", "README.md",
                                                                             "CITATION.cff"}
    assert address.current(tmp_path) == "someone/workbench" and address.disagreements(tmp_path) == []
    assert "https://mybinder.org/v2/gh/someone/workbench/HEAD?urlpath=lab/tree/notebooks/quickstart.ipynb" in \
        (tmp_path / "README.md").read_text()
    with pytest.raises(SystemExit):
        address.set_address("not an address", root=tmp_path)


def test_the_make_targets_it_names_exist():
    makefile = (ROOT / "Makefile").read_text()
    for target in set(re.findall(r"`make (\w[\w-]*)", README)):
        assert re.search(rf"^{target}:", makefile, re.M), f"make {target}: no such target"


def test_every_workbench_command_parses_and_reads_files_that_exist():
    from workbench.apps.cli import build_parser
    commands = _workbench_commands()
    assert len(commands) >= 6
    made: set[str] = set()
    for argv in commands:
        if "--help" in argv:
            continue
        args = build_parser().parse_args(argv)          # SystemExit(2) on an unknown flag
        for path in [getattr(args, "config", None), getattr(args, "experiment", None), *getattr(args, "runs", [])]:
            if path:
                assert (ROOT / path).exists() or any(path == m or path.startswith(m + "/") for m in made), \
                    f"{' '.join(argv)}: {path} neither exists nor is made by a command above it"
        if getattr(args, "out", None):
            made.add(str(args.out))


SCRIPT_BUDGET = ("epochs=5", "epochs=1")        # the same example, one epoch: what matters is that it runs


def _example() -> str:
    (code,) = [b for b in _blocks("python") if "wb.run(" in b]
    assert 'if __name__ == "__main__":' in code
    return code


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.timeout(300)
def test_the_first_example_runs_as_a_script(tmp_path):
    script = tmp_path / "first.py"
    script.write_text(_example().replace(*SCRIPT_BUDGET))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=280)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("completed ")
    assert (tmp_path / "runs" / "first" / "summary.json").exists()
    assert "bootstrapping phase" not in proc.stderr


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.timeout(300)
def test_the_first_example_runs_in_a_notebook(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(_example().replace(*SCRIPT_BUDGET)),
                nbformat.v4.new_code_cell("from workbench.execution.cluster import close_session\nclose_session()")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbclient.NotebookClient(nb, timeout=280, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
                            ).execute()
    text = "".join(o.get("text", "") for o in nb.cells[0].outputs if o.output_type == "stream")
    assert "completed " in text, nb.cells[0].outputs
    assert (tmp_path / "runs" / "first" / "summary.json").exists()


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.timeout(600)
def test_the_run_and_compare_commands_do_what_they_say(tmp_path):
    """The README's real-cluster commands in order, each run cut to a few steps."""
    from workbench.apps.cli import main
    ran = 0
    for argv in _workbench_commands():
        if argv[0] not in ("run", "compare", "algorithms") or "--simulate" in argv or "--help" in argv:
            continue      # simulated ones: tests/test_sim_determinism.py; reproduce: tests/test_reproduce.py
        argv = [a if not a.startswith("runs/") else str(tmp_path / a) for a in argv]
        argv = [str(tmp_path / a) if a == "compare.html" else a for a in argv]
        if argv[0] == "run":
            argv = [a for a in argv] + ["--steps", "5", "--no-progress"]
        assert main(argv) == 0, argv
        ran += 1
    assert ran >= 4
    assert (tmp_path / "compare.html").exists()
