"""Platforms without fcntl / POSIX shared memory (Windows): the engine picks the Dask
transport by itself and says so once; what cannot work there fails before any loop."""
from __future__ import annotations

import warnings

import pytest

from workbench import ConfigError
from workbench.execution import platforms
from workbench.execution.engine import run as engine_run
from workbench.execution.progress import bars_allowed

pytestmark = pytest.mark.cluster
SHORT = dict(cpus=2, steps=12, eval_every=6)     # two workers, a dozen steps, an evaluation halfway

@pytest.fixture
def no_shm(monkeypatch):
    """This machine as a platform without the shared-memory transport."""
    monkeypatch.setattr(platforms, "shm_supported", lambda: False)
    monkeypatch.setattr(platforms, "_said", set())


def test_this_platform_has_shared_memory():
    assert platforms.shm_supported() is True   # Linux/macOS: the fast path is the default


def test_sync_runs_fall_back_to_dask_and_say_so_once(client, no_shm, tiny):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = [engine_run(tiny(algorithm="sync_sgd", **SHORT), cluster=client) for _ in range(2)]
    notes = [w for w in caught if issubclass(w.category, platforms.PlatformNote)]
    assert len(notes) == 1 and "through Dask instead of shared memory" in str(notes[0].message)
    for r in results:
        assert r.status == "completed" and r.summary["comm"] == "dask"
    # same maths as on the fast path: synchronous runs are deterministic
    losses = [r.steps.sort_values(["step", "worker"])["loss"].tolist() for r in results]   # rows arrive interleaved
    assert losses[0] == losses[1]


def test_fallback_matches_the_shared_memory_trajectory(client, no_shm, monkeypatch, tiny):
    dask_run = engine_run(tiny(algorithm="sync_sgd", **SHORT), cluster=client)
    monkeypatch.setattr(platforms, "shm_supported", lambda: True)
    shm_run = engine_run(tiny(algorithm="sync_sgd", **SHORT), cluster=client)
    assert (dask_run.summary["comm"], shm_run.summary["comm"]) == ("dask", "shm")
    assert dask_run.steps.groupby("step")["loss"].mean().to_numpy() == pytest.approx(
        shm_run.steps.groupby("step")["loss"].mean().to_numpy(), rel=1e-5)


def test_parameter_server_uses_the_actor(client, no_shm, tiny):
    r = engine_run(tiny(algorithm="async_sgd", **SHORT), cluster=client)
    assert r.status == "completed" and r.summary["server"] == "actor"


def test_cgdp_master_is_the_actor(client, no_shm, tiny):
    r = engine_run(tiny(algorithm="cgdp", **SHORT), cluster=client)
    assert r.status == "completed" and r.summary["server"] == "actor" and r.summary["comm"] is None


def test_what_needs_shared_memory_fails_early_naming_the_field(client, no_shm, tiny):
    with pytest.raises(ConfigError, match=r"^comm: shm only where fcntl and POSIX shared memory exist"):
        engine_run(tiny(algorithm="sync_sgd", comm="shm", **SHORT), cluster=client)
    with pytest.raises(ConfigError, match=r"^algorithm: hogwild_sgd shares one buffer in shared memory"):
        engine_run(tiny(algorithm="hogwild_sgd", **SHORT), cluster=client)


def test_no_progress_bars_in_dask_workers(client):
    assert set(client.run(bars_allowed).values()) == {False}
