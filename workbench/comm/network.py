"""The network model: links as latency and inverse bandwidth, and the collectives' alpha-beta times.

Hockney's alpha-beta model (as in Thakur et al. 2005): one message of n bytes takes
alpha + n beta; a ring allreduce of P workers 2 (P-1)/P n beta + 2 (P-1) alpha (the standard
ring, two messages at P = 2; our ring over Dask swaps whole buffers there, alpha + n beta:
`swap_allreduce_time`); a
binary-tree one 2 ceil(log2 P) (alpha + n beta); replicas in one shared memory (the
partitions of a chip) a tree of sums through it. Pure data and pure functions, low in
the layers, so that the cost model (`analysis.costmodel`) and the simulated cluster
(`sim.costs`, the simulator's transport) charge the same formulas from one definition.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Network:
    """Latency and inverse bandwidth of one link, as an allreduce sees it."""

    name: str
    alpha: float   # seconds per message (software stack included)
    beta: float    # seconds per byte (1 / effective bandwidth)
    note: str = ""


MEASURED = "measured"           # the network name of alpha / beta calibrated on this machine's runs

# Orders of magnitude, for "what if"; calibrate from a run on the real network to replace them.
NETWORKS: dict[str, Network] = {
    "shm": Network("shm", 20e-6, 1 / 2e9,
                   "this host: shared memory between worker processes; ~20 us per exchange "
                   "(two flag barriers polled from Python), ~2 GB/s copy-and-sum through one core"),
    "10GbE": Network("10GbE", 50e-6, 1 / 1.1e9,
                     "10 Gb/s Ethernet over TCP: ~50 us a message through the kernel stack (an NCCL/MPI-class "
                     "library's latency), ~1.1 GB/s achievable. Our ring over Dask (comm.ring) pays more a "
                     "message: 0.22-0.61 ms measured between two hosts' TCP stacks on the shared 2-core VM "
                     "(benchmarks/ring_two_hosts.py, 2026-12-05, load 6-7; docs/benchmarks.md), so for it "
                     "this profile's latency is optimistic: benchmark the link (analysis.linkfit) instead"),
    "100GbE": Network("100GbE", 20e-6, 1 / 11e9,
                      "100 Gb/s Ethernet over TCP: ~20 us, ~11 GB/s achievable"),
    "InfiniBand HDR": Network("InfiniBand HDR", 2e-6, 1 / 23e9,
                              "200 Gb/s HDR with RDMA: ~2 us, ~23 GB/s achievable"),
    "NVLink": Network("NVLink", 10e-6, 1 / 150e9,
                      "GPU-GPU NVLink (A100 class) through NCCL: ~10 us per call (kernel launch), "
                      "~150 GB/s allreduce bus bandwidth"),
}
HOST_LINK = Network("PCIe 4.0 x16", 10e-6, 1 / 20e9, "device <-> host copies (CGDP): ~20 GB/s")
HOST_MEMORY_BYTES_PER_S = 10e9  # one core streaming sum / update over host memory


def message_time(n_bytes: float, alpha: float, beta: float) -> float:
    """Time of one message: alpha + n beta.

    >>> round(message_time(1000, 1e-6, 1e-9), 12)
    2e-06
    """
    return alpha + n_bytes * beta


def ring_allreduce_time(workers: int, n_bytes: float, alpha: float, beta: float) -> float:
    """Ring allreduce (reduce-scatter + allgather): 2 (P-1)/P n beta + 2 (P-1) alpha: the
    standard ring of NCCL, gloo and MPI, 2 (P-1) messages of n/P bytes at every P, two at
    P = 2 (what the simulator and the cost model charge as "ring"). Our ring over Dask
    swaps whole buffers at P = 2 instead (`swap_allreduce_time`).

    >>> ring_allreduce_time(4, 1e6, 1e-5, 1e-9)  # 1.5e-3 + 6e-5
    0.00156
    >>> ring_allreduce_time(1, 1e6, 1e-5, 1e-9)
    0.0
    """
    p = int(workers)
    return 2 * (p - 1) / p * n_bytes * beta + 2 * (p - 1) * alpha


def swap_allreduce_time(workers: int, n_bytes: float, alpha: float, beta: float) -> float:
    """Our ring over Dask's connections (`comm.ring`): at P = 2 the two ranks swap whole
    buffers, one message of n bytes each way at once, alpha + n beta (the same bytes as the
    ring, one hop instead of two); at P >= 3 the ring (`ring_allreduce_time`).

    >>> round(swap_allreduce_time(2, 1e6, 1e-5, 1e-9), 9)     # 1e-5 + 1e-3; the ring: 2e-5 + 1e-3
    0.00101
    >>> swap_allreduce_time(4, 1e6, 1e-5, 1e-9) == ring_allreduce_time(4, 1e6, 1e-5, 1e-9)
    True
    """
    if int(workers) == 2:
        return alpha + n_bytes * beta
    return ring_allreduce_time(workers, n_bytes, alpha, beta)


def shm_terms(workers: int, n_bytes: float, capacity: int) -> tuple[float, float]:
    """(A, B), time = A alpha + B beta, of an exchange through this host's shared memory
    (`comm.shm.ShmComm`) among `workers` whose segment holds `capacity` elements: one
    latency per barrier meeting (`shm.allreduce_meetings`: 1 for a pair with a small
    segment, else 2; its allgather and neighbour exchange meet as often) and the `n_bytes`
    each worker moves (an allreduce: the vector once, its copy in and its share of the
    sum; a gather: the others' payloads it reads). Alone: nothing (the solo copy is a pass
    through memory, `shm.solo_copies`, charged by the simulator apart). The cost model
    (`allreduce="shm"`) and the simulator's shm network both charge these.

    >>> shm_terms(2, 4000.0, 1006), shm_terms(2, 4000.0, 100_000), shm_terms(4, 4000.0, 1006), shm_terms(1, 9.0, 9)
    ((1.0, 4000.0), (2.0, 4000.0), (2.0, 4000.0), (0.0, 0.0))
    """
    from .shm import allreduce_meetings
    p = int(workers)
    return float(allreduce_meetings(p, int(capacity))), float(n_bytes) if p > 1 else 0.0


def shm_allreduce_time(workers: int, n_bytes: float, alpha: float, beta: float, capacity: int) -> float:
    """An allreduce of `n_bytes` through this host's shared memory (`shm_terms`).

    >>> round(shm_allreduce_time(2, 1e6, 1e-5, 1e-9, 9_616) * 1e6, 6), round(shm_allreduce_time(2, 1e6, 1e-5, 1e-9, 10**6) * 1e6, 6)
    (1010.0, 1020.0)
    """
    a, b = shm_terms(workers, n_bytes, capacity)
    return a * alpha + b * beta


def shm_compressed_terms(workers: int, payload_bytes: float, gather: bool, capacity: int) -> tuple[float, float]:
    """(A, B) of one compressed exchange (`maths.compress.payload`) through this host's shared
    memory: an allgather of the payloads (`ShmComm.allgather`: the P - 1 others' read) or an
    allreduce of one (random-k's values, a PowerSGD factor: `ShmComm.allreduce`). Either
    travels through the run's one segment, whose `capacity` (the elements of the run's
    largest buffer, `AlgorithmSpec.comm_elems`: the whole vector and its tail) decides the
    path and so the meetings (`shm_terms`), however small the payload: a 2-worker run whose
    segment is over `shm.PAIR_MAX` meets twice for a payload of 40 bytes. The simulator's
    compressed exchange on shm and the cost model's (`compressed_terms`) both read this.

    >>> shm_compressed_terms(2, 40.0, False, 16_384), shm_compressed_terms(2, 40.0, False, 16_385)
    ((1.0, 40.0), (2.0, 40.0))
    >>> shm_compressed_terms(4, 40.0, True, 1_000), shm_compressed_terms(1, 40.0, True, 1_000)
    ((2.0, 120.0), (0.0, 0.0))
    """
    p = int(workers)
    a, _ = shm_terms(p, payload_bytes, capacity)
    if p <= 1:
        return 0.0, 0.0
    return a, float(p - 1) * payload_bytes if gather else float(payload_bytes)


def tree_levels(workers: int) -> int:
    """Depth of a binary reduction tree over P workers: ceil(log2 P).

    >>> [tree_levels(p) for p in (1, 2, 3, 4, 8, 9)]
    [0, 1, 2, 2, 3, 4]
    """
    return math.ceil(math.log2(int(workers))) if workers > 1 else 0


def tree_allreduce_time(workers: int, n_bytes: float, alpha: float, beta: float) -> float:
    """Binary-tree reduce then broadcast: 2 ceil(log2 P) (alpha + n beta).

    >>> round(tree_allreduce_time(4, 1e6, 1e-5, 1e-9), 9)  # 2 * 2 * (1e-5 + 1e-3)
    0.00404
    """
    return 2 * tree_levels(workers) * (alpha + n_bytes * beta)


def shared_tree_allreduce_time(workers: int, n_bytes: float, alpha: float, beta: float) -> float:
    """Replicas in one shared memory (the partitions of a chip) summed by a binary tree:
    ceil(log2 P) levels, each synchronised on the way up and down (2 alpha a level); the
    P - 1 pairwise sums each read two vectors and write one, all through that one memory
    (beta: its seconds per byte), 3 (P-1) n beta; the broadcast moves nothing (every
    replica reads the sum in its own update).

    >>> round(shared_tree_allreduce_time(4, 1e6, 1e-6, 1e-9), 9)   # 2 * 2 * 1 us + 3 * 3 * 1 ms
    0.009004
    >>> shared_tree_allreduce_time(1, 1e6, 1e-6, 1e-9)
    0.0
    """
    return 2 * tree_levels(workers) * alpha + 3 * (int(workers) - 1) * n_bytes * beta
