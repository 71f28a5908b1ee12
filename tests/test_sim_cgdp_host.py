"""cgdp's host-side master on the simulated cluster runs at the named host's memory speed.

Le et al. (ICPE'18) sum and update each chunk with the host's CPU threads; the run names
that host with `cpu_device` (power8: the S822LC of the paper). The master used to stream
through one core whatever the host (`costmodel.HOST_MEMORY_BYTES_PER_S`), so naming the
host changed nothing. Oracle: the chunk master's busy time per step is
(1 + 3/P) passes per part x P parts over the parameter bytes at that bandwidth.
"""
from __future__ import annotations

import pytest

from workbench.analysis.costmodel import HOST_MEMORY_BYTES_PER_S
from workbench.api import run
from workbench.config import RunConfig
from workbench.sim import profiles
from workbench.sim.costs import make_costs


def _config(**kw) -> RunConfig:
    base = dict(algorithm="cgdp", gpus=4, cpus=0, simulate=True, device="p100", network="nvlink1",
                timing_model="vgg16", hidden=[16, 32], batch_size=64, steps=6, seed=1, chunk_layers=1)
    return RunConfig(**{**base, **kw})


def _costs(config: RunConfig):
    from workbench.problem import Problem
    problem = Problem.from_config(config)
    data, model = problem.data, problem.model
    return make_costs(config, model, ["gpu"] * config.gpus, data)


def test_the_master_streams_at_the_named_hosts_bandwidth():
    assert _costs(_config(cpu_device="power8")).master_bw == profiles.DEVICES["power8"].mem_bw
    assert _costs(_config()).master_bw == HOST_MEMORY_BYTES_PER_S      # local: one core, as before


@pytest.mark.parametrize("host", ["power8", "xeon"])
def test_a_faster_host_shortens_the_step_by_the_masters_time(host):
    # With one part per layer, each step the master does 4 parts x (1 + 3/4) passes over each
    # layer's bytes, i.e. 7 passes over the parameter vector, after the last chunk arrives (at the
    # end of the backward pass) only for the last chunk; the whole of it bounds the step from below.
    slow, fast = run(_config()), run(_config(cpu_device=host))
    assert slow.summary["status"] == fast.summary["status"] == "completed"
    assert slow.params.tobytes() == fast.params.tobytes()          # the maths does not depend on the host
    costs = _costs(_config(cpu_device=host))
    one_core = 7 * costs.vector_bytes / HOST_MEMORY_BYTES_PER_S
    named = 7 * costs.vector_bytes / costs.master_bw
    steps = slow.summary["steps"]
    gap = (slow.summary["wall_time_s"] - fast.summary["wall_time_s"]) / steps
    if costs.master_bw > HOST_MEMORY_BYTES_PER_S:
        assert 0 < gap <= one_core - named + 1e-9
    else:
        assert gap <= 0
    assert slow.summary["wall_time_s"] / steps >= one_core          # the master bounds the step


# ------------------------------------------------------------------------------ the weights' way back (issue 25)
def test_chunk_by_chunk_return_is_the_same_run_sooner():
    # Le et al.: each chunk's fresh weights go back as soon as the host has updated it, so the
    # next forward pass waits only for the chunk updated last; the maths is untouched
    chunks, whole = run(_config(weight_return="chunks")), run(_config(weight_return="whole"))
    assert chunks.summary["status"] == whole.summary["status"] == "completed"
    assert chunks.params.tobytes() == whole.params.tobytes()
    key = ["worker", "step"]
    assert (chunks.steps.sort_values(key)["loss"].to_numpy().tobytes()
            == whole.steps.sort_values(key)["loss"].to_numpy().tobytes())
    assert chunks.summary["wall_time_s"] < whole.summary["wall_time_s"]


def test_the_timeline_shows_the_copies_back_overlapping_the_backward_pass():
    from workbench.ui.figdata import cgdp_timeline_rows
    for mode in ("chunks", "whole"):
        r = run(_config(weight_return=mode, chunk_layers=1))
        trace = r.summary["cgdp_timeline"]
        assert trace["weight_return"] == mode and trace["step"] < r.summary["steps"] - 1
        rows = cgdp_timeline_rows(r)
        back = [x for x in rows if x["lane"] == "host -> device 0"]
        bwd_end = next(x["end"] for x in rows if x["what"] == f"backward (step {trace['step']})")
        nxt = next(x["start"] for x in rows if x["what"] == f"forward (step {trace['step'] + 1})")
        # the next forward pass starts when the last copy back has landed
        assert nxt == pytest.approx(max(x["end"] for x in back), rel=1e-9, abs=1e-12)
        if mode == "chunks":   # one copy per chunk, the first of them while the device is still in backward
            assert len(back) == 3 and min(x["start"] for x in back) < bwd_end
        else:                  # one copy of everything, after the backward pass and every update
            assert len(back) == 1 and back[0]["start"] >= bwd_end
            updates = [x for x in rows if x["lane"] == "host: sum and update"]
            assert back[0]["start"] >= max(x["end"] for x in updates) - 1e-12


def test_weight_return_is_refused_for_other_algorithms():
    from workbench.config import ConfigError
    with pytest.raises(ConfigError, match="weight_return"):
        RunConfig(algorithm="sync_sgd", weight_return="whole")
