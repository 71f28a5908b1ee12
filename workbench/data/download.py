"""The real datasets (MNIST, Fashion-MNIST, CIFAR-10): where their files come from, the
cache folder, the checksums, and the readers of the official formats.

Files are fetched only when asked (``download=True``) into ``cache_dir()/<name>/`` and
checked before use: see `workbench.data.load_dataset` for the rules.
"""

from __future__ import annotations

import codecs
import gzip
import hashlib
import os
import pickle
import re
import tarfile
import uuid
import zlib
from pathlib import Path

import numpy as np

from ..util.fileio import atomic_write
from .dataset import DataError, Dataset, _centre, make_dataset

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

        from ..util.bars import bars_allowed

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
    return make_dataset(name, X_train, y_train, X_test, y_test, 10, shape)
