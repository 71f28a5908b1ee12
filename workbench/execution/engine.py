"""The engine: one run path for every transport.

`run(config, cluster=None, on_record=None)` picks a transport (`cluster="threads"`: the
workers are threads of this process; otherwise a Dask cluster, by default the session's
local one) and hands it to `execute`, which:
1. asks the transport for the workers and checks that the run fits them, before anything
   starts; builds the run's typed set-up (`transports.RunSetup`): data, model, plan,
   initial parameters, rank groups, the algorithm's own set-up;
2. has the transport provide what the algorithm declared it needs (a collective, a server
   role, shared arrays: `AlgorithmSpec.needs`) and start one long-lived loop per worker
   (`worker_main`: the worker's links -> its `WorkerContext` -> `run_loop`);
3. watches the loops with one monitor: live records go to `on_record`, stop requests are
   passed on, a lost worker aborts a synchronous run and is released by an asynchronous
   one; one rule (`decide_status`) ends every run as completed / stopped / diverged /
   failed, keeping everything gathered so far.

The threads transport runs this same path, so unit tests exercise the real rules.
"""
from __future__ import annotations

import contextlib
import pickle
import queue
import signal
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..algorithms import REGISTRY, WorkerContext, run_loop
from ..algorithms.base import checkpoints_offered, float_errors
from ..comm.barrier import START_TIMEOUT_S
from ..comm.base import WorkerLost
from ..config import ConfigError, RunConfig
from ..data.files import is_data_path
from ..measure import duration_text
from ..problem import Problem
from ..results.collect import Collector
from ..results.records import OnRecord, event_record, live_width
from ..results.result import RunResult, build_result
from ..util import machine
from ..util.blas import current_blas_threads
from ..util.machine import LoopUsage
from .context import build_context
from .saver import Saver
from .transports.base import RunSetup, Transport, WorkerLinks, choose_workers, group_of
from .transports.dask import choose_comm

MONITOR_S = 0.05          # client loop period: drain records, pass stop requests on
DONE_TIMEOUT_S = 5.0      # after the loops return, wait this long for their last records
STOP_GRACE_S = 2.0        # after a stop request, loops must have ended within this

__all__ = ["run", "run_threads", "execute", "decide_status", "worker_main", "build_context", "choose_workers",
           "choose_comm"]


# ------------------------------------------------------------------------------ worker side
def worker_main(config: RunConfig, rank: int, kinds: list[str], groups: list[list[int]], extra: dict,
                t0_wall: float, links: WorkerLinks, sink: Callable[[dict], None],
                vanish_at: Callable[[int], None] | None = None, resume: dict | None = None) -> dict:
    """One worker's whole run, on any transport: its links -> its context -> the loop.

    `vanish_at` (fault injection, thread transport): called with each step; raising from
    it makes the worker vanish as a killed process would. `resume`: this worker's part of
    the checkpoint a resumed run continues from (`RunSetup.resume`)."""
    gi, ranks = group_of(groups, rank)
    ctx = build_context(config, rank, len(kinds), kinds[rank], comm=links.comm, server=links.server,
                        shared=links.shared, control=links.control, emit=sink, t0_wall=t0_wall,
                        extra=dict(extra, group=gi, group_ranks=ranks), start_barrier=links.start_barrier,
                        timer=links.timer)
    ctx.resume = resume
    ctx.rows_out = links.rows
    ctx.checkpoint_every = (extra.get("checkpoint") or {}).get("every")
    ctx.checkpoint_asked = bool((extra.get("checkpoint") or {}).get("wall"))
    ctx.elastic = "elastic" in extra       # keeps a state at each boundary, regroups (`execution.elastic`)
    if links.adapt is not None:
        links.adapt(ctx)
    if vanish_at is not None:
        ctx.extra["vanish_at"] = vanish_at
    return _loop(ctx)


def _loop(ctx: WorkerContext) -> dict:
    """run_loop, turning failures into records the client keeps."""
    algo = REGISTRY[ctx.config.algorithm].cls(ctx)
    vanish = ctx.extra.pop("vanish_at", None)
    if vanish is not None:   # fault injection: the worker dies at a step, before it reports it
        step = algo.step

        def dying(k: int) -> Any:
            vanish(k)
            return step(k)
        algo.step = dying
    usage = LoopUsage()   # the loop's wall and CPU clocks: the machine's state is part of the result
    numerics: dict[str, int] = {}   # NumPy's floating-point errors: kind -> first step

    def used(res: dict) -> dict:
        booked = res.get("steps") or {}
        compute = ctx.steps.compute_total + (float(np.sum(booked["compute_s"])) if "compute_s" in booked else 0.0)
        res["usage"] = {**usage.stop(compute, ctx.kind, ctx.rank), "blas_threads": current_blas_threads()}
        if numerics:
            res["numerics"] = dict(numerics)
        return res
    try:
        with float_errors(numerics, ctx.steps):
            return used(run_loop(ctx, algo))
    except WorkerLost as exc:
        ctx.event("aborted", str(exc))
        if ctx.elastic and ctx.kept is not None:   # a regroup goes on from this worker's last boundary
            ctx.save_state(ctx.kept[0], ctx.kept[1], tag="kept")
        ctx.flush(done=True)
        return used({"status": "failed", **ctx.kept_on_failure(), "error": str(exc), "steps": ctx.step_columns(),
                     "started": ctx.started_wall})
    except Exception as exc:
        ctx.event("failed", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=8)}")
        ctx.flush(done=True)
        exc.workbench_steps = ctx.step_columns()   # travels with the exception: nothing logged is lost,
        exc.workbench_kept = ctx.kept_on_failure(exc)   # nor the model last evaluated (or trained, `EvaluationError`)
        raise
    except BaseException as exc:   # the worker vanishes (fault injection, a simulated kill): its log travels
        exc.workbench_steps = ctx.step_columns()   # too, for a transport that can keep it (the simulator does)
        raise


