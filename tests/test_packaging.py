"""Packaging: a distribution name of its own, one version, license and citation files,
consistent extras, lessons inside the wheel (a real non-editable install, slow), lint."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

import workbench

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
EXTRAS = {k: [Requirement(r) for r in v] for k, v in PROJECT["optional-dependencies"].items()}


def test_distribution_name_is_its_own_and_the_import_package_stays_workbench():
    assert PROJECT["name"] == "parallel-workbench"
    assert PROJECT["scripts"] == {"parallel-workbench": "workbench.apps.cli:main"}   # no clashing `workbench` script
    assert (ROOT / "workbench" / "__init__.py").exists()


def test_one_source_for_the_version():
    assert "version" not in PROJECT and PROJECT["dynamic"] == ["version"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "workbench.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", workbench.__version__)
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["version"] == workbench.__version__
    assert f"## [{workbench.__version__}]" in (ROOT / "CHANGELOG.md").read_text()


def test_license_and_citation():
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("BSD 3-Clause License") and "the workbench authors" in text
    assert "Neither the name of the copyright holder" in text
    assert PROJECT["license"] == "BSD-3-Clause" and PROJECT["license-files"] == ["LICENSE"]
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["license"] == "BSD-3-Clause"
    titles = " | ".join(r["title"] for r in cff["references"])
    for needle in ("Knights Landing", "Scalable Parallel Training", "Involving CPUs", "Large Minibatch SGD"):
        assert needle in titles
    families = {a["family-names"] for r in cff["references"] for a in r["authors"]}
    assert {"You", "Buluç", "Demmel", "Jacobs", "Le", "Goyal"} <= families


def test_classifiers_urls_and_python_floor():
    assert PROJECT["requires-python"] == ">=3.11"      # dask-cuda 26.x, and tomllib in the tests
    assert sys.version_info >= (3, 11)
    assert "Typing :: Typed" in PROJECT["classifiers"]
    assert {"Homepage", "Source", "Issues", "Changelog", "Binder"} <= set(PROJECT["urls"])
    assert (ROOT / "workbench" / "py.typed").exists()


def test_gpu_extras_agree():
    names = {k: {r.name for r in v} for k, v in EXTRAS.items()}
    assert {"dask-cuda", "cupy-cuda12x", "nvidia-nccl-cu12"} <= names["gpu"]
    assert {"dask-cuda", "cupy-cuda13x", "nvidia-nccl-cu13"} <= names["gpu-cu13"]
    cuda = {k: next(r for r in EXTRAS[k] if r.name == "dask-cuda") for k in ("gpu", "gpu-cu13")}
    assert cuda["gpu"].extras == {"cu12"} and cuda["gpu-cu13"].extras == {"cu13"}
    assert str(cuda["gpu"].specifier) == str(cuda["gpu-cu13"].specifier)


def test_private_api_users_are_capped():
    lab = {r.name: r.specifier for r in EXTRAS["lab"]}
    for name in ("plotly", "anywidget"):
        assert any(s.operator == "<" for s in lab[name]), name
    import anywidget
    import plotly
    assert plotly.__version__ in lab["plotly"] and anywidget.__version__ in lab["anywidget"]  # tested versions


def test_threadpoolctl_is_declared_for_its_one_user():
    runtime = {Requirement(r).name for r in PROJECT["dependencies"]}
    assert "threadpoolctl" in runtime
    users = sorted(p for p in (ROOT / "workbench").rglob("*.py") if "threadpoolctl" in p.read_text())
    # util/blas.py: every worker runs the run's BLAS threads while its loop lasts (the one rule of
    # every transport), and the simulator's calibration of this machine's core pins one thread
    # through it while it times; both still run (slower) where it is missing
    assert users == [ROOT / "workbench" / "util" / "blas.py"]
    assert all("except ImportError" in p.read_text() for p in users)


def test_package_list_names_every_package_in_the_tree():
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "workbench").rglob("__init__.py")}
    lessons = {"workbench._lessons.notebooks", "workbench._lessons.experiments"}
    hook = {"workbench.execution.spawnhook"}   # no __init__: its folder goes first on the workers' PYTHONPATH
    assert listed == found | lessons | hook
    assert PYPROJECT["tool"]["setuptools"]["package-dir"] == {"workbench._lessons.notebooks": "notebooks",
                                                              "workbench._lessons.experiments": "experiments"}


def test_ruff_is_clean():
    """The README's test path lints too (ruff's configuration is in pyproject.toml)."""
    ruff = shutil.which("ruff", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    if ruff is None:
        pytest.skip("ruff is not installed (it is in the test extra)")
    proc = subprocess.run([ruff, "check", "--no-cache", "--output-format", "concise", str(ROOT)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_plain_install_carries_the_lessons(tmp_path):
    """Build the wheel, install it (not editable, no source tree on the path) into a fresh
    venv that sees this environment's packages, and copy the lessons out of it."""
    wheels = tmp_path / "wheels"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(wheels), str(ROOT)],
                           capture_output=True, text=True)   # pyproject's build backend (setuptools >= 77)
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-2000:]
    (wheel,) = wheels.glob("parallel_workbench-*.whl")
    assert workbench.__version__ in wheel.name
    import zipfile
    names = zipfile.ZipFile(wheel).namelist()
    assert not [n for n in names if n.endswith("conftest.py")], "pytest's scaffolding is not the library's"
    assert "workbench/data/digits.csv.gz" in names
    assert "workbench/execution/spawnhook/sitecustomize.py" in names   # what a worker runs first (Ctrl-C at start)
    env_dir = tmp_path / "venv"
    venv.create(env_dir, system_site_packages=True, with_pip=False)   # this pip installs into it (--python):
    py = env_dir / "bin" / "python"                                     # no ensurepip, seconds saved
    # the shared dev environment has an editable workbench: the new venv must not see it
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    inst = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--no-index",
                           str(wheel)], capture_output=True, text=True, env=env)
    assert inst.returncode == 0, inst.stderr[-2000:]
    work = tmp_path / "elsewhere"
    work.mkdir()
    where = subprocess.run([str(py), "-c", "import workbench, sys; print(workbench.__file__)"],
                           capture_output=True, text=True, cwd=work, env=env)
    assert where.returncode == 0 and str(env_dir) in where.stdout, where.stdout + where.stderr
    version = subprocess.run([str(env_dir / "bin" / "parallel-workbench"), "--version"], capture_output=True,
                             text=True, cwd=work, env=env)
    assert version.stdout.strip().startswith(f"parallel-workbench {workbench.__version__}")
    usage = subprocess.run([str(env_dir / "bin" / "parallel-workbench"), "run", "--help"], capture_output=True,
                           text=True, cwd=work, env=env)
    assert usage.stdout.startswith("usage: parallel-workbench run "), usage.stdout[:200]   # the command as called
    assert "python -m workbench" not in usage.stdout
    dest = work / "lessons"
    proc = subprocess.run([str(py), "-m", "workbench", "lessons", str(dest)], capture_output=True, text=True,
                          cwd=work, env=env)
    assert proc.returncode == 0, proc.stderr
    for part, pattern in (("notebooks", "*.ipynb"), ("experiments", "*.yaml")):
        expected = sorted(p.name for p in (ROOT / part).glob(pattern))
        assert sorted(p.name for p in (dest / part).glob(pattern)) == expected
    assert (dest / "experiments" / "gpu_check.sh").exists()


