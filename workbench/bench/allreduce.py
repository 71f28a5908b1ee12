"""The allreduce table of `python -m workbench bench`: our exchanges beside gloo's, in one run.

For each number of worker processes P and each buffer of n float32, every worker of a
local cluster times, round after round, one allreduce of the buffer by each of:

* the ring over Dask's comms (`comm="dask"`, `comm.ring`): the path between hosts;
* shared memory (`comm.shm`): the path the workbench takes on one host;
* torch.distributed's gloo, when torch is installed (the peer; never a dependency): a
  process group of the same worker processes, over tcp on 127.0.0.1.

The methods' order rotates from round to round, every call starts together (a
shared-memory barrier) and a round's time is its slowest rank's, so that the machine's
load, which moves from second to second on a shared host, falls on every method alike.
Each ratio to gloo is taken round by round (the same moment's load on both) and given
as min / median / max over the rounds.

The ring runs on two clusters: over plain tcp, like gloo (no encryption: what a cluster
of hosts started with `dask scheduler` / `dask worker` uses), and over tls (the local
cluster's own mutual TLS, which a secured cluster of hosts uses too: every byte is
encrypted and decrypted, which gloo never does). gloo and shared memory are measured
beside the ring on both.
"""
from __future__ import annotations

import os
import time
import uuid
from typing import Any

import numpy as np
import pandas as pd

SIZES = (10_000, 536_000)   # float32: 40 KB, and the 535k MLP's parameters (2.1 MB)
RANKS = (2, 3, 4)
LINKS = ("tcp", "tls")
ROUNDS = 40
RING, SHM, GLOO = "ring", "shared memory", "gloo"


MAX_RANKS = 64   # each rank is a worker process of one local cluster


def worker_counts(text: str | None) -> tuple[int, ...]:
    """`bench --allreduce --workers 2,4` as the table's numbers of worker processes
    (None: `RANKS`); ConfigError unless each is a whole number in [2, MAX_RANKS].

    >>> worker_counts("2,4"), worker_counts("3"), worker_counts(None)
    ((2, 4), (3,), (2, 3, 4))
    """
    from ..config import ConfigError
    if text is None:
        return RANKS
    allowed = f"comma-separated numbers of worker processes, each a whole number in [2, {MAX_RANKS}]"
    try:
        counts = tuple(dict.fromkeys(int(w) for w in str(text).split(",") if w.strip()))
    except ValueError:
        raise ConfigError("workers", allowed, text) from None
    if not counts or not all(2 <= p <= MAX_RANKS for p in counts):
        raise ConfigError("workers", allowed, text)
    return counts


def allreduce_rounds(ring: str, rank: int, size: int, peers: list[str], segment: str | None,
                     gloo_port: int | None, n: int, rounds: int, gloo_host: str = "127.0.0.1") -> dict[str, Any]:
    """Runs on a worker: `rounds` rounds of one allreduce of n float32 by each method (the
    ring; shared memory when `segment` names one, i.e. on one host; gloo when `gloo_port`,
    rank 0 listening on `gloo_host`), interleaved as the module says. Each call starts
    after a barrier: shared memory's on one host, else gloo's, else the ring's own.

    Returns:
        {"times": {method: [seconds per round]}, "ring_sent": the ring's payload bytes
        this rank sent in one allreduce}.
    """
    from ..comm.ring import RingComm
    buf = np.full(n, rank + 1.0, np.float32)
    ring_comm = RingComm(ring, rank, size, peers)
    # (prepare, call): only the call is timed
    methods: dict[str, tuple[Any, Any]] = {RING: (None, lambda: ring_comm.allreduce(buf))}
    shm = gloo = None
    barrier = ring_comm.barrier
    if segment is not None:
        from ..comm.shm import ShmComm
        shm = ShmComm(segment, rank, size, n)
        methods[SHM] = (None, lambda: shm.allreduce(buf))
        barrier = shm.barrier
    if gloo_port is not None:
        from .torchpeer import GlooComm
        gloo = GlooComm(rank, size, gloo_port, n, host=gloo_host)
        methods[GLOO] = (lambda: gloo.load(buf), gloo.allreduce)
        barrier = barrier if shm is not None else gloo.barrier
    try:
        for prepare, call in methods.values():            # connections opened, buffers made
            if prepare is not None:
                prepare()
            call()
        before = ring_comm.sent_bytes
        ring_comm.allreduce(buf)
        sent = ring_comm.sent_bytes - before
        order = list(methods)
        times: dict[str, list[float]] = {k: [] for k in order}
        for i in range(rounds):
            for k in order[i % len(order):] + order[:i % len(order)]:
                prepare, call = methods[k]
                if prepare is not None:
                    prepare()
                barrier()
                t0 = time.perf_counter()
                call()
                times[k].append(time.perf_counter() - t0)
        barrier()
        return {"times": times, "ring_sent": sent}
    finally:
        ring_comm.close()
        if shm is not None:
            shm.close()
        if gloo is not None:
            gloo.close()


