"""The global minibatch order: which samples make each global step, and how a global batch
is cut into per-worker slices.

The order depends on the seed and the epoch only, never on the workers: `global_batch`
gives the sample indices of step `step` and `split_batch` cuts that batch into contiguous
slices, one per worker (by speed share when workers differ). `partition` gives fixed
disjoint shards (LTFB's trainers).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

import numpy as np

from .dataset import DataError, _check_int


def steps_per_epoch(n_train: int, batch_size: int) -> int:
    """Number of global steps in one epoch; the last partial batch is dropped.

    Args:
        n_train: training set size N.
        batch_size: global batch size B, 1 <= B <= N.

    Returns:
        ``N // B``.

    >>> steps_per_epoch(1437, 256)
    5
    """
    n_train = _check_int("n_train", n_train, 1)
    batch_size = _check_int("batch_size", batch_size, 1)
    if batch_size > n_train:
        raise DataError(f"batch_size: at most the training set size ({n_train}), got {batch_size}")
    return n_train // batch_size


def batch_order(n_train: int, batch_size: int, seed: int, epoch: int) -> np.ndarray:
    """The sample order of one epoch: a permutation drawn from (seed, epoch) only.

    Global batch ``k`` of the epoch is ``order[k * batch_size:(k + 1) * batch_size]``.
    The order never depends on ``batch_size`` or on the workers; ``batch_size`` is only
    checked here so a bad one fails early.

    Args:
        n_train: training set size N.
        batch_size: global batch size B, 1 <= B <= N.
        seed: run seed, >= 0.
        epoch: epoch number, >= 0.

    Returns:
        (N,) int64, a fresh (writable) permutation of ``range(N)``.

    >>> order = batch_order(10, 4, seed=0, epoch=0)
    >>> sorted(order.tolist()) == list(range(10))
    True
    >>> bool((order == batch_order(10, 4, seed=0, epoch=0)).all())
    True
    """
    steps_per_epoch(n_train, batch_size)
    seed = _check_int("seed", seed, 0)
    epoch = _check_int("epoch", epoch, 0)
    rng = np.random.default_rng([seed, epoch])
    return rng.permutation(int(n_train)).astype(np.int64, copy=False)


@functools.lru_cache(maxsize=4)
def _epoch_order(n_train: int, seed: int, epoch: int) -> np.ndarray:
    order = batch_order(n_train, 1, seed, epoch)
    order.flags.writeable = False  # global_batch hands out views of it
    return order


def global_batch(n_train: int, batch_size: int, seed: int, step: int) -> np.ndarray:
    """Sample indices of global step ``step`` (epoch ``step // steps_per_epoch``).

    Cheap to call every step: the current epoch's order is cached.

    Args:
        n_train: training set size N.
        batch_size: global batch size B, 1 <= B <= N.
        seed: run seed, >= 0.
        step: global step, >= 0, counted from the start of training.

    Returns:
        (B,) int64, a read-only view; equal to
        ``batch_order(N, B, seed, epoch)[k * B:(k + 1) * B]`` with ``epoch, k = divmod(step, N // B)``.

    >>> global_batch(10, 4, 0, 2).tolist() == batch_order(10, 4, 0, 1)[:4].tolist()
    True
    """
    spe = steps_per_epoch(n_train, batch_size)
    seed = _check_int("seed", seed, 0)
    step = _check_int("step", step, 0)
    epoch, k = divmod(step, spe)
    order = _epoch_order(int(n_train), seed, epoch)
    return order[k * batch_size : (k + 1) * batch_size]


def _largest_remainder(total: int, weights: np.ndarray) -> np.ndarray:
    """Integers summing to ``total``, proportional to ``weights`` (ties to lower index)."""
    quotas = total * (weights / weights.sum())
    sizes = np.floor(quotas).astype(np.int64)
    left = max(total - int(sizes.sum()), 0)
    by_remainder = np.argsort(-(quotas - sizes), kind="stable")
    sizes[by_remainder[:left]] += 1
    return sizes


def split_batch(batch_size: int, shares: Iterable[float]) -> list[tuple[int, int]]:
    """Cut a global batch into contiguous slices, one per worker, sized by ``shares``.

    Sizes follow the shares by largest-remainder rounding (ties go to the lower worker
    index), then every worker with 0 samples takes one from the worker most above its
    quota, so each worker gets at least one sample. Deterministic.

    Args:
        batch_size: global batch size B, at least the number of workers P.
        shares: P positive finite numbers (e.g. measured speeds), any sequence or
            1-D array; only their ratios matter. Not modified.

    Returns:
        P ``(start, stop)`` pairs covering ``range(B)`` in order.

    >>> split_batch(10, [1, 1, 2])
    [(0, 3), (3, 5), (5, 10)]
    >>> split_batch(4, [100, 1, 1])
    [(0, 2), (2, 3), (3, 4)]
    """
    allowed = "a non-empty sequence of positive finite numbers"
    try:
        if isinstance(shares, (str, bytes)):
            raise TypeError
        weights = np.array([float(s) for s in shares], dtype=np.float64)
    except (TypeError, ValueError):
        raise DataError(f"shares: {allowed}, got {shares!r}") from None
    if len(weights) == 0 or not (np.isfinite(weights).all() and (weights > 0).all()):
        raise DataError(f"shares: {allowed}, got {shares!r}")
    batch_size = _check_int("batch_size", batch_size, 1)
    n_workers = len(weights)
    if batch_size < n_workers:
        raise DataError(f"batch_size: at least the number of workers ({n_workers}), got {batch_size}")

    quotas = batch_size * (weights / weights.sum())
    sizes = _largest_remainder(batch_size, weights)
    for i in np.flatnonzero(sizes == 0):
        surplus = np.where(sizes > 1, sizes - quotas, -np.inf)
        donor = int(np.argmax(surplus))  # exists: B >= P, so someone holds >= 2
        sizes[donor] -= 1
        sizes[i] += 1
    stops = np.cumsum(sizes)
    return [(int(stop - size), int(stop)) for size, stop in zip(sizes, stops)]


def partition(n: int, parts: int, seed: int) -> list[np.ndarray]:
    """Split ``range(n)`` at random into ``parts`` disjoint near-equal shards.

    For algorithms whose workers (or trainers) each own a fixed share of the data.
    Shard sizes differ by at most one; the first ``n % parts`` shards are the larger.

    Args:
        n: number of samples, >= parts.
        parts: number of shards, >= 1.
        seed: >= 0; the shards depend on (n, parts, seed) only.

    Returns:
        ``parts`` sorted int64 index arrays that together cover ``range(n)`` once.

    >>> [len(p) for p in partition(10, 3, seed=0)]
    [4, 3, 3]
    """
    parts = _check_int("parts", parts, 1)
    n = _check_int("n", n, 1)
    if parts > n:
        raise DataError(f"parts: at most the number of samples ({n}), got {parts}")
    seed = _check_int("seed", seed, 0)
    # spawn_key keeps this stream apart from batch_order's default_rng([seed, epoch])
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(0x5A17,)))
    perm = rng.permutation(n).astype(np.int64, copy=False)
    return [np.sort(shard) for shard in np.array_split(perm, parts)]
