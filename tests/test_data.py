"""Tests for workbench.data: datasets, the global minibatch order, batch splitting,
and the download path (against a local HTTP server with tiny files in the real formats)."""

from __future__ import annotations

import functools
import gzip
import hashlib
import http.server
import io
import os
import pickle
import struct
import tarfile
import threading
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from workbench import data
from workbench.data import (
    DATASETS,
    DataError,
    Dataset,
    batch_order,
    cache_dir,
    global_batch,
    load_dataset,
    partition,
    split_batch,
    steps_per_epoch,
)

IDX_FILES = data.FILES["mnist"]
CIFAR = "cifar-10-python.tar.gz"


@pytest.fixture(autouse=True)
def _fresh_cache():
    data.clear_cache()
    yield
    data.clear_cache()


# --------------------------------------------------------------------------- digits


def test_digits_shapes_dtypes_and_scale():
    ds = load_dataset("digits")
    assert isinstance(ds, Dataset) and ds.name == "digits"
    assert (ds.n_train, ds.n_test, ds.n_features) == (1438, 359, 64)  # round(0.2 * 1797)
    assert ds.X_train.shape == (1438, 64) and ds.X_test.shape == (359, 64)
    assert ds.X_train.dtype == np.float32 and ds.X_test.dtype == np.float32
    assert ds.y_train.dtype == np.int64 and ds.y_test.dtype == np.int64
    assert ds.n_classes == 10 and ds.image_shape == (1, 8, 8)
    assert set(np.unique(ds.y_train)) == set(range(10)) == set(np.unique(ds.y_test))
    # /16 then centred on the training mean of each feature
    np.testing.assert_allclose(ds.X_train.mean(axis=0), 0, atol=1e-6)
    assert np.abs(ds.X_train).max() <= 1.0 and np.abs(ds.X_test).max() <= 1.0


def test_digits_are_the_shipped_file_pinned_by_its_checksum():
    import hashlib
    from importlib.resources import files

    from workbench.data import generators
    blob = files("workbench.data").joinpath(generators.DIGITS_FILE).read_bytes()
    assert hashlib.sha256(blob).hexdigest() == generators.DIGITS_SHA256
    X, y = generators.digits_table()
    assert X.shape == (1797, 64) and X.dtype == np.float64 and y.dtype.kind == "i"
    assert X.min() == 0 and X.max() == 16 and np.array_equal(X, np.round(X))
    assert np.bincount(y).tolist() == [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]   # the UCI test set's classes


def test_digits_are_scikit_learns_own_where_it_is_installed():
    # scikit-learn is no dependency: this compares with it only where it happens to be installed
    datasets = pytest.importorskip("sklearn.datasets")
    from workbench.data import generators
    ref = datasets.load_digits()
    X, y = generators.digits_table()
    np.testing.assert_array_equal(X, ref.data)
    np.testing.assert_array_equal(y, ref.target)
    assert X.dtype == ref.data.dtype and y.dtype == ref.target.dtype


