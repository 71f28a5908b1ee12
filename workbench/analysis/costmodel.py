"""A compute + alpha-beta communication cost model of every algorithm, calibrated from runs.

Predicts step time and throughput for more workers than this machine has, and on
networks the user picks, so the scaling figure can draw predicted curves over the
measured points. The model (Hockney's alpha-beta, as in Thakur et al. 2005):

    one message of n bytes           alpha + n * beta          (alpha: latency, beta: s/byte)
    compute of b samples, one worker  c0 + c1 * b               (per worker kind: cpu, gpu)
    ring allreduce, P workers        2 (P-1)/P n beta + 2 (P-1) alpha   (the standard ring; also at P = 2)
    tree allreduce, P workers        2 ceil(log2 P) (alpha + n beta)
    our Dask ring, P = 2             alpha + n beta   (`allreduce="dask_ring"`: a swap of whole buffers)
    our shared memory, one host      m alpha + n beta (`allreduce="shm"`: m barrier meetings, 1 for a pair
                                                       with a small buffer, else 2: `shm.allreduce_meetings`)
    our threads, one process         3 alpha + (P+1) n beta (`allreduce="threads"`: 3 barrier meetings,
                                                       `threads.allreduce_meetings`; rank 0 sums every
                                                       slot, then each copies the sum: `threads.allreduce_passes`)

`ALLREDUCE_ALGORITHMS` names what each `allreduce` charges. "ring", the default, is what the
simulator charges and `explain` counts messages by: the standard ring of an NCCL/MPI-class stack
on a profile's documented alpha (10GbE: 50 us). Our own ring over Dask (`comm.ring`, real runs
across hosts) swaps whole buffers at P = 2 (one message, not two) but pays 0.22-0.61 ms a message
where that profile says 50 us (docs/benchmarks.md, "What the ring does between two hosts"): read as
predictions for it, 10GbE results for small models are optimistic on latency; for it, name
`dask_ring` and calibrate the link (`calibrate(link=linkfit.benchmark_link(client))`).

Per algorithm, one step of P workers on a global batch B (b = B / P per worker):

- `sync_sgd`: compute(b) + allreduce(n);  samples/s = B / step.
- `async_sgd`, `async_msgd`: a worker pushes its gradient and receives the parameters
  (2 messages) every step; the server handles the P workers' updates one at a time, so
  throughput = min(P b / worker_step, b / server_time_per_update): it saturates.
- `hogwild_sgd`: compute(b) + one pass over the shared parameters (host memory); one host only.
- EASGD family: an elastic exchange (fetch centre, send the difference: 2 messages)
  every `tau` local steps. `async_easgd` / `async_measgd`: FCFS server, which saturates
  like a parameter server; `hogwild_easgd`: no lock, no saturation, one host only;
  `easgd` (round-robin): the server serves workers in strict rank order, so a cycle of
  `tau` steps lasts at least P exchanges; `sync_easgd`: compute(b) + allreduce / tau.
- `sync_sgd` with `compression`: the payload of `maths.compress.payload` (top-k pairs, sign
  bits, QSGD levels: an allgather, (P-1)(alpha + b beta); random-k values, PowerSGD's two
  factor rounds: allreduces of b).
- `dpsgd` (`gossip`): one message of the parameters to each of d neighbours every tau steps,
  d (alpha + n beta) / tau, plus its agreement allreduce every 32 steps.
- `local_sgd`, `diloco` (`local_allreduce`): compute(b) + allreduce(n) / tau, the parameters
  (diloco: their change) averaged every tau steps; `post_local_sgd` (`post_local_allreduce`):
  every step for the share `sync_share` of the run before its switch, then every tau:
  compute(b) + (s + (1 - s) / tau) allreduce(n).
- `ltfb` (`ltfb_terms`): K trainers (`trainers`; default K = P, one worker each) of g = P / K workers,
  each trainer on B / K of the global batch, b = B / P per worker (as `algorithms.ltfb` splits it):
  every step the trainer's allreduce of the gradient among its g workers; every `round_size` steps
  its leader's two calls on the mailbox (deposit, collect: 4 alpha + 2 n beta, `tournament_terms`),
  the leader scoring its own and its partner's model (a forward pass over `tournament_size` rows
  each, 1/3 of a training pass: `tournament_scoring_s`) while the others wait, and the leader's
  broadcast of what it kept (one more allreduce among the g): compute(b) + AR_g(n)
  + (4 alpha + 2 n beta + scoring + AR_g(n)) / round_size. The one mailbox moves every paired
  model in and out, one after another (`mailbox_busy_s`: 4 floor(K/2) n beta a round): a
  round is no shorter, where it saturates (bottleneck "server").
- `cgdp`: gradients leave each device chunk by chunk over the host link (PCIe), the CPU
  sums and updates, fresh weights go back; this overlaps the backward pass:
  `fwd + max(bwd, (C-1)/C H) + H/C`, with H the whole host path and C chunks
  (our reconstruction, docs/algorithms.md; forward = 1/3, backward = 2/3 of compute).

Calibration (`calibrate`): compute per sample per worker kind is fitted from step
records (compute_s against samples: c1 per sample and c0 per step, by least squares
on the per-size medians; one batch size gives c0 = 0). Communication: each run gives
one point, mean comm_s per step against that algorithm's per-step terms
(comm = A alpha + B beta, `exchange_terms`), with n = n_params * 4 bytes. Two or more
independent points (different worker counts or message sizes) fit alpha and beta by
least squares; one point keeps the network's documented alpha (`NETWORKS`, default
"shm") and fits beta; none keeps both defaults. Only algorithms that send messages
(allreduce, parameter server, elastic exchanges, tournaments) calibrate alpha/beta.

`predict` gives a DataFrame (one row per network and worker count), `compare` the
prediction error on measured sweep rows. Nothing here imports plotly: the figure is
`workbench.ui.figures.scaling_figure(table, predicted)`.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from .. import measure
from ..comm.network import (  # noqa: F401 - the network model's names, re-exported where they were
    HOST_LINK,
    HOST_MEMORY_BYTES_PER_S,
    MEASURED,
    NETWORKS,
    Network,
    message_time,
    ring_allreduce_time,
    shm_compressed_terms,
    shm_terms,
    swap_allreduce_time,
    tree_allreduce_time,
    tree_levels,
)
from ..config import ConfigError, ConfigTypeError
from ..config.registry import specs
from ..maths.optim import update_passes

BYTES_PER_PARAM = 4  # float32



# The allreduce each name charges (A alpha + B beta, `allreduce_terms`); "ring" is what the simulator
# charges and what `explain` counts messages by
ALLREDUCE_ALGORITHMS = {
    "ring": "the standard ring (reduce-scatter + all-gather, as NCCL, gloo and MPI run it): 2 (P-1) messages of "
            "n/P bytes, two at P = 2",
    "tree": "a binary tree, reduce then broadcast: 2 ceil(log2 P) messages of n bytes",
    "dask_ring": "our ring over Dask's connections (comm.ring): the ring at P >= 3, one swap of the whole buffer "
                 "at P = 2 (one message of n bytes each way)",
    "shm": "our shared-memory allreduce on one host (comm.shm): one latency per barrier meeting "
           "(`shm.allreduce_meetings`: 1 for a pair with a small buffer, else 2) and the vector's n bytes",
    "threads": "our in-process allreduce between worker threads (comm.threads): one latency per barrier meeting "
               "(`threads.allreduce_meetings`: 3) and (P+1) n bytes (`threads.allreduce_passes`: rank 0 reads "
               "every slot as it sums, then each thread copies the sum)",
}

# A real run's transport (`summary["comm"]`) -> the allreduce that charges what it does
TRANSPORT_ALLREDUCE = {"shm": "shm", "threads": "threads"}


def allreduce_of(comm: str | None) -> str:
    """The allreduce (`ALLREDUCE_ALGORITHMS`) whose terms a real run's exchange is read by:
    its transport's own (`comm` "shm" or "threads": their barrier meetings, not the ring's
    2 (P-1) messages); else the ring, as the simulator charges it.

    >>> allreduce_of("threads"), allreduce_of("shm"), allreduce_of("dask"), allreduce_of(None)
    ('threads', 'shm', 'ring', 'ring')
    """
    return TRANSPORT_ALLREDUCE.get(str(comm), "ring")


def run_allreduce(summary: dict[str, Any]) -> str:
    """The allreduce whose terms a run's exchange is read by: a real run's transport's own
    (`allreduce_of` its `comm`); a simulated run's what the simulator charged it
    (`sim_allreduce`: "shm" on this host's shared memory, as `comm.shm` meets), else the
    ring (a run saved before the simulator said so was charged the ring).

    >>> run_allreduce({"comm": "shm"}), run_allreduce({"simulated": True, "comm": "sim", "sim_allreduce": "shm"})
    ('shm', 'shm')
    >>> run_allreduce({"simulated": True, "comm": "sim"}), run_allreduce({"simulated": True, "sim_allreduce": "tree"})
    ('ring', 'ring')
    """
    return allreduce_of(summary.get("sim_allreduce") if summary.get("simulated") else summary.get("comm"))
ALLREDUCES = tuple(ALLREDUCE_ALGORITHMS)


# ------------------------------------------------------------------------------ formulas
def _check_allreduce(allreduce: str) -> None:
    if allreduce not in ALLREDUCES:
        raise ConfigError("allreduce", f"one of {list(ALLREDUCES)}", allreduce)


def allreduce_terms(workers: int, n_bytes: float, allreduce: str = "ring",
                    capacity: int | None = None) -> tuple[float, float]:
    """(A, B) with allreduce time = A alpha + B beta. `capacity`: "shm" only, the elements its
    segment holds (which decides its path, `shm.pair_path`); None: the vector plus a
    synchronous step's tail (`registry.tail_length`), as a run's segment is made.

    >>> allreduce_terms(4, 100.0, "ring")
    (6.0, 150.0)
    >>> allreduce_terms(4, 100.0, "tree")
    (4.0, 400.0)
    >>> allreduce_terms(2, 100.0, "ring"), allreduce_terms(2, 100.0, "dask_ring")   # two hops of n/2, or one swap
    ((2.0, 100.0), (1.0, 100.0))
    >>> allreduce_terms(2, 4000.0, "shm"), allreduce_terms(4, 4000.0, "shm")   # one meeting for a pair, else two
    ((1.0, 4000.0), (2.0, 4000.0))
    >>> allreduce_terms(2, 4000.0, "threads"), allreduce_terms(1, 4000.0, "threads")   # 3 meetings; alone none
    ((3.0, 12000.0), (0.0, 0.0))
    """
    _check_allreduce(allreduce)
    p = int(workers)
    if allreduce == "threads":
        from ..comm.threads import allreduce_meetings, allreduce_passes
        return float(allreduce_meetings(p)), float(allreduce_passes(p) * n_bytes) if p > 1 else 0.0
    if allreduce == "shm":   # each worker's copy in and its share of the sum: the vector's bytes once
        from ..config.registry import tail_length
        elems = int(n_bytes // BYTES_PER_PARAM) + tail_length(p) if capacity is None else int(capacity)
        return shm_terms(p, n_bytes, elems)
    if allreduce == "dask_ring" and p == 2:
        return 1.0, float(n_bytes)
    if allreduce in ("ring", "dask_ring"):
        return 2.0 * (p - 1), 2.0 * (p - 1) / p * n_bytes
    levels = tree_levels(p)
    return 2.0 * levels, 2.0 * levels * n_bytes


def compressed_terms(workers: int, n_bytes: float, compression: str, *, compression_ratio: float = 0.01,
                     compression_levels: int = 16, compression_rank: int = 4,
                     layer_shapes: list[tuple[int, ...]] | None = None,
                     allreduce: str = "ring", capacity: int | None = None) -> tuple[float, float]:
    """(A, B) of sync_sgd's compressed exchange (`maths.compress.payload`): an allgather
    of the payloads, (P - 1) (alpha + b beta), or allreduces of them (PowerSGD: two).
    On "shm" the payloads go through the run's segment, whose `capacity` (elements; None:
    the vector plus a synchronous step's tail, as a run's segment is made) decides their
    path, not the payload's size (`network.shm_compressed_terms`, as the simulator).

    >>> compressed_terms(4, 4000.0, "topk", compression_ratio=0.01)   # 10 pairs of 8 bytes, 3 hops
    (3.0, 240.0)
    >>> compressed_terms(2, 4 * 16_378.0, "randomk", allreduce="shm"), compressed_terms(2, 4 * 16_379.0, "randomk", allreduce="shm")
    ((1.0, 656.0), (2.0, 656.0))
    """
    from ..config.registry import tail_length
    from ..maths.compress import payload
    b, gather, rounds = payload(compression, int(n_bytes // BYTES_PER_PARAM), ratio=compression_ratio,
                                levels=compression_levels, rank=compression_rank, shapes=layer_shapes)
    p = int(workers)
    if allreduce == "shm":   # every round through the one segment: the vector's capacity decides its meetings
        elems = int(n_bytes // BYTES_PER_PARAM) + tail_length(p) if capacity is None else int(capacity)
        a, bb = shm_compressed_terms(p, b, gather, elems)
        return (a, bb) if gather else (a * rounds, bb)
    if gather and allreduce == "threads":   # the same from the threads' slots, two meetings (`ThreadComm.allgather`)
        from ..comm.threads import exchange_meetings
        return float(exchange_meetings(p)), float(p - 1) * b
    if gather:
        return float(p - 1), float(p - 1) * b
    a, bb = allreduce_terms(p, b, allreduce)
    return a * rounds, bb


def gossip_terms(workers: int, n_bytes: float, topology: str = "ring", *, tau: int = 1,
                 allreduce: str = "ring") -> tuple[float, float]:
    """(A, B) of dpsgd per step: one message to each of the d neighbours every tau steps,
    d (alpha + n beta) / tau (the largest degree: the exchange waits for everyone), plus
    the agreement allreduce every `gossip.CHECK_EVERY` steps. On "shm" both go through the
    run's segment, made for dpsgd's largest buffer (`AlgorithmSpec.comm_elems`: the agreement's
    vector, its squared norm and the tail), whose capacity decides a pair's meetings.

    >>> a, b = gossip_terms(8, 100.0, "ring"); round(a, 4), round(b, 4)   # 2 + 14/32, 200 + 175/32
    (2.4375, 205.4688)
    >>> gossip_terms(2, 4 * 16_377.0, allreduce="shm")[0], gossip_terms(2, 4 * 16_378.0, allreduce="shm")[0]
    (1.03125, 2.0625)
    """
    from ..algorithms.gossip import CHECK_EVERY, neighbours
    p = int(workers)
    d = max(len(neighbours(topology, p, r)) for r in range(p)) if p > 1 else 0
    capacity = specs()["dpsgd"].comm_elems(int(n_bytes // BYTES_PER_PARAM), p) if allreduce == "shm" else None
    a, b = allreduce_terms(p, n_bytes, allreduce, capacity=capacity)
    if allreduce == "shm":   # the peers' slots read after the same meetings as its allreduce (`ShmComm.neighbour_exchange`)
        return a / tau + a / CHECK_EVERY, d * n_bytes / tau + b / CHECK_EVERY
    if allreduce == "threads":   # the peers' slots read between two meetings (`ThreadComm.neighbour_exchange`)
        from ..comm.threads import exchange_meetings
        return exchange_meetings(p) / tau + a / CHECK_EVERY, d * n_bytes / tau + b / CHECK_EVERY
    return d / tau + a / CHECK_EVERY, d * n_bytes / tau + b / CHECK_EVERY


def exchange_terms(algorithm: str, workers: int, n_bytes: float, *, tau: int = 1,
                   round_size: int = 50, allreduce: str = "ring",
                   sync_share: float = 0.0, compression: str = "none", topology: str = "ring",
                   trainers: int | None = None, **compression_knobs: Any) -> tuple[float, float] | None:
    """Per worker step, the communication time as A alpha + B beta: returns (A, B).

    None for algorithms whose exchange is not a network message (sgd, hogwild
    shared memory, CGDP's host path): those do not calibrate alpha / beta.

    Args:
        algorithm: an ALGORITHMS name.
        workers: P.
        n_bytes: bytes of one parameter vector.
        tau: EASGD local steps between exchanges.
        round_size: LTFB steps between tournaments.
        allreduce: "ring", "tree", "dask_ring", "shm" or "threads" (`ALLREDUCE_ALGORITHMS`).
        sync_share: post_local_sgd's share of steps before its switch (averaging every step).
        compression, **compression_knobs: sync_sgd's compressed exchange (`compressed_terms`).
        topology: dpsgd's graph (`gossip_terms`).
        trainers: LTFB's K (`ltfb_terms`; None: one trainer per worker).
    Returns:
        (A, B), or None.

    >>> exchange_terms("async_sgd", 4, 100.0)
    (2.0, 200.0)
    >>> exchange_terms("sync_easgd", 2, 100.0, tau=4)
    (0.5, 25.0)
    >>> exchange_terms("post_local_sgd", 2, 100.0, tau=4, sync_share=0.5)   # (0.5 + 0.5 / 4) x (2, 100)
    (1.25, 62.5)
    """
    step = _Step(workers=workers, n_bytes=n_bytes, tau=tau, round_size=round_size, allreduce=allreduce,
                 sync_share=sync_share, compression=compression, topology=topology, knobs=compression_knobs,
                 trainers=trainers)
    return PATTERN_MODELS[_pattern(algorithm)][0](step)


def exchanges_per_step(pattern: str, tau: int, sync_share: float = 0.0) -> float:
    """Allreduces per step of the periodic-averaging patterns: 1 / tau; post-local SGD
    averages every step for the share `sync_share` of the run, then every tau.

    >>> exchanges_per_step("local_allreduce", 4), exchanges_per_step("post_local_allreduce", 4, 0.5)
    (0.25, 0.625)
    """
    s = min(1.0, max(0.0, float(sync_share))) if pattern == "post_local_allreduce" else 0.0
    return s + (1.0 - s) / max(1, int(tau))


def _pattern(algorithm: str) -> str:
    """The communication pattern `algorithm` declares (`AlgorithmSpec.pattern`)."""
    declared = specs()
    if algorithm not in declared:
        raise ConfigError("algorithm", f"one of {sorted(declared)}", algorithm)
    return declared[algorithm].pattern


def trainers_knob(algorithm: str, config: Any) -> dict[str, int]:
    """{"trainers": K} of a run's config (a dict or a RunConfig) where `algorithm` holds
    tournaments (LTFB: its trainers decide its allreduce, `ltfb_terms`); else {}.

    >>> trainers_knob("ltfb", {"trainers": 2}), trainers_knob("sync_sgd", {"trainers": 2})
    ({'trainers': 2}, {})
    """
    k = config.get("trainers") if isinstance(config, dict) else getattr(config, "trainers", None)
    return {"trainers": int(k)} if k and _pattern(algorithm) == "tournament" else {}


# ------------------------------------------------------------------------------ fitting
def fit_alpha_beta(a_terms: Sequence[float], b_terms: Sequence[float], times: Sequence[float],
                   default_alpha: float, default_beta: float) -> tuple[float, float, str]:
    """Least-squares alpha, beta >= 0 with times ~ A alpha + B beta.

    Args:
        a_terms, b_terms, times: one entry per measured point.
        default_alpha, default_beta: used where the points cannot determine a value.
    Returns:
        (alpha, beta, how): how is "fit" (both fitted), "beta" (alpha kept at its
        default: the points span one direction only), or "default" (no points).

    >>> fit_alpha_beta([2, 6], [1e6, 3e6 * 0.5], [2 * 1e-5 + 1e6 * 1e-9, 6 * 1e-5 + 1.5e6 * 1e-9], 0, 0)[2]
    'fit'
    """
    A, B, t = (np.asarray(v, dtype=float) for v in (a_terms, b_terms, times))
    keep = np.isfinite(t) & ((A > 0) | (B > 0))
    A, B, t = A[keep], B[keep], t[keep]
    if not len(t):
        return default_alpha, default_beta, "default"
    M = np.stack([A, B], axis=1)
    scale = np.maximum(np.abs(M).max(axis=0), 1e-300)   # columns differ by ~1e6: normalise
    if len(t) >= 2 and np.linalg.matrix_rank(M / scale, tol=1e-9) == 2:
        coef, *_ = np.linalg.lstsq(M / scale, t, rcond=None)
        alpha, beta = coef / scale
        if alpha >= 0 and beta > 0:
            return float(alpha), float(beta), "fit"
        if beta > 0:   # latency not resolvable from these points: clamp it at 0, refit beta
            return 0.0, _fit_one(B, t), "fit"
    beta = _fit_one(B, t - A * default_alpha)
    if beta <= 0:
        return default_alpha, default_beta, "default"
    return float(default_alpha), beta, "beta"


def _fit_one(x: np.ndarray, y: np.ndarray) -> float:
    """Least-squares slope through the origin: argmin_k |y - k x|."""
    den = float(np.dot(x, x))
    return float(np.dot(x, y) / den) if den > 0 else 0.0


def fit_compute(samples: Sequence[float], seconds: Sequence[float]) -> tuple[float, float]:
    """(c0, c1) >= 0 with compute_s ~ c0 + c1 * samples, fitted on per-size medians.

    One distinct batch size gives c0 = 0 (the overhead cannot be told apart).

    >>> [round(v, 9) for v in fit_compute([10, 10, 20, 20], [0.11, 0.11, 0.21, 0.21])]
    [0.01, 0.01]
    >>> fit_compute([8, 8], [0.4, 0.4])
    (0.0, 0.05)
    """
    s, c = np.asarray(samples, dtype=float), np.asarray(seconds, dtype=float)
    keep = (s > 0) & np.isfinite(c)
    s, c = s[keep], c[keep]
    if not len(s):
        return 0.0, 0.0
    sizes = np.unique(s)
    med = np.array([np.median(c[s == v]) for v in sizes])
    if len(sizes) >= 2:
        c1, c0 = np.polyfit(sizes, med, 1)
        if c0 >= 0 and c1 > 0:
            return float(c0), float(c1)
    return 0.0, _fit_one(sizes, med)


# ------------------------------------------------------------------------------ calibration
@dataclass(frozen=True)
class Calibration:
    """What the model learned from measured runs (or its documented defaults)."""

    compute: dict[str, tuple[float, float]]  # worker kind -> (c0 s per pass, c1 s per sample)
    alpha: float                              # s per message
    beta: float                               # s per byte
    n_params: int
    overhead_s: float = 0.0                   # per step, outside compute / comm / wait (median of runs)
    how: str = "default"                      # "fit" | "beta" | "default" (fit_alpha_beta) | "benchmark" (linkfit)
    network: str = "shm"                      # where default alpha / beta came from
    points: pd.DataFrame = field(default_factory=pd.DataFrame, compare=False, repr=False)
    # how="benchmark": the link fit's parameters with their standard errors, the bound that bound
    # and the held-out error (`linkfit.LinkFit.summary()`): how sure the link is
    link_fit: dict[str, Any] | None = field(default=None, compare=False)

    @property
    def n_bytes(self) -> int:
        """Bytes of one parameter vector (float32)."""
        return self.n_params * BYTES_PER_PARAM

    def compute_s(self, kind: str, samples: float, passes: float = 1.0) -> float:
        """Seconds for one worker of `kind` to process `samples` (forward + backward) in
        `passes` passes (micro-batches, `accumulate`): each pays the per-pass c0."""
        if kind not in self.compute:
            raise ConfigError("kind", f"one of the calibrated worker kinds {sorted(self.compute)}", kind)
        c0, c1 = self.compute[kind]
        return c0 * passes + c1 * samples

    def link(self, network: str) -> Network:
        """The Network for a name: NETWORKS, or "measured" for the calibrated alpha / beta."""
        if network == MEASURED:
            return Network(MEASURED, self.alpha, self.beta, f"calibrated ({self.how})")
        if network not in NETWORKS:
            raise ConfigError("network", f"one of {[MEASURED, *NETWORKS]}", network)
        return NETWORKS[network]

    def describe(self) -> str:
        """One line: compute per sample per kind, alpha, beta and how they were obtained."""
        kinds = ", ".join(f"{k}: {c1 * 1e6:.3g} us/sample + {c0 * 1e3:.3g} ms/step"
                          for k, (c0, c1) in self.compute.items())
        link = ""
        if self.link_fit:
            f = self.link_fit
            link = (f" (benchmarked: {f['bandwidth_gbps']:.3g} +- {f['bandwidth_se_gbps']:.2g} GB/s, alpha "
                    f"{f['alpha_us']:.3g} +- {f['alpha_se_us']:.2g} us, held-out error "
                    f"{f['held_out_error']:.1%}" + (f", bound: {f['bounded']}" if f.get("bounded") else "")
                    + (f"; {f['verdict']}" if f.get("verdict") else "") + ")")
        return (f"compute {kinds}; overhead {self.overhead_s * 1e3:.3g} ms/step; "
                f"alpha {self.alpha * 1e6:.3g} us, beta {self.beta * 1e9:.3g} ns/byte "
                f"({1 / self.beta / 1e9 if self.beta > 0 else float('inf'):.3g} GB/s), {self.how}{link}; "
                f"{self.n_params} params")


def n_params_of(result: Any) -> int:
    """The parameter count of a run: summary["n_params"], the final params, or its model."""
    s = result.summary
    if s.get("n_params"):
        return int(s["n_params"])
    if getattr(result, "params", None) is not None:
        return int(np.asarray(result.params).size)
    from ..config import RunConfig
    from ..problem import Problem
    config = RunConfig.from_dict({k: v for k, v in s["config"].items() if k != "out"})
    return int(Problem.from_config(config).model.n_params)   # its size: no data loaded


def training_throughput(result: Any) -> float:
    """Steady samples/s of a run (`workbench.measure.steady`: warm-up excluded by its rule).

    The same number as the run summary's samples_per_s, computed from the step records
    (so it holds for run directories of any age). Falls back to the summary's
    samples_per_s without step records.

    >>> from workbench.results import RunResult
    >>> steps = pd.DataFrame({"worker": 0, "step": range(40), "time": [0.1 * (k + 1) for k in range(40)],
    ...                       "samples": 10, "compute_s": 0.1, "comm_s": 0.0, "wait_s": 0.0})
    >>> round(training_throughput(RunResult({"samples_per_s": 1.0}, steps, pd.DataFrame())), 6)
    100.0
    """
    steps = result.steps
    if not len(steps):
        return float(result.summary.get("samples_per_s") or 0.0)
    return measure.steady_throughput(steps)


def step_overhead(result: Any) -> float:
    """Seconds per step outside compute / comm / wait (loop, records, evaluations), >= 0."""
    steps = result.steps
    if not len(steps):
        return 0.0
    rate = training_throughput(result)
    if rate <= 0:
        return 0.0
    steps = measure.steady_steps(steps)
    per_worker_steps = len(steps) / steps["worker"].nunique()
    span = float(steps["samples"].sum()) / rate
    busy = float((steps["compute_s"] + steps["comm_s"] + steps["wait_s"]).sum()) / len(steps)
    return max(0.0, span / per_worker_steps - busy)


def _worker_kinds(result: Any) -> dict[int, str]:
    kinds = {}
    for i, w in enumerate(result.summary.get("workers") or []):
        kinds[int(w.get("rank", i))] = str(w.get("kind", "cpu"))
    return kinds


def comm_point(result: Any, n_params: int | None = None) -> dict[str, Any] | None:
    """One calibration point of a run: algorithm, workers, bytes, (A, B), mean comm_s per step.
    (A, B) are the terms of what the run's transport does (`run_allreduce`: a real run's
    shared memory or threads their barrier meetings, and a simulated run's on the shm
    network; the ring otherwise).

    None when the run sent no network messages (see `exchange_terms`) or has no steps.
    """
    s, steps = result.summary, measure.steady_steps(result.steps)   # warm-up is not the link's cost
    algorithm = s.get("algorithm") or (s.get("config") or {}).get("algorithm")
    cfg = s.get("config") or {}
    workers = len(s.get("workers") or []) or int(steps["worker"].nunique() if len(steps) else 1)
    if not len(steps):
        return None
    n = (n_params or n_params_of(result)) * BYTES_PER_PARAM
    share = (s.get("switch_step") or 0) / s["steps"] if s.get("steps") else 0.0   # post_local_sgd's sync phase
    knobs = {k: cfg[k] for k in ("compression_ratio", "compression_levels", "compression_rank") if k in cfg}
    if cfg.get("compression", "none") == "powersgd":
        knobs["layer_shapes"] = _layer_shapes(cfg)
    terms = exchange_terms(algorithm, workers, n, tau=int(cfg.get("tau") or 1),
                           round_size=int(cfg.get("round_size") or 50), sync_share=share,
                           compression=cfg.get("compression") or "none", topology=cfg.get("topology") or "ring",
                           allreduce=run_allreduce(s), **trainers_knob(algorithm, cfg), **knobs)
    if terms is None or terms == (0.0, 0.0):
        return None
    return {"algorithm": algorithm, "workers": workers, "n_bytes": n, "A": terms[0], "B": terms[1],
            "comm_s": float(steps["comm_s"].mean())}


def _layer_shapes(cfg: dict[str, Any]) -> list[tuple[int, ...]]:
    """The layer shapes of a run's model (PowerSGD's exchange depends on them)."""
    from ..config import RunConfig
    from ..problem import Problem
    model = Problem.from_config(RunConfig.from_dict({k: v for k, v in cfg.items() if k != "out"})).model
    return [tuple(layer.shape) for layer in model.layers]


def calibrate(results: Iterable[Any], n_params: int | None = None, network: str = "shm",
              link: Any = None) -> Calibration:
    """Fit compute per sample per worker kind, and alpha / beta, from measured runs.

    Args:
        results: RunResults (or run directories) of the same model, any algorithms and
            worker counts; runs of other sizes may be mixed if `n_params` is left None.
        n_params: parameters of the model (default: read from each run).
        network: whose documented alpha / beta fill in what the runs cannot determine.
        link: a `workbench.analysis.linkfit.LinkFit` (the exchange timed alone, at several
            sizes, bounded by physics; `linkfit.benchmark_link(client)` measures one): its
            alpha / beta replace the ones fitted from the runs' comm times, which mix in
            waiting (`how` is then "benchmark", and `link_fit` keeps the fit's standard
            errors and held-out error).
    Returns:
        A `Calibration`; `how` says whether alpha and beta were fitted.
    Raises:
        ConfigError: no run had step records, or an unknown network.
    """
    from ..results.result import RunResult

    if network not in NETWORKS:
        raise ConfigError("network", f"one of {list(NETWORKS)}", network)
    runs = [r if isinstance(r, RunResult) else RunResult.load(r) for r in results]
    by_kind: dict[str, tuple[list, list]] = {}
    points = []
    sizes = []
    overheads = []
    for r in runs:
        if not len(r.steps):
            continue
        overheads.append(step_overhead(r))
        np_run = n_params or n_params_of(r)
        sizes.append(np_run)
        kinds = _worker_kinds(r)
        steady = measure.steady_steps(r.steps)   # fit the steady state: warm-up is not compute speed
        kind_col = steady["worker"].map(lambda w: kinds.get(int(w), "cpu") if str(w).isdigit() else "cpu")
        accumulate = int(((r.summary or {}).get("config") or {}).get("accumulate") or 1)
        for kind, df in steady.assign(_kind=kind_col).groupby("_kind"):
            s_list, c_list = by_kind.setdefault(str(kind), ([], []))
            # one point per pass: a step of s samples in micro-batches is min(accumulate, s) passes of s / passes
            samples = df["samples"].to_numpy(dtype=float)
            passes = np.clip(np.minimum(accumulate, samples), 1, None)
            s_list.extend((samples / passes).tolist())
            c_list.extend((df["compute_s"].to_numpy(dtype=float) / passes).tolist())
        p = comm_point(r, np_run)
        if p is not None:
            points.append(p)
    if not sizes:
        raise ConfigError("results", "at least one run with step records", len(runs))
    compute = {k: fit_compute(s, c) for k, (s, c) in by_kind.items()}
    table = pd.DataFrame(points, columns=["algorithm", "workers", "n_bytes", "A", "B", "comm_s"])
    default = NETWORKS[network]
    alpha, beta, how = fit_alpha_beta(table["A"], table["B"], table["comm_s"], default.alpha, default.beta)
    link_fit = None
    if link is not None:
        if not all(hasattr(link, k) for k in ("alpha", "beta", "summary")):
            raise ConfigTypeError("link", "a linkfit.LinkFit (linkfit.benchmark_link or fit_link) or None", link)
        alpha, beta, how, link_fit = float(link.alpha), float(link.beta), "benchmark", link.summary()
    return Calibration(compute=compute, alpha=alpha, beta=beta, n_params=int(n_params or sizes[-1]),
                       overhead_s=float(np.median(overheads)), how=how, network=network, points=table,
                       link_fit=link_fit)


# ------------------------------------------------------------------------------ prediction
PREDICT_COLUMNS = ("algorithm", "network", "workers", "batch_size", "compute_s", "comm_s",
                   "step_time_s", "samples_per_s", "speedup", "efficiency", "bottleneck")


def step_prediction(cal: Calibration, algorithm: str, workers: int, batch_size: int, *,
                    network: str = MEASURED, allreduce: str = "ring", tau: int = 1,
                    round_size: int = 50, tournament_size: int = 256, chunks: int = 2,
                    kind: str = "cpu", sync_share: float = 0.0, compression: str = "none",
                    topology: str = "ring", optimizer: str = "sgd", accumulate: int = 1,
                    trainers: int | None = None, **compression_knobs: Any) -> dict[str, Any]:
    """Predicted time of one step and throughput of `algorithm` on `workers` workers.

    Args:
        cal: a Calibration.
        algorithm: an ALGORITHMS name.
        workers: P >= 1.
        batch_size: global batch B (b = B / P per worker; LTFB: B / K per trainer, split over its P / K workers).
        network: a NETWORKS name or "measured".
        allreduce: "ring", "tree", "dask_ring", "shm" or "threads" (synchronous algorithms; `ALLREDUCE_ALGORITHMS`).
        tau, round_size, tournament_size: algorithm knobs.
        trainers: LTFB's K, a divisor of `workers` (None: one trainer per worker, K = P).
        chunks: CGDP update chunks.
        kind: worker kind whose compute is used.
        sync_share: post_local_sgd's share of the run before its switch.
        compression, **compression_knobs: sync_sgd's compressed exchange (`compressed_terms`:
            compression_ratio, compression_levels, compression_rank, layer_shapes).
        optimizer: the update rule (`maths.optim.UPDATE_PASSES`): a server's update streams
            its passes through host memory; a worker's update adds its passes beyond sgd's
            three to the calibrated compute (which is taken as measured with sgd).
        accumulate: micro-batches a worker computes its slice in: as many passes, each
            paying the calibrated per-pass overhead c0.
    Returns:
        {compute_s, comm_s, step_time_s, samples_per_s, bottleneck}: per-step times of
        one worker (step_time_s = compute_s + comm_s + the calibrated overhead; comm_s
        includes waiting for a saturated server); samples_per_s of all workers together;
        bottleneck is "compute", "comm", "server" (saturated), or "one host only"
        (shared memory asked to span a network).
    """
    if isinstance(workers, bool) or int(workers) < 1:
        raise ConfigError("workers", "whole numbers >= 1", workers)
    _check_allreduce(allreduce)
    p, B = int(workers), float(batch_size)
    link = cal.link(network)
    a, bb, n = link.alpha, link.beta, float(cal.n_bytes)
    pattern = _pattern(algorithm)
    if pattern == "tournament":
        trainers_of(p, trainers)                         # K must divide P: refused before anything is computed
    per_worker = B / p                                   # LTFB: B / K per trainer, split over its P / K workers
    compute = cal.compute_s(kind, per_worker, passes=min(max(1, int(accumulate)), max(1.0, per_worker)))
    local = compute + cal.overhead_s                     # a worker's own time per step
    passes = update_passes(optimizer)                   # sgd: read x and g, write x
    update = passes * n / HOST_MEMORY_BYTES_PER_S
    if pattern not in ("server", "shared"):              # the workers apply the rule themselves
        local += (passes - update_passes("sgd")) * n / HOST_MEMORY_BYTES_PER_S
    case = _Step(workers=p, n_bytes=n, tau=tau, round_size=round_size, allreduce=allreduce, sync_share=sync_share,
                 compression=compression, knobs=compression_knobs, batch=B, alpha=a, beta=bb, compute=compute,
                 local=local, update=update, passes=passes, network=network, cal=cal, kind=kind, topology=topology,
                 tournament_size=tournament_size, chunks=chunks, trainers=trainers)
    rate, bottleneck = PATTERN_MODELS[pattern][1](case)
    step = p * per_worker / rate if rate > 0 else math.inf   # per worker, waiting included
    comm = max(0.0, step - local)
    if bottleneck is None:
        bottleneck = "comm" if comm > compute else "compute"
    return {"compute_s": compute, "comm_s": comm, "step_time_s": step, "samples_per_s": rate,
            "bottleneck": bottleneck}


# ------------------------------------------------------------------------------ the patterns, one table
@dataclass(frozen=True)
class _Step:
    """What a pattern's two functions read: the exchange (terms) and, for a prediction, the step's times."""

    workers: int
    n_bytes: float
    tau: int = 1
    round_size: int = 50
    allreduce: str = "ring"
    sync_share: float = 0.0
    compression: str = "none"
    topology: str = "ring"
    knobs: dict[str, Any] = field(default_factory=dict)
    batch: float = 0.0            # the global batch B (a prediction only, from here down)
    alpha: float = 0.0
    beta: float = 0.0
    compute: float = 0.0          # a worker's compute per step
    local: float = 0.0            # ... plus the calibrated per-step overhead
    network: str = MEASURED
    cal: Any = None
    kind: str = "cpu"
    tournament_size: int = 256
    chunks: int = 2
    trainers: int | None = None   # LTFB's K (None: one trainer per worker)
    update: float = 0.0           # one update of the parameters in host memory (the rule's passes)
    passes: float = 3.0           # the update rule's passes over the parameters (sgd: read x and g, write x)

    @property
    def per_worker(self) -> float:
        return self.batch / self.workers

    @property
    def exchange(self) -> float:
        """One push and one pull of the parameters."""
        return 2 * message_time(self.n_bytes, self.alpha, self.beta)


def _no_terms(s: _Step) -> None:
    return None   # not a network message (sgd, shared memory, cgdp's host path)


def _allreduce_terms(s: _Step) -> tuple[float, float]:
    if s.compression != "none":
        return compressed_terms(s.workers, s.n_bytes, s.compression, allreduce=s.allreduce, **s.knobs)
    return allreduce_terms(s.workers, s.n_bytes, s.allreduce)


def _periodic_terms(pattern: str) -> Callable[[_Step], tuple[float, float]]:
    def terms(s: _Step) -> tuple[float, float]:
        a, b = allreduce_terms(s.workers, s.n_bytes, s.allreduce)
        k = exchanges_per_step(pattern, s.tau, s.sync_share)
        return a * k, b * k
    return terms


def _server_terms(s: _Step) -> tuple[float, float]:
    return 2.0, 2.0 * s.n_bytes


def _every_tau_terms(s: _Step) -> tuple[float, float]:
    return 2.0 / s.tau, 2.0 * s.n_bytes / s.tau


def _gossip_terms(s: _Step) -> tuple[float, float]:
    return gossip_terms(s.workers, s.n_bytes, s.topology, tau=s.tau, allreduce=s.allreduce)


def _pairwise_terms(s: _Step) -> tuple[float, float]:
    """adpsgd: the worker's update to the model table and its averaged row back, every step."""
    return (2.0, 2.0 * s.n_bytes) if s.workers > 1 else (0.0, 0.0)


