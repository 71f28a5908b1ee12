"""Datasets and the global minibatch order.

Every dataset comes back as a :class:`Dataset` of read-only float32 features and
int64 labels, scaled to roughly unit size, with a fixed train/test split:

- ``digits``: scikit-learn's bundled 8x8 digits (offline). The split is stratified and
  fixed (split seed 0, never the run seed), so test sets compare across runs.
- ``mnist1d``: our own generator of 1-D "digits": ten fixed template curves, each sample
  shifted, stretched, scaled, sheared and noised, sampled at 40 points. A linear model
  gets clearly less accuracy on it than an MLP.
- ``synthetic``: labels from a random teacher MLP on Gaussian inputs; size, width and
  class count scale freely (generated in chunks, so 1e6 x 784 fits in its output).
- ``mnist``, ``fashion_mnist``, ``cifar10``: the official files, fetched only when
  ``download=True`` into ``cache_dir()/<name>/`` and checked before use (see
  :func:`load_dataset` for how).

The global minibatch order depends on the seed and the epoch only, never on the
workers: :func:`global_batch` gives the sample indices of step ``step`` and
:func:`split_batch` cuts that batch into contiguous slices, one per worker.
"""

from __future__ import annotations

import codecs
import functools
import gzip
import hashlib
import os
import pickle
import re
import tarfile
import uuid
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .util.fileio import atomic_write

__all__ = [
    "DATASETS",
    "DataError",
    "Dataset",
    "batch_order",
    "cache_dir",
    "clear_cache",
    "global_batch",
    "load_dataset",
    "partition",
    "split_batch",
    "steps_per_epoch",
]

DATASETS: dict[str, str] = {
    "digits": "scikit-learn 8x8 handwritten digits, 1797 images, 10 classes (bundled, offline)",
    "mnist1d": "generated 1-D digit-like curves, 40 features, 10 classes (offline)",
    "synthetic": "random teacher-MLP labels on Gaussian inputs; "
                 "n_samples, n_features, n_classes scale freely",
    "mnist": "MNIST handwritten digits, 60k/10k 28x28 grey images (download=True to fetch)",
    "fashion_mnist": "Fashion-MNIST clothing, 60k/10k 28x28 grey images (download=True to fetch)",
    "cifar10": "CIFAR-10 objects, 50k/10k 32x32 colour images (download=True to fetch)",
}

DATA_ENV = "WORKBENCH_DATA"  # overrides the default cache folder ~/.cache/workbench
URL_ENV = "WORKBENCH_DATA_URL"  # a mirror: files are fetched from <url>/<dataset>/<file>

# Official sources, tried in order. Each entry is a folder URL holding the dataset's files.
URLS: dict[str, list[str]] = {
    "mnist": [
        "https://ossci-datasets.s3.amazonaws.com/mnist/",
        "https://storage.googleapis.com/cvdf-datasets/mnist/",
        "http://yann.lecun.com/exdb/mnist/",
    ],
    "fashion_mnist": [
        "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
        "https://fashion-mnist.s3.eu-central-1.amazonaws.com/",
    ],
    "cifar10": ["https://www.cs.toronto.edu/~kriz/"],
}

_IDX_FILES = (
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
)
FILES: dict[str, tuple[str, ...]] = {
    "mnist": _IDX_FILES,
    "fashion_mnist": _IDX_FILES,
    "cifar10": ("cifar-10-python.tar.gz",),
}

# SHA-256 of the official files, as published by the torchvision, Keras and TFDS loaders.
# None means "unknown": such a file is accepted when it parses, and the hash of that first
# copy is recorded in a "<file>.sha256" sidecar that every later load checks against.
EXPECTED_SHA256: dict[str, dict[str, str | None]] = {
    "mnist": {
        "train-images-idx3-ubyte.gz": "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
        "train-labels-idx1-ubyte.gz": "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
        "t10k-images-idx3-ubyte.gz": "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
        "t10k-labels-idx1-ubyte.gz": "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
    },
    "fashion_mnist": {
        "train-images-idx3-ubyte.gz": "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84",
        "train-labels-idx1-ubyte.gz": "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845",
        "t10k-images-idx3-ubyte.gz": "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073",
        "t10k-labels-idx1-ubyte.gz": "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5",
    },
    "cifar10": {
        "cifar-10-python.tar.gz": "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce",
    },
}

