"""What every dataset is: the `Dataset` container, the names on offer and the argument checks.

The generators (`generators`) and the downloaders (`download`) both build a `Dataset`
through `make_dataset`, so every one comes back the same way: read-only float32
features, int64 labels.
"""

from __future__ import annotations

import functools
import math
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Shape:
    """What a dataset is, known before it is loaded: its split sizes, width, classes, images."""

    n_train: int
    n_test: int
    n_features: int
    n_classes: int
    image_shape: tuple[int, int, int] | None
    n_val: int = 0          # training rows held out for validation (`val_fraction`): not in n_train

    def held_out(self, val_fraction: float) -> Shape:
        """This shape with the last `val_fraction` of its training rows held out for
        validation (the fraction's whole rows, rounded down).

        >>> Shape(1438, 359, 64, 10, None).held_out(0.1)
        Shape(n_train=1295, n_test=359, n_features=64, n_classes=10, image_shape=None, n_val=143)
        """
        k = int(self.n_train * val_fraction) if val_fraction else 0
        return Shape(self.n_train - k, self.n_test, self.n_features, self.n_classes, self.image_shape, k)


@dataclass(frozen=True)
class DatasetInfo:
    """One entry of `DATASETS`: the facts about a dataset that hold before it is loaded.

    A field left None is sized by the run's arguments (`n_samples`, `n_features`,
    `n_classes`); `official_train` is the size of a fixed official training split
    (the real datasets), else the split rule (`_n_test`) decides.
    """

    summary: str                                   # one line, shown by the CLI and the dashboard
    n_examples: int | None = None                  # train + test; None: `n_samples`
    n_features: int | None = None                  # None: `n_features` (synthetic)
    n_classes: int | None = 10                     # None: `n_classes` (synthetic)
    image_shape: tuple[int, int, int] | None = None  # (C, H, W) when each row is an image
    official_train: int | None = None              # a fixed official training split
    download: bool = False                         # fetched (download=True), not bundled or generated
    tokens: bool = False                           # rows are token sequences of `context` (a language model's)

    @property
    def generated(self) -> bool:
        """Made here from a seed, sized by `n_samples` (mnist1d, synthetic)."""
        return self.n_examples is None

    def shape(self, n_samples: int = 10000, n_features: int = 64, n_classes: int = 10,
              test_fraction: float = 0.2, context: int = 64, label_column: str | None = None) -> Shape:
        """The dataset's `Shape` for these arguments (those it ignores are ignored), without loading it.
        A language model's rows are `context` tokens wide (`tokens`).

        >>> DATASETS["digits"].shape()
        Shape(n_train=1438, n_test=359, n_features=64, n_classes=10, image_shape=(1, 8, 8), n_val=0)
        >>> DATASETS["synthetic"].shape(n_samples=100, n_features=5, n_classes=3).n_train
        80
        >>> DATASETS["markov_text"].shape(n_samples=100, context=32)
        Shape(n_train=80, n_test=20, n_features=32, n_classes=16, image_shape=None, n_val=0)
        """
        n = self.n_examples if self.n_examples is not None else n_samples
        n_test = n - self.official_train if self.official_train is not None else _n_test(n, test_fraction)
        width = context if self.tokens else self.n_features if self.n_features is not None else n_features
        return Shape(n - n_test, n_test, width, self.n_classes if self.n_classes is not None else n_classes,
                     self.image_shape)


DATASETS: dict[str, DatasetInfo] = {
    "digits": DatasetInfo("UCI 8x8 handwritten digits as scikit-learn ships them, 1797 images, 10 classes "
                          "(bundled, offline)",
                          n_examples=1797, n_features=64, image_shape=(1, 8, 8)),
    "mnist1d": DatasetInfo("generated 1-D digit-like curves, 40 features, 10 classes (offline)", n_features=40),
    "synthetic": DatasetInfo("random teacher-MLP labels on Gaussian inputs; "
                             "n_samples, n_features, n_classes scale freely", n_classes=None),
    "markov_text": DatasetInfo("generated text for language models: an order-2 Markov chain over 16 characters whose "
                               "entropy rate is known (0.6438 nats per character), n_samples sequences of context "
                               "tokens (offline)", n_classes=16, tokens=True),
    "mnist": DatasetInfo("MNIST handwritten digits, 60k/10k 28x28 grey images (download=True to fetch)",
                         n_examples=70000, n_features=784, image_shape=(1, 28, 28), official_train=60000,
                         download=True),
    "fashion_mnist": DatasetInfo("Fashion-MNIST clothing, 60k/10k 28x28 grey images (download=True to fetch)",
                                 n_examples=70000, n_features=784, image_shape=(1, 28, 28), official_train=60000,
                                 download=True),
    "cifar10": DatasetInfo("CIFAR-10 objects, 50k/10k 32x32 colour images (download=True to fetch)",
                           n_examples=60000, n_features=3072, image_shape=(3, 32, 32), official_train=50000,
                           download=True),
}