# ------------------------------------------------------------------------------ client side
def transport_for(config: RunConfig, cluster: Any = None) -> Transport:
    """The one choice of transport for a run (`workbench.run`, the CLI and the dashboard use it).

    `simulate=True`: the simulated cluster (its own virtual workers: no `cluster`);
    `cluster="threads"`: every worker a thread of this process; otherwise Dask on `cluster`
    (a Client, a cluster object or a scheduler address), by default the session's local
    cluster, started or reused here. A `Transport` passed as `cluster` is returned as it is.
    An algorithm declared `in_process` (sgd) runs on the thread transport whatever `cluster`
    says (none is started), unless simulated."""
    if isinstance(cluster, Transport):
        return cluster
    spec = REGISTRY.get(config.algorithm)
    if config.simulate:
        if cluster is not None:
            raise ConfigError("simulate", "no cluster with a simulated run (it makes its own virtual one)",
                              type(cluster).__name__)
        if spec is None:
            raise ConfigError("algorithm", f"one of {sorted(REGISTRY)}", config.algorithm)
        from ..sim.transport import SimTransport
        return SimTransport()
    if spec is None:
        raise ConfigError("algorithm", f"one of {sorted(REGISTRY)} on the engine", config.algorithm)
    if spec.in_process or (isinstance(cluster, str) and cluster == "threads"):
        from .transports.threads import ThreadTransport
        return ThreadTransport()
    from .transports.dask import DaskTransport
    client = _client_for(config, cluster)
    return DaskTransport(client, opened=client is not cluster and cluster is not None)


def run(config: RunConfig, cluster: Any = None, on_record: OnRecord | None = None,
        should_stop: Callable[[], bool] | None = None, out: Any = None, resume: Any = None) -> RunResult:
    """Run `config` on the transport `transport_for(config, cluster)` picks; `out`: the
    claimed run directory its step rows stream to while it runs (None: kept in memory);
    `resume`: the checkpoint (`workbench.checkpoint.Checkpoint`) it continues from."""
    t_called = time.time()   # start-up (cluster, set-up, workers' own) runs from here to step 0
    transport = transport_for(config, cluster)
    from .cluster import cancellations_unlogged
    with cancellations_unlogged():   # Dask's "(CancelledError)" of a lost scheduler: the run says it itself
        try:
            return execute(config, transport, on_record=on_record, should_stop=should_stop, t_called=t_called,
                           out=out, resume=resume)
        finally:
            transport.let_go()   # a client opened for an address or a cluster object is closed with its run


def run_threads(config: RunConfig, on_record: OnRecord | None = None,
                should_stop: Callable[[], bool] | None = None, kinds: list[str] | None = None,
                fail: dict[int, int] | None = None) -> RunResult:
    """Run on the thread transport (no Dask): the same engine path, in-process links.
    `kinds` lets tests stand CPU workers in for GPU ones; `fail={rank: step}` makes a
    worker vanish at a step, as a killed process would."""
    from .transports.threads import ThreadTransport
    if REGISTRY.get(config.algorithm) is None:
        raise ConfigError("algorithm", f"one of {sorted(REGISTRY)} on the engine", config.algorithm)
    return execute(config, ThreadTransport(kinds=kinds, fail=fail), on_record=on_record, should_stop=should_stop)


def _client_for(config: RunConfig, cluster: Any) -> Any:
    """The session's client (None), the caller's Client, or one opened for an address or a
    cluster object (`cluster.open_client`: the run closes it, `Transport.let_go`)."""
    from .cluster import open_client, session_client
    if cluster is None:
        return session_client(config.cpus, config.gpus, config.scheduler)
    return open_client(cluster)


def decide_status(*, sync: bool, lost: dict, gone: bool, statuses: list[str | None], diverged_event: bool,
                  stop_asked: bool, size: int | None = None, early_stop: bool = False) -> str:
    """The one status rule, for every transport, in this order:

    failed when a synchronous run lost a worker, when every one of the run's `size`
    workers was lost (an asynchronous run too: nothing finished), or when the transport
    itself is gone;
    diverged when any loop (or event) says so; stopped when a loop stopped, or a stop was
    asked and not every loop ran its plan out (a request that came after the last step, or
    with it, changes nothing: the run completed); but completed when rank 0 took its
    `early_stop` decision, whoever else asked too (the loops end where that decision put
    them, and there is nothing left to resume); failed when a loop failed; else completed.

    >>> decide_status(sync=True, lost={1: "w1"}, gone=False, statuses=["diverged"], diverged_event=True,
    ...               stop_asked=False)
    'failed'
    >>> decide_status(sync=False, lost={1: "w1"}, gone=False, statuses=["completed"], diverged_event=False,
    ...               stop_asked=False)
    'completed'
    >>> decide_status(sync=True, lost={}, gone=False, statuses=["failed", "diverged"], diverged_event=False,
    ...               stop_asked=False)
    'diverged'
    >>> decide_status(sync=False, lost={0: "w0", 1: "w1"}, gone=False, statuses=[], diverged_event=False,
    ...               stop_asked=False, size=2)
    'failed'
    >>> decide_status(sync=True, lost={}, gone=False, statuses=["stopped"] * 2, diverged_event=False,
    ...               stop_asked=True, early_stop=True)
    'completed'
    >>> decide_status(sync=True, lost={}, gone=False, statuses=["completed"] * 2, diverged_event=False,
    ...               stop_asked=True, size=2)
    'completed'
    >>> decide_status(sync=True, lost={}, gone=False, statuses=[], diverged_event=False, stop_asked=True, size=2)
    'stopped'
    """
    if (lost and sync) or gone or (size is not None and len(lost) >= size):
        return "failed"
    if "diverged" in statuses or diverged_event:
        return "diverged"
    ran_out = bool(statuses) and all(s == "completed" for s in statuses) \
        and (size is None or len(statuses) + len(lost) >= size)   # every loop (a lost one aside) ran its plan out
    if "stopped" in statuses or (stop_asked and not ran_out):
        return "completed" if early_stop else "stopped"
    if "failed" in statuses:
        return "failed"
    return "completed"


