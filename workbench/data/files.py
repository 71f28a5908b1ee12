"""Your own data: arrays from `.npz`, `.npy` and CSV files, or given in Python, checked once
before any worker starts and memory-mapped when large.

A dataset is named by a path where a built-in one is named by its key:

- `data.npz` holding `X_train, y_train, X_test, y_test`, or `X, y` (split by
  `test_fraction`); an optional scalar `n_classes` states the class count;
- `features.npy,labels.npy` (a pair, split by `test_fraction`), or a folder holding
  `X_train.npy, y_train.npy, X_test.npy, y_test.npy` or `X.npy, y.npy`;
- `table.csv` with a header row: the label column is the one chosen (`label_column`), else
  the one named `label`, `y`, `target` or `class` (case and spaces ignored; two such columns
  are refused, not ranked), else the last column; every other column a feature;
  labels may be class names (label k the k-th name in sorted order); the separator is a
  comma, or what the sniffer finds (`;`, tab, `|`); a first column that is the row index
  `DataFrame.to_csv` writes is dropped (`Table`: how the run read it, in its summary);
- in Python, `Dataset.from_arrays(X, y)` (or with a test set), which `RunConfig(dataset=...)`
  saves once, by the hash of its arrays, under `cache_dir()/arrays/` and names by that folder.

Features are used as given (`standardize`: see `standardized`); rows of more than one dimension are
flattened, and 4-D features `(N, C, H, W)` (3-D: one channel) are images, so the CNN takes
them. Labels are integers in [0, n_classes): `n_classes` is the file's own, else the
largest label plus one. A split of `X, y` is a fixed shuffle (seed 0, never the run's):
the same file gives the same test set in every run.

Checked before any worker starts, each failure one line naming the array, the row and what
is allowed (`DataError`, exit 2 from the CLI): a missing array, labels that are not one per
row, feature widths that differ between train and test, features that are not numbers or
not finite, labels that are not integers, negative or past `n_classes`, fewer than two
classes, a split with an empty side. A feature array over MMAP_BYTES is memory-mapped
(read-only, `np.load(mmap_mode="r")`): worker processes of one host share its pages in the
operating system's cache instead of each holding a copy. What is not float32 features and
int64 labels in its own `.npy` (a member of an `.npz`, another dtype, a split) is written
once as such under `cache_dir()/userdata/` (by the file's path, size and time) and mapped
from there. CSV files are read into memory: convert a large table to `.npy` first.

This module sits at the bottom of the layers with `data.dataset` (config validation reads
a file's `Shape` here, from the arrays' headers, without loading the features).
"""
from __future__ import annotations

import functools
import hashlib
import os
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from .dataset import (
    FILE_KINDS,
    SPLIT_SEED,
    DataError,
    Dataset,
    FileInfo,
    Shape,
    _check_fraction,
    _n_test,
    cache_dir,
    check_finite,
    describe_arrays,
    is_text_path,
    make_dataset,
    read_text,
    split_rows,
)

DATA_SUFFIXES = (".npz", ".npy", ".csv")
MMAP_BYTES = 64 << 20            # feature arrays larger than this are memory-mapped, not read into each worker
LABEL_COLUMNS = ("label", "y", "target", "class")
CHECK_ROWS = 1 << 16             # rows written at a time (bounded memory on a mapped array)
_SPLIT = ("X_train", "y_train", "X_test", "y_test")


def is_data_path(name: Any) -> bool:
    """Whether `name` names data by a path: a file of a known kind, a `.npy` pair, or a folder.

    >>> is_data_path("runs/data.npz"), is_data_path("x.npy,y.npy"), is_data_path("digits")
    (True, True, False)
    """
    if not isinstance(name, str) or not name or len(name) > 4096 or "\x00" in name:
        return False
    if "," in name:
        parts = [p.strip() for p in name.split(",")]
        return len(parts) == 2 and all(p.lower().endswith(".npy") for p in parts)
    return name.lower().endswith(DATA_SUFFIXES) or os.path.isdir(name)


