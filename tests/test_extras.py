"""A base install without extras: each feature that needs one says which, in one line.

Every check runs the real command in a fresh interpreter in which the extras' packages
cannot be imported (`sys.modules[name] = None`, which makes `import name` raise
ModuleNotFoundError as an absent package does), so the messages are those a user of
`pip install parallel-workbench` sees. docs/install.md quotes them.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from workbench.util.extras import FEATURES, install_command, missing_extra_message

ROOT = Path(__file__).resolve().parents[1]
# the import names the lab and tensorboard extras bring (pyproject.toml)
EXTRA_MODULES = ("plotly", "ipywidgets", "anywidget", "papermill", "nbformat", "nbclient", "tensorboardX")
BLOCK = f"import sys; sys.modules.update(dict.fromkeys({EXTRA_MODULES!r}))\n"


def _bare(code: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCK + code], capture_output=True, text=True, cwd=cwd,
                          timeout=300)


def _cli(*argv: str) -> str:
    return f"from workbench.apps.cli import main; raise SystemExit(main({list(argv)!r}))"


@pytest.fixture(scope="module")
def bare_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """One saved run (single-process sgd, 5 steps) made without the extras: its folder and the command's output."""
    where = tmp_path_factory.mktemp("bare")
    proc = _bare(_cli("run", "--algorithm", "sgd", "--steps", "5", "--out", "r", "--no-progress"), where)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return where, proc


@pytest.fixture
def a_run(bare_run) -> Path:
    return bare_run[0]


def test_every_feature_names_an_extra_of_the_project():
    import tomllib
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(FEATURES.values()) <= set(extras)
    assert install_command("lab") == "pip install 'parallel-workbench[lab]'"


def test_run_says_why_there_is_no_report(bare_run):
    where, proc = bare_run
    assert (where / "r" / "summary.json").exists() and not (where / "r" / "report.html").exists()
    expected = f"note: no report.html in r: {missing_extra_message('report.html', 'plotly')}"
    assert expected in proc.stderr.splitlines(), proc.stderr


@pytest.mark.parametrize("feature, argv, package", [
    ("compare", ("compare", "r", "--out", "c.html"), "plotly"),
    ("export --tensorboard", ("export", "--tensorboard", "r", "--logdir", "tb"), "tensorboardX"),
    ("reproduce", ("reproduce", str(ROOT / "experiments" / "sync_async.yaml"), "--quick", "--out", "rep"),
     "papermill"),
])
def test_a_command_without_its_extra_is_one_line_and_exit_2(a_run, feature, argv, package):
    proc = _bare(_cli(*argv), a_run)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"error: {missing_extra_message(feature, package)}"]


@pytest.mark.parametrize("statement, feature, package", [
    ("import workbench.ui.dashboard", "the dashboard", "anywidget"),
    ("from workbench.ui import Dashboard", "the dashboard", "anywidget"),
    ("from workbench.ui import figures", "figures", "plotly"),
])
def test_importing_a_ui_module_without_the_lab_extra_says_so(tmp_path, statement, feature, package):
    proc = _bare(f"{statement}\n", tmp_path)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last == f"workbench.util.extras.MissingExtra: {missing_extra_message(feature, package)}"
