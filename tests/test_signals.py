"""Signals, lost clients, lost schedulers, dead workers (issue 15): nothing gathered is lost,
nothing is left running, and clean-up never waits on the dead.

Everything here is real: the CLI runs in its own session (process group) and gets real
signals; the external cluster is started with the `dask scheduler` / `dask worker`
commands on 127.0.0.1; processes are watched through /proc (which shared-memory segments
they map, how much CPU they burn).
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pytest
from conftest import await_replacement, foreground, start_scheduler

from workbench.config import RunConfig
from workbench.util.private import private_dir

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONPATH": str(ROOT)}
DASK = str(Path(sys.executable).parent / "dask")
LONG = ["--dataset", "digits", "--model", "mlp", "--batch-size", "64", "--epochs", "2000", "--no-progress"]

pytestmark = [pytest.mark.slow, pytest.mark.cluster]


# ------------------------------------------------------------------------------ helpers
def start_cli(*args: str) -> subprocess.Popen:
    """`python -m workbench run ...` in its own session, as a terminal's foreground job."""
    return subprocess.Popen([sys.executable, "-m", "workbench", "run", *args],
                            **foreground(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV))


def family(pid: int) -> list[psutil.Process]:
    try:
        p = psutil.Process(pid)
        return [p, *p.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def mapped_segments(procs: list[psutil.Process]) -> set[str]:
    """The run segments (/dev/shm/wb...) these processes have mapped."""
    names = set()
    for p in procs:
        try:
            for m in p.memory_maps(grouped=True):
                if m.path.startswith("/dev/shm/wb"):
                    names.add(m.path)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return names


def _contents(segments: set[str]) -> dict[str, bytes]:
    out = {}
    for seg in segments:
        try:
            with open(seg, "rb") as f:   # past the headers (flags, counters): data only
                f.seek(128)
                out[seg] = f.read(1 << 18)
        except OSError:
            pass
    return out


def wait_for_training(procs_of, out: Path, timeout: float = 180) -> set[str]:
    """Wait until the run's workers map its segments and the data in them changes
    (gradients in the allreduce slots, the server's parameters: the loops are stepping),
    then until the client has written step rows into the run directory's steps.csv (it
    streams there while the run goes: records reached the client); returns the segments."""
    deadline = time.monotonic() + timeout
    before: dict[str, bytes] = {}
    segs: set[str] = set()
    while time.monotonic() < deadline:
        segs = mapped_segments(procs_of())
        now = _contents(segs)
        if any(seg in before and before[seg] != data for seg, data in now.items()):
            break
        before = now
        time.sleep(0.2)
    else:
        raise AssertionError("the run never started training")
    while time.monotonic() < deadline:
        if step_rows(out) > 0:
            return segs
        time.sleep(0.1)
    raise AssertionError(f"no step row reached {out / 'steps.csv'} within {timeout} s")


def step_rows(out: Path) -> int:
    """Data rows in a run directory's steps.csv so far (0 while it is not there)."""
    try:
        return max(0, (out / "steps.csv").read_bytes().count(b"\n") - 1)
    except OSError:
        return 0


def wait_for_file(path: Path, timeout: float) -> float:
    t0 = time.monotonic()
    while not path.exists():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"{path} not written within {timeout} s")
        time.sleep(0.02)
    return time.monotonic() - t0


def cpu_busy(procs: list[psutil.Process], seconds: float = 1.0) -> float:
    """CPU share (1.0 = one core) these processes used over `seconds`."""
    alive = []
    for p in procs:
        try:
            p.cpu_percent(None)
            alive.append(p)
        except psutil.NoSuchProcess:
            pass
    time.sleep(seconds)
    total = 0.0
    for p in alive:
        try:
            total += p.cpu_percent(None) / 100
        except psutil.NoSuchProcess:
            pass
    return total