_TIMEOUT_S = 60  # per network operation (connect, each read), not for the whole file
_MAX_DOWNLOAD_BYTES = 512 * 2**20  # the largest official file is 163 MiB; refuse runaway servers
_SPLIT_SEED = 0  # digits' train/test split: fixed, so test sets compare across run seeds
_CHUNK_ROWS = 1 << 16  # rows generated at a time; bounds the float64 temporaries
_CACHE_SIZE = 8  # datasets kept in process (each call with the same arguments is free)

_LABEL_NOISE = 0.1  # Gumbel scale on the synthetic teacher's unit-std logits
_MNIST1D_TEMPLATE_SEED = 1998  # the ten class templates are the same for every run seed
_MNIST1D_TEMPLATE_LEN = 12
_MNIST1D_LEN = 40


class DataError(ValueError):
    """A bad dataset argument or a missing/corrupt data file; says field, allowed, got."""


@dataclass(frozen=True, eq=False)
class Dataset:
    """A train/test split of features and labels; the arrays are read-only.

    Attributes:
        name: the ``DATASETS`` key it was loaded as.
        X_train: (N, F) float32 features, roughly unit scale.
        y_train: (N,) int64 labels in ``range(n_classes)``.
        X_test: (M, F) float32, scaled with the training set's statistics.
        y_test: (M,) int64.
        n_classes: number of classes.
        image_shape: (C, H, W) when each row is a flattened image, else None.
    """

    name: str
    X_train: np.ndarray = field(repr=False)
    y_train: np.ndarray = field(repr=False)
    X_test: np.ndarray = field(repr=False)
    y_test: np.ndarray = field(repr=False)
    n_classes: int
    image_shape: tuple[int, int, int] | None = None

    @property
    def n_features(self) -> int:
        """Number of features F (pixels for images)."""
        return int(self.X_train.shape[1])

    @property
    def n_train(self) -> int:
        """Number of training samples N."""
        return int(self.X_train.shape[0])

    @property
    def n_test(self) -> int:
        """Number of test samples M."""
        return int(self.X_test.shape[0])


# ---------------------------------------------------------------------------------------
# argument checks


def _check_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise DataError(f"{name}: an integer >= {minimum}, got {value!r}")
    if value < minimum:
        raise DataError(f"{name}: an integer >= {minimum}, got {value!r}")
    return int(value)


def _check_fraction(name: str, value: object) -> float:
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    if not ok or not 0.0 < float(value) < 1.0:  # NaN fails the comparison too
        raise DataError(f"{name}: a number strictly between 0 and 1, got {value!r}")
    return float(value)


def cache_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """The folder that holds downloaded datasets (one subfolder per dataset).

    Args:
        data_dir: an explicit folder; None means ``$WORKBENCH_DATA`` if set, else
            ``~/.cache/workbench``. The folder is not created here.

    Returns:
        The folder as a Path, with ``~`` expanded.

    >>> str(cache_dir("/data/wb"))
    '/data/wb'
    """
    if data_dir is None:
        data_dir = os.environ.get(DATA_ENV) or Path.home() / ".cache" / "workbench"
    if not isinstance(data_dir, (str, os.PathLike)):
        raise DataError(f"data_dir: a folder path or None, got {data_dir!r}")
    return Path(data_dir).expanduser()


# ---------------------------------------------------------------------------------------
# the global minibatch order


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


# ---------------------------------------------------------------------------------------
# loading


