"""Preflight knows /dev/shm, `ulimit -v` and the cgroup's memory limit (issue 29,
deliverable 6): a run whose shared-memory segments exceed /dev/shm's free space, or whose
memory estimate exceeds a limit the processes live under, is refused with one line
(`error: <field>: <what is allowed>, got <value>`, exit 2) before any worker starts.

The measured free space and limits are monkeypatched (deterministic on any machine); one
test sets a real `ulimit -v` on a real CLI process.
"""
from __future__ import annotations

import os
import resource
import subprocess
import sys
import types
from pathlib import Path

import pytest

from workbench.apps.cli import main
from workbench.config import ConfigError, RunConfig
from workbench.execution import preflight as P
from workbench.problem import Problem

ROOT = Path(__file__).resolve().parent.parent
MIB = 1 << 20
BIG = ["--dataset", "digits", "--cpus", "2", "--hidden", "4096,4096", "--epochs", "1", "--no-progress"]


@pytest.fixture
def no_limits(monkeypatch):
    """This machine's own limits out of the way: each test sets the one it checks."""
    monkeypatch.setattr(P, "address_space_limit", lambda: None)
    monkeypatch.setattr(P, "cgroup_memory_limit", lambda: None)
    monkeypatch.setattr(P, "shm_free", lambda: 1 << 50)


def _model(config):
    return Problem.from_config(config).model


def test_the_shm_need_is_the_segments_the_transport_creates():
    """sync_sgd on 2 workers: one allreduce segment of n + tail floats in the pair layout
    (4 slots) or P slots and the total; hogwild: one shared copy of the parameters."""
    cfg = RunConfig(algorithm="sync_sgd", dataset="digits", cpus=2, hidden=(4096, 4096))
    n = _model(cfg).n_params
    need = P.shm_need(cfg, _model(cfg))
    assert 3 * 4 * n <= need["collective"] <= 4 * 4 * n + 4096   # 3 or 4 arrays of n float32, plus the header
    assert need["shared"] == need["server"] == 0
    hog = RunConfig(algorithm="hogwild_sgd", dataset="digits", cpus=2, hidden=(4096, 4096))
    assert P.shm_need(hog, _model(hog))["shared"] == 4 * n
    assert P.shm_need(cfg.replace(comm="dask"), _model(cfg))["collective"] == 0