# ------------------------------------------------------------------------------ where each array is
@dataclass(frozen=True)
class _Source:
    """One array of a data file: a member of an .npz, a .npy file, or a CSV's column set."""

    kind: str                 # "npz" | "npy" | "csv"
    path: str
    member: str = ""          # the .npz member / the CSV part ("X" or "y")
    label: str | None = None  # a CSV's label column as the run chose it (`label_column`; None: by its name)

    def header(self) -> tuple[tuple[int, ...], np.dtype]:
        """(shape, dtype) without reading the data."""
        if self.kind == "csv":
            a = _csv(self.path, self.label)[0 if self.member == "X" else 1]
            return a.shape, a.dtype
        if self.kind == "npz":
            with zipfile.ZipFile(self.path) as z, z.open(self.member) as f:
                return _npy_header(f, self)
        with open(self.path, "rb") as f:
            return _npy_header(f, self)

    def read(self, mmap: bool = False) -> np.ndarray:
        """The array: memory-mapped (read-only) when `mmap` and the source is a .npy file."""
        try:
            if self.kind == "csv":
                return _csv(self.path, self.label)[0 if self.member == "X" else 1]
            if self.kind == "npz":
                with np.load(self.path, allow_pickle=False) as z:
                    return z[self.member[:-4]]
            return np.load(self.path, mmap_mode="r" if mmap else None, allow_pickle=False)
        except (OSError, ValueError, zipfile.BadZipFile) as exc:
            raise DataError(f"dataset: a readable array {self.name} ({type(exc).__name__}: "
                            f"{str(exc)[:120]}), got {self.path!r}") from None

    @property
    def name(self) -> str:
        return self.member[:-4] if self.kind == "npz" else self.member or Path(self.path).stem


def _npy_header(f: Any, src: _Source) -> tuple[tuple[int, ...], np.dtype]:
    try:
        version = np.lib.format.read_magic(f)
        reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _fortran, dtype = reader(f)
    except (ValueError, OSError) as exc:
        raise DataError(f"dataset: a .npy array ({src.member or Path(src.path).name} is not one: {str(exc)[:100]}), "
                        f"got {src.path!r}") from None
    return tuple(int(d) for d in shape), np.dtype(dtype)


def _sources(path: str, label_column: str | None = None) -> tuple[dict[str, _Source], str]:
    """The arrays `path` holds ({"X_train", ...} or {"X", "y"}, plus "n_classes" when stated),
    and how to name them in messages; DataError when they are not there. `label_column`: a
    CSV's label column (`RunConfig.label_column`; None: found by its name)."""
    if "," in path:
        xf, yf = (p.strip() for p in path.split(","))
        for f in (xf, yf):
            if not os.path.isfile(f):
                raise DataError(f"dataset: a pair of readable .npy files features.npy,labels.npy ({f} is not a file), "
                                f"got {path!r}")
        return {"X": _Source("npy", xf, "X"), "y": _Source("npy", yf, "y")}, path
    if os.path.isdir(path):
        have = {p.stem: str(p) for p in Path(path).glob("*.npy")}
        for names in (_SPLIT, ("X", "y")):
            if all(n in have for n in names):
                found = {n: _Source("npy", have[n], n) for n in names}
                if "n_classes" in have:
                    found["n_classes"] = _Source("npy", have["n_classes"], "n_classes")
                return found, path
        raise DataError(f"dataset: a folder holding X_train.npy, y_train.npy, X_test.npy, y_test.npy (or X.npy, "
                        f"y.npy), got {sorted(have) or 'no .npy files'} in {path!r}")
    if not os.path.isfile(path):
        raise DataError(f"dataset: a readable data file (.npz, .npy pair, .csv) or folder (no such file), got {path!r}")
    lower = path.lower()
    if lower.endswith(".npy"):
        raise DataError(f"dataset: features and labels, as a pair features.npy,labels.npy or a folder of .npy files "
                        f"(one .npy holds one array), got {path!r}")
    if lower.endswith(".csv"):
        return {"X": _Source("csv", path, "X", label_column), "y": _Source("csv", path, "y", label_column)}, path
    try:
        with zipfile.ZipFile(path) as z:
            members = [m for m in z.namelist() if m.endswith(".npy")]
    except (zipfile.BadZipFile, OSError) as exc:
        raise DataError(f"dataset: an .npz file (numpy.savez; {type(exc).__name__}: {exc}), got {path!r}") from None
    keys = {m[:-4]: m for m in members}
    for names in (_SPLIT, ("X", "y")):
        if all(n in keys for n in names):
            out = {n: _Source("npz", path, keys[n]) for n in names}
            if "n_classes" in keys:
                out["n_classes"] = _Source("npz", path, keys["n_classes"])
            return out, path
    raise DataError(f"dataset: an .npz holding X_train, y_train, X_test, y_test (or X, y), got arrays "
                    f"{sorted(keys)} in {path!r}")


