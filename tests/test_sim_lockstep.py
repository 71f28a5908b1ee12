"""The simulator's lockstep paths (sync_sgd's replicas, hogwild_sgd's workers, stepped
together in one loop) are bitwise the per-worker path: the oracle is `SimTransport(lockstep=False)`, one greenlet per
virtual worker with the compute pool, itself bitwise the call-by-call run
(tests/test_sim_determinism.py)."""
from __future__ import annotations

import pytest

from workbench.algorithms.base import WorkerContext
from workbench.config import RunConfig
from workbench.execution.engine import execute
from workbench.sim.transport import SimTransport

SMALL = dict(algorithm="sync_sgd", dataset="digits", model="mlp", hidden=[16], batch_size=32, steps=12, eval_every=5,
             seed=3, lr=0.05, simulate=True)


def _both(config: RunConfig):
    fast, oracle = SimTransport(), SimTransport(lockstep=False)
    a, b = execute(config, fast), execute(config, oracle)
    assert fast.path == "lockstep" and oracle.path == "per worker"
    assert a.summary["sim_path"] == "lockstep"
    return a, b


def _same(a, b) -> None:
    assert a.summary["status"] == b.summary["status"]
    assert a.steps.equals(b.steps), "steps differ"
    assert a.steps.to_csv() == b.steps.to_csv(), "steps differ (bits: -0.0, formatting)"
    assert a.evals.equals(b.evals), "evals differ"
    assert (a.params is None) == (b.params is None)
    if a.params is not None:
        assert a.params.tobytes() == b.params.tobytes(), "parameters differ"
    assert a.summary["wall_time_s"] == b.summary["wall_time_s"]        # the virtual makespan


def _events(result) -> list[tuple]:
    return sorted((e["time"], e["event"], str(e["worker"]), e["message"]) for e in result.events)


@pytest.mark.parametrize("extra", [
    dict(cpus=4),
    dict(cpus=1),
    dict(gpus=2, cpus=2, jitter=0.3),
    dict(cpus=8, momentum=0.9, nesterov=True, weight_decay=1e-4, jitter=0.2),
    dict(cpus=4, optimizer="adamw", lr=0.01),
    dict(cpus=5, batch_size=33),                 # slices 7, 7, 7, 6, 6
    dict(cpus=3, batch_size=10, jitter=0.2),     # 4, 3, 3: a slice size of one worker alone
    dict(cpus=64, batch_size=128, jitter=0.1),   # the bench's width
    dict(cpus=4, momentum=0.9, grad_clip=0.45),  # the norm of the summed gradient, clipped at some steps
    dict(cpus=4, accumulate=3),                  # slices of 8 in micro-batches of 3, 3, 2
    dict(cpus=5, batch_size=33, accumulate=2, jitter=0.2),   # 7 -> 4 + 3, 6 -> 3 + 3
], ids=["4cpu", "1cpu", "mixed-jitter", "momentum-jitter", "adamw", "uneven", "uneven-one", "64cpu", "clip",
        "accumulate", "accumulate-uneven"])
def test_lockstep_is_bitwise_the_per_worker_run(extra):
    a, b = _both(RunConfig(**{**SMALL, **extra}))
    assert a.summary["status"] == "completed"
    assert len(a.steps) == 12 * (extra.get("cpus", 0) + extra.get("gpus", 0))
    assert len(a.evals) == 3
    _same(a, b)
    assert _events(a) == _events(b)
    assert a.summary.get("grad_clip") == b.summary.get("grad_clip")
    if "grad_clip" in extra:                      # it clipped some updates, not all: both branches ran
        assert 0 < a.summary["grad_clip"]["clipped"] < a.summary["grad_clip"]["updates"] == 12


def test_a_diverging_run_diverges_at_the_same_step_with_the_same_event():
    a, b = _both(RunConfig(**{**SMALL, "cpus": 4, "lr": 1e4, "steps": 30}))
    assert a.summary["status"] == "diverged"
    _same(a, b)
    # NumPy's errors on the way there, from any worker's maths: the same first step on both paths
    assert a.summary["numerics"] == b.summary["numerics"] and "overflow" in a.summary["numerics"]
    assert _events(a) == _events(b) and any(e[1] == "diverged" for e in _events(a))