def summarise(times: dict[str, np.ndarray], reference: str = GLOO) -> dict[str, dict[str, float]]:
    """Min / median / max of each method's times (ms), and of its ratio to `reference`
    round by round (absent without the reference).

    >>> s = summarise({"gloo": np.array([1e-3, 2e-3, 4e-3]), "ring": np.array([2e-3, 2e-3, 6e-3])})
    >>> s["ring"]["median_ms"], s["ring"]["vs_gloo_min"], s["ring"]["vs_gloo_median"], s["ring"]["vs_gloo_max"]
    (2.0, 1.0, 1.5, 2.0)
    """
    out = {}
    for k, t in times.items():
        t = np.asarray(t, float)
        row = {"min_ms": float(t.min()) * 1e3, "median_ms": float(np.median(t)) * 1e3, "max_ms": float(t.max()) * 1e3}
        if reference in times:
            ratio = t / np.asarray(times[reference], float)
            row.update(vs_gloo_min=float(ratio.min()), vs_gloo_median=float(np.median(ratio)),
                       vs_gloo_max=float(ratio.max()))
        out[k] = row
    return out


NO_TORCH = ("gloo (PyTorch) not measured: torch is not installed here (`pip install 'parallel-workbench[torch]'` "
            "adds the peer; the workbench never needs it)")


def gloo_plan(gloo: bool | None) -> tuple[bool, list[str]]:
    """Whether to measure gloo (None: when torch is importable), and the note saying why not
    when it was not asked off."""
    from .torchpeer import torch_available
    if gloo is None:
        gloo = torch_available()
        return gloo, [] if gloo else [NO_TORCH]
    return gloo, []


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def allreduce_table(ranks: tuple[int, ...] = RANKS, sizes: tuple[int, ...] = SIZES, rounds: int = ROUNDS,
                    links: tuple[str, ...] = LINKS, gloo: bool | None = None) -> tuple[pd.DataFrame, list[str]]:
    """Measure the table (see the module's docstring) on a local cluster of max(ranks)
    workers per link.

    Args:
        ranks: numbers of worker processes.
        sizes: buffer lengths (float32).
        rounds: rounds per (link, P, n).
        links: "tcp" and/or "tls": the clusters the ring runs over.
        gloo: measure gloo (default: when torch is importable).
    Returns:
        One row per (link, workers, floats, method): min/median/max ms and, with gloo, the
        ratio to gloo (min/median/max over the rounds), plus the ring's bytes sent per
        worker; and notes (why gloo is missing).
    """
    from ..comm.ring import install
    from ..comm.shm import allreduce_nbytes, create_segment, unlink_segment
    from ..execution.cluster import close_client, make_cluster, workers_of
    gloo, notes = gloo_plan(gloo)
    rows = []
    for link in links:
        client = make_cluster(cpus=max(ranks), gpus=0, quiet=True, tls=link == "tls")
        try:
            workers = workers_of(client)
            for p in ranks:
                peers = [w["address"] for w in workers[:p]]
                client.run(install, workers=peers)
                for n in sizes:
                    segment = f"wba{uuid.uuid4().hex[:10]}"
                    client.submit(create_segment, segment, allreduce_nbytes(p, n), workers=[peers[0]],
                                  pure=False).result()
                    try:
                        port, ring = (_free_port() if gloo else None), uuid.uuid4().hex
                        futs = [client.submit(allreduce_rounds, ring, r, p, peers, segment, port, n, rounds,
                                              workers=[a], pure=False) for r, a in enumerate(peers)]
                        got = client.gather(futs)
                    finally:
                        client.submit(unlink_segment, segment, workers=[peers[0]], pure=False).result()
                    slowest = {k: np.array([g["times"][k] for g in got]).max(axis=0) for k in got[0]["times"]}
                    sent = max(g["ring_sent"] for g in got)
                    for method, stats in summarise(slowest).items():
                        rows.append({"link": link, "workers": p, "floats": n, "method": method, **stats,
                                     "sent_bytes": sent if method == RING else float("nan")})
        finally:
            close_client(client)
    return pd.DataFrame(rows), notes


