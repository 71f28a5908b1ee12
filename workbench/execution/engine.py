"""The engine: run one algorithm on a Dask cluster (or on threads) and gather its records.

`run(config, cluster=None, on_record=None)`:
1. picks the workers (GPU ones first), checks the run fits them, before anything starts;
2. sets up what the algorithm needs: shared-memory segments, a parameter-server actor,
   an allreduce (shared memory on one host, NCCL between GPUs, a ring across hosts);
3. starts ONE long-lived loop per worker (`client.submit` pinned to that worker; never a
   task per minibatch: a task round trip costs more than a minibatch here);
4. streams the loops' records to the client (`Worker.log_event` ->
   `Client.subscribe_topic`), forwards them to `on_record`, passes stop requests on,
   watches for lost workers; ends the run as completed / stopped / diverged / failed,
   keeping everything gathered so far.

`cluster="threads"` runs the same loops as threads of this process with in-process
communication: the unit tests' way to check every algorithm's maths without Dask.
"""
from __future__ import annotations

import contextlib
import os
import queue
import socket
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np

from ..algorithms import REGISTRY, AlgorithmSpec, WorkerContext, run_loop
from ..comm.base import Emulated, ServerCore, ThreadControl, ThrottledControl, WorkerLost
from ..config import ConfigError, RunConfig
from ..maths.backend import get_xp
from ..maths.metrics import Evaluator
from ..maths.models import make_model
from ..maths.optim import make_plan
from ..results import Collector, OnRecord, RunResult, build_result, event_record
from . import platforms

MONITOR_S = 0.05          # client loop period: drain records, pass stop requests on
LIVENESS_S = 0.5          # how often the client checks that every worker is still there
DONE_TIMEOUT_S = 5.0      # after the loops return, wait this long for their last records
STOP_GRACE_S = 2.0        # after a stop request, loops must have ended within this
RESULT_TIMEOUT_S = 30.0   # fetching a finished loop's result (rank 0's holds the parameters)
LIVENESS_TIMEOUT_S = 2.0  # bound on asking the scheduler which workers live (see _alive)
CLEANUP_S = 2.0           # each clean-up call on a live worker


# ------------------------------------------------------------------------------ worker side
_DATA_CACHE: dict[tuple, Any] = {}


def _dataset(config: RunConfig) -> Any:
    """The run's dataset, loaded once per process (a warm cluster skips the load)."""
    from ..data import load_dataset
    key = (config.dataset, config.n_samples, config.n_features, config.n_classes, config.seed,
           config.data_dir)
    if key not in _DATA_CACHE:
        _DATA_CACHE.clear()  # keep one dataset per worker process
        _DATA_CACHE[key] = load_dataset(config.dataset, n_samples=config.n_samples, n_features=config.n_features,
                                        n_classes=config.n_classes, seed=config.seed, data_dir=config.data_dir,
                                        download=config.download)
    return _DATA_CACHE[key]


def build_context(config: RunConfig, rank: int, size: int, kind: str, *, comm: Any = None,
                  server: Any = None, shared: dict | None = None, control: Any = None,
                  emit: Callable | None = None, t0_wall: float = 0.0,
                  extra: dict | None = None, start_barrier: Callable | None = None) -> WorkerContext:
    """Everything one worker needs: data on its device, its own model instance, plan, links."""
    xp = get_xp(kind)
    data = _dataset(config)
    model = make_model(config.model, data.n_features, data.n_classes, hidden=config.model_hidden,
                       image_shape=data.image_shape)
    plan = make_plan(config, data.n_train)
    X, y = (data.X_train, data.y_train) if xp is np else (xp.asarray(data.X_train), xp.asarray(data.y_train))
    if config.latency_ms or config.bandwidth_gbps:
        comm = Emulated(comm, config.latency_ms, config.bandwidth_gbps) if comm is not None else None
        server = Emulated(server, config.latency_ms, config.bandwidth_gbps) if server is not None else None
    ctx = WorkerContext(rank=rank, size=size, kind=kind, xp=xp, config=config, plan=plan, model=model,
                        X=X, y=y, comm=comm, server=server, shared=shared or {}, control=control,
                        emit=emit, t0_wall=t0_wall, extra=dict(extra or {}), start_barrier=start_barrier)
    spec = REGISTRY[config.algorithm]
    if rank == 0 or spec.cls.evaluates in ("trainers", "all"):
        ctx.evaluator = Evaluator(model, data, xp)
    ctx.extra["dataset"] = data
    return ctx