# ------------------------------------------------------------------------------ CSV
@dataclass(frozen=True)
class Table:
    """What a CSV file was read as: its label column, its feature columns, the class names
    its labels were (None: the labels were integers already; else label k is `classes[k]`,
    the names in sorted order), the column dropped as a written row index (or None) and the
    separator found."""

    label: str
    features: tuple[str, ...]
    classes: tuple[str, ...] | None
    dropped: str | None
    sep: str

    def record(self) -> dict[str, Any]:
        """For the run's summary (`data_record`)."""
        out: dict[str, Any] = {"label": self.label, "features": list(self.features), "sep": self.sep}
        if self.classes is not None:
            out["classes"] = list(self.classes)
        if self.dropped is not None:
            out["dropped"] = self.dropped
        return out


def _read_table(path: str) -> tuple[Any, str]:
    """The CSV as a frame and its separator: commas, else (a file that reads as one column)
    the separator Python's sniffer finds in it (semicolons from a spreadsheet set to a
    decimal comma, tabs)."""
    import pandas as pd
    try:
        frame = pd.read_csv(path)
        if frame.shape[1] == 1:
            import csv
            with open(path, newline="", encoding="utf-8", errors="replace") as f:
                head = f.read(1 << 16)
            try:
                sep = csv.Sniffer().sniff(head, delimiters=";\t|").delimiter
            except csv.Error:
                return frame, ","
            return pd.read_csv(path, sep=sep), sep
    except UnicodeDecodeError as exc:   # (a spreadsheet's Latin-1 or UTF-16 export)
        raise DataError(f"dataset: a CSV file in UTF-8 (its byte {exc.start:,} is not: {exc.reason}; save it as "
                        f"CSV UTF-8), got {path!r}") from None
    except (OSError, ValueError) as exc:
        raise DataError(f"dataset: a CSV file with a header row ({type(exc).__name__}: {str(exc)[:120]}), "
                        f"got {path!r}") from None
    return frame, ","


def _written_index(frame: Any) -> str | None:
    """The first column when it is the row index `DataFrame.to_csv` writes by default: no
    header, and whole numbers >= 0 each once, in any order (a filtered frame's index has
    gaps, a sorted one's is shuffled). A row's number is not a feature: kept, it can even
    give the label away (rows written in the order of their class).

    >>> import pandas as pd
    >>> _written_index(pd.DataFrame({"Unnamed: 0": [7, 2, 40], "a": [1.0, 2.0, 3.0], "label": [0, 1, 0]}))
    'Unnamed: 0'
    >>> _written_index(pd.DataFrame({"Unnamed: 0": [1, 1, 2], "a": [1.0, 2.0, 3.0], "label": [0, 1, 0]})) is None
    True
    """
    import pandas as pd
    first = frame.columns[0]
    column = frame[first]
    if str(first).startswith("Unnamed: 0") and pd.api.types.is_integer_dtype(column) and \
            bool((column >= 0).all()) and column.is_unique:
        return str(first)
    return None


def label_of(frame: Any, path: str, chosen: str | None = None) -> Any:
    """A table's label column: `chosen` (`label_column`: its exact name, else the one column
    whose name matches it with case and spaces ignored), else the one column named as a
    label (`LABEL_COLUMNS`, case and spaces ignored), else the last column. Two or more
    columns named as labels (`x, y, class`: a coordinate y, or the class?) are refused,
    not ranked: DataError naming them and how to choose.

    >>> import pandas as pd
    >>> label_of(pd.DataFrame(columns=["a", " Class "]), "t.csv"), label_of(pd.DataFrame(columns=["a", "b"]), "t.csv")
    (' Class ', 'b')
    >>> label_of(pd.DataFrame(columns=["x", "y", "class"]), "t.csv")
    Traceback (most recent call last):
    ...
    workbench.data.dataset.DataError: label_column: the one label column of 't.csv', chosen (label_column, --label-column) when several columns are named as labels, got none chosen among 'y', 'class'
    """
    columns = list(frame.columns)
    if chosen is not None:
        if chosen in columns:
            return chosen
        near = [c for c in columns if str(c).strip().lower() == str(chosen).strip().lower()]
        if len(near) == 1:
            return near[0]
        shown = ", ".join(repr(str(c)) for c in columns[:20]) + (f", ... ({len(columns)} columns)"
                                                                 if len(columns) > 20 else "")
        raise DataError(f"label_column: a column of {path!r} ({shown}), got {chosen!r}")
    named = [c for c in columns if str(c).strip().lower() in LABEL_COLUMNS]
    if len(named) > 1:
        raise DataError(f"label_column: the one label column of {path!r}, chosen (label_column, --label-column) "
                        f"when several columns are named as labels, got none chosen among "
                        f"{', '.join(repr(str(c)) for c in named)}")
    return named[0] if named else columns[-1]