def test_a_stop_request_stops_both_at_the_same_step(monkeypatch):
    # Event-driven: rank 0 asks whether to stop once a step, in both paths; the 5th asking says yes.
    asked: list[int] = []

    def stop_requested(self) -> bool:
        if self.rank != 0:
            return False
        asked.append(1)
        return len(asked) % 100 == 5     # per run: the counter is reset below
    monkeypatch.setattr(WorkerContext, "stop_requested", stop_requested)
    config = RunConfig(**{**SMALL, "cpus": 4, "steps": 40})
    fast = SimTransport()
    a = execute(config, fast)
    asked.clear()
    b = execute(config, SimTransport(lockstep=False))
    assert fast.path == "lockstep"
    assert a.summary["status"] == "stopped" and len(a.steps) == 5 * 4     # the stop completes the step it is decided at
    _same(a, b)
    assert _events(a) == _events(b)


@pytest.mark.parametrize("extra, why", [
    (dict(cpus=4, split="speed"), "speed-based shares"),
    (dict(cpus=4, compression="topk"), "compression keeps per-worker state"),
    (dict(cpus=4, fail_worker="2@0.002"), "fault injection"),
    (dict(cpus=4, algorithm="sync_easgd"), "sync_easgd: its declaration names no fast path"),
    (dict(cpus=4, algorithm="hogwild_easgd"), "hogwild_easgd: its declaration names no fast path"),
    (dict(cpus=4, algorithm="easgd", optimizer="lars"), "lars / lamb: layer norms computed per worker"),
    (dict(cpus=4, algorithm="easgd", grad_clip=0.5), "grad_clip: each worker's gradient norm computed on its own"),
    (dict(cpus=4, algorithm="hogwild_sgd", jitter=0.1), "jitter: the workers' steps drift apart"),
    (dict(cpus=3, algorithm="hogwild_sgd", batch_size=32), "slices of unequal size"),
    (dict(cpus=2, gpus=2, algorithm="hogwild_sgd"), "workers of different speeds"),
])
def test_what_lockstep_does_not_cover_runs_per_worker(extra, why):
    from workbench.sim.lockstep import lockstep_refusal
    tr = SimTransport()
    execute(RunConfig(**{**SMALL, **extra}), tr)
    assert tr.path == "per worker"
    assert lockstep_refusal(tr.setup, tr.costs) == why


# ------------------------------------------------------------------------------ hogwild_sgd
HOG = {**SMALL, "algorithm": "hogwild_sgd"}


@pytest.mark.parametrize("extra", [
    dict(cpus=4),
    dict(cpus=1),
    dict(cpus=3, batch_size=33),                 # 11 rows each
    dict(gpus=4, device="v100"),                 # one speed, not the CPU's
    dict(cpus=64, batch_size=128),               # the bench's width
    dict(cpus=3, batch_size=33, accumulate=4),   # 11 rows in micro-batches of 3, 3, 3, 2
], ids=["4cpu", "1cpu", "3cpu", "4gpu", "64cpu", "accumulate"])
def test_hogwild_lockstep_is_bitwise_the_per_worker_run(extra):
    a, b = _both(RunConfig(**{**HOG, **extra}))
    assert a.summary["status"] == "completed"
    assert len(a.steps) == 12 * (extra.get("cpus", 0) + extra.get("gpus", 0))
    assert len(a.evals) == 3
    _same(a, b)
    assert _events(a) == _events(b)


def test_hogwild_lockstep_replays_the_order_of_writes():
    # What the replay rests on, seen in the per-worker run: step s's writers go in step s-1's
    # order with its last moved to the front (P-1, 0, 1, ..., P-2 at step 0).
    from workbench.algorithms import hogwild
    order: list[tuple[int, int]] = []
    step = hogwild.HogwildSGD.step

    def logged(self, s):
        out = step(self, s)
        order.append((s, self.ctx.rank))
        return out
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(hogwild.HogwildSGD, "step", logged)
        execute(RunConfig(**{**HOG, "cpus": 4, "steps": 4}), SimTransport(lockstep=False))
    assert [r for _, r in order] == [3, 0, 1, 2, 2, 3, 0, 1, 1, 2, 3, 0, 0, 1, 2, 3]