def _worker_main(run: dict, rank: int, address: str, server: Any = None) -> dict:
    """A Dask task: one worker's whole training loop."""
    from distributed import get_worker

    from ..comm.dask import ActorServerProxy, EventControl
    from ..comm.shm import SharedArray, ShmComm

    worker = get_worker()
    if worker.address != address:  # rescheduled after its worker died: not ours to run
        return {"status": "rescheduled", "params": None}
    config = RunConfig.from_dict(run["config"])
    size, kind = run["size"], run["kinds"][rank]
    control = ThrottledControl(EventControl(run["run_id"]))
    comm = None
    gi, ranks = _my_group(run["groups"], rank)
    grank, gsize = ranks.index(rank), len(ranks)
    if run["comm"] == "shm":
        comm = ShmComm(run["segments"][f"comm{gi}"], grank, gsize, run["comm_elems"], control=control)
    elif run["comm"] == "dask":
        from ..comm.ring import RingComm
        comm = RingComm(f"{run['run_id']}/{gi}", grank, gsize, [run["addresses"][r] for r in ranks],
                        control=control)
    elif run["comm"] == "nccl":
        from ..comm.nccl import NcclComm
        comm = NcclComm(run["nccl_id"][gi], grank, gsize)
    shared = {name: SharedArray(seg, run["n_params"]) for name, seg in run["segments"].items()
              if not name.startswith("comm") and name != "server"}
    proxy = (run.get("proxy") or ActorServerProxy)(server, control) if server is not None else None
    if run.get("server_shm"):
        from ..comm.shm import ShmServer
        s = run["server_shm"]
        proxy = ShmServer(s["segment"], s["lock"], run["n_params"], size, control=control, **s["options"])
    if run.get("host_shm"):  # a custom master in shared memory (cgdp on one host)
        proxy = run["host_shm"]["cls"](rank=rank, size=size, control=control, **run["host_shm"]["kwargs"])

    def emit(batch: dict) -> None:
        worker.log_event(run["topic"], batch)   # a few compact batches a second, never one per step

    start = _start_barrier(run, rank, size, control, comm)
    extra = dict(run.get("extra") or {}, group=gi, group_ranks=ranks)
    ctx = build_context(config, rank, size, kind, comm=comm, server=proxy, shared=shared, control=control,
                        emit=emit, t0_wall=run["t0_wall"], extra=extra, start_barrier=start)
    try:
        return _loop(ctx)
    finally:
        control.close()
        if hasattr(start, "close"):
            start.close()
        if hasattr(proxy, "close"):
            proxy.close()
        for s in shared.values():
            s.close()
        if comm is not None:
            comm.close()
        if rank == 0 and getattr(control.control, "lease_expired", False):
            _orphaned(run)


def _orphaned(run: dict) -> None:
    """Worker 0, after its client vanished: free the run's segments and lock file, which
    the client would have freed (nobody else will)."""
    from ..comm.shm import unlink_segment
    names = list(run.get("segments", {}).values()) + ([run["start_segment"]] if run.get("start_segment") else [])
    for name in names:
        with contextlib.suppress(Exception):
            unlink_segment(name)
        _unlink_shm_name(name)
    if run.get("server_shm"):
        _remove_file(run["server_shm"]["lock"])


class _StartThenComm:
    """A start barrier followed by the collective's own (several hosts: the event barrier
    leaves a scheduler round trip of skew, which the first allreduce would book as wait)."""

    def __init__(self, barrier: Any, comm: Any):
        self.barrier, self.comm = barrier, comm

    def __call__(self) -> list[int]:
        missing = self.barrier()
        if not missing and self.comm is not None:
            self.comm.barrier()
        return missing

    def close(self) -> None:
        self.barrier.close()


def _start_barrier(run: dict, rank: int, size: int, control: Any, comm: Any) -> Any:
    """This worker's start barrier: shared memory on one host, Dask events across hosts."""
    from ..comm.barrier import EventStartBarrier, ShmStartBarrier
    if run.get("start_segment"):
        return ShmStartBarrier(run["start_segment"], rank, size, control=control)
    return _StartThenComm(EventStartBarrier(run["run_id"], rank, size, control=control), comm)


def _my_group(groups: list[list[int]], rank: int) -> tuple[int, list[int]]:
    for gi, ranks in enumerate(groups):
        if rank in ranks:
            return gi, ranks
    return -1, [rank]


def _loop(ctx: WorkerContext) -> dict:
    """run_loop, turning failures into records the client keeps."""
    algo = REGISTRY[ctx.config.algorithm].cls(ctx)
    try:
        return run_loop(ctx, algo)
    except WorkerLost as exc:
        ctx.event("aborted", str(exc))
        ctx.flush(done=True)
        return {"status": "failed", "params": None, "error": str(exc), "steps": ctx.step_columns(),
                "started": ctx.started_wall}
    except Exception as exc:
        ctx.event("failed", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=8)}")
        ctx.flush(done=True)
        exc.workbench_steps = ctx.step_columns()   # travels with the exception: nothing logged is lost
        raise