def assert_group_gone(pgid: int, timeout: float = 30) -> None:
    """Nothing of a CLI's process group outlives it (its workers exit once their nanny closes
    them): waits up to `timeout` for the group to empty."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and subprocess.run(["pgrep", "-g", str(pgid)], capture_output=True).stdout:
        time.sleep(0.2)
    assert not subprocess.run(["pgrep", "-g", str(pgid)], capture_output=True).stdout, "processes left running"


def summary_of(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


class ExternalCluster:
    """`dask scheduler` and two `dask worker` processes on 127.0.0.1 (one thread each)."""

    def __init__(self, workers: int = 2):
        self.folder = tempfile.TemporaryDirectory(prefix="wb-external-")   # the scheduler's file
        self.scheduler, self.address = start_scheduler(self.folder.name, env=ENV, stdout=subprocess.DEVNULL,
                                                       stderr=subprocess.DEVNULL, start_new_session=True)
        self.workers = [subprocess.Popen([DASK, "worker", self.address, "--nthreads", "1", "--name", f"w{i}",
                                          "--no-dashboard", "--host", "127.0.0.1"], env=ENV,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                         start_new_session=True)
                        for i in range(workers)]
        from distributed import Client
        deadline = time.monotonic() + 120
        while True:
            try:
                with Client(self.address, timeout=5, set_as_default=False) as c:
                    c.wait_for_workers(workers, timeout=max(1, deadline - time.monotonic()))
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def worker_procs(self) -> list[psutil.Process]:
        return [p for w in self.workers for p in family(w.pid)]

    def close(self) -> None:
        for p in [*self.workers, self.scheduler]:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(timeout=30)
        self.folder.cleanup()


@pytest.fixture(scope="module")
def external():
    cluster = ExternalCluster()
    yield cluster
    cluster.close()


# ------------------------------------------------------------------------------ local cluster
@pytest.mark.parametrize("sig, to_group", [
    (signal.SIGTERM, False), (signal.SIGINT, False), (signal.SIGINT, True),
], ids=["SIGTERM-cli", "SIGINT-cli", "ctrl-c-process-group"])
def test_signals_stop_the_run_within_2s_and_save_it(tmp_path, sig, to_group):
    out = tmp_path / "run"
    proc = start_cli("--algorithm", "sync_sgd", "--cpus", "2", *LONG, "--out", str(out))
    segments = wait_for_training(lambda: family(proc.pid), out)
    everyone = family(proc.pid)
    t_sig = time.monotonic()
    (os.killpg if to_group else os.kill)(proc.pid, sig)
    saved_s = wait_for_file(out / "summary.json", timeout=60)
    _, stderr = proc.communicate(timeout=60)
    exit_s = time.monotonic() - t_sig
    assert proc.returncode == 1, stderr                     # the contract: "the run stopped"
    assert "Traceback" not in stderr, stderr
    # the local cluster's Dask dashboard is linked (on this run: a CLI run costs a cluster start)
    assert re.search(r"^dask dashboard: http://127\.0\.0\.1:\d+/status$", stderr, re.M), stderr
    s = summary_of(out)
    assert s["status"] == "stopped" and s["steps"] > 0, s["status"]
    events = {e["event"]: e for e in s["events"]}
    assert "worker_lost" not in events and "failed" not in events, s["events"]
    # the loops ended within 2 s of the stop request (the engine's own clock)
    # hang guards: the latencies (2 s in docs/usage.md) are printed below, measured in bench, not asserted
    assert events["stopped"]["time"] - events["stop_requested"]["time"] < 30, s["events"]
    assert saved_s < 60, f"run directory written {saved_s:.2f} s after the signal"
    for name in ("steps.csv", "evals.csv", "config.yaml"):
        assert (out / name).exists()
    assert not [seg for seg in segments if os.path.exists(seg)], "shared-memory segments left behind"
    time.sleep(0.5)
    assert not [p for p in everyone if p.is_running() and p.status() != psutil.STATUS_ZOMBIE], \
        "processes left running"
    print(f"{signal.Signals(sig).name} {'group' if to_group else 'cli'}: saved {saved_s:.2f} s, exit {exit_s:.2f} s")


# The CLI, with a thread that sends Ctrl-C to its whole process group (as a terminal does)
# the moment the local cluster's first worker process exists: that worker is then still
# importing Dask (a second or more), its nanny waiting on it, the client inside Dask's start.
CTRL_C_AT_SPAWN = """
import multiprocessing, os, signal, sys, threading, time
from workbench.apps import cli

def ctrl_c_at_the_first_worker():
    while not multiprocessing.active_children():
        time.sleep(0.005)
    os.killpg(0, signal.SIGINT)

