"""The simulated cluster's knobs: its named profiles (listed here so that validating a
config never imports the simulator), its limits, and the rules of the simulation fields."""
from __future__ import annotations

from typing import Any

from pydantic_core import PydanticCustomError

from .values import ConfigError

# The simulated cluster's named profiles. Their data and sources live in
# `workbench.sim.profiles`, which checks on import that it defines exactly these names;
# they are listed here so that validating a config never imports the simulator.
SIM_GPU_DEVICES = ("k80", "p100", "v100", "a100", "h100", "h200")
SIM_CPU_DEVICES = ("core", "knl", "power8", "xeon")
SIM_DEFAULT_CPU_DEVICE = "core"   # a fixed, named profile: no wall-clock measurement enters virtual time
SIM_DEVICES = SIM_GPU_DEVICES + SIM_CPU_DEVICES
SIM_DEFAULT_DEVICE = "v100"
# costmodel.NETWORKS, then the host-device and GPU-GPU links of sim.profiles.LINKS
SIM_NETWORKS = ("shm", "10GbE", "100GbE", "InfiniBand HDR", "NVLink", "pcie3", "pcie4", "nvlink1", "nvlink2",
                "mcdram")
SIM_CHIP_CORES = {"knl": 68}   # CPU profiles a run may split into `partitions`: their cores
SIM_TIMING_MODELS = ("alexnet", "vgg16", "googlenet", "resnet50", "resnet152",
                     "gpt2-124m", "gpt2-355m", "tinyllama-1.1b", "llama-7b")   # language models: per sequence
MAX_VIRTUAL_WORKERS = 1024
JITTER_MIN = 1e-6   # the smallest nonzero jitter: smaller ones overflow the gamma's shape 1/jitter**2
SIM_FIELDS = ("device", "cpu_device", "partitions", "calibration", "network", "timing_model", "jitter",
              "fail_worker", "join_worker")   # need simulate
JITTER_ALLOWED = f"0, or a number >= {JITTER_MIN:g} and < 1 (the coefficient of variation of compute times)"


def no_vanishing_jitter(v: float) -> float:
    # The charge's gamma has shape 1/jitter**2: below JITTER_MIN that overflows (1e-300
    # was a ZeroDivisionError in every virtual worker), and 1e-6 already moves a
    # charge by about a part in a million.
    if 0 < v < JITTER_MIN:
        raise PydanticCustomError("outside_allowed", JITTER_ALLOWED)
    return v




def check_simulation(c: Any) -> None:
    """The simulation fields of the RunConfig `c`: only with simulate, and within the virtual cluster."""
    if not c.simulate:
        defaults = {"cpu_device": (SIM_DEFAULT_CPU_DEVICE, "local"), "jitter": (0.0,)}   # local: a real run's
        for name in SIM_FIELDS:
            if getattr(c, name) not in defaults.get(name, (None,)):
                raise ConfigError(name, "only with simulate (a knob of the simulated cluster; add --simulate)",
                                  getattr(c, name))
        return
    if c.gpus == "auto":
        raise ConfigError("gpus", "a whole number >= 0 with simulate (virtual GPUs are counted, not detected)",
                          c.gpus)
    total = c.cpus + c.gpus
    if c.device is not None and c.gpus == 0:
        raise ConfigError("device", "the GPU workers' profile, only with gpus >= 1 (CPU workers take "
                          "cpu_device)", c.device)
    if c.calibration is not None and c.cpu_device != "local":
        raise ConfigError("calibration", "a calibration file only with cpu_device local (the named profiles "
                          "are fixed)", c.calibration)
    if c.partitions is not None:
        check_partitions(c)
    if not 1 <= total <= MAX_VIRTUAL_WORKERS:
        field = "gpus" if c.gpus > c.cpus else "cpus"
        raise ConfigError(field, f"at least 1 and at most {MAX_VIRTUAL_WORKERS} virtual workers with simulate "
                          f"(cpus + gpus = {c.cpus} + {c.gpus})", getattr(c, field))
    ghosts = sorted(r for r in c.failures if r >= total)
    if ghosts:
        raise ConfigError("fail_worker", f"ranks of existing workers, 0 to {total - 1} (cpus + gpus = {total}); "
                          f"rank {ghosts[0]} does not exist", c.fail_worker)
    if c.join_worker is not None:
        if not c.elastic:
            raise ConfigError("join_worker", "only with elastic (a worker joins an elastic run; add --elastic)",
                              c.join_worker)
        odd = sorted(r for r in c.joins if not 1 <= r < total)
        if odd:
            raise ConfigError("join_worker", f"ranks 1 to {total - 1} (cpus + gpus = {total}; rank 0 starts the "
                              f"run); rank {odd[0]} cannot join", c.join_worker)


def check_partitions(c: Any) -> None:
    """`partitions` splits one chip of a CPU profile with cores: one virtual CPU worker per
    partition, no GPUs, the chip's own memory between them."""
    chips = ", ".join(SIM_CHIP_CORES)
    if c.cpu_device not in SIM_CHIP_CORES:
        raise ConfigError("partitions", f"only with cpu_device {chips} (a chip with cores to split; "
                          f"cpu_device is {c.cpu_device})", c.partitions)
    cores = SIM_CHIP_CORES[c.cpu_device]
    if c.partitions > cores:
        raise ConfigError("partitions", f"1 to {cores} (the cores of one {c.cpu_device} chip)", c.partitions)
    if c.gpus:
        raise ConfigError("gpus", "0 with partitions (the partitions of one CPU chip are the workers)", c.gpus)
    if c.cpus != c.partitions:
        raise ConfigError("cpus", f"the number of partitions with partitions (one chip: a virtual worker per "
                          f"partition; partitions is {c.partitions})", c.cpus)
    if c.network not in (None, "mcdram"):
        raise ConfigError("network", "mcdram or unset with partitions (the partitions of one chip exchange "
                          "through its memory)", c.network)
