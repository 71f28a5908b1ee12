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