def test_a_diverging_hogwild_run_ends_the_same_in_both():
    # the diverging worker stops; those after it at that instant write and stop at their next
    # step (here the first writer of an instant diverged: all end at that step)
    a, b = _both(RunConfig(**{**HOG, "cpus": 4, "lr": 1e4, "steps": 30}))
    assert a.summary["status"] == "diverged"
    _same(a, b)
    assert _events(a) == _events(b) and any(e[1] == "diverged" for e in _events(a))


@pytest.mark.parametrize("nth", [1, 7, 10])
def test_a_stop_request_stops_hogwild_at_the_same_steps(monkeypatch, nth):
    # Event-driven: every worker asks at the top of each step; from the nth asking on, yes.
    a = _stopped_at_the_nth_asking(monkeypatch, RunConfig(**{**HOG, "cpus": 4, "steps": 40}), nth)
    if nth in (7, 10):   # some workers had started a step when the others stopped: they finish it alone
        assert a.steps.groupby("worker")["step"].max().nunique() > 1


def _stopped_at_the_nth_asking(monkeypatch, config: RunConfig, nth: int):
    """`config` run in lockstep and per worker, every worker asking at the top of each step
    whether to stop, and from the nth asking on told yes: both ask in the same order and
    end the same, after nth - 1 steps in all. Returns the lockstep run."""
    asked: list[int] = []

    def stop_requested(self) -> bool:
        asked.append(self.rank)
        return len(asked) >= nth
    monkeypatch.setattr(WorkerContext, "stop_requested", stop_requested)
    fast = SimTransport()
    a = execute(config, fast)
    first, asked[:] = list(asked), []
    b = execute(config, SimTransport(lockstep=False))
    assert fast.path == "lockstep" and first == asked
    assert a.summary["status"] == "stopped" and len(a.steps) == nth - 1
    _same(a, b)
    assert _events(a) == _events(b)
    return a


# ------------------------------------------------------------------------------ the server algorithms
ELASTIC = {**SMALL, "algorithm": "easgd", "tau": 2}


@pytest.mark.parametrize("extra", [
    dict(cpus=4),
    dict(cpus=1),
    dict(cpus=4, tau=1),
    dict(cpus=3, tau=5, steps=13, eval_every=3),        # the last steps end without an exchange
    dict(gpus=2, cpus=2, jitter=0.3),                   # two speeds, jitter: the turns wait
    dict(cpus=5, batch_size=33, jitter=0.2),            # slices 7, 7, 7, 6, 6
    dict(cpus=4, weight_decay=1e-3, warmup="gradual", warmup_epochs=1, eval_every=2),
    dict(cpus=8, optimizer="adamw", lr=0.01, weight_decay=1e-3),
    dict(cpus=64, batch_size=128, jitter=0.1),          # the bench's width
    dict(cpus=4, algorithm="async_easgd"),
    dict(cpus=5, algorithm="async_easgd", batch_size=33, jitter=0.2),
    dict(cpus=2, gpus=2, algorithm="async_easgd", device="v100", tau=3),
    dict(cpus=4, algorithm="async_measgd", momentum=0.9),
    dict(cpus=5, algorithm="async_measgd", batch_size=33, jitter=0.2, weight_decay=1e-3, warmup="gradual",
         warmup_epochs=1),
    dict(cpus=4, algorithm="async_sgd"),
    dict(cpus=1, algorithm="async_sgd"),
    dict(cpus=4, algorithm="async_msgd", momentum=0.9, nesterov=True),
    dict(gpus=2, cpus=2, algorithm="async_sgd", jitter=0.3),
    dict(cpus=5, algorithm="async_sgd", batch_size=33, jitter=0.2),
    dict(cpus=4, algorithm="async_sgd", optimizer="lamb", lr=0.01),          # the server's rule: any
    dict(cpus=4, algorithm="async_sgd", optimizer="adamw", lr=0.01, weight_decay=1e-3, warmup="gradual",
         warmup_epochs=1),
    dict(cpus=64, algorithm="async_sgd", batch_size=128, jitter=0.1),
    dict(cpus=4, algorithm="async_sgd", grad_clip=0.3, jitter=0.2),       # each push clipped on the server
    dict(cpus=3, algorithm="async_msgd", momentum=0.9, grad_clip=0.3, optimizer="lamb", lr=0.01),
    dict(cpus=4, accumulate=3, jitter=0.2),                                 # micro-batches: 3, 3, 2
    dict(cpus=5, algorithm="async_sgd", batch_size=33, accumulate=2, jitter=0.2),
], ids=["4cpu", "1cpu", "tau1", "tail", "mixed-jitter", "uneven", "wd-warmup", "adamw", "64cpu", "fcfs",
        "fcfs-uneven", "fcfs-mixed", "measgd", "measgd-uneven-wd-warmup", "ps-4cpu", "ps-1cpu", "ps-momentum", "ps-mixed-jitter", "ps-uneven", "ps-lamb",
        "ps-adamw-warmup", "ps-64cpu", "ps-clip", "ps-momentum-lamb-clip", "accumulate", "ps-accumulate-uneven"])
