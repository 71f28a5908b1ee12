"""A researcher's own Dask cluster (`dask scheduler` and `dask worker` started by hand):
what a run opens, leaves and prints there."""
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import start_scheduler

import workbench as wb
from workbench.config import ConfigError

pytestmark = pytest.mark.cluster

DASK = str(Path(sys.executable).parent / "dask")


def _start(address, names, log, prefix=()):
    env = {**os.environ, "MALLOC_TRIM_THRESHOLD_": ""}
    return [subprocess.Popen([*prefix, DASK, "worker", address, "--nthreads", "1", "--no-nanny", "--name", name,
                              "--host", "127.0.0.1", "--no-dashboard"],
                             stdout=open(log / f"{name}.log", "w"), stderr=subprocess.STDOUT, env=env)
            for name in names]


def _stop(procs):
    for p in reversed(procs):
        p.terminate()
    for p in procs:
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:   # a worker still stuck in a failed run's loop
            p.kill()
            p.wait(10)


def _connect(address):
    """A Client of the scheduler at `address` once it listens (None if it never does in a minute)."""
    from distributed import Client
    for _ in range(120):
        try:
            return Client(address, set_as_default=False, timeout=2)
        except OSError:
            time.sleep(0.5)
    return None


def _cluster(log, *workers):
    """A scheduler on a free port and `workers`, each (names, prefix), started by hand, and a
    Client of the test's: yields (address, client); stops them all after."""
    scheduler, address = start_scheduler(log, stdout=open(log / "s.log", "w"), stderr=subprocess.STDOUT)
    procs = [scheduler]
    for names, prefix in workers:
        procs += _start(address, names, log, prefix=prefix)
    client = None
    try:
        client = _connect(address)
        assert client is not None, "scheduler did not come up"
        client.wait_for_workers(sum(len(names) for names, _ in workers), timeout=60)
        yield address, client
    finally:
        if client is not None:
            client.close()
        _stop(procs)


@pytest.fixture(scope="module")
def own(tmp_path_factory):
    """A scheduler and two workers started by hand; yields (address, a Client of the test's, log folder)."""
    log = tmp_path_factory.mktemp("own")
    for address, client in _cluster(log, (["own-0", "own-1"], ())):
        yield address, client, log


def _users(client):
    """The scheduler's clients, less its own and the workers' (a lambda: pickled by value)."""
    return client.run_on_scheduler(lambda dask_scheduler: sorted(
        k for k in dask_scheduler.clients if not k.startswith(("fire", "Client-worker"))))


def _eventually(fn, want, timeout=10.0):
    deadline = time.monotonic() + timeout
    while True:
        got = fn()
        if got == want or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


def test_a_run_or_a_sweep_given_an_address_closes_the_client_it_opened(own, tiny):
    address, client, _ = own
    cfg = tiny(algorithm="sync_sgd", cpus=2, steps=4)
    clients, threads = _users(client), threading.active_count()
    for _ in range(2):
        assert wb.run(cfg, cluster=address, progress=False).status == "completed"
    table = wb.sweep(cfg, workers=[1, 2], cluster=address, progress=False)
    assert list(table["status"]) == ["completed", "completed"]
    assert _eventually(lambda: _users(client), clients) == clients
    # no thread left behind by the clients it opened (fewer is fine: a thread of the process's
    # earlier work, alive when counted, can end meanwhile: seen once, 11 against 12)
    assert _eventually(lambda: threading.active_count() <= threads, True), (threading.active_count(), threads)


# ------------------------------------------------------------------ one host: one /dev/shm
def test_the_host_key_tells_apart_what_does_not_share_dev_shm(monkeypatch, tmp_path):
    from workbench.execution import platforms
    here = platforms.host_key()
    assert here == platforms.host_key() and here.startswith(socket.gethostname() + "/")
    real_stat = os.stat
    monkeypatch.setattr(platforms.os, "stat", lambda p, *a, **k: real_stat(tmp_path if p == platforms.SHM_DIR
                                                                             else p, *a, **k))
    other = platforms.host_key()   # a /dev/shm of its own (tmp_path's device) unless both are one mount
    assert (other == here) == (real_stat(tmp_path).st_dev == real_stat(platforms.SHM_DIR).st_dev)
    ws = [{"host": "box", "host_key": here, "name": "a"}, {"host": "box", "host_key": "box/x/1/2", "name": "b"}]
    assert [w["host"] for w in platforms.separate_hosts(ws)] == ["box#1", "box#2"]
    assert [w["host"] for w in platforms.separate_hosts(ws[:1] * 2)] == ["box", "box"]


