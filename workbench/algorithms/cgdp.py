"""`cgdp`: CPU-GPU data parallel SGD (Le et al., ICPE'18).

The master weights and the optimiser state live in host memory, with a master on a CPU
worker. Device workers (GPUs, or CPU workers standing in for them) compute the gradient
of their slice of each global batch; as the backward pass finishes a chunk of layers, the
worker ships that chunk's weighted gradient to the master without waiting and goes on
with the backward pass. When every worker's part of a chunk has arrived, the master sums
them (in rank order: deterministic) and updates that chunk of the master weights with
the shared SGD rule: host-side aggregation and update overlap with the devices'
remaining backward work. The fresh weights go back to the devices as `weight_return`
says: `chunks` (the paper's), each chunk's as soon as the master has updated it, while the
devices are still in their backward pass, so the next forward pass waits only for the
chunk updated last: the first layers, the ones it needs first (on threads and in shared
memory the worker that completes a chunk copies it into every worker's next-step buffer;
on a Dask actor each push asks for its chunk back at once, and the reply travels during
the backward pass; the simulator charges each copy on each host->device link); `whole`,
the whole vector is fetched once every chunk is updated.

The maths is sync_sgd's (and so single-process SGD's on the same global batch): a chunk
of the update only uses that chunk's gradient and optimiser state.

Chunking: layers are grouped `chunk_layers` at a time in backward order (the paper syncs
per group of layers). With `chunk_layers="auto"` the master times iterations: it starts
at one layer per chunk and grows the chunk while an iteration gets faster, then keeps
the best (the paper's run-time choice). Every worker learns the chunking for the next
step from its fetch, so all agree.

Records: compute_s is the forward+backward including the non-blocking sends; comm_s the
fetch (waiting for the last chunk's update and for the weights still on their way back);
wait_s the part of that fetch spent waiting for slower workers.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..comm.roles import chunk_bounds
from ..maths.backend import to_numpy
from .base import Algorithm, StepOut, WorkerContext, load_server_state, server_state, settle, state_copy
from .sync import SpeedBalancer


class CGDP(Algorithm):
    def __init__(self, ctx: WorkerContext):
        super().__init__(ctx)
        xp, model = ctx.xp, ctx.model
        self.master = ctx.server
        self.params = ctx.initial_params()
        self.grad = xp.empty_like(self.params)
        self.groups = model.layer_groups()
        setting = ctx.config.chunk_layers
        self.chunking = 1 if setting == "auto" else min(int(setting), len(self.groups))   # layers per chunk
        self.chunks = chunk_bounds(self.groups, self.chunking)
        self.balancer = SpeedBalancer(ctx)
        self.clock = ctx.clock

    def step(self, step: int) -> StepOut:
        ctx = self.ctx
        lr = ctx.plan.schedule(step)
        lo_b, hi_b = self.balancer.slices()[ctx.rank]
        w = (hi_b - lo_b) / ctx.plan.batch_size
        X, y = ctx.batch(step, lo_b, hi_b)
        stop = ctx.rank == 0 and ctx.stop_requested()
        starts = {lo: hi for lo, hi in self.chunks}
        first = [True]
        held: list[tuple[int, int]] = []

        def ready(start: int, _stop: int) -> None:
            # Layers finish last-first; a chunk goes out as soon as its lowest layer is in.
            if start not in starts:
                return
            if start == 0:          # the final chunk carries the loss, known on return
                held.append((0, starts[0]))
                return
            self.master.push(step, ctx.rank, start, starts[start], self._weighted(start, starts[start], w),
                             lr, 0.0, stop and first[0])
            first[0] = False

        t0 = self.clock()
        loss, _ = ctx.model.loss_and_grad(self.params, X, y, grad_out=self.grad, on_grad_ready=ready)
        t1 = self.clock()
        for lo, hi in held:  # the last chunk also reports this worker's compute time
            self.master.push(step, ctx.rank, lo, hi, self._weighted(lo, hi, w), lr, loss * w,
                             stop and first[0], t1 - t0)
        self.master.wait_sent()
        params, gloss, gstop, chunking, times = self.master.fetch(step, ctx.rank)
        t2 = self.ctx.timer()
        self.balancer.observe(times)
        self.params = ctx.xp.asarray(params)
        self.chunking, self.chunks = chunking, chunk_bounds(self.groups, chunking)
        # the part of the fetch spent waiting for the slowest worker's compute (as sync_sgd)
        wait_s = min(max(0.0, max(times) - (t1 - t0)), t2 - t1)
        out = StepOut(lr=lr, samples=hi_b - lo_b, compute_s=t1 - t0, comm_s=t2 - t1 - wait_s, wait_s=wait_s,
                      bytes_sent=self.grad.nbytes)   # every chunk of my gradient, to the host's master
        settle(out, gloss, gstop)     # the master applied the update (a stop ends the loop after it)
        return out

    def _weighted(self, lo: int, hi: int, w: float) -> np.ndarray | None:
        """My weighted gradient of [lo, hi) on the host: written straight into a
        shared-memory master's row (then None is pushed), else a new array."""
        slot = getattr(self.master, "slot", None)
        if slot is None:
            return to_numpy(self.grad[lo:hi]) * w
        np.multiply(to_numpy(self.grad[lo:hi]), w, out=slot(self.ctx.rank, lo, hi))
        return None

    def state(self) -> dict[str, Any]:
        """My weights (the master's after my last fetch), the next step's chunking, the
        batch shares; rank 0 also the master's whole state (`server.*`); a front-end that
        keeps a part of its own on each worker (shared memory: each worker's chunk tuner),
        that part (`master.*`)."""
        own = getattr(self.master, "own_state", None)
        return {**state_copy(self.ctx.xp, params=self.params), "chunking": int(self.chunking),
                **self.balancer.state(), **server_state(self.ctx),
                **({f"master.{k}": v for k, v in own().items()} if own is not None else {})}

    def load_state(self, state: dict[str, Any]) -> None:
        self.params = self.ctx.xp.asarray(state["params"]).copy()
        self.chunking = int(state["chunking"])
        self.chunks = chunk_bounds(self.groups, self.chunking)
        self.balancer.load_state(state)
        load_server_state(self.ctx, state)
        if hasattr(self.master, "load_own_state"):
            self.master.load_own_state({k.removeprefix("master."): v for k, v in state.items()
                                        if k.startswith("master.")})

    def eval_params(self) -> Any:
        return self.params

    def finish(self) -> Any:
        # with the per-chunk return the weights may be the master's buffer (a view of a
        # shared segment that closes with the run): keep a copy of my own
        self.params = self.params.copy()
        if self.ctx.rank == 0:
            hist = self.master.history()
            self.summary = {"chunk_layers_used": hist[-1] if hist else None,
                            "chunk_layers_tried": sorted(set(hist)), **self.balancer.summary()}
        return super().finish()