# LTFB's calls on its mailbox a tournament (`roles.TournamentMailbox`): deposit my model, collect
# the partner's. Each is a request and a reply (two latencies: the simulator's `SimServerState.serve`,
# the network emulator's server proxy, a Dask actor's call); the model travels in one and back in the other
TOURNAMENT_CALLS = 2


def tournament_terms(round_size: int) -> tuple[float, float]:
    """(A, B), in latencies and vectors, of LTFB's exchange per step: every `round_size` steps
    a trainer's leader deposits its model and collects its partner's, two calls of a request
    and a reply each (`TOURNAMENT_CALLS`): 4 latencies and the vector twice a tournament.

    >>> tournament_terms(10)
    (0.4, 0.2)
    """
    return 2.0 * TOURNAMENT_CALLS / round_size, 2.0 / round_size


def trainers_of(workers: int, trainers: int | None) -> int:
    """LTFB's K on `workers` workers: `trainers`, which must divide them (every trainer as
    many workers, `registry._ltfb_check`), or one trainer per worker when None.

    >>> trainers_of(8, 2), trainers_of(8, None)
    (2, 8)
    """
    p = int(workers)
    if trainers is None:
        return p
    if isinstance(trainers, bool) or not isinstance(trainers, (int, np.integer)) or trainers < 1 or p % int(trainers):
        raise ConfigError("trainers", f"a whole number >= 1 that divides the {p} workers", trainers)
    return int(trainers)