def _unshare_allowed():
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        return False
    try:
        return subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs tmpfs /dev/shm"],
                              capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="module")
def two_shm(tmp_path_factory):
    """A scheduler, one worker, and one worker with a /dev/shm and /tmp of its own under the
    same hostname (what two `--network host` containers are); yields (address, Client)."""
    if not _unshare_allowed():
        pytest.skip("needs root and `unshare -m` (a worker with its own /dev/shm)")
    own_shm = "mount -t tmpfs tmpfs /dev/shm && mount -t tmpfs tmpfs /tmp && exec \"$@\""
    yield from _cluster(tmp_path_factory.mktemp("shm2"), (["shm-0"], ()),
                        (["shm-1"], ("unshare", "-m", "sh", "-c", own_shm, "sh")))


def test_workers_of_one_hostname_without_one_dev_shm_are_two_hosts(two_shm, tiny):
    address, client = two_shm
    cfg = tiny(algorithm="sync_sgd", cpus=2, steps=6)
    result = wb.run(cfg, cluster=client, progress=False)
    assert result.status == "completed", result.summary["events"]
    assert result.summary["comm"] == "dask"   # the ring, not segments one of them cannot see
    assert _leftovers(client) == NOTHING      # its start barrier's Events too (two hosts: Dask Events)
    assert [w["host"] for w in result.summary["workers"]] == [f"{socket.gethostname()}#1",
                                                                f"{socket.gethostname()}#2"]
    with pytest.raises(ConfigError, match="comm: shm only when every worker is on one host, sharing its /dev/shm"):
        wb.run(cfg.replace(comm="shm"), cluster=client, progress=False)


# ------------------------------------------------------------------ what a run prints and leaves
_CLIENT_SCRIPT = """
import sys
import workbench as wb
if __name__ == "__main__":
    cfg = wb.RunConfig(algorithm="sync_sgd", dataset="digits", model="mlp", hidden=[32], batch_size=64, cpus=2,
                       steps=int(sys.argv[2]), seed=1)
    print(wb.run(cfg, cluster=sys.argv[1], progress=False).status)
"""


def _leftovers(client):
    """What workbench runs left on the scheduler: event-log topics, Events, Variables (a lambda:
    pickled by value)."""
    return client.run_on_scheduler(lambda dask_scheduler: {
        "topics": sorted(t for t in dask_scheduler._broker._topics if "workbench" in t),
        "events": sorted(k for k in dask_scheduler.extensions["events"]._events if "workbench" in k),
        "variables": sorted(k for k in dask_scheduler.extensions["variables"].variables if "workbench" in k)})


NOTHING = {"topics": [], "events": [], "variables": []}


