"""The GPU check's scripts, by their dry runs (no GPU, no download here): experiments/gpu_wheels.sh
fetches wheels for the Python floor and the GPU host's Python, CUDA 12 and 13, NCCL included;
experiments/gpu_check.sh installs the GPU extra of the host's CUDA and never the other's."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
FLOOR = re.search(r">=\s*(\d+\.\d+)", PROJECT["requires-python"]).group(1)
pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="the scripts are bash")


def _script(name: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(ROOT / "experiments" / name), *args], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable}, timeout=60)


def _plan(stdout: str) -> dict[tuple[str, str], set[str]]:
    """(python, cuda) -> the requirement names each pip download asks for."""
    plan = {}
    for m in re.finditer(r"^python (\S+), CUDA (\d+): .* --platform any (.*)$", stdout, re.M):
        plan[(m.group(1), m.group(2))] = {Requirement(r).name for r in m.group(3).split()}
    return plan


@pytest.mark.parametrize("host, pythons", [((), {FLOOR, "3.12"}), (("--python", "3.13"), {FLOOR, "3.13"})])
def test_gpu_wheels_covers_both_pythons_and_both_cudas_with_nccl(host, pythons):
    proc = _script("gpu_wheels.sh", "--dry-run", *host)
    assert proc.returncode == 0, proc.stderr
    plan = _plan(proc.stdout)
    assert set(plan) == {(py, cuda) for py in pythons for cuda in ("12", "13")}
    runtime = {Requirement(r).name for r in PROJECT["dependencies"]}
    for (_, cuda), names in plan.items():
        extra = PROJECT["optional-dependencies"]["gpu" if cuda == "12" else "gpu-cu13"]
        assert {Requirement(r).name for r in extra} | runtime <= names
        assert f"nvidia-nccl-cu{cuda}" in names and "scikit-learn" not in names
    assert "wheels in" not in proc.stdout          # a dry run downloads nothing


@pytest.mark.parametrize("cuda, other", [("12", "13"), ("13", "12")])
def test_gpu_check_resolves_the_extra_of_the_hosts_cuda_only(cuda, other, tmp_path):
    proc = _script("gpu_check.sh", "--dry-run", "--cuda", cuda, str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith(f"dry run (CUDA {cuda}):"))
    names = {Requirement(r).name: Requirement(r) for r in line.split(" --report - ")[1].split()}
    assert {f"cupy-cuda{cuda}x", f"nvidia-nccl-cu{cuda}", "dask-cuda", "dask", "distributed"} <= set(names)
    assert names["dask-cuda"].extras == {f"cu{cuda}"}
    assert not [n for n in names if f"cu{other}" in n or f"cuda{other}" in n]
    assert "--no-index" in line and str(tmp_path) in line


def test_gpu_check_refuses_a_cuda_without_an_extra():
    proc = _script("gpu_check.sh", "--dry-run", "--cuda", "11")
    assert proc.returncode != 0 and "CUDA 12 and 13" in proc.stderr + proc.stdout
