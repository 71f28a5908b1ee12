"""Checkpoints and resume (issue 47): a run continued from its last checkpoint gives, on
every deterministic path, bitwise the records and final losses of the run never stopped.

The oracle is always the same config run through without a break. A break is made three
ways: (1) as a kill -9 leaves a run directory (the run written through, then its commit
marker removed and the checkpoints after the k-th deleted: steps.csv still holds rows past
the checkpoint, which the resumed run must drop and compute again); (2) a real kill -9 of
the CLI's whole process group on a local Dask cluster; (3) a real SIGTERM.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import workbench as wb
from workbench import checkpoint as ckpt
from workbench.config import ConfigError, RunConfig

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONPATH": str(ROOT)}
STEP_COLS = ["worker", "step", "epoch", "loss", "lr", "samples", "bytes_sent"]      # what a real run repeats bitwise
TIME_COLS = ["time", "compute_s", "comm_s", "wait_s"]                                 # ... and a simulated one too
EVAL_COLS = ["worker", "step", "epoch", "train_loss", "test_loss", "test_accuracy"]


def killed_after(src: Path, dst: Path, k: int) -> int:
    """A copy of the run directory `src` as a kill -9 after its k-th checkpoint leaves it:
    no summary.json (nor report), steps.csv with every row the run wrote, checkpoints 1..k.
    Returns the step of checkpoint k."""
    shutil.copytree(src, dst)
    for name in ("summary.json", "report.html"):
        (dst / name).unlink(missing_ok=True)
    files = ckpt.listed(dst)
    for f in files[k:]:
        f.unlink()
    return ckpt.read(files[k - 1]).step


def same_records(a: Path, b: Path, time_too: bool) -> None:
    """steps.csv and evals.csv of two run directories hold bitwise the same numbers (a real
    run's evaluations compared in step order: the file is in time order, and times differ)."""
    cols = STEP_COLS + (TIME_COLS if time_too else [])
    sa, sb = pd.read_csv(a / "steps.csv"), pd.read_csv(b / "steps.csv")
    assert len(sa) == len(sb) and len(sa) > 0
    pd.testing.assert_frame_equal(sa[cols], sb[cols], check_exact=True)
    ea, eb = pd.read_csv(a / "evals.csv"), pd.read_csv(b / "evals.csv")
    ecols = EVAL_COLS + (["time"] if time_too else [])
    if not time_too:
        ea, eb = (e.sort_values(["step", "worker"], kind="stable").reset_index(drop=True) for e in (ea, eb))
    assert len(ea) > 0
    pd.testing.assert_frame_equal(ea[ecols], eb[ecols], check_exact=True)


DETERMINISTIC = [
    ("sgd", {}),
    ("sync_sgd", {}),
    ("sync_sgd", {"compression": "topk", "compression_ratio": 0.1}),                 # error feedback + DGC momentum
    ("sync_sgd", {"compression": "topk", "compression_ratio": 0.1, "momentum": 0.0}),
    ("sync_sgd", {"compression": "qsgd"}),                                           # a generator per worker
    ("sync_sgd", {"compression": "randomk", "compression_ratio": 0.2}),
    ("sync_sgd", {"compression": "powersgd", "compression_rank": 2}),                # Q's warm start
    ("sync_sgd", {"compression": "sign", "error_feedback": False}),
    ("sync_sgd", {"optimizer": "adamw", "lr": 0.01}),
    ("sync_sgd", {"grad_clip": 0.3, "momentum": 0.9}),                              # the clip counts travel too
    ("sync_sgd", {"accumulate": 4}),                                                # slices of 16 in 4 passes
    ("local_sgd", {"tau": 4}),
    ("post_local_sgd", {"tau": 3, "post_local_epoch": 0.3}),
    ("diloco", {"tau": 5, "optimizer": "adamw", "lr": 0.005}),
    ("diloco", {"tau": 5, "optimizer": "adamw", "lr": 0.005, "grad_clip": 0.5}),
    ("sync_easgd", {"tau": 3}),
    ("dpsgd", {"tau": 2, "topology": "ring"}),
    ("ltfb", {"trainers": 3, "round_size": 10}),
]


def _id(case):
    alg, extra = case
    return alg + "".join(f"-{v}" for v in extra.values())


@pytest.mark.parametrize("case", DETERMINISTIC, ids=[_id(c) for c in DETERMINISTIC])
def test_a_resumed_run_is_bitwise_the_uninterrupted_one_on_threads(tmp_path, case):
    algorithm, extra = case
    cfg = RunConfig(algorithm=algorithm, cpus=3, steps=96, batch_size=48, eval_every=10, checkpoint_every=16,
                    checkpoint_keep=100, **extra)
    whole = wb.run(cfg.replace(out=str(tmp_path / "whole")), cluster="threads", progress=False)
    assert whole.status == "completed" and whole.summary["checkpoints"]["written"] == 5
    step = killed_after(tmp_path / "whole", tmp_path / "cut", 3)
    assert step == 48 and len(pd.read_csv(tmp_path / "cut" / "steps.csv"))   # rows past it are still there
    resumed = wb.resume(tmp_path / "cut", cluster="threads", progress=False)
    assert resumed.status == "completed" and resumed.summary["resumed_from"]["step"] == 48
    same_records(tmp_path / "whole", tmp_path / "cut", time_too=False)
    assert np.array_equal(whole.params, resumed.params)
    assert resumed.summary["final_test_loss"] == whole.summary["final_test_loss"]
    assert resumed.summary.get("grad_clip") == whole.summary.get("grad_clip")     # counted over both segments
    assert ("grad_clip" in whole.summary) == ("grad_clip" in extra)
    seg = resumed.summary["segments"]
    assert [(s["from_step"], s["to_step"]) for s in seg] == [(0, 48), (48, whole.summary["steps"])]
    s = resumed.summary   # the time identity over both segments, each part >= 0
    assert s["wall_time_s"] == pytest.approx(s["startup_s"] + s["train_time_s"] + s["teardown_s"])
    assert min(s["startup_s"], s["train_time_s"], s["teardown_s"]) >= 0
    times = pd.read_csv(tmp_path / "cut" / "steps.csv").groupby("worker")["time"].diff().dropna()
    assert (times >= 0).all()                                           # the resumed times go on from the checkpoint's


SIMULATED = [("sync_sgd", {}), ("sync_sgd", {"compression": "topk", "compression_ratio": 0.1}),
             ("local_sgd", {"tau": 3}), ("diloco", {"tau": 4}), ("sync_easgd", {"tau": 2}), ("dpsgd", {}),
             ("ltfb", {"trainers": 2, "round_size": 10}),
             # asynchronous: replayed from step 0 (their workers are mid-step at any virtual instant)
             ("sync_sgd", {"accumulate": 3}),
             ("async_sgd", {}), ("async_msgd", {}), ("async_sgd", {"grad_clip": 0.5}), ("easgd", {"tau": 2}),
             ("async_easgd", {}),
             ("async_measgd", {}), ("hogwild_sgd", {}), ("hogwild_easgd", {}), ("adpsgd", {})]


@pytest.mark.parametrize("case", SIMULATED, ids=[_id(c) for c in SIMULATED])
def test_a_resumed_simulated_run_is_bitwise_virtual_times_too(tmp_path, case):
    """Jitter draws and every virtual clock go on from the checkpoint's: even the times are the same bits."""
    algorithm, extra = case
    cfg = RunConfig(algorithm=algorithm, cpus=4, steps=80, batch_size=64, eval_every=15, checkpoint_every=20,
                    checkpoint_keep=100, simulate=True, jitter=0.2, **extra)
    whole = wb.run(cfg.replace(out=str(tmp_path / "whole")), progress=False)
    killed_after(tmp_path / "whole", tmp_path / "cut", 2)
    resumed = wb.resume(tmp_path / "cut", progress=False)
    same_records(tmp_path / "whole", tmp_path / "cut", time_too=True)
    assert np.array_equal(whole.params, resumed.params)
    assert resumed.summary["wall_time_s"] == whole.summary["wall_time_s"]      # virtual: the makespan
    assert ("replayed" in resumed.summary["resumed_from"]) == (not cfg.is_sync)
    assert resumed.summary.get("grad_clip") == whole.summary.get("grad_clip")


def test_checkpoints_change_nothing_in_a_simulated_run(tmp_path):
    """Taking checkpoints reads no clock and moves no virtual time: the records (times too)
    are those of the same run without them, synchronous and asynchronous."""
    for algorithm in ("sync_sgd", "async_easgd"):
        cfg = RunConfig(algorithm=algorithm, cpus=4, steps=60, batch_size=64, eval_every=15, simulate=True,
                        jitter=0.2)
        wb.run(cfg.replace(checkpoint_every=10, out=str(tmp_path / f"{algorithm}-on")), progress=False)
        off = wb.run(cfg.replace(checkpoint_every="none", out=str(tmp_path / f"{algorithm}-off")), progress=False)
        assert off.summary["sim_path"] in ("lockstep", "per worker")
        same_records(tmp_path / f"{algorithm}-on", tmp_path / f"{algorithm}-off", time_too=True)


def test_a_lockstep_simulated_run_says_it_has_no_checkpoints_and_resume_refuses_it(tmp_path):
    """The simulator's lockstep paths keep no state per worker: a wall-clock interval (the
    default's form) takes none, the summary says so, and resume is refused in one line."""
    cfg = RunConfig(algorithm="sync_sgd", cpus=4, steps=400, batch_size=64, simulate=True, checkpoint_every="1s",
                    out=str(tmp_path / "r"))
    r = wb.run(cfg, progress=False, should_stop=lambda: True)
    assert r.summary["sim_path"] == "lockstep" and r.summary["checkpoints"]["written"] == 0
    assert "lockstep" in r.summary["checkpoints"]["note"]
    with pytest.raises(ConfigError, match="a run directory holding a checkpoint to continue from"):
        wb.resume(tmp_path / "r", progress=False)


def test_a_simulated_run_failed_by_its_fail_worker_resumes_past_it_with_the_worker_back(tmp_path, capsys):
    """A fault fires once. Before, virtual time went on from the checkpoint and `fail_worker`
    killed the same worker at the same virtual second on every resume, so the run was refused.
    Now a synchronous run goes on from its checkpoint with the worker back (as a real run
    resumed after a lost worker goes on with a replacement), and the fault's event says so.
    Oracle: the same config without `fail_worker`, run through: before its fault fires a
    scheduled kill changes nothing, so the resumed records are its bits, virtual times too."""
    from workbench.apps.cli import main
    out = tmp_path / "r"
    args = ["--simulate", "--algorithm", "sync_sgd", "--dataset", "digits", "--cpus", "4", "--batch-size", "64",
            "--epochs", "3", "--checkpoint-every", "10", "--jitter", "0.2", "--no-progress"]
    assert main(["run", *args, "--fail-worker", "1@0.005", "--out", str(out)]) == 1
    said = capsys.readouterr()
    assert "worker_lost" in said.err and ckpt.listed(out), said
    assert f"resume: python -m workbench run --resume {out}" in said.out
    assert main(["run", *args, "--out", str(tmp_path / "whole")]) == 0
    capsys.readouterr()
    assert main(["run", "--resume", str(out), "--no-progress"]) == 0
    said = capsys.readouterr()
    assert "note: resumed: fail_worker 1@0.005 fired in an earlier segment; resumed from step 20 with the worker " \
           "back, not killed again" in said.out, said
    resumed = wb.load(out)
    assert resumed.summary["status"] == "completed"
    same_records(tmp_path / "whole", out, time_too=True)
    assert np.array_equal(resumed.params, wb.load(tmp_path / "whole").params)
    ended = [seg["ended"] for seg in resumed.summary["segments"]]
    assert ended == ["failed: worker 1 lost after 22 steps; resumed from its checkpoint at step 20 (2 steps run again)",
                     "completed"], ended
    # where the fault would fire again it is refused in one line: an elastic run names its faults by rank
    elastic = RunConfig(algorithm="sync_sgd", cpus=2, batch_size=64, epochs=3, checkpoint_every=10, simulate=True,
                        elastic=True, min_workers=2, fail_worker="1@0.005", out=str(tmp_path / "e"))
    assert wb.run(elastic, progress=False).status == "failed" and ckpt.listed(tmp_path / "e")
    with pytest.raises(ConfigError, match=r"^resume: a run that can go on past where it ended \(this simulated "
                                          r"run's fail_worker 1@0.005 kills the same worker .*an elastic run"):
        wb.resume(tmp_path / "e", progress=False)
    # a simulated run with a fault that was stopped before it failed goes on as any other
    stopped = tmp_path / "s"
    wb.run(RunConfig(algorithm="sync_sgd", cpus=4, batch_size=64, epochs=3, checkpoint_every=10, simulate=True,
                     fail_worker="1@0.005", out=str(stopped)), progress=False, should_stop=lambda: True)
    assert wb.load(stopped).summary["status"] == "stopped" and ckpt.listed(stopped)
    assert wb.resume(stopped, progress=False).summary["status"] == "failed"   # (the fault, where it was planned)


ASYNCHRONOUS = ["async_sgd", "async_msgd", "easgd", "async_easgd", "async_measgd", "hogwild_sgd", "hogwild_easgd",
                "adpsgd"]


@pytest.mark.parametrize("algorithm", ASYNCHRONOUS)
def test_an_asynchronous_run_takes_up_its_checkpoint_exactly(tmp_path, algorithm):
    """On threads an asynchronous run is not repeatable (its workers race), so the oracle is
    the checkpoint itself: resumed and stopped before any step, the run's result (the
    server's parameters, the centre, the shared buffer, the rows' mean) is what the
    checkpoint holds, bit for bit; resumed to the end, it completes."""
    from workbench.checkpoint import read
    cfg = RunConfig(algorithm=algorithm, cpus=3, steps=60, batch_size=48, eval_every=10, checkpoint_every=15,
                    checkpoint_keep=100)
    wb.run(cfg.replace(out=str(tmp_path / "whole")), cluster="threads", progress=False)
    killed_after(tmp_path / "whole", tmp_path / "cut", 2)
    saved = read(ckpt.listed(tmp_path / "cut")[-1])
    held = {"hogwild_sgd": lambda: saved.ranks[0]["shared.params"],
            "hogwild_easgd": lambda: saved.ranks[0]["shared.centre"],
            "adpsgd": lambda: saved.server["rows"].mean(axis=0, dtype=np.float64).astype(np.float32)}.get(
        algorithm, lambda: saved.server["x"])()
    from workbench.execution.transports.threads import ThreadTransport
    transport = ThreadTransport()
    transport.control.request_stop("before the first step")    # every worker stops at its first step's top
    stopped = wb.resume(tmp_path / "cut", cluster=transport, progress=False)
    assert stopped.status == "stopped" and stopped.summary["steps"] == 30 and np.array_equal(stopped.params, held)
    done = wb.resume(tmp_path / "cut", cluster="threads", progress=False)
    assert done.status == "completed" and done.summary["steps"] == 60
    rows = pd.read_csv(tmp_path / "cut" / "steps.csv")
    assert sorted(rows.groupby("worker")["step"].nunique()) == [60, 60, 60]       # every step, once per worker


HOLD_S = 120   # the longest a worker waits for the stop after its first checkpoint's state (a guard)


def _stop_after_first_checkpoint(out: Path, monkeypatch: pytest.MonkeyPatch):
    """A `should_stop` that says yes once the run in `out` has written a checkpoint: the
    run is then mid-plan, and the stop is asked at whatever step the machine's speed makes it.

    Until that stop is asked, each worker waits after sending its state for a checkpoint
    (`WorkerContext.save_state`; at most HOLD_S; simulated, the last virtual worker to send). Unheld, the loops ran on while the client
    gathered the states, synced steps.csv, wrote the file, and its next poll saw it: on a
    busy machine (pytest -n 2 beside other work, the client's thread starved) they could
    reach the plan's end first, a stop after the last step leaves the run completed, and the
    test, which needs it stopped mid-plan, failed. Held, the stop always lands before the
    end, and the numbers are those of any run (the wait changes no step's maths)."""
    import threading

    from workbench.algorithms.base import WorkerContext
    asked = threading.Event()
    send = WorkerContext.save_state
    sent: dict[int, set[int]] = {}   # step -> the ranks that sent their state for it

    def save_state(self, step, state, tag=None):
        send(self, step, state, tag)
        sent.setdefault(step, set()).add(self.rank)
        if tag is not None or self.config.simulate and len(sent[step]) < self.size:
            return   # (the simulator runs its virtual workers on one thread: only the last to send waits)
        deadline = time.monotonic() + HOLD_S
        while not asked.is_set() and not self.stop_requested() and time.monotonic() < deadline:
            time.sleep(0.002)
    monkeypatch.setattr(WorkerContext, "save_state", save_state)

    def should_stop() -> bool:
        if ckpt.listed(out):
            asked.set()   # (from here on no worker waits: the resumed run's checkpoints neither)
        return asked.is_set()
    return should_stop


def _stopped_then_resumed(tmp_path: Path, cfg: RunConfig, cluster: str | None, monkeypatch: pytest.MonkeyPatch):
    """The run of `cfg` stopped after its first checkpoint, then resumed to its end; returns
    (stopped result, the stop's step, resumed result). The stop leaves a checkpoint of its
    own, before the step the loops would have run next: the resumed run goes on from there."""
    out = tmp_path / "stopped"
    kw = {"cluster": cluster} if cluster else {}
    stopped = wb.run(cfg.replace(out=str(out)), progress=False,
                     should_stop=_stop_after_first_checkpoint(out, monkeypatch),
                     **kw)
    assert stopped.status == "stopped"
    rows = pd.read_csv(out / "steps.csv")
    end = int(rows["step"].max()) + 1
    assert end < cfg.steps and ckpt.read(ckpt.listed(out)[-1]).step == end     # the stop's own checkpoint
    assert sorted(rows.groupby("worker")["step"].nunique()) == [end] * rows["worker"].nunique()   # its step done
    resumed = wb.resume(out, progress=False, **kw)
    assert resumed.status == "completed" and resumed.summary["resumed_from"]["step"] == end
    return stopped, end, resumed


def test_the_stop_after_the_first_checkpoint_lands_mid_plan_however_late_the_file_is(tmp_path, monkeypatch):
    """What the tests above rely on: a client slow to write the first checkpoint (a busy
    machine starving its thread, here a 1.5 s write) still stops the run mid-plan. Unheld,
    the loops ran the 1,200 steps left meanwhile and the run ended `completed`."""
    from workbench.execution import saver
    write = saver.ckpt.write

    def late(*args, **kwargs):
        time.sleep(1.5)
        return write(*args, **kwargs)
    monkeypatch.setattr(saver.ckpt, "write", late)
    cfg = RunConfig(algorithm="sync_sgd", cpus=2, steps=1500, batch_size=32, checkpoint_every=300,
                    out=str(tmp_path / "r"))
    r = wb.run(cfg, cluster="threads", progress=False, should_stop=_stop_after_first_checkpoint(tmp_path / "r",
                                                                                                  monkeypatch))
    assert r.status == "stopped" and r.summary["steps"] < cfg.steps, (r.status, r.summary["steps"])


STOPPED = [("sgd", {}), ("sync_sgd", {}), ("sync_sgd", {"compression": "topk", "compression_ratio": 0.1}),
           ("local_sgd", {"tau": 4}), ("diloco", {"tau": 5, "optimizer": "adamw", "lr": 0.005}),
           ("dpsgd", {"tau": 2, "topology": "ring"}), ("sync_easgd", {"tau": 3})]


@pytest.mark.parametrize("case", STOPPED, ids=[_id(c) for c in STOPPED])
def test_a_stopped_run_resumes_from_where_it_stopped_bitwise(tmp_path, case, monkeypatch):
    """A stop (the API's `should_stop`, as the dashboard's Stop) completes the step it is
    decided at and leaves a checkpoint there: the resumed run loses no step, and its records,
    parameters and final losses are bitwise those of the run never stopped."""
    algorithm, extra = case
    cfg = RunConfig(algorithm=algorithm, cpus=2, steps=1500, batch_size=32, eval_every=100, checkpoint_every=300,
                    checkpoint_keep=100, **extra)
    _, end, resumed = _stopped_then_resumed(tmp_path, cfg, "threads", monkeypatch)
    whole = wb.run(cfg.replace(out=str(tmp_path / "whole")), cluster="threads", progress=False)
    same_records(tmp_path / "whole", tmp_path / "stopped", time_too=False)
    assert np.array_equal(whole.params, resumed.params)
    assert resumed.summary["final_test_loss"] == whole.summary["final_test_loss"]
    assert [(s["from_step"], s["to_step"]) for s in resumed.summary["segments"]] == [(0, end), (end, cfg.steps)]


@pytest.mark.parametrize("algorithm, extra", [("sync_sgd", {}), ("diloco", {"tau": 4})])
def test_a_stopped_simulated_run_resumes_bitwise_virtual_times_too(tmp_path, algorithm, extra, monkeypatch):
    cfg = RunConfig(algorithm=algorithm, cpus=4, steps=3000, batch_size=64, eval_every=150, checkpoint_every=200,
                    checkpoint_keep=100, simulate=True, jitter=0.2, **extra)
    _, _, resumed = _stopped_then_resumed(tmp_path, cfg, None, monkeypatch)
    whole = wb.run(cfg.replace(out=str(tmp_path / "whole")), progress=False)
    same_records(tmp_path / "whole", tmp_path / "stopped", time_too=True)
    assert np.array_equal(whole.params, resumed.params)
    assert resumed.summary["wall_time_s"] == whole.summary["wall_time_s"]      # virtual: the makespan


@pytest.mark.parametrize("algorithm", ["async_sgd", "async_easgd", "hogwild_sgd", "adpsgd"])
def test_a_stopped_asynchronous_run_takes_up_where_each_worker_stopped(tmp_path, algorithm, monkeypatch):
    """An asynchronous run's workers stop at steps of their own: the stop's checkpoint holds
    each at its own (what its rows say it ran), and the server's or the shared state as rank 0
    left it; resumed and stopped at once, the run returns exactly that; resumed to the end,
    every worker runs each of its steps once."""
    cfg = RunConfig(algorithm=algorithm, cpus=3, steps=1500, batch_size=48, eval_every=100, checkpoint_every=300,
                    checkpoint_keep=100)
    out = tmp_path / "stopped"
    stopped = wb.run(cfg.replace(out=str(out)), cluster="threads", progress=False,
                     should_stop=_stop_after_first_checkpoint(out, monkeypatch))
    assert stopped.status == "stopped"
    saved = ckpt.read(ckpt.listed(out)[-1])
    ran = pd.read_csv(out / "steps.csv").groupby("worker")["step"].max()
    assert [saved.rank_step(r) for r in range(3)] == [int(ran[r]) + 1 for r in range(3)]
    held = {"hogwild_sgd": lambda: saved.ranks[0]["shared.params"],
            "adpsgd": lambda: saved.server["rows"].mean(axis=0, dtype=np.float64).astype(np.float32)}.get(
        algorithm, lambda: saved.server["x"])()
    from workbench.execution.transports.threads import ThreadTransport
    transport = ThreadTransport()
    transport.control.request_stop("before the first step")    # every worker stops at its first step's top
    again = wb.resume(out, cluster=transport, progress=False)
    assert again.status == "stopped" and np.array_equal(again.params, held)
    done = wb.resume(out, cluster="threads", progress=False)
    assert done.status == "completed"
    rows = pd.read_csv(out / "steps.csv")
    assert sorted(rows.groupby("worker")["step"].nunique()) == [1500] * 3
    assert not rows.duplicated(["worker", "step"]).any()


def test_a_resumed_run_that_is_not_the_uninterrupted_ones_bits_says_so(tmp_path):
    """docs/checkpoints.md's table: a resumed asynchronous run on a real transport goes on
    from its state exactly but is not the run never stopped (its workers race). Before, its
    summary and the CLI's lines said nothing of it; the bitwise ones (the synchronous family,
    every simulated run) still say nothing."""
    from workbench.measure import notes
    for algorithm, simulate, differs in (("async_sgd", False, True), ("sync_sgd", False, False),
                                         ("async_sgd", True, False)):
        cfg = RunConfig(algorithm=algorithm, cpus=2, steps=60, batch_size=32, checkpoint_every=20, simulate=simulate,
                        checkpoint_keep=10)
        name = f"{algorithm}-{simulate}"
        wb.run(cfg.replace(out=str(tmp_path / name)), cluster=None if simulate else "threads", progress=False)
        killed_after(tmp_path / name, tmp_path / f"{name}-cut", 1)
        resumed = wb.resume(tmp_path / f"{name}-cut", cluster=None if simulate else "threads", progress=False)
        said = resumed.summary.get("resumed_note")
        assert (said is not None) == differs, (name, said)
        if differs:
            assert said.startswith("resumed: every worker and the shared state (the server, the centre, the shared "
                                   "buffer or AD-PSGD's table) went on from the checkpoint exactly, but async_sgd's")
            assert "not those of the run never stopped" in said and said in notes(resumed.summary)
            assert json.loads((tmp_path / f"{name}-cut" / "summary.json").read_text())["resumed_note"] == said


CGDP = [{"chunk_layers": 1}, {"chunk_layers": "auto", "weight_return": "chunks"},
        {"chunk_layers": 2, "momentum": 0.9, "optimizer": "adamw", "lr": 0.01}]


@pytest.mark.parametrize("extra", CGDP, ids=[_id(("cgdp", e)) for e in CGDP])
def test_cgdp_resumes_bitwise_from_its_masters_checkpoint(tmp_path, extra):
    """cgdp's master (weights, the rule's state, the chunk tuner) is in rank 0's part of the
    checkpoint and put back before a resumed run's first step: cut as a kill -9 leaves it,
    and stopped, the resumed run's records and parameters are the uninterrupted run's."""
    cfg = RunConfig(algorithm="cgdp", cpus=3, steps=96, batch_size=48, eval_every=10, checkpoint_every=16,
                    checkpoint_keep=100, **extra)
    whole = wb.run(cfg.replace(out=str(tmp_path / "whole")), cluster="threads", progress=False)
    assert whole.summary["checkpoints"]["written"] == 5
    saved = ckpt.read(ckpt.listed(tmp_path / "whole")[2])
    assert {"x", "tuner", "history"} <= set(saved.server) and saved.ranks[1]["chunking"] >= 1
    killed_after(tmp_path / "whole", tmp_path / "cut", 3)
    resumed = wb.resume(tmp_path / "cut", cluster="threads", progress=False)
    assert resumed.status == "completed" and resumed.summary["resumed_from"]["step"] == 48
    same_records(tmp_path / "whole", tmp_path / "cut", time_too=False)
    assert np.array_equal(whole.params, resumed.params)
    assert resumed.summary["chunk_layers_used"] == whole.summary["chunk_layers_used"]


def test_a_stopped_cgdp_run_resumes_bitwise(tmp_path, monkeypatch):
    cfg = RunConfig(algorithm="cgdp", cpus=2, steps=1500, batch_size=32, eval_every=100, checkpoint_every=300,
                    checkpoint_keep=100, weight_return="chunks")
    _, _, resumed = _stopped_then_resumed(tmp_path, cfg, "threads", monkeypatch)
    whole = wb.run(cfg.replace(out=str(tmp_path / "whole")), cluster="threads", progress=False)
    same_records(tmp_path / "whole", tmp_path / "stopped", time_too=False)
    assert np.array_equal(whole.params, resumed.params)


@pytest.mark.cluster
@pytest.mark.parametrize("comm, weight_return", [("shm", "chunks"), ("dask", "whole")])
def test_cgdp_on_dask_resumes_bitwise(tmp_path, client, comm, weight_return):
    """On Dask the master is a segment of shared memory every worker updates (each keeping
    its own chunk tuner: in every worker's part of the checkpoint), or an actor."""
    cfg = RunConfig(algorithm="cgdp", cpus=2, steps=64, batch_size=32, eval_every=10, checkpoint_every=16,
                    checkpoint_keep=100, comm=comm, weight_return=weight_return)
    whole = wb.run(cfg.replace(out=str(tmp_path / "whole")), cluster=client, progress=False)
    # steps of a millisecond: the loop ends before the client has fetched its states (they wait
    # on the workers until the run closes), and a worker keeps the last two
    assert whole.summary["checkpoints"]["written"] >= 2
    step = killed_after(tmp_path / "whole", tmp_path / "cut", 1)
    resumed = wb.resume(tmp_path / "cut", cluster=client, progress=False)
    assert resumed.status == "completed" and resumed.summary["resumed_from"]["step"] == step >= 16
    same_records(tmp_path / "whole", tmp_path / "cut", time_too=False)
    assert np.array_equal(whole.params, resumed.params)


@pytest.mark.parametrize("weight_return", ["whole", "chunks"])
def test_a_resumed_simulated_cgdp_run_is_bitwise_virtual_times_too(tmp_path, weight_return):
    """The master's virtual times (when it and each link are free, its tuner's clock) go on
    from the checkpoint's, as every worker's clock does."""
    cfg = RunConfig(algorithm="cgdp", cpus=2, gpus=2, steps=80, batch_size=64, eval_every=15, checkpoint_every=20,
                    checkpoint_keep=100, simulate=True, jitter=0.2, weight_return=weight_return)
    whole = wb.run(cfg.replace(out=str(tmp_path / "whole")), progress=False)
    killed_after(tmp_path / "whole", tmp_path / "cut", 2)
    resumed = wb.resume(tmp_path / "cut", progress=False)
    same_records(tmp_path / "whole", tmp_path / "cut", time_too=True)
    assert np.array_equal(whole.params, resumed.params)
    assert resumed.summary["wall_time_s"] == whole.summary["wall_time_s"]


def test_checkpoints_keep_the_newest_and_say_what_they_cost(tmp_path):
    r = wb.run(RunConfig(algorithm="sgd", steps=50, checkpoint_every=10, checkpoint_keep=2, out=str(tmp_path / "r")),
               progress=False)
    assert [p.name for p in ckpt.listed(tmp_path / "r")] == ["step-000000000030.npz", "step-000000000040.npz"]
    c = r.summary["checkpoints"]
    assert c["written"] == 4 and c["last_step"] == 40 and c["write_s"] > 0
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["checkpoints"]["every"] == 10


def test_a_failed_checkpoint_write_counts_it_and_every_later_one_as_missed(tmp_path, monkeypatch):
    """A checkpoint due and not written is counted, with why, in summary.json and the run's
    notes (the CLI's line). Before, a failed write left only `stopped` ("checkpoints stopped:
    ..."), which nothing printed, and said nothing of the checkpoints due after it."""
    from workbench.execution import saver
    from workbench.measure import notes
    whole = wb.run(RunConfig(algorithm="sgd", steps=50, checkpoint_every=10, out=str(tmp_path / "w")), progress=False)
    assert whole.summary["checkpoints"]["missed"] == 0 and "missed_why" not in whole.summary["checkpoints"]
    assert not any("checkpoint" in n for n in notes(whole.summary))
    real = saver.ckpt.write

    def full(directory, step, *args, **kw):
        if step == 20:
            raise OSError(28, "No space left on device")
        return real(directory, step, *args, **kw)
    monkeypatch.setattr(saver.ckpt, "write", full)
    r = wb.run(RunConfig(algorithm="sgd", steps=50, checkpoint_every=10, out=str(tmp_path / "r")), progress=False)
    c = json.loads((tmp_path / "r" / "summary.json").read_text())["checkpoints"]
    assert c["written"] == 1 and c["last_step"] == 10 and c["stopped"] == "checkpoints stopped: No space left on device"
    assert c["missed"] == 3 and c["missed_steps"] == [20, 30, 40]
    assert c["missed_why"] == {"its write failed: No space left on device": 1,
                               "checkpoints stopped: No space left on device": 2}
    assert "3 checkpoints due were not written (1 was): 1 because its write failed: No space left on device; 2 " \
           "because checkpoints stopped: No space left on device" in notes(r.summary)


def test_a_wall_clock_checkpoint_a_worker_learned_of_too_late_is_missed_and_one_not_yet_due_is_not(monkeypatch):
    """Wall-clock checkpoints are asked a little ahead of the furthest step seen; a worker
    that learns of one after passing its step sends no state, and the checkpoint is dropped
    for the next. Before, silently, on every transport; now it is `missed`, and why. The
    saver alone, its clock and the run's rows stood in for (`Saver.maybe_ask`'s rule)."""
    from types import SimpleNamespace

    from workbench.execution import saver
    clock = {"t": 0.0}
    monkeypatch.setattr(saver.time, "perf_counter", lambda: clock["t"])
    asked = []
    store = SimpleNamespace(last_step={})
    setup = SimpleNamespace(size=2, extra={"checkpoint": {"wall": 1.0}}, spec=SimpleNamespace(sync=True),
                            config=SimpleNamespace(checkpoint_every=1.0))
    s = saver.Saver(setup, SimpleNamespace(store=store), "unused", SimpleNamespace(request_checkpoint=asked.append),
                    t_called=0.0)

    def at(t, step):
        clock["t"], store.last_step = t, {0: step, 1: step}
        s.maybe_ask()
    s.maybe_ask()                               # the first call: its clock starts (no step seen yet)
    at(0.5, 11)                                 # the first steps seen: the rate is measured from here
    at(1.5, 21)                                 # 10 steps a second: asked 1 s of steps ahead
    assert asked == [32]
    s.add({"rank": 0, "step": 32, "time": 1.0, "clock": 1.0, "state": {}})   # rank 1 had passed it: sends none
    at(2.0, 40)
    assert s.missed == {} and len(asked) == 1   # (asked again only once the interval has passed)
    at(2.6, 50)
    assert len(asked) == 2 and asked[1] > 50 and s.missed == {32: saver.LATE}
    s.finish()                                  # the run ended at step 50: the second was never due
    out = s.summary()
    assert out["missed"] == 1 and out["missed_why"] == {saver.LATE: 1} and out["missed_steps"] == [32]
    store.last_step = {0: asked[1], 1: asked[1]}   # ... had every worker gone past it, none sending: missed too
    s.finish()
    assert s.missed == {32: saver.LATE, asked[1]: saver.LATE}


@pytest.mark.cluster
def test_a_checkpoint_dask_missed_is_counted_as_threads_would_have_written_it(tmp_path, client, monkeypatch):
    """On Dask a worker keeps its last two states for the client to fetch; one replaced before
    the client got to it (steps of a millisecond, a busy client) made that checkpoint silently
    absent: `written` 2 where the same run on threads wrote 3, and nothing said why. Now every
    transport says the same: written + missed = the checkpoints due (threads' written), and why."""
    from workbench.execution import saver
    from workbench.execution.transports.dask import DaskTransport
    cfg = RunConfig(algorithm="sync_sgd", cpus=2, steps=64, batch_size=32, eval_every=10, checkpoint_every=16,
                    checkpoint_keep=100)
    threads = wb.run(cfg.replace(out=str(tmp_path / "t")), cluster="threads", progress=False).summary["checkpoints"]
    assert threads["written"] == 3 and threads["missed"] == 0
    fetch = DaskTransport.fetch_state

    def replaced(self, rank, step):   # as `dask_worker.take_state` answers for a state replaced on its worker
        return None if (rank, step) == (1, 32) else fetch(self, rank, step)
    monkeypatch.setattr(DaskTransport, "fetch_state", replaced)
    r = wb.run(cfg.replace(out=str(tmp_path / "d")), cluster=client, progress=False)
    c = r.summary["checkpoints"]
    assert r.status == "completed" and c["written"] == 2 and c["missed"] == 1 and c["missed_steps"] == [32], c
    assert c["missed_why"] == {saver.REPLACED: 1}
    assert [p.name for p in ckpt.listed(tmp_path / "d")] == ["step-000000000016.npz", "step-000000000048.npz"]


def test_no_run_directory_no_checkpoints_and_none_when_asked(tmp_path):
    assert "checkpoints" not in wb.run(RunConfig(algorithm="sgd", steps=20, checkpoint_every=5), progress=False).summary
    r = wb.run(RunConfig(algorithm="sgd", steps=20, checkpoint_every="none", out=str(tmp_path / "r")), progress=False)
    assert not (tmp_path / "r" / "checkpoints").exists() and "checkpoints" not in r.summary


def _corrupt(path: Path, how: str) -> None:
    data = bytearray(path.read_bytes())
    if how == "truncated":
        path.write_bytes(bytes(data[:len(data) // 2]))
    elif how == "overwritten":             # another file's bytes where the checkpoint was
        path.write_bytes(b"#!/bin/sh\necho not a checkpoint\n" * 64)
    else:                                  # one byte flipped inside the parameters' array
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["truncated", "corrupted", "overwritten"])
def test_a_broken_checkpoint_is_refused_in_one_line_and_the_one_before_used(tmp_path, how):
    whole = tmp_path / "whole"
    wb.run(RunConfig(algorithm="sgd", steps=60, checkpoint_every=10, checkpoint_keep=100, out=str(whole)),
           progress=False)
    killed_after(whole, tmp_path / "cut", 3)                     # checkpoints 10, 20, 30 (the newest: 30)
    newest = ckpt.listed(tmp_path / "cut")[-1]
    _corrupt(newest, how)
    with pytest.raises(ckpt.CheckpointError) as info:
        ckpt.read(newest)
    assert "\n" not in str(info.value) and str(info.value).startswith("checkpoint: a whole checkpoint file (")
    assert "pickle" not in str(info.value)   # NumPy's advice for a pickle is no advice for a broken checkpoint
    proc = subprocess.run([sys.executable, "-m", "workbench", "run", "--resume", str(tmp_path / "cut")],
                          capture_output=True, text=True, env=ENV, timeout=300)
    assert proc.returncode == 0, proc.stderr
    warned = [ln for ln in proc.stderr.splitlines() if ln.startswith("warning: checkpoint:")]
    assert len(warned) == 1 and warned[0].endswith("; the one before it is used") and newest.name in warned[0]
    summary = json.loads((tmp_path / "cut" / "summary.json").read_text())
    assert summary["resumed_from"]["step"] == 20 and summary["status"] == "completed"
    same_records(whole, tmp_path / "cut", time_too=False)


def test_what_cannot_be_resumed_is_one_line(tmp_path):
    done = tmp_path / "done"
    wb.run(RunConfig(algorithm="sgd", steps=30, checkpoint_every=10, out=str(done)), progress=False)
    with pytest.raises(ConfigError, match="^resume: a run that did not complete"):
        wb.resume(done)
    (tmp_path / "empty").mkdir()
    for args, field in ((["--resume", str(tmp_path / "empty")], "resume"),
                        (["--resume", str(done), "--lr", "0.5"], "lr")):
        proc = subprocess.run([sys.executable, "-m", "workbench", "run", *args], capture_output=True, text=True,
                              env=ENV, timeout=120)
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"error: {field}: "), proc.stderr


def test_a_new_run_over_a_killed_runs_checkpoints_neither_mixes_with_them_nor_loses_them(tmp_path):
    """A killed run leaves checkpoints and no summary.json. Before, a new run of another
    config in its directory was let in without --overwrite, kept the old checkpoints (its
    own stop's was pruned as the oldest), and `resume` went on from the old run's: steps.csv
    held the new run's first rows, then the old run's from its checkpoint step on."""
    x = tmp_path / "x"
    wb.run(RunConfig(algorithm="sync_sgd", cpus=2, epochs=5, checkpoint_every=20, out=str(x)), cluster="threads",
           progress=False)
    (x / "summary.json").unlink()                                   # as a kill -9 after step 200 leaves it
    other = RunConfig(algorithm="local_sgd", tau=4, cpus=2, lr=0.3, epochs=50, checkpoint_every=100_000, out=str(x))
    with pytest.raises(ConfigError, match=r"^out: a directory that does not hold a run already \(it holds the "
                                          r"checkpoints of a run that was killed, the newest step-000000000200\.npz: "
                                          r"`run --resume .*` continues it; pass --overwrite"):
        wb.run(other, cluster="threads", progress=False, should_stop=lambda: True)
    assert [f.name for f in ckpt.listed(x)] == ["step-000000000180.npz", "step-000000000200.npz"]   # untouched
    new = wb.run(other, cluster="threads", progress=False, overwrite=True, should_stop=lambda: True)
    assert new.status == "stopped"
    stop_step = new.summary["steps"]
    assert [ckpt.read(f).step for f in ckpt.listed(x)] == [stop_step]                # its own, the old ones gone
    resumed = wb.resume(x, cluster="threads", progress=False)
    assert resumed.summary["resumed_from"]["step"] == stop_step
    rows = pd.read_csv(x / "steps.csv")
    assert set(rows["lr"]) == {0.3} and not rows.duplicated(["worker", "step"]).any()
    assert sorted(set(rows["step"])) == list(range(resumed.summary["steps"]))   # no step missing


def test_a_checkpoint_of_another_run_is_refused_before_any_worker_starts(tmp_path):
    """The newest checkpoint must be of the run the directory holds (the summary's run or a
    segment of it): one copied in from another run is refused in one line naming the two
    runs and how their configs differ, and nothing in the directory changes."""
    y, z = tmp_path / "y", tmp_path / "z"
    wb.run(RunConfig(algorithm="sync_sgd", cpus=2, epochs=2, checkpoint_every=20, out=str(y)), cluster="threads",
           progress=False, should_stop=lambda: True)
    wb.run(RunConfig(algorithm="sync_sgd", cpus=2, lr=0.2, epochs=5, checkpoint_every=20, out=str(z)),
           cluster="threads", progress=False)
    before = {p.name: p.read_bytes() for p in y.iterdir() if p.is_file()}
    shutil.copy(ckpt.listed(z)[-1], y / "checkpoints")
    told = json.loads((y / "summary.json").read_text())["run_id"]
    with pytest.raises(ConfigError, match=rf"^resume: a directory's own checkpoint \(the newest, "
                                          rf"step-000000000200\.npz, is of run \w+, not of run {told} whose summary\.json"
                                          rf" the directory holds; epochs: 5\.0 in the checkpoint, 2\.0 in summary\.json; "
                                          rf"lr: 0\.2 in the checkpoint, 0\.1 in summary\.json: it would continue"):
        wb.resume(y, cluster="threads", progress=False)
    assert {p.name: p.read_bytes() for p in y.iterdir() if p.is_file()} == before


def test_a_steps_csv_cut_short_since_the_checkpoint_is_said_not_resumed_over_in_silence(tmp_path):
    """The checkpoint keeps the step rows before it in steps.csv (its header says how many
    bytes were synced). Before, a steps.csv cut short since (or replaced by its header) was
    resumed in silence: the completed run's records had no rows before the checkpoint. Now a
    warning says which rows are missing; a whole one says nothing."""
    cfg = RunConfig(algorithm="sync_sgd", cpus=2, steps=60, batch_size=32, checkpoint_every=20, checkpoint_keep=10,
                    out=str(tmp_path / "whole"))
    wb.run(cfg, cluster="threads", progress=False)
    step = killed_after(tmp_path / "whole", tmp_path / "cut", 2)
    shutil.copytree(tmp_path / "cut", tmp_path / "intact")
    header = (tmp_path / "cut" / "steps.csv").read_text().splitlines()[0]
    (tmp_path / "cut" / "steps.csv").write_text(header + "\n")
    said = wb.resume(tmp_path / "cut", cluster="threads", progress=False).summary.get("warnings") or []
    assert any(w.startswith("checkpoint: a steps.csv holding the ") and f"rows before step {step} are missing" in w
               for w in said), said
    assert min(pd.read_csv(tmp_path / "cut" / "steps.csv")["step"]) == step          # (the hole it warns of)
    assert not wb.resume(tmp_path / "intact", cluster="threads", progress=False).summary.get("warnings")
    # the CLI says it before its cluster starts (before, after the run had ended)
    killed_after(tmp_path / "whole", tmp_path / "cli", 2)
    (tmp_path / "cli" / "steps.csv").write_text(header + "\n")
    proc = subprocess.run([sys.executable, "-m", "workbench", "run", "--resume", str(tmp_path / "cli"), "--no-progress"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV, timeout=300)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0, proc.stdout
    warned = [i for i, ln in enumerate(lines) if ln.startswith("warning: checkpoint: a steps.csv holding the ")]
    dashboard = [i for i, ln in enumerate(lines) if ln.startswith("dask dashboard:")]
    assert len(warned) == 1 and dashboard and warned[0] < dashboard[0], proc.stdout


def test_a_config_yaml_edited_to_change_the_resumed_run_is_refused_not_ignored(tmp_path):
    """`--resume` takes no other run flag; editing config.yaml is the same wish. Before, the
    run went on with the checkpoint's lr and wrote config.yaml again, the edit gone in
    silence. Now it is refused in one line naming the field and both values, before any
    worker starts; with config.yaml put back it resumes."""
    d = tmp_path / "r"
    wb.run(RunConfig(algorithm="sync_sgd", cpus=2, epochs=3, checkpoint_every=20, out=str(d)), cluster="threads",
           progress=False, should_stop=lambda: True)
    kept = (d / "config.yaml").read_text()
    (d / "config.yaml").write_text(kept.replace("lr: 0.1\n", "lr: 0.05\n"))
    with pytest.raises(ConfigError, match=r"^resume: a config\.yaml as the run wrote it \(it was edited since: lr: "
                                          r"0\.05 in config\.yaml, 0\.1 in the checkpoint; .* put config\.yaml back"):
        wb.resume(d, cluster="threads", progress=False)
    assert wb.load(d).summary["status"] == "stopped"                                   # nothing ran
    (d / "config.yaml").write_text(kept)
    assert wb.resume(d, cluster="threads", progress=False).status == "completed"


# ------------------------------------------------------------------------------ real kills, real signals
def _start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "workbench", "run", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV, start_new_session=True)


def _wait_for_checkpoints(out: Path, n: int, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while len(ckpt.listed(out)) < n:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no checkpoint written"
        time.sleep(0.05)


KILLED = {"sync_sgd-topk-ef": ["--algorithm", "sync_sgd", "--compression", "topk", "--compression-ratio", "0.1",
                               "--error-feedback"],
          "diloco": ["--algorithm", "diloco", "--tau", "4"]}


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.parametrize("name", list(KILLED))
def test_kill_9_of_the_cli_group_then_resume_is_bitwise(tmp_path, name):
    """Two local Dask workers; the CLI's whole process group (client, scheduler, workers)
    killed with SIGKILL after its second checkpoint; `run --resume` then gives the records
    of the same command run through."""
    args = [*KILLED[name], "--cpus", "2", "--steps", "1500", "--batch-size", "64", "--eval-every", "200",
            "--checkpoint-every", "150", "--no-progress"]
    proc = _start(*args, "--out", str(tmp_path / "killed"))
    _wait_for_checkpoints(tmp_path / "killed", 2, proc)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert not (tmp_path / "killed" / "summary.json").exists()
    resumed = subprocess.run([sys.executable, "-m", "workbench", "run", "--resume", str(tmp_path / "killed"),
                              "--no-progress"], capture_output=True, text=True, env=ENV, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    whole = subprocess.run([sys.executable, "-m", "workbench", "run", *args, "--out", str(tmp_path / "whole")],
                           capture_output=True, text=True, env=ENV, timeout=600)
    assert whole.returncode == 0, whole.stderr
    same_records(tmp_path / "whole", tmp_path / "killed", time_too=False)
    a, b = (json.loads((tmp_path / d / "summary.json").read_text()) for d in ("whole", "killed"))
    assert a["final_test_loss"] == b["final_test_loss"] and a["final_train_loss"] == b["final_train_loss"]
    assert b["resumed_from"]["step"] >= 300 and len(b["segments"]) == 2


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.parametrize("name", list(KILLED))
def test_a_run_stopped_by_sigterm_resumes_from_where_it_stopped(tmp_path, client, name):
    """SIGTERM stops the CLI's run on two local Dask workers: the step it is decided at
    completes, a checkpoint is written there and the run is saved as stopped; `run --resume`
    goes on from that step (none lost, none run twice) to the records and final losses of the
    same run made on the module's cluster, bitwise."""
    args = [*KILLED[name], "--cpus", "2", "--steps", "1500", "--batch-size", "64", "--eval-every", "200",
            "--checkpoint-every", "150", "--no-progress"]
    proc = _start(*args, "--out", str(tmp_path / "stopped"))
    _wait_for_checkpoints(tmp_path / "stopped", 1, proc)
    os.kill(proc.pid, signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    stopped = json.loads((tmp_path / "stopped" / "summary.json").read_text())
    assert stopped["status"] == "stopped"
    end = int(pd.read_csv(tmp_path / "stopped" / "steps.csv")["step"].max()) + 1
    assert end < 1500 and ckpt.read(ckpt.listed(tmp_path / "stopped")[-1]).step == end   # the stop's own
    # the terminal says how to go on (it did not: a checkpoint nobody was told of)
    assert f"resume: python -m workbench run --resume {tmp_path / 'stopped'} (its last checkpoint, after {end:,} steps)" in out
    resumed = subprocess.run([sys.executable, "-m", "workbench", "run", "--resume", str(tmp_path / "stopped"),
                              "--no-progress"], capture_output=True, text=True, env=ENV, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    cfg = RunConfig.from_dict(stopped["config"]).replace(out=str(tmp_path / "whole"))
    wb.run(cfg, cluster=client, progress=False)
    same_records(tmp_path / "whole", tmp_path / "stopped", time_too=False)
    a, b = (json.loads((tmp_path / d / "summary.json").read_text()) for d in ("whole", "stopped"))
    assert a["final_test_loss"] == b["final_test_loss"] and a["final_train_loss"] == b["final_train_loss"]
    assert b["resumed_from"]["step"] == end and [s["from_step"] for s in b["segments"]] == [0, end]


@pytest.mark.slow
@pytest.mark.cluster
def test_a_killed_overwrite_leaves_the_old_run_and_resumes_into_its_place(tmp_path):
    """`--overwrite` over a committed run, killed -9 mid-run: the old run is still there;
    `run --resume` on the directory finds the new run's staging folder, finishes it and puts
    it in the old one's place."""
    out = tmp_path / "run"
    first = subprocess.run([sys.executable, "-m", "workbench", "run", "--algorithm", "sgd", "--steps", "20",
                            "--out", str(out)], capture_output=True, text=True, env=ENV, timeout=120)
    assert first.returncode == 0, first.stderr
    old = json.loads((out / "summary.json").read_text())["run_id"]
    proc = _start("--algorithm", "sgd", "--steps", "200000", "--checkpoint-every", "500", "--overwrite",
                  "--no-progress", "--out", str(out))
    deadline = time.monotonic() + 120
    while not any(ckpt.listed(p) for p in tmp_path.glob(".run.overwrite-*")):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert json.loads((out / "summary.json").read_text())["run_id"] == old      # untouched
    assert wb.load(out).summary["steps"] == 20
    resumed = wb.resume(out, progress=False, should_stop=lambda: True)           # continued, then stopped at once
    assert resumed.summary["run_id"] != old and resumed.summary["config"]["out"] == str(out)
    assert json.loads((out / "summary.json").read_text())["run_id"] == resumed.summary["run_id"]
    assert not list(tmp_path.glob(".run.*"))


def test_the_dashboards_resume_button_continues_a_stopped_run(tmp_path):
    """Stop a run in the dashboard, press Resume: the run goes on from its last checkpoint
    to the end of its plan, in the same directory, drawn as a run of its own."""
    pytest.importorskip("ipywidgets")
    from workbench.ui.dashboard import Dashboard
    cfg = RunConfig(algorithm="sync_sgd", cpus=2, steps=30_000, batch_size=32, checkpoint_every=100)
    dash = Dashboard(cluster="threads", config=cfg, out=tmp_path)
    assert dash.resume_button.disabled and not dash.resume()            # nothing to resume yet
    assert dash.run()
    deadline = time.monotonic() + 120
    while not any(ckpt.listed(p) for p in tmp_path.glob("run-*")):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    dash.stop()
    stopped = dash.wait(300)   # a hang guard: the final redraws and report.html take seconds on a busy machine
    assert stopped.status == "stopped" and not dash.resume_button.disabled
    saved = ckpt.read(ckpt.listed(stopped.summary["config"]["out"])[-1]).step
    dash.config = dash.config.replace(steps=saved + 300)    # the controls do not matter: Resume takes the run's own
    plan = 30_000
    assert dash.resume()
    time.sleep(1.0)
    dash.stop()
    resumed = dash.wait(300)
    assert resumed.summary["resumed_from"]["step"] == saved and resumed.summary["config"]["steps"] == plan
    assert resumed.summary["config"]["out"] == stopped.summary["config"]["out"]
    assert dash.labels[-1].endswith("(resumed)") and len(dash.history) == 2


def test_the_checkpoint_bench_reports_the_cost_and_its_share():
    """`bench --checkpoints`' table (on threads, tiny): the cost of a checkpoint is at least
    the client's write of it, and the share at the default interval is that over 60 s."""
    import argparse

    from workbench.bench.checkpoints import measure
    args = argparse.Namespace(sizes="teaching", seconds=0.5, rounds=1, every=20, cpus=2, tau=1, n_features=None,
                              hidden=None, batch_per_worker=None)
    (row,) = measure(args, "threads")
    assert row["every"] == 20 and row["default"] == "60s" and row["rounds"] == 1
    assert row["cost_per_checkpoint_ms"] >= row["client_write_ms"] > 0 and row["checkpoint_mb"] > 0
    assert row["share_at_default"] == pytest.approx(row["cost_per_checkpoint_ms"] / 1e3 / 60)


def _count_requests(on: bool) -> int:
    """On a worker: count the loops' polls of the checkpoint variable (on), or stop and say
    how many there were (off)."""
    import workbench.comm.dask as comm_dask
    cls = comm_dask.EventControl
    if on:
        cls._real_requests, cls._polls = cls.requests, 0

        def counted(self):
            cls._polls += 1
            return cls._real_requests(self)
        cls.requests = counted
        return 0
    cls.requests = cls._real_requests
    return cls._polls


@pytest.mark.cluster
def test_a_wall_clock_checkpoint_on_one_host_reaches_the_loops_through_shared_memory(client, tmp_path):
    """A Dask run on the client's host with a checkpoint every second: the client writes each
    request into the run's segment, where the loops read it at every step, and they never
    ask the scheduler for it (the Dask variable behind it is polled only by loops on other
    hosts): the checkpoints are taken all the same, inside the run."""
    out = tmp_path / "run"
    cfg = RunConfig(algorithm="sync_sgd", dataset="digits", model="softmax", cpus=2, batch_size=32, seed=1,
                    eval_every=10**6, steps=40_000, checkpoint_every="1s", out=str(out))
    client.run(_count_requests, True)
    try:
        result = wb.run(cfg, cluster=client, progress=False)
    finally:
        polls = client.run(_count_requests, False)
    assert result.status == "completed"
    steps = [ckpt.read(p).step for p in ckpt.listed(out)]
    assert steps and all(0 < s < 40_000 for s in steps)
    assert sum(polls.values()) == 0


def test_a_resumed_summary_keeps_how_each_segment_ended_and_its_events(tmp_path):
    """A failed run resumed, stopped, resumed again: each segment says how it ended (the
    failure naming the lost worker, the steps run again), and the events of every segment
    are kept, marked with it (the resumed summary had no events, no lost worker, and every
    earlier segment "resumed from its checkpoint")."""
    from workbench.execution.transports.threads import ThreadTransport
    out = tmp_path / "run"
    cfg = RunConfig(algorithm="sync_sgd", cpus=2, steps=900, batch_size=32, eval_every=100, checkpoint_every=200,
                    checkpoint_keep=100, out=str(out))
    failed = wb.run(cfg, cluster=ThreadTransport(fail={1: 250}), progress=False)
    assert failed.status == "failed" and set(failed.summary["lost_workers"]) == {"1"}
    ran = failed.summary["steps"]
    assert 200 < ran <= 251
    stopped = wb.resume(out, cluster="threads", progress=False, should_stop=lambda: ckpt.read(ckpt.listed(out)[-1]).step > 200)
    assert stopped.status == "stopped"
    end = stopped.summary["steps"]
    resumed = wb.resume(out, cluster="threads", progress=False)
    assert resumed.status == "completed"
    segs = resumed.summary["segments"]
    assert [(s["from_step"], s["to_step"], s["status"]) for s in segs] == [(0, 200, "failed"), (200, end, "stopped"),
                                                                            (end, 900, "completed")]
    assert segs[0]["ended"] == (f"failed: worker 1 lost after {ran:,} steps; resumed from its checkpoint at step 200 "
                                f"({ran - 200} steps run again)")
    assert segs[0]["lost_workers"] == failed.summary["lost_workers"] and segs[2]["lost_workers"] == {}
    assert segs[1]["ended"].startswith(f"stopped: stop requested by the user after {end:,} steps; resumed from its "
                                       f"checkpoint at step {end:,}")
    events = [(e["event"], e["segment"]) for e in resumed.summary["events"]]
    assert ("worker_lost", 0) in events and ("incomplete", 0) in events
    assert ("stop_requested", 1) in events and ("stopped", 1) in events
    assert all(k == 2 for name, k in events if name not in ("worker_lost", "aborted", "incomplete", "stop_requested",
                                                            "stopped"))
    # the time identity still holds: the segments' wall times add up to the run's
    assert resumed.summary["wall_time_s"] == pytest.approx(sum(s["wall_time_s"] for s in segs))


def test_a_killed_segment_says_it_was_killed(tmp_path):
    cfg = RunConfig(algorithm="sync_sgd", cpus=2, steps=600, batch_size=32, eval_every=100, checkpoint_every=200,
                    checkpoint_keep=100, out=str(tmp_path / "whole"))
    wb.run(cfg, cluster="threads", progress=False)
    assert killed_after(tmp_path / "whole", tmp_path / "cut", 1) == 200
    resumed = wb.resume(tmp_path / "cut", cluster="threads", progress=False)
    seg = resumed.summary["segments"][0]
    assert seg["status"] == "killed" and seg["ended"] == ("killed (it left no summary); resumed from its checkpoint "
                                                          "at step 200")


def test_the_clis_resume_counts_its_start_up_as_a_new_run_does(tmp_path, monkeypatch):
    """The CLI starts its cluster before the run, for a new run and a resumed one alike: the
    cluster's start (here a transport that takes 2 s to make) is in neither's start-up (a
    resumed ltfb read 21.8 s of start-up where the run it continued read 4.8)."""
    from workbench.apps.cli import main
    from workbench.execution import engine
    made = engine.transport_for

    def slow(config, cluster=None):
        if cluster is None:
            time.sleep(2.0)       # a local cluster's start
        return made(config, cluster)
    monkeypatch.setattr(engine, "transport_for", slow)
    args = ["--algorithm", "sgd", "--dataset", "digits", "--steps", "600", "--batch-size", "32",
            "--checkpoint-every", "200", "--no-progress"]
    assert main(["run", *args, "--out", str(tmp_path / "new")]) == 0
    new = json.loads((tmp_path / "new" / "summary.json").read_text())
    assert new["startup_s"] < 1.5
    out = tmp_path / "stopped"
    cfg = RunConfig(algorithm="sgd", dataset="digits", steps=600, batch_size=32, checkpoint_every=200, out=str(out))
    assert wb.run(cfg, progress=False, should_stop=_stop_after_first_checkpoint(out, monkeypatch)).status == "stopped"
    assert main(["run", "--resume", str(out), "--no-progress"]) == 0
    resumed = json.loads((out / "summary.json").read_text())
    assert resumed["status"] == "completed" and resumed["segments"][-1]["startup_s"] < 1.5
    assert resumed["startup_s"] == pytest.approx(sum(s["startup_s"] for s in resumed["segments"]))
