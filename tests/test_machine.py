"""The machine's state in a run's result (workbench.util.machine): parsing, accounting, the sentence."""
from __future__ import annotations

import pytest

import workbench as wb
from workbench.util import machine


def test_proc_stat_is_read_as_busy_idle_and_steal(tmp_path, monkeypatch):
    stat = tmp_path / "stat"
    #               user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text("cpu  100 20 30 400 50 5 5 40 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n")
    monkeypatch.setattr(machine.os, "sysconf", lambda name: 10)
    assert machine.cpu_times(str(stat)) == {"busy": 16.0, "idle": 45.0, "steal": 4.0}
    assert machine.cpu_times(str(tmp_path / "absent")) is None


def snap(t, busy, steal=0.0, own=0.0, load=0.5, cores=2, pid=1):
    return {"time": t, "load": load, "cpu": {"busy": busy, "idle": 0.0, "steal": steal},
            "process_cpu_s": own, "pid": pid, "cores": cores}


def test_our_processes_are_counted_once_and_the_rest_is_other_processes():
    loops = [{"rank": 0, "pid": 7, "process_cpu_s": 3.0}, {"rank": 1, "pid": 7, "process_cpu_s": 3.0},
             {"rank": 2, "pid": 1, "process_cpu_s": 9.0}]       # pid 1 is this process: in `own` already
    s = machine.summarise(snap(0, 0), snap(10, 12.0, own=2.0), loops)
    assert s["our_cores"] == pytest.approx(0.5)       # (2 + 3) / 10
    assert s["other_cores"] == pytest.approx(0.7)     # (12 - 5) / 10
    assert s["busy_cores"] == pytest.approx(1.2)


def test_every_process_of_the_run_is_ours_once_and_a_new_one_from_zero():
    # procs: {pid: CPU s} of the run's processes (this one with its scheduler and client, its
    # children, the workers and their nannies); a loop whose pid is among them adds nothing
    before, after = snap(0, 0), snap(10, 15.0)
    before["procs"] = {1: 5.0, 7: 1.0, 9: 3.0}
    after["procs"] = {1: 6.0, 7: 4.0, 8: 2.0}            # 9 ended (its last seconds unknown), 8 started
    loops = [{"rank": 0, "pid": 7, "process_cpu_s": 3.0}, {"rank": 1, "pid": 11, "process_cpu_s": 1.0}]
    s = machine.summarise(before, after, loops)
    assert s["our_cores"] == pytest.approx((1.0 + 3.0 + 2.0 + 1.0) / 10)   # 11: not seen, its loop counts
    assert s["other_cores"] == pytest.approx((15.0 - 7.0) / 10)


def test_the_run_processes_are_this_one_its_children_and_the_given_workers_with_their_parents():
    import os
    import subprocess
    import sys
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        procs = machine.run_processes()
        assert os.getpid() in procs and child.pid in procs
        grandchild_view = machine.run_processes([child.pid])
        assert child.pid in grandchild_view and os.getpid() in grandchild_view   # its parent: this process
        assert all(v >= 0 for v in procs.values())
    finally:
        child.kill()
        child.wait()


def test_the_cores_are_the_affinity_and_the_quota_not_the_hosts(monkeypatch):
    import dask.system
    assert machine.usable_cores() == dask.system.cpu_count()
    machine.usable_cores.cache_clear()
    monkeypatch.setattr(dask.system, "cpu_count", lambda: 1)
    try:
        assert machine.usable_cores() == 1
        assert machine.snapshot()["cores"] == 1
    finally:
        machine.usable_cores.cache_clear()


def test_busy_time_is_read_for_the_affinity_set_only(tmp_path, monkeypatch):
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 0 400 0 0 0 10 0 0\ncpu0 60 0 0 100 0 0 0 4 0 0\ncpu1 40 0 0 300 0 0 0 6 0 0\n")
    monkeypatch.setattr(machine.os, "sysconf", lambda name: 10)
    assert machine.cpu_times(str(stat), cpus={1}) == {"busy": 4.0, "idle": 30.0, "steal": 0.6}
    assert machine.cpu_times(str(stat), cpus={0, 1}) == pytest.approx({"busy": 10.0, "idle": 40.0, "steal": 1.0})
    assert machine.cpu_times(str(stat), cpus={5}) == {"busy": 10.0, "idle": 40.0, "steal": 1.0}   # not listed: all


def test_no_proc_stat_leaves_the_split_unknown_but_keeps_the_load():
    before, after = snap(0, 0), snap(10, 0)
    before["cpu"] = after["cpu"] = None
    s = machine.summarise(before, after, [])
    assert s["other_cores"] is None and s["load_before"] == 0.5 and s["note"] is None


