"""The worker side of the Dask transport: the one task each worker runs (`worker_task`) and
the links it opens from the picklable `DaskPlan` (collective, server role, shared arrays, start
barrier). Runs in the Dask worker processes; the client side is `transports.dask`."""
from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...config import RunConfig
from ...util.blas import blas_limit
from .base import WorkerLinks, failed_loop, group_of
from .segments import remove_file, unlink_shm_name


@dataclass
class DaskPlan:
    """What every loop needs to open its links (travels with the task)."""

    run_id: str
    topic: str
    config: dict
    kinds: list[str]
    groups: list[list[int]]
    n_params: int
    extra: dict
    t0_wall: float = 0.0
    comm: str | None = None                 # "shm" | "dask" | "nccl" | None
    comm_elems: int = 0
    addresses: list[str] = field(default_factory=list)
    nccl_ids: list[tuple] = field(default_factory=list)
    segments: dict[str, str] = field(default_factory=dict)   # comm<g> / shared arrays -> segment name
    start_segment: str | None = None
    row_rings: list[str] = field(default_factory=list)   # rank -> its ring of step rows to the client (one host)
    server: str | None = None               # "shm" | "shm_master" | "shm_table" | "actor" | "actor_master"
    role: str | None = None                 # the declared server role (its core's ops: roles.role_core)
    server_options: dict = field(default_factory=dict)
    server_segment: str | None = None
    lock_path: str | None = None
    model_code: tuple | None = None         # the user's model, shipped by value (usercode.shipment)

    @property
    def size(self) -> int:
        return len(self.kinds)


# A worker's latest states for a checkpoint, kept here until the client fetches them
# (`take_state`): a state is megabytes, and the live batches' route (Worker.log_event)
# passes through the scheduler, which keeps what it passes on in its event log. The last
# `KEPT_STATES` are kept, so a client still fetching one checkpoint's states when the next
# is taken (steps of a millisecond, a busy machine) still finds them. They outlive the
# loop's task: its last notes may reach the client after the loop ended (live batches leave
# a few times a second), the state where a loop ended ("stopped", "ended") is fetched only if
# the run was stopped, and the client forgets what is left when the run closes
# (`forget_states`); a loop whose client is gone drops them itself.
_STATES: dict[tuple[str, int], dict[int, dict]] = {}
_HELD_TAGS = (None, "stopped", "ended")
KEPT_STATES = 2


def keep_state(key: tuple[str, int], batch: dict) -> None:
    """Keep one state batch for the client, dropping the oldest beyond `KEPT_STATES`.

    >>> _STATES.clear()
    >>> for step in (16, 32, 48):
    ...     keep_state(("run", 0), {"step": step, "state": {}})
    >>> sorted(_STATES[("run", 0)])
    [32, 48]
    """
    kept = _STATES.setdefault(key, {})
    kept[int(batch["step"])] = batch
    while len(kept) > KEPT_STATES:
        del kept[min(kept)]


def take_state(run_id: str, rank: int, step: int) -> dict | None:
    """Runs on the worker (`Client.run`): the state `rank` kept for `step`, handed over once."""
    kept = _STATES.get((run_id, rank), {})
    held = kept.pop(int(step), None)
    if not kept:
        _STATES.pop((run_id, rank), None)
    return None if held is None else held["state"]


def forget_states(run_id: str) -> int:
    """Runs on the worker (`Client.run`) when a run closes: drop the states its loops left
    here that nobody fetched; returns how many."""
    keys = [k for k in _STATES if k[0] == run_id]
    return sum(len(_STATES.pop(k)) for k in keys)


def worker_task(main: Callable[..., dict], plan: DaskPlan | bytes, rank: int, address: str, actor: Any = None,
                resume: bytes | None = None) -> dict:
    """A Dask task: one worker's whole training loop (`main`: the engine's `worker_main`).

    `plan` may come pickled: it is then unpacked here, so that a failure to unpack it is
    this task's error, reported to the client, not a fault in Dask's own unpacking (which
    closes the worker and leaves only "lost")."""
    from distributed import get_worker

    worker = get_worker()
    if worker.address != address:  # rescheduled after its worker died: not ours to run
        return {"status": "rescheduled", "params": None}
    import pickle
    try:
        if isinstance(plan, bytes):
            plan = pickle.loads(plan)   # noqa: S301 - the client's own plan, over the cluster's connection
        state = pickle.loads(resume) if resume is not None else None   # noqa: S301 - likewise
    except Exception as exc:
        return {"status": "failed", "params": None, "steps": None,
                "error": f"unpacking its task failed: {type(exc).__name__}: {exc}"}
    from ... import usercode
    usercode.receive(plan.model_code)   # before the config names it: the model the client shipped
    links = open_links(plan, rank, actor)
    key = (plan.run_id, rank)

    def sink(batch: dict) -> None:
        if batch.get("kind") == "state" and batch.get("tag") in _HELD_TAGS:   # kept here; the client fetches it
            keep_state(key, batch)                                               # (`take_state`)
            batch = {k: v for k, v in batch.items() if k != "state"} | {"held": True}
        elif batch.get("kind") == "state":   # an elastic run regroups from it, after this task ends: it travels,
            batch = {k: v for k, v in batch.items() if k != "state"} | {"packed": pickle.dumps(batch["state"])}
            #   pickled (an event's fields must be plain data)
        worker.log_event(plan.topic, batch)   # a few compact batches a second, never one per step

    config = RunConfig.from_dict(plan.config)
    status = "failed"
    try:
        with blas_limit(config.blas_threads):   # the run's own count, whatever the last run set
            result = main(config, rank, plan.kinds, plan.groups, plan.extra, plan.t0_wall, links, sink,
                          resume=state)
        status = result.get("status") if isinstance(result, dict) else None
        return result
    except Exception as exc:
        if hasattr(exc, "workbench_steps"):   # the loop's own error, its traceback already an event: raised to
            return failed_loop(exc)           # Dask, every worker's log printed it again ("Compute Failed")
        raise                                 # (set-up: Dask's log is where its traceback is)
    finally:
        control = links.control.control
        orphaned = getattr(control, "lease_expired", False)   # no client left to fetch or forget it
        if rank == 0 and not orphaned and status == "failed" and getattr(control, "client", True) is None:
            orphaned = control.client_vanished()   # a peer saw the lease lapse first and aborted: ask it ourselves
        if orphaned:   # no client left to fetch or forget them
            _STATES.pop(key, None)
        links.close()
        if rank == 0 and orphaned:
            _orphaned(plan)