@functools.lru_cache(maxsize=2)
def _csv_cached(path: str, size: int, mtime: int, label_column: str | None = None
                ) -> tuple[np.ndarray, np.ndarray, Table]:
    import pandas as pd
    frame, sep = _read_table(path)
    if frame.shape[1] < 2 or len(frame) < 2:
        raise DataError(f"dataset: a CSV of at least 2 rows and 2 columns (features and a label), got "
                        f"{len(frame)} rows and {frame.shape[1]} columns in {path!r}")
    dropped = _written_index(frame) if frame.shape[1] > 2 else None
    if dropped is not None:
        frame = frame.drop(columns=[dropped])
    label = label_of(frame, path, label_column)
    features = frame.drop(columns=[label])
    X = feature_matrix(features, path)
    y = frame[label]
    if y.isna().any():
        row = int(y.isna().to_numpy().argmax())
        raise DataError(f"y: a label in every row, got an empty cell at row {row} ({_line(row)}column {label!r}) "
                        f"of {path!r}")
    classes = None
    if not pd.api.types.is_numeric_dtype(y):   # class names: label k is the k-th name in sorted order
        numbers = pd.to_numeric(y, errors="coerce")
        if numbers.notna().any():   # numbers and words mixed: a typo in a numeric column, not names
            row = int(numbers.isna().to_numpy().argmax())
            raise DataError(f"y: integer class labels or class names in column {label!r}, not both: got "
                            f"{y.iloc[row]!r} at row {row} ({_line(row)[:-2]}) among numbers of {path!r}")
        names = y.astype(str).str.strip()
        classes = tuple(sorted(names.unique()))
        y = pd.Series(pd.Categorical(names, categories=classes).codes.astype(np.int64), index=names.index)
    table = Table(str(label), tuple(str(c) for c in features.columns), classes, dropped, sep)
    return X, y.to_numpy(), table


def _line(row: int) -> str:
    """Where a CSV's data row is in the file, for a message: its header is line 1 (blank lines,
    which pandas skips, would put it further down).

    >>> _line(0)
    'line 2, '
    """
    return f"line {row + 2}, "


def feature_matrix(features: Any, path: str) -> np.ndarray:
    """A CSV's feature columns (a DataFrame) as float64 rows, or a one-line `DataError`
    naming the file's row and column of the first cell that is not a number or is empty
    (after a split the rows are reordered, so they are named here)."""
    import pandas as pd
    bad = [c for c in features.columns if not pd.api.types.is_numeric_dtype(features[c])]
    if bad:
        row = int(pd.to_numeric(features[bad[0]], errors="coerce").isna().to_numpy().argmax())
        raise DataError(f"X: numbers in every feature column, got {features[bad[0]].iloc[row]!r} at row {row} "
                        f"({_line(row)}column {bad[0]!r}) of {path!r}")
    missing = features.isna().to_numpy()
    if missing.any():
        row, col = divmod(int(missing.argmax()), missing.shape[1])
        raise DataError(f"X: a number in every cell, got an empty or NaN cell at row {row} ({_line(row)}column "
                        f"{features.columns[col]!r}) of {path!r}")
    return np.ascontiguousarray(features.to_numpy(np.float64))


def read_rows(path: str) -> Any:
    """A CSV as `load_dataset` reads one, as a DataFrame: its separator found, and the row
    index `DataFrame.to_csv` writes by default not a column but the frame's index (a row's
    number is no feature, but it is how the answers are matched back to the rows)."""
    return read_rows_and_sep(path)[0]


def read_rows_and_sep(path: str) -> tuple[Any, str]:
    """`read_rows` and the separator it found (`,`, `;`, a tab, `|`): the answers to the rows
    are written with it, so a spreadsheet opens them as it opened the rows."""
    frame, sep = _read_table(path)
    written = _written_index(frame) if frame.shape[1] > 1 else None
    return (frame.set_index(written).rename_axis(None) if written is not None else frame), sep


def _csv(path: str, label_column: str | None = None) -> tuple[np.ndarray, np.ndarray, Table]:
    st = os.stat(path)
    return _csv_cached(str(Path(path).absolute()), st.st_size, st.st_mtime_ns, label_column)


# ------------------------------------------------------------------------------ the shape, without loading
@functools.lru_cache(maxsize=16)
def _facts(key: tuple[str, int, int], label_column: str | None = None) -> dict[str, Any]:
    """`_facts_of` a data file's arrays, cached by its path, size and time (and a CSV's label column)."""
    return _facts_of(*_sources(key[0], label_column))