# ------------------------------------------------------------------------------ client side
def run(config: RunConfig, cluster: Any = None, on_record: OnRecord | None = None,
        should_stop: Callable[[], bool] | None = None) -> RunResult:
    """Run `config` on a Dask cluster (default: the session's local one) or on "threads"."""
    spec = REGISTRY.get(config.algorithm)
    if spec is None:
        raise ConfigError("algorithm", f"one of {sorted(REGISTRY)} on the engine", config.algorithm)
    if isinstance(cluster, str) and cluster == "threads":
        return run_threads(config, on_record=on_record, should_stop=should_stop)
    t_called = time.time()   # start-up (cluster, set-up, workers' own) runs from here to step 0
    client = _client_for(config, cluster)
    return _DaskRun(config, spec, client, on_record, should_stop, t_called=t_called).run()


def _client_for(config: RunConfig, cluster: Any) -> Any:
    from distributed import Client

    from .cluster import connect, session_client
    if cluster is None:
        return session_client(config.cpus, config.gpus, config.scheduler)
    if isinstance(cluster, Client):
        return cluster
    if isinstance(cluster, str):
        return connect(cluster)
    return Client(cluster, set_as_default=False)  # a cluster object


def choose_workers(available: list[dict], config: RunConfig) -> list[dict]:
    """The workers a run uses: `gpus` GPU workers (all for "auto") then `cpus` CPU ones."""
    gpu = [w for w in available if w["kind"] == "gpu"]
    cpu = [w for w in available if w["kind"] == "cpu"]
    n_gpu = len(gpu) if config.gpus == "auto" else config.gpus
    if n_gpu > len(gpu):
        raise ConfigError("gpus", f"at most the {len(gpu)} GPU worker(s) of this cluster", config.gpus)
    if config.cpus > len(cpu):
        raise ConfigError("cpus", f"at most the {len(cpu)} CPU worker(s) of this cluster", config.cpus)
    chosen = gpu[:n_gpu] + cpu[:config.cpus]
    if not chosen:
        raise ConfigError("cpus", "at least one worker in total (cpus + gpus)", config.cpus)
    if config.batch_size < len(chosen):
        raise ConfigError("batch_size", f"at least the number of workers ({len(chosen)})", config.batch_size)
    return chosen


def choose_comm(config: RunConfig, workers: list[dict]) -> str:
    """shm on one host, NCCL between GPU-only workers (if asked or available), else Dask."""
    one_host = len({w["host"] for w in workers}) == 1
    if config.comm == "shm" and not one_host:
        raise ConfigError("comm", "shm only when every worker is on one host", config.comm)
    if config.comm == "shm" and not platforms.shm_supported():
        raise ConfigError("comm", "shm only where fcntl and POSIX shared memory exist (Linux, macOS); "
                          "use auto or dask here", config.comm)
    if config.comm != "auto":
        return config.comm
    if all(w["kind"] == "gpu" for w in workers) and _nccl_available():
        return "nccl"
    if one_host and not platforms.shm_supported():
        platforms.note_once("no fcntl/POSIX shared memory on this platform: workers exchange through "
                            "Dask instead of shared memory (same maths, slower exchanges)")
        return "dask"
    return "shm" if one_host else "dask"


def _nccl_available() -> bool:
    from ..maths.backend import nccl
    try:
        nccl()
        return True
    except ImportError:
        return False