def test_server_lockstep_is_bitwise_the_per_worker_run(extra):
    config = RunConfig(**{**ELASTIC, **extra})
    a, b = _both(config)
    assert a.summary["status"] == "completed"
    assert a.summary.get("grad_clip") == b.summary.get("grad_clip")
    assert len(a.steps) == config.steps * (extra.get("cpus", 0) + extra.get("gpus", 0))
    assert len(a.evals) == len(b.evals) >= 2
    _same(a, b)
    assert _events(a) == _events(b)


@pytest.mark.parametrize("algorithm", ["easgd", "async_sgd"])
def test_server_lockstep_stacks_every_worker(algorithm):
    # the point of it: 64 workers' computes in passes of (nearly) all 64, where the per-worker
    # path's pool batches only the computes whose virtual times overlap (the bench's epoch: the
    # server's queue staggers the workers by its service times)
    from workbench.bench.simulated import epoch_config
    config = epoch_config(algorithm, 64, 32, steps=12)
    fast, oracle = SimTransport(), SimTransport(lockstep=False)
    a, b = execute(config, fast), execute(config, oracle)
    _same(a, b)
    assert fast.computes_per_pass() >= 48 > 4 * oracle.computes_per_pass()


@pytest.mark.parametrize("algorithm, chunk", [("easgd", 512), ("easgd", 7), ("async_easgd", 7), ("async_sgd", 7)])
def test_a_diverging_server_run_ends_the_same_in_both(monkeypatch, algorithm, chunk):
    # The replay assumes finite losses; the chunk where one is not is replayed from the start
    # with the maths at each event. chunk=7: records already sent before the divergence
    from workbench.sim import server as sim_server
    monkeypatch.setattr(sim_server, "CHUNK_ROWS", chunk)
    a, b = _both(RunConfig(**{**ELASTIC, "algorithm": algorithm, "cpus": 4, "lr": 300.0, "steps": 60,
                              "eval_every": 4}))
    assert a.summary["status"] == "diverged" and len(a.steps) > 40     # well past the first chunks
    _same(a, b)
    assert _events(a) == _events(b) and any(e[1] == "diverged" for e in _events(a))
    assert sorted(a.steps.groupby("worker")["step"].count()) == sorted(b.steps.groupby("worker")["step"].count())


@pytest.mark.parametrize("algorithm", ["easgd", "async_sgd"])
@pytest.mark.parametrize("nth", [1, 6, 11])
def test_a_stop_request_stops_a_server_run_at_the_same_steps(monkeypatch, nth, algorithm):
    _stopped_at_the_nth_asking(monkeypatch, RunConfig(**{**ELASTIC, "algorithm": algorithm, "cpus": 4, "steps": 40}),
                               nth)


