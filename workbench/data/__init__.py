"""Datasets and the global minibatch order (one module per job, every name importable from here).

Every dataset comes back as a :class:`Dataset` of read-only float32 features and
int64 labels, scaled to roughly unit size, with a fixed train/test split:

- ``digits``: the UCI 8x8 handwritten digits, 1797 images, shipped in this package (offline). The split is stratified and
  fixed (split seed 0, never the run seed), so test sets compare across runs.
- ``mnist1d``: our own generator of 1-D "digits": ten fixed template curves, each sample
  shifted, stretched, scaled, sheared and noised, sampled at 40 points. A linear model
  gets clearly less accuracy on it than an MLP.
- ``synthetic``: labels from a random teacher MLP on Gaussian inputs; size, width and
  class count scale freely (generated in chunks, so 1e6 x 784 fits in its output).
- ``markov_text``: generated text for language models (`text`: a fixed order-2 Markov chain
  over 16 characters with an exact entropy rate), rows of ``context`` tokens; ``text``
  also makes character-level datasets of UTF-8 files.
- ``mnist``, ``fashion_mnist``, ``cifar10``: the official files, fetched only when
  ``download=True`` into ``cache_dir()/<name>/`` and checked before use (see
  :func:`load_dataset` for how).

The global minibatch order depends on the seed and the epoch only, never on the
workers: :func:`global_batch` gives the sample indices of step ``step`` and
:func:`split_batch` cuts that batch into contiguous slices, one per worker.

Modules: `dataset` (the `Dataset` container, `DATASETS`), `generators` (digits, mnist1d,
synthetic), `download` (the real datasets' sources, cache folder and checksums), `order`
(the global minibatch order). `load_dataset` below dispatches to them and caches.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import numpy as np

from . import files
from .dataset import (
    DATA_ENV,
    DATASETS,
    NAMED_BY_PATH,
    DataError,
    Dataset,
    DatasetInfo,
    Shape,
    TextFileInfo,
    _check_fraction,
    _check_int,
    cache_dir,
    dataset_info,
    is_text_path,
)
from .download import EXPECTED_SHA256, FILES, URL_ENV, URLS, _real
from .files import is_data_path
from .generators import _digits, _mnist1d, _synthetic
from .generators import _n_test as _n_test  # re-exported: the dashboard sizes its test set with it
from .order import _epoch_order, batch_order, global_batch, partition, split_batch, steps_per_epoch
from .text import markov_text, text_dataset

__all__ = [
    "DATA_ENV",
    "DATASETS",
    "EXPECTED_SHA256",
    "FILES",
    "URLS",
    "URL_ENV",
    "DataError",
    "Dataset",
    "DatasetInfo",
    "Shape",
    "TextFileInfo",
    "batch_order",
    "cache_dir",
    "clear_cache",
    "dataset_info",
    "dataset_shape",
    "is_text_path",
    "global_batch",
    "load_dataset",
    "partition",
    "split_batch",
    "steps_per_epoch",
]

_CACHE_SIZE = 8  # datasets kept in process (each call with the same arguments is free)


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
    context: int = 64,
    label_column: str | None = None,
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
    - a path ending in ``.txt``: the file's characters (`text.text_dataset`: ``context``,
      ``test_fraction``; the last windows held out), checked as it is read.
    - ``markov_text``: ``n_samples`` sequences of ``context`` tokens, ``seed``,
      ``test_fraction`` (`text.markov_text`: X the tokens, y the next ones).
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
        name: a ``DATASETS`` key, or a path to a UTF-8 ``.txt`` file.
        n_samples: total samples of a generated set, >= 10.
        n_features: input width of ``synthetic``, >= 1.
        n_classes: classes of ``synthetic``, >= 2.
        seed: >= 0; decides the generated data (not the digits split).
        data_dir: folder for downloaded data; default ``cache_dir()``.
        download: fetch missing files of a real dataset.
        test_fraction: share of a generated set (and of digits) kept for testing, in (0, 1).
        context: tokens per sequence of ``markov_text``, >= 1.
        label_column: a CSV's label column (None: the one named as a label, else the last).

    Returns:
        A :class:`Dataset` whose arrays are read-only and shared between calls.

    Raises:
        DataError: a bad argument, missing files without ``download=True``, a failed
            download, or a corrupt file; the message names the field and the value.
    """
    if is_text_path(name):
        return text_dataset(name, _check_int("context", context, 1), _check_fraction("test_fraction", test_fraction))
    if is_data_path(name):   # your own arrays (`data.files`): checked, memory-mapped when large
        test_fraction = _check_fraction("test_fraction", test_fraction)
        return _file_cached(files._key(name), test_fraction, str(cache_dir(data_dir).absolute()), label_column)
    if not isinstance(name, str) or name not in DATASETS:
        raise DataError(f"dataset: one of {list(DATASETS)}, or {NAMED_BY_PATH}, got {name!r}")
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
    if name == "markov_text":
        return markov_text(n_samples, _check_int("context", context, 1), seed, test_fraction)
    return _cached(name, folder=str(folder.absolute() / name), download=bool(download))


def dataset_shape(name: str, *, n_samples: int = 10000, n_features: int = 64, n_classes: int = 10,
                  test_fraction: float = 0.2, context: int = 64, label_column: str | None = None) -> Shape:
    """The `Shape` `load_dataset` with these arguments returns, without loading anything.

    >>> dataset_shape("cifar10").n_train
    50000
    """
    return dataset_info(name).shape(n_samples, n_features, n_classes, test_fraction, context, label_column)


def clear_cache() -> None:
    """Forget the datasets and epoch orders kept in this process (frees their memory)."""
    _cached.cache_clear()
    _file_cached.cache_clear()
    _epoch_order.cache_clear()
    markov_text.cache_clear()
    from .dataset import _text_facts
    from .text import _text_dataset
    _text_dataset.cache_clear()
    _text_facts.cache_clear()


@functools.lru_cache(maxsize=4)
def _file_cached(key: tuple[str, int, int], test_fraction: float, data_dir: str,
                 label_column: str | None = None) -> Dataset:
    """A data file's dataset, by its path, size and time (an edited file is read again)."""
    return files.load_file(key[0], test_fraction, data_dir, label_column)


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