def execute(config: RunConfig, transport: Transport, on_record: OnRecord | None = None,
            should_stop: Callable[[], bool] | None = None, t_called: float | None = None,
            out: Any = None, resume: Any = None) -> RunResult:
    """One run on `transport`: set-up, loops, the monitor, the status rule, the result.

    `out`: a run directory claimed for this run (`results.claim_run_dir`): every step row
    is appended to its steps.csv as the workers send them (`results.StepStore`), so the
    client's memory does not grow with the run and a stop has only the last batches to
    write. None: the rows are kept in memory (`RunResult.steps`). With `out` and
    `config.checkpoint_every`, checkpoints are written there (`execution.saver`).
    `resume`: the checkpoint (`workbench.checkpoint.Checkpoint`, read from `out`) this run
    continues from: each worker takes up its state and step, the records before it are
    kept, and the summary counts the segments before this one."""
    t_called = time.time() if t_called is None else t_called
    spec = REGISTRY[config.algorithm]
    workers = transport.choose(config)
    if spec.workers is not None:   # declared (sgd: one); GPU workers come first
        workers = workers[:spec.workers]
    size = len(workers)
    if not spec.spans_hosts and len({w["host"] for w in workers}) > 1:
        raise ConfigError("algorithm", f"{config.algorithm} needs every worker on one host (shared memory); "
                          f"these are on {sorted({w['host'] for w in workers})}", config.algorithm)
    problem = Problem.from_config(config)
    plan, model = problem.plan, problem.model   # the plan validates the schedule before anything starts
    setup = RunSetup(config=config, spec=spec, run_id=uuid.uuid4().hex[:12], workers=workers,
                     groups=spec.needs.rank_groups(config, size), n_params=model.n_params,
                     params0=problem.params0, model=model, extra={},
                     total_steps=plan.total_steps, schedule_text=plan.schedule_text)
    transport.check(setup)    # the workers' memory, from the dataset's entry: before the data is made
    problem.load()            # loads (and checks) the data on the client
    setup.extra = spec.needs.client_setup(config, size)
    collector = Collector(on_record, width=live_width(plan.total_steps), size=size, directory=out,
                          private=config.out_private)
    saver = None
    if resume is not None:
        _take_up(resume, setup, collector, out, transport)
    every = config.checkpoint_interval
    if out is not None and every is not None and checkpoints_offered(spec.cls):
        saver = Saver(setup, collector, out, transport, t_called, prior=resume)
        setup.extra["checkpoint"] = {"every": every} if isinstance(every, int) else {"wall": every}
        if config.simulate and not spec.sync:   # resumed by replay (`api.resume`): its checkpoints mark the step only
            setup.extra["checkpoint"]["bare"] = True
    elastic = config.elastic
    ids = list(range(size))            # the worker id of each rank: the records name workers by it
    pending_joins: dict[int, float] = dict(config.joins) if elastic and config.simulate else {}
    membership: list[dict] = []
    lost_all: dict[str, str] = {}
    busy_said: list[str] = []   # workers that took on other work mid-run (`_Monitor.busy`), every epoch's
    if elastic:
        setup.extra["elastic"] = {"fail": {}}
        if pending_joins:   # the simulator's joiners are absent until their time
            ids = [i for i in range(size) if i not in pending_joins]
            _start_without(setup, transport, ids)
        setup.extra["elastic"]["fail"] = {r: config.failures[i] for r, i in enumerate(ids) if i in config.failures}
        next_id = size
        membership.append({"step": resume.step if resume is not None else 0, "workers": list(ids),
                           "why": "start"})
    t_setup = time.time()
    pids = machine.local_pids(workers)   # the run's worker processes on this host: the run's own CPU
    before = None
    while True:
        joins = None
        if elastic:
            from .elastic import Joins
            joins = Joins(transport, setup.workers, pending=pending_joins)
        monitor = _Monitor(setup, transport, collector, should_stop, saver, ids=ids, joins=joins)
        if saver is not None:
            saver.setup = setup
        try:
            transport.prepare(setup)
            setup.t0_wall = time.time()
            if before is None:   # the machine's state from the first loops' start (an elastic run: several)
                before = machine.snapshot(pids)
            if joins is not None:
                joins.start()
            transport.start(setup, monitor.records.put, worker_main)
            status, params, extra = monitor.watch()
            after = machine.snapshot(pids)
        finally:
            transport.close()
            machine.return_freed_memory()   # the loops' arrays, freed: back to the system, not kept by the heap
        lost_all.update(extra.get("lost_workers", {}))
        busy_said += monitor.busy
        if not elastic or monitor.stop_asked or monitor.gone or not (monitor.lost or monitor.regroup):
            break
        from .elastic import next_epoch, regroup_events
        regroup = next_epoch(setup, transport, monitor, ids, next_id, pending_joins,
                             all_workers=workers if config.simulate else None)
        if regroup is None:
            break
        fresh, new_setup, new_ids, next_id, step, joined, t = regroup
        floor = config.min_workers or 1
        if new_setup.size < floor:
            collector([event_record(t, "too_few_workers", None, f"{new_setup.size} worker(s) left at step {step}, "
                                    f"fewer than min_workers ({floor}): the run cannot go on")])
            status = "failed"
            break
        regroup_events(collector, t, step, ids, new_ids, joined, new_setup.workers, config.batch_size)
        collector.rewind(step, keep=new_ids)   # a round a worker was lost in runs again
        new_setup.extra["elastic"] = {"fail": {r: config.failures[i] for r, i in enumerate(new_ids)
                                                if i in config.failures and config.failures[i] > t}}
        membership.append({"step": step, "workers": list(new_ids), "why": "lost" if monitor.lost else "joined"})
        fresh.check(new_setup)
        if saver is not None:
            saver.pending.clear()   # states of the last loops' ranks: none will complete now
        transport, setup, ids = fresh, new_setup, new_ids
    end = time.time()
    if elastic:
        extra["membership"] = membership
        extra["lost_workers"] = lost_all
        workers = setup.workers
    t_zero = monitor.collector.t_zero()
    extra.update(transport.describe())
    if busy_said:   # a note of its own: another client's work in the worker's process is no other process's CPU
        extra["busy_note"] = "; ".join(busy_said)
    startup = (t_zero if t_zero is not None else end) - t_called
    extra.update({"run_id": setup.run_id, "setup_s": setup.t0_wall - t_setup,
                  # from run() to the first training step: never booked as compute, comm or wait
                  "startup_s": startup})
    if extra.get("simulated"):   # virtual seconds: the virtual cluster is there at time 0
        extra.update({"startup_s": 0.0, "sim_startup_s": startup})
        if extra.get("calibration"):   # this machine's core, timed: on a busy machine its times are not its own
            from ..sim.calibration import calibration_note
            said = calibration_note(extra["calibration"], sum(1 for w in workers if w.get("kind") == "cpu"),
                                    given=bool(config.calibration))
            if said:
                extra["machine_note"] = said
            # a timing judged bad is not cached: the next run times the core again, and its numbers move
            extra["calibration_kept"] = bool(config.calibration) or not said
    else:   # virtual time does not depend on the machine; real time does
        state = machine.summarise(before, after, [r["usage"] for r in monitor.results.values() if r.get("usage")],
                                  workers)
        extra.update({"machine": state, "machine_note": state["note"]})
        crowded = machine.crowding_note(workers, config.blas_threads, state["cores"])
        if crowded:   # more CPU workers (and their BLAS threads) than cores: they took turns
            extra["crowding_note"] = crowded
    # An algorithm with its own plan (LTFB trainers) has already reported these.
    extra.setdefault("total_steps_planned", plan.total_steps)
    extra["model"] = problem.model_record   # what the model was: name, size, its code's hash
    if problem.data_record is not None:     # and a data file of the user's: its files' sizes and hashes
        extra["data"] = problem.data_record
    extra.setdefault("lr_schedule", plan.schedule_text)
    wall = transport.wall_time(end - t_called)
    if saver is not None:
        saver.finish()   # (those due and still not written: missed)
        extra["checkpoints"] = saver.summary()
        if extra.get("sim_path") == "lockstep":   # one loop for every worker: no worker's state to take
            extra["checkpoints"]["note"] = ("none on the simulator's lockstep path (no state per worker): "
                                            "a step interval (checkpoint_every: 500) runs it per worker, with them")
    if resume is not None:   # the segments before this one: their time counts, the gaps between do not
        wall = _resumed_times(resume, extra, wall, status, saver)
    result = build_result(config.to_dict(), monitor.collector, status=status, wall_time_s=wall,
                          workers=[transport.public(w, rank) for rank, w in enumerate(workers)],
                          extra=extra, params=params, best=monitor.results.get(0, {}).get("best"))
    if resume is not None:   # the last segment ends where the run's steps did (`steps`: the last step's + 1)
        result.summary["segments"][-1]["to_step"] = result.summary["segments"][-1]["ran_to"] = result.summary["steps"]
        here = len(result.summary["segments"]) - 1   # each event marked with its segment (the earlier ones' kept)
        for e, r in zip(result.summary["events"], monitor.collector.rows.get("event", [])):
            e["segment"] = r.get("segment", here)
    if elastic:   # each worker under the id its records carry
        for w, wid in zip(result.summary["workers"], ids):
            w["id"] = wid
    test_rows = int(np.asarray(problem.data.y_test).size)   # the labels the test accuracy is a share of
    result.summary["test_rows"] = test_rows
    if result.summary.get("final_test_accuracy") is not None and test_rows:
        # how sure a share of so many rows is (one row: 0.21-1.00)
        from ..learning import wilson_interval
        result.summary["final_test_accuracy_95"] = list(wilson_interval(result.summary["final_test_accuracy"],
                                                                        test_rows))
    if is_data_path(config.dataset) and result.params is not None:
        # a data file of the user's (its classes need not be balanced): the test accuracy class by class
        from ..maths.metrics import EvaluationError, Evaluator
        try:
            right, rows = Evaluator(problem.model, problem.data).per_class(np.asarray(result.params),
                                                                           problem.data.n_classes)
        except EvaluationError:   # the kept parameters of a run whose evaluation raised: said in its errors
            right = rows = None
        names = ((problem.data_record.get("table") or {}).get("classes")
                 or [str(k) for k in range(problem.data.n_classes)])
        if rows is not None:
            result.summary["per_class"] = [{"class": str(name), "rows": int(n), "accuracy": float(r / n) if n else None}
                                           for name, r, n in zip(names, right.tolist(), rows.tolist())]
    if problem.data.vocab is not None:   # a language model's: perplexity, and the gap to the best loss where known
        from ..maths.metrics import language_metrics
        s = result.summary
        if s.get("final_test_loss") is not None:
            s["language"] = language_metrics(s["final_test_loss"], s.get("final_test_accuracy"),
                                             problem.data.best_loss)
    if monitor.lost:   # how much of the plan ran, said where a batch script and the report look
        s = result.summary
        s["plan_steps_run"] = f"{s['steps']:,} of {s['total_steps_planned']:,}"
        # the samples too: an asynchronous run's survivors reach the last step, the lost worker's share is missing
        planned = s["total_steps_planned"] * config.batch_size
        trained = (f", on {s['samples']:,} of its {planned:,} samples ({s['samples'] / planned:.0%})"
                   if planned and s.get("samples") is not None and s["samples"] < planned else "")
        s["events"].append({"kind": "event", "time": s["events"][-1]["time"] if s["events"] else 0.0,
                            "event": "incomplete", "worker": None,
                            "message": f"{len(monitor.lost)} of {size} workers lost; {s['steps']:,} of the plan's "
                                       f"{s['total_steps_planned']:,} steps ran{trained}"})
        if resume is not None:
            s["events"][-1]["segment"] = len(s["segments"]) - 1
    return result