def test_a_small_dev_shm_is_refused_before_any_worker_starts(monkeypatch, capsys, no_limits, tmp_path):
    """Docker's default 64 MiB /dev/shm against a 205 MB allreduce segment: `comm` is the
    field (the Dask exchange needs no segment), one line, exit 2, no run directory."""
    monkeypatch.setattr(P, "shm_free", lambda: 64 * MIB)
    started = []
    import workbench.execution.cluster as cluster
    monkeypatch.setattr(cluster, "session_client", lambda *a, **k: started.append(a))
    out = tmp_path / "run"
    assert main(["run", "--algorithm", "sync_sgd", *BIG, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("error: comm: dask (no shared-memory collective or server) or a larger /dev/shm")
    assert "the 64 MiB free in /dev/shm" in err[0] and err[0].endswith("got 'auto'")
    assert not started and not out.exists()


def test_shared_arrays_that_do_not_fit_blame_the_model(monkeypatch, no_limits):
    """Hogwild's shared parameters live in /dev/shm whatever `comm` says: `hidden` is the field."""
    monkeypatch.setattr(P, "shm_free", lambda: 64 * MIB)
    cfg = RunConfig(algorithm="hogwild_sgd", dataset="digits", cpus=2, hidden=(4096, 4096), epochs=1)
    with pytest.raises(ConfigError) as e:
        P.preflight(cfg)
    assert e.value.field == "hidden" and "64 MiB free in /dev/shm" in str(e.value)
    P.preflight(cfg.replace(hidden=(256,)))                            # a model that fits runs
    monkeypatch.setattr(P, "shm_free", lambda: 1 << 40)
    P.preflight(cfg)                                                   # and a /dev/shm that fits


def test_a_run_on_threads_maps_no_shared_memory(monkeypatch, no_limits):
    """The thread transport exchanges in this process's memory: /dev/shm is not asked."""
    monkeypatch.setattr(P, "shm_free", lambda: 4096)   # the barrier fits, a 4,874-parameter allreduce not
    cfg = RunConfig(algorithm="sync_sgd", dataset="digits", cpus=2, hidden=(64,), steps=3)
    with pytest.raises(ConfigError, match="comm: dask"):
        P.preflight(cfg)
    import workbench as wb
    assert wb.run(cfg, cluster="threads", progress=False).status == "completed"


def test_comm_dask_needs_no_collective_segment(monkeypatch, no_limits):
    monkeypatch.setattr(P, "shm_free", lambda: 64 * MIB)
    P.preflight(RunConfig(algorithm="sync_sgd", dataset="digits", cpus=2, hidden=(4096, 4096), epochs=1,
                          comm="dask"))


def test_no_shm_check_for_an_external_cluster_or_a_simulation(monkeypatch, no_limits):
    """Another host's /dev/shm is not this one's; a simulated run maps no segment."""
    monkeypatch.setattr(P, "shm_free", lambda: 0)
    P.preflight(RunConfig(algorithm="sync_sgd", dataset="digits", cpus=2, hidden=(4096, 4096), epochs=1,
                          simulate=True))


def test_ulimit_v_bounds_each_process(monkeypatch, no_limits):
    """The address-space limit binds one process: a model too large for it names `hidden`
    (never `cpus`: fewer workers do not help) and the limit, in the one-line format."""
    cfg = RunConfig(algorithm="sync_sgd", dataset="digits", cpus=2, hidden=(2048, 2048), epochs=1)
    est = P.memory_estimate(cfg)["total"] + P.DASK_ADDRESS_SPACE   # local Dask workers map more than they use
    monkeypatch.setattr(P, "address_space_limit", lambda: int(est / P.MEMORY_SHARE) - MIB)
    with pytest.raises(ConfigError) as e:
        P.check_memory(cfg)
    assert e.value.field == "hidden" and "ulimit -v" in str(e.value)
    monkeypatch.setattr(P, "address_space_limit", lambda: int(est / P.MEMORY_SHARE) + MIB)
    P.check_memory(cfg)   # just under the limit: runs


def test_the_cgroup_limit_bounds_the_client_and_the_local_workers_together(monkeypatch, no_limits):
    """Two local workers, the client and what lives beside them share one cgroup: refused
    just past `CGROUP_SHARE` of the limit (the workers' own limits large: only the sum binds),
    run just under it, and one worker less fits the limit that refused two."""
    monkeypatch.delitem(sys.modules, "ipykernel", raising=False)
    cfg = RunConfig(algorithm="sync_sgd", dataset="digits", cpus=2, hidden=(2048, 2048), epochs=1)
    need = P.processes_need(P.memory_estimate(cfg), 2)
    big = [1 << 40, 1 << 40]
    monkeypatch.setattr(P, "cgroup_memory_limit", lambda: int(need / P.CGROUP_SHARE) - MIB)
    with pytest.raises(ConfigError) as e:
        P.check_memory(cfg, workers_memory=big)
    # the 2 worker processes' own 272 MiB are more than the run's 198: fewer workers is the fix named
    assert e.value.field == "cpus" and "90% of this cgroup's memory limit" in str(e.value)
    P.check_memory(cfg.replace(cpus=1), workers_memory=big[:1])   # client + 1 worker
    monkeypatch.setattr(P, "cgroup_memory_limit", lambda: int(need / P.CGROUP_SHARE) + MIB)
    P.check_memory(cfg, workers_memory=big)


# Measured on 2026-12-07 in real memory cgroups (benchmarks/process_memory.py, docs/binder.md):
# sync_sgd on digits, 2 local Dask workers pinned to one CPU, 60 steps of batch 64. hidden:
# (the larger worker's peak rss, the cgroup's peak charge), in MiB; load average 7-24.
MEASURED = {(): (120, 297), (2048, 2048): (299, 611), (2560, 2560): (368, 763), (3072, 3072): (498, 968),
            (4096, 4096): (797, 1469)}


@pytest.mark.parametrize("hidden", list(MEASURED))
def test_the_estimate_follows_the_measured_processes(monkeypatch, hidden):
    """The arithmetic of the estimate from its measured parts, and how it compares with what
    the processes took: the processes' sum (what the OOM killer holds to the cgroup's limit)
    above the cgroup's peak and within 1.6x of it; a worker (held to 80% of its Dask limit,
    where Dask pauses it; Dask restarts it at 95%) within 2% below and 1.5x above its peak rss.
    The 250 MB charged each process before 2026-12-07 made the 4.35M-parameter run 1.1 GiB,
    1.8x its 611 MB, and refused it on a 1 GB Binder."""
    monkeypatch.delitem(sys.modules, "ipykernel", raising=False)   # a script's client: no Jupyter server beside
    cfg = RunConfig(algorithm="sync_sgd", dataset="digits", cpus=2, hidden=hidden or None, steps=60)
    est = P.memory_estimate(cfg)
    worker, cgroup = (m * MIB for m in MEASURED[hidden])
    assert est["total"] == est["data"] + est["params"] + est["activations"] + (96 + 40) * MIB
    client = est["data"] + est["params"] // 2 + est["eval_activations"]
    need = P.processes_need(est, 2)
    assert need == (144 + 40) * MIB + client + 2 * (est["total"] - 40 * MIB)
    assert 0.98 * worker <= est["total"] <= 1.5 * worker
    assert cgroup <= need <= 1.6 * cgroup


def test_worker_threads_are_checked_as_one_process(monkeypatch, no_limits):
    """On threads (`cluster="threads"`) the workers live in this process: the dataset once,
    no worker processes. In 1 GiB the 9.7M-parameter run fits there and not on 2 worker
    processes; at 17M the refusal names `cpus` (fewer worker threads)."""
    import workbench.api as api
    monkeypatch.delitem(sys.modules, "ipykernel", raising=False)
    monkeypatch.setattr(P, "cgroup_memory_limit", lambda: 1024 * MIB)
    cfg = RunConfig(algorithm="sync_sgd", dataset="digits", cpus=2, hidden=(3072, 3072), steps=60)
    P.check_memory(cfg, threads=True)
    with pytest.raises(ConfigError, match="^hidden: .* a worker's memory"):
        P.check_memory(cfg)
    with pytest.raises(ConfigError) as e:
        P.check_memory(cfg.replace(hidden=(4096, 4096)), threads=True)
    assert str(e.value).startswith("cpus: fewer worker threads: 2 need about 1.3 GiB in this process, more than 90% "
                                   "of this cgroup's memory limit") and str(e.value).endswith("got 2")
    assert api._on_threads("threads") and not api._on_threads(None)


def test_each_workers_share_leaves_room_for_what_lives_beside_them(monkeypatch):
    """A local worker's limit is its share of what the kernel (with the scheduler and the
    nannies), the shared libraries and, in Jupyter, the server leave: in 1 GiB, 420 MiB
    each of 2 from a script, 356 MiB in a notebook (512 before, as if the workers were alone)."""
    import importlib

    from workbench.execution import cluster
    importlib.import_module("ipykernel.kernelapp")   # imported (the suite's other tests may have), no kernel running
    assert P.beside_workers() == 184 * MIB
    assert cluster.worker_memory_limit(2, total=1024 * MIB) == 420 * MIB
    running = types.ModuleType("ipykernel.kernelapp")   # a running kernel's: its app initialized
    running.IPKernelApp = types.SimpleNamespace(initialized=lambda: True)
    monkeypatch.setitem(sys.modules, "ipykernel.kernelapp", running)
    assert P.beside_workers() == (184 + 128) * MIB
    assert cluster.worker_memory_limit(2, total=1024 * MIB) == 356 * MIB
    assert cluster.worker_memory_limit(2, total=400 * MIB) == 100 * MIB   # never under half the limit shared out


def test_a_1_gib_cgroup_takes_the_run_that_fit_it_and_refuses_one_that_would_not(monkeypatch, no_limits):
    """The 4.35M-parameter run that peaked at 611 MB in a real 1 GiB cgroup is taken (it was
    refused at 1.1 GiB); at 6.7M parameters a worker would pass Dask's 80% of its 420 MiB share,
    and the refusal names the field, its value and the limit, in one line. Under 2 GiB the
    17M-parameter run's processes do not fit 90% of it together."""
    monkeypatch.delitem(sys.modules, "ipykernel", raising=False)
    monkeypatch.setattr(P, "cgroup_memory_limit", lambda: 1024 * MIB)
    cfg = RunConfig(algorithm="sync_sgd", dataset="digits", cpus=2, hidden=(2048, 2048), steps=60)
    P.check_memory(cfg)
    with pytest.raises(ConfigError) as e:
        P.check_memory(cfg.replace(hidden=(2560, 2560)))
    text = str(e.value)
    assert e.value.field == "hidden" and len(text.splitlines()) == 1
    assert text.startswith("hidden: a size whose run fits in 80% of a worker's memory (0.3 GiB of 0.4 GiB): this "
                           "one needs about 0.4 GiB (6,748,170 parameters"), text   # 336 of 420 MiB; 423
    assert text.endswith("got [2560, 2560]")
    monkeypatch.setattr(P, "cgroup_memory_limit", lambda: 2048 * MIB)
    P.check_memory(cfg.replace(hidden=(3072, 3072)))
    with pytest.raises(ConfigError) as e:
        P.check_memory(cfg.replace(hidden=(4096, 4096)))
    assert str(e.value).startswith("hidden: a size whose run fits in 90% of this cgroup's memory limit "), str(e.value)
    assert "(1.8 GiB of 2.0 GiB): this one needs about 2.0 GiB (17,088,522 parameters" in str(e.value)


def test_the_limits_are_read_from_the_system(monkeypatch, tmp_path):
    """RLIMIT_AS as `ulimit -v` sets it; memory.max's "max" is no limit, a number is one."""
    monkeypatch.setattr(resource, "getrlimit", lambda which: (123 * MIB, resource.RLIM_INFINITY))
    assert P.address_space_limit() == 123 * MIB
    monkeypatch.setattr(resource, "getrlimit", lambda which: (resource.RLIM_INFINITY,) * 2)
    assert P.address_space_limit() is None
    f = tmp_path / "memory.max"
    monkeypatch.setattr(P, "CGROUP_LIMIT_FILES", (str(f),))
    f.write_text("max\n")
    assert P.cgroup_memory_limit() is None
    f.write_text(f"{512 * MIB}\n")
    assert P.cgroup_memory_limit() == 512 * MIB
    f.unlink()
    assert P.cgroup_memory_limit() is None


def test_a_limit_set_below_the_root_cgroup_is_found_and_shared_out(monkeypatch, tmp_path):
    """A batch job's or a systemd scope's memory limit sits on a cgroup below the root, at
    the path /proc/self/cgroup names: the root's memory.max says "max". The limit is found
    there (the tightest over this cgroup and the ones above it), each local worker gets its
    share of it, and a run that does not fit it is refused. Read from the root alone (as
    Dask reads it), a 2 GiB job on a 24 GiB machine gave each of 2 workers 12 GiB, and the
    kernel's OOM killer, not the workbench, stopped a run that outgrew it."""
    from workbench.execution import cluster
    from workbench.util import machine
    monkeypatch.setattr(P, "address_space_limit", lambda: None)
    monkeypatch.setattr(P, "shm_free", lambda: 1 << 50)
    root = tmp_path / "sys"
    (root / "job" / "step").mkdir(parents=True)
    (root / "memory.max").write_text("max\n")
    (root / "job" / "memory.max").write_text(f"{2048 * MIB}\n")      # the job's allocation
    (root / "job" / "step" / "memory.max").write_text("max\n")       # this process's own cgroup
    (tmp_path / "cgroup").write_text("0::/job/step\n")
    monkeypatch.setattr(machine, "PROC_CGROUP", str(tmp_path / "cgroup"), raising=False)
    monkeypatch.setattr(machine, "CGROUP_ROOT", str(root), raising=False)
    monkeypatch.setattr(P, "CGROUP_LIMIT_FILES", (str(root / "memory.max"),))
    assert P.cgroup_memory_limit() == 2048 * MIB
    assert cluster.worker_memory_limit(2) == (2048 * MIB - P.beside_workers()) // 2   # beside the kernel
    # cgroup v1: the memory controller's own hierarchy, the limit on the cgroup itself
    (root / "memory" / "slurm" / "job_7").mkdir(parents=True)
    (root / "memory" / "memory.limit_in_bytes").write_text(f"{(1 << 63) - 4096}\n")   # v1's "unlimited"
    (root / "memory" / "slurm" / "job_7" / "memory.limit_in_bytes").write_text(f"{1024 * MIB}\n")
    (tmp_path / "cgroup").write_text("5:cpu,cpuacct:/slurm/job_7\n4:memory:/slurm/job_7\n")
    assert P.cgroup_memory_limit() == 1024 * MIB
    cfg = RunConfig(algorithm="sync_sgd", dataset="digits", cpus=2, hidden=(3072, 3072), epochs=1)
    with pytest.raises(ConfigError) as e:   # each worker's share of the 1 GiB found below the root
        P.check_memory(cfg)
    share = cluster.worker_memory_limit(2, total=1024 * MIB)
    assert f"a worker's memory ({P._gib(0.8 * share)} of {P._gib(share)})" in str(e.value)


def test_a_real_ulimit_v_is_refused_with_one_line(tmp_path):
    """`ulimit -v` of 1.5 GiB on a real CLI process, a run needing ~2.5 GiB per process."""
    cgroup = P.cgroup_memory_limit()
    if cgroup is not None and cgroup < 16 << 30:
        pytest.skip(f"this cgroup's own limit ({cgroup >> 20} MiB) is tighter than the ulimit: it would be named")
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (1536 * MIB, resource.RLIM_INFINITY))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, "-m", "workbench", "run", "--algorithm", "sync_sgd", "--dataset", "digits",
                           "--cpus", "2", "--hidden", "8192,8192", "--epochs", "1", "--no-progress",
                           "--out", str(tmp_path / "r")], capture_output=True, text=True, env=env, preexec_fn=limit,
                          timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: hidden: a size whose run fits in 80% of the address-space "
                                                   "limit of one process (ulimit -v) (1.2 GiB of 1.5 GiB)"), lines
    assert lines[0].endswith("got [8192, 8192]")