def ltfb_terms(workers: int, n_bytes: float, *, trainers: int | None = None, round_size: int = 50,
               allreduce: str = "ring") -> tuple[float, float]:
    """(A, B) of an LTFB worker's exchange per step: K trainers of g = P / K workers
    (`trainers_of`); every step the trainer's gradient allreduce among its g (`allreduce_terms`),
    and every `round_size` steps its leader's tournament on the mailbox (`tournament_terms`:
    none with one trainer, nobody to pair with) and its broadcast of the kept model to the
    trainer (one more allreduce of the vector among the g; its 2 floats of decision left out).
    The scoring of the two models is compute (`tournament_scoring_s`), not in these terms.

    >>> ltfb_terms(4, 100.0, trainers=4, round_size=10)   # one worker a trainer: the tournament alone
    (0.4, 20.0)
    >>> ltfb_terms(8, 100.0, trainers=2, round_size=10)   # ring of 4: (6, 150) a step, and again a round
    (7.0, 185.0)
    """
    k = trainers_of(workers, trainers)
    g = int(workers) // k
    a_ar, b_ar = allreduce_terms(g, n_bytes, allreduce) if g > 1 else (0.0, 0.0)
    a_t, b_t = tournament_terms(round_size) if k > 1 else (0.0, 0.0)
    return a_ar + a_ar / round_size + a_t, b_ar + b_ar / round_size + b_t * n_bytes   # every step, every round