TEXT_SUFFIX = ".txt"   # a dataset named by a path ending so is a text file (`text.text_dataset`)


def is_text_path(name: object) -> bool:
    """Whether a dataset name is a path to a text file (it ends in .txt, any case).

    >>> is_text_path("corpus/shakespeare.txt"), is_text_path("digits")
    (True, False)
    """
    return isinstance(name, str) and name.strip().lower().endswith(TEXT_SUFFIX) and len(name.strip()) > len(TEXT_SUFFIX)


@dataclass(frozen=True)
class FileInfo(DatasetInfo):
    """The entry of a file of the user's given as the dataset: its shape needs the file
    (read once per version of it), and nothing in it is generated."""

    path: str = ""

    @property
    def generated(self) -> bool:
        return False


@dataclass(frozen=True)
class TextFileInfo(FileInfo):
    """The entry of a text file given as the dataset (`text.text_dataset`): its characters
    and vocabulary make its shape."""

    def shape(self, n_samples: int = 10000, n_features: int = 64, n_classes: int = 10,
              test_fraction: float = 0.2, context: int = 64, label_column: str | None = None) -> Shape:
        """The windows of `context` + 1 characters the file makes (reads it; every check of `read_text`)."""
        n_train, n_test, vocab = text_shape(self.path, context, test_fraction)
        return Shape(n_train, n_test, int(context), vocab, None)


# Other kinds of file a dataset may be named by: (whether a name is one, its entry). `data.files`
# adds the user's arrays (.npz, a .npy pair, a folder of .npy, .csv) when it is imported (the
# `data` package imports it), so this module needs none of its code.
FILE_KINDS: list[tuple[Callable[[str], bool], Callable[[str], DatasetInfo]]] = []
NAMED_BY_PATH = "a path/to/text.txt, or a data file (.npz, a pair x.npy,y.npy, a folder of .npy, .csv)"


def dataset_info(name: str) -> DatasetInfo:
    """The `DATASETS` entry of `name`, or the entry of a text file when `name` is a .txt path,
    or of a data file of the user's (`FILE_KINDS`); DataError otherwise.

    >>> dataset_info("digits").n_classes, dataset_info("notes.txt").tokens
    (10, True)
    """
    info = DATASETS.get(name) if isinstance(name, str) else None
    if info is not None:
        return info
    if is_text_path(name):
        return TextFileInfo(f"the characters of the text file {name}", n_examples=0, n_classes=None, tokens=True,
                            path=name)
    for is_kind, entry in FILE_KINDS:
        if is_kind(name):
            return entry(name)
    raise DataError(f"dataset: one of {list(DATASETS)}, or {NAMED_BY_PATH}, got {name!r}")


def _n_test(n_samples: int, test_fraction: float) -> int:
    """Test rows of a split of `n_samples` (the generated sets' and digits' rule)."""
    return min(max(round(n_samples * test_fraction), 1), n_samples - 1)


class DataError(ValueError):
    """A bad dataset argument or a missing/corrupt data file; says field, allowed, got."""


DATA_ENV = "WORKBENCH_DATA"  # overrides the default cache folder ~/.cache/workbench


