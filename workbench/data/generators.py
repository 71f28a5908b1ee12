"""The datasets made here, offline: the 8x8 digits, our mnist1d curves and the
synthetic teacher/student set.

- ``digits``: the 8x8 handwritten digits shipped in this package. The split is stratified and fixed
  (split seed 0, never the run seed), so test sets compare across runs.
- ``mnist1d``: ten fixed template curves, each sample shifted, stretched, scaled, sheared
  and noised, sampled at 40 points. A linear model gets clearly less accuracy on it than
  an MLP.
- ``synthetic``: labels from a random teacher MLP on Gaussian inputs; size, width and
  class count scale freely (generated in chunks, so 1e6 x 784 fits in its output).
"""

from __future__ import annotations

import functools

import numpy as np

from .dataset import Dataset, _centre, _n_test, make_dataset
from .order import _largest_remainder

_SPLIT_SEED = 0  # digits' train/test split: fixed, so test sets compare across run seeds
_CHUNK_ROWS = 1 << 16  # synthetic: rows generated at a time; bounds the float64 temporaries
# mnist1d: its (m, 40) float64 temporaries (about ten alive at once) at 8,192 rows take ~30 MB;
# at 65,536 rows they took ~380 MB a process, in every Dask worker that builds the set (Binder: 1-2 GB)
_MNIST1D_CHUNK_ROWS = 1 << 13
DIGITS_FILE = "digits.csv.gz"      # beside this module: 1797 rows of 64 pixels 0..16, then the label
DIGITS_SHA256 = "09f66e6debdee2cd2b5ae59e0d6abbb73fc2b0e0185d2e1957e9ebb51e23aa22"
_LABEL_NOISE = 0.1  # Gumbel scale on the synthetic teacher's unit-std logits
_MNIST1D_TEMPLATE_SEED = 1998  # the ten class templates are the same for every run seed
_MNIST1D_TEMPLATE_LEN = 12
_MNIST1D_LEN = 40


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


def digits_table() -> tuple[np.ndarray, np.ndarray]:
    """The 8x8 digits as scikit-learn's `load_digits()` gives them: (1797, 64) pixels
    0..16 (float64) and the labels (int).

    The test set of the UCI "Optical Recognition of Handwritten Digits" data (E. Alpaydin
    and C. Kaynak, 1998; CC BY 4.0), in the file scikit-learn ships
    (sklearn/datasets/data/digits.csv.gz: 64 pixel columns, then the label), copied into
    this package (57 KB) and read directly: no scikit-learn (about 190 MB installed with
    its dependencies) and no import of its datasets API (~2 s of CPU in every process that
    loads the set). `DIGITS_SHA256` pins the file; tests compare it with `load_digits`
    where scikit-learn is installed.
    """
    import gzip
    from importlib.resources import files
    with gzip.open(files(__package__).joinpath(DIGITS_FILE).open("rb"), "rt") as text:
        table = np.loadtxt(text, delimiter=",")
    return table[:, :-1], table[:, -1].astype(int)


def _digits(test_fraction: float) -> Dataset:
    data, target = digits_table()
    X = data.astype(np.float32) / 16.0  # (1797, 64), pixels 0..16
    y = target.astype(np.int64)
    train, test = _stratified_split(y, test_fraction, _SPLIT_SEED)
    X_train, X_test = X[train], X[test]
    _centre(X_train, X_test)
    return make_dataset("digits", X_train, y[train], X_test, y[test], 10, (1, 8, 8))


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
    # One stream per random quantity, so the data do not depend on _MNIST1D_CHUNK_ROWS.
    streams = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(7)]
    r_label, r_centre, r_width, r_amp, r_shear, r_smooth, r_white = streams
    y = r_label.permutation(np.arange(n_samples) % 10).astype(np.int64)  # balanced classes
    u = np.linspace(0.0, 1.0, n_out)  # output positions
    kernel = np.exp(-0.5 * (np.arange(-4, 5) / 2.0) ** 2)
    kernel /= np.sqrt((kernel**2).sum())  # smoothed noise keeps unit variance
    X = np.empty((n_samples, n_out), np.float32)
    for lo in range(0, n_samples, _MNIST1D_CHUNK_ROWS):
        hi = min(lo + _MNIST1D_CHUNK_ROWS, n_samples)
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
    return make_dataset("mnist1d", X_train, y[:n_train], X_test, y[n_train:], 10)


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
    return make_dataset("synthetic", X[:n_train], y[:n_train], X[n_train:], y[n_train:], n_classes)


# --- real datasets: download, verify, parse --------------------------------------------
