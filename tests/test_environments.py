"""environment.yml and binder/: they parse, list what the project needs, agree with pyproject."""
import os
import re
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
CONDA_NAMES = {"pyyaml": "pyyaml", "build": "python-build", "cupy-cuda12x": "cupy",
               "nvidia-nccl-cu12": "nccl"}


def conda_specs(path):
    env = yaml.safe_load(path.read_text())
    specs = {}
    for dep in env["dependencies"]:
        if not isinstance(dep, str):
            continue
        m = re.match(r"^([A-Za-z0-9_.\-]+)\s*(.*)$", dep)
        name, spec = m.group(1).lower(), m.group(2).strip()
        if spec.startswith("=") and not spec.startswith("=="):  # conda's fuzzy "=1.2" is "==1.2.*"
            spec = "==" + spec[1:] + ".*"
        specs[name] = spec
    return env, specs


def pyproject_reqs(*groups):
    reqs = [Requirement(r) for r in PYPROJECT["project"]["dependencies"]]
    for g in groups:
        reqs += [Requirement(r) for r in PYPROJECT["project"]["optional-dependencies"][g]]
    return reqs


def _lower_bound(spec):
    for s in SpecifierSet(spec.replace(".*", "")):
        if s.operator in ("==", ">=", "~="):
            return s.version
    return None


@pytest.mark.parametrize("path, groups", [
    (ROOT / "environment.yml", ("lab", "test")),
    (ROOT / "binder" / "environment.yml", ("lab",)),
])
def test_environment_lists_every_requirement_with_compatible_versions(path, groups):
    env, specs = conda_specs(path)
    assert env["channels"][-1] == "nodefaults" and "conda-forge" in env["channels"]
    for req in pyproject_reqs(*groups):
        name = CONDA_NAMES.get(req.name.lower(), req.name.lower())
        assert name in specs, f"{path.name} lacks {name}"
        low = _lower_bound(specs[name]) if specs[name] else None
        if low is not None and req.specifier:
            assert req.specifier.contains(low, prereleases=True), f"{name}: {specs[name]} vs pyproject {req.specifier}"


def test_full_environment_has_gpu_packages_pinned_consistently():
    _, specs = conda_specs(ROOT / "environment.yml")
    for name in ("cupy", "dask-cuda", "nccl", "cuda-version"):
        assert name in specs
    # dask-cuda pins dask and distributed to one release: both pinned, to the same one
    assert specs["dask"].startswith("==") and specs["dask"] == specs["distributed"]
    gpu = {Requirement(r).name for r in PYPROJECT["project"]["optional-dependencies"]["gpu"]}
    assert {"dask-cuda", "cupy-cuda12x", "nvidia-nccl-cu12"} <= gpu


def test_binder_is_cpu_only_and_routes_the_dashboard_through_the_proxy():
    _, specs = conda_specs(ROOT / "binder" / "environment.yml")
    assert not {"cupy", "dask-cuda", "nccl", "cuda-version"} & set(specs)
    assert "jupyter-server-proxy" in specs and "dask-labextension" in specs
    start = (ROOT / "binder" / "start").read_text()
    assert "DASK_DISTRIBUTED__DASHBOARD__LINK" in start and "proxy/{port}/status" in start
    assert start.rstrip().endswith('exec "$@"')
    for script in ("start", "postBuild"):
        assert os.access(ROOT / "binder" / script, os.X_OK)