def _pick(group: pd.DataFrame, link: str, method: str) -> pd.Series | None:
    g = group[(group["method"] == method) & (group["link"] == link)]
    return g.iloc[0] if len(g) else None


def _cell(row: pd.Series | None, keys: tuple[str, str, str], fmt: str = ".2f") -> str:
    """ "median [min-max]" of three of a row's columns (min, median, max); empty if absent."""
    if row is None or not np.isfinite(row.get(keys[1], np.nan)):
        return ""
    lo, mid, hi = (row[k] for k in keys)
    return f"{mid:{fmt}} [{lo:{fmt}}-{hi:{fmt}}]"


MS = ("min_ms", "median_ms", "max_ms")
VS_GLOO = ("vs_gloo_min", "vs_gloo_median", "vs_gloo_max")


def size_label(nbytes: float) -> str:
    """A buffer's size as the table prints it.

    >>> size_label(40_000), size_label(2_144_000), size_label(12)
    ('40 KB', '2.1 MB', '12 B')
    """
    if nbytes >= 1e6:
        return f"{nbytes / 1e6:.1f} MB"
    return f"{nbytes / 1e3:.0f} KB" if nbytes >= 1e3 else f"{nbytes:.0f} B"


def format_table(table: pd.DataFrame) -> str:
    """The table as printed: one line per (workers, size), the ring over each link, gloo
    and shared memory in ms (median [min-max], gloo's and shared memory's from the first
    link's cluster), and the ring's ratios to gloo.

    >>> t = pd.DataFrame([{"link": "tcp", "workers": 2, "floats": 10, "method": m, "min_ms": 1.0,
    ...                    "median_ms": 2.0, "max_ms": 3.0, "vs_gloo_min": 1.0, "vs_gloo_median": 1.0,
    ...                    "vs_gloo_max": 1.0} for m in ("ring", "gloo")])
    >>> print(format_table(t))
    workers  size       ring tcp ms           gloo ms   ring tcp / gloo
          2  40 B  2.00 [1.00-3.00]  2.00 [1.00-3.00]  1.00 [1.00-1.00]
    """
    links = list(dict.fromkeys(table["link"]))
    others = [m for m in (GLOO, SHM) if m in set(table["method"])]
    head = ["workers", "size", *(f"ring {x} ms" for x in links), *(f"{m} ms" for m in others)]
    head += [f"ring {x} / gloo" for x in links] if GLOO in others else []
    lines = []
    for (p, n), group in table.groupby(["workers", "floats"], sort=False):
        cells = [str(p), size_label(4 * n), *(_cell(_pick(group, x, RING), MS) for x in links)]
        cells += [_cell(_pick(group, links[0], m), MS) for m in others]
        cells += [_cell(_pick(group, x, RING), VS_GLOO) for x in links] if GLOO in others else []
        lines.append(cells)
    widths = [max(len(h), *(len(c[i]) for c in lines)) for i, h in enumerate(head)]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(cells, widths)) for cells in [head, *lines])


def header_line(rounds: int, gloo: bool) -> str:
    """What the table is, with the machine's load and BLAS settings (a shared host's numbers
    mean something only beside them); its ratios to gloo only where gloo is measured (`gloo`,
    `gloo_plan`'s answer: without torch there are none)."""
    blas = {k: os.environ.get(k, "(unset)") for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return (f"allreduce of n float32 between P worker processes on this host: ms per call, median [min-max] of "
            f"{rounds} interleaved rounds (each the slowest rank's){'; ratios to gloo round by round' if gloo else ''}. "
            f"Load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores; {blas}")