threading.Thread(target=ctrl_c_at_the_first_worker, daemon=True).start()
sys.exit(cli.main(sys.argv[1:]))
"""


def test_ctrl_c_while_the_workers_start_ends_in_one_line_and_leaves_nothing(tmp_path):
    # Before, this printed each importing worker's KeyboardInterrupt, the nannies' "failed to
    # start" and the client's own traceback (and left the half-made cluster to the exit).
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-c", CTRL_C_AT_SPAWN, "run", "--algorithm", "sync_sgd", "--cpus", "2",
                             *LONG, "--out", str(out)],
                            **foreground(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV))
    stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 1, stderr                     # the code of a stopped run
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if not line.startswith("note: SIGINT received")]
    assert lines == [f"stopped: SIGINT before training started; nothing ran (run directory: {out}) (exit 1)"], stderr
    assert summary_of(out)["status"] == "stopped" and summary_of(out)["steps"] == 0
    # nothing of the cluster outlives the CLI (its workers exit once their nanny closes them)
    assert_group_gone(proc.pid)
    # (and no shared memory: a run's segments are made once its cluster has started, after this)


# A sitecustomize (first on the CLI's PYTHONPATH) that sends Ctrl-C to the process group the
# moment `python -m workbench` starts importing MODULE: inside its own start-up imports,
# before `cli.main` runs.
CTRL_C_AT_IMPORT = """
import os, signal, sys

class CtrlCAtImport:
    def find_spec(self, name, path=None, target=None):
        if name == MODULE:
            sys.meta_path.remove(self)
            os.killpg(0, signal.SIGINT)
        return None

sys.meta_path.insert(0, CtrlCAtImport())
"""


@pytest.mark.parametrize("module", ["workbench.config", "workbench.apps.cli"])
def test_ctrl_c_while_the_cli_imports_itself_is_one_line(tmp_path, module):
    # Before: Python's KeyboardInterrupt traceback from inside the import, exit status -2.
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(f"MODULE = {module!r}\n" + CTRL_C_AT_IMPORT)
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "workbench", "run", "--algorithm", "sync_sgd", "--cpus", "2",
                             *LONG, "--out", str(out)],
                            **foreground(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                         env={**ENV, "PYTHONPATH": f"{hook}{os.pathsep}{ROOT}"}))
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 1, stderr                     # the code of a stopped run
    assert stderr.splitlines() == ["stopped: interrupted before the run started"], stderr
    assert stdout == "" and not out.exists()                # nothing had started
    assert not subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True).stdout, "processes left running"


def importing_worker(cli_pid: int, timeout: float = 120) -> psutil.Process:
    """The first worker process the CLI's local cluster spawned, once it is importing
    third-party modules (it maps an extension module from site-packages: unpickling its
    start imports Dask, seconds before the worker's own set-up runs)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for child in family(cli_pid)[1:]:
            try:
                if "spawn_main" not in " ".join(child.cmdline()):
                    continue
                if any("site-packages" in m.path and ".so" in m.path for m in child.memory_maps(grouped=True)):
                    return child
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        time.sleep(0.01)
    raise AssertionError("no worker process started importing")


def test_ctrl_c_while_a_worker_imports_dask_with_a_pythonpath_set_is_one_line(tmp_path):
    # The workers ignore SIGINT from their first instruction (the spawn hook on their
    # PYTHONPATH). Before, a PYTHONPATH in the environment (here: ENV's) won over the
    # cluster's setting of it: the workers started without the hook, and a Ctrl-C while they
    # imported Dask printed each one's KeyboardInterrupt traceback.
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "workbench", "run", "--algorithm", "sync_sgd", "--cpus", "2",
                             *LONG, "--out", str(out)],
                            **foreground(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV))
    worker = importing_worker(proc.pid)
    ignored = int(re.search(r"^SigIgn:\s*([0-9a-f]+)$", Path(f"/proc/{worker.pid}/status").read_text(), re.M)[1], 16)
    os.killpg(proc.pid, signal.SIGINT)                      # as a terminal's Ctrl-C: the whole group
    stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 1, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    assert ignored & (1 << (signal.SIGINT - 1)), "the importing worker does not ignore SIGINT"
    lines = [line for line in stderr.splitlines() if not line.startswith("note: SIGINT received")]
    assert lines == [f"stopped: SIGINT before training started; nothing ran (run directory: {out}) (exit 1)"], stderr
    assert summary_of(out)["status"] == "stopped" and summary_of(out)["steps"] == 0
    assert_group_gone(proc.pid)