def test_loading_digits_imports_no_scikit_learn():
    import subprocess
    import sys
    probe = ("import sys; from workbench.data import load_dataset; load_dataset('digits'); "
             "print('sklearn' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "False", proc.stdout + proc.stderr


def test_mnist1d_does_not_depend_on_its_chunk_size(monkeypatch):
    # generated 8,192 rows at a time (memory: Binder); the random streams are consumed in order
    from workbench.data import clear_cache, generators, load_dataset
    clear_cache()
    small = load_dataset("mnist1d", n_samples=3000, seed=4, test_fraction=0.2)
    monkeypatch.setattr(generators, "_MNIST1D_CHUNK_ROWS", 1000)
    clear_cache()
    chunked = load_dataset("mnist1d", n_samples=3000, seed=4, test_fraction=0.2)
    clear_cache()
    for name in ("X_train", "y_train", "X_test", "y_test"):
        np.testing.assert_array_equal(getattr(small, name), getattr(chunked, name))


def test_digits_split_is_fixed_stratified_and_ignores_run_seed():
    a = load_dataset("digits", seed=0)
    data.clear_cache()
    b = load_dataset("digits", seed=7, n_samples=50)
    assert a is not b
    for name in ("X_train", "y_train", "X_test", "y_test"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    counts_all = np.bincount(np.concatenate([a.y_train, a.y_test]), minlength=10)
    counts_test = np.bincount(a.y_test, minlength=10)
    assert np.all(np.abs(counts_test - 0.2 * counts_all) <= 1)
    # no sample in both sets: the digits images are distinct enough to check via rows
    assert a.n_train + a.n_test == 1797


def test_datasets_are_read_only_and_cached():
    ds = load_dataset("digits")
    for arr in (ds.X_train, ds.y_train, ds.X_test, ds.y_test):
        assert not arr.flags.writeable
        with pytest.raises(ValueError):
            arr[0] = 0
    assert load_dataset("digits") is ds
    syn = load_dataset("synthetic", n_samples=100, n_features=3)
    with pytest.raises(ValueError):
        syn.X_train[0, 0] = 1.0
    with pytest.raises(Exception):
        syn.name = "other"  # frozen


def test_dataset_registry_names():
    assert list(DATASETS) == ["digits", "mnist1d", "synthetic", "markov_text", "mnist", "fashion_mnist", "cifar10"]
    assert all(isinstance(v.summary, str) and v.summary for v in DATASETS.values())


@pytest.mark.parametrize(
    "name, kwargs, field",
    [
        ("foo", {}, "dataset"),
        (None, {}, "dataset"),
        ("synthetic", {"n_samples": 9}, "n_samples"),
        ("synthetic", {"n_samples": 10.5}, "n_samples"),
        ("synthetic", {"n_features": 0}, "n_features"),
        ("synthetic", {"n_classes": 1}, "n_classes"),
        ("synthetic", {"n_classes": True}, "n_classes"),
        ("synthetic", {"seed": -1}, "seed"),
        ("synthetic", {"test_fraction": 1.0}, "test_fraction"),
        ("synthetic", {"test_fraction": float("nan")}, "test_fraction"),
        ("digits", {"test_fraction": 0}, "test_fraction"),
        ("mnist", {"data_dir": 3}, "data_dir"),
    ],
)
def test_bad_arguments_name_the_field(name, kwargs, field):
    with pytest.raises(DataError, match=rf"^{field}: .*, got "):
        load_dataset(name, **kwargs)


def test_unknown_dataset_lists_the_allowed_names():
    with pytest.raises(DataError) as info:
        load_dataset("foo")
    assert str(info.value) == (f"dataset: one of {list(DATASETS)}, or a path/to/text.txt, or a data file (.npz, a "
                               "pair x.npy,y.npy, a folder of .npy, .csv), got 'foo'")
    assert isinstance(info.value, ValueError)


def test_cache_dir_default_and_env(monkeypatch, tmp_path):
    monkeypatch.delenv(data.DATA_ENV, raising=False)
    assert cache_dir() == Path.home() / ".cache" / "workbench"
    monkeypatch.setenv(data.DATA_ENV, str(tmp_path))
    assert cache_dir() == tmp_path
    assert cache_dir(tmp_path / "x") == tmp_path / "x"
    assert cache_dir("~/d") == Path.home() / "d"


# --------------------------------------------------------------------------- batch order


def test_batch_order_depends_only_on_seed_and_epoch():
    a = batch_order(1000, 32, seed=3, epoch=2)
    assert a.dtype == np.int64 and a.shape == (1000,)
    np.testing.assert_array_equal(np.sort(a), np.arange(1000))
    np.testing.assert_array_equal(a, batch_order(1000, 32, seed=3, epoch=2))
    np.testing.assert_array_equal(a, batch_order(1000, 128, seed=3, epoch=2))  # not the batch size
    assert not np.array_equal(a, batch_order(1000, 32, seed=4, epoch=2))
    assert not np.array_equal(a, batch_order(1000, 32, seed=3, epoch=3))
    np.testing.assert_array_equal(a, np.random.default_rng([3, 2]).permutation(1000))


@pytest.mark.parametrize(
    "n_train, batch_size, expected",
    [(10, 1, 10), (10, 3, 3), (10, 10, 1), (1437, 256, 5), (60000, 128, 468)],
)
def test_steps_per_epoch_table(n_train, batch_size, expected):
    assert steps_per_epoch(n_train, batch_size) == expected


def test_steps_per_epoch_errors():
    with pytest.raises(DataError, match=r"^batch_size: at most the training set size \(10\), got 11$"):
        steps_per_epoch(10, 11)
    with pytest.raises(DataError, match="^batch_size: "):
        steps_per_epoch(10, 0)
    with pytest.raises(DataError, match="^n_train: "):
        steps_per_epoch(0, 1)
    with pytest.raises(DataError, match="^batch_size: at most"):
        batch_order(10, 11, 0, 0)


def test_global_batch_follows_batch_order_across_epochs():
    n, b, seed = 103, 10, 5
    spe = steps_per_epoch(n, b)
    assert spe == 10
    for step in range(3 * spe + 2):
        epoch, k = divmod(step, spe)
        expected = batch_order(n, b, seed, epoch)[k * b : (k + 1) * b]
        got = global_batch(n, b, seed, step)
        np.testing.assert_array_equal(got, expected)
        assert got.dtype == np.int64 and not got.flags.writeable
    # within an epoch the batches are disjoint; the last partial batch (3 samples) is dropped
    seen = np.concatenate([global_batch(n, b, seed, s) for s in range(spe)])
    assert len(np.unique(seen)) == spe * b


def test_global_batch_is_not_affected_by_callers_mutating_batch_order():
    before = global_batch(50, 5, 1, 0).copy()
    order = batch_order(50, 5, 1, 0)
    order[:] = 0  # a fresh writable array; the cache must not share it
    np.testing.assert_array_equal(global_batch(50, 5, 1, 0), before)


def test_global_batch_rejects_negative_step():
    with pytest.raises(DataError, match="^step: "):
        global_batch(10, 2, 0, -1)


# --------------------------------------------------------------------------- split_batch


@pytest.mark.parametrize(
    "batch_size, shares, expected",
    [
        (10, [1], [(0, 10)]),
        (10, [1, 1], [(0, 5), (5, 10)]),
        (10, [1, 1, 2], [(0, 3), (3, 5), (5, 10)]),
        (9, [1, 1, 1], [(0, 3), (3, 6), (6, 9)]),
        (10, [1, 1, 1], [(0, 4), (4, 7), (7, 10)]),  # tie goes to the lower index
        (10, [9, 1], [(0, 9), (9, 10)]),
        (4, [100, 1, 1], [(0, 2), (2, 3), (3, 4)]),  # everyone gets >= 1
        (3, [1e6, 1, 1], [(0, 1), (1, 2), (2, 3)]),
        (256, [3.0, 1.0], [(0, 192), (192, 256)]),
        (100, np.array([0.5, 0.25, 0.25]), [(0, 50), (50, 75), (75, 100)]),
    ],
)
def test_split_batch_table(batch_size, shares, expected):
    assert split_batch(batch_size, shares) == expected


def test_split_batch_properties_on_random_shares():
    rng = np.random.default_rng(0)
    for _ in range(300):
        p = int(rng.integers(1, 9))
        shares = list(rng.uniform(0.05, 5.0, p))
        b = int(rng.integers(p, 600))
        original = list(shares)
        slices = split_batch(b, shares)
        assert shares == original  # input not modified
        sizes = np.array([stop - start for start, stop in slices])
        assert slices[0][0] == 0 and slices[-1][1] == b
        assert all(slices[i][1] == slices[i + 1][0] for i in range(p - 1))
        assert sizes.sum() == b and sizes.min() >= 1
        quotas = b * np.array(shares) / sum(shares)
        if quotas.min() >= 1:
            assert np.all(np.abs(sizes - quotas) < 1)
        assert split_batch(b, shares) == slices  # deterministic


def test_split_batch_errors():
    with pytest.raises(DataError, match=r"^batch_size: at least the number of workers \(3\), got 2$"):
        split_batch(2, [1, 1, 1])
    with pytest.raises(ValueError):
        split_batch(0, [1])
    for bad in ([], [1, 0], [1, -1], [1, float("nan")], [1, float("inf")], "ab", None):
        with pytest.raises(DataError, match="^shares: "):
            split_batch(10, bad)


# --------------------------------------------------------------------------- partition


@pytest.mark.parametrize("n, parts", [(10, 1), (10, 3), (1437, 4), (7, 7), (1000, 6)])
def test_partition_disjoint_covering_near_equal(n, parts):
    shards = partition(n, parts, seed=1)
    assert len(shards) == parts
    joined = np.concatenate(shards)
    assert len(joined) == n
    np.testing.assert_array_equal(np.sort(joined), np.arange(n))
    sizes = [len(s) for s in shards]
    assert max(sizes) - min(sizes) <= 1
    assert all(s.dtype == np.int64 for s in shards)
    again = partition(n, parts, seed=1)
    assert all(np.array_equal(a, b) for a, b in zip(shards, again))


def test_partition_is_random_and_validated():
    a, b = partition(100, 2, seed=0), partition(100, 2, seed=1)
    assert not np.array_equal(a[0], b[0])
    assert not np.array_equal(a[0], np.arange(50))  # shuffled, not contiguous blocks
    with pytest.raises(DataError, match=r"^parts: at most the number of samples \(3\), got 4$"):
        partition(3, 4, 0)
    with pytest.raises(DataError, match="^parts: "):
        partition(3, 0, 0)


# --------------------------------------------------------------------------- synthetic


@pytest.mark.parametrize(
    "n_samples, n_features, n_classes",
    [(100, 5, 2), (1000, 784, 10), (3000, 16, 30), (500, 1, 3)],
)
def test_synthetic_sizes_scale(n_samples, n_features, n_classes):
    ds = load_dataset("synthetic", n_samples=n_samples, n_features=n_features, n_classes=n_classes, seed=2)
    n_test = round(0.2 * n_samples)
    assert ds.X_train.shape == (n_samples - n_test, n_features)
    assert ds.X_test.shape == (n_test, n_features)
    assert ds.X_train.dtype == np.float32 and ds.y_train.dtype == np.int64
    assert ds.n_classes == n_classes and ds.image_shape is None
    y = np.concatenate([ds.y_train, ds.y_test])
    assert y.min() >= 0 and y.max() < n_classes
    assert len(np.unique(y)) == n_classes  # the teacher's biases keep every class in use
    # no class is starved or dominant: about n/C each
    counts = np.bincount(y, minlength=n_classes)
    assert counts.max() < 3 * n_samples / n_classes
    assert abs(float(ds.X_train.std()) - 1.0) < 0.1


def test_synthetic_is_deterministic_in_seed_and_chunking(monkeypatch):
    a = load_dataset("synthetic", n_samples=300, n_features=8, n_classes=4, seed=11)
    data.clear_cache()
    monkeypatch.setattr(data.generators, "_CHUNK_ROWS", 7)  # many chunks: the data must not change
    b = load_dataset("synthetic", n_samples=300, n_features=8, n_classes=4, seed=11)
    np.testing.assert_array_equal(a.X_train, b.X_train)
    np.testing.assert_array_equal(a.y_train, b.y_train)
    np.testing.assert_array_equal(a.y_test, b.y_test)
    c = load_dataset("synthetic", n_samples=300, n_features=8, n_classes=4, seed=12)
    assert not np.array_equal(a.X_train, c.X_train)


def test_synthetic_labels_come_from_the_inputs():
    # a nearest-class-mean rule, fitted on train, must beat chance clearly on test
    ds = load_dataset("synthetic", n_samples=4000, n_features=10, n_classes=4, seed=0)
    means = np.stack([ds.X_train[ds.y_train == c].mean(0) for c in range(4)])
    pred = ((ds.X_test[:, None, :] - means) ** 2).sum(-1).argmin(1)
    assert (pred == ds.y_test).mean() > 0.5


def test_synthetic_is_generated_in_chunks_without_big_temporaries(monkeypatch):
    monkeypatch.setattr(data.generators, "_CHUNK_ROWS", 4096)
    tracemalloc.start()
    try:
        ds = load_dataset("synthetic", n_samples=50_000, n_features=200, n_classes=10)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    output = ds.X_train.nbytes + ds.X_test.nbytes + ds.y_train.nbytes + ds.y_test.nbytes
    assert peak < 1.25 * output  # a float64 copy of X alone would be 2x


def test_synthetic_test_fraction():
    ds = load_dataset("synthetic", n_samples=1000, n_features=4, test_fraction=0.5)
    assert (ds.n_train, ds.n_test) == (500, 500)


# --------------------------------------------------------------------------- mnist1d


def test_mnist1d_shape_classes_and_determinism(monkeypatch):
    ds = load_dataset("mnist1d", n_samples=1000, n_features=3, seed=4)  # n_features ignored
    assert (ds.n_train, ds.n_test, ds.n_features) == (800, 200, 40)
    assert ds.n_classes == 10 and ds.image_shape is None
    assert ds.X_train.dtype == np.float32
    assert set(np.unique(ds.y_train)) == set(range(10))
    assert np.all(np.bincount(np.concatenate([ds.y_train, ds.y_test])) == 100)  # balanced
    assert abs(float(ds.X_train.std()) - 1.0) < 1e-3
    data.clear_cache()
    monkeypatch.setattr(data.generators, "_CHUNK_ROWS", 33)
    again = load_dataset("mnist1d", n_samples=1000, seed=4)
    np.testing.assert_array_equal(ds.X_train, again.X_train)
    np.testing.assert_array_equal(ds.y_test, again.y_test)
    other = load_dataset("mnist1d", n_samples=1000, seed=5)
    assert not np.array_equal(ds.X_train, other.X_train)


def test_mnist1d_is_learnable_but_not_trivially():
    # nearest class mean: a crude linear rule; well above chance (0.1), far from solved
    ds = load_dataset("mnist1d", n_samples=4000, seed=0)
    means = np.stack([ds.X_train[ds.y_train == c].mean(0) for c in range(10)])
    pred = ((ds.X_test[:, None, :] - means) ** 2).sum(-1).argmin(1)
    acc = (pred == ds.y_test).mean()
    assert 0.18 < acc < 0.6, acc


# --------------------------------------------------------------------------- real datasets
# Tiny files in the official formats, served over HTTP from 127.0.0.1.


def _idx_gz(array: np.ndarray, magic: int) -> bytes:
    header = magic.to_bytes(4, "big") + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    return gzip.compress(header + array.astype(np.uint8).tobytes())


def _tar_gz(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, payload in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    return buf.getvalue()


def _py2_pickle(x: np.ndarray, labels: list[int]) -> bytes:
    """{'data': x, 'labels': labels} pickled the way Python 2 + numpy 1.x wrote the real
    CIFAR batches (str opcodes, numpy.core.multiarray), written opcode by opcode."""
    def s(b):  # SHORT_BINSTRING: a Python 2 str
        return b"U" + bytes([len(b)]) + b

    def i(v):  # BININT1 / BININT2
        return b"K" + bytes([v]) if v < 256 else b"M" + struct.pack("<H", v)

    n, f = x.shape
    dtype = (b"cnumpy\ndtype\n" + s(b"u1") + i(0) + i(1) + b"\x87R"
             + b"(" + i(3) + s(b"|") + b"NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xff" + i(0) + b"tb")
    array = (b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\n" + i(0) + b"\x85" + s(b"b") + b"\x87R"
             + b"(" + i(1) + i(n) + i(f) + b"\x86" + dtype + b"\x89"
             + b"T" + struct.pack("<I", x.nbytes) + x.tobytes() + b"tb")
    items = s(b"data") + array + s(b"labels") + b"](" + b"".join(i(v) for v in labels) + b"e"
    return b"\x80\x02}(" + items + b"u."


class _Evil:
    def __reduce__(self):
        return (os.getpid, ())  # harmless if it ever ran; the loader must refuse to


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Serves files; under /cut/ it promises the full length but sends half, then hangs up."""

    def do_GET(self):
        if self.path.startswith("/cut/"):
            payload = (Path(self.directory) / self.path[len("/cut/"):]).read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload[: len(payload) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        super().do_GET()

    def log_message(self, *args):  # keep pytest output clean
        pass


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """(base_url, root, originals) for a local server holding tiny mnist/fashion/cifar files."""
    root = tmp_path_factory.mktemp("mirror")
    rng = np.random.default_rng(0)
    originals = {}
    for name in ("mnist", "fashion_mnist"):
        arrays = {
            "train_x": rng.integers(0, 256, (20, 28, 28), dtype=np.uint8),
            "train_y": rng.integers(0, 10, 20).astype(np.uint8),
            "test_x": rng.integers(0, 256, (10, 28, 28), dtype=np.uint8),
            "test_y": rng.integers(0, 10, 10).astype(np.uint8),
        }
        originals[name] = arrays
        blobs = dict(zip(IDX_FILES, [_idx_gz(arrays["train_x"], 2051), _idx_gz(arrays["train_y"], 2049),
                                     _idx_gz(arrays["test_x"], 2051), _idx_gz(arrays["test_y"], 2049)]))
        for sub in (name, f"truncated/{name}"):
            (root / sub).mkdir(parents=True)
        for file, blob in blobs.items():
            (root / name / file).write_bytes(blob)
            (root / "truncated" / name / file).write_bytes(blob[: len(blob) * 2 // 3])

    batches = []
    for i in range(6):
        n = 4 if i == 5 else 3
        x = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        batches.append((x, [int(v) for v in rng.integers(0, 10, n)]))
    members = {}
    for i, (x, y) in enumerate(batches):
        member = "test_batch" if i == 5 else f"data_batch_{i + 1}"
        d = {b"batch_label": member.encode(), b"labels": y, b"data": x, b"filenames": [b"a.png"] * len(y)}
        # the first batch as Python 2 wrote the official files, the rest as Python 3 would
        blob = _py2_pickle(x, y) if i == 0 else pickle.dumps(d, protocol=2)
        members[f"cifar-10-batches-py/{member}"] = blob
    members["cifar-10-batches-py/batches.meta"] = pickle.dumps({b"label_names": [b"cat"]}, protocol=2)
    originals["cifar10"] = batches
    (root / "cifar10").mkdir()
    (root / "cifar10" / CIFAR).write_bytes(_tar_gz(members))
    evil = dict(members)
    evil["cifar-10-batches-py/test_batch"] = pickle.dumps({b"data": _Evil()}, protocol=2)
    (root / "evil" / "cifar10").mkdir(parents=True)
    (root / "evil" / "cifar10" / CIFAR).write_bytes(_tar_gz(evil))

    handler = functools.partial(_Handler, directory=str(root))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", root, originals
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def unknown_hashes(monkeypatch):
    """Pretend the official hashes are unknown, so the tiny files are judged by parsing."""
    for name, files in data.EXPECTED_SHA256.items():
        monkeypatch.setitem(data.EXPECTED_SHA256, name, {f: None for f in files})


def _expected_images(x_train: np.ndarray, x_test: np.ndarray):
    train = x_train.reshape(len(x_train), -1).astype(np.float32) / 255
    test = x_test.reshape(len(x_test), -1).astype(np.float32) / 255
    mean = train.mean(0)
    return train - mean, test - mean


@pytest.mark.parametrize("name", ["mnist", "fashion_mnist"])
def test_idx_download_round_trip_with_sidecar(server, unknown_hashes, monkeypatch, tmp_path, name):
    url, _, originals = server
    monkeypatch.setenv(data.URL_ENV, url)
    ds = load_dataset(name, data_dir=tmp_path, download=True)
    o = originals[name]
    assert (ds.n_train, ds.n_test, ds.n_features) == (20, 10, 784)
    assert ds.image_shape == (1, 28, 28) and ds.n_classes == 10
    np.testing.assert_array_equal(ds.y_train, o["train_y"])
    np.testing.assert_array_equal(ds.y_test, o["test_y"])
    want_train, want_test = _expected_images(o["train_x"], o["test_x"])
    np.testing.assert_allclose(ds.X_train, want_train, atol=1e-6)
    np.testing.assert_allclose(ds.X_test, want_test, atol=1e-6)
    folder = tmp_path / name
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        list(IDX_FILES) + [f + ".sha256" for f in IDX_FILES])  # no leftover temp files
    for f in IDX_FILES:
        digest = hashlib.sha256((folder / f).read_bytes()).hexdigest()
        assert (folder / f"{f}.sha256").read_text().split()[0] == digest

    # a later load needs no network
    data.clear_cache()
    monkeypatch.setenv(data.URL_ENV, "http://127.0.0.1:9")
    again = load_dataset(name, data_dir=tmp_path)
    np.testing.assert_array_equal(again.X_train, ds.X_train)

    # a cached file truncated afterwards is caught by its sidecar hash
    data.clear_cache()
    target = folder / "t10k-images-idx3-ubyte.gz"
    target.write_bytes(target.read_bytes()[:100])
    with pytest.raises(DataError) as info:
        load_dataset(name, data_dir=tmp_path, download=True)
    msg = str(info.value)
    assert msg == (f"data_dir: t10k-images-idx3-ubyte.gz is corrupt or partial (sha256 mismatch); "
                   f"delete it and rerun with download=True, got {target}")


def test_known_hash_is_checked_on_download_and_load(server, monkeypatch, tmp_path):
    url, root, _ = server
    monkeypatch.setenv(data.URL_ENV, url)
    real = {f: hashlib.sha256((root / "mnist" / f).read_bytes()).hexdigest() for f in IDX_FILES}
    monkeypatch.setitem(data.EXPECTED_SHA256, "mnist", real)
    ds = load_dataset("mnist", data_dir=tmp_path, download=True)
    assert ds.n_train == 20
    assert not list((tmp_path / "mnist").glob("*.sha256"))  # official hashes need no sidecar

    # a file that parses fine but differs from the official hash is refused at load
    data.clear_cache()
    labels = tmp_path / "mnist" / "train-labels-idx1-ubyte.gz"
    labels.write_bytes(_idx_gz(np.zeros(20, np.uint8), 2049))
    with pytest.raises(DataError, match=r"^data_dir: train-labels-idx1-ubyte\.gz is corrupt or partial "
                                        r"\(sha256 mismatch\)"):
        load_dataset("mnist", data_dir=tmp_path)

    # and a download that does not match is never moved into place
    data.clear_cache()
    wrong = dict(real, **{"t10k-labels-idx1-ubyte.gz": "0" * 64})
    monkeypatch.setitem(data.EXPECTED_SHA256, "mnist", wrong)
    with pytest.raises(DataError, match=r"^download: .*corrupt or partial \(sha256 mismatch\).*got True$"):
        load_dataset("mnist", data_dir=tmp_path / "other", download=True)
    assert not (tmp_path / "other" / "mnist" / "t10k-labels-idx1-ubyte.gz").exists()
    assert not [p for p in (tmp_path / "other" / "mnist").iterdir() if p.name.startswith(".")]


def test_truncated_file_on_server_is_refused(server, unknown_hashes, monkeypatch, tmp_path):
    url, _, _ = server
    monkeypatch.setenv(data.URL_ENV, url + "/truncated")
    with pytest.raises(DataError, match=r"^download: .*corrupt or partial .*got True$"):
        load_dataset("mnist", data_dir=tmp_path, download=True)
    assert list((tmp_path / "mnist").iterdir()) == []  # nothing partial left behind


def test_connection_closed_early_is_refused(server, unknown_hashes, monkeypatch, tmp_path):
    url, _, _ = server
    monkeypatch.setenv(data.URL_ENV, url + "/cut")
    with pytest.raises(DataError, match=r"corrupt or partial \(partial: \d+ of \d+ bytes\)"):
        load_dataset("mnist", data_dir=tmp_path, download=True)
    assert list((tmp_path / "mnist").iterdir()) == []


def test_missing_files_without_download(monkeypatch, tmp_path):
    monkeypatch.setenv(data.URL_ENV, "http://127.0.0.1:9")  # would fail if it tried
    with pytest.raises(DataError) as info:
        load_dataset("mnist", data_dir=tmp_path)
    msg = str(info.value)
    assert msg.startswith(f"download: the mnist files are not in {tmp_path / 'mnist'}")
    assert msg.endswith("pass download=True (CLI --download) to fetch them, got False")
    assert not (tmp_path / "mnist").exists()


def test_unreachable_server_gives_a_clear_error(server, monkeypatch, tmp_path):
    url, _, _ = server
    monkeypatch.setenv(data.URL_ENV, url + "/nowhere")
    with pytest.raises(DataError, match=r"^download: could not fetch a valid cifar10 .*HTTP 404.*"
                                        r"WORKBENCH_DATA_URL.*got True$"):
        load_dataset("cifar10", data_dir=tmp_path, download=True)


def test_cifar10_download_round_trip(server, unknown_hashes, monkeypatch, tmp_path):
    url, _, originals = server
    monkeypatch.setenv(data.URL_ENV, url)
    ds = load_dataset("cifar10", data_dir=tmp_path, download=True)
    batches = originals["cifar10"]
    assert (ds.n_train, ds.n_test, ds.n_features) == (15, 4, 3072)
    assert ds.image_shape == (3, 32, 32) and ds.n_classes == 10
    x_train = np.concatenate([x for x, _ in batches[:5]])
    np.testing.assert_array_equal(ds.y_train, np.concatenate([y for _, y in batches[:5]]))
    np.testing.assert_array_equal(ds.y_test, batches[5][1])
    want_train, want_test = _expected_images(x_train, batches[5][0])
    np.testing.assert_allclose(ds.X_train, want_train, atol=1e-6)
    np.testing.assert_allclose(ds.X_test, want_test, atol=1e-6)
    assert (tmp_path / "cifar10" / f"{CIFAR}.sha256").is_file()

    data.clear_cache()
    archive = tmp_path / "cifar10" / CIFAR
    archive.write_bytes(archive.read_bytes()[:-50])
    with pytest.raises(DataError, match=r"^data_dir: cifar-10-python\.tar\.gz is corrupt or partial"):
        load_dataset("cifar10", data_dir=tmp_path)


def test_cifar10_refuses_pickles_that_call_functions(server, unknown_hashes, monkeypatch, tmp_path):
    url, _, _ = server
    monkeypatch.setenv(data.URL_ENV, url + "/evil")
    with pytest.raises(DataError, match=r"refusing to load posix\.getpid|refusing to load os\.getpid"):
        load_dataset("cifar10", data_dir=tmp_path, download=True)
    assert not (tmp_path / "cifar10" / CIFAR).exists()


def test_files_placed_by_hand_are_parsed_then_recorded(server, unknown_hashes, tmp_path):
    _, root, _ = server
    (tmp_path / "mnist").mkdir()
    for f in IDX_FILES:
        (tmp_path / "mnist" / f).write_bytes((root / "truncated" / "mnist" / f).read_bytes())
    with pytest.raises(DataError, match=r"^data_dir: train-images-idx3-ubyte\.gz is corrupt or partial "
                                        r"\(not a complete gzip file"):
        load_dataset("mnist", data_dir=tmp_path)
    assert not list((tmp_path / "mnist").glob("*.sha256"))  # a bad file is never recorded
    for f in IDX_FILES:
        (tmp_path / "mnist" / f).write_bytes((root / "mnist" / f).read_bytes())
    assert load_dataset("mnist", data_dir=tmp_path).n_test == 10
    assert len(list((tmp_path / "mnist").glob("*.sha256"))) == 4


def test_download_shows_a_progress_bar_through_pooch(server, unknown_hashes, monkeypatch, tmp_path, capfd):
    url, _, _ = server
    monkeypatch.setenv(data.URL_ENV, url)
    load_dataset("fashion_mnist", data_dir=tmp_path, download=True)
    err = capfd.readouterr().err
    for f in IDX_FILES:   # one bar per file, named after it, run to the end
        assert f"fashion_mnist/{f}" in err
    assert "100%" in err
    assert "SHA256 hash of downloaded file" not in err    # pooch's own log lines stay quiet