def _facts_of(src: dict[str, Any], label: str) -> dict[str, Any]:
    """`describe_arrays` of a file's sources: their headers, and their labels read (mapped)."""
    stated = None
    if "n_classes" in src:
        value = src["n_classes"].read()
        if value.shape != () or value.dtype.kind not in "iu":
            raise DataError(f"n_classes: a whole number >= 2 (a scalar array), got {value!r} in {label!r}")
        stated = int(value)
    headers = {n: s.header() for n, s in src.items() if n != "n_classes"}
    return describe_arrays(headers, lambda name: src[name].read(mmap=True), stated, label)


def _key(path: str) -> tuple[str, int, int]:
    where = path.split(",")[0].strip() if "," in path else path
    try:
        st = os.stat(where)
    except OSError as exc:
        raise DataError(f"dataset: a readable data file (.npz, .npy pair, .csv) or folder ({exc.strerror or type(exc).__name__}), "
                        f"got {path!r}") from None
    if os.path.isdir(where):   # a folder: its arrays' sizes and times
        stamps = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in Path(where).glob("*.npy"))
        return path, int(hashlib.sha256(repr(stamps).encode()).hexdigest()[:15], 16), st.st_mtime_ns
    if "," in path:
        other = os.stat(path.split(",")[1].strip()) if os.path.exists(path.split(",")[1].strip()) else st
        return path, st.st_size + other.st_size, st.st_mtime_ns + other.st_mtime_ns
    return path, st.st_size, st.st_mtime_ns


def version(name: Any) -> tuple[int, int] | None:
    """Which version of a dataset named by a path is on disk now: its size and modification
    time (a folder's or a pair's together), for a text file or a data file; None for a
    built-in dataset or a path that cannot be read (reading it says why). What a process
    keeps of a file (`problem.Problem`) is kept per version, so an edited file is read again.

    >>> version("digits") is None
    True
    """
    from .dataset import is_text_path
    if not (is_text_path(name) or is_data_path(name)):
        return None
    try:
        return _key(str(name))[1:]
    except DataError:
        return None


def file_shape(path: str, test_fraction: float = 0.2, label_column: str | None = None) -> Shape:
    """The `Shape` of a data file (train and test rows, width, classes, image shape), from
    its arrays' headers and labels; DataError (one line) for what cannot train.

    >>> import tempfile, numpy as np
    >>> f = tempfile.NamedTemporaryFile(suffix=".npz", delete=False).name
    >>> np.savez(f, X=np.zeros((50, 4)), y=np.arange(50) % 3)
    >>> file_shape(f)
    Shape(n_train=40, n_test=10, n_features=4, n_classes=3, image_shape=None, n_val=0)
    """
    facts = _facts(_key(path), label_column)
    if facts["split"]:
        n = facts["rows"]["X"]
        n_test = _split_test(n, test_fraction, facts["label"])
        return Shape(n - n_test, n_test, facts["n_features"], facts["n_classes"], facts["image_shape"])
    return Shape(facts["rows"]["X_train"], facts["rows"]["X_test"], facts["n_features"], facts["n_classes"],
                 facts["image_shape"])


@dataclass(frozen=True)
class ArrayFileInfo(FileInfo):
    """The entry of a data file of the user's given as the dataset (`dataset.dataset_info`):
    the arrays' headers and labels make its shape."""

    def shape(self, n_samples: int = 10000, n_features: int = 64, n_classes: int = 10,
              test_fraction: float = 0.2, context: int = 64, label_column: str | None = None) -> Shape:
        """`file_shape` of the file (the other arguments size built-in datasets only)."""
        return file_shape(self.path, test_fraction, label_column)


FILE_KINDS.append((is_data_path, lambda name: ArrayFileInfo(f"your arrays in {name}", n_examples=0, n_classes=None,
                                                             path=name)))


def _split_test(n: int, test_fraction: float, label: str) -> int:
    fraction = _check_fraction("test_fraction", test_fraction)
    if n < 2:
        raise DataError(f"X: at least 2 rows to split into a training and a test set, got {n} in {label!r}")
    return _n_test(n, fraction)