def tournament_scoring_s(cal: Calibration, kind: str, tournament_size: int, trainers: int) -> float:
    """Seconds a leader scores models in one tournament: its own and (with a partner) the
    partner's, each a forward pass over its `tournament_size` rows, taken as 1/3 of a training
    pass of as many rows (the forward's share of the FLOPs, `maths.models.TRAIN_FLOPS_FACTOR`),
    the pass's overhead c0 included.

    >>> cal = Calibration(compute={"cpu": (0.003, 0.001)}, alpha=0.0, beta=0.0, n_params=10)
    >>> round(tournament_scoring_s(cal, "cpu", 60, 2), 9), round(tournament_scoring_s(cal, "cpu", 60, 1), 9)
    (0.042, 0.021)
    """
    from ..maths.models import TRAIN_FLOPS_FACTOR
    models = 2 if trainers > 1 else 1
    return models * cal.compute_s(kind, tournament_size) / TRAIN_FLOPS_FACTOR


def _tournament_terms(s: _Step) -> tuple[float, float]:
    return ltfb_terms(s.workers, s.n_bytes, trainers=s.trainers, round_size=s.round_size, allreduce=s.allreduce)


Rate = tuple[float, "str | None"]   # (samples/s of all workers, bottleneck or None)


def _alone_rate(s: _Step) -> Rate:
    return (s.batch / s.local if s.local > 0 else math.inf), None