def test_a_diverging_run_whose_first_pulls_queue_replays_the_same():
    # 8 fast GPU workers: their first pulls queue at the server while the first computes start, so
    # in the replay with the maths at each event a pull is read (and its copy handed over) before
    # the next is logged: every read needs its own id (found at 1024 workers by a sweep)
    a, b = _both(RunConfig(**{**SMALL, "algorithm": "async_sgd", "gpus": 8, "device": "v100", "lr": 300.0,
                              "steps": 60}))
    assert a.summary["status"] == "diverged"
    _same(a, b)
    assert _events(a) == _events(b)


def test_server_lockstep_over_random_configurations(monkeypatch):
    # A differential test: 24 configurations drawn at random (seeded) from what the server
    # lockstep covers, each bitwise the per-worker run. Found two bugs that the hand-picked
    # cases above missed: read ids reused, and a replay of a divergence with jitter drawing the
    # compute times on from where the first pass left the generators.
    import random

    from workbench.sim import server as sim_server
    rng = random.Random(20261204)
    checked = {"diverged": 0, "completed": 0}
    for _ in range(24):
        monkeypatch.setattr(sim_server, "CHUNK_ROWS", rng.choice([1, 7, 64, 512]))
        algorithm = rng.choice(["easgd", "async_easgd", "async_measgd", "async_sgd", "async_msgd"])
        size = rng.choice([1, 2, 3, 5, 8, 13, 32])
        gpus = rng.choice([0, 0, size // 2, size])
        extra = dict(algorithm=algorithm, cpus=size - gpus, gpus=gpus, batch_size=rng.choice([size, 2 * size + 1, 64 + size]),
                     steps=rng.choice([5, 13, 30]), eval_every=rng.choice([1, 3, 7, 100]),
                     lr=rng.choice([0.05, 0.5, 30.0, 300.0]), jitter=rng.choice([0.0, 0.0, 0.2]), tau=rng.choice([1, 2, 3, 4]),
                     weight_decay=rng.choice([0.0, 1e-3]), momentum=0.9 if algorithm in ("async_msgd", "async_measgd") else 0.0)
        if gpus:
            extra["device"] = rng.choice(["v100", "k80"])
        if algorithm in ("async_sgd", "async_msgd") and rng.random() < 0.3:
            extra.update(optimizer=rng.choice(["adamw", "lamb", "lars"]), lr=min(extra["lr"], 0.05))
        if rng.random() < 0.3:
            extra.update(warmup="gradual", warmup_epochs=1)
        a, b = _both(RunConfig(**{**SMALL, **extra}))
        _same(a, b)
        assert _events(a) == _events(b)
        checked[a.summary["status"]] += 1
    assert min(checked.values()) >= 2        # both kinds of run were drawn


@pytest.mark.parametrize("algorithm, nth", [("easgd", 53), ("easgd", 59), ("async_sgd", 50), ("async_sgd", 56)])
def test_a_stop_and_a_divergence_in_one_chunk_replay_as_they_happened(monkeypatch, algorithm, nth):
    # A stop pressed while the run diverges (a user who sees the loss explode): the pass that
    # assumed finite losses saw the stop; its replay from the start, with the maths at each
    # event, must give the same answers where that pass asked, not the control's final word
    # (which says "stop" from step 0). The harness is a control: sticky, and it hears the
    # divergence's own stop request.
    from workbench.sim import server as sim_server
    monkeypatch.setattr(sim_server, "CHUNK_ROWS", 1)
    asked: list[int] = []

    def stop_requested(self) -> bool:
        asked.append(self.rank)
        return (self.control is not None and self.control.stop_requested()) or len(asked) >= nth
    monkeypatch.setattr(WorkerContext, "stop_requested", stop_requested)
    replays: list[bool] = []
    init = sim_server._Replay.__init__

    def counted(self, *args, **kwargs) -> None:
        replays.append(args[3])                  # eager: the replay with the maths at each event
        init(self, *args, **kwargs)
    monkeypatch.setattr(sim_server._Replay, "__init__", counted)
    config = RunConfig(**{**ELASTIC, "algorithm": algorithm, "cpus": 4, "lr": 300.0, "steps": 60})
    a = execute(config, SimTransport())
    asked.clear()
    b = execute(config, SimTransport(lockstep=False))
    assert replays == [False, True] and a.summary["status"] == "diverged"
    _same(a, b)
    assert _events(a) == _events(b)
