"""One Knights Landing split into partitions (SC'17 Fig 12): the partition's step against its
closed form, the exchange through MCDRAM, a simulated run's clock, and every refusal."""
from __future__ import annotations

import math
import subprocess
import sys

import pytest

import workbench as wb
from workbench.comm.network import shared_tree_allreduce_time
from workbench.config import SIM_CHIP_CORES, ConfigError, RunConfig
from workbench.sim import profiles as P
from workbench.sim import timing_models as TM
from workbench.sim.costs import make_costs

KNL = dict(simulate=True, algorithm="sync_sgd", cpu_device="knl", timing_model="alexnet")
ALEXNET = TM.TIMING_MODELS["alexnet"]


def knl(k: int, **kw) -> RunConfig:
    return RunConfig(**{**KNL, "cpus": k, "partitions": k, "batch_size": 64 * k, **kw})


# ------------------------------------------------------------------ the chip's facts
def test_the_knl_declares_its_cores_and_mcdram():
    d = P.DEVICES["knl"]
    assert (d.cores, d.mem_bytes) == (68, 16 * 2**30) and SIM_CHIP_CORES == {"knl": 68}
    assert "MCDRAM" in d.source and "16 GB" in d.source
    assert all(d.cores == 1 for d in P.DEVICES.values() if d.name != "knl")
    assert P.network_named("mcdram").beta == 1 / d.mem_bw          # the link is the device's memory


@pytest.mark.parametrize("k, cores, per_core, busy", [(1, 68, 1, 64), (4, 17, 4, 16), (8, 8, 8, 8), (16, 4, 16, 4),
                                                      (68, 1, 64, 1)])
def test_a_partition_gets_its_share_of_cores_and_divides_its_images_among_them(k, cores, per_core, busy):
    part = P.ChipPartition(P.DEVICES["knl"], k)
    assert part.cores == cores and part.images_per_core(64) == per_core and part.busy_cores(64) == busy
    assert part.mem_bw == pytest.approx(450e9 / k) and part.name == f"knl/{k}"


# ------------------------------------------------------------------ the step, closed form
def closed_form_step(k: int, b: int) -> float:
    """A partition's step written out from the model's statement, numbers by hand:
    68 // k cores, ceil(b / cores) images on the busiest, 64 cores of a 68-core chip at
    6.09 TFLOP/s / 68 x 0.3 each, 450 GB/s shared by every busy core's 3 passes over each
    layer's weights; the busy cores' gradients summed; 50 us; a 3-pass update at 450 GB/s / k."""
    cores = 68 // k
    n = math.ceil(b / cores)
    busy = math.ceil(b / n)
    core_rate = 6.09e12 * 0.3 / 68                # the datasheet peak (68 x 1.4 GHz x 64, rounded) per core
    t = 0.0
    for _, params, fwd in ALEXNET.layers:
        t += max(3 * fwd * n / core_rate, 3 * 4 * params * busy * k / 450e9)
    t += (busy + 1) * k * 4 * ALEXNET.n_params / 450e9      # the partition's gradient summed
    return t + 50e-6 + 3 * 4 * ALEXNET.n_params / (450e9 / k)


@pytest.mark.parametrize("k, b", [(1, 64), (4, 64), (16, 64), (8, 100), (16, 3)])
def test_a_partition_step_is_the_closed_form(k, b):
    from workbench.maths.models import make_model
    cfg = knl(k, batch_size=b * k)
    costs = make_costs(cfg, make_model("mlp", 40, 10, hidden=(16,)), ["cpu"] * k)
    assert costs.compute(0, b) == pytest.approx(closed_form_step(k, b), rel=1e-12)
    assert costs.compute(k - 1, b) == costs.compute(0, b)         # every partition alike


def test_at_the_papers_batch_the_fully_connected_layers_are_memory_bound_on_one_partition():
    one, sixteen = P.ChipPartition(P.DEVICES["knl"], 1), P.ChipPartition(P.DEVICES["knl"], 16)
    fc6 = next(layer for layer in ALEXNET.layers if layer[0] == "fc6")
    # one image a core: fc6's weights streamed by 64 cores outweigh its FLOPs 7x; 16 images a core: compute bound
    assert 3 * 4 * fc6[1] * 64 / 450e9 > 7 * 3 * fc6[2] / one.core_rate
    assert 3 * fc6[2] * 16 / sixteen.core_rate > 3 * 4 * fc6[1] * 64 / 450e9
    # per image, 16 partitions of 64 images each beat one of 64 (the same 64 cores busy)
    assert sixteen.train_s(ALEXNET, 64) / (16 * 64) < one.train_s(ALEXNET, 64) / 64 / 1.5