def _start_without(setup: RunSetup, transport: Transport, ids: list[int]) -> None:
    """An elastic simulated run whose `join_worker` ranks are absent at the start: its first
    loops run on the others (ranks renumbered; the records keep their ids)."""
    workers = [setup.workers[i] for i in ids]
    transport.use(workers)
    setup.workers = workers
    setup.groups = setup.spec.needs.rank_groups(setup.config, len(workers))
    setup.extra.update(setup.spec.needs.client_setup(setup.config, len(workers)))
    if setup.resume is not None:
        setup.resume = {r: setup.resume[i] for r, i in enumerate(ids) if i in setup.resume}


def _take_up(resume: Any, setup: RunSetup, collector: Collector, out: Any, transport: Transport) -> None:
    """A resumed run's start: each worker's part of the checkpoint (`setup.resume`), the
    records before it in the collector, the run directory's step rows before each worker's
    step (the rows a killed run wrote after its checkpoint are dropped: they run again)."""
    from ..results.store import STEP_TABLE, read_step_rows
    restored = getattr(transport, "restores_clock", False)
    setup.resume = {rank: {"step": resume.rank_step(rank), "time": resume.rank_time(rank),
                           "clock": float(resume.meta["workers"][str(rank)]["clock"]),
                           "t_start": resume.meta["workers"][str(rank)].get("t_start"),
                           "clock_restored": restored, "state": resume.ranks[rank]}
                    for rank in range(setup.size)}
    if resume.server:
        setup.resume[0]["state"] = {**setup.resume[0]["state"],
                                    **{f"server.{k}": v for k, v in resume.server.items()}}
    history, records = segment_history(resume)
    resume.history = history
    collector.seed(records)
    config = setup.config
    if config.simulate and config.is_sync and not config.elastic and config.failures:
        # A fault fires once: the segment it ended is resumed with that worker back (a replacement, as on a
        # real cluster), not killed again at the same virtual second on every resume.
        lost = {int(k) for seg in history for k in (seg.get("lost_workers") or {}) if str(k).isdigit()}
        setup.spent = frozenset(lost & set(config.failures))
        if setup.spent:
            said = ", ".join(f"{r}@{config.failures[r]:g}" for r in sorted(setup.spent))
            at = max(resume.rank_time(r) for r in range(setup.size))   # where the records go on from
            collector([event_record(at, "fault_spent", None, f"fail_worker {said} fired in an earlier segment; "
                                    f"resumed from step {resume.step:,} with the worker back, not killed again")])
    if out is not None:
        rows = read_step_rows(out, resume.meta.get("steps_csv_bytes"))
        worker, step = rows[:, STEP_TABLE.index("worker")], rows[:, STEP_TABLE.index("step")]
        limit = np.array([resume.rank_step(int(w)) for w in worker]) if len(rows) else np.empty(0)
        collector.store.resume(rows[step < limit])