def load_dataset(
    name: str,
    *,
    n_samples: int = 10000,
    n_features: int = 64,
    n_classes: int = 10,
    seed: int = 0,
    data_dir: str | os.PathLike | None = None,
    download: bool = False,
    test_fraction: float = 0.2,
) -> Dataset:
    """Load or generate a dataset; repeated calls with the same arguments are free.

    What each argument does depends on the dataset:

    - ``digits``: only ``test_fraction``; the split is fixed (split seed 0) whatever ``seed``.
      Pixels /16, then each feature centred on its training mean.
    - ``mnist1d``: ``n_samples`` (total, train + test), ``seed``, ``test_fraction``; always
      40 features and 10 classes. Each feature centred, then all divided by one training std.
    - ``synthetic``: ``n_samples`` (total), ``n_features``, ``n_classes``, ``seed``,
      ``test_fraction``. X ~ N(0, 1); labels are the argmax of a random teacher MLP
      (n_features -> 2 * n_classes tanh -> n_classes, weights from ``seed``, output biases
      tuned so the classes are about equally frequent) plus small Gumbel noise.
    - ``mnist``, ``fashion_mnist``, ``cifar10``: the official train/test split; the
      size arguments and ``seed`` are ignored. Pixels /255, then each centred on its
      training mean. ``data_dir`` (default :func:`cache_dir`) holds ``<name>/<files>``.

    Downloads happen only with ``download=True`` and only for missing files: from
    ``URLS[name]`` in order, or from ``$WORKBENCH_DATA_URL/<name>/<file>`` when that is
    set. Each file streams through pooch (with a progress bar in the process that asked,
    never in a Dask worker) into a temporary file beside its target, is checked, then
    renamed into place, so an interrupted download never leaves a partial file. Checks:
    where ``EXPECTED_SHA256`` knows the official hash (all official files today), the
    file must match it, on download and on every load. Where it holds None, the file
    must parse in full (right magic numbers, sizes and members) and the hash of that
    first copy goes into a ``<file>.sha256`` sidecar, which later loads check: this
    catches later corruption or truncation, but trusts the first copy. A download that
    fails a check is discarded; a cached file that fails one raises :class:`DataError`
    and is left in place for you to delete.

    Args:
        name: a ``DATASETS`` key.
        n_samples: total samples of a generated set, >= 10.
        n_features: input width of ``synthetic``, >= 1.
        n_classes: classes of ``synthetic``, >= 2.
        seed: >= 0; decides the generated data (not the digits split).
        data_dir: folder for downloaded data; default ``cache_dir()``.
        download: fetch missing files of a real dataset.
        test_fraction: share of a generated set (and of digits) kept for testing, in (0, 1).

    Returns:
        A :class:`Dataset` whose arrays are read-only and shared between calls.

    Raises:
        DataError: a bad argument, missing files without ``download=True``, a failed
            download, or a corrupt file; the message names the field and the value.
    """
    if not isinstance(name, str) or name not in DATASETS:
        raise DataError(f"dataset: one of {list(DATASETS)}, got {name!r}")
    n_samples = _check_int("n_samples", n_samples, 10)
    n_features = _check_int("n_features", n_features, 1)
    n_classes = _check_int("n_classes", n_classes, 2)
    seed = _check_int("seed", seed, 0)
    test_fraction = _check_fraction("test_fraction", test_fraction)
    if not isinstance(download, (bool, np.bool_)):
        raise DataError(f"download: True or False, got {download!r}")
    folder = cache_dir(data_dir)

    # Normalise the arguments a dataset ignores, so equivalent calls share a cache entry.
    if name == "digits":
        return _cached(name, test_fraction=test_fraction)
    if name == "mnist1d":
        return _cached(name, n_samples=n_samples, seed=seed, test_fraction=test_fraction)
    if name == "synthetic":
        return _cached(name, n_samples=n_samples, n_features=n_features, n_classes=n_classes,
                       seed=seed, test_fraction=test_fraction)
    return _cached(name, folder=str(folder.absolute() / name), download=bool(download))


def clear_cache() -> None:
    """Forget the datasets and epoch orders kept in this process (frees their memory)."""
    _cached.cache_clear()
    _epoch_order.cache_clear()


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _cached(name: str, *, n_samples: int = 0, n_features: int = 0, n_classes: int = 0,
            seed: int = 0, test_fraction: float = 0.0, folder: str = "",
            download: bool = False) -> Dataset:
    if name == "digits":
        return _digits(test_fraction)
    if name == "mnist1d":
        return _mnist1d(n_samples, seed, test_fraction)
    if name == "synthetic":
        return _synthetic(n_samples, n_features, n_classes, seed, test_fraction)
    return _real(name, Path(folder), download)