def test_an_external_cluster_is_checked_against_its_own_hosts_dev_shm(monkeypatch, no_limits):
    """`--scheduler` on one host: /dev/shm is measured on worker 0 (a task there), before
    the segments are made; this machine's own /dev/shm does not count."""
    from types import SimpleNamespace

    from workbench.config.registry import specs
    from workbench.execution.transports.dask import DaskTransport
    cfg = RunConfig(algorithm="sync_sgd", dataset="digits", cpus=2, hidden=(4096, 4096), epochs=1,
                    scheduler="tcp://10.0.0.5:8786")
    transport = object.__new__(DaskTransport)
    transport.workers = [{"address": f"tcp://10.0.0.5:{p}", "host": "10.0.0.5", "memory_limit": 1 << 40}
                         for p in (4001, 4002)]
    asked = []

    def on(fn, *args, where):
        asked.append((fn, where))
        return 64 * MIB
    transport._on = on
    setup = SimpleNamespace(config=cfg, spec=specs()["sync_sgd"], model=_model(cfg), hosts={"10.0.0.5"})
    with pytest.raises(ConfigError) as e:
        transport.check(setup)
    assert e.value.field == "comm" and "64 MiB free in /dev/shm on 10.0.0.5" in str(e.value)
    assert asked == [(P.shm_free, "tcp://10.0.0.5:4001")]   # measured there, by worker 0
    transport._on = lambda fn, *args, where: 1 << 40
    transport.check(setup)   # room there: no error, whatever this machine has