_ENDING = ("status", "ran_to", "why", "lost_workers")   # what a segment's summary said of its end


def _why(summary: dict) -> str | None:
    """What ended a run that did not complete, in a few words, from its summary (None: its
    status says it all)."""
    lost = summary.get("lost_workers") or {}
    if lost:
        return f"worker{'s' if len(lost) > 1 else ''} {', '.join(sorted(lost))} lost"
    for e in reversed(summary.get("events") or []):
        if e.get("event") in ("scheduler_lost", "diverged", "too_few_workers", "stop_requested"):
            return str(e.get("message", "")).split(";")[0]
    errors = summary.get("errors") or {}
    if errors:
        first = next(iter(errors.values()))
        return str(first).splitlines()[0] if first else None
    return None


def ended_text(seg: dict, next_from: int | None) -> str:
    """How a segment ended, in words: its status, why, how far its steps ran, and where the
    next segment went on from (the steps between ran again there).

    >>> ended_text({"status": "failed", "why": "worker 1 lost", "ran_to": 2110}, 2000)
    'failed: worker 1 lost after 2,110 steps; resumed from its checkpoint at step 2,000 (110 steps run again)'
    >>> ended_text({"status": "stopped", "ran_to": 1}, None)
    'stopped after 1 step'
    >>> ended_text({"status": "killed", "ran_to": None}, 1500)
    'killed (it left no summary); resumed from its checkpoint at step 1,500'
    """
    status = seg.get("status") or "ended"
    head = "killed (it left no summary)" if status == "killed" else status
    if seg.get("why"):
        head += f": {seg['why']}"
    if seg.get("ran_to") is not None and status != "killed":
        ran = int(seg["ran_to"])
        head += f" after {ran:,} step{'s' if ran != 1 else ''}"
    if next_from is None:
        return head
    redone = int(seg["ran_to"]) - next_from if seg.get("ran_to") is not None else 0
    return head + f"; resumed from its checkpoint at step {next_from:,}" + (
        f" ({redone:,} steps run again)" if redone > 0 else "")