def test_the_exchange_is_a_tree_of_sums_through_mcdram():
    assert shared_tree_allreduce_time(16, 1e6, 1e-6, 1e-9) == pytest.approx(2 * 4 * 1e-6 + 3 * 15 * 1e-3)
    assert shared_tree_allreduce_time(1, 1e6, 1e-6, 1e-9) == 0.0
    from workbench.maths.models import make_model
    model = make_model("mlp", 40, 10, hidden=(16,))
    costs = make_costs(knl(16), model, ["cpu"] * 16)
    assert costs.allreduce == "shared_tree" and costs.network.name == "mcdram"
    # the gradient (the model's vector, charged as AlexNet's 244 MB) and nothing more
    assert costs.allreduce_s(16, model.n_params) == pytest.approx(8e-6 + 3 * 15 * ALEXNET.n_bytes / 450e9)


def test_a_simulated_run_steps_on_the_closed_form_clock():
    k, b, steps = 4, 16, 3
    r = wb.run(knl(k, dataset="mnist1d", n_samples=2000, hidden=[16], batch_size=b * k, steps=steps,
                   eval_every=steps), progress=False)
    assert r.summary["status"] == "completed"
    step = closed_form_step(k, b) + 2 * 2 * 1e-6 + 3 * (k - 1) * ALEXNET.n_bytes / 450e9
    # (and the sync tail's few floats of loss, flags and timings beside the gradient: nanoseconds)
    assert r.steps[r.steps["worker"] == 0]["time"].max() == pytest.approx(steps * step, rel=1e-8)
    assert {w["device"] for w in r.summary["workers"]} == {"knl/4"}


# ------------------------------------------------------------------ refusals: field, value, what is allowed
@pytest.mark.parametrize("kw, field, says", [
    (dict(cpu_device="core"), "partitions", "only with cpu_device knl"),
    (dict(partitions=69, cpus=69), "partitions", "1 to 68"),
    (dict(cpus=8), "cpus", "the number of partitions"),
    (dict(gpus=1), "gpus", "0 with partitions"),
    (dict(network="10GbE"), "network", "mcdram or unset"),
    (dict(partitions=0, cpus=0), "partitions", ">= 1"),
    (dict(simulate=False, cpu_device="core", timing_model=None), "partitions", "only with simulate"),
])
def test_bad_partitions_are_refused_naming_field_and_value(kw, field, says):
    with pytest.raises(ConfigError) as info:
        RunConfig(**{**KNL, "cpus": 4, "partitions": 4, "batch_size": 256, **kw})
    assert info.value.field == field and says in str(info.value)


def test_partitions_that_overflow_mcdram_are_refused_before_any_worker_starts():
    # VGG-16's 553 MB of weights fit 31 times in 16 GiB (You et al.: the method's limit)
    cfg = knl(40, timing_model="vgg16", dataset="mnist1d", n_samples=4000, hidden=[16], batch_size=40, steps=1)
    with pytest.raises(ConfigError) as info:
        wb.run(cfg, progress=False)
    assert info.value.field == "partitions" and "at most 31" in str(info.value) and "16 GiB" in str(info.value)


def test_the_cli_refuses_in_one_line():
    out = subprocess.run([sys.executable, "-m", "workbench", "run", "--simulate", "--algorithm", "sync_sgd",
                          "--cpus", "4", "--cpu-device", "knl", "--partitions", "80"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1] == "error: partitions: 1 to 68 (the cores of one knl chip), got 80"


# ------------------------------------------------------------------ the reproduction, reduced
def test_the_reduced_reproduction_gives_16_partitions_a_speedup_well_below_the_papers():
    # sc17_knl_sim's runs at 1 and 16 partitions, seed 0, its own parameters, stopped at 4.5 epochs
    # (every run of its seeds passes the target by epoch 4): partitions help, by far less than 3.3x
    # (the experiment's knl_speedup_16 fails, as its report says why). The full check, every k over
    # the seeds and the report, is tests/test_reproduce.py's quick reproduction (slow).
    from pathlib import Path

    import yaml

    from workbench.analysis.shape import time_to_accuracy
    p = yaml.safe_load((Path(__file__).parent.parent / "experiments" / "sc17_knl_sim.yaml").read_text())["parameters"]
    b = p["batch_per_partition"]
    t = {}
    for k in (1, 16):
        cfg = knl(k, dataset=p["dataset"], n_samples=p["n_samples"], hidden=p["hidden"], batch_size=b * k, lr=p["lr"],
                  base_batch=b, lr_scaling="linear", warmup="gradual", warmup_epochs=p["warmup_epochs"], epochs=4.5,
                  eval_every=max(1, p["eval_samples"] // (b * k)), seed=0, timing_model=p["timing_model"])
        r = wb.run(cfg, progress=False)
        t[k] = time_to_accuracy(r, p["target"])
        assert t[k] is not None, k
    assert 1.1 < t[1] / t[16] < 0.75 * 3.3
