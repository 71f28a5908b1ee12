"""Config -> problem: the dataset, the model, the plan and the initial parameters of a run, built in one place.

Every room that needs what a config trains (the engine's client and each worker, preflight,
LTFB's set-up, the simulator's costs, the benchmarks, the GPU check) asks
`Problem.from_config(config)` for it. A problem is built once per process for a config
(fields that do not change what is trained, such as `out`, are left out of the key) and
its parts are built on first use, so a caller that only needs the model's size or the
plan never loads the data:

>>> from workbench.config import RunConfig
>>> p = Problem.from_config(RunConfig(dataset="digits", model="cnn", hidden=(4,), batch_size=64, epochs=1))
>>> p.shape.n_train, p.model.describe().split(" (")[0], p.plan.total_steps
(1438, 'cnn 1x8x8-conv4-conv8-10', 22)
>>> Problem.from_config(RunConfig(dataset="digits", model="cnn", hidden=(4,), batch_size=64, epochs=1)) is p
True

The model here is the run's description (its size, its layer groups, the initial
parameters); a worker computes with its own instance (`new_model()`), since a model's
work buffers make it unsafe to share between threads.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from functools import cached_property
from typing import Any

import numpy as np

from .config import MODEL_NAMES, RunConfig
from .data import DataError, Dataset, Shape, dataset_shape, load_dataset
from .maths.models import Model, make_model
from .maths.optim import Plan, make_plan
from .maths.protocol import build_model, model_record
from .usercode import token_of

__all__ = ["GPT_FACTORY", "Problem", "build_counts", "run_plan"]

GPT_FACTORY = "workbench.maths.gpt:make_gpt"   # what `model: gpt` builds, with its knobs as the factory's arguments

_CACHE_SIZE = 4           # problems kept per process (the data itself sits in `data`'s own cache)
_IGNORED = {"out"}        # config fields that change where a run is saved, not what it trains
_cache: OrderedDict[str, Problem] = OrderedDict()
_lock = threading.Lock()
# How many times each part was built in this process (tests and docs/architecture.md count them).
_BUILDS = {"problem": 0, "data": 0, "model": 0, "plan": 0, "params0": 0}


def run_plan(config: RunConfig, n_train: int, lr: float | None = None) -> Plan:
    """The plan of a run of `config` on a training set of `n_train`: its steps, schedule and
    eval steps as the run will take them. The one place the planned step count comes
    from: the engine, the workers, preflight's warnings, progress bars and the dashboard
    read it (through `Problem.plan`). An algorithm whose steps walk something else than the whole training set in
    global batches says so on its declaration (`AlgorithmSpec.plan_shape`).

    Args:
        config: the run.
        n_train: the training set's size.
        lr: a base lr instead of the config's (LTFB trainers each hold their own).

    >>> run_plan(RunConfig(algorithm="sync_sgd", batch_size=100, epochs=2), 1000).total_steps
    20
    >>> run_plan(RunConfig(algorithm="ltfb", cpus=2, trainers=2, batch_size=100, epochs=2,
    ...                    tournament_size=100), 1000).total_steps   # 400 examples per trainer, batch 50
    16
    """
    from .config.registry import specs
    spec = specs().get(config.algorithm)
    if spec is None or spec.plan_shape is None:
        return make_plan(config, n_train, lr=lr)
    examples, batch = spec.plan_shape(config, n_train)
    return make_plan(config, examples, batch_size=batch, lr=lr)


def build_counts() -> dict[str, int]:
    """How many times this process built a problem and each of its parts (a copy)."""
    return dict(_BUILDS)


class Problem:
    """What a config trains: `shape`, `data`, `model`, `plan`, `params0` (each built on first use)."""

    def __init__(self, config: RunConfig):
        self.config = config
        _BUILDS["problem"] += 1

    @classmethod
    def from_config(cls, config: RunConfig) -> Problem:
        """The problem of `config`, built once per process (the last few are kept)."""
        if not isinstance(config, RunConfig):
            raise TypeError(f"config: a RunConfig, got {type(config).__name__}")
        # a model of the session's (a class given in Python, maybe redefined since) by its code's hash too,
        # and a data file or text by the version on disk (an edited file is read again)
        from .data.files import version
        key = config.model_dump_json(exclude=_IGNORED) + token_of(config.model) + repr(version(config.dataset))
        with _lock:
            problem = _cache.get(key)
            if problem is None:
                problem = _cache[key] = cls(config)
                while len(_cache) > _CACHE_SIZE:
                    _cache.popitem(last=False)
            else:
                _cache.move_to_end(key)
            return problem

    @staticmethod
    def clear_cache() -> None:
        """Forget the problems kept in this process (the datasets stay in `data`'s cache)."""
        with _lock:
            _cache.clear()

    @cached_property
    def shape(self) -> Shape:
        """The dataset's sizes, width, classes and image shape, from its `DATASETS` entry (no loading),
        the validation rows (`val_fraction`) held out of the training ones."""
        c = self.config
        return dataset_shape(c.dataset, n_samples=c.n_samples, n_features=c.n_features, n_classes=c.n_classes,
                             test_fraction=c.test_fraction, context=c.context,
                             label_column=c.label_column).held_out(c.val_fraction)

    @cached_property
    def data(self) -> Dataset:
        """The dataset (loaded, or generated, once per process; checks files and checksums)."""
        c = self.config
        data = load_dataset(c.dataset, n_samples=c.n_samples, n_features=c.n_features, n_classes=c.n_classes,
                            seed=c.seed, data_dir=c.data_dir, download=c.download, test_fraction=c.test_fraction,
                            context=c.context, label_column=c.label_column)
        _BUILDS["data"] += 1
        data = data.hold_out(self.shape.n_val)    # before any statistics: the validation rows stay unseen
        if c.standardize:   # every feature to mean 0, deviation 1 by the training set's statistics
            from .data.files import standardized
            data, self._standardized = standardized(data, c.data_dir)
        s = self.shape
        got = (data.n_train, data.n_test, data.n_features, data.n_classes, data.image_shape, data.n_val)
        if got != (s.n_train, s.n_test, s.n_features, s.n_classes, s.image_shape, s.n_val):
            raise DataError(f"dataset: data matching its DATASETS entry {s}, got {got} "
                            f"(n_train, n_test, n_features, n_classes, image_shape, n_val) for {c.dataset!r}")
        return data

    def load(self) -> Dataset:
        """Load (and check) the data now, not on first use: `data`, for a caller that only wants the load."""
        return self.data

    def new_model(self) -> Model:
        """A fresh instance of the run's model (one per worker thread: its work buffers are
        its own): a built-in one by name, any other built from its `package.module:Name`
        (`maths.protocol.build_model`: the model protocol, with the engine's interface)."""
        c, s = self.config, self.shape
        if c.model == "gpt":   # the built-in GPT, built as any model of the protocol is: its factory and knobs
            return build_model(GPT_FACTORY, s.n_features, s.n_classes,
                               {"n_layers": c.n_layers, "d_model": c.d_model, "n_heads": c.n_heads}, seed=c.seed)
        if c.model in MODEL_NAMES:
            return make_model(c.model, s.n_features, s.n_classes, hidden=c.model_hidden, image_shape=s.image_shape)
        return build_model(c.model, s.n_features, s.n_classes, c.model_args, seed=c.seed)

    @cached_property
    def data_record(self) -> dict[str, Any] | None:
        """What a run's data file was, for its summary (`data.files.data_record`: each file's
        path, size and hash), with the statistics its features were standardized by
        (`standardize`), or a text's vocabulary (`vocab`: token i is its i-th character); None
        for a built-in dataset as it is (its entry says what it is)."""
        from .data import DATASETS, is_text_path
        from .data.files import data_record
        record = None if self.config.dataset in DATASETS else data_record(self.config.dataset,
                                                                          self.config.label_column)
        if record is not None and is_text_path(self.config.dataset):   # its characters, in token order
            record = {**record, "vocab": self.data.vocab}
        if self.config.standardize:
            self.data   # noqa: B018 - loads the data, which computes the statistics
            record = {**(record or {"name": self.config.dataset}), "standardized": self._standardized}
        return record

    @cached_property
    def model_record(self) -> dict[str, Any]:
        """What the run's model is, for its summary: name, arguments, parameter count, and
        for a model of the user's its module, file and code hash (`protocol.model_record`)."""
        c = self.config
        args = {"n_layers": c.n_layers, "d_model": c.d_model, "n_heads": c.n_heads} if c.model == "gpt" else c.model_args
        return model_record(c.model, self.model, args)

    @cached_property
    def model(self) -> Model:
        """The run's model, built from the dataset's entry (no loading); for its size and layout."""
        model = self.new_model()
        _BUILDS["model"] += 1
        return model

    @cached_property
    def plan(self) -> Plan:
        """Steps, warmup, schedule and eval steps (validates the schedule against the run's length)."""
        plan = run_plan(self.config, self.shape.n_train)
        _BUILDS["plan"] += 1
        return plan

    @cached_property
    def params0(self) -> np.ndarray:
        """The initial parameters, `model.init(seed)`, read-only (copy them to train)."""
        params = self.model.init(self.config.seed)
        params.flags.writeable = False
        _BUILDS["params0"] += 1
        return params

    def initial_params(self, xp: Any = np) -> Any:
        """A fresh, writable copy of the initial parameters on `xp`'s device."""
        return np.array(self.params0, copy=True) if xp is np else xp.asarray(self.params0)

    def __repr__(self) -> str:
        c = self.config
        return f"Problem({c.dataset}, {c.model}, seed={c.seed})"