def _event_key(e: dict) -> tuple:
    return (e.get("event"), e.get("message"), round(float(e.get("time") or 0.0), 6))


def segment_history(resume: Any) -> tuple[list[dict], dict]:
    """The segments before a resumed run's, each with how it ended, and the records to seed
    it with (the checkpoint's, and the events its interrupted run had after the checkpoint),
    each event marked with its segment (`segment`: its index in the list).

    A checkpoint lists the segments up to itself (`Saver.write`): the earlier ones as the
    run that wrote it had them (how each ended included), its own up to the checkpoint.
    How that one ended, the summary the run left says (`Checkpoint.interrupted`; none: it
    was killed); a summary of a later run that wrote no checkpoint adds that run as a
    segment whose work all ran again; a summary older than the checkpoint's run says nothing."""
    history = [dict(seg) for seg in resume.meta.get("segments", [])]
    if history:
        history[-1].setdefault("run_id", resume.meta.get("run_id"))
    writer = len(history) - 1                              # the segment that wrote the checkpoint
    records = {k: [dict(r) for r in v] for k, v in (resume.meta.get("records") or {}).items()}
    for e in records.get("event", []):
        e.setdefault("segment", max(writer, 0))
    told = resume.interrupted
    ids = [seg.get("run_id") for seg in history]
    if told and told.get("run_id") is not None:
        own = dict((told.get("segments") or [{"from_step": 0}])[-1])   # the interrupted run's own segment
        ending = {"status": told.get("status"), "ran_to": told.get("steps"), "why": _why(told),
                  "lost_workers": told.get("lost_workers") or {}}
        at = None
        if told["run_id"] in ids:
            at = ids.index(told["run_id"])
        elif int(own.get("from_step", 0)) >= resume.step:   # a later run that wrote no checkpoint
            history.append({"from_step": int(own.get("from_step", 0)), "to_step": resume.step, "wall_time_s": 0.0,
                            "startup_s": 0.0, "run_id": told["run_id"]})
            at = len(history) - 1
        if at is not None:   # (else: a summary older than the checkpoint's run, which was killed)
            history[at].update(ending)
            earlier = told.get("segments") or []
            for i, seg in enumerate(history[:at]):   # what it knew of the segments before it
                if i < len(earlier) and "status" not in seg and earlier[i].get("status"):
                    seg.update({k: earlier[i][k] for k in _ENDING if k in earlier[i]})
            seen = {_event_key(e) for e in records.get("event", [])}
            for e in told.get("events") or []:
                if _event_key(e) not in seen:   # after the checkpoint: the records dropped it
                    records.setdefault("event", []).append({**e, "segment": e.get("segment", at)})
    for i, seg in enumerate(history):
        if "status" not in seg:
            seg["status"] = "killed" if i == len(history) - 1 else None
            seg.setdefault("ran_to", None)
        nxt = history[i + 1]["from_step"] if i + 1 < len(history) else resume.step
        seg["ended"] = ended_text(seg, nxt)
        seg.pop("called", None)
    return history, records


def _resumed_times(resume: Any, extra: dict, wall: float, status: str, saver: Any) -> float:
    """A resumed run's summary entries: `segments` (each run of the loops: its steps, how
    far they ran, how it ended (`status`, `ended` in words, `why`, its `lost_workers`), its
    wall time: its start-up and its training up to the checkpoint the next one went on
    from, or to its end for the last) and the totals of every segment in
    `startup_s` and the returned wall time (the work a segment did after its checkpoint ran
    again, in the next one; the downtime between counts nowhere)."""
    order = ("from_step", "to_step", "ran_to", "status", "ended", "why", "lost_workers", "wall_time_s", "startup_s",
             "run_id")
    segments = []
    for seg in resume.history if resume.history is not None else segment_history(resume)[0]:
        seg = {**seg, "startup_s": seg.get("startup_s") or 0.0}
        segments.append({**{k: seg[k] for k in order if k in seg}, **seg})
    before = sum(seg["wall_time_s"] for seg in segments)
    total = None
    if extra.get("simulated"):   # virtual clocks went on from the checkpoint's: the makespan holds it all
        total, wall = wall, max(wall - before, 0.0)   # (the makespan itself: (W - b) + b need not be W's bits)
    this = {"from_step": resume.step, "to_step": None, "ran_to": None,   # the steps: set once the result is built
            "status": status, "ended": status, "lost_workers": extra.get("lost_workers") or {}, "wall_time_s": wall,
            "startup_s": extra.get("startup_s") or 0.0, "run_id": extra.get("run_id")}
    segments.append(this)
    extra["segments"] = segments
    extra["startup_s"] = sum(seg["startup_s"] for seg in segments)
    extra["resumed_from"] = {"step": resume.step, "checkpoint": str(resume.path.name) if resume.path else None}
    return total if total is not None and total >= before else before + wall


INTERRUPTS = ("SIGINT", "SIGTERM", "SIGHUP")   # the signals a stop may come by (Ctrl-C, a kernel's interrupt, the CLI's)