def _allreduce_rate(terms: Callable[[_Step], tuple[float, float]]) -> Callable[[_Step], Rate]:
    def rate(s: _Step) -> Rate:
        A, B = terms(s)
        comm = A * s.alpha + B * s.beta
        return s.batch / (s.local + comm), None
    return rate


def _server_rate(period_of: Callable[[_Step], int]) -> Callable[[_Step], Rate]:
    def rate(s: _Step) -> Rate:
        period = period_of(s)
        workers_rate = s.workers * s.per_worker / (s.local + s.exchange / period)
        server_rate = s.per_worker * period / (s.exchange + s.update)   # one update at a time
        return min(workers_rate, server_rate), ("server" if server_rate < workers_rate else None)
    return rate


def _round_robin_rate(s: _Step) -> Rate:
    exchange, update = s.exchange, s.update
    cycle = max(s.tau * s.local + exchange + update, s.workers * (exchange + update))
    busy = s.workers * (exchange + update) > s.tau * s.local + exchange + update
    return s.workers * s.per_worker * s.tau / cycle, ("server" if busy else None)


def _shared_rate(period_of: Callable[[_Step], int]) -> Callable[[_Step], Rate]:
    def rate(s: _Step) -> Rate:
        comm = s.update / period_of(s)
        far = s.network not in ("shm", MEASURED) and s.workers > 1
        return s.workers * s.per_worker / (s.local + comm), ("one host only" if far else None)
    return rate


