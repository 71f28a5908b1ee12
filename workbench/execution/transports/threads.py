"""The thread transport: every worker a thread of this process, on the engine's one run path.

Collectives are `comm.threads.ThreadGroup`s (one per rank group), a server role is its
core (`comm.roles`) behind a lock, shared arrays are plain arrays (threads share memory
anyway). Unit tests check every algorithm's maths this way, through the same set-up,
monitor and status rule as a Dask run.

Each worker thread is one core, as a Dask worker process is (`util.blas`): while a run
lasts, BLAS runs `config.blas_threads` threads, 1 unless asked (`util.blas.blas_limit`,
process-wide; restored at `close`). With
OpenBLAS's default of one thread per core, two worker threads ran four BLAS threads on two
cores, and on a loaded machine its spinning threads made single-process `sgd` on mnist1d
(batch 256) 10-18x slower (3.9 s against 0.21 s, the same numbers bit for bit: a matrix
product's threads split its output, not its sums).

Fault injection (tests; the same rules as a real lost worker): `ThreadTransport(fail={rank:
step})` makes worker `rank` vanish when it reaches `step`, as a killed process would: its
loop returns nothing and its records since the last live batch are gone.
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

from ...comm.barrier import ThreadStartBarrier
from ...comm.base import ThreadControl
from ...comm.roles import make_core
from ...comm.threads import ThreadChunkMaster, ThreadGroup, ThreadServer
from ...config import RunConfig
from ...util.blas import blas_limit
from .base import LocalArray, Progress, Reports, RunSetup, Transport, WorkerLinks, failed_loop


class Vanished(BaseException):
    """Raised inside a worker thread to make it vanish like a killed process (fault injection)."""


class ThreadTransport(Transport):
    name = "threads"

    def __init__(self, kinds: list[str] | None = None, fail: dict[int, int] | None = None):
        self.kinds = kinds           # let tests stand CPU workers in for GPU ones
        self.fail = dict(fail or {})
        self.control = ThreadControl()
        self.threads: list[threading.Thread] = []
        self.reports = Reports(lambda rank: f"thread-{rank}")

    def again(self) -> ThreadTransport:
        return ThreadTransport(kinds=self.kinds)

    def choose(self, config: RunConfig) -> list[dict]:
        size = config.n_workers if config.n_workers is not None else config.cpus
        kinds = self.kinds or ["cpu"] * size
        return [{"name": f"thread-{r}", "kind": kinds[r], "host": "localhost"} for r in range(size)]

    def prepare(self, setup: RunSetup) -> None:
        self._blas = contextlib.ExitStack()
        # None: left as found (util.blas could not set it)
        self.blas_threads = self._blas.enter_context(blas_limit(setup.config.blas_threads))
        spec, size = setup.spec, setup.size
        needs = spec.needs
        self.groups = [ThreadGroup(len(ranks), self.control) for ranks in setup.groups] if needs.collective else []
        self.server: Any = None
        if needs.server == "cgdp_master":
            self.server = ThreadChunkMaster(make_core(needs.server, needs.options(setup.config, setup.model), setup.params0, size,
                                                      setup.config, setup.model), control=self.control)
        elif needs.server is not None:
            self.server = ThreadServer(make_core(needs.server, needs.options(setup.config, setup.model), setup.params0,
                                                 size), control=self.control)
        self.shared = {name: LocalArray(setup.params0.copy()) for name in needs.shared}
        self.start_barrier = ThreadStartBarrier(size, self.control)

    def links(self, setup: RunSetup, rank: int) -> WorkerLinks:
        gi, ranks = setup.group_of(rank)
        comm = self.groups[gi].comm(ranks.index(rank)) if self.groups else None
        return WorkerLinks(comm=comm, server=self.server, shared=self.shared, control=self.control,
                           start_barrier=self.start_barrier.for_rank(rank))

    def start(self, setup: RunSetup, sink: Callable[[dict], None], main: Callable[..., dict]) -> None:
        def work(rank: int) -> None:
            links = self.links(setup, rank)
            vanish = _vanish_at(self.fail[rank]) if rank in self.fail else None
            try:
                result = main(setup.config, rank, setup.kinds, setup.groups, setup.extra, setup.t0_wall, links,
                              sink, vanish_at=vanish, resume=setup.resume_of(rank))
            except Vanished:
                self.reports.vanish(rank)
                return
            except Exception as exc:   # set-up failed before the loop could report it
                result = failed_loop(exc)
            self.reports.returned(rank, result)

        self.threads = [threading.Thread(target=work, args=(r,), name=f"workbench-{r}", daemon=True)
                        for r in range(setup.size)]
        for t in self.threads:
            t.start()

    def poll(self) -> Progress:
        return self.reports.poll()

    def pending(self) -> set[int]:
        return self.reports.pending(len(self.threads))

    def request_stop(self, reason: str) -> None:
        self.control.request_stop(reason)

    def abort(self, reason: str) -> None:
        self.control.abort(reason)

    def release(self, rank: int) -> None:
        self.start_barrier.release(rank)   # a vanished thread no longer holds the others at the start
        if isinstance(self.server, ThreadServer) and "retire" in self.server.ops:
            self.server.retire(rank)       # nor their round-robin turns

    def finish(self) -> Progress:
        for t in self.threads:
            t.join(timeout=5.0)
        return self.poll()

    def cancel(self) -> None:
        self.control.abort("loops ignored the stop request")

    def close(self) -> None:
        blas, self._blas = getattr(self, "_blas", None), None
        if blas is not None:
            blas.close()

    def describe(self) -> dict[str, Any]:
        return {"comm": "threads", "blas_threads": getattr(self, "blas_threads", None)}


def _vanish_at(step: int) -> Callable[[int], None]:
    def check(current: int) -> None:
        if current >= step:
            raise Vanished(f"vanished at step {current}")
    return check