@contextlib.contextmanager
def interrupts_as_requests(got: list[str]) -> Iterator[None]:
    """While the client's loop runs: a signal whose handler raises KeyboardInterrupt in the
    main thread (Ctrl-C, Jupyter's "interrupt the kernel", the CLI's SIGTERM and SIGHUP) is
    taken as a request instead, its name appended to `got` for the loop to act on. Raised,
    it would land between two bytecodes of whatever the loop was doing, and what that held
    would be lost: batches taken off the queue and not yet handed to the collector (an
    evaluation's record, a worker's state for a checkpoint), a loop's fetched result. The
    handler itself still runs (the CLI's note on stderr); only its KeyboardInterrupt is
    kept back. Handlers that do not raise, the defaults (SIGTERM's exit) and ignored
    signals are left as they are, and off the main thread, where no handler runs, nothing
    changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved: dict[int, Any] = {}

    def kept_back(signum: int, frame: Any) -> None:
        try:
            saved[signum](signum, frame)
        except KeyboardInterrupt as exc:
            got.append(str(exc) or signal.Signals(signum).name)

    for name in INTERRUPTS:
        sig = getattr(signal, name, None)
        old = signal.getsignal(sig) if sig is not None else None
        if callable(old):   # (SIG_DFL and SIG_IGN are not: the process's own choice, kept)
            saved[sig] = old
            signal.signal(sig, kept_back)
    try:
        yield
    finally:
        for sig, old in saved.items():
            signal.signal(sig, old)


class _Monitor:
    """The client's one loop over a run's transport: records, stop requests, lost workers."""

    def __init__(self, setup: RunSetup, transport: Transport, collector: Collector,
                 should_stop: Callable[[], bool] | None, saver: Saver | None = None,
                 ids: list[int] | None = None, joins: Any = None):
        self.setup, self.transport, self.collector, self.should_stop = setup, transport, collector, should_stop
        self.saver = saver
        self.ids = ids if ids is not None else list(range(setup.size))   # rank -> the worker's id in the records
        self.joins = joins                 # an elastic run's watch for newcomers (`elastic.Joins`)
        self.regroup: dict[int, dict] = {}   # rank -> the state it sent to regroup from (elastic runs)
        self.records: queue.SimpleQueue = queue.SimpleQueue()
        self.done: set[int] = set()
        self.lost: dict[int, str] = {}
        self.results: dict[int, dict] = {}
        self.busy: list[str] = []          # workers that took on other work mid-run, with when (`Progress.busy`)
        self.gone = False
        self.stop_asked = False

    def drain(self) -> None:
        """Hand on what the loops sent: the queued batches and, read after taking them, the
        rows the transport's rings hold (handed on first: each batch was sent after every
        row its worker put in its ring before it, so a state's rows precede it)."""
        batches = []
        while True:
            try:
                batches.append(self.records.get_nowait())
            except queue.Empty:
                break
        for rank, rows in self.transport.live_rows().items():
            self.collector.add_live({"rank": self.ids[rank], "started": None, "rows": rows, "records": [],
                                     "done": False})
        for batch in batches:
            if batch.get("kind") == "state":
                if "packed" in batch:   # a Dask worker's state for a regroup, pickled for the event stream
                    batch = {**batch, "state": pickle.loads(batch["packed"])}   # noqa: S301 - the run's own workers
                if batch.get("tag") in ("kept", "paused"):
                    self.regroup[int(batch["rank"])] = batch
                elif self.saver is not None:
                    self.saver.add(batch)
                continue
            rank = int(batch["rank"])
            self.collector.add_live(batch if self.ids[rank] == rank else {**batch, "rank": self.ids[rank]})
            if batch.get("done"):
                self.done.add(rank)

    def now(self) -> float:
        """The client's clock for its own events: seconds since the run's first step."""
        t_zero = self.collector.t_zero()
        if t_zero is None:   # no worker's first step has reached us yet: since the loops started
            t_zero = getattr(self.setup, "t0_wall", None) or time.time()
        return max(0.0, time.time() - t_zero)

    def take(self, progress: Any) -> None:
        """A transport's report: results kept, lost workers recorded and acted on."""
        sync = self.setup.spec.sync
        if progress.results or progress.lost:
            self.drain()   # a loop's batches were queued before its end was reported: take them first
        for rank, res in progress.results.items():
            self.results[rank] = res
            # the rows its loop still held (none after its last batch; a simulated worker's up to its kill)
            self.collector.add_steps(self.ids[rank], res.get("steps"), complete=False)
            if res.get("status") == "failed" and res.get("error") and sync:
                self.transport.abort(f"worker {rank} failed")   # its peers must not wait for it
        for rank, who in progress.lost.items():
            self.lost[rank] = who
            wid = self.ids[rank]
            self.collector.add_steps(wid, None)   # a lost worker sends no more rows
            if self.saver is not None and not sync:   # an asynchronous run's checkpoints go on without it
                self.saver.lose(rank)
            now = progress.lost_at.get(rank, self.now())
            self.collector([event_record(now, "worker_lost", wid, f"worker {wid} ({who}) was lost at {duration_text(now)}")])
            if sync:
                self.transport.abort(f"worker {rank} lost")
            else:
                self.transport.release(rank)
        for rank, what in progress.busy.items():
            now = self.now()
            said = (f"{what} from {duration_text(now)} into the run: from then its speed is the machine's, not "
                    f"the algorithm's")
            self.busy.append(said)
            self.collector([event_record(now, "worker_busy", self.ids[rank], said)])
        if progress.gone and not self.gone:
            self.gone = True
            now = self.now()
            self.collector([event_record(now, "scheduler_lost", None, f"{progress.gone} was lost at {duration_text(now)} "
                                         f"({progress.why}); the run cannot go on")])

    def ask_stop(self, why: str, message: str) -> None:
        self.stop_asked = True
        with contextlib.suppress(Exception):
            self.transport.request_stop(why)
        self.collector([event_record(self.now(), "stop_requested", None, message)])

    def watch(self) -> tuple[str, Any, dict]:
        """Run the client's side of the run until its loops end; returns (status, rank 0's
        parameters, the summary's extra fields). An interrupt (`interrupts_as_requests`) asks
        the loops to stop, as `should_stop` does, and the loop goes on taking what they send
        until they have ended; a second interrupt stops waiting for them."""
        transport = self.transport
        stop_deadline = stop_asked_at = None
        interrupts: list[str] = []
        by_interrupt = False   # whether the stop was asked by an interrupt (else: should_stop, e.g. a
        #                        sweep's first Ctrl-C, `api.interrupt_stops`: the next one is "asked again")

        def asked_again() -> bool:
            return len(interrupts) > 1 or (bool(interrupts) and self.stop_asked and not by_interrupt)
        with interrupts_as_requests(interrupts):
            try:
                while True:
                    self.drain()
                    if interrupts and not self.stop_asked:
                        stop_asked_at = time.time()
                        stop_deadline = stop_asked_at + STOP_GRACE_S
                        by_interrupt = True
                        self.ask_stop("KeyboardInterrupt", f"KeyboardInterrupt ({interrupts[0]})")
                    elif asked_again():   # asked again: stop waiting for the loops
                        transport.cancel()
                        break
                    if not self.stop_asked and self.should_stop is not None and self.should_stop():
                        stop_asked_at = time.time()
                        stop_deadline = stop_asked_at + STOP_GRACE_S
                        self.ask_stop("stop requested", "stop requested by the user")
                    self.take(transport.poll())
                    if self.gone or not transport.pending():
                        break
                    if self.saver is not None and not self.stop_asked:
                        self.saver.maybe_ask()
                    if self.joins is not None and not self.stop_asked:
                        self.joins.watch(self)
                    if stop_deadline is not None and len(self.collector.started) < self.setup.size \
                            and time.time() < stop_asked_at + START_TIMEOUT_S:
                        # asked while the run starts (data, the loops' set-up): the loops' grace
                        # counts from their start (a start barrier waits START_TIMEOUT_S at most);
                        # cancelling them sooner killed a loop in set-up, its peer in its first allreduce
                        stop_deadline = time.time() + STOP_GRACE_S
                    if stop_deadline is not None and time.time() > stop_deadline + 5 * STOP_GRACE_S:
                        transport.cancel()  # loops ignored the stop request: do not hang
                        break
                    time.sleep(MONITOR_S)
            except KeyboardInterrupt:   # raised all the same (a handler installed while the loop ran)
                self.ask_stop("KeyboardInterrupt", "KeyboardInterrupt")
                deadline = time.time() + STOP_GRACE_S * 3
                while time.time() < deadline and transport.pending() and not self.gone:
                    self.drain()
                    self.take(transport.poll())
                    time.sleep(MONITOR_S)
            self.take(transport.finish())   # loops that ended but were not reported yet
            expected = {r for r, res in self.results.items() if res.get("status") not in ("rescheduled", "lost")}
            deadline = time.time() + (0 if self.gone else DONE_TIMEOUT_S)
            while not expected <= self.done and time.time() < deadline and not asked_again():
                time.sleep(MONITOR_S)
                self.drain()
            self.drain()   # (an interrupt from here on: the loops have ended, nothing is left to stop)
        for rank, res in self.results.items():
            if res.get("started") is not None:
                self.collector.started.setdefault(self.ids[rank], res["started"])
        early = self.results.get(0, {}).get("early_stopped")     # rank 0's `early_stop` decision, if it made one
        status = decide_status(sync=self.setup.spec.sync, lost=self.lost, gone=self.gone,
                               statuses=[res.get("status") for res in self.results.values()],
                               diverged_event=any(e.get("event") == "diverged"
                                                  for e in self.collector.rows.get("event", [])),
                               stop_asked=self.stop_asked, size=self.setup.size, early_stop=early is not None)
        errors = {str(self.ids[r]): res["error"] for r, res in self.results.items() if res.get("error")}
        extra: dict[str, Any] = {"lost_workers": dict(sorted((str(self.ids[r]), a) for r, a in self.lost.items()))}
        if errors:
            extra["errors"] = errors
        kept = self.results.get(0, {})
        if kept.get("params_steps") is not None and kept.get("params") is not None:   # rank 0 failed (`kept_on_failure`)
            extra["params_final"] = {"steps": int(kept["params_steps"]), "of": kept.get("params_of") or "its last evaluation"}
        for res in self.results.values():
            extra.update(res.get("summary", {}))
        numerics: dict[str, int] = {}     # each kind's earliest step over the workers (`float_errors`)
        for res in self.results.values():
            for kind, step in (res.get("numerics") or {}).items():
                numerics[kind] = min(step, numerics.get(kind, step))
        if numerics:
            order = ("overflow", "divide by zero", "invalid value")   # the order one causes the next in
            extra["numerics"] = dict(sorted(numerics.items(),
                                            key=lambda kv: (kv[1], order.index(kv[0]) if kv[0] in order else 3)))
        if early is not None and status == "completed":   # (an asynchronous run's workers stop as the request reaches them)
            extra["early_stopped"] = {**early, "synchronous": bool(self.setup.spec.sync)}
        return status, self.results.get(0, {}).get("params"), extra