# ------------------------------------------------------------------------------ loading
def load_file(path: str, test_fraction: float = 0.2, data_dir: str | os.PathLike | None = None,
              label_column: str | None = None) -> Dataset:
    """The dataset a data file holds, checked (see the module docstring); large feature
    arrays memory-mapped. Repeated calls with an unchanged file are cheap (`data`'s cache).
    `label_column`: a CSV's label column (None: found by its name)."""
    shape = file_shape(path, test_fraction, label_column)
    facts = _facts(_key(path), label_column)
    src, label = _sources(path, label_column)
    big = max(s.header()[1].itemsize * int(np.prod(s.header()[0])) for n, s in src.items() if n.startswith("X")) \
        > MMAP_BYTES and src["X" if facts["split"] else "X_train"].kind != "csv"
    if big:   # the file's own arrays checked, by their own rows, before a float32 copy is written
        for name in ("X",) if facts["split"] else ("X_train", "X_test"):
            check_finite(name, src[name].read(mmap=True), label)
        arrays = _prepared(path, test_fraction, src, facts, data_dir)
    else:
        arrays = {n: src[n].read() for n in src if n != "n_classes"}
        if facts["split"]:
            check_finite("X", arrays["X"], label)   # by the file's own row numbers, before the split reorders them
            arrays = split_rows(arrays["X"], arrays["y"], shape.n_test)
        for name in ("X_train", "X_test"):
            check_finite(name, arrays[name], label)
    flat = {n: a.reshape(a.shape[0], -1) if n.startswith("X") else a for n, a in arrays.items()}
    return make_dataset(label, flat["X_train"], flat["y_train"], flat["X_test"], flat["y_test"], shape.n_classes,
                        image_shape=shape.image_shape)


def _prepared(path: str, test_fraction: float, src: dict[str, _Source], facts: dict[str, Any],
              data_dir: str | os.PathLike | None) -> dict[str, np.ndarray]:
    """float32 features and int64 labels in .npy files of their own, memory-mapped: the
    file's own .npy when it is one already, else a copy written once under
    cache_dir()/userdata/ (by the file's path, size and time, and the split)."""
    direct = not facts["split"] and all(
        s.kind == "npy" and s.header()[1] == (np.float32 if n.startswith("X") else np.int64)
        for n, s in src.items() if n != "n_classes")
    if direct:
        return {n: s.read(mmap=True) for n, s in src.items() if n != "n_classes"}
    stamp = "|".join(map(str, (*_key(path), test_fraction if facts["split"] else "")))
    folder = cache_dir(data_dir) / "userdata" / hashlib.sha256(stamp.encode()).hexdigest()[:16]
    if not all((folder / f"{n}.npy").exists() for n in _SPLIT):
        tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        if facts["split"]:
            X, y = src["X"].read(mmap=True), src["y"].read(mmap=True)
            order = np.random.default_rng(SPLIT_SEED).permutation(len(X))
            n_test = _n_test(len(X), test_fraction)
            parts = {"train": np.sort(order[n_test:]), "test": np.sort(order[:n_test])}
            for side, rows in parts.items():
                _write(tmp / f"X_{side}.npy", X, np.float32, rows)
                _write(tmp / f"y_{side}.npy", y, np.int64, rows)
        else:
            for n in _SPLIT:
                a = src[n].read(mmap=True)
                _write(tmp / f"{n}.npy", a, np.float32 if n.startswith("X") else np.int64, None)
        try:
            os.replace(tmp, folder)
        except OSError:            # another process made it first: theirs is the same
            import shutil
            shutil.rmtree(tmp, ignore_errors=True)
    return {n: np.load(folder / f"{n}.npy", mmap_mode="r") for n in _SPLIT}


def _write(target: Path, a: np.ndarray, dtype: Any, rows: np.ndarray | None) -> None:
    """`a` (or its `rows`) as a .npy of `dtype`, written a block of rows at a time."""
    n = len(a) if rows is None else len(rows)
    out = np.lib.format.open_memmap(target, mode="w+", dtype=dtype, shape=(n, *a.shape[1:]))
    for lo in range(0, n, CHECK_ROWS):
        idx = slice(lo, lo + CHECK_ROWS) if rows is None else rows[lo:lo + CHECK_ROWS]
        out[lo:lo + CHECK_ROWS] = np.asarray(a[idx], dtype=dtype)
    out.flush()
    del out