def _dataset(name, X_train, y_train, X_test, y_test, n_classes, image_shape=None) -> Dataset:
    arrays = [np.ascontiguousarray(X_train, np.float32), np.ascontiguousarray(y_train, np.int64),
              np.ascontiguousarray(X_test, np.float32), np.ascontiguousarray(y_test, np.int64)]
    for a in arrays:
        a.flags.writeable = False
    return Dataset(name, *arrays, n_classes=int(n_classes), image_shape=image_shape)


def _centre(X_train: np.ndarray, X_test: np.ndarray) -> None:
    """Subtract the training mean of each feature from both sets, in place."""
    mean = X_train.mean(axis=0, dtype=np.float64).astype(np.float32)
    X_train -= mean
    X_test -= mean


def _n_test(n_samples: int, test_fraction: float) -> int:
    return min(max(round(n_samples * test_fraction), 1), n_samples - 1)


def _stratified_split(y: np.ndarray, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted train and test indices; each class split in proportion (largest remainder)."""
    rng = np.random.default_rng(seed)
    classes, counts = np.unique(y, return_counts=True)
    per_class = _largest_remainder(_n_test(len(y), test_fraction), counts.astype(np.float64))
    test = np.concatenate([rng.permutation(np.flatnonzero(y == c))[:k]
                           for c, k in zip(classes, per_class)])
    is_test = np.zeros(len(y), bool)
    is_test[test] = True
    return np.flatnonzero(~is_test), np.flatnonzero(is_test)


def _digits(test_fraction: float) -> Dataset:
    try:
        from sklearn.datasets import load_digits
    except ImportError as e:
        raise ImportError("the digits dataset needs scikit-learn: pip install scikit-learn") from e
    bunch = load_digits()
    X = bunch.data.astype(np.float32) / 16.0  # (1797, 64), pixels 0..16
    y = bunch.target.astype(np.int64)
    train, test = _stratified_split(y, test_fraction, _SPLIT_SEED)
    X_train, X_test = X[train], X[test]
    _centre(X_train, X_test)
    return _dataset("digits", X_train, y[train], X_test, y[test], 10, (1, 8, 8))


# --- mnist1d ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _mnist1d_templates() -> np.ndarray:
    """(10, 12) smooth curves, one per class, fixed for all run seeds."""
    rng = np.random.default_rng(_MNIST1D_TEMPLATE_SEED)
    grid = np.linspace(0.0, 1.0, _MNIST1D_TEMPLATE_LEN)
    knots_at = np.linspace(0.0, 1.0, 6)
    templates: list[np.ndarray] = []
    while len(templates) < 10:
        curve = np.interp(grid, knots_at, rng.normal(size=6))
        curve = np.convolve(np.pad(curve, 1, mode="edge"), [0.25, 0.5, 0.25], mode="valid")
        curve -= curve.mean()
        curve /= np.abs(curve).max()
        # keep the classes distinguishable: no template too close to an earlier one
        if all(abs(np.corrcoef(curve, t)[0, 1]) < 0.7 for t in templates):
            templates.append(curve)
    return np.stack(templates)


def _mnist1d(n_samples: int, seed: int, test_fraction: float) -> Dataset:
    templates = _mnist1d_templates()  # (10, L)
    L, n_out = _MNIST1D_TEMPLATE_LEN, _MNIST1D_LEN
    # One stream per random quantity, so the data do not depend on _CHUNK_ROWS.
    streams = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(7)]
    r_label, r_centre, r_width, r_amp, r_shear, r_smooth, r_white = streams
    y = r_label.permutation(np.arange(n_samples) % 10).astype(np.int64)  # balanced classes
    u = np.linspace(0.0, 1.0, n_out)  # output positions
    kernel = np.exp(-0.5 * (np.arange(-4, 5) / 2.0) ** 2)
    kernel /= np.sqrt((kernel**2).sum())  # smoothed noise keeps unit variance
    X = np.empty((n_samples, n_out), np.float32)
    for lo in range(0, n_samples, _CHUNK_ROWS):
        hi = min(lo + _CHUNK_ROWS, n_samples)
        m = hi - lo
        centre = r_centre.uniform(0.35, 0.65, (m, 1))  # where the curve sits (padding/shift)
        width = r_width.uniform(0.45, 0.7, (m, 1))  # share of the 40 points it covers
        t = (u - centre) / width + 0.5  # (m, 40) position inside the template, 0..1
        pos = t * (L - 1)
        i0 = np.clip(np.floor(pos).astype(np.int64), 0, L - 2)
        frac = pos - i0
        curve = templates[y[lo:hi]]  # (m, L)
        v = (1 - frac) * np.take_along_axis(curve, i0, 1) + frac * np.take_along_axis(curve, i0 + 1, 1)
        v = np.where((t >= 0) & (t <= 1), v, 0.0)  # zero padding outside the curve
        v *= r_amp.uniform(0.7, 1.3, (m, 1))
        v += r_shear.normal(0.0, 0.75, (m, 1)) * (u - 0.5)  # shear: a random linear ramp
        white = r_smooth.normal(size=(m, n_out + len(kernel) - 1))
        v += 0.25 * np.lib.stride_tricks.sliding_window_view(white, len(kernel), axis=1) @ kernel
        v += 0.1 * r_white.normal(size=(m, n_out))
        X[lo:hi] = v
    n_train = n_samples - _n_test(n_samples, test_fraction)
    X_train, X_test = X[:n_train], X[n_train:]
    _centre(X_train, X_test)
    X /= np.float32(X_train.std(dtype=np.float64))
    return _dataset("mnist1d", X_train, y[:n_train], X_test, y[n_train:], 10)


# --- synthetic -------------------------------------------------------------------------


def _teacher(n_features: int, n_classes: int, rng: np.random.Generator):
    """Weights of a random tanh MLP whose argmax classes are about equally frequent."""
    hidden = 2 * n_classes
    W1 = (rng.standard_normal((n_features, hidden)) / np.sqrt(n_features)).astype(np.float32)
    b1 = (0.1 * rng.standard_normal(hidden)).astype(np.float32)
    W2 = (rng.standard_normal((hidden, n_classes)) / np.sqrt(hidden)).astype(np.float32)
    pilot = rng.standard_normal((4096, n_features), dtype=np.float32)
    logits = np.tanh(pilot @ W1 + b1) @ W2
    scale = np.float32(logits.std() or 1.0)  # unit-scale logits, so the noise is "small"
    W2 /= scale
    logits = logits.astype(np.float64) / scale
    # argmax(logits + b2 + Gumbel(0, beta)) samples softmax((logits + b2) / beta), so choose b2
    # to make that softmax's mean over the pilot set uniform. The multiplicative update
    # below (EM for class priors) moves each class's share monotonically towards 1/C.
    beta = _LABEL_NOISE
    b2 = np.zeros(n_classes)
    for _ in range(500):
        a = (logits + b2) / beta
        p = np.exp(a - a.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        excess = np.log(np.maximum(p.mean(axis=0), 1e-300) * n_classes)
        if np.abs(excess).max() < 0.01:
            break
        b2 -= beta * excess
    return W1, b1, W2, b2.astype(np.float32)


def _synthetic(n_samples: int, n_features: int, n_classes: int, seed: int, test_fraction: float) -> Dataset:
    r_teacher, r_x, r_noise = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(3))
    W1, b1, W2, b2 = _teacher(n_features, n_classes, r_teacher)
    X = np.empty((n_samples, n_features), np.float32)
    y = np.empty(n_samples, np.int64)
    # Many classes mean wide hidden/logit temporaries: take fewer rows at a time then.
    # The streams are sequential, so the chunk size never changes the data.
    rows = min(_CHUNK_ROWS, max(256, 2**22 // (3 * n_classes)))
    for lo in range(0, n_samples, rows):
        hi = min(lo + rows, n_samples)
        r_x.standard_normal(out=X[lo:hi], dtype=np.float32)  # written in place: no float64 copy
        logits = np.tanh(X[lo:hi] @ W1 + b1) @ W2 + b2  # (m, C) float32
        y[lo:hi] = (logits + r_noise.gumbel(0.0, _LABEL_NOISE, logits.shape)).argmax(1)
    n_train = n_samples - _n_test(n_samples, test_fraction)
    X.flags.writeable = False
    return _dataset("synthetic", X[:n_train], y[:n_train], X[n_train:], y[n_train:], n_classes)


# --- real datasets: download, verify, parse --------------------------------------------


class _Corrupt(Exception):
    """A file that does not parse; the message says how."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _expected_hash(name: str, file: str, path: Path) -> str | None:
    """The hash ``path`` must have: the official one, else the sidecar's, else None."""
    official = EXPECTED_SHA256.get(name, {}).get(file)
    if official:
        return official.lower()
    side = _sidecar(path)
    if side.is_file():
        words = side.read_text().split()
        return words[0].lower() if words else ""  # an empty sidecar never matches
    return None


def _corrupt_error(file: str, path: Path, reason: str) -> DataError:
    return DataError(f"data_dir: {file} is corrupt or partial ({reason}); "
                     f"delete it and rerun with download=True, got {path}")


def _read_idx(path: Path, magic: int) -> np.ndarray:
    """An IDX array from a gzip file: magic 2051 = (n, rows, cols) uint8, 2049 = (n,) uint8."""
    try:
        with gzip.open(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError, zlib.error) as e:
        raise _Corrupt(f"not a complete gzip file: {e}") from None
    ndim = {2051: 3, 2049: 1}[magic]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise _Corrupt(f"IDX header cut short at {len(raw)} bytes")
    found = int.from_bytes(raw[:4], "big")
    if found != magic:
        raise _Corrupt(f"IDX magic number {found}, expected {magic}")
    dims = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    body = int(np.prod(dims))
    if len(raw) != header + body:
        raise _Corrupt(f"IDX dims {dims} need {body} bytes of data, found {len(raw) - header}")
    return np.frombuffer(raw, np.uint8, offset=header).reshape(dims)


def _read_idx_pair(name: str, folder: Path, images_file: str, labels_file: str):
    images = _read_file(name, folder, images_file, lambda p: _read_idx(p, 2051))
    labels = _read_file(name, folder, labels_file, lambda p: _read_idx(p, 2049))
    if images.shape[1:] != (28, 28):
        raise _corrupt_error(images_file, folder / images_file,
                             f"images are {images.shape[1:]}, expected (28, 28)")
    if len(labels) != len(images):
        raise _corrupt_error(labels_file, folder / labels_file,
                             f"{len(labels)} labels for {len(images)} images in {images_file}")
    if len(labels) and labels.max() > 9:
        raise _corrupt_error(labels_file, folder / labels_file, f"label {labels.max()} outside 0..9")
    return images.reshape(len(images), -1), labels.astype(np.int64)


_RECONSTRUCT = np.empty(0).__reduce__()[0]  # numpy's array-unpickling helper, whatever its module
_PICKLE_ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"): _RECONSTRUCT,  # numpy 1.x pickles (the real files)
    ("numpy._core.multiarray", "_reconstruct"): _RECONSTRUCT,  # numpy 2.x pickles
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("_codecs", "encode"): codecs.encode,  # bytes in Python 3 protocol-2 pickles
}


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickles plain containers and numpy arrays; refuses every other global."""

    def find_class(self, module: str, name: str):
        try:
            return _PICKLE_ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}") from None


_CIFAR_DIR = "cifar-10-batches-py"
_CIFAR_MEMBERS = [f"{_CIFAR_DIR}/data_batch_{i}" for i in range(1, 6)] + [f"{_CIFAR_DIR}/test_batch"]


def _cifar_batch(batch: object, member: str) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(batch, dict):
        raise _Corrupt(f"{member} holds {type(batch).__name__}, expected a dict")
    data = batch.get(b"data", batch.get("data"))
    labels = batch.get(b"labels", batch.get("labels"))
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        raise _Corrupt(f"{member} has no (n, 3072) uint8 'data' array")
    try:
        labels = np.asarray(labels, dtype=np.int64)
    except (TypeError, ValueError):
        raise _Corrupt(f"{member} has non-integer 'labels'") from None
    if labels.shape != (len(data),) or (len(labels) and (labels.min() < 0 or labels.max() > 9)):
        raise _Corrupt(f"{member} needs {len(data)} labels in 0..9")
    return data, labels


def _read_cifar(path: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The six CIFAR-10 batches, read in one pass without extracting to disk."""
    batches: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    try:
        with tarfile.open(path, "r|gz") as tar:  # stream mode: one sequential pass
            for info in tar:
                if info.name in _CIFAR_MEMBERS and info.isfile():
                    f = tar.extractfile(info)
                    try:
                        batch = _ArrayUnpickler(f, encoding="bytes").load()
                    except pickle.UnpicklingError as e:
                        raise _Corrupt(f"{info.name}: {e}") from None
                    except Exception as e:  # any malformed pickle, whatever it raises
                        raise _Corrupt(f"{info.name} is not a readable pickle: {e!r}") from None
                    batches[info.name] = _cifar_batch(batch, info.name)
    except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
        raise _Corrupt(f"not a complete tar.gz archive: {e}") from None
    missing = [m for m in _CIFAR_MEMBERS if m not in batches]
    if missing:
        raise _Corrupt(f"archive lacks {', '.join(missing)}")
    return batches


