"""A GPU user's install hint names the extra, the CuPy build and the NCCL wheel of their CUDA."""
from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from workbench.maths.backend import GPU_EXTRAS, gpu_install_hint

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


@pytest.mark.parametrize("major", sorted(GPU_EXTRAS))
def test_each_cuda_names_the_extra_that_carries_its_cupy_and_nccl(major):
    extra, cupy, nccl = GPU_EXTRAS[major]
    reqs = {Requirement(r).name: Requirement(r) for r in EXTRAS[extra]}
    assert cupy in reqs and nccl in reqs
    assert reqs["dask-cuda"].extras == {f"cu{major}"}
    for hint in (gpu_install_hint(cupy_cuda=None, driver=major), gpu_install_hint(cupy_cuda=major, driver=None)):
        assert f"'parallel-workbench[{extra}]'" in hint and nccl in hint
        other = GPU_EXTRAS[({12, 13} - {major}).pop()]
        assert other[2] not in hint and f"[{other[0]}]" not in hint


def test_an_installed_cupy_decides_over_the_driver():
    # a CUDA 13 driver runs cupy-cuda12x too, and then NCCL must be the CUDA 12 wheel
    hint = gpu_install_hint(cupy_cuda=12, driver=13)
    assert "[gpu]" in hint and "nvidia-nccl-cu12" in hint and "cu13" not in hint


def test_old_new_and_missing_drivers():
    assert "only" in gpu_install_hint(cupy_cuda=None, driver=11)
    newer = gpu_install_hint(cupy_cuda=None, driver=14)
    assert "[gpu-cu13]" in newer and "nvidia-nccl-cu13" in newer
    none = gpu_install_hint(cupy_cuda=None, driver=None)
    assert none.startswith("no NVIDIA driver found") and "[gpu]" in none and "[gpu-cu13]" in none