class _DaskRun:
    """One run on a Dask cluster: set-up, loops, monitoring, clean-up."""

    def __init__(self, config: RunConfig, spec: AlgorithmSpec, client: Any, on_record: OnRecord | None,
                 should_stop: Callable[[], bool] | None, t_called: float | None = None):
        self.config, self.spec, self.client = config, spec, client
        self.t_called = time.time() if t_called is None else t_called
        self.collector = Collector(on_record)
        self.should_stop = should_stop
        self.run_id = uuid.uuid4().hex[:12]
        self.topic = f"workbench-{self.run_id}"
        self.records: queue.SimpleQueue = queue.SimpleQueue()
        self.segments: dict[str, str] = {}
        self.actors: list[Any] = []
        self.scheduler_lost, self.scheduler_error, self._alive_failures = False, "", 0

    def run(self) -> RunResult:
        from ..comm.dask import EventControl

        config, spec, client = self.config, self.spec, self.client
        from .cluster import workers_of
        self.workers = choose_workers(workers_of(client), config)
        size = len(self.workers)
        if spec.shared and not platforms.shm_supported():
            raise ConfigError("algorithm", f"{config.algorithm} shares one buffer in shared memory, which needs "
                              "fcntl and POSIX shared memory (Linux, macOS)", config.algorithm)
        from .preflight import check_memory
        check_memory(config, workers_memory=[w.get("memory_limit") or 0 for w in self.workers])
        if spec.same_host and len({w["host"] for w in self.workers}) > 1:
            raise ConfigError("algorithm", f"{config.algorithm} needs every worker on one host (shared memory); "
                              f"these are on {sorted({w['host'] for w in self.workers})}", config.algorithm)
        data = _dataset(config)
        model = make_model(config.model, data.n_features, data.n_classes, hidden=config.model_hidden,
                           image_shape=data.image_shape)
        plan = make_plan(config, data.n_train)  # validates the schedule before anything starts
        params0 = model.init(config.seed)
        self.control = EventControl(self.run_id, client=client)
        comm = choose_comm(config, self.workers) if spec.needs_comm else None
        groups = spec.comm_groups(config, size)
        t_setup = time.time()
        run_info: dict[str, Any] = {
            "run_id": self.run_id, "topic": self.topic, "config": config.to_dict(), "size": size,
            "kinds": [w["kind"] for w in self.workers], "comm": comm, "n_params": model.n_params,
            "segments": {}, "t0_wall": t_setup, "groups": groups, "extra": spec.extra(config, size) if spec.extra else {},
        }
        addr0 = self.workers[0]["address"]
        server = None
        server_kind = "actor" if spec.host is not None else None
        try:
            for gi, ranks in enumerate(groups if comm else []):
                lead = self.workers[ranks[0]]["address"]
                if comm == "shm":
                    from ..comm.shm import allreduce_nbytes, create_segment
                    run_info["comm_elems"] = spec.comm_elems(model.n_params, size)
                    nbytes = allreduce_nbytes(len(ranks), run_info["comm_elems"])
                    self.segments[f"comm{gi}"] = client.submit(create_segment, f"wb{self.run_id}c{gi}", nbytes,
                                                               workers=[addr0], pure=False).result()
                elif comm == "dask":  # a ring over direct worker-to-worker connections
                    from ..comm.ring import install
                    run_info["addresses"] = [w["address"] for w in self.workers]
                    client.run(install, workers=[self.workers[r]["address"] for r in ranks])
                elif comm == "nccl":
                    from ..comm.nccl import unique_id
                    run_info.setdefault("nccl_id", []).append(
                        client.submit(unique_id, workers=[lead], pure=False).result())
            for name in spec.shared:
                self.segments[name] = client.submit(_create_shared, f"wb{self.run_id}{name[:1]}", params0,
                                                    workers=[addr0], pure=False).result()
            run_info["segments"] = dict(self.segments)
            if len({w["host"] for w in self.workers}) == 1 and platforms.shm_supported():  # start barrier in shm
                from ..comm.barrier import barrier_nbytes
                from ..comm.shm import create_segment
                self.segments["start"] = client.submit(create_segment, f"wb{self.run_id}b", barrier_nbytes(size),
                                                       workers=[addr0], pure=False).result()
                run_info["start_segment"] = self.segments["start"]
            if spec.server is not None:
                options = spec.server(config)
                one_host = len({w["host"] for w in self.workers}) == 1
                if (one_host and config.comm in ("auto", "shm") and getattr(spec.cls, "shm_server", True)
                        and platforms.shm_supported()):
                    # One host: a shared-memory server under a file lock, no event-loop round trip.
                    from ..comm.shm import create_server_segment
                    self.segments["server"] = client.submit(
                        create_server_segment, f"wb{self.run_id}s", params0, options["momentum"] > 0,
                        workers=[addr0], pure=False).result()
                    self.lock_path = os.path.join(tempfile.gettempdir(), f"workbench-{self.run_id}.lock")
                    run_info["server_shm"] = {"segment": self.segments["server"], "lock": self.lock_path,
                                              "options": options}
                    server_kind = "shm"
                else:
                    from ..comm.dask import ServerActor
                    server = self._actor(ServerActor, params0, size=size, where=addr0, **options)
                    server_kind = "actor"
            if spec.host is not None:
                hs = spec.host(config, size, model, params0)
                one_host = len({w["host"] for w in self.workers}) == 1
                if hs.get("shm") and one_host and config.comm in ("auto", "shm") and platforms.shm_supported():
                    # One host: the master in shared memory, updated by the workers themselves.
                    sh = hs["shm"]
                    self.segments["master"] = client.submit(sh["create"], f"wb{self.run_id}m", *sh["args"],
                                                            workers=[addr0], pure=False).result()
                    self.lock_path = os.path.join(tempfile.gettempdir(), f"workbench-{self.run_id}.lock")
                    run_info["host_shm"] = {"cls": sh["cls"], "kwargs": {
                        **sh["kwargs"], "segment": self.segments["master"], "lock_path": self.lock_path}}
                    server_kind = "shm"
                else:
                    cpus = [w["address"] for w in self.workers if w["kind"] == "cpu"]
                    where = cpus[0] if hs.get("prefer") == "cpu" and cpus else addr0
                    server = self._actor(hs["actor"], *hs["args"], where=where, **hs["kwargs"])
                    run_info["proxy"] = hs["proxy"]
                    run_info["host_address"] = where
            client.subscribe_topic(self.topic, lambda event: self.records.put(event[1]))
            self.control.start_lease()  # loops on an external cluster end when this client goes away
            run_info["t0_wall"] = t0 = time.time()
            futures = [client.submit(_worker_main, run_info, rank, w["address"], server,
                                     workers=[w["address"]], allow_other_workers=False, pure=False,
                                     key=f"workbench-loop-{self.run_id}-{rank}")
                       for rank, w in enumerate(self.workers)]
            self.server, self.run_info = server, run_info
            status, params, extra = self._monitor(futures, t0)
        finally:
            self._cleanup()
        end = time.time()
        wall = end - run_info["t0_wall"]
        t_zero = self.collector.t_zero()
        extra.update({"comm": comm, "server": server_kind, "run_id": self.run_id,
                      "setup_s": run_info["t0_wall"] - t_setup,
                      # from run() to the first training step: never booked as compute, comm or wait
                      "startup_s": (t_zero if t_zero is not None else end) - self.t_called})
        # An algorithm with its own plan (LTFB trainers) has already reported these.
        extra.setdefault("total_steps_planned", plan.total_steps)
        extra.setdefault("lr_schedule", plan.schedule_text)
        return build_result(config.to_dict(), self.collector, status=status, wall_time_s=wall,
                            workers=[_public(w, rank) for rank, w in enumerate(self.workers)],
                            extra=extra, params=params)

    def _actor(self, cls: type, *args: Any, where: str, **kwargs: Any) -> Any:
        """Start an actor on one worker; its future is kept until clean-up, since the
        scheduler forgets an actor (and its state) once nobody holds the future."""
        future = self.client.submit(cls, *args, **kwargs, actor=True, workers=[where], pure=False)
        self.actors.append(future)
        return future.result()

    # ------------------------------------------------------------------ monitoring
    def _drain(self, done: set) -> None:
        while True:
            try:
                batch = self.records.get_nowait()
            except queue.Empty:
                break
            self.collector.add_live(batch)
            if batch.get("done"):
                done.add(int(batch["rank"]))

    def _now(self) -> float:
        """The client's clock for its own events: seconds since the run's first step."""
        t_zero = self.collector.t_zero()
        return time.time() - t_zero if t_zero is not None else 0.0

    def _monitor(self, futures: list, t0: float) -> tuple[str, Any, dict]:
        client, spec = self.client, self.spec
        done: set[int] = set()
        lost: dict[int, str] = {}
        results: dict[int, dict] = {}
        stop_asked, next_liveness = False, 0.0
        addresses = [w["address"] for w in self.workers]
        stop_deadline = None
        try:
            while True:
                self._drain(done)
                if client.status != "running" and self._alive() is None:  # lost its scheduler
                    self._scheduler_gone(t0)
                    break
                if not stop_asked and self.should_stop is not None and self.should_stop():
                    stop_asked, stop_deadline = True, time.time() + STOP_GRACE_S
                    self.control.request_stop("stop requested")
                    self.collector([event_record(self._now(), "stop_requested", None, "stop requested by the user")])
                # Fetch each loop's result as soon as it is there, while its worker is alive:
                # a result left on a worker that dies later is rescheduled, and waits forever.
                for i, f in enumerate(futures):
                    if client.status != "running":
                        break  # futures of a client without its scheduler are cancelled, not lost
                    if f.done() and i not in results and i not in lost:
                        got = self._result(f, i)
                        if got is None:
                            self._lost(i, futures, lost, t0)
                        else:
                            results[i] = got
                pending = [i for i, f in enumerate(futures) if not f.done() and i not in lost]
                if not pending:
                    break
                if time.time() >= next_liveness:
                    next_liveness = time.time() + LIVENESS_S
                    alive = self._alive()
                    if alive is None:  # the scheduler is gone: nothing more will come
                        self._scheduler_gone(t0)
                        break
                    for rank, addr in enumerate(addresses):
                        if rank not in lost and rank not in results and addr not in alive:
                            self._lost(rank, futures, lost, t0, alive)
                if stop_deadline is not None and time.time() > stop_deadline + 5 * STOP_GRACE_S:
                    client.cancel(futures)  # loops ignored the stop request: do not hang
                    break
                time.sleep(MONITOR_S)
        except KeyboardInterrupt:
            stop_asked = True
            with contextlib.suppress(Exception):
                self.control.request_stop("KeyboardInterrupt")
            self.collector([event_record(self._now(), "stop_requested", None, "KeyboardInterrupt")])
            deadline = time.time() + STOP_GRACE_S * 3
            while time.time() < deadline and not all(f.done() for i, f in enumerate(futures) if i not in lost):
                self._drain(done)
                time.sleep(MONITOR_S)
        # Gather what the loops returned; a failed loop still leaves its streamed records.
        for rank, f in enumerate(futures):
            if self.scheduler_lost:
                break
            if rank not in lost and rank not in results and f.done():
                got = self._result(f, rank)
                if got is None:
                    self._lost(rank, futures, lost, t0)
                else:
                    results[rank] = got
        expected = {r for r in results if results[r].get("status") != "rescheduled"}
        deadline = time.time() + (0 if self.scheduler_lost else DONE_TIMEOUT_S)
        while not expected <= done and time.time() < deadline:
            time.sleep(MONITOR_S)
            self._drain(done)
        self._drain(done)
        for rank, res in results.items():   # every step of each loop that returned
            if res.get("steps") is not None:
                self.collector.add_steps(rank, res["steps"])
            if res.get("started") is not None:
                self.collector.started.setdefault(rank, res["started"])
        statuses = {r: res.get("status") for r, res in results.items()}
        if (lost and spec.cls.sync) or self.scheduler_lost:
            status = "failed"
        elif "diverged" in statuses.values() or self._any_event("diverged"):
            status = "diverged"
        elif stop_asked or "stopped" in statuses.values():
            status = "stopped"
        elif "failed" in statuses.values():
            status = "failed"
        else:
            status = "completed"
        errors = {str(r): res["error"] for r, res in results.items() if res.get("error")}
        params = results.get(0, {}).get("params")
        extra: dict[str, Any] = {"lost_workers": {str(r): a for r, a in lost.items()}}
        if errors:
            extra["errors"] = errors
        for res in results.values():
            extra.update(res.get("summary", {}))
        return status, params, extra

    def _result(self, future: Any, rank: int) -> dict | None:
        """One loop's returned dict; None when its worker died (the result is unreachable)."""
        from distributed import KilledWorker
        try:
            return future.result(timeout=RESULT_TIMEOUT_S)
        except (TimeoutError, KilledWorker):
            return None
        except Exception as exc:  # the loop raised; its traceback was streamed as an event
            if self.workers[rank]["address"] not in (self._alive() or set()):
                return None
            return {"status": "failed", "params": None, "error": f"{type(exc).__name__}: {exc}",
                    "steps": getattr(exc, "workbench_steps", None)}

    def _lost(self, rank: int, futures: list, lost: dict, t0: float, alive: set | None = None) -> None:
        """Record a lost worker; sync runs abort their collectives, async ones go on."""
        addr, name = self.workers[rank]["address"], self.workers[rank]["name"]
        lost[rank] = addr
        self.collector([event_record(self._now(), "worker_lost", rank,
                                     f"worker {rank} ({name}, {addr}) was lost at {self._now():.1f}s")])
        with contextlib.suppress(Exception):
            self.client.cancel(futures[rank])
        if self.spec.cls.sync:
            with contextlib.suppress(Exception):  # a scheduler that is gone too cannot pass it on
                self.control.abort(f"worker {rank} lost")
        else:
            alive = alive if alive is not None else (self._alive() or set())
            self._release_start(rank, alive)
            self._retire(rank, alive)

    def _release_start(self, rank: int, alive: set) -> None:
        """A lost worker of an asynchronous run no longer holds the others at the start."""
        if "start" not in self.segments:
            return
        from ..comm.barrier import release_shm_barrier
        with contextlib.suppress(Exception):
            survivor = next(w["address"] for w in self.workers if w["address"] in alive)
            self.client.run(release_shm_barrier, self.segments["start"], rank, len(self.workers),
                            workers=[survivor])

    def _retire(self, rank: int, alive: set) -> None:
        """A lost worker of an asynchronous run gives up its round-robin turns, so that
        the others are not left waiting for it (original EASGD)."""
        with contextlib.suppress(Exception):
            if self.server is not None and self.spec.server is not None:
                self.server.retire(rank).result(timeout=10)
            elif self.run_info.get("server_shm"):
                s = self.run_info["server_shm"]
                survivor = next(w["address"] for w in self.workers if w["address"] in alive)
                # Client.run, not submit: the survivor's only thread is busy training.
                self.client.run(_shm_retire, s["segment"], s["lock"], self.run_info["n_params"],
                                self.run_info["size"], rank, s["options"], workers=[survivor])

    def _any_event(self, name: str) -> bool:
        return any(e.get("event") == name for e in self.collector.rows.get("event", []))

    def _alive(self) -> set | None:
        """Addresses of the live workers; None once the scheduler is gone (a failed ask
        while the client's connection is down, or five failed asks in a row, each bounded)."""
        try:
            alive = set(self.client.nthreads(callback_timeout=LIVENESS_TIMEOUT_S))
            self._alive_failures = 0
            return alive
        except Exception as exc:
            self._alive_failures += 1
            self.scheduler_error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            # Gone: the client lost its connection, or the scheduler has not answered for
            # ~10 s (a loaded machine can delay one answer past the timeout, not five).
            if self.client.status != "running" or self._alive_failures >= 5:
                return None
            return set(self.workers[r]["address"] for r in range(len(self.workers)))

    def _scheduler_gone(self, t0: float) -> None:
        self.scheduler_lost = True
        self.collector([event_record(self._now(), "scheduler_lost", None,
                                     f"the scheduler at {self._address()} was lost at {self._now():.1f}s "
                                     f"({self.scheduler_error or 'connection closed'}); the run cannot go on")])

    def _address(self) -> str:
        return str(getattr(self.client, "scheduler", None) and self.client.scheduler.address)

    def _cleanup(self) -> None:
        """Free what the run made, whoever is left: the lease, the topic, shared-memory
        segments and the lock file. Never waits on a dead worker or a dead scheduler:
        on this host the client removes segments and lock files itself; a live owner
        (worker 0) is also asked to drop its mapping, with a short timeout."""
        from ..comm.shm import unlink_segment
        control = getattr(self, "control", None)
        if control is not None:
            control.end_lease(scheduler_alive=not self.scheduler_lost)
        alive: set = set()
        if not self.scheduler_lost:
            with contextlib.suppress(Exception):
                self.client.unsubscribe_topic(self.topic)
            alive = self._alive() or set()
        workers = getattr(self, "workers", None) or []
        addr0 = workers[0]["address"] if workers else None
        here = socket.gethostname()
        local = bool(workers) and workers[0]["host"] == here
        for name in self.segments.values():
            if addr0 in alive:
                with contextlib.suppress(Exception):
                    self.client.submit(unlink_segment, name, workers=[addr0], pure=False).result(timeout=CLEANUP_S)
            if local:
                _unlink_shm_name(name)
                if addr0 not in alive and getattr(self.client, "cluster", None) is not None:
                    _untrack(name)  # its dead creator shared our resource tracker: no "leaked" warning
            elif addr0 not in alive:
                self._on_survivor(_unlink_shm_name, name, alive, host=workers[0]["host"])
        lock = getattr(self, "lock_path", None)
        if lock:
            if local:
                _remove_file(lock)
            else:
                self._on_survivor(_remove_file, lock, alive, host=workers[0]["host"])
        self.actors.clear()

    def _on_survivor(self, fn: Callable, arg: str, alive: set, host: str) -> None:
        """Run fn(arg) on a live worker of `host` (Client.run: its thread may be busy)."""
        survivors = [w["address"] for w in self.workers if w["address"] in alive and w["host"] == host]
        if survivors:
            with contextlib.suppress(Exception):
                self.client.run(fn, arg, workers=survivors[:1], callback_timeout=CLEANUP_S)