def test_a_client_handed_to_run_is_checked_on_its_workers_host(monkeypatch, no_limits):
    """wb.run(cfg, cluster=client) with no `scheduler` field: this machine's /dev/shm is not
    the workers' (the Client may reach another host), so preflight does not measure it here
    and the transport measures it on worker 0; a cluster the workbench starts is measured
    here (before it starts)."""
    from types import SimpleNamespace

    from workbench.api import _shm_is_here
    from workbench.config.registry import specs
    from workbench.execution.transports.dask import DaskTransport
    from workbench.execution.transports.threads import ThreadTransport
    cfg = RunConfig(algorithm="sync_sgd", dataset="digits", cpus=2, hidden=(4096, 4096), epochs=1)
    assert cfg.scheduler is None
    transport = object.__new__(DaskTransport)
    assert _shm_is_here(None) and _shm_is_here(transport)
    assert not _shm_is_here(SimpleNamespace(scheduler_info=dict)) and not _shm_is_here("tcp://10.0.0.5:8786")
    assert not _shm_is_here("threads") and not _shm_is_here(ThreadTransport())
    transport.workers = [{"address": f"tcp://10.0.0.7:{p}", "host": "10.0.0.7", "memory_limit": 1 << 40}
                         for p in (4001, 4002)]
    asked = []

    def on(fn, *args, where):
        asked.append(where)
        return 64 * MIB
    transport._on = on
    setup = SimpleNamespace(config=cfg, spec=specs()["sync_sgd"], model=_model(cfg), hosts={"10.0.0.7"})
    with pytest.raises(ConfigError, match="64 MiB free in /dev/shm on 10.0.0.7"):
        transport.check(setup)
    assert asked == ["tcp://10.0.0.7:4001"]
    two_hosts = SimpleNamespace(config=cfg, spec=specs()["sync_sgd"], model=_model(cfg), hosts={"a", "b"})
    transport.check(two_hosts)   # no segments across hosts: nothing measured
    assert asked == ["tcp://10.0.0.7:4001"]
