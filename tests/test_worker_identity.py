"""A worker that is not the run's own is refused, and one lost before its first step fails
the run at once with its error (issue 47, item 4).

Real processes: `dask scheduler` / `dask worker` on 127.0.0.1, one of them running a copy of
the package with one line changed; the module's LocalCluster for the tasks that cannot be
unpacked."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import await_replacement, start_scheduler

import workbench as wb
from workbench.config import ConfigError, RunConfig, registry
from workbench.util.identity import code_identity

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONPATH": str(ROOT)}
DASK = str(Path(sys.executable).parent / "dask")

pytestmark = [pytest.mark.slow, pytest.mark.cluster]


@pytest.fixture(scope="module")
def mixed_cluster(tmp_path_factory):
    """A scheduler, a worker running this checkout and one running a copy with a changed line."""
    copy = tmp_path_factory.mktemp("other") / "workbench"
    shutil.copytree(ROOT / "workbench", copy, ignore=shutil.ignore_patterns("__pycache__"))
    with open(copy / "maths" / "optim.py", "a") as f:
        f.write("\n# another checkout\n")
    scheduler, address = start_scheduler(copy.parent, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                         start_new_session=True)
    procs = [scheduler]
    for name, path in (("ours", str(ROOT)), ("other", str(copy.parent))):
        procs.append(subprocess.Popen([DASK, "worker", address, "--nthreads", "1", "--name", name, "--no-dashboard",
                                       "--host", "127.0.0.1"], env={**ENV, "PYTHONPATH": path}, cwd=str(copy.parent),
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
    from distributed import Client
    deadline = time.monotonic() + 120
    while True:
        try:
            with Client(address, timeout=5, set_as_default=False) as c:
                c.wait_for_workers(2, timeout=max(1, deadline - time.monotonic()))
            break
        except OSError:
            assert time.monotonic() < deadline, "the cluster did not come up"
            time.sleep(0.5)
    yield address
    import signal
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait(30)


def test_a_worker_running_other_code_is_refused_in_one_line(mixed_cluster, tmp_path):
    mine = code_identity()
    proc = subprocess.run([sys.executable, "-m", "workbench", "run", "--algorithm", "sync_sgd", "--cpus", "2",
                           "--steps", "5", "--scheduler", mixed_cluster, "--out", str(tmp_path / "r")],
                          capture_output=True, text=True, env=ENV, timeout=180)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"error: workers: workers running this process's code (workbench {mine['workbench']} "
                               f"(code {mine['code']}), Python {mine['python']})"), lines[0]
    assert "worker other (tcp://127.0.0.1:" in lines[0] and "workbench code " in lines[0]
    assert not (tmp_path / "r" / "summary.json").exists()


class _Unpackable:
    """Unpickles in the process that made it; elsewhere (a worker) it raises, or kills that process."""

    def __init__(self, how: str):
        self.pid, self.how = os.getpid(), how

    def __setstate__(self, state):
        self.__dict__.update(state)
        if os.getpid() != state["pid"]:
            if state["how"] == "die":
                os._exit(3)
            raise RuntimeError("cannot unpack this here")


@pytest.mark.parametrize("how", ["raise", "die"])
def test_a_task_that_cannot_be_unpacked_fails_the_run_at_once(client, monkeypatch, how):
    """Its worker raises as it unpacks (Dask closed such a worker: "lost", no reason) or dies
    (a hard fault): the run fails within seconds (the bound below is a hang guard), with
    the worker's own error where it could say one."""
    setup = registry.Needs.client_setup
    monkeypatch.setattr(registry.Needs, "client_setup",
                        lambda self, config, size: {**setup(self, config, size), "probe": _Unpackable(how)})
    t0 = time.monotonic()
    result = wb.run(RunConfig(algorithm="sync_sgd", cpus=2, steps=10_000), cluster=client, progress=False)
    assert time.monotonic() - t0 < 60
    assert result.status == "failed" and result.summary["steps"] == 0
    if how == "raise":
        errors = result.summary["errors"]
        assert any("unpacking its task failed: RuntimeError: cannot unpack this here" in e for e in errors.values())
        assert not result.summary["lost_workers"]
    else:
        assert len(result.summary["lost_workers"]) == 2
        await_replacement(client, 2)


def test_a_worker_that_cannot_describe_itself_is_named(monkeypatch):
    """`workers_of` on a cluster whose worker cannot run the description (no workbench, say)."""
    from workbench.execution import cluster as C

    class Fake:
        def run(self, fn, workers=None, on_error="raise"):
            if fn is C.describe_worker:
                return {"tcp://h:1": ModuleNotFoundError("No module named 'workbench'")}
            return {"tcp://h:1": {"python": "3.9", "workbench": None, "code": None}}
    with pytest.raises(ConfigError) as e:
        C.workers_of(Fake())
    assert e.value.field == "workers" and "worker tcp://h:1: no workbench, Python 3.9" in str(e.value)