def _untrack(name: str) -> None:
    """Tell this process's resource tracker (which our local workers share) that a
    segment whose creator died has been freed."""
    with contextlib.suppress(Exception):
        from multiprocessing import resource_tracker
        resource_tracker.unregister("/" + name.lstrip("/"), "shared_memory")


def _unlink_shm_name(name: str) -> None:
    """Remove a POSIX shared-memory name (mappings still open elsewhere stay valid)."""
    with contextlib.suppress(FileNotFoundError, OSError):
        os.unlink(os.path.join("/dev/shm", name.lstrip("/")))


def _create_shared(name: str, params: np.ndarray) -> str:
    """Create a shared segment holding a copy of `params` (runs on worker 0)."""
    from ..comm.shm import SharedArray, create_segment
    seg = create_segment(name, params.nbytes)
    arr = SharedArray(seg, params.shape[0], params.dtype)
    arr.array[:] = params
    return seg


def _shm_retire(segment: str, lock: str, n: int, size: int, rank: int, options: dict) -> None:
    """Runs on a surviving worker: retire a lost rank on the shared-memory server."""
    from ..comm.shm import ShmServer
    server = ShmServer(segment, lock, n, size, **options)
    try:
        server.retire(rank)
    finally:
        server.close()


def _remove_file(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)