def _parser(name: str, file: str):
    """The function that parses ``file`` of ``name`` in full (raises _Corrupt)."""
    if name == "cifar10":
        return _read_cifar
    return lambda p: _read_idx(p, 2051 if "images" in file else 2049)


def _read_file(name: str, folder: Path, file: str, parse):
    """Check ``folder/file`` against its hash, parse it, and record a first hash if none."""
    path = folder / file
    digest = _sha256(path)
    expected = _expected_hash(name, file, path)
    if expected is not None and digest != expected:
        raise _corrupt_error(file, path, "sha256 mismatch")
    try:
        parsed = parse(path)
    except _Corrupt as e:
        raise _corrupt_error(file, path, str(e)) from None
    if expected is None:  # placed by hand with no known hash: trust this first, parsed copy
        atomic_write(_sidecar(path), f"{digest}  {file}\n")
    return parsed


class _CappedWriter:
    """A binary file that counts what is written and refuses to grow past the cap
    (a runaway server), handed to pooch's downloader in place of a path."""

    def __init__(self, f):
        self.f, self.received = f, 0

    def write(self, chunk: bytes) -> int:
        self.received += len(chunk)
        if self.received > _MAX_DOWNLOAD_BYTES:
            raise _Corrupt(f"more than {_MAX_DOWNLOAD_BYTES} bytes")
        return self.f.write(chunk)

    def flush(self) -> None:
        self.f.flush()


