"""Gradient compressors with error feedback: pure functions over flat vectors.

Each compressor takes the vector a worker would send, p (its weighted gradient, plus its
error memory when error feedback is on), and returns `(sent, payload_bytes)`: `sent` is
the dense vector a receiver reconstructs from the payload (zeros where nothing was sent),
`payload_bytes` the size of the encoded payload as the compressor's wire format has it:

    topk      the k = ceil(ratio n) largest |p_j|: k (int32 index, float32 value) pairs, 8k bytes
              (Lin et al., ICLR 2018, Deep Gradient Compression)
    randomk   k entries chosen by a generator every worker seeds alike (seed, step), so the
              workers' k values add up position by position: 4k bytes (Stich et al. 2018;
              unscaled, a biased compressor meant for error feedback)
    sign      (||p||_1 / n) sign(p): one bit per entry and one float32 scale, ceil(n/8) + 4 bytes
              (Karimireddy et al. 2019, EF-signSGD; sign(0) sends +)
    qsgd      ||p||_2 sign(p_j) xi_j / s, xi_j in {0..s} rounded up with probability
              s |p_j| / ||p||_2 - floor(.): unbiased (Alistarh et al., NeurIPS 2017); fixed-length
              code: a float32 norm plus 1 sign bit and ceil(log2(s + 1)) bits per entry (the paper's
              Elias code is shorter for sparse levels: this is an upper bound)
    powersgd  rank-r approximation of each layer's matrix (Vogels et al., NeurIPS 2019); it
              needs two allreduces, so it is not a per-worker function: its pieces are below
              (`matrix_shape`, `as_matrix`, `orthonormalise`, `powersgd_bytes`) and
              `algorithms/compressed.py` runs the rounds.

Error feedback (Seide et al. 2014; Karimireddy et al. 2019): the memory e keeps what was
not sent, `e_new = p - sent` with `p = w g + e_old`, so `sent + e_new = w g + e_old` exactly
(the identity the tests check) and nothing is lost, only delayed.

Deep Gradient Compression's momentum correction (`dgc_step`): with momentum mu the worker
accumulates its own velocity u = mu u + w g and the memory v += u, sends top-k of v and
clears the sent entries of both v and u (momentum factor masking); the receivers apply
the sum with plain SGD (the momentum already happened on the workers).

>>> import numpy as np
>>> sent, nbytes = topk(np.array([0.1, -3.0, 2.0, 0.5], np.float32), 0.5)
>>> sent.tolist(), nbytes
([0.0, -3.0, 2.0, 0.0], 16)
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .models import get_array_module as _xp

COMPRESSIONS = ("none", "topk", "randomk", "sign", "qsgd", "powersgd")
FLOAT_BYTES = 4
INDEX_BYTES = 4


def k_of(n: int, ratio: float) -> int:
    """Entries sent out of n at `ratio`: ceil(ratio n), at least 1, at most n.

    >>> k_of(1000, 0.01), k_of(10, 0.01), k_of(10, 1.0)
    (10, 1, 10)
    """
    return max(1, min(n, math.ceil(ratio * n - 1e-9)))


def topk(p: Any, ratio: float, wire: dict | None = None) -> tuple[Any, int]:
    """The k largest |p_j| (ties: the lower index first is not guaranteed); returns (sent, bytes).
    With `wire` (a dict), the chosen positions are left in wire["idx"] for `encode`."""
    xp = _xp(p)
    n = p.shape[0]
    k = k_of(n, ratio)
    sent = xp.zeros_like(p)
    if k == n:
        sent[...] = p
        idx = xp.arange(n)
    else:
        idx = xp.argpartition(xp.abs(p), n - k)[n - k:]
        sent[idx] = p[idx]
    if wire is not None:
        wire["idx"] = idx
    return sent, k * (INDEX_BYTES + FLOAT_BYTES)


def random_indices(n: int, k: int, seed: int, step: int) -> np.ndarray:
    """k distinct positions out of n, the same on every worker for (seed, step).

    >>> a = random_indices(100, 5, 0, 3); bool((a == random_indices(100, 5, 0, 3)).all()), len(set(a.tolist()))
    (True, 5)
    """
    if k >= n:
        return np.arange(n)
    return np.sort(np.random.default_rng([seed, step, 0x5EED]).choice(n, size=k, replace=False))


def randomk(p: Any, ratio: float, seed: int, step: int) -> tuple[Any, int]:
    """k entries at positions every worker draws alike; returns (sent, bytes)."""
    xp = _xp(p)
    n = p.shape[0]
    k = k_of(n, ratio)
    sent = xp.zeros_like(p)
    idx = random_indices(n, k, seed, step)
    if xp is not np:
        idx = xp.asarray(idx)
    sent[idx] = p[idx]
    return sent, k * FLOAT_BYTES


def sign(p: Any) -> tuple[Any, int]:
    """(||p||_1 / n) sign(p), sign(0) = +1; returns (sent, bytes).

    >>> sign(np.array([2.0, -1.0, 0.0], np.float32))[0].tolist()
    [1.0, -1.0, 1.0]
    """
    xp = _xp(p)
    n = p.shape[0]
    scale = float(xp.abs(p).sum()) / n
    sent = xp.where(p >= 0, scale, -scale).astype(p.dtype)
    return sent, math.ceil(n / 8) + FLOAT_BYTES


def qsgd(p: Any, levels: int, rng: np.random.Generator, wire: dict | None = None) -> tuple[Any, int]:
    """QSGD's stochastic quantisation to `levels` levels per sign (unbiased); returns (sent, bytes).

    The reconstruction uses the float32 unit ||p||_2 / s that the wire carries, so a
    receiver decodes bitwise the sender's `sent` (`decode`); the rounding probabilities
    use the exact norm (the unit's rounding, 6e-8 relative, is below float32's resolution
    of `sent`). With `wire` (a dict), the signed levels are left in wire["xi"] and the
    unit in wire["unit"] for `encode`."""
    xp = _xp(p)
    n = p.shape[0]
    norm = float(xp.sqrt(xp.sum(p.astype(np.float64) ** 2)))
    nbytes = FLOAT_BYTES + math.ceil(n * (1 + math.ceil(math.log2(levels + 1))) / 8)
    if norm == 0.0:
        if wire is not None:
            wire["xi"], wire["unit"] = xp.zeros(n, dtype=np.int32), np.float32(0.0)
        return xp.zeros_like(p), nbytes
    scaled = xp.abs(p).astype(np.float64) * (levels / norm)        # in [0, s]
    low = xp.floor(scaled)
    u = rng.random(n)
    if xp is not np:
        u = xp.asarray(u)
    xi = low + (u < scaled - low)                                  # up with probability scaled - low
    unit = np.float32(norm / levels)
    signed = xp.sign(p) * xi                                       # integers in [-s, s]
    sent = (signed * float(unit)).astype(p.dtype)
    if wire is not None:
        wire["xi"], wire["unit"] = signed.astype(np.int32), unit
    return sent, nbytes


def compress(kind: str, p: Any, *, ratio: float = 0.01, levels: int = 16, seed: int = 0, step: int = 0,
             rng: np.random.Generator | None = None, wire: dict | None = None) -> tuple[Any, int]:
    """One worker's compressor by name (not powersgd: see the module docstring). `wire`
    (a dict) collects what `encode` needs beyond `sent` (top-k's positions, QSGD's levels)."""
    if kind == "topk":
        return topk(p, ratio, wire)
    if kind == "randomk":
        return randomk(p, ratio, seed, step)
    if kind == "sign":
        return sign(p)
    if kind == "qsgd":
        return qsgd(p, levels, rng if rng is not None else np.random.default_rng([seed, step]), wire)
    raise ValueError(f"compression: one of {[c for c in COMPRESSIONS if c not in ('none', 'powersgd')]}, "
                     f"got {kind!r}")


def with_error_feedback(kind: str, grad_w: Any, memory: Any | None, **kw: Any) -> tuple[Any, int]:
    """Compress `grad_w + memory` and update `memory` in place to what was not sent.

    Returns (sent, bytes); afterwards sent + memory == grad_w + old memory (to rounding),
    the error-feedback identity. With memory None nothing is kept (no error feedback).

    >>> m = np.zeros(4, np.float32)
    >>> sent, _ = with_error_feedback("topk", np.array([1.0, -4.0, 2.0, 0.5], np.float32), m, ratio=0.25)
    >>> sent.tolist(), m.tolist()
    ([0.0, -4.0, 0.0, 0.0], [1.0, 0.0, 2.0, 0.5])
    """
    if memory is None:
        return compress(kind, grad_w, **kw)
    memory += grad_w                       # p = w g + e_old, in the memory's own buffer
    sent, nbytes = compress(kind, memory, **kw)
    memory -= sent                         # e_new = p - sent
    return sent, nbytes


def dgc_step(grad_w: Any, velocity: Any, memory: Any, momentum: float, ratio: float,
             wire: dict | None = None) -> tuple[Any, int]:
    """Deep Gradient Compression's momentum correction and factor masking (one worker).

        u = mu u + w g;   v = v + u;   sent = top-k(v);   v[sent] = 0;   u[sent] = 0

    Updates `velocity` (u) and `memory` (v) in place; returns (sent, bytes).

    >>> u, v = np.zeros(3, np.float32), np.zeros(3, np.float32)
    >>> sent, _ = dgc_step(np.array([1.0, 3.0, 0.5], np.float32), u, v, 0.9, 0.3)
    >>> sent.tolist(), u.tolist(), v.tolist()
    ([0.0, 3.0, 0.0], [1.0, 0.0, 0.5], [1.0, 0.0, 0.5])
    """
    velocity *= momentum
    velocity += grad_w
    memory += velocity
    sent, nbytes = topk(memory, ratio, wire)
    mask = sent != 0
    memory[mask] = 0
    velocity[mask] = 0
    return sent, nbytes


# ------------------------------------------------------------------------------ the wire format
def _level_bits(levels: int) -> int:
    return 1 + math.ceil(math.log2(levels + 1))       # a sign bit and the level


def encode(kind: str, sent: Any, wire: dict, *, levels: int = 16) -> Any:
    """The payload a worker sends for `sent` (topk, sign, qsgd): a uint8 array of exactly
    the bytes `payload` counts, which `decode` turns back into `sent` (bitwise, but for
    the sign of zeros). `wire` is what the compressor left (`compress(..., wire=)`).

        topk   k int32 positions, then their k float32 values
        sign   the float32 scale, then one bit per entry (1: +scale)
        qsgd   the float32 unit ||p||_2 / s, then per entry a sign bit and the level's bits

    >>> sent, nbytes = topk(np.array([0.1, -3.0, 2.0, 0.5], np.float32), 0.5, w := {})
    >>> b = encode("topk", sent, w); b.nbytes == nbytes, decode("topk", b, 4).tolist()
    (True, [0.0, -3.0, 2.0, 0.0])
    """
    xp = _xp(sent)
    if kind == "topk":
        idx = xp.asarray(wire["idx"]).astype(np.int32)
        vals = xp.ascontiguousarray(sent[idx])
        return xp.concatenate([idx.view(np.uint8), vals.astype(np.float32).view(np.uint8)])
    if kind == "sign":
        n = sent.shape[0]
        scale = xp.abs(sent[:1]).astype(np.float32)
        bits = xp.packbits(~xp.signbit(sent))
        return xp.concatenate([scale.view(np.uint8), bits[:math.ceil(n / 8)]])
    if kind == "qsgd":
        b = _level_bits(levels) - 1
        xi = xp.asarray(wire["xi"]).astype(np.int64)
        code = (xi < 0).astype(np.int64) << b | xp.abs(xi)
        bits = ((code[:, None] >> xp.arange(b, -1, -1)) & 1).astype(np.uint8)
        unit = xp.asarray(np.array([wire["unit"]], dtype=np.float32))
        return xp.concatenate([unit.view(np.uint8), xp.packbits(bits.reshape(-1))])
    raise ValueError(f"compression: one of ['topk', 'sign', 'qsgd'] (an allgathered payload), got {kind!r}")


def decode(kind: str, data: Any, n: int, *, levels: int = 16) -> Any:
    """The dense float32 vector of n entries a payload from `encode` stands for."""
    xp = _xp(data)
    data = xp.ascontiguousarray(data)
    if kind == "topk":
        k = data.shape[0] // (INDEX_BYTES + FLOAT_BYTES)
        idx = data[:INDEX_BYTES * k].view(np.int32)
        out = xp.zeros(n, dtype=np.float32)
        out[idx] = data[INDEX_BYTES * k:].view(np.float32)
        return out
    if kind == "sign":
        scale = data[:FLOAT_BYTES].view(np.float32)[0]
        bits = xp.unpackbits(data[FLOAT_BYTES:])[:n].astype(bool)
        return xp.where(bits, scale, -scale).astype(np.float32)
    if kind == "qsgd":
        b = _level_bits(levels) - 1
        unit = float(data[:FLOAT_BYTES].view(np.float32)[0])
        bits = xp.unpackbits(data[FLOAT_BYTES:])[:n * (b + 1)].reshape(n, b + 1).astype(np.int64)
        code = (bits << xp.arange(b, -1, -1)).sum(axis=1)
        level = (code & ((1 << b) - 1)).astype(np.float64)
        signed = xp.where(code >> b, -level, level)
        return (signed * unit).astype(np.float32)
    raise ValueError(f"compression: one of ['topk', 'sign', 'qsgd'] (an allgathered payload), got {kind!r}")


# ------------------------------------------------------------------------------ PowerSGD's pieces
def matrix_shape(shape: tuple[int, ...]) -> tuple[int, int] | None:
    """The matrix view PowerSGD compresses for a layer of this shape, rows <= columns (None
    for vectors, sent as they are): (out, in*kh*kw) for a convolution, transposed if needed.

    >>> matrix_shape((64, 128)), matrix_shape((128, 64)), matrix_shape((8, 4, 3, 3)), matrix_shape((10,))
    ((64, 128), (64, 128), (8, 36), None)
    """
    if len(shape) < 2:
        return None
    a, b = shape[0], int(np.prod(shape[1:]))
    return (a, b) if a <= b else (b, a)


def as_matrix(flat: Any, shape: tuple[int, ...]) -> Any:
    """`flat` (one layer's entries) as the matrix `matrix_shape` names (a view or a transpose)."""
    a, b = shape[0], int(np.prod(shape[1:]))
    m = flat.reshape(a, b)
    return m if a <= b else m.T


def orthonormalise(P: Any) -> Any:
    """Orthonormal columns spanning P's (reduced QR; square P gives an orthogonal matrix,
    so a full-rank approximation is exact even when P is singular)."""
    xp = _xp(P)
    q, _ = xp.linalg.qr(P.astype(np.float64))
    return q.astype(P.dtype)


def powersgd_bytes(shapes: list[tuple[int, ...]], rank: int) -> tuple[int, int]:
    """(first round, second round) payload bytes of PowerSGD over layers of these shapes:
    P (rows x r) of every matrix plus every vector layer as it is; then Q (columns x r).

    >>> powersgd_bytes([(64, 128), (128,)], 4)
    (1536, 2048)
    """
    first = second = 0
    for shape in shapes:
        ms = matrix_shape(shape)
        if ms is None:
            first += int(np.prod(shape)) * FLOAT_BYTES
        else:
            r = min(rank, ms[0])
            first += ms[0] * r * FLOAT_BYTES
            second += ms[1] * r * FLOAT_BYTES
    return first, second



def powersgd_work(shapes: list[tuple[int, ...]], rank: int, error_feedback: bool = True) -> tuple[float, float]:
    """(FLOPs, bytes through memory) of one worker's PowerSGD step beyond its gradient and its
    update, counted as `algorithms.compressed` does it. Per matrix M of `matrix_shape` (a, b),
    a <= b, r = min(rank, a):

        P = M Q, Q = M^T P, the approximation P Q_sum^T     3 x 2 a b r FLOPs
        orthonormalising the summed P (a x r; reduced QR:    4 a r^2 - 4/3 r^3 (Householder, and
          LAPACK's geqrf then orgqr forming Q)                 forming Q: twice 2 a r^2 - 2/3 r^3)
        error feedback: P Q_i^T and M minus it              2 a b r + a b

    and, in float32 passes over the matrix's entries: M read by each product (2), the
    approximation written (1) and copied into the summed vector (2, 4 for a layer stored
    transposed, a > b as stored: its transpose is copied first); with error feedback the memory
    accumulating the gradient (read both, write: 3), P Q_i^T written (1), M minus it (3) and
    copied into the memory (2, or 4 transposed). A vector layer is copied into the first
    exchange's buffer and out of its sum (4 passes), and with error feedback accumulated (3)
    and cleared (1). At rank 4 a product does 2 r = 8 FLOPs per 4-byte entry read: every
    device here is bound by its memory bandwidth there, not its FLOPs.

    >>> f, b = powersgd_work([(64, 128)], 4, error_feedback=False)   # 6 x 64 x 128 x 4 + 4 x 64 x 16 - 4/3 x 64
    >>> round(f, 2), b                                                # 5 passes of 8192 floats
    (200618.67, 163840.0)
    >>> f, b = powersgd_work([(128, 64), (64,)], 4)   # + 8 x 64 x 128 + 8192; (7 + 11) x 8192 + 8 x 64 floats
    >>> round(f, 2), b
    (274346.67, 591872.0)
    """
    flops = 0.0
    passes = 0.0          # float32 entries moved, counted in passes over each layer's entries
    for shape in shapes:
        size = float(np.prod(shape))
        ms = matrix_shape(tuple(shape))
        if ms is None:
            passes += size * (4 + (4 if error_feedback else 0))
            continue
        a, b = ms
        r = min(int(rank), a)
        transposed = shape[0] > int(np.prod(shape[1:]))
        flops += 3 * 2.0 * a * b * r + 4.0 * a * r * r - 4.0 / 3.0 * r ** 3
        passes += size * (5 + (2 if transposed else 0))
        if error_feedback:
            flops += 2.0 * a * b * r + a * b
            passes += size * (3 + 1 + 3 + 2 + (2 if transposed else 0))
    return flops, passes * FLOAT_BYTES


def payload(kind: str, n: int, *, ratio: float = 0.01, levels: int = 16, rank: int = 4,
            shapes: list[tuple[int, ...]] | None = None) -> tuple[float, bool, int]:
    """What one worker's compressed gradient of n float32 entries costs on the wire:
    (payload bytes, gathered (an allgather) or allreduced, allreduce rounds). PowerSGD
    needs the layers' `shapes`. The cost model's exchange terms read this.

    >>> payload("topk", 1000, ratio=0.01), payload("randomk", 1000, ratio=0.01), payload("sign", 1000)
    ((80, True, 1), (40, False, 1), (129, True, 1))
    >>> payload("powersgd", 8320, rank=4, shapes=[(64, 128), (128,)]), payload("none", 10)
    ((3584, False, 2), (40, False, 1))
    """
    if kind == "none":
        return n * FLOAT_BYTES, False, 1
    if kind == "topk":
        return k_of(n, ratio) * (INDEX_BYTES + FLOAT_BYTES), True, 1
    if kind == "randomk":
        return k_of(n, ratio) * FLOAT_BYTES, False, 1
    if kind == "sign":
        return math.ceil(n / 8) + FLOAT_BYTES, True, 1
    if kind == "qsgd":
        return FLOAT_BYTES + math.ceil(n * (1 + math.ceil(math.log2(levels + 1))) / 8), True, 1
    if kind == "powersgd":
        if not shapes:
            raise ValueError("shapes: the layers' shapes (PowerSGD compresses each layer's matrix), got none")
        first, second = powersgd_bytes(shapes, rank)
        return first + second, False, 2
    raise ValueError(f"compression: one of {list(COMPRESSIONS)}, got {kind!r}")