def mailbox_busy_s(trainers: int, n_bytes: float, beta: float) -> float:
    """Seconds LTFB's one mailbox is busy a tournament: every paired trainer's model in and out
    (2 floor(K/2) leaders, each a deposit and a collect of the vector), one after another
    through its link, first come first served (as `sim.roles.SimServerState.serve` queues
    them; its latencies overlap). A round cannot be shorter: past that the mailbox saturates.

    >>> mailbox_busy_s(5, 100.0, 0.01)    # 4 paired: 8 vectors of 1 s
    8.0
    """
    return 2.0 * 2 * (int(trainers) // 2) * n_bytes * beta


def _tournament_rate(s: _Step) -> Rate:
    k = trainers_of(s.workers, s.trainers)
    scoring = tournament_scoring_s(s.cal, s.kind, s.tournament_size, k) / s.round_size
    A, B = _tournament_terms(s)
    step = s.local + A * s.alpha + B * s.beta + scoring
    mailbox = mailbox_busy_s(k, s.n_bytes, s.beta) / s.round_size    # per step, the mailbox's share of a round
    samples = s.workers * s.per_worker
    return (samples / mailbox, "server") if mailbox > step else (samples / step, None)


def _host_rate(s: _Step) -> Rate:
    return s.batch / (cgdp_step_time(s.compute, s.n_bytes, s.workers, s.chunks, update_passes=s.passes)
                      + s.cal.overhead_s), None


def _every_step(s: _Step) -> int:
    return 1


def _every_tau(s: _Step) -> int:
    return s.tau


# Each communication pattern (`registry.PATTERNS`): its exchange per worker step as
# A alpha + B beta (None: no network message), and its predicted throughput.
PATTERN_MODELS: dict[str, tuple[Callable[[_Step], tuple[float, float] | None], Callable[[_Step], Rate]]] = {
    "none": (_no_terms, _alone_rate),
    "allreduce": (_allreduce_terms, _allreduce_rate(_allreduce_terms)),
    "elastic_allreduce": (_periodic_terms("elastic_allreduce"), _allreduce_rate(_periodic_terms("elastic_allreduce"))),
    "local_allreduce": (_periodic_terms("local_allreduce"), _allreduce_rate(_periodic_terms("local_allreduce"))),
    "post_local_allreduce": (_periodic_terms("post_local_allreduce"),
                             _allreduce_rate(_periodic_terms("post_local_allreduce"))),
    "server": (_server_terms, _server_rate(_every_step)),
    "elastic_server": (_every_tau_terms, _server_rate(_every_tau)),
    "round_robin": (_every_tau_terms, _round_robin_rate),
    "shared": (_no_terms, _shared_rate(_every_step)),
    "elastic_shared": (_no_terms, _shared_rate(_every_tau)),
    "gossip": (_gossip_terms, _allreduce_rate(_gossip_terms)),
    # the table serialises the atomic averages, as a server does (see algorithms/gossip.py)
    "pairwise": (_pairwise_terms, _server_rate(_every_step)),
    "tournament": (_tournament_terms, _tournament_rate),
    "host": (_no_terms, _host_rate),
}


def cgdp_step_time(compute_s: float, n_bytes: float, workers: int, chunks: int = 2,
                   link: Network = HOST_LINK, host_bytes_per_s: float = HOST_MEMORY_BYTES_PER_S,
                   update_passes: int = 3) -> float:
    """CGDP step: fwd + max(bwd, (C-1)/C H) + H/C, H = device->host, CPU sum+update, host->device.

    Forward is taken as 1/3 and backward 2/3 of `compute_s`; the last chunk's host path
    cannot overlap (the exposed tail).

    >>> round(cgdp_step_time(0.03, 0.0, 2, chunks=2, link=Network("x", 0.0, 0.0), host_bytes_per_s=1e30), 9)
    0.03
    """
    c = max(1, int(chunks))
    fwd, bwd = compute_s / 3, 2 * compute_s / 3
    # the host sums the P parts and updates (sgd: what the "+ 2" counted; a costlier rule adds its extra passes)
    host = (2 * c * link.alpha + 2 * n_bytes * link.beta
            + (workers + 2 + (update_passes - 3)) * n_bytes / host_bytes_per_s)
    return fwd + max(bwd, host * (c - 1) / c) + host / c


def predict(cal: Calibration, algorithm: str, workers: Sequence[int] = (1, 2, 4, 8, 16, 32, 64),
            batch_size: int = 256, mode: str = "strong", networks: Sequence[str] = (MEASURED,),
            **knobs: Any) -> pd.DataFrame:
    """Predicted scaling of `algorithm` for each network and worker count.

    Args:
        cal: a Calibration.
        algorithm: an ALGORITHMS name.
        workers: worker counts (any, beyond this machine's).
        batch_size: the global batch at workers[0].
        mode: "strong" (the global batch stays) or "weak" (it grows with the workers:
            batch_size * P / workers[0]), as `workbench.analysis.sweep` does.
        networks: names from NETWORKS, or "measured" for the calibrated alpha / beta.
        **knobs: passed to `step_prediction` (allreduce, tau, round_size, chunks, kind, ...).
    Returns:
        One row per (network, workers) with PREDICT_COLUMNS; speedup and efficiency are
        relative to workers[0] on the same network.
    """
    if mode not in ("strong", "weak"):
        raise ConfigError("mode", "one of ['strong', 'weak']", mode)
    ws = [int(w) for w in workers]
    if not ws or any(w < 1 for w in ws):
        raise ConfigError("workers", "a non-empty list of whole numbers >= 1", list(workers))
    rows = []
    for network in networks:
        base = None
        for w in ws:
            b = batch_size if mode == "strong" else max(1, round(batch_size * w / ws[0]))
            row = step_prediction(cal, algorithm, w, b, network=network, **knobs)
            if base is None:
                base = row["samples_per_s"]
            speedup = row["samples_per_s"] / base if base else math.nan
            rows.append({"algorithm": algorithm, "network": network, "workers": w, "batch_size": b, **row,
                         "speedup": speedup, "efficiency": speedup * ws[0] / w})
    return pd.DataFrame(rows, columns=list(PREDICT_COLUMNS))


def compare(cal: Calibration, table: pd.DataFrame, algorithm: str | None = None,
            **knobs: Any) -> tuple[pd.DataFrame, float]:
    """Prediction error on measured points (a sweep table), with the calibrated network.

    Args:
        cal: a Calibration.
        table: rows with workers, batch_size, samples_per_s (and algorithm, unless given).
        algorithm: the algorithm of every row (default: the table's "algorithm" column).
        **knobs: passed to `step_prediction`.
    Returns:
        (rows with workers, measured, predicted, error = predicted / measured - 1;
        the mean absolute relative error). `measured` is the table's samples_per_s
        (a sweep's: throughput over the training span, see `training_throughput`).
    """
    rows = []
    for r in table.to_dict("records"):
        algo = algorithm or r.get("algorithm")
        pred = step_prediction(cal, algo, int(r["workers"]), int(r["batch_size"]), network=MEASURED, **knobs)
        measured = float(r["samples_per_s"])
        err = pred["samples_per_s"] / measured - 1 if measured > 0 else math.nan
        rows.append({"workers": int(r["workers"]), "batch_size": int(r["batch_size"]), "measured": measured,
                     "predicted": pred["samples_per_s"], "error": err})
    out = pd.DataFrame(rows, columns=["workers", "batch_size", "measured", "predicted", "error"])
    errors = out["error"].abs().dropna()
    return out, float(errors.mean()) if len(errors) else math.nan