def cache_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """The folder that holds downloaded datasets (one subfolder per dataset), and the
    prepared copies of the user's large files.

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


@dataclass(frozen=True, eq=False)
class Dataset:
    """A train/test split of features and labels (and a validation set held out of the
    training rows, when a run asks for one); the arrays are read-only.

    Attributes:
        name: the ``DATASETS`` key it was loaded as.
        X_train: (N, F) float32 features, roughly unit scale.
        y_train: (N,) int64 labels in ``range(n_classes)``.
        X_test: (M, F) float32, scaled with the training set's statistics.
        y_test: (M,) int64.
        n_classes: number of classes.
        image_shape: (C, H, W) when each row is a flattened image, else None.
        vocab: a language model's data (`data.text`): the character of each token id;
            each row of X is then a sequence of token ids and y (N, T) its next tokens.
        best_loss: the lowest mean loss per label any model can reach, when it is known
            (the generated language's entropy over its windows), else None.
        X_val, y_val: the validation set (`hold_out`), scaled as X_train; None without one.
    """

    name: str
    X_train: np.ndarray = field(repr=False)
    y_train: np.ndarray = field(repr=False)
    X_test: np.ndarray = field(repr=False)
    y_test: np.ndarray = field(repr=False)
    n_classes: int
    image_shape: tuple[int, int, int] | None = None
    vocab: str | None = field(default=None, repr=False)
    best_loss: float | None = None
    X_val: np.ndarray | None = field(default=None, repr=False)   # held out of the training rows (`val_fraction`)
    y_val: np.ndarray | None = field(default=None, repr=False)

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

    @property
    def n_val(self) -> int:
        """Number of validation samples held out of the training rows (0: none)."""
        return 0 if self.X_val is None else int(self.X_val.shape[0])

    def hold_out(self, k: int) -> Dataset:
        """This dataset with its last `k` training rows held out as the validation set
        (views: nothing copied; a text's last training windows, just before its test windows).

        >>> d = Dataset.from_arrays(np.eye(10), np.arange(10) % 2).hold_out(2)
        >>> d.n_train, d.n_val, d.n_test
        (6, 2, 2)
        """
        if k <= 0:
            return self
        n = self.n_train
        return replace(self, X_train=self.X_train[:n - k], y_train=self.y_train[:n - k],
                       X_val=self.X_train[n - k:], y_val=self.y_train[n - k:])

    @classmethod
    def from_arrays(cls, X_train: Any, y_train: Any, X_test: Any = None, y_test: Any = None, *,
                    n_classes: int | None = None, test_fraction: float = 0.2, name: str = "arrays") -> Dataset:
        """Your own arrays as a checked Dataset: a training and a test set, or one set split
        by `test_fraction` (a fixed shuffle, the same in every run). Features are used as
        given (rows of more dimensions flattened; (N, C, H, W) are images), labels are
        integers in [0, n_classes) (`n_classes`: stated, else the largest label plus one).
        `RunConfig(dataset=<this>)` trains on it (saved once under cache_dir()/arrays/).

        >>> d = Dataset.from_arrays(np.eye(10), np.arange(10) % 2)
        >>> d.n_train, d.n_test, d.n_classes, d.X_train.dtype
        (8, 2, 2, dtype('float32'))
        """
        return from_arrays(X_train, y_train, X_test, y_test, n_classes=n_classes, test_fraction=test_fraction,
                           name=name)



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

def make_dataset(name, X_train, y_train, X_test, y_test, n_classes, image_shape=None, vocab=None,
                 best_loss=None) -> Dataset:
    arrays = [np.ascontiguousarray(X_train, np.float32), np.ascontiguousarray(y_train, np.int64),
              np.ascontiguousarray(X_test, np.float32), np.ascontiguousarray(y_test, np.int64)]
    for a in arrays:
        a.flags.writeable = False
    return Dataset(name, *arrays, n_classes=int(n_classes), image_shape=image_shape, vocab=vocab,
                   best_loss=None if best_loss is None else float(best_loss))


def _centre(X_train: np.ndarray, X_test: np.ndarray) -> None:
    """Subtract the training mean of each feature from both sets, in place."""
    mean = X_train.mean(axis=0, dtype=np.float64).astype(np.float32)
    X_train -= mean
    X_test -= mean


# ------------------------------------------------------------------------------ a text file's facts
# (read here, at the bottom with the entries: config validation and the registry size a run by them;
# `text` builds the dataset)
TEXT_MAX_BYTES = 256 << 20   # a character-level corpus larger than this is no teaching size


def read_text(path: str | os.PathLike) -> str:
    """The text of a UTF-8 file, refused in one line when it cannot train a language model.

    Refused: not a readable regular file; empty; larger than TEXT_MAX_BYTES; binary (a NUL
    byte); not UTF-8 (the byte offset is named); fewer than two distinct characters.

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
    ...     _ = f.write("aaaa")
    >>> read_text(f.name)
    Traceback (most recent call last):
    ...
    workbench.data.dataset.DataError: dataset: a text with at least 2 distinct characters (a vocabulary of one, 'a', predicts nothing), got '...'
    """
    where = os.fspath(path)
    try:
        st = os.stat(where)
    except OSError as exc:
        raise DataError(f"dataset: a readable .txt file ({exc.strerror or type(exc).__name__}), got {where!r}") from None
    if not stat.S_ISREG(st.st_mode):
        raise DataError(f"dataset: a regular .txt file (not a directory, device or FIFO), got {where!r}")
    if st.st_size == 0:
        raise DataError(f"dataset: a non-empty text file (this one has 0 bytes), got {where!r}")
    if st.st_size > TEXT_MAX_BYTES:
        raise DataError(f"dataset: a text file of at most {TEXT_MAX_BYTES >> 20} MiB ({st.st_size:,} bytes), "
                        f"got {where!r}")
    with open(where, "rb") as f:
        raw = f.read(TEXT_MAX_BYTES + 1)
    nul = raw.find(b"\x00")
    if nul >= 0:
        raise DataError(f"dataset: a text file, not binary (a NUL byte at offset {nul}), got {where!r}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"dataset: UTF-8 text (byte {exc.start} is not), got {where!r}") from None
    chars = set(text)
    if len(chars) < 2:
        raise DataError(f"dataset: a text with at least 2 distinct characters (a vocabulary of one, "
                        f"{text[0]!r}, predicts nothing), got {where!r}")
    return text


def max_context(n_chars: int) -> int:
    """The longest context a text of `n_chars` characters allows: one training and one test
    window of context + 1 characters (consecutive windows share one), at least.

    >>> max_context(101)
    50
    """
    return max(0, (int(n_chars) - 1) // 2)


def text_shape(path: str | os.PathLike, context: int, test_fraction: float = 0.2) -> tuple[int, int, int]:
    """(n_train, n_test, vocabulary size) of `text_dataset(path, context, test_fraction)`,
    with every check it makes (the file is read, nothing is built)."""
    n_chars, vocab = _text_facts(_key(path))
    context = _check_context(context, n_chars, path)
    n = (n_chars - 1) // context
    n_test = _n_test(n, _check_fraction("test_fraction", test_fraction))
    return n - n_test, n_test, len(vocab)


@functools.lru_cache(maxsize=8)
def _text_facts(key: tuple[str, int, int]) -> tuple[int, str]:
    """(characters, vocabulary) of a file (by path, size and mtime: an edited file is read again)."""
    text = read_text(key[0])
    return len(text), "".join(sorted(set(text)))


def _key(path: str | os.PathLike) -> tuple[str, int, int]:
    where = os.fspath(path)
    try:
        st = os.stat(where)
    except OSError as exc:
        raise DataError(f"dataset: a readable .txt file ({exc.strerror or type(exc).__name__}), got {where!r}") from None
    return str(Path(where).absolute()), st.st_size, st.st_mtime_ns


def _check_context(context: object, n_chars: int, path: str | os.PathLike) -> int:
    context = _check_int("context", context, 1)
    most = max_context(n_chars)
    if context > most:
        raise DataError(f"context: at most {most} for {os.fspath(path)!r} (its {n_chars:,} characters make one "
                        f"training and one test sequence of context + 1 characters at most that long), got {context}")
    return context


# ------------------------------------------------------------------------------ the user's arrays, checked
SPLIT_SEED = 0          # a split of X, y into train and test: the same shuffle for every run
CHECK_ROWS = 1 << 16    # rows checked at a time (bounded memory on a memory-mapped array)


def describe_arrays(headers: dict[str, tuple[tuple[int, ...], Any]], labels: Callable[[str], np.ndarray],
                    n_classes: int | None, where: str) -> dict[str, Any]:
    """What a user's arrays hold, checked: their rows, width, image shape and class count,
    from the arrays' shapes and dtypes (`headers`: "X_train", "y_train", "X_test", "y_test",
    or "X", "y") and their labels (`labels(name)`); the features themselves are not read.
    DataError, one line naming the array, the row and what is allowed, at the first thing
    that cannot train (`data.files`' module docstring lists them). `where`: the file, in messages.

    >>> describe_arrays({"X": ((5, 1, 2, 2), np.dtype("f4")), "y": ((5,), np.dtype("i8"))},
    ...                 lambda n: np.array([0, 1, 2, 0, 1]), None, "x")["image_shape"]
    (1, 2, 2)
    >>> describe_arrays({"X": ((5, 3), np.dtype("f4")), "y": ((4,), np.dtype("i8"))}, None, None, "x.npz")
    Traceback (most recent call last):
    ...
    workbench.data.dataset.DataError: y: one label per row of X (5 rows), got 4 labels in 'x.npz'
    """
    xs = [n for n in headers if n.startswith("X")]
    for n in xs:
        shape, dtype = headers[n]
        if len(shape) < 2 or shape[0] < 1 or min(shape[1:]) < 1:
            raise DataError(f"{n}: rows of features, an array of at least 2 dimensions with at least one row, got "
                            f"shape {tuple(shape)} in {where!r}")
        if np.dtype(dtype).kind not in "biuf":
            raise DataError(f"{n}: numbers (float, int or bool), got dtype {dtype} in {where!r}")
    for x in xs:
        y = "y" + x[1:]
        (xshape, _), (yshape, ydtype) = headers[x], headers[y]
        if len(yshape) != 1:
            raise DataError(f"{y}: one label per row (a 1-D array), got shape {tuple(yshape)} in {where!r}")
        if yshape[0] != xshape[0]:
            raise DataError(f"{y}: one label per row of {x} ({xshape[0]:,} rows), got {yshape[0]:,} labels in {where!r}")
        if np.dtype(ydtype).kind not in "biuf":
            names = " (class names: `names, y = np.unique(y, return_inverse=True)` numbers them)" \
                if np.dtype(ydtype).kind in "USO" else ""
            raise DataError(f"{y}: integer class labels, got dtype {ydtype} in {where!r}{names}")
    if "X_test" in headers and tuple(headers["X_test"][0][1:]) != tuple(headers["X_train"][0][1:]):
        raise DataError(f"X_test: rows shaped as X_train's {tuple(headers['X_train'][0][1:])}, got "
                        f"{tuple(headers['X_test'][0][1:])} in {where!r}")
    if n_classes is not None and n_classes < 2:
        raise DataError(f"n_classes: a whole number >= 2, got {n_classes} in {where!r}")
    top, used = -1, np.zeros(0, np.int64)
    for y in (n for n in headers if n.startswith("y")):
        most, seen = _check_labels(y, labels(y), n_classes, where)
        top, used = max(top, most), np.union1d(used, seen)
    if len(used) < 2:   # two distinct labels, whatever the largest one is (labels all 1 are one class too)
        raise DataError(f"y: at least 2 classes, got only label {top} in {where!r}")
    classes = n_classes if n_classes is not None else top + 1
    rows = sum(int(headers[n][0][0]) for n in xs)
    if n_classes is None and classes > rows:
        raise DataError(f"y: class labels 0..n_classes-1 with fewer classes than rows, got {classes:,} classes "
                        f"(largest label {top:,} + 1; {len(used):,} distinct labels) for {rows:,} rows in {where!r}: "
                        "this looks like a regression target or ids, not classes (number real classes "
                        "0..k-1: np.unique(y, return_inverse=True))")
    if n_classes is None and len(used) == rows > 2:   # class names too: 200 names for 200 rows trained to 0.0
        raise DataError(f"y: class labels that several rows share, got {rows:,} distinct labels for {rows:,} rows in "
                        f"{where!r}: every row its own class looks like ids or free text, not classes")
    row = tuple(int(d) for d in headers[xs[0]][0][1:])
    image = row if len(row) == 3 else (1, *row) if len(row) == 2 else None
    return {"label": where, "rows": {n: int(headers[n][0][0]) for n in xs}, "n_features": int(np.prod(row)),
            "n_classes": int(classes), "image_shape": image, "split": "X" in headers, "labels_used": len(used)}


def _check_labels(name: str, y: np.ndarray, n_classes: int | None, where: str) -> tuple[int, np.ndarray]:
    """Raise DataError at the first label that is not a whole number in [0, n_classes);
    return the largest label and the distinct labels (sorted, int64)."""
    top, seen = -1, np.zeros(0, np.int64)
    for lo in range(0, len(y), CHECK_ROWS):
        part = np.asarray(y[lo:lo + CHECK_ROWS])
        if part.dtype.kind == "f":
            bad = ~np.isfinite(part) | (part != np.round(part))
            if bad.any():
                r = lo + int(np.argmax(bad))
                value = np.asarray(y[r]).item()
                # a fraction is most often a regression target: say that no run can train one
                why = ("" if not math.isfinite(value) else
                       ": a regression target? runs train classifiers only (labels 0..n_classes-1); bin it into classes")
                raise DataError(f"{name}: integer class labels, got {value!r} at row {r} of {where!r}{why}")
        if part.dtype.kind != "b" and (part < 0).any():
            r = lo + int(np.argmax(part < 0))
            raise DataError(f"{name}: labels >= 0, got {np.asarray(y[r]).item()!r} at row {r} of {where!r}")
        if n_classes is not None and (part >= n_classes).any():
            r = lo + int(np.argmax(part >= n_classes))
            raise DataError(f"{name}: labels in [0, {n_classes}) (n_classes), got {np.asarray(y[r]).item()!r} at row {r} of {where!r}")
        if len(part):
            top = max(top, int(part.max()))
            seen = np.union1d(seen, np.unique(part).astype(np.int64))
    return top, seen


FLOAT32_MAX = float(np.finfo(np.float32).max)   # features train as float32: a larger magnitude becomes inf


def check_finite(name: str, X: np.ndarray, where: str) -> None:
    """DataError at the first feature of `X` that is NaN or infinite, or finite but beyond
    float32's range (features train as float32, where it would be infinite): row and column named.

    >>> check_finite("X", np.array([[1.0], [1e39]]), "t.csv")
    Traceback (most recent call last):
    ...
    workbench.data.dataset.DataError: X: finite numbers (float32), got 1e+39 at row 1, column 0 of 't.csv'
    """
    for lo in range(0, len(X), CHECK_ROWS):
        part = np.asarray(X[lo:lo + CHECK_ROWS])
        if part.dtype.kind != "f":
            continue
        flat = part.reshape(len(part), -1)
        bad = ~(np.abs(flat) <= FLOAT32_MAX)   # NaN, inf, and what float32 cannot hold
        if bad.any():
            r, c = divmod(int(np.argmax(bad)), flat.shape[1])
            raise DataError(f"{name}: finite numbers (float32), got {flat[r, c]} at row {lo + r}, column {c} "
                            f"of {where!r}")


def split_rows(X: np.ndarray, y: np.ndarray, n_test: int) -> dict[str, np.ndarray]:
    """X, y cut into train and test by a fixed shuffle (SPLIT_SEED), each side in its original order.

    >>> parts = split_rows(np.arange(10)[:, None], np.arange(10), 3)
    >>> parts["y_test"].tolist(), len(parts["y_train"])
    ([2, 4, 6], 7)
    """
    order = np.random.default_rng(SPLIT_SEED).permutation(len(X))
    test, train = np.sort(order[:n_test]), np.sort(order[n_test:])
    return {"X_train": X[train], "y_train": y[train], "X_test": X[test], "y_test": y[test]}


def from_arrays(X_train: Any, y_train: Any, X_test: Any = None, y_test: Any = None, *, n_classes: int | None = None,
                test_fraction: float = 0.2, name: str = "arrays") -> Dataset:
    """A checked `Dataset` of arrays given in Python (`Dataset.from_arrays`)."""
    if (X_test is None) != (y_test is None):
        raise DataError(f"{'X_test' if X_test is None else 'y_test'}: given with the other test array, got None")
    if n_classes is not None and (isinstance(n_classes, bool) or not isinstance(n_classes, (int, np.integer))):
        raise DataError(f"n_classes: a whole number >= 2, or None, got {n_classes!r}")
    given = {"X_train": X_train, "y_train": y_train, "X_test": X_test, "y_test": y_test}
    arrays = {k: np.asarray(v) for k, v in given.items() if v is not None}
    if X_test is None:
        arrays = {"X": arrays["X_train"], "y": arrays["y_train"]}
    facts = describe_arrays({k: (a.shape, a.dtype) for k, a in arrays.items()}, arrays.__getitem__,
                            None if n_classes is None else int(n_classes), name)
    if facts["split"]:
        if len(arrays["X"]) < 2:
            raise DataError(f"X: at least 2 rows to split into a training and a test set, got {len(arrays['X'])}")
        check_finite("X", arrays["X"], name)   # by the rows of the X given, before the split reorders them
        arrays = split_rows(arrays["X"], arrays["y"], _n_test(len(arrays["X"]), _check_fraction("test_fraction",
                                                                                               test_fraction)))
    for key in ("X_train", "X_test"):
        check_finite(key, arrays[key], name)
    flat = {n: a.reshape(a.shape[0], -1) if n.startswith("X") else a for n, a in arrays.items()}
    return make_dataset(name, flat["X_train"], flat["y_train"], flat["X_test"], flat["y_test"], facts["n_classes"],
                        image_shape=facts["image_shape"])