def _public(worker: dict, rank: int) -> dict:
    return {"rank": rank, "name": worker["name"], "kind": worker["kind"], "host": worker["host"],
            "address": worker["address"], "device": worker.get("device")}


# ------------------------------------------------------------------------------ threads
class _LocalArray:
    """A plain array standing in for a shared-memory one (threads share memory anyway)."""

    def __init__(self, array: np.ndarray):
        self.array = array

    def close(self) -> None:
        pass


def run_threads(config: RunConfig, on_record: OnRecord | None = None,
                should_stop: Callable[[], bool] | None = None, kinds: list[str] | None = None) -> RunResult:
    """Run the algorithm's loops as threads of this process (no Dask): the same maths,
    in-process communication. `kinds` lets tests stand CPU workers in for GPU ones."""
    from ..comm.barrier import ThreadStartBarrier
    from ..comm.threads import ThreadGroup, ThreadServer

    spec = REGISTRY[config.algorithm]
    size = config.cpus + (config.gpus if isinstance(config.gpus, int) else 0)
    kinds = kinds or ["cpu"] * size
    data = _dataset(config)
    model = make_model(config.model, data.n_features, data.n_classes, hidden=config.model_hidden,
                       image_shape=data.image_shape)
    plan = make_plan(config, data.n_train)
    params0 = model.init(config.seed)
    control = ThreadControl()
    groups = spec.comm_groups(config, size)
    thread_groups = [ThreadGroup(len(ranks), control) for ranks in groups] if spec.needs_comm else []
    server = ThreadServer(ServerCore(params0, size=size, **spec.server(config))) if spec.server else None
    if spec.host is not None:
        hs = spec.host(config, size, model, params0)
        server = hs["thread"](*hs["args"], **hs["kwargs"])
    shared = {name: _LocalArray(params0.copy()) for name in spec.shared}
    collector = Collector(on_record)
    lock = threading.Lock()

    def emit(batch: dict) -> None:
        with lock:
            collector.add_live(batch)

    t0 = time.time()
    results: dict[int, dict] = {}
    extra_setup = spec.extra(config, size) if spec.extra else {}
    start = ThreadStartBarrier(size, control)

    def work(rank: int) -> None:
        gi, ranks = _my_group(groups, rank)
        comm = thread_groups[gi].comm(ranks.index(rank)) if thread_groups else None
        ctx = build_context(config, rank, size, kinds[rank], comm=comm, server=server, shared=shared,
                            control=control, emit=emit, t0_wall=t0,
                            extra=dict(extra_setup, group=gi, group_ranks=ranks), start_barrier=start.for_rank(rank))
        try:
            results[rank] = _loop(ctx)
        except Exception as exc:
            results[rank] = {"status": "failed", "params": None, "error": f"{type(exc).__name__}: {exc}",
                             "steps": getattr(exc, "workbench_steps", None)}
            control.abort(str(exc))

    threads = [threading.Thread(target=work, args=(r,), name=f"workbench-{r}", daemon=True) for r in range(size)]
    for t in threads:
        t.start()
    stop_asked = False
    try:
        while any(t.is_alive() for t in threads):
            if not stop_asked and should_stop is not None and should_stop():
                stop_asked = True
                control.request_stop("stop requested")
            time.sleep(MONITOR_S)
    except KeyboardInterrupt:
        stop_asked = True
        control.request_stop("KeyboardInterrupt")
        for t in threads:
            t.join(timeout=STOP_GRACE_S * 3)
    statuses = [r.get("status") for r in results.values()]
    if "failed" in statuses:
        status = "failed"
    elif "diverged" in statuses:
        status = "diverged"
    elif stop_asked or "stopped" in statuses:
        status = "stopped"
    else:
        status = "completed"
    extra: dict[str, Any] = {"comm": "threads", "total_steps_planned": plan.total_steps,
                             "lr_schedule": plan.schedule_text}
    errors = {str(r): res["error"] for r, res in results.items() if res.get("error")}
    if errors:
        extra["errors"] = errors
    for rank, res in results.items():
        extra.update(res.get("summary", {}))
        if res.get("steps") is not None:
            collector.add_steps(rank, res["steps"])
    t_zero = collector.t_zero()
    extra["startup_s"] = (t_zero if t_zero is not None else time.time()) - t0
    workers = [{"rank": r, "name": f"thread-{r}", "kind": kinds[r], "host": "localhost"} for r in range(size)]
    return build_result(config.to_dict(), collector, status=status, wall_time_s=time.time() - t0,
                        workers=workers, extra=extra, params=results.get(0, {}).get("params"))