def open_links(plan: DaskPlan, rank: int, actor: Any = None) -> WorkerLinks:
    """This worker's links, from the plan (runs on the worker)."""
    from ...comm.base import ThrottledControl
    from ...comm.dask import EventControl
    from ...comm.shm import SharedArray
    size = plan.size
    word = None
    if plan.start_segment:   # one host: the stop word in shared memory, read at every step
        from ...comm.barrier import ShmStopWord
        word = ShmStopWord(plan.start_segment, size)
    control = ThrottledControl(EventControl(plan.run_id), word=word)
    links = WorkerLinks(control=control)
    links.closers.append(control.close)
    if plan.row_rings:   # the client is on this host: step rows go to it through shared memory
        from ...comm.rowring import open_writer
        links.rows = open_writer(plan.row_rings[rank])
        if links.rows is not None:
            links.closers.append(links.rows.close)
    gi, ranks = group_of(plan.groups, rank)
    grank, gsize = ranks.index(rank), len(ranks)
    if plan.comm == "shm":
        from ...comm.shm import ShmComm
        links.comm = ShmComm(plan.segments[f"comm{gi}"], grank, gsize, plan.comm_elems, control=control)
    elif plan.comm == "dask":
        from ...comm.ring import RingComm
        links.comm = RingComm(f"{plan.run_id}/{gi}", grank, gsize, [plan.addresses[r] for r in ranks],
                              control=control)
    elif plan.comm == "nccl":
        from ...comm.nccl import NcclComm
        links.comm = NcclComm(plan.nccl_ids[gi], grank, gsize)
    if links.comm is not None:
        links.closers.append(links.comm.close)
    links.shared = {name: SharedArray(seg, plan.n_params) for name, seg in plan.segments.items()
                    if not name.startswith("comm")}
    links.closers += [s.close for s in links.shared.values()]
    if plan.server == "actor":
        from ...comm.dask import ActorServerProxy
        from ...comm.roles import role_core
        links.server = ActorServerProxy(actor, control, ops=role_core(plan.role).OPS)
    elif plan.server == "actor_master":
        from ...comm.dask import ChunkMasterProxy
        links.server = ChunkMasterProxy(actor, control, plan.server_options["weight_return"])
    elif plan.server == "shm":
        from ...comm.shm import ShmServer
        links.server = ShmServer(plan.server_segment, plan.lock_path, plan.n_params, size, control=control,
                                 **plan.server_options)
    elif plan.server == "shm_table":
        from ...comm.shm import ShmModelTable
        links.server = ShmModelTable(plan.server_segment, plan.lock_path, plan.n_params, size, control=control)
    elif plan.server == "shm_master":
        from ...comm.shm import ShmChunkMaster
        links.server = ShmChunkMaster(plan.server_segment, plan.lock_path, rank, size, n=plan.n_params,
                                      control=control, **plan.server_options)
    if hasattr(links.server, "close"):
        links.closers.append(links.server.close)
    links.start_barrier = _start_barrier(plan, rank, control, links.comm)
    if hasattr(links.start_barrier, "close"):
        links.closers.append(links.start_barrier.close)
    return links


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


def _start_barrier(plan: DaskPlan, rank: int, control: Any, comm: Any) -> Any:
    """This worker's start barrier: shared memory on one host, Dask events across hosts."""
    from ...comm.barrier import EventStartBarrier, ShmStartBarrier
    if plan.start_segment:
        return ShmStartBarrier(plan.start_segment, rank, plan.size, control=control)
    return _StartThenComm(EventStartBarrier(plan.run_id, rank, plan.size, control=control), comm)


def _orphaned(plan: DaskPlan) -> None:
    """Worker 0, after its client vanished: free the run's segments and lock file, and
    remove its Events, Variables and topics from the scheduler (`EventControl.forget`),
    which the client would have done (nobody else will)."""
    from ...comm.dask import EventControl
    from ...comm.shm import unlink_segment
    EventControl(plan.run_id).forget(0 if plan.start_segment else plan.size, topics=(plan.topic,), variables=True)
    names = list(plan.segments.values()) + [s for s in (plan.start_segment, plan.server_segment) if s] \
        + list(plan.row_rings)
    for name in names:
        with contextlib.suppress(Exception):
            unlink_segment(name)
        unlink_shm_name(name)
    if plan.lock_path:
        remove_file(plan.lock_path)
