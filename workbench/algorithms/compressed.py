"""sync_sgd's compressed gradient exchange (`compression` != none), with error feedback.

Each worker compresses its weighted gradient p_i = w_i g_i (+ its error memory e_i when
`error_feedback` is on; `maths.compress`), the workers exchange what the compressor's
wire format needs, and every worker applies the same update from the same sum. What
crosses the wire, and what `bytes_sent` counts per worker and step:

    topk, sign, qsgd   every worker's payload reaches every other (an allgather: top-k
                       positions differ between workers, signs and levels do not add up
                       encoded): (P - 1) payloads. Carried here as the allreduce of the
                       decoded vectors, the same sum; the simulator and the network emulator
                       charge the ring allgather of the payloads (`comm.base.compressed_sum`),
                       the thread and shared-memory transports move the dense vector (bytes
                       through memory, not a network).
    randomk            the positions are the same on every worker (seeded by seed and step),
                       so the k values are allreduced: a real allreduce of k floats (the
                       simulator scales its bytes to a timing model's, as it scales a vector).
    powersgd           two real allreduces per step (Vogels et al., Algorithm 1): P = M Q of
                       every layer's matrix (and the vector layers, uncompressed), then, after
                       orthonormalising the summed P, Q = M^T P; the update is P Q^T.

The packed tail (loss, stop, timings: `base.SyncTail`) rides in the (first) exchange and
is counted in the bytes.

Momentum: topk with error feedback, optimizer sgd and momentum > 0 uses Deep Gradient
Compression's momentum correction (`maths.compress.dgc_step`): the velocity lives on each
worker, weight decay is added to the gradient there, and the summed top-k is applied with
plain SGD. Nesterov is refused with it (DGC defines heavy ball only). Every other case
applies the sum with the configured rule (`optimizer`, momentum, weight decay), as sync_sgd.

Exact cases (tests): topk at compression_ratio 1 is sync_sgd (with momentum too: DGC's
masking clears the local velocity that was fully sent, so its u is w g and the summed
update is plain SGD's; that equals sync_sgd only at momentum 0, which the test uses);
powersgd at a rank of at least each layer's smaller dimension is sync_sgd (the
orthonormalised P is square and orthogonal, P P^T = I).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..comm.base import can_allgather, ring_allgather_bytes, ring_allreduce_bytes
from ..maths import compress as C
from .base import StepOut, SyncTail, clock_reading, state_copy, tail_length

GATHERED = ("topk", "sign", "qsgd")    # exchanged by an allgather of the payloads


class CompressedExchange:
    """The compressed exchange of one SyncSGD worker (its `step` replaces sync_sgd's)."""

    def __init__(self, algo: Any):
        self.algo = algo
        ctx, c = algo.ctx, algo.ctx.config
        self.ctx, self.kind, self.n = ctx, c.compression, algo.n
        xp, dtype = ctx.xp, algo.params.dtype
        self.ratio, self.levels, self.rank_r = c.compression_ratio, c.compression_levels, c.compression_rank
        self.memory = xp.zeros(self.n, dtype=dtype) if c.error_feedback else None
        self.dgc = self.kind == "topk" and c.error_feedback and c.momentum > 0 and c.optimizer == "sgd"
        self.velocity = xp.zeros(self.n, dtype=dtype) if self.dgc else None
        self.rng = np.random.default_rng([c.seed, ctx.rank, 0xC0DE])      # QSGD's rounding: each worker its own
        self.tail_bytes = tail_length(ctx.size) * algo.buf.itemsize
        self.payload = 0
        if self.kind == "randomk":
            self.k = C.k_of(self.n, self.ratio)
            self.small = xp.zeros(self.k + tail_length(ctx.size), dtype=dtype)
            self.small_tail = SyncTail(ctx, self.k)
        if self.kind == "powersgd":
            self._powersgd_setup()

    # ---------------------------------------------------------------- the step
    def step(self, step: int) -> StepOut:
        algo, ctx, n = self.algo, self.ctx, self.n
        lr = ctx.plan.schedule(step)
        loss_w, samples, compute_s = algo.local_gradient(step)          # algo.grad = w g
        t0 = algo.clock()
        if self.kind == "powersgd":
            return self._powersgd_step(step, lr, loss_w, samples, compute_s, t0)
        wire: dict = {}
        if self.dgc:
            g = algo.grad
            if algo.opt.weight_decay:                                   # sum_i w_i wd x = wd x
                lo, hi = algo.balancer.slices()[ctx.rank]
                g += (algo.opt.weight_decay * (hi - lo) / ctx.plan.batch_size) * algo.params
            sent, self.payload = C.dgc_step(g, self.velocity, self.memory, ctx.config.momentum, self.ratio, wire)
        else:
            sent, self.payload = C.with_error_feedback(self.kind, algo.grad, self.memory, ratio=self.ratio,
                                                       levels=self.levels, seed=ctx.config.seed, step=step,
                                                       rng=self.rng, wire=wire)
        if self.kind == "randomk":
            idx = C.random_indices(n, self.k, ctx.config.seed, step)
            self.small[:self.k] = sent[idx]
            compute_s += algo.clock() - t0
            out = StepOut(lr=lr, samples=samples, compute_s=compute_s)
            applies = self.small_tail.exchange(out, self.small, loss_w, compute_s, self._dense_sum)   # k values
            total = ctx.xp.zeros(n, dtype=algo.params.dtype)
            total[idx] = self.small_tail.total[:self.k]
            tail = self.small_tail
            sent_bytes = ring_allreduce_bytes(ctx.size, self.small.nbytes)
        else:
            algo.buf[:n] = sent
            compute_s += algo.clock() - t0
            sent_bytes = ring_allgather_bytes(ctx.size, self.payload + self.tail_bytes)
            if self._gathers(sent):                                     # a real allgather of the payloads
                def gather(buf: Any) -> Any:                            # (encoding is the exchange's time)
                    return ctx.gathered_sum(buf, self._encode(sent, wire), self._decode)   # sum_i sent_i, rank order
            else:
                def gather(buf: Any) -> Any:
                    return ctx.compressed_sum(buf, self.payload + self.tail_bytes, gather=True)
                if getattr(ctx.comm, "compressed_sum", None) is None:   # carried as a dense allreduce
                    sent_bytes = ring_allreduce_bytes(ctx.size, algo.buf.nbytes)
            out = StepOut(lr=lr, samples=samples, compute_s=compute_s)
            applies = algo.tail.exchange(out, algo.buf, loss_w, compute_s, gather)
            total, tail = algo.tail.total[:n], algo.tail
        out.bytes_sent = sent_bytes
        if applies:
            t2 = tail.t_end
            self._apply(total, lr)
            out.compute_s += tail.freed() - t2          # decoding the sum and the update are compute too
        return out

    def _dense_sum(self, buf: Any) -> Any:
        """A dense sum of `buf` through the context's compressed channel (randomk's k values,
        PowerSGD's factors): counted as its own bytes, not gathered."""
        return self.ctx.compressed_sum(buf, buf.nbytes, gather=False)

    # ---------------------------------------------------------------- checkpoints
    def state(self) -> dict[str, Any]:
        """Error feedback's memory, DGC's velocity, QSGD's generator, PowerSGD's Q (warm start)."""
        xp = self.ctx.xp
        out: dict[str, Any] = {"qsgd_rng": self.rng.bit_generator.state}
        if self.memory is not None:
            out.update(state_copy(xp, memory=self.memory))
        if self.velocity is not None:
            out.update(state_copy(xp, velocity=self.velocity))
        if self.kind == "powersgd":
            out.update(state_copy(xp, **{f"Q.{i}": q for i, q in enumerate(self.Q) if q is not None}))
            out["tail1.t_free"] = self.tail1.t_free
        if self.kind == "randomk":
            out["small_tail.t_free"] = self.small_tail.t_free
        return out

    def load_state(self, state: dict[str, Any]) -> None:
        """Take up what `state` holds; a joining worker's (`SyncSGD.joiner_state`) has no
        memories and no generator: they start afresh, as in a new run."""
        xp = self.ctx.xp
        if "qsgd_rng" in state:
            self.rng.bit_generator.state = state["qsgd_rng"]
        if self.memory is not None and "memory" in state:
            self.memory[...] = xp.asarray(state["memory"])
        if self.velocity is not None and "velocity" in state:
            self.velocity[...] = xp.asarray(state["velocity"])
        if self.kind == "powersgd":
            self.Q = [None if q is None else xp.asarray(state[f"Q.{i}"]).copy() for i, q in enumerate(self.Q)]
            self.tail1.t_free = clock_reading(self.ctx, state.get("tail1.t_free"))
        if self.kind == "randomk":
            self.small_tail.t_free = clock_reading(self.ctx, state.get("small_tail.t_free"))

    # ---------------------------------------------------------------- the gathered payloads
    def _gathers(self, sent: Any) -> bool:
        """Whether this step's payloads travel as bytes through the comm's own allgather
        (`comm.base.can_allgather`): float32 vectors (the wire format's values) on a comm
        that has one, with room for the payload. Else the comm's `compressed_sum`."""
        return sent.dtype == np.float32 and can_allgather(self.ctx.comm, self.payload + self.tail_bytes)

    def _encode(self, sent: Any, wire: dict) -> Any:
        """This worker's payload: the compressor's encoding of `sent`, then the packed tail's floats."""
        xp, n = self.ctx.xp, self.n
        body = C.encode(self.kind, sent, wire, levels=self.levels)
        return xp.concatenate([body, xp.ascontiguousarray(self.algo.buf[n:]).view(np.uint8)])

    def _decode(self, part: Any) -> Any:
        """Any worker's payload back into the layout of `algo.buf` (vector, then tail)."""
        xp, n = (np if isinstance(part, np.ndarray) else self.ctx.xp), self.n
        body = C.decode(self.kind, part[:self.payload], n, levels=self.levels)
        return xp.concatenate([body, xp.ascontiguousarray(part[self.payload:]).view(np.float32)])

    def _apply(self, total: Any, lr: float) -> None:
        algo = self.algo
        if self.dgc:                         # the momentum already happened on the workers
            algo.params -= lr * total
        else:
            algo.opt.step(algo.params, total, lr)

    # ---------------------------------------------------------------- PowerSGD
    def _powersgd_setup(self) -> None:
        ctx, algo = self.ctx, self.algo
        xp, dtype = ctx.xp, algo.params.dtype
        rng = np.random.default_rng([ctx.config.seed, 0x9051])        # the same Q on every worker
        self.layers = []          # (start, stop, shape, matrix shape or None, rank)
        m1 = m2 = 0
        self.Q = []
        for layer in ctx.model.layers:
            ms = C.matrix_shape(tuple(layer.shape))
            r = min(self.rank_r, ms[0]) if ms else 0
            self.layers.append((layer.start, layer.stop, tuple(layer.shape), ms, r, m1, m2))
            if ms is None:
                m1 += layer.stop - layer.start
                self.Q.append(None)
            else:
                m1 += ms[0] * r
                m2 += ms[1] * r
                self.Q.append(xp.asarray(rng.standard_normal((ms[1], r)).astype(dtype)))
        self.m1, self.m2 = m1, m2
        self.buf1 = xp.zeros(m1 + tail_length(ctx.size), dtype=dtype)
        self.buf2 = xp.zeros(max(1, m2), dtype=dtype)
        self.tail1 = SyncTail(ctx, m1)
        self.pbytes = ring_allreduce_bytes(ctx.size, self.buf1.nbytes) + (
            ring_allreduce_bytes(ctx.size, m2 * self.buf2.itemsize) if m2 else 0.0)
        self.payload = C.powersgd_bytes([s for _, _, s, *_ in self.layers], self.rank_r)

    def _powersgd_step(self, step: int, lr: float, loss_w: float, samples: int, compute_s: float,
                       t0: float) -> StepOut:
        algo, ctx, xp = self.algo, self.ctx, self.ctx.xp
        p = algo.grad
        if self.memory is not None:
            self.memory += p                                         # M = w g + e (error feedback)
            p = self.memory
        mats = []
        for (lo, hi, shape, ms, r, o1, _), Q in zip(self.layers, self.Q):
            if ms is None:
                self.buf1[o1:o1 + hi - lo] = p[lo:hi]
                mats.append(None)
            else:
                M = C.as_matrix(p[lo:hi], shape)                    # (a, b), a <= b
                mats.append(M)
                self.buf1[o1:o1 + ms[0] * r] = (M @ Q).reshape(-1)  # P_i = M_i Q: (a, r)
        compute_s += algo.clock() - t0
        out = StepOut(lr=lr, samples=samples, compute_s=compute_s, bytes_sent=self.pbytes)
        # sum_i P_i (+ vectors, tail): the step is decided now, and acted on after the second sum
        applies = self.tail1.exchange(out, self.buf1, loss_w, compute_s, self._dense_sum)
        tot1 = self.tail1.total
        t2 = algo.clock()
        total = algo.buf[:self.n]            # the approximated sum (scratch: my gradient is in M or memory)
        Ps = []
        for (lo, hi, _shape, ms, r, o1, o2), M in zip(self.layers, mats):
            if ms is None:                   # vector layers: the exact sum, read before the next allreduce
                total[lo:hi] = tot1[o1:o1 + hi - lo]
                Ps.append(None)
                continue
            P = C.orthonormalise(xp.asarray(tot1[o1:o1 + ms[0] * r]).reshape(ms[0], r))
            Ps.append(P)
            self.buf2[o2:o2 + ms[1] * r] = (M.T @ P).reshape(-1)    # Q_i = M_i^T P: (b, r)
        busy = algo.clock() - t2
        t3 = ctx.timer()
        tot2 = ctx.compressed_sum(self.buf2, self.buf2.nbytes, gather=False) if self.m2 else self.buf2   # sum_i Q_i
        comm2 = ctx.timer() - t3
        out.compute_s += busy
        out.comm_s += comm2
        if not applies:
            return out
        t4 = algo.clock()
        for i, ((lo, hi, shape, ms, r, _o1, o2), M, P) in enumerate(zip(self.layers, mats, Ps)):
            if ms is None:
                if self.memory is not None:
                    self.memory[lo:hi] = 0                           # sent exactly
                continue
            Qsum = xp.asarray(tot2[o2:o2 + ms[1] * r]).reshape(ms[1], r)
            approx = P @ Qsum.T                                       # (a, b)
            _put(total[lo:hi], shape, approx)
            if self.memory is not None:                               # e = M - P Q_i^T (my own part)
                Qi = xp.asarray(self.buf2[o2:o2 + ms[1] * r]).reshape(ms[1], r)
                _put(self.memory[lo:hi], shape, M - P @ Qi.T)
            self.Q[i] = Qsum.copy()                                  # warm start (Vogels et al.)
        self._apply(total, lr)
        self.tail1.freed()
        out.compute_s += self.tail1.t_free - t4
        return out


def _put(flat: Any, shape: tuple[int, ...], matrix: Any) -> None:
    """Write `matrix` (the `as_matrix` view of a layer) back into the layer's flat entries."""
    a, b = shape[0], int(np.prod(shape[1:]))
    flat[...] = (matrix if a <= b else matrix.T).reshape(-1)
