"""What every dataset is: the `Dataset` container, the names on offer and the argument checks.

The generators (`generators`) and the downloaders (`download`) both build a `Dataset`
through `make_dataset`, so every one comes back the same way: read-only float32
features, int64 labels.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

DATASETS: dict[str, str] = {
    "digits": "scikit-learn 8x8 handwritten digits, 1797 images, 10 classes (bundled, offline)",
    "mnist1d": "generated 1-D digit-like curves, 40 features, 10 classes (offline)",
    "synthetic": "random teacher-MLP labels on Gaussian inputs; "
                 "n_samples, n_features, n_classes scale freely",
    "mnist": "MNIST handwritten digits, 60k/10k 28x28 grey images (download=True to fetch)",
    "fashion_mnist": "Fashion-MNIST clothing, 60k/10k 28x28 grey images (download=True to fetch)",
    "cifar10": "CIFAR-10 objects, 50k/10k 32x32 colour images (download=True to fetch)",
}
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

def make_dataset(name, X_train, y_train, X_test, y_test, n_classes, image_shape=None) -> Dataset:
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