class _Downloader:
    """pooch's HTTP downloader with our timeout, user agent, size cap and a progress bar
    (tqdm.auto: a widget in a notebook; none inside a Dask worker)."""

    def __init__(self, label: str):
        self.label = label
        self.received = 0

    def __call__(self, url: str, output_file: str, pooch_obj, check_only: bool = False):
        import pooch

        from .apps.progress import bars_allowed

        bar = False
        if bars_allowed():
            from tqdm.auto import tqdm
            # total=1 until pooch sets the real one: a tqdm of total 0 is falsy, and pooch
            # skips a falsy bar
            bar = tqdm(total=1, desc=self.label, unit="B", unit_scale=True, unit_divisor=1024,
                       dynamic_ncols=True, leave=True)
        http = pooch.HTTPDownloader(progressbar=bar, timeout=_TIMEOUT_S,
                                    headers={"User-Agent": "workbench-data"})
        try:
            with open(output_file, "w+b") as raw:
                out = _CappedWriter(raw)
                try:
                    return http(url, out, pooch_obj, check_only=check_only)
                finally:
                    self.received = out.received
        finally:
            if bar is not False:
                bar.close()  # pooch closes it after a whole file; this covers a failed one


_INCOMPLETE = re.compile(r"IncompleteRead\((\d+) bytes read, (\d+) more expected\)")


