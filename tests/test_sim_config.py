"""The simulated cluster's RunConfig fields: defaults, spellings, every refusal, the CLI group."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from workbench.config import (
    FIELD_GROUPS,
    GROUP_TITLES,
    MAX_VIRTUAL_WORKERS,
    SIM_FIELDS,
    ConfigError,
    RunConfig,
    parse_failures,
)

SIM = dict(simulate=True, algorithm="sync_sgd")


def test_defaults_are_a_real_run():
    c = RunConfig()
    assert (c.simulate, c.device, c.cpu_device, c.network, c.timing_model, c.jitter, c.fail_worker) == \
        (False, None, "core", None, None, 0.0, None)
    assert c.failures == {} and c.resolved_device is None


def test_a_full_simulated_config_round_trips(tmp_path):
    c = RunConfig(**SIM, cpus=16, gpus=1000, batch_size=4096, device="a100", cpu_device="power8",
                  network="InfiniBand HDR", timing_model="resnet50", jitter=0.25, fail_worker="3@12.5,1015@40")
    assert RunConfig.from_dict(c.to_dict()) == c
    path = tmp_path / "sim.yaml"
    c.to_yaml(path)
    assert RunConfig.from_yaml(path) == c
    assert "simulate: true" in path.read_text() and "fail_worker: 3@12.5,1015@40" in path.read_text()
    # CLI flags arrive as text
    assert RunConfig.from_dict({k: str(v).lower() if isinstance(v, bool) else str(v)
                                for k, v in c.to_dict().items() if v is not None and k != "hidden"}) == c


def test_names_are_matched_loosely_and_stored_canonically():
    c = RunConfig(**SIM, gpus=2, device="V100", network="infiniband-hdr", timing_model="ResNet_152",
                  cpu_device="XEON")
    assert (c.device, c.network, c.timing_model, c.cpu_device) == ("v100", "InfiniBand HDR", "resnet152", "xeon")
    assert RunConfig(**SIM, network="nvlink").network == "NVLink"      # costmodel's NVLink
    assert RunConfig(**SIM, network="NVLink1").network == "nvlink1"    # sim.profiles' P100 link


def test_gpu_profile_defaults_to_v100_only_for_simulated_gpus():
    assert RunConfig(**SIM, cpus=0, gpus=4).resolved_device == "v100"
    assert RunConfig(**SIM, cpus=4, gpus=0).resolved_device is None         # no virtual GPU
    assert RunConfig(**SIM, cpus=0, gpus=4, device="k80").resolved_device == "k80"
    assert RunConfig(cpus=0, gpus=4, algorithm="sync_sgd").resolved_device is None   # real GPUs: no profile


def test_failures_parse_into_rank_to_virtual_seconds():
    c = RunConfig(**SIM, cpus=8, fail_worker=" 3 @ 12.5 , 7@1e1,0@0")
    assert c.failures == {3: 12.5, 7: 10.0, 0: 0.0}
    assert c.fail_worker == "3@12.5,7@10,0@0"          # one spelling, exact
    t = 0.1 + 0.2                                      # not representable in a few digits
    assert RunConfig(**SIM, fail_worker=f"1@{t!r}").failures == {1: t}
    assert RunConfig(**SIM, fail_worker="  ").fail_worker is None
    assert parse_failures("5@3") == {5: 3.0}


def test_worker_count_limits():
    RunConfig(**SIM, cpus=24, gpus=MAX_VIRTUAL_WORKERS - 24, batch_size=MAX_VIRTUAL_WORKERS)   # exactly 1024
    RunConfig(**SIM, cpus=1, gpus=0)
    RunConfig(cpus=2000, algorithm="sync_sgd", batch_size=4096)   # a real cluster is not capped here


@pytest.mark.parametrize("kwargs, message", [
    # unknown names, listing what is known
    (dict(SIM, device="tpu"), "device: one of k80, p100, v100, a100, h100, h200, core, knl, power8, xeon, got 'tpu'"),
    (dict(SIM, cpu_device="v100"), "cpu_device: a CPU profile, one of core, knl, power8, xeon, local (v100 is a GPU "
                                  "profile: ask for GPU workers with gpus and device), got 'v100'"),
    (dict(SIM, network="carrier pigeon"),
     "network: one of shm, 10GbE, 100GbE, InfiniBand HDR, NVLink, pcie3, pcie4, nvlink1, nvlink2, mcdram, got 'carrier pigeon'"),
    (dict(SIM, timing_model="gpt3"),
     "timing_model: one of alexnet, vgg16, googlenet, resnet50, resnet152, gpt2-124m, gpt2-355m, tinyllama-1.1b, llama-7b, got 'gpt3'"),
    (dict(SIM, device=3), "device: one of k80"),
    # the virtual cluster's size
    (dict(SIM, cpus=1000, gpus=100, batch_size=2048),
     "cpus: at least 1 and at most 1024 virtual workers with simulate (cpus + gpus = 1000 + 100), got 1000"),
    (dict(SIM, cpus=0, gpus=1025, batch_size=2048),
     "gpus: at least 1 and at most 1024 virtual workers with simulate (cpus + gpus = 0 + 1025), got 1025"),
    (dict(simulate=True, cpus=0, gpus=0), "cpus: at least 1 and at most 1024 virtual workers"),
    (dict(SIM, gpus="auto"),
     "gpus: a whole number >= 0 with simulate (virtual GPUs are counted, not detected), got 'auto'"),
    # stragglers and failures
    (dict(SIM, jitter=1.0), "jitter: 0, or a number >= 1e-06 and < 1 (the coefficient of variation of compute times), got 1.0"),
    (dict(SIM, jitter=-0.1), "jitter: 0, or a number >= 1e-06 and < 1"),
    (dict(SIM, jitter="nan"), "jitter: 0, or a number >= 1e-06 and < 1"),
    (dict(SIM, jitter=1e-300), "jitter: 0, or a number >= 1e-06 and < 1"),
    (dict(SIM, jitter=True), "jitter: a number (not true/false)"),
    (dict(SIM, fail_worker="3"), "fail_worker: RANK@SECONDS, separated by commas (e.g. 3@12.5,7@40), got '3'"),
    (dict(SIM, fail_worker="1@-2"), "fail_worker: RANK@SECONDS, separated by commas"),
    (dict(SIM, fail_worker="-1@2"), "fail_worker: RANK@SECONDS, separated by commas"),
    (dict(SIM, fail_worker="1@2,"), "fail_worker: RANK@SECONDS, separated by commas"),
    (dict(SIM, fail_worker="1@inf"), "fail_worker: RANK@SECONDS, separated by commas"),
    (dict(SIM, fail_worker=3), "fail_worker: RANK@SECONDS, separated by commas"),
    (dict(SIM, fail_worker="1@2,1@3"), "fail_worker: each rank at most once (rank 1 is listed twice), got '1@2,1@3'"),
    (dict(SIM, cpus=2, gpus=2, fail_worker="1@5,4@2"),
     "fail_worker: ranks of existing workers, 0 to 3 (cpus + gpus = 4); rank 4 does not exist, got '1@5,4@2'"),
    (dict(SIM, simulate="yes"), "simulate: true or false, got 'yes'"),
])
def test_each_bad_value_is_one_line_naming_field_value_and_allowed(kwargs, message):
    with pytest.raises(ConfigError) as info:
        RunConfig(**kwargs)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("field, value", [
    ("device", "v100"), ("cpu_device", "power8"), ("network", "pcie3"), ("timing_model", "alexnet"),
    ("jitter", 0.1), ("fail_worker", "0@1"),
])
def test_simulation_knobs_need_simulate(field, value):
    assert field in SIM_FIELDS
    with pytest.raises(ConfigError) as info:
        RunConfig(algorithm="sync_sgd", **{field: value})
    assert str(info.value) == (f"{field}: only with simulate (a knob of the simulated cluster; add --simulate), "
                               f"got {value!r}")
    gpus = {"gpus": 1} if field == "device" else {}    # device: the GPU workers' profile
    c = RunConfig(**SIM, **gpus, **{field: value})    # the same value is fine once simulating ...
    with pytest.raises(ConfigError, match=f"^{field}: only with simulate"):
        c.simulate = False                             # ... and switching it off is refused
    assert RunConfig(algorithm="sync_sgd", cpu_device="local").cpu_device == "local"   # the default is no knob


ENV = {**os.environ, "PYTHONWARNINGS": "ignore", "COLUMNS": "100"}


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "workbench", *args], capture_output=True, text=True, env=ENV,
                          timeout=120)


def test_cli_help_shows_the_simulation_group_and_bad_flags_give_one_line():
    assert FIELD_GROUPS["simulation"] == ("simulate", "device", "cpu_device", "partitions", "calibration", "network",
                                          "timing_model", "jitter", "fail_worker", "join_worker")
    proc = run_cli("run", "--help")
    assert proc.returncode == 0, proc.stderr
    section = proc.stdout.split(f"\n{GROUP_TITLES['simulation']}:\n")[1].split("\n\n")[0]
    flat = re.sub(r"\s+", " ", section)
    for flag in ("--simulate, --no-simulate", "--device DEVICE", "--cpu-device CPU_DEVICE", "--partitions PARTITIONS",
                 "--network NETWORK",
                 "--timing-model TIMING_MODEL", "--jitter JITTER", "--fail-worker FAIL_WORKER",
                 "--join-worker JOIN_WORKER"):
        assert flag in flat, flag
    assert "1 to 1024" in flat and "InfiniBand HDR" in flat and "Default: core." in flat
    proc = run_cli("run", "--simulate", "--gpus", "2048", "--algorithm", "sync_sgd", "--steps", "1")
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("error: gpus: at least 1 and at most 1024 virtual workers with simulate "
                                   "(cpus + gpus = 0 + 2048), got 2048")
    proc = run_cli("run", "--timing-model", "vgg16", "--steps", "1")
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("error: timing_model: only with simulate (a knob of the simulated cluster; "
                                   "add --simulate), got 'vgg16'")