@pytest.mark.slow
def test_the_sdist_carries_every_file_the_tests_read(tmp_path):
    """docs/, benchmarks/, the notebooks, the conftests: the sdist's own tests run as a checkout's do."""
    git = shutil.which("git")
    tracked = subprocess.run([git, "ls-files"], capture_output=True, text=True, cwd=ROOT) if git else None
    if tracked is None or tracked.returncode != 0:
        pytest.skip("not a git checkout (an unpacked sdist): nothing to compare with")
    build = subprocess.run([sys.executable, "-m", "build", "--sdist", "--outdir", str(tmp_path), str(ROOT)],
                           capture_output=True, text=True)      # pyproject's backend, in an isolated env
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-2000:]
    import tarfile
    (path,) = tmp_path.glob("parallel_workbench-*.tar.gz")
    with tarfile.open(path) as sdist:
        inside = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    wanted = {f for f in tracked.stdout.splitlines()
              if f.split("/")[0] in ("workbench", "tests", "docs", "benchmarks", "notebooks", "experiments", "binder")
              and (ROOT / f).exists()}
    assert not sorted(wanted - inside), f"missing from the sdist: {sorted(wanted - inside)[:20]}"
    assert {"setup.py", "pyproject.toml", "MANIFEST.in", "README.md", "Makefile"} <= inside


def test_binder_builds_and_is_linked():
    env = yaml.safe_load((ROOT / "binder" / "environment.yml").read_text())
    deps = [d for d in env["dependencies"] if isinstance(d, str)]
    backend = Requirement(PYPROJECT["build-system"]["requires"][0])
    setuptools = next(d for d in deps if d.startswith("setuptools"))
    floor = re.search(r">=\s*([\d.]+)", setuptools).group(1)
    assert backend.name == "setuptools" and backend.specifier.contains(floor)   # the no-isolation build works
    assert "--no-build-isolation" in (ROOT / "binder" / "postBuild").read_text()
    url = PROJECT["urls"]["Binder"]
    assert url.startswith("https://mybinder.org/v2/gh/") and url.endswith("?urlpath=lab/tree/notebooks/quickstart.ipynb")
    assert (ROOT / "notebooks" / "quickstart.ipynb").exists()
    readme = (ROOT / "README.md").read_text()
    assert f"[![Binder](https://mybinder.org/badge_logo.svg)]({url})" in readme


def test_binder_memory_settings_say_what_they_do():
    start = (ROOT / "binder" / "start").read_text()
    for key in ("target 0.60", "spill  0.70", "pause  0.80", "terminate 0.95"):   # distributed's defaults
        assert key in start
    import dask
    import distributed  # noqa: F401  (loads distributed's defaults into dask.config)
    for name, documented in (("target", 0.6), ("spill", 0.7), ("pause", 0.8), ("terminate", 0.95)):
        assert dask.config.get(f"distributed.worker.memory.{name}") == documented, name
    assert "DASK_DISTRIBUTED__WORKER__MEMORY__TARGET=False" in start
    assert "DASK_DISTRIBUTED__WORKER__MEMORY__SPILL=False" in start