def _download(url: str, dest: Path, known_hash: str | None) -> tuple[Path, str]:
    """Fetch ``url`` through pooch into a temp file beside ``dest``; return it and its sha256.

    pooch streams into its own temporary file, checks ``known_hash`` and only then moves
    the file to our temp name (removing it on any failure); the caller renames it into
    place once it has passed every check.
    """
    import logging

    import pooch
    import requests

    tmp_name = f".{dest.name}.{uuid.uuid4().hex[:8]}.part"
    downloader = _Downloader(f"{dest.parent.name}/{dest.name}")
    log = pooch.get_logger()
    level = log.level
    log.setLevel(logging.WARNING)  # its "Downloading..." and "SHA256 hash..." lines: the bar says enough
    try:
        path = pooch.retrieve(url, known_hash=f"sha256:{known_hash}" if known_hash else None, fname=tmp_name,
                              path=dest.parent, downloader=downloader, progressbar=False)
    except ValueError as e:  # pooch: the hash did not match (the file is already removed)
        if "hash" in str(e).lower():
            raise _Corrupt("sha256 mismatch") from None
        raise
    except (requests.exceptions.ChunkedEncodingError, requests.exceptions.ConnectionError) as e:
        m = _INCOMPLETE.search(str(e))
        if m:
            got, more = int(m.group(1)), int(m.group(2))
            raise _Corrupt(f"partial: {got} of {got + more} bytes") from None
        if isinstance(e, requests.exceptions.ChunkedEncodingError):
            raise _Corrupt(f"partial: connection closed after {downloader.received} bytes") from None
        raise
    finally:
        log.setLevel(level)
    return Path(path), _sha256(Path(path))