@pytest.mark.parametrize("others, steal, says", [
    (1.6, 0.0, "other processes used 1.6 of 2 cores"),
    (0.2, 0.0, "other processes used 0.2 of 2 cores"),        # exactly the threshold: 10% of 2 cores
    (0.19, 0.0, None),
    (0.0, 0.5, "the hypervisor took 0.5 of 2 cores (steal)"),
    (0.9, 0.5, "other processes used 0.9 of 2 cores and the hypervisor took 0.5 of 2 cores (steal)"),
])
def test_the_sentence_appears_from_a_tenth_of_the_cores(others, steal, says):
    got = machine.note({"cores": 2, "other_cores": others, "steal_cores": steal})
    if says is None:
        assert got is None
    else:
        assert got.startswith(says) and got.endswith("its throughput measures the machine, not the algorithm")


def test_the_threshold_scales_with_the_cores():
    assert machine.note({"cores": 16, "other_cores": 1.0, "steal_cores": 0.0}) is None   # 1 of 16: < 10%
    assert machine.note({"cores": 16, "other_cores": 1.6, "steal_cores": 0.0}) is not None


def test_summarise_does_not_change_its_inputs():
    loops = [{"rank": 1, "pid": 7, "process_cpu_s": 1.0}, {"rank": 0, "pid": 8, "process_cpu_s": 1.0}]
    before, after = snap(0, 0), snap(1, 1)
    copies = [dict(x) for x in loops], dict(before), dict(after)
    machine.summarise(before, after, loops)
    assert (loops, before, after) == copies


@pytest.mark.parametrize("algorithm", ["sync_sgd", "sgd"])
def test_a_real_run_records_the_machine_and_each_worker_loop(algorithm, tiny):
    cfg = tiny(algorithm=algorithm, cpus=1 if algorithm == "sgd" else 2, steps=60)
    s = wb.run(cfg, cluster="threads", progress=False).summary
    m = s["machine"]
    assert m["cores"] >= 1 and m["load_before"] is not None and m["wall_s"] > 0
    assert [w["rank"] for w in m["workers"]] == list(range(cfg.cpus or 1))
    for w in m["workers"]:
        assert 0 <= w["cpu_s"] <= w["wall_s"] * 1.05 + 0.01      # one thread: CPU time within its wall time
        assert w["stalled_s"] >= 0 and w["compute_s"] > 0
    assert s["machine_note"] == machine.note(m)


def test_a_simulated_run_depends_on_no_machine(tiny):
    s = wb.run(tiny(algorithm="sync_sgd", cpus=4, simulate=True, steps=20), progress=False).summary
    assert "machine" not in s and s.get("machine_note") is None


def test_a_run_with_more_cpu_workers_than_cores_says_they_took_turns(monkeypatch):
    """A lab machine of 2 cores asked for 4 workers gives 4 workers' throughput from 2 cores'
    compute: the run says so (summary, notes the CLI, dashboard and reports print), and a run
    that fits its cores says nothing. The cores are the run's usable ones (monkeypatched to 1
    here, so that 2 thread workers crowd them on any machine)."""
    import workbench as wb
    from workbench.measure import notes
    from workbench.util import machine as M
    cfg = wb.RunConfig(algorithm="sync_sgd", dataset="digits", model="softmax", batch_size=32, steps=20, seed=0)
    monkeypatch.setattr(M, "usable_cores", lambda: 1)
    crowded = wb.run(cfg.replace(cpus=2), cluster="threads", progress=False).summary
    assert crowded["machine"]["cores"] == 1
    assert crowded["crowding_note"].startswith("2 CPU workers on 1 core of this host: they take turns")
    assert crowded["crowding_note"] in notes(crowded)
    alone = wb.run(cfg.replace(cpus=1), cluster="threads", progress=False).summary
    assert "crowding_note" not in alone and not any("take turns" in n for n in notes(alone))


def test_workers_on_other_hosts_are_not_counted_as_this_hosts_cpu_and_the_note_says_whose_cores():
    """An existing cluster's workers on other hosts: their loops' CPU time was added to this
    host's own, so two remote workers busy 10 s each hid a busy laptop's other processes
    (our 2.1 cores of 2, others 0.0: no note)."""
    import socket
    here = socket.gethostname()
    workers = [{"host": here, "pid": 7}, {"host": "node-2", "pid": 11}, {"host": "node-3", "pid": 12}]
    loops = [{"rank": 0, "pid": 7, "process_cpu_s": 3.0}, {"rank": 1, "pid": 11, "process_cpu_s": 10.0},
             {"rank": 2, "pid": 12, "process_cpu_s": 10.0}]
    s = machine.summarise(snap(0, 0), snap(10, 18.0, own=1.0), loops, workers)
    assert s["our_cores"] == pytest.approx(0.4)       # (1 + 3) / 10: this process and the local worker
    assert s["other_cores"] == pytest.approx(1.4)     # (18 - 4) / 10
    assert s["workers_elsewhere"] == 2
    assert "of this host" in s["note"] and "2 workers on other hosts" in s["note"]
    alone = machine.summarise(snap(0, 0), snap(10, 18.0, own=1.0), loops[:1], workers[:1])
    assert alone["workers_elsewhere"] == 0 and "of this host" not in alone["note"]