def test_a_client_on_the_workers_host_exits_without_resource_tracker_warnings(own, tmp_path):
    """The client reads the workers' rings of step rows; its resource tracker is not theirs,
    so an attach it registered was reported at exit as 2 "leaked" segments, 6 lines a run."""
    address, _, _ = own
    script = tmp_path / "client.py"
    script.write_text(_CLIENT_SCRIPT)
    done = subprocess.run([sys.executable, str(script), address, "4"], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "completed", done.stderr
    assert "resource_tracker" not in done.stderr and "leaked" not in done.stderr, done.stderr


def test_a_run_leaves_nothing_on_the_scheduler_completed_stopped_or_its_client_killed(own, tiny, tmp_path):
    """Per run, its records' topic and the topics Dask logs its Variables' deletion to; a
    stopped run its stop Event; a killed client its lease and checkpoint Variables."""
    address, client, _ = own
    _eventually(lambda: _leftovers(client), NOTHING)   # (what an earlier test's killed client left)
    cfg = tiny(algorithm="sync_sgd", cpus=2, steps=4)
    assert wb.run(cfg, cluster=client, progress=False).status == "completed"
    assert _leftovers(client) == NOTHING
    asks = iter(range(1000))
    stopped = wb.run(cfg.replace(steps=100_000), cluster=client, progress=False, should_stop=lambda: next(asks) > 3)
    assert stopped.status == "stopped"
    assert _leftovers(client) == NOTHING
    script = tmp_path / "client.py"
    script.write_text(_CLIENT_SCRIPT)
    victim = subprocess.Popen([sys.executable, str(script), address, "1000000"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not _leftovers(client)["variables"] and time.monotonic() < deadline:   # its lease: training
            time.sleep(0.2)
        assert _leftovers(client)["variables"], "the killed client's run never started"
    finally:
        victim.kill()
        victim.wait(10)
    # the loops see the lease lapse (5 s), worker 0 cleans up after them
    assert _eventually(lambda: _leftovers(client), NOTHING, timeout=30) == NOTHING


# ------------------------------------------------------------------ a worker without workbench
_BARE_WORKER = """
import sys
sys.path.append(sys.argv.pop(1))   # the environment's packages, without its .pth files (python -S): no workbench
from distributed.cli.dask_worker import main
if __name__ == "__main__":
    sys.argv[0] = "dask-worker"
    main()
"""


def test_a_worker_without_workbench_is_named_as_such_and_left_out_when_enough_others_are_there(tmp_path, tiny):
    import sysconfig

    script = tmp_path / "bare_worker.py"
    script.write_text(_BARE_WORKER)
    scheduler, address = start_scheduler(tmp_path, stdout=open(tmp_path / "s.log", "w"), stderr=subprocess.STDOUT)
    procs = [scheduler,
             subprocess.Popen([sys.executable, "-S", str(script), sysconfig.get_paths()["purelib"], address,
                               "--nthreads", "1", "--no-nanny", "--name", "bare", "--host", "127.0.0.1",
                               "--no-dashboard"], cwd=tmp_path,
                              stdout=open(tmp_path / "w.log", "w"), stderr=subprocess.STDOUT)]
    procs += _start(address, ["good"], tmp_path)
    try:
        client = _connect(address)
        try:
            client.wait_for_workers(2, timeout=60)
            with pytest.raises(ConfigError) as got:   # two asked: the one without workbench is why not
                wb.run(tiny(algorithm="sync_sgd", cpus=2, steps=2), cluster=client, progress=False)
            with pytest.warns(UserWarning, match=r"left out 1 worker\(s\) of other code: worker tcp://\S+: no workbench"):
                one = wb.run(tiny(algorithm="sync_sgd", cpus=1, steps=2), cluster=client, progress=False)
            assert one.status == "completed" and [w["name"] for w in one.summary["workers"]] == ["good"]
        finally:
            client.close()
        assert str(got.value).endswith(": no workbench'"), str(got.value)
    finally:
        _stop(procs)


# ------------------------------------------------------------------ workers busy with another client's task
@pytest.fixture(scope="module")
def three(tmp_path_factory):
    """A scheduler and three workers started by hand; yields (address, a Client of the test's)."""
    yield from _cluster(tmp_path_factory.mktemp("three"), (["busy-0", "busy-1", "busy-2"], ()))


def _hold(client, worker_name):
    """Another client's task on the worker named `worker_name`, running until the test sets
    its Event (a minute at most); returns (future, the Event, the task's key)."""
    from distributed import Event
    address = next(a for a, w in client.scheduler_info(n_workers=-1)["workers"].items() if w["name"] == worker_name)
    name = f"hold-{os.getpid()}-{time.monotonic_ns()}"
    event = Event(name, client=client)
    # a lambda: pickled by value (the workers do not import the tests)
    fut = client.submit(lambda n: __import__("distributed").Event(n).wait(timeout=60), name, workers=[address],
                        pure=False, key=f"another-clients-task-{name}")
    assert _eventually(lambda: fut.key in client.processing().get(address, ()), True) is True
    return fut, event, fut.key


def test_a_run_on_a_shared_cluster_takes_idle_workers_before_a_busy_one(three, tiny):
    address, client = three
    fut, event, _ = _hold(client, "busy-0")
    try:
        got = wb.run(tiny(algorithm="sync_sgd", cpus=2, steps=4), cluster=address, progress=False)
    finally:
        event.set()
    assert got.status == "completed"
    assert [w["name"] for w in got.summary["workers"]] == ["busy-1", "busy-2"]
    assert fut.result(timeout=30) is True


def test_a_run_that_must_wait_for_a_busy_worker_says_which_and_for_what(three, tiny, monkeypatch):
    from workbench.execution import platforms
    address, client = three
    fut, event, key = _hold(client, "busy-0")
    said = []
    note_once = platforms.note_once

    def note_and_release(message):      # the note said: let the other client's task end
        said.append(message)
        if "waits for" in message:
            event.set()
        return note_once(message)
    monkeypatch.setattr(platforms, "note_once", note_and_release)
    try:
        with pytest.warns(UserWarning, match=r"the run waits for worker busy-0 \(tcp://\S+\), busy with 1 task"):
            got = wb.run(tiny(algorithm="sync_sgd", cpus=3, steps=4), cluster=address, progress=False)
    finally:
        event.set()
    assert got.status == "completed"
    assert sorted(w["name"] for w in got.summary["workers"]) == ["busy-0", "busy-1", "busy-2"]
    assert any("waits for" in m and key in m for m in said), said
    assert fut.result(timeout=30) is True


def test_the_cli_says_in_one_note_line_which_busy_worker_a_run_waits_for(three, tmp_path):
    address, client = three
    fut, event, key = _hold(client, "busy-0")
    proc = subprocess.Popen([sys.executable, "-m", "workbench", "run", "--algorithm", "sync_sgd", "--cpus", "3",
                             "--dataset", "digits", "--hidden", "32", "--batch-size", "64", "--steps", "4",
                             "--no-progress", "--scheduler", address, "--out", str(tmp_path / "run")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    try:
        for line in proc.stderr:          # until the note: then the other client's task may end
            lines.append(line)
            if "waits for" in line:
                break
    finally:
        event.set()
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    note = [ln for ln in lines if "waits for" in ln]
    assert note == [f"note: too few idle workers: the run waits for worker busy-0 "
                    f"({note[0].split('(')[1].split(')')[0]}), busy with 1 task(s) already there ({key})\n"], lines
    assert "PlatformNote" not in "".join(lines) + err
    assert fut.result(timeout=30) is True


# ------------------------------------------------------------------ a worker that turns busy after the choice
def test_a_worker_that_takes_on_another_clients_task_mid_run_is_named_with_when(tiny):
    """A run chooses idle workers; if another client's task lands on one of them mid-run, the
    run's speed from then on is the machine's, not the algorithm's, and the busy-machine note
    cannot see it (the task runs in the worker's own process: no other process's CPU). The
    client's liveness check now reads the scheduler's `processing` too and names the worker and
    when, in an event, the summary's `busy_note` and the run's notes; the other worker is not
    named. A real LocalCluster of 2 workers with 2 threads each (so the task gets a thread beside
    the run's loop) and a second client submitting a sleep task to worker 0 once training runs."""
    from distributed import Client, LocalCluster

    from workbench.measure import notes
    cluster = LocalCluster(n_workers=2, threads_per_worker=2, processes=True, dashboard_address=None)
    other = Client(cluster.scheduler_address, set_as_default=False)
    submitted: list = []
    try:
        workers = sorted(other.scheduler_info(n_workers=-1)["workers"].items(), key=lambda kv: str(kv[1]["name"]))

        def on_record(batch):
            if not submitted:   # training runs: another client's task lands on the first chosen worker
                submitted.append(other.submit(time.sleep, 3, workers=[workers[0][0]], pure=False,
                                              key="another-clients-sleep"))
                submitted.append(time.monotonic())

        def should_stop():   # well after the liveness check (every 0.5 s) had its chance
            return len(submitted) == 2 and time.monotonic() - submitted[1] > 4

        run = wb.run(tiny(algorithm="sync_sgd", cpus=2, epochs=10_000), cluster=cluster,
                     on_record=on_record, should_stop=should_stop, progress=False)
    finally:
        other.close()
        cluster.close()
    s = run.summary
    chosen = {w["name"]: w for w in s["workers"]}
    first = str(workers[0][1]["name"])
    assert first in {str(n) for n in chosen}, s["workers"]
    note = s.get("busy_note") or ""
    assert note.startswith(f"worker {first} ({workers[0][0]}) took on 1 task(s) not of this run "
                           f"(another-clients-sleep), beside its loop on its 2 threads from "), note
    assert "into the run" in note and str(workers[1][0]) not in note, note
    busy = [e for e in s["events"] if e["event"] == "worker_busy"]
    assert len(busy) == 1 and busy[0]["message"] == note, busy
    assert note in notes(s)
