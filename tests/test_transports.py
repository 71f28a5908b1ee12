"""A transport is one builder on the engine's one path: what it hands each worker (here,
its clock) is what the run books, and the path's checks run before it builds anything."""
import itertools
import time

import numpy as np
import pytest

from workbench.config import ConfigError
from workbench.execution.engine import execute
from workbench.execution.transports.threads import ThreadTransport


class TickingThreads(ThreadTransport):
    """Threads whose workers read a clock that advances exactly 1 ms per reading."""

    def links(self, setup, rank):
        links = super().links(setup, rank)
        ticks = itertools.count()
        links.timer = lambda: next(ticks) * 1e-3
        return links


@pytest.mark.parametrize("algorithm", ["sync_sgd", "async_sgd", "cgdp"])
def test_every_booked_time_comes_from_the_transports_clock(algorithm, tiny):
    result = execute(tiny(algorithm=algorithm, cpus=1, steps=40), TickingThreads())
    assert result.status == "completed" and len(result.steps) == 40
    for column in ("time", "compute_s", "comm_s", "wait_s"):
        ms = result.steps[column].to_numpy() * 1e3
        np.testing.assert_allclose(ms, np.round(ms), atol=1e-6, err_msg=column)   # whole ticks only
    assert (result.steps["compute_s"] > 0).all()
    assert np.all(np.diff(result.steps.sort_values("step")["time"].to_numpy()) > 0)


class TwoHosts(ThreadTransport):
    """Threads that claim to sit on two hosts; records whether it was asked to build anything."""

    prepared = False

    def choose(self, config):
        workers = super().choose(config)
        workers[1]["host"] = "elsewhere"
        return workers

    def prepare(self, setup):
        self.prepared = True
        super().prepare(setup)


def test_a_one_host_algorithm_is_refused_across_hosts_before_the_transport_builds_anything(tiny):
    transport = TwoHosts()
    with pytest.raises(ConfigError, match="hogwild_sgd needs every worker on one host"):
        execute(tiny(algorithm="hogwild_sgd", cpus=2, steps=5), transport)
    assert not transport.prepared
    assert execute(tiny(algorithm="async_sgd", cpus=2, steps=5), TwoHosts()).status == "completed"


@pytest.mark.cluster
def test_a_dask_run_lets_go_of_its_loops_results_when_it_ends(client, tiny):
    """The loops' futures were kept by the transport after the run: their results stayed on the
    workers as long as anything held it (a failed run's traceback: until the interpreter's exit,
    where closing the cluster logged "Removing worker ... caused the cluster to lose already
    computed task(s) {'workbench-loop-...'}")."""
    from workbench.execution.transports.dask import DaskTransport

    def loops(dask_scheduler):
        return sorted(str(k) for k in dask_scheduler.tasks if str(k).startswith("workbench-loop-"))
    transport = DaskTransport(client)
    result = execute(tiny(algorithm="sync_sgd", cpus=2, steps=10), transport)
    assert result.status == "completed"
    deadline = time.time() + 30          # the client's release reaches the scheduler in a moment
    while client.run_on_scheduler(loops) and time.time() < deadline:
        time.sleep(0.2)
    assert client.run_on_scheduler(loops) == [] and transport.futures == []
