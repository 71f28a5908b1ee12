"""The Dask transport: one long-lived loop per Dask worker process, on one or several hosts.

Client side (`DaskTransport`): picks the workers (GPU ones first), builds what the
algorithm declared it needs, then submits ONE task per worker (`client.submit` pinned to
it; never a task per minibatch: a task round trip costs more than a minibatch here).
Records stream back through `Worker.log_event` -> `Client.subscribe_topic`; stop and
abort travel as Dask Events (`comm.dask.EventControl`, with the client's lease so loops
on an external cluster end with their client).

What it provides for the declared needs:
* collective: shared memory on one host (`comm.shm.ShmComm`), NCCL between GPU-only
  workers (`comm.nccl`), else a ring over the workers' own connections (`comm.ring`);
* server role: in shared memory on one host (`comm.shm.ShmServer` / `ShmChunkMaster` /
  `ShmModelTable`,
  the workers update the role's core themselves under a file lock), else the core as a
  Dask actor (`comm.dask.ServerActor`; cgdp's on a CPU worker, behind `ChunkMasterProxy`);
  LTFB's mailbox is always an actor (a partner waits for the other's deposit);
* shared arrays: shared-memory segments (one host only);
* start barrier: shared memory on one host, Dask events across hosts.

Worker side (`transports.dask_worker`): `worker_task` opens those links from the picklable
`DaskPlan` and runs the engine's `worker_main` (handed in: transports never import the engine).
Segment and lock-file clean-up: `transports.segments`.
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from ... import usercode
from ...config import MODEL_NAMES, ConfigError, RunConfig
from ...data.dataset import DATASETS
from .. import platforms
from .base import Progress, RunSetup, Transport, choose_workers, failed_loop
from .dask_worker import DaskPlan, forget_states, worker_task
from .segments import create_shared, remove_file, shm_retire, unlink_shm_name, untrack

LIVENESS_S = 0.5          # how often the client checks that every worker is still there
RESULT_TIMEOUT_S = 30.0   # fetching a finished loop's result (rank 0's holds the parameters)
LIVENESS_TIMEOUT_S = 2.0  # bound on asking the scheduler which workers live (see _alive)
CLEANUP_S = 2.0           # each clean-up call on a live worker


def busy_note(worker: dict, keys: list[str], threads: int, shown: int = 2) -> str:
    """What a worker took on beside the run's loop after the run chose it, as its note says it
    (the monitor adds when).

    >>> busy_note({"name": "w0", "address": "tcp://h:1"}, ["sleep-a"], 2)
    'worker w0 (tcp://h:1) took on 1 task(s) not of this run (sleep-a), beside its loop on its 2 threads'
    """
    more = ", ..." if len(keys) > shown else ""
    return (f"worker {worker['name']} ({worker['address']}) took on {len(keys)} task(s) not of this run "
            f"({', '.join(keys[:shown])}{more}), beside its loop on its {threads} threads")


def waiting_note(worker: dict, keys: list[str], shown: int = 2) -> str:
    """What a run waits for on a busy worker, as its note says it.

    >>> waiting_note({"name": "w0", "address": "tcp://h:1"}, ["slow-a", "slow-b", "slow-c"])
    'worker w0 (tcp://h:1), busy with 3 task(s) already there (slow-a, slow-b, ...)'
    """
    more = ", ..." if len(keys) > shown else ""
    return (f"worker {worker['name']} ({worker['address']}), busy with {len(keys)} task(s) already there "
            f"({', '.join(keys[:shown])}{more})")


def choose_comm(config: RunConfig, workers: list[dict]) -> str:
    """shm on one host, NCCL between GPU-only workers (if asked or available), else Dask."""
    hosts = sorted({w["host"] for w in workers})
    one_host = len(hosts) == 1
    if config.comm == "shm" and not one_host:   # one host: one /dev/shm too (`platforms.host_key`)
        raise ConfigError("comm", f"shm only when every worker is on one host, sharing its /dev/shm (these are on "
                          f"{', '.join(hosts)}); auto or dask here", config.comm)
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
    from ...maths.backend import nccl
    try:
        nccl()
        return True
    except ImportError:
        return False


class DaskTransport(Transport):
    name = "dask"

    def __init__(self, client: Any, opened: bool = False):
        self.client = client
        self.opened = opened   # opened for this run (an address, a cluster object): closed by `let_go`
        self.segments: dict[str, str] = {}
        self.rings: dict[int, Any] = {}   # rank -> its ring of step rows, read here (one host: comm.rowring)
        self.actors: list[Any] = []
        self.futures: list[Any] = []
        self.actor: Any = None
        self.lock_path: str | None = None
        self.control: Any = None
        self.results: set[int] = set()
        self.lost: set[int] = set()
        self.gone = False
        self.scheduler_error, self._alive_failures, self._next_liveness = "", 0, 0.0
        self.plan: DaskPlan | None = None
        self.gone_addresses: set[str] = set()   # workers this run lost: never taken in again
        self._busy_at_choice: dict[str, list[str]] = {}   # each chosen worker's tasks when the run chose it
        self._nthreads: dict[str, int] = {}      # each live worker's threads, from the last liveness check
        self.busy_said: set[int] = set()         # ranks whose worker took on other work mid-run, said once

    # ------------------------------------------------------------------ set-up
    def choose(self, config: RunConfig) -> list[dict]:
        """The first workers by name (`choose_workers`) among those running this process's
        code, idle ones first; one of other code refuses the run only when the others are
        too few. A chosen worker still busy with tasks (another client's, on a shared
        cluster) is named in a note: the run's loop waits for them to end."""
        from ..cluster import other_code_error, workers_of
        others: list[str] = []
        available = workers_of(self.client, others=others)
        busy = self._busy()
        try:
            self.workers = choose_workers(available, config, busy=busy)
        except ConfigError as exc:
            if others and exc.field in ("cpus", "gpus"):   # too few: because of the ones of other code
                raise other_code_error(others[0]) from None
            raise
        if others:
            platforms.note_once(f"left out {len(others)} worker(s) of other code: {'; '.join(others)}")
        self._busy_at_choice = busy   # what was there already (the note below); what lands later: `_watch_others`
        waits = [waiting_note(w, busy[w["address"]]) for w in self.workers if busy.get(w["address"])]
        if waits:
            platforms.note_once(f"too few idle workers: the run waits for {'; '.join(waits)}")
        return self.workers

    def _busy(self) -> dict[str, list[str]]:
        """Each worker's tasks already on it (the scheduler's `processing`); {} if the
        scheduler does not answer in time (the run then takes the workers by name)."""
        try:
            got = self.client.sync(self.client.scheduler.processing, workers=None,
                                   callback_timeout=LIVENESS_TIMEOUT_S)
        except Exception:
            return {}
        return {addr: [str(k) for k in keys] for addr, keys in got.items() if keys}

    def again(self) -> DaskTransport:
        fresh = DaskTransport(self.client)
        fresh.gone_addresses = set(self.gone_addresses) | {self.workers[r]["address"] for r in self.lost}
        return fresh

    def newcomers(self, members: list[dict]) -> list[dict]:
        """Workers that joined the cluster since `members` were picked (a nanny's replacement
        of a lost worker too: it has a new address); a worker of other code is left out."""
        try:
            known = {w["address"] for w in members} | self.gone_addresses
            if not set(self.client.scheduler_info(n_workers=-1)["workers"]) - known:
                return []
            from ..cluster import workers_of
            return [w for w in workers_of(self.client) if w["address"] not in known and w["kind"] == "cpu"]
        except Exception:   # a worker of other code (ConfigError), a scheduler that is slow: none this time
            return []

    def check(self, setup: RunSetup) -> None:
        config, spec = setup.config, setup.spec
        if spec.needs.shared and not platforms.shm_supported():
            raise ConfigError("algorithm", f"{config.algorithm} shares one buffer in shared memory, which needs "
                              "fcntl and POSIX shared memory (Linux, macOS)", config.algorithm)
        from ..preflight import check_memory, check_shm, shm_free
        check_memory(config, workers_memory=[w.get("memory_limit") or 0 for w in self.workers])
        if config.model not in MODEL_NAMES:   # the user's model: shipped, or imported by name on the workers
            for w in {w["host"]: w for w in self.workers}.values():    # one worker per host tries
                why = self._on(usercode.reach, config.model, usercode.shipment(config.model), where=w["address"])
                if why is not None:
                    raise ConfigError("model", f"a model the workers can load (on {w.get('host')}: {why}; installed "
                                      "code must be installed there too, your own is shipped)", config.model)
        if config.dataset not in DATASETS:    # a file of the user's: every host's workers read it themselves
            from ...data.files import reach
            for w in {w["host"]: w for w in self.workers}.values():
                why = self._on(reach, config.dataset, config.test_fraction, config.label_column,
                               where=w["address"])
                if why is not None:
                    raise ConfigError("dataset", f"a file the workers can read (on {w.get('host')}: {why}; put it "
                                      "where every host sees it at the same path)", config.dataset)
        if len(setup.hosts) == 1:   # the segments go in the workers' host's /dev/shm: measured there, by
            w0 = self.workers[0]     # worker 0 (an external --scheduler, a Client the user handed to
            check_shm(config, setup.model, free=self._on(shm_free, where=w0["address"]),   # wb.run, or ours:
                      host=w0.get("host"))                                                 # preflight's too)

    def _on(self, fn: Callable, *args: Any, where: str) -> Any:
        return self.client.submit(fn, *args, workers=[where], pure=False).result()

    def _open_rings(self, run_id: str, size: int, addr0: str) -> list[str]:
        """One ring of step rows a worker, made by worker 0 as the run's other segments are
        (`close` frees them; worker 0 does if this client vanishes), where this client
        shares the workers' host (it reads back the token worker 0 wrote); [] elsewhere, or
        where shared memory is short: the rows then travel with the live batches."""
        from ...comm import rowring
        from ...results.records import ROW_FIELDS
        names = [f"wb{run_id}r{rank}" for rank in range(size)]
        self.segments.update((f"rows{rank}", name) for rank, name in enumerate(names))   # freed by `close`, made or not
        try:
            made = self._on(rowring.create_rings, names, rowring.CAPACITY, len(ROW_FIELDS), where=addr0)
        except Exception:   # no shared memory to spare there: the Dask route
            return []
        for rank, (name, token) in enumerate(made):
            ring = rowring.open_reader(name, token)
            if ring is None:    # not this client's host
                self._close_rings()
                return []
            self.rings[rank] = ring
        return names

    def live_rows(self) -> dict[int, dict]:
        """Every worker's step rows put in its ring since the last call, packed as a live
        batch's ({rank: {"n", "data"}}); {} without rings."""
        out = {}
        for rank, ring in self.rings.items():
            block = ring.take()
            if block is not None:
                out[rank] = {"n": block.shape[0], "data": block}
        return out

    def _close_rings(self) -> None:
        """Let go of this client's ends of the rings (`close` frees the segments with the others)."""
        for ring in self.rings.values():
            with contextlib.suppress(Exception):
                ring.close()
        self.rings = {}

    def prepare(self, setup: RunSetup) -> None:
        from ...comm.dask import EventControl
        client, config, spec, needs = self.client, setup.config, setup.spec, setup.spec.needs
        run_id, size = setup.run_id, setup.size
        self.control = EventControl(run_id, client=client)
        one_host = len(setup.hosts) == 1
        shm_ok = one_host and platforms.shm_supported()
        addr0 = self.workers[0]["address"]
        plan = DaskPlan(run_id=run_id, topic=f"workbench-{run_id}", config=config.to_dict(), kinds=setup.kinds,
                        groups=setup.groups, n_params=setup.n_params, extra=setup.extra,
                        model_code=usercode.shipment(config.model))
        self.plan = plan
        plan.comm = choose_comm(config, self.workers) if needs.collective else None
        from ...comm.shm import create_segment
        for gi, ranks in enumerate(setup.groups if plan.comm else []):
            lead = self.workers[ranks[0]]["address"]
            if plan.comm == "shm":
                from ...comm.shm import allreduce_nbytes
                plan.comm_elems = spec.comm_elems(setup.n_params, size)
                self.segments[f"comm{gi}"] = self._on(create_segment, f"wb{run_id}c{gi}",
                                                      allreduce_nbytes(len(ranks), plan.comm_elems), where=addr0)
            elif plan.comm == "dask":  # a ring over direct worker-to-worker connections
                from ...comm.ring import install
                plan.addresses = [w["address"] for w in self.workers]
                client.run(install, workers=[self.workers[r]["address"] for r in ranks])
            elif plan.comm == "nccl":
                from ...comm.nccl import unique_id
                plan.nccl_ids.append(self._on(unique_id, where=lead))
        for name in needs.shared:
            self.segments[name] = self._on(create_shared, f"wb{run_id}{name[:1]}", setup.params0, where=addr0)
        if shm_ok:   # the start barrier in shared memory
            from ...comm.barrier import barrier_nbytes
            plan.start_segment = self.segments["start"] = self._on(create_segment, f"wb{run_id}b",
                                                                   barrier_nbytes(size), where=addr0)
            plan.row_rings = self._open_rings(run_id, size, addr0)
        plan.segments = {k: v for k, v in self.segments.items() if k.startswith("comm") or k in needs.shared}
        role = plan.role = needs.server
        if role is not None:
            options = needs.options(config, setup.model)
            plan.server_options = options
            in_shm = shm_ok and config.comm in ("auto", "shm") and role != "tournament"
            if in_shm:   # created by worker 0, in its user's private directory (util.private)
                from ...util.private import create_lock
                self.lock_path = plan.lock_path = self._on(create_lock, run_id, where=addr0)
            if role == "cgdp_master" and in_shm:   # the master in shared memory, updated by the workers
                from ...comm.roles import chunk_master_args, role_state_spec
                from ...comm.shm import create_master_segment
                args = chunk_master_args(config, size, setup.model, setup.params0)
                plan.server_options = {k: v for k, v in args.items() if k not in ("params", "size")}
                plan.server_segment = self.segments["server"] = self._on(
                    create_master_segment, f"wb{run_id}m", setup.params0, size, len(args["groups"]),
                    role_state_spec(setup.n_params, **plan.server_options),
                    plan.server_options["weight_return"] == "chunks", where=addr0)
                plan.server = "shm_master"
            elif role == "cgdp_master":            # the generic actor, on a CPU worker if there is one
                from ...comm.dask import ServerActor
                from ...comm.roles import chunk_master_args
                cpus = [w["address"] for w in self.workers if w["kind"] == "cpu"]
                args = chunk_master_args(config, size, setup.model, setup.params0)
                plan.server_options = {k: v for k, v in args.items() if k not in ("params", "size")}
                self.actor = self._actor(ServerActor, role, plan.server_options, setup.params0, size,
                                         where=cpus[0] if cpus else addr0)
                plan.server = "actor_master"
            elif role == "pairwise" and in_shm:    # AD-PSGD's table of models: rows and log in a segment
                from ...comm.shm import create_table_segment
                plan.server_segment = self.segments["server"] = self._on(
                    create_table_segment, f"wb{run_id}t", setup.params0, size, where=addr0)
                plan.server = "shm_table"
            elif in_shm:   # one host: a shared-memory server under a file lock, no event-loop round trip
                from ...comm.roles import role_state_spec
                from ...comm.shm import create_server_segment
                plan.server_segment = self.segments["server"] = self._on(
                    create_server_segment, f"wb{run_id}s", setup.params0, role_state_spec(setup.n_params, **options),
                    where=addr0)
                plan.server = "shm"
            else:
                from ...comm.dask import ServerActor
                self.actor = self._actor(ServerActor, role, options, setup.params0, size, where=addr0)
                plan.server = "actor"

    def _actor(self, cls: type, *args: Any, where: str, **kwargs: Any) -> Any:
        """Start an actor on one worker; its future is kept until clean-up, since the
        scheduler forgets an actor (and its state) once nobody holds the future."""
        future = self.client.submit(cls, *args, **kwargs, actor=True, workers=[where], pure=False)
        self.actors.append(future)
        return future.result()

    def start(self, setup: RunSetup, sink: Callable[[dict], None], main: Callable[..., dict]) -> None:
        plan = self.plan
        self.client.subscribe_topic(plan.topic, lambda event: sink(event[1]))
        self.control.start_lease()  # loops on an external cluster end when this client goes away
        plan.t0_wall = setup.t0_wall
        from distributed.protocol.pickle import dumps
        packed = dumps(plan)   # Dask's pickling (cloudpickle where needed), unpacked by the task: its error is ours
        resumes = [None if setup.resume_of(r) is None else dumps(setup.resume_of(r)) for r in range(setup.size)]
        self.futures = [self.client.submit(worker_task, main, packed, rank, w["address"], self.actor, resumes[rank],
                                           workers=[w["address"]], allow_other_workers=False, pure=False,
                                           key=f"workbench-loop-{plan.run_id}-{rank}")
                        for rank, w in enumerate(self.workers)]

    # ------------------------------------------------------------------ monitoring
    def _describe(self, rank: int) -> str:
        return f"{self.workers[rank]['name']}, {self.workers[rank]['address']}"

    def poll(self) -> Progress:
        out = Progress()
        client = self.client
        if client.status != "running" and self._alive() is None:   # lost its scheduler
            return self._gone(out)
        # Fetch each loop's result as soon as it is there, while its worker is alive:
        # a result left on a worker that dies later is rescheduled, and waits forever.
        for rank, f in enumerate(self.futures):
            if client.status != "running":
                break  # futures of a client without its scheduler are cancelled, not lost
            if f.done() and rank not in self.results and rank not in self.lost:
                self._take(rank, f, out)
        if time.time() >= self._next_liveness and self.pending():
            self._next_liveness = time.time() + LIVENESS_S
            alive = self._alive()
            if alive is None:   # the scheduler is gone: nothing more will come
                return self._gone(out)
            for rank, w in enumerate(self.workers):
                if rank not in self.lost and rank not in self.results and w["address"] not in alive:
                    self._lose(rank, out)
            self._watch_others(out)
        return out

    def _watch_others(self, out: Progress) -> None:
        """Workers that took on other work since the run chose them (another client's task
        landing on a shared cluster mid-run), each said once in `out.busy`. What the scheduler
        exposes is which tasks a worker holds (`processing`: running or queued there) and its
        threads; it does not say which of them runs now. So a worker is named only where its
        threads leave room beside the run's loop (its one task there): with more threads than
        that, a task the run did not submit and that was not there at the choice gets a thread
        and runs beside the loop, sharing the worker's cores; with one thread it queues behind
        the loop and takes nothing from the run (not named). Bounded like the liveness check;
        skipped when the scheduler does not answer."""
        watched = {w["address"]: rank for rank, w in enumerate(self.workers)
                   if rank not in self.busy_said and rank not in self.lost and rank not in self.results
                   and self._nthreads.get(w["address"], 1) > 1}
        if not watched:   # (the local cluster's workers have one thread each: no call a check)
            return
        try:
            got = self.client.sync(self.client.scheduler.processing, workers=list(watched),
                                   callback_timeout=LIVENESS_TIMEOUT_S)
        except Exception:
            return
        mine = {str(k) for k in self.client.futures}   # this client's (the run's loops among them)
        for addr, keys in got.items():
            rank = watched.get(addr)
            threads = self._nthreads.get(addr, 1)
            if rank is None:
                continue
            before = set(self._busy_at_choice.get(addr, []))
            others = [str(k) for k in keys if str(k) not in mine and str(k) not in before]
            if others:
                self.busy_said.add(rank)
                out.busy[rank] = busy_note(self.workers[rank], others, threads)

    def _gone(self, out: Progress) -> Progress:
        self.gone = True
        out.gone = f"the scheduler at {self._address()}"
        out.why = self.scheduler_error or "connection closed"
        return out

    def _take(self, rank: int, future: Any, out: Progress) -> None:
        got = self._result(future, rank)
        if got is None:
            self._lose(rank, out)
        else:
            self.results.add(rank)
            out.results[rank] = got

    def _lose(self, rank: int, out: Progress) -> None:
        self.lost.add(rank)
        self.gone_addresses.add(self.workers[rank]["address"])
        out.lost[rank] = self._describe(rank)
        with contextlib.suppress(Exception):
            self.client.cancel(self.futures[rank])

    def _result(self, future: Any, rank: int) -> dict | None:
        """One loop's returned dict; None when its worker died (the result is unreachable).
        A dead worker's task is rescheduled (pinned to its address, it waits for good):
        asked only while the worker lives, so a lost worker is known at once, not after
        RESULT_TIMEOUT_S."""
        from distributed import KilledWorker
        if future.status != "finished" and self.workers[rank]["address"] not in (self._alive() or set()):
            return None
        try:
            return future.result(timeout=RESULT_TIMEOUT_S)
        except (TimeoutError, KilledWorker):
            return None
        except Exception as exc:  # the loop raised; its traceback was streamed as an event
            if self.workers[rank]["address"] not in (self._alive() or set()):
                return None
            return failed_loop(exc)

    def fetch_state(self, rank: int, step: int) -> dict | None:
        """The state `rank` keeps for `step` (`dask_worker.take_state`, on its worker)."""
        from .dask_worker import take_state
        address = self.workers[rank]["address"]
        try:
            got = self.client.run(take_state, self.plan.run_id, rank, step, workers=[address])
        except Exception:   # the worker is gone (or going): no state from it
            return None
        return got.get(address)

    def pending(self) -> set[int]:
        return {r for r, f in enumerate(self.futures)
                if r not in self.lost and r not in self.results and not f.done()} if not self.gone else set()

    def finish(self) -> Progress:
        """The loops that ended but were not fetched yet (none once the scheduler is gone)."""
        out = Progress()
        for rank, f in enumerate(self.futures):
            if self.gone:
                break
            if rank not in self.lost and rank not in self.results and f.done():
                self._take(rank, f, out)
        return out

    def _write_word(self, fn: Callable[..., None], *args: Any) -> None:
        """On one host, `fn(start_segment, size, *args)` on a live worker (`barrier.set_shm_stop`
        or `set_shm_checkpoint`): the loops read the run's words at every step. Best effort:
        the Dask control was told first, and loops on other hosts poll it."""
        plan = self.plan
        if plan is None or not plan.start_segment:
            return
        live = [w["address"] for r, w in enumerate(self.workers) if r not in self.lost]
        with contextlib.suppress(Exception):
            self.client.run(fn, plan.start_segment, plan.size, *args, workers=live[:1], on_error="ignore")

    def request_stop(self, reason: str) -> None:
        from ...comm.barrier import set_shm_stop
        self.control.request_stop(reason)
        self._write_word(set_shm_stop)   # the event stops the loops anyway, within a second

    def request_checkpoint(self, step: int) -> None:
        """Every worker sends its state before `step`: through the run's control (a Dask
        variable, polled by loops on other hosts) and, on one host, the word beside the stop
        word, which the loops read at every step instead of polling (`ThrottledControl`); a
        worker gone: the saver drops a checkpoint nobody sends."""
        from ...comm.barrier import set_shm_checkpoint
        self.control.request_checkpoint(step)
        self._write_word(set_shm_checkpoint, step)

    def abort(self, reason: str) -> None:
        with contextlib.suppress(Exception):  # a scheduler that is gone too cannot pass it on
            self.control.abort(reason)

    def cancel(self) -> None:
        with contextlib.suppress(Exception):
            self.client.cancel(self.futures)

    def release(self, rank: int) -> None:
        """A lost worker of an asynchronous run no longer holds the others at the start,
        and gives up its round-robin turns (original EASGD)."""
        alive = self._alive() or set()
        survivors = [w["address"] for w in self.workers if w["address"] in alive]
        if not survivors:
            return
        plan = self.plan
        with contextlib.suppress(Exception):
            if plan.start_segment:
                from ...comm.barrier import release_shm_barrier
                self.client.run(release_shm_barrier, plan.start_segment, rank, plan.size, workers=survivors[:1])
        with contextlib.suppress(Exception):
            from ...comm.roles import role_core
            if plan.server == "actor" and self.actor is not None and "retire" in role_core(plan.role).OPS:
                self.actor.serve("retire", rank).result(timeout=10)
            elif plan.server == "shm":
                # Client.run, not submit: the survivor's only thread is busy training.
                self.client.run(shm_retire, plan.server_segment, plan.lock_path, plan.n_params, plan.size, rank,
                                plan.server_options, workers=survivors[:1])

    def _alive(self) -> set | None:
        """Addresses of the live workers; None once the scheduler is gone (a failed ask
        while the client's connection is down, or five failed asks in a row, each bounded)."""
        try:
            self._nthreads = dict(self.client.nthreads(callback_timeout=LIVENESS_TIMEOUT_S))
            self._alive_failures = 0
            return set(self._nthreads)
        except Exception as exc:
            self._alive_failures += 1
            self.scheduler_error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            # Gone: the client lost its connection, or the scheduler has not answered for
            # ~10 s (a loaded machine can delay one answer past the timeout, not five).
            if self.client.status != "running" or self._alive_failures >= 5:
                return None
            return {w["address"] for w in self.workers}

    def _address(self) -> str:
        return str(getattr(self.client, "scheduler", None) and self.client.scheduler.address)

    def describe(self) -> dict[str, Any]:
        plan = self.plan
        server = None
        if plan is not None and plan.server:
            server = "shm" if plan.server.startswith("shm") else "actor"
        return {"comm": plan.comm if plan else None, "server": server,
                "blas_threads": plan.config.get("blas_threads") if plan else None}   # set by every loop (util.blas)

    def public(self, worker: dict, rank: int) -> dict:
        return {"rank": rank, "name": worker["name"], "kind": worker["kind"], "host": worker["host"],
                "address": worker["address"], "device": worker.get("device")}

    # ------------------------------------------------------------------ clean-up
    def close(self) -> None:
        """Free what the run made, whoever is left: the lease, the topic, shared-memory
        segments and the lock file. Never waits on a dead worker or a dead scheduler:
        on this host the client removes segments and lock files itself; a live owner
        (worker 0) is also asked to drop its mapping, with a short timeout."""
        from ...comm.shm import unlink_segment
        self._close_rings()   # (the monitor read their last rows before the run closed)
        # The loops' results were taken (or their workers lost): their keys are let go now, not
        # when this object is (a failed run's traceback can hold it to the interpreter's exit,
        # where closing the cluster logged "... lose already computed task(s)" for them).
        self.futures = []
        if self.control is not None:
            self.control.end_lease(scheduler_alive=not self.gone)
        alive: set = set()
        if not self.gone:
            if self.plan is not None:
                with contextlib.suppress(Exception):
                    self.client.unsubscribe_topic(self.plan.topic)
                if self.control is not None:   # its Events, Variables and topics, off the scheduler
                    self.control.forget(0 if self.plan.start_segment else self.plan.size, topics=(self.plan.topic,))
            alive = self._alive() or set()
            mine = [w["address"] for w in getattr(self, "workers", None) or [] if w["address"] in alive]
            if self.plan is not None and self.plan.extra.get("checkpoint") and mine:
                with contextlib.suppress(Exception):
                    self.client.run(forget_states, self.plan.run_id, workers=mine, callback_timeout=CLEANUP_S)
        workers = getattr(self, "workers", None) or []
        addr0 = workers[0]["address"] if workers else None
        local = bool(workers) and workers[0].get("host_key") == platforms.host_key()   # worker 0's /dev/shm is ours
        for name in self.segments.values():
            if addr0 in alive:
                with contextlib.suppress(Exception):
                    self.client.submit(unlink_segment, name, workers=[addr0], pure=False).result(timeout=CLEANUP_S)
            if local:
                unlink_shm_name(name)
                if addr0 not in alive and getattr(self.client, "cluster", None) is not None:
                    untrack(name)  # its dead creator shared our resource tracker: no "leaked" warning
            elif addr0 not in alive:
                self._on_survivor(unlink_shm_name, name, alive, host=workers[0]["host"])
        if self.lock_path:
            if local:
                remove_file(self.lock_path)
            else:
                self._on_survivor(remove_file, self.lock_path, alive, host=workers[0]["host"])
        self.actors.clear()
        self.actor = None

    def let_go(self) -> None:
        """Close the client `engine.transport_for` opened for an address or a cluster object
        (only the client: the cluster is the user's); a Client the caller gave stays theirs."""
        if self.opened:
            self.opened = False
            with contextlib.suppress(Exception):
                self.client.close()

    def _on_survivor(self, fn: Callable, arg: str, alive: set, host: str) -> None:
        """Run fn(arg) on a live worker of `host` (Client.run: its thread may be busy)."""
        survivors = [w["address"] for w in self.workers if w["address"] in alive and w["host"] == host]
        if survivors:
            with contextlib.suppress(Exception):
                self.client.run(fn, arg, workers=survivors[:1], callback_timeout=CLEANUP_S)