def _fetch(name: str, file: str, folder: Path) -> None:
    """Download one file into ``folder``, checked, then renamed into place."""
    import requests

    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DataError(f"data_dir: a folder you can write to ({e.strerror}), got {folder.parent}") from None
    mirror = os.environ.get(URL_ENV)
    urls = [f"{mirror.rstrip('/')}/{name}/{file}"] if mirror else [base + file for base in URLS[name]]
    official = EXPECTED_SHA256.get(name, {}).get(file)
    problems = []
    for url in urls:
        try:
            tmp, digest = _download(url, folder / file, official.lower() if official else None)
        except _Corrupt as e:
            problems.append(f"{url}: corrupt or partial ({e})")
            continue
        except requests.exceptions.HTTPError as e:
            r = e.response
            problems.append(f"{url}: HTTP {r.status_code} {r.reason}" if r is not None else f"{url}: {e}")
            continue
        except (requests.exceptions.RequestException, OSError) as e:
            problems.append(f"{url}: {e}")
            continue
        try:
            if not official:
                _parser(name, file)(tmp)
        except _Corrupt as e:
            tmp.unlink(missing_ok=True)
            problems.append(f"{url}: corrupt or partial ({e})")
            continue
        if not official:
            atomic_write(_sidecar(folder / file), f"{digest}  {file}\n")
        os.replace(tmp, folder / file)
        return
    raise DataError(f"download: could not fetch a valid {name} {file} ({'; '.join(problems)}); "
                    f"check the network, or set {URL_ENV} to a mirror, got True")


def _real(name: str, folder: Path, download: bool) -> Dataset:
    missing = [f for f in FILES[name] if not (folder / f).is_file()]
    if missing and not download:
        raise DataError(f"download: the {name} files are not in {folder} (missing {', '.join(missing)}); "
                        f"pass download=True (CLI --download) to fetch them, got False")
    for file in missing:
        _fetch(name, file, folder)

    if name == "cifar10":
        file = FILES[name][0]
        batches = _read_file(name, folder, file, _read_cifar)
        train = [batches[m] for m in _CIFAR_MEMBERS[:-1]]
        x_train = np.concatenate([d for d, _ in train])
        y_train = np.concatenate([lab for _, lab in train])
        x_test, y_test = batches[_CIFAR_MEMBERS[-1]]
        shape = (3, 32, 32)  # rows are R, G, B planes of 32x32, as in the official files
    else:
        x_train, y_train = _read_idx_pair(name, folder, *FILES[name][:2])
        x_test, y_test = _read_idx_pair(name, folder, *FILES[name][2:])
        shape = (1, 28, 28)

    X_train = x_train.astype(np.float32)
    X_train *= np.float32(1 / 255)
    X_test = x_test.astype(np.float32)
    X_test *= np.float32(1 / 255)
    _centre(X_train, X_test)
    return _dataset(name, X_train, y_train, X_test, y_test, 10, shape)