# ------------------------------------------------------------------------------ standardized features
def feature_stats(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each feature's mean and standard deviation over the rows of `X` (float64; two passes
    a block of rows at a time, so a mapped array is read, not copied). A feature that does
    not vary gets a deviation of 1: it is centred, not blown up.

    >>> mean, std = feature_stats(np.array([[1.0, 5.0], [3.0, 5.0]]))
    >>> mean.tolist(), std.tolist()
    ([2.0, 5.0], [1.0, 1.0])
    """
    n = len(X)
    flat = X.reshape(n, -1)
    total = np.zeros(flat.shape[1])
    for lo in range(0, n, CHECK_ROWS):
        total += np.asarray(flat[lo:lo + CHECK_ROWS], dtype=np.float64).sum(axis=0)
    mean = total / n
    squares = np.zeros_like(mean)
    for lo in range(0, n, CHECK_ROWS):
        squares += ((np.asarray(flat[lo:lo + CHECK_ROWS], dtype=np.float64) - mean) ** 2).sum(axis=0)
    std = np.sqrt(squares / n)
    std[~(std > 1e-12 * np.maximum(1.0, np.abs(mean)))] = 1.0
    return mean, std


SCALE_ROWS = 10_000   # rows of a training set read to judge its features' scale (`unscaled`)


def unscaled(X: np.ndarray) -> str | None:
    """How far the features of X (its first SCALE_ROWS rows) are from unit scale, when they
    are far: a mean past 3 or a deviation outside 0.1-10 (a constant feature aside); None
    when they are near it.

    >>> unscaled(np.array([[5.1, 3.5], [6.2, 2.9], [7.0, 3.2]]))
    'means up to 6.1, deviations 0.24-0.78'
    >>> unscaled(np.array([[0.1, -1.0], [-0.4, 1.2], [0.3, 0.1]])) is None
    True
    """
    mean, std = feature_stats(X[:SCALE_ROWS])
    varies = std != 1.0           # (a constant feature's deviation reads 1)
    spread = std[varies] if varies.any() else std
    top, low, high = float(np.abs(mean).max()), float(spread.min()), float(spread.max())
    if top <= 3 and 0.1 <= low and high <= 10:
        return None
    return f"means up to {top:.2g}, deviations {low:.2g}-{high:.2g}"


def standardized(data: Dataset, data_dir: str | os.PathLike | None = None) -> tuple[Dataset, dict[str, Any]]:
    """`data` with every feature shifted and scaled by the training set's mean and standard
    deviation (`feature_stats`; the test and validation sets by the same numbers), and those numbers, for the
    run's summary. Features held in memory are transformed in memory; memory-mapped ones are
    written once, transformed, under cache_dir()/standardized/ (by the statistics and the
    arrays' shapes) and mapped from there, so the workers of a host still share one copy."""
    mean, std = feature_stats(data.X_train)
    record = {"by": "the training set's mean and standard deviation", "mean": mean.tolist(), "std": std.tolist()}

    def scale(block: np.ndarray) -> np.ndarray:
        return standardize_rows(block, record)

    names = ("X_train", "X_test") + (("X_val",) if data.X_val is not None else ())   # the validation rows too
    if any(_is_mapped(getattr(data, n)) for n in names):
        h = hashlib.sha256(mean.tobytes() + std.tobytes() + repr(tuple(getattr(data, n).shape for n in names)).encode())
        folder = cache_dir(data_dir) / "standardized" / h.hexdigest()[:16]
        if not all((folder / f"{n}.npy").exists() for n in names):
            tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
            tmp.mkdir(parents=True, exist_ok=True)
            for name in names:
                a = getattr(data, name)
                out = np.lib.format.open_memmap(tmp / f"{name}.npy", mode="w+", dtype=np.float32, shape=a.shape)
                for lo in range(0, len(a), CHECK_ROWS):
                    out[lo:lo + CHECK_ROWS] = scale(a[lo:lo + CHECK_ROWS])
                out.flush()
                del out
            try:
                os.replace(tmp, folder)
            except OSError:            # another process made it first: theirs is the same
                import shutil
                shutil.rmtree(tmp, ignore_errors=True)
        scaled = {n: np.load(folder / f"{n}.npy", mmap_mode="r") for n in names}
    else:
        scaled = {n: scale(getattr(data, n)) for n in names}
    out = make_dataset(data.name, scaled["X_train"], data.y_train, scaled["X_test"], data.y_test, data.n_classes,
                       image_shape=data.image_shape, best_loss=data.best_loss)
    if data.X_val is not None:
        X_val = scaled["X_val"]
        if X_val.flags.writeable:
            X_val.flags.writeable = False
        out = replace(out, X_val=X_val, y_val=data.y_val)
    return out, record


def standardize_rows(rows: Any, record: dict[str, Any]) -> np.ndarray:
    """`rows` (float32, any shape of row) shifted and scaled by a run's standardization
    (`standardized`'s record: its `mean` and `std`): the run's own features, or new rows
    scaled as the run scaled its own (`api.predict`).

    >>> standardize_rows(np.array([[3.0, 5.0]]), {"mean": [1.0, 5.0], "std": [2.0, 1.0]}).tolist()
    [[1.0, 0.0]]
    """
    rows = np.asarray(rows, dtype=np.float32)
    mean, std = np.asarray(record["mean"], np.float32), np.asarray(record["std"], np.float32)
    return ((rows.reshape(len(rows), -1) - mean) / std).reshape(rows.shape)


def _is_mapped(a: Any) -> bool:
    """Whether `a`'s memory is a file's mapping."""
    import mmap
    while a is not None:
        if isinstance(a, (np.memmap, mmap.mmap)):
            return True
        a = getattr(a, "base", None)
    return False


# ------------------------------------------------------------------------------ arrays given in Python
def save_arrays(data: Dataset, data_dir: str | os.PathLike | None = None) -> str:
    """Write a `Dataset`'s four arrays as .npy files in a folder named by their hash,
    under cache_dir()/arrays/ (once: the same arrays find the same folder), and return
    the folder: what `RunConfig(dataset=<Dataset>)` names the data by."""
    h = hashlib.sha256()
    arrays = {"X_train": np.ascontiguousarray(data.X_train, np.float32),
              "y_train": np.ascontiguousarray(data.y_train, np.int64),
              "X_test": np.ascontiguousarray(data.X_test, np.float32),
              "y_test": np.ascontiguousarray(data.y_test, np.int64)}
    if data.image_shape is not None:
        arrays = {k: v.reshape(len(v), *data.image_shape) if k.startswith("X") else v for k, v in arrays.items()}
    for k in _SPLIT:
        h.update(k.encode() + str(arrays[k].shape).encode())
        h.update(memoryview(arrays[k]).cast("B"))
    h.update(str(data.n_classes).encode())
    folder = cache_dir(data_dir) / "arrays" / h.hexdigest()[:16]
    if not (folder / "n_classes.npy").exists():
        tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        for k, v in arrays.items():
            np.save(tmp / f"{k}.npy", v)
        np.save(tmp / "n_classes.npy", np.int64(data.n_classes))
        try:
            os.replace(tmp, folder)
        except OSError:
            import shutil
            shutil.rmtree(tmp, ignore_errors=True)
    return str(folder)


# ------------------------------------------------------------------------------ what a run records, where it runs
HASH_BYTES = 256 << 20   # files up to this size are hashed for the run's summary (larger: size and time only)


def data_record(path: str, label_column: str | None = None) -> dict[str, Any]:
    """What a run's data file was, for its summary (`summary["data"]`): each file's path,
    size and SHA-256 (files over HASH_BYTES: size and modification time only); for a CSV,
    how its table was read (`Table.record`: the label column, the features, class names).

    >>> import tempfile, os
    >>> f = os.path.join(tempfile.mkdtemp(), "iris.csv")
    >>> _ = open(f, "w").write("petal,sepal,species\\n1.4,5.1,setosa\\n4.7,7.0,versicolor\\n1.3,4.9,setosa\\n")
    >>> data_record(f)["table"]
    {'label': 'species', 'features': ['petal', 'sepal'], 'sep': ',', 'classes': ['setosa', 'versicolor']}
    """
    where = [p.strip() for p in path.split(",")] if "," in path else \
        sorted(str(p) for p in Path(path).glob("*.npy")) if os.path.isdir(path) else [path]
    out = []
    for f in where:
        st = os.stat(f)
        entry: dict[str, Any] = {"path": str(Path(f).absolute()), "bytes": st.st_size}
        if st.st_size <= HASH_BYTES:
            h = hashlib.sha256()
            with open(f, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    h.update(block)
            entry["sha256"] = h.hexdigest()
        else:
            entry["mtime_ns"] = st.st_mtime_ns
        out.append(entry)
    record: dict[str, Any] = {"name": path, "files": out}
    if path.lower().endswith(".csv"):   # how the table was read: which column is the label, the class names
        record["table"] = _csv(path, label_column)[2].record()
    return record


def reach(path: str, test_fraction: float = 0.2, label_column: str | None = None) -> str | None:
    """In a worker, before its run starts: None when it can read the data file `path`
    (its arrays' headers and labels; a .txt file's text), else what went wrong, in one line."""
    try:
        if is_text_path(path):          # a language model's text file (`data.text`)
            read_text(path)
        else:
            file_shape(path, test_fraction, label_column)
    except (DataError, OSError) as exc:
        return str(exc)
    return None