def test_sigterm_to_the_whole_group_stops_the_run_too(tmp_path):
    # SIGTERM to every process (a batch system ending a job): local workers give the
    # client's stop TERM_GRACE_S to land before they exit, so no worker is reported lost.
    out = tmp_path / "run"
    proc = start_cli("--algorithm", "sync_sgd", "--cpus", "2", *LONG, "--out", str(out))
    segments = wait_for_training(lambda: family(proc.pid), out)
    everyone = family(proc.pid)
    os.killpg(proc.pid, signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "Traceback" not in stderr, stderr
    s = summary_of(out)
    assert s["status"] == "stopped" and s["steps"] > 0, s["events"]
    assert not [e for e in s["events"] if e["event"] == "worker_lost"]
    assert not [seg for seg in segments if os.path.exists(seg)]
    time.sleep(0.5)
    assert not [p for p in everyone if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def as_background_job() -> None:
    """preexec_fn: SIGINT and SIGHUP ignored, as `nohup cmd &` in a script starts `cmd`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


def dispositions(pid: int) -> dict[str, set[str]]:
    """The signals among SIGINT, SIGHUP and SIGTERM that process `pid` ignores and catches
    (its /proc status masks: bit n-1 for signal n)."""
    status = Path(f"/proc/{pid}/status").read_text()
    found = {}
    for field in ("SigIgn", "SigCgt"):
        mask = int(re.search(rf"^{field}:\s*([0-9a-f]+)$", status, re.M)[1], 16)
        found[field] = {s.name for s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM) if mask & (1 << (s - 1))}
    return found


@pytest.mark.parametrize("started", ["ignored", "armed"])
def test_a_cli_started_with_sigint_ignored_runs_through_it_and_stops_on_sigterm(tmp_path, started):
    # A job started by `nohup cmd &` in a script inherits SIGINT and SIGHUP ignored: a Ctrl-C
    # or hang-up meant for the script is not for it. The CLI re-armed both, so a
    # `kill -INT` to the script's group stopped the run. It now keeps them ignored: the run
    # goes on through SIGINT and SIGHUP, SIGTERM stops it and its run directory is saved.
    # The control ("armed", a terminal's foreground job): SIGINT stops it. Event-driven: the
    # signals once the run has streamed steps; "went on" is steps written after the signals
    # while the process lives, and the note and stop event naming SIGTERM alone.
    out = tmp_path / "run"
    popen = dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    cmd = [sys.executable, "-m", "workbench", "run", "--algorithm", "sgd", *LONG, "--out", str(out)]
    if started == "ignored":
        proc = subprocess.Popen(cmd, **popen, start_new_session=True, preexec_fn=as_background_job)
    else:
        proc = subprocess.Popen(cmd, **foreground(**popen))
    try:
        deadline = time.monotonic() + 180                      # hang guards, not speed assumptions
        while step_rows(out) == 0:
            assert proc.poll() is None and time.monotonic() < deadline, "the run never streamed a step"
            time.sleep(0.05)
        held = dispositions(proc.pid)                          # inside the CLI's stop_on_signals now
        at_signals = step_rows(out)
        proc.send_signal(signal.SIGINT)
        if started == "ignored":
            proc.send_signal(signal.SIGHUP)
            while step_rows(out) < at_signals + 1000:          # it goes on training
                assert proc.poll() is None, f"SIGINT/SIGHUP stopped it: {proc.communicate()[1]}"
                assert time.monotonic() < deadline + 120, "no steps after the signals"
                time.sleep(0.05)
            proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1 and "Traceback" not in stderr, stderr
    s = summary_of(out)
    assert s["status"] == "stopped" and s["steps"] > 0, s["status"]
    for name in ("steps.csv", "evals.csv", "config.yaml"):
        assert (out / name).exists()
    stop = [e["message"] for e in s["events"] if e["event"] == "stop_requested"]
    notes = [line for line in stderr.splitlines() if line.startswith("note: SIG")]
    if started == "ignored":
        assert held == {"SigIgn": {"SIGINT", "SIGHUP"}, "SigCgt": {"SIGTERM"}}, held
        assert s["steps"] >= at_signals + 1000, (s["steps"], at_signals)
        assert notes == ["note: SIGTERM received; stopping the run and saving what was gathered"], stderr
        assert stop == ["KeyboardInterrupt (SIGTERM)"], s["events"]
    else:
        assert held == {"SigIgn": set(), "SigCgt": {"SIGINT", "SIGHUP", "SIGTERM"}}, held
        assert notes == ["note: SIGINT received; stopping the run and saving what was gathered"], stderr
        assert stop == ["KeyboardInterrupt (SIGINT)"], s["events"]


def test_the_record_bench_started_with_sigint_ignored_still_stops_its_run():
    # `python -m workbench.bench.records` Ctrl-Cs the run it started after `--seconds`. Started
    # itself by `nohup ... &` (SIGINT ignored), it handed its run the ignored SIGINT, which the
    # CLI now keeps: the bench waited on the run for ever. It starts the run as a terminal's
    # foreground job. (The timeout is the hang guard: the old bench never ends.)
    import shutil
    bench = subprocess.Popen([sys.executable, "-m", "workbench.bench.records", "--seconds", "2", "--every", "1",
                              "--", "--algorithm", "sgd", *LONG], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, env=ENV, start_new_session=True, preexec_fn=as_background_job)
    try:
        out, _ = bench.communicate(timeout=240)
    finally:
        if bench.poll() is None:   # the bench and the run it started, in the session of its own
            os.killpg(bench.pid, signal.SIGKILL)
            bench.wait()
    folder = re.search(r"^run directory: (.+)$", out, re.M)
    if folder:   # (a temporary folder of the bench's own)
        shutil.rmtree(Path(folder[1]).parent, ignore_errors=True)
    assert bench.returncode == 0, out
    # the run ended on the bench's SIGINT with a stopped run's code (training, or, on a busy
    # machine, still starting: "stopped: interrupted before the run started")
    assert re.search(r"^SIGINT -> summary\.json .* \(rc 1\)", out, re.M) and "stopped" in out, out


def test_a_worker_given_sigterm_alone_still_exits(client):
    from workbench.execution.cluster import workers_of
    victim = workers_of(client)[1]
    t0 = time.monotonic()
    os.kill(victim["pid"], signal.SIGTERM)
    psutil.Process(victim["pid"]).wait(timeout=30)
    took = time.monotonic() - t0
    assert 4.0 < took < 60, took            # after the grace period, not never (the upper bound a hang guard)
    await_replacement(client, 2, gone=victim["address"])  # the nanny brings a fresh one back


def test_sigterm_in_an_async_run_removes_the_lock_file(tmp_path):
    out = tmp_path / "run"
    proc = start_cli("--algorithm", "async_easgd", "--cpus", "2", *LONG, "--out", str(out))
    segments = wait_for_training(lambda: family(proc.pid), out)
    run_id = next(iter(segments)).split("/wb", 1)[1][:12]
    locks = list(private_dir().glob(f"{run_id}.*.lock"))     # made by worker 0 in this user's private dir
    assert len(locks) == 1
    lock = locks[0]
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == 1 and summary_of(out)["status"] == "stopped"
    assert not lock.exists() and not [seg for seg in segments if os.path.exists(seg)]


def test_losing_rank_0_of_an_async_run_leaves_nothing_and_costs_no_waiting(client, tmp_path):
    from workbench.execution.cluster import workers_of
    from workbench.execution.engine import run
    victim = workers_of(client)[0]
    started = threading.Event()

    def on_record(records):
        if any(r["kind"] == "step" and r["worker"] == 1 for r in records):
            started.set()

    box: dict = {}
    cfg = RunConfig(algorithm="async_easgd", cpus=2, epochs=300, dataset="digits", batch_size=64, lr=0.1)
    t = threading.Thread(target=lambda: box.setdefault("r", run(cfg, cluster=client, on_record=on_record)))
    t.start()
    assert started.wait(120)
    maps = mapped_segments(family(victim["pid"]))
    time.sleep(0.3)
    os.kill(victim["pid"], signal.SIGKILL)
    t_kill = time.monotonic()
    t.join(300)
    result = box["r"]
    run_id = result.summary["run_id"]
    assert any(e["event"] == "worker_lost" for e in result.events)
    # the survivor finished its steps; everything after its last step is clean-up
    last_step_wall = result.summary["startup_s"] + result.summary["train_time_s"]
    assert result.summary["wall_time_s"] - last_step_wall < 8.0, result.summary["wall_time_s"]
    assert not list(private_dir().glob(f"{run_id}.*.lock"))
    assert not [m for m in maps if os.path.exists(m)] and not list(Path("/dev/shm").glob(f"wb{run_id}*"))
    print(f"rank 0 killed; run ended {time.monotonic() - t_kill:.1f} s later, "
          f"{result.summary['wall_time_s'] - last_step_wall:.2f} s after the survivor's last step")
    await_replacement(client, 2, gone=victim["address"])


# ------------------------------------------------------------------------------ external cluster
def test_killed_client_frees_the_external_cluster(external, tmp_path):
    out = tmp_path / "run"
    proc = start_cli("--algorithm", "sync_sgd", "--cpus", "2", *LONG, "--scheduler", external.address,
                     "--out", str(out))
    segments = wait_for_training(external.worker_procs, out)
    assert cpu_busy(external.worker_procs()) > 0.5          # both loops are training
    t_kill = time.monotonic()
    os.killpg(proc.pid, signal.SIGKILL)                     # no chance to say goodbye
    proc.wait(timeout=30)
    deadline = t_kill + 20
    while cpu_busy(external.worker_procs()) > 0.3:          # the loops see the lease lapse and end
        assert time.monotonic() < deadline, "workers still training 20 s after their client died"
    idle_s = time.monotonic() - t_kill
    assert not [seg for seg in segments if os.path.exists(seg)], "worker 0 did not free the orphaned segments"
    # the cluster takes the next run at once
    nxt = subprocess.run([sys.executable, "-m", "workbench", "run", "--algorithm", "sync_sgd", "--cpus", "2",
                          "--steps", "20", "--scheduler", external.address, "--out", str(tmp_path / "next")],
                         capture_output=True, text=True, env=ENV, timeout=120)
    assert nxt.returncode == 0, nxt.stderr
    assert summary_of(tmp_path / "next")["status"] == "completed"
    print(f"client SIGKILLed: workers idle {idle_s:.1f} s later")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signalled_client_on_an_external_cluster_stops_and_frees_it(external, tmp_path, sig):
    out = tmp_path / "run"
    proc = start_cli("--algorithm", "async_easgd", "--cpus", "2", *LONG, "--scheduler", external.address,
                     "--out", str(out))
    wait_for_training(external.worker_procs, out)
    t_sig = time.monotonic()
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "Traceback" not in stderr, stderr
    assert summary_of(out)["status"] == "stopped" and summary_of(out)["steps"] > 0
    assert time.monotonic() - t_sig < 60                     # a hang guard
    assert cpu_busy(external.worker_procs()) < 0.3           # nothing left training
    nxt = subprocess.run([sys.executable, "-m", "workbench", "run", "--algorithm", "sync_sgd", "--cpus", "2",
                          "--steps", "20", "--scheduler", external.address, "--out", str(tmp_path / "next")],
                         capture_output=True, text=True, env=ENV, timeout=120)
    assert nxt.returncode == 0, nxt.stderr


def test_scheduler_lost_mid_run_fails_with_its_cause_and_saves(tmp_path):
    cluster = ExternalCluster()
    try:
        out = tmp_path / "run"
        proc = start_cli("--algorithm", "sync_sgd", "--cpus", "2", *LONG, "--scheduler", cluster.address,
                         "--out", str(out))
        wait_for_training(cluster.worker_procs, out)
        t_kill = time.monotonic()
        os.killpg(cluster.scheduler.pid, signal.SIGKILL)
        _, stderr = proc.communicate(timeout=120)
        took = time.monotonic() - t_kill
    finally:
        cluster.close()
    assert proc.returncode == 1, stderr
    assert "Traceback" not in stderr, stderr
    # one message: the run's own (before, Dask's "distributed.client - ERROR -  (CancelledError)" too)
    assert "CancelledError" not in stderr and " - ERROR - " not in stderr, stderr
    s = summary_of(out)
    assert s["status"] == "failed" and s["steps"] > 0
    lost = [e for e in s["events"] if e["event"] == "scheduler_lost"]
    assert lost and cluster.address in lost[0]["message"], s["events"]
    assert "scheduler_lost" in stderr
    assert took < 30, took
    print(f"scheduler killed: run ended as failed {took:.1f} s later")
