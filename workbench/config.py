"""One validated `RunConfig` holding every knob of a run.

YAML files, CLI flags (underscores become dashes), notebook parameters and dashboard
widgets all map onto the field names below. Validation happens here, once, before any
worker starts; every error names the field, what is allowed and the value it got:

    batch_size: at least the number of workers (2), got 1
"""
from __future__ import annotations

import math
import numbers
import re
from pathlib import Path
from typing import Any, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

# Names and one-line descriptions of every algorithm. The engine's registry must match
# this table (a test checks it); it lives here so that validating a config never has to
# import the engine or Dask.
ALGORITHMS: dict[str, str] = {
    "sgd": "single-process minibatch SGD (momentum/Nesterov): the reference every parallel run is checked against",
    "sync_sgd": "data-parallel SGD: the global batch is split, gradients are allreduced, every worker applies the same update",
    "async_sgd": "parameter server (Downpour, push/fetch every step): x -= lr*g applied on arrival, staleness recorded",
    "async_msgd": "async_sgd with momentum kept on the server: v = mu*v - lr*g; x += v",
    "hogwild_sgd": "lock-free updates of one shared-memory parameter buffer by all workers on one host (Recht et al.)",
    "easgd": "original elastic averaging SGD: the master serves workers in strict rank order (round-robin)",
    "async_easgd": "elastic averaging with a parameter server serving whichever worker arrives first, every tau steps",
    "async_measgd": "async_easgd with Nesterov momentum on the workers (EAMSGD)",
    "hogwild_easgd": "async_easgd with the lock on the centre update removed (centre in shared memory)",
    "sync_easgd": "all workers every tau steps: allreduce of the elastic differences; deterministic",
    "ltfb": "Livermore Tournament Fast Batch: K trainers train apart and swap weights in pairwise tournaments",
    "cgdp": "CPU-GPU data parallel: device workers compute gradients, a CPU worker sums and updates chunk by chunk",
}

DATASET_NAMES = ("digits", "mnist1d", "synthetic", "mnist", "fashion_mnist", "cifar10")
MODEL_NAMES = ("softmax", "mlp", "cnn")
SYNC_ALGORITHMS = ("sgd", "sync_sgd", "sync_easgd", "cgdp", "ltfb")  # a lost worker fails these runs


class ConfigError(ValueError):
    """A bad value for one config field; `str()` is `<field>: <allowed>, got <value>`."""

    def __init__(self, field: str, allowed: str, value: Any):
        self.field, self.allowed, self.value = field, allowed, value
        super().__init__(f"{field}: {allowed}, got {short_repr(value)}")


class ConfigTypeError(ConfigError, TypeError):
    """A value of the wrong type where a config was expected (`wb.run(None)`): both a
    `ConfigError` and a `TypeError`, with the same one-line message."""


def short_repr(value: Any, limit: int = 120) -> str:
    """`repr(value)` cut to about `limit` characters, never walking more of `value` than
    it shows (a YAML alias bomb expands to billions of elements: a full repr never ends).

    >>> short_repr([[1, 2, 3]] * 1000, limit=30)
    '[[1, 2, 3], [1, 2, 3], [1, 2, ... (cut)'
    >>> short_repr("x" * 5)
    "'xxxxx'"
    """
    import reprlib
    r = reprlib.Repr()
    r.maxlevel, r.maxlist, r.maxtuple, r.maxdict, r.maxset = 3, 8, 8, 6, 6
    r.maxstring, r.maxother, r.maxlong = limit, limit, limit
    text = r.repr(value)
    return text if len(text) <= limit else text[:limit] + "... (cut)"


# Fields checked by the strict-type validators below (nullable ones accept None too).
INT_FIELDS = ("n_samples", "n_features", "n_classes", "cpus", "batch_size", "base_batch", "tau", "trainers",
              "round_size", "tournament_size", "steps", "eval_every", "seed")
FLOAT_FIELDS = ("latency_ms", "bandwidth_gbps", "lr", "warmup_epochs", "momentum", "weight_decay", "alpha",
                "lr_spread", "epochs")
BOOL_FIELDS = ("download", "nesterov", "exchange_state")
_INT_TEXT = re.compile(r"\s*[+-]?[0-9]+\s*")


def strict_int(v: Any, allowed: str = "a whole number") -> Any:
    """`v` as an int when it is one (or its decimal text); never from a bool or a float.

    >>> strict_int("12"), strict_int(None)
    (12, None)
    >>> strict_int(True)
    Traceback (most recent call last):
    ...
    ValueError: a whole number: an integer such as 32 (not true/false, not a decimal like 2.5)
    """
    if v is None or (isinstance(v, numbers.Integral) and not isinstance(v, bool)):
        return v if v is None else int(v)
    if isinstance(v, str) and _INT_TEXT.fullmatch(v) and len(v) <= 40:
        return int(v)
    raise ValueError(f"{allowed}: an integer such as 32 (not true/false, not a decimal like 2.5)")


def strict_float(v: Any, allowed: str = "a number") -> Any:
    """`v` as a float when it is a real number (or its text); never from a bool."""
    if v is None or (isinstance(v, numbers.Real) and not isinstance(v, bool)):
        return v if v is None else float(v)
    if isinstance(v, str) and len(v) <= 60:
        try:
            return float(v)
        except ValueError:
            pass
    raise ValueError(f"{allowed} (not true/false)")


SCHEDULER_SCHEMES = ("tcp",)   # what workbench connects to (TLS needs certificates we do not take)


def check_scheduler_address(address: Any) -> str:
    """Raise ConfigError("scheduler", ...) unless `address` looks like tcp://HOST:PORT.

    >>> check_scheduler_address("tcp://127.0.0.1:8786")
    'tcp://127.0.0.1:8786'
    >>> check_scheduler_address("tcp://h:99999")
    Traceback (most recent call last):
    ...
    workbench.config.ConfigError: scheduler: an address like tcp://HOST:PORT with a port in 1-65535, got 'tcp://h:99999'
    """
    from urllib.parse import urlsplit
    if not isinstance(address, str) or len(address) > 300 or any(c.isspace() or ord(c) < 32 for c in address):
        raise ConfigError("scheduler", "an address like tcp://HOST:PORT", address)
    url = urlsplit(address)
    if url.scheme not in SCHEDULER_SCHEMES:
        raise ConfigError("scheduler", f"an address like tcp://HOST:PORT (scheme {' or '.join(SCHEDULER_SCHEMES)}; "
                          f"{url.scheme or 'none'}:// is not supported)", address)
    try:
        port = url.port
    except ValueError:
        port = -1
    if not url.hostname or port is None or not 1 <= port <= 65535 or url.path not in ("", "/") or url.query:
        raise ConfigError("scheduler", "an address like tcp://HOST:PORT with a port in 1-65535", address)
    return address


def _allowed(message: str) -> str:
    # Pydantic prefixes messages of validator errors with "Value error, ".
    return message.removeprefix("Value error, ")


class RunConfig(BaseModel):
    """Every knob of a run, with its default and its range.

    Construct with keywords (`RunConfig(algorithm="sync_sgd", cpus=2)`), from YAML
    (`RunConfig.from_yaml(path)`) or from a dict (`RunConfig.from_dict(d)`); unknown keys
    are rejected. `lr` is the base rate for `base_batch` samples; the schedule scales it
    to `batch_size` by `lr_scaling` and warms up to it over `warmup_epochs`.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)

    # --- what to train
    algorithm: str = "sgd"                 # see ALGORITHMS
    dataset: str = "digits"                # digits | mnist1d | synthetic | mnist | fashion_mnist | cifar10
    model: str = "mlp"                     # softmax | mlp | cnn
    hidden: list[int] | None = None        # MLP widths (default 128), or CNN channels (default 16,32)
    n_samples: int = 10000                 # synthetic / mnist1d: number of examples
    n_features: int = 64                   # synthetic: input width
    n_classes: int = 10                    # synthetic: number of classes
    data_dir: str | None = None            # dataset cache (default $WORKBENCH_DATA or ~/.cache/workbench)
    download: bool = False                 # fetch MNIST / Fashion-MNIST / CIFAR-10 if not cached

    # --- where to train
    cpus: int = 2                          # CPU workers
    gpus: Union[int, Literal["auto"]] = 0  # GPU workers: a count, or "auto" for every visible GPU
    scheduler: str | None = None           # tcp://host:port of an existing Dask cluster
    comm: Literal["auto", "shm", "dask", "nccl"] = "auto"  # allreduce implementation
    latency_ms: float = 0.0                # network emulator: added latency per message
    bandwidth_gbps: float = 0.0            # network emulator: bandwidth cap (0 = none)

    # --- optimisation
    batch_size: int = 32                   # GLOBAL batch: summed over all workers
    lr: float = 0.1                        # base learning rate, for base_batch samples
    lr_scaling: Literal["none", "linear", "sqrt"] = "none"
    base_batch: int = 32                   # batch size that lr was tuned for
    warmup: Literal["none", "gradual", "constant"] = "none"
    warmup_epochs: float = 0.0
    decay: Literal["none", "step", "cosine"] = "none"
    momentum: float = 0.9                  # heavy ball (Goyal et al.'s 0.9); async_measgd: worker delta;
                                           # async_sgd / hogwild_sgd apply plain updates and ignore it
    nesterov: bool = False
    weight_decay: float = 0.0              # L2 penalty added to the gradient

    # --- algorithm knobs
    tau: int = 1                           # EASGD: local steps between elastic exchanges
    alpha: float | None = None             # EASGD elastic coefficient; default 0.9 / workers
    trainers: int = 2                      # LTFB: number of trainers K
    round_size: int = 50                   # LTFB: local steps between tournaments
    tournament_size: int = 256             # LTFB: examples in each trainer's tournament set
    trainer_lrs: list[float] | None = None  # LTFB: one base lr per trainer
    lr_spread: float = 1.0                 # LTFB: trainer k gets lr * lr_spread**(k - (K-1)/2)
    exchange_state: bool = False           # LTFB: optimiser state travels with the weights
    chunk_layers: Union[int, Literal["auto"]] = "auto"  # CGDP: layers per update chunk
    split: Literal["equal", "speed"] = "equal"  # sync: how the global batch is shared out

    # --- how long, how often, reproducibility
    epochs: float = 5.0
    steps: int | None = None               # if set, overrides epochs
    eval_every: int | None = None          # steps between evaluations (default: once per epoch)
    seed: int = 0
    out: str | None = None                 # run directory to write

    # ---------------------------------------------------------------- validation
    def __init__(self, **data: Any):
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise _to_config_error(exc, data) from None

    def __setattr__(self, name: str, value: Any) -> None:
        try:
            super().__setattr__(name, value)
        except ValidationError as exc:
            raise _to_config_error(exc, {name: value}) from None

    @field_validator("algorithm")
    @classmethod
    def _algorithm(cls, v: str) -> str:
        if v not in ALGORITHMS:
            raise ValueError(f"one of {sorted(ALGORITHMS)}")
        return v

    @field_validator("dataset")
    @classmethod
    def _dataset(cls, v: str) -> str:
        if v not in DATASET_NAMES:
            raise ValueError(f"one of {list(DATASET_NAMES)}")
        return v

    @field_validator("model")
    @classmethod
    def _model(cls, v: str) -> str:
        if v not in MODEL_NAMES:
            raise ValueError(f"one of {list(MODEL_NAMES)}")
        return v

    @field_validator("hidden", mode="before")
    @classmethod
    def _hidden(cls, v: Any) -> Any:
        if v is None or v == "":
            return None
        if isinstance(v, str):  # "512,256" from the CLI or a widget
            v = [p for p in v.replace(" ", "").split(",") if p]
        if isinstance(v, (numbers.Integral, float)) and not isinstance(v, bool):
            v = [v]
        if not isinstance(v, (list, tuple)):
            raise ValueError("comma-separated positive integers")
        widths = [strict_int(w, "comma-separated positive integers") for w in v]
        if not widths or any(w < 1 for w in widths):
            raise ValueError("comma-separated positive integers")
        return widths

    @field_validator("trainer_lrs", mode="before")
    @classmethod
    def _trainer_lrs(cls, v: Any) -> Any:
        if isinstance(v, str):
            v = [p for p in v.replace(" ", "").split(",") if p]
        if v is None:
            return v
        if not isinstance(v, (list, tuple)):
            raise ValueError("comma-separated finite numbers > 0")
        lrs = [strict_float(x, "comma-separated finite numbers > 0") for x in v]
        if not lrs or not all(math.isfinite(x) and x > 0 for x in lrs):
            raise ValueError("comma-separated finite numbers > 0")
        return lrs

    @field_validator("cpus")
    @classmethod
    def _cpus(cls, v: int) -> int:
        if v < 0:
            raise ValueError("a whole number >= 0")
        return v

    @field_validator("gpus", mode="before")
    @classmethod
    def _gpus(cls, v: Any) -> Any:
        if isinstance(v, str) and v != "auto":
            try:
                v = int(v)
            except ValueError:
                raise ValueError('a whole number >= 0 or "auto"') from None
        if isinstance(v, (bool, float)) or (isinstance(v, int) and v < 0):
            raise ValueError('a whole number >= 0 or "auto"')
        return v

    @field_validator("scheduler")
    @classmethod
    def _scheduler(cls, v: str | None) -> str | None:
        if v is not None:
            check_scheduler_address(v)
        return v

    @field_validator("lr")
    @classmethod
    def _lr(cls, v: float) -> float:
        if not (math.isfinite(v) and v > 0):
            raise ValueError("a finite number > 0")
        return v

    @field_validator("batch_size", "base_batch", "tau", "round_size", "tournament_size", "trainers")
    @classmethod
    def _positive_int(cls, v: int) -> int:
        if v < 1:
            raise ValueError("a whole number >= 1")
        return v

    @field_validator("n_samples")
    @classmethod
    def _n_samples(cls, v: int) -> int:
        if v < 10:
            raise ValueError("a whole number >= 10")
        return v

    @field_validator("n_features")
    @classmethod
    def _n_features(cls, v: int) -> int:
        if v < 1:
            raise ValueError("a whole number >= 1")
        return v

    @field_validator("n_classes")
    @classmethod
    def _n_classes(cls, v: int) -> int:
        if v < 2:
            raise ValueError("a whole number >= 2")
        return v

    @field_validator("momentum")
    @classmethod
    def _momentum(cls, v: float) -> float:
        if not (0.0 <= v < 1.0):
            raise ValueError("a number in [0, 1)")
        return v

    @field_validator("weight_decay", "warmup_epochs", "latency_ms", "bandwidth_gbps")
    @classmethod
    def _non_negative(cls, v: float) -> float:
        if not (math.isfinite(v) and v >= 0):
            raise ValueError("a finite number >= 0")
        return v

    @field_validator("alpha")
    @classmethod
    def _alpha(cls, v: float | None) -> float | None:
        if v is not None and not (0.0 < v < 1.0):
            raise ValueError("a number in (0, 1), or unset for 0.9 / workers")
        return v

    @field_validator("lr_spread")
    @classmethod
    def _lr_spread(cls, v: float) -> float:
        if not (math.isfinite(v) and v >= 1.0):
            raise ValueError("a finite number >= 1 (1 means every trainer uses lr)")
        return v

    @field_validator("chunk_layers", mode="before")
    @classmethod
    def _chunk_layers(cls, v: Any) -> Any:
        if isinstance(v, str) and v != "auto":
            try:
                v = int(v)
            except ValueError:
                raise ValueError('a whole number >= 1 or "auto"') from None
        if isinstance(v, (bool, float)):
            raise ValueError('a whole number >= 1 or "auto"')
        if isinstance(v, int) and v < 1:
            raise ValueError('a whole number >= 1 or "auto"')
        return v

    @field_validator("epochs")
    @classmethod
    def _epochs(cls, v: float) -> float:
        if not (math.isfinite(v) and v > 0):
            raise ValueError("a finite number > 0")
        return v

    @field_validator("steps", "eval_every")
    @classmethod
    def _optional_positive(cls, v: int | None) -> int | None:
        if v is not None and v < 1:
            raise ValueError("a whole number >= 1, or unset")
        return v

    @field_validator("seed")
    @classmethod
    def _seed(cls, v: int) -> int:
        if v < 0:
            raise ValueError("a whole number >= 0")
        return v

    # Strict types: pydantic's lax mode turns true into 1 and 2.7 into 2 (or 3.0 into 3)
    # without a word; a config that says `batch_size: true` is a mistake to report.
    # Strings stay accepted: CLI flags and widgets hand values over as text.
    @field_validator(*INT_FIELDS, mode="before")
    @classmethod
    def _strict_int(cls, v: Any) -> Any:
        return strict_int(v)

    @field_validator(*FLOAT_FIELDS, mode="before")
    @classmethod
    def _strict_float(cls, v: Any) -> Any:
        return strict_float(v)

    @field_validator(*BOOL_FIELDS, mode="before")
    @classmethod
    def _strict_bool(cls, v: Any) -> Any:
        if isinstance(v, bool):
            return v
        if isinstance(v, str) and v.strip().lower() in ("true", "false"):
            return v.strip().lower() == "true"
        raise ValueError("true or false")

    @model_validator(mode="after")
    def _combinations(self) -> "RunConfig":
        workers = self.n_workers
        if self.algorithm != "sgd" and workers is not None and workers < 1:
            raise ConfigError("cpus", f"at least 1 worker in total for {self.algorithm} (cpus + gpus)", self.cpus)
        if workers is not None and self.algorithm != "sgd" and self.batch_size < workers:
            raise ConfigError("batch_size", f"at least the number of workers ({workers})", self.batch_size)
        if self.algorithm == "ltfb" and workers is not None and self.trainers > workers:
            raise ConfigError("trainers", f"at most the number of workers ({workers})", self.trainers)
        if self.algorithm == "ltfb" and workers is not None and workers % self.trainers:
            raise ConfigError("trainers", f"a divisor of the number of workers ({workers}), so every trainer "
                              "has as many workers", self.trainers)
        if self.trainer_lrs is not None and len(self.trainer_lrs) != self.trainers:
            raise ConfigError("trainer_lrs", f"one lr per trainer ({self.trainers} values)", self.trainer_lrs)
        if self.model == "cnn" and self.dataset not in ("digits", "mnist", "fashion_mnist", "cifar10"):
            raise ConfigError("model", "cnn only with an image dataset (digits, mnist, fashion_mnist, cifar10)", self.model)
        if self.warmup != "none" and self.warmup_epochs <= 0:
            raise ConfigError("warmup_epochs", f"> 0 when warmup is {self.warmup!r}", self.warmup_epochs)
        if self.steps is None and self.warmup_epochs > self.epochs:
            raise ConfigError("warmup_epochs", f"at most epochs ({self.epochs:g})", self.warmup_epochs)
        if self.comm == "nccl" and self.algorithm != "sgd" and (self.cpus > 0 or self.gpus == 0):
            raise ConfigError("comm", "nccl only when every worker is a GPU (gpus >= 1 or auto, cpus 0); "
                              "auto, shm or dask for CPU workers", self.comm)
        _check_scaled_lr(self)
        return self

    # ---------------------------------------------------------------- helpers
    @property
    def model_hidden(self) -> tuple[int, ...]:
        """`hidden`, or the model's default widths."""
        if self.hidden is not None:
            return tuple(self.hidden)
        return (16, 32) if self.model == "cnn" else (128,)

    @property
    def n_workers(self) -> int | None:
        """Workers the run asks for; None while `gpus="auto"` is unresolved."""
        if self.algorithm == "sgd":
            return 1
        if self.gpus == "auto":
            return None
        return self.cpus + self.gpus

    @property
    def is_sync(self) -> bool:
        """Whether every worker must reach every step (a lost worker fails the run)."""
        return self.algorithm in SYNC_ALGORITHMS

    def resolved_alpha(self, workers: int) -> float:
        """The elastic coefficient: `alpha`, or 0.9 / workers (the EASGD authors' default)."""
        return self.alpha if self.alpha is not None else 0.9 / workers

    def replace(self, **changes: Any) -> "RunConfig":
        """A validated copy with some fields changed (the original is untouched)."""
        return RunConfig(**{**self.to_dict(), **changes})

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of every field (JSON/YAML safe)."""
        return self.model_dump(mode="json")

    def to_yaml(self, path: str | Path | None = None) -> str:
        """YAML text of every field; also written to `path` if given."""
        text = yaml.safe_dump(self.to_dict(), sort_keys=False)
        if path is not None:
            Path(path).write_text(text)
        return text

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RunConfig":
        """Validate a dict (keys may use dashes, as CLI flags do)."""
        if not isinstance(data, dict):
            raise ConfigTypeError("config", "a RunConfig or a mapping of field names to values", data)
        return cls(**{str(k).replace("-", "_"): v for k, v in data.items()})

    @classmethod
    def from_yaml(cls, path: str | Path) -> "RunConfig":
        """Read and validate a YAML file of field names."""
        data = read_yaml(path, "config")
        return cls.from_dict({} if data is None else data)


FIELDS: tuple[str, ...] = tuple(RunConfig.model_fields)
LR_MAX = 1e38   # float32 parameters: lr * grad past ~3.4e38 is inf at the first step


def _check_scaled_lr(c: RunConfig) -> None:
    """`lr` after scaling (and LTFB's spread) must stay a float32 number: name `lr`, not
    the schedule's internal argument, when it does not."""
    factor = {"linear": c.batch_size / c.base_batch, "sqrt": math.sqrt(c.batch_size / c.base_batch)}.get(c.lr_scaling, 1.0)
    peak = c.lr
    if c.algorithm == "ltfb":
        try:
            peak = max(c.trainer_lrs) if c.trainer_lrs else c.lr * c.lr_spread ** ((c.trainers - 1) / 2)
        except OverflowError:
            peak = math.inf
        if not math.isfinite(peak) or peak > LR_MAX:
            field = "trainer_lrs" if c.trainer_lrs else "lr_spread"
            raise ConfigError(field, f"values that keep every trainer's lr under {LR_MAX:g}", getattr(c, field))
    if not math.isfinite(peak * factor) or peak * factor > LR_MAX:
        raise ConfigError("lr", f"small enough that {c.lr_scaling} scaling to batch {c.batch_size} (x{factor:g}) "
                          f"keeps it under {LR_MAX:g}", c.lr)


# Config files are small, hand-written mappings: anything else is refused before parsing.
YAML_MAX_BYTES = 1 << 20


def read_yaml(path: str | Path, field: str = "config", max_bytes: int = YAML_MAX_BYTES) -> Any:
    """Parse a small YAML file safely; every failure is one ConfigError naming `field`.

    Refused: anything but a regular file (a FIFO would block, /dev/zero never ends), more
    than `max_bytes`, text that is not UTF-8, anchors and aliases (a 1 KB alias bomb
    expands to billions of nodes), and invalid YAML.
    """
    import os
    import stat
    text_path = os.fspath(path) if isinstance(path, (str, Path)) else path
    if not isinstance(text_path, str) or "\x00" in text_path:
        raise ConfigError(field, "a path to a YAML file", text_path)
    try:
        st = os.stat(text_path)
    except OSError as exc:
        raise ConfigError(field, f"a readable YAML file ({exc.strerror or exc.__class__.__name__})", text_path) from None
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(field, "a regular YAML file (not a device, FIFO or directory)", text_path)
    if st.st_size > max_bytes:
        raise ConfigError(field, f"a YAML file of at most {max_bytes // 1024} KiB ({st.st_size:,} bytes)", text_path)
    try:
        with open(text_path, "rb") as f:
            raw = f.read(max_bytes + 1)
    except OSError as exc:
        raise ConfigError(field, f"a readable YAML file ({exc.strerror or exc.__class__.__name__})", text_path) from None
    if len(raw) > max_bytes:
        raise ConfigError(field, f"a YAML file of at most {max_bytes // 1024} KiB", text_path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(field, f"UTF-8 text (byte {exc.start} is not)", text_path) from None
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                raise ConfigError(field, "YAML without anchors or aliases (& and *)", text_path)
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(field, f"valid YAML ({exc.__class__.__name__}{where})", text_path) from None
    except RecursionError:
        raise ConfigError(field, "YAML nested less deeply", text_path) from None


def _to_config_error(exc: ValidationError, data: dict[str, Any]) -> ConfigError:
    """Turn pydantic's first error into our `<field>: <allowed>, got <value>` form."""
    err = exc.errors()[0]
    loc = [str(p) for p in err.get("loc", ()) if not isinstance(p, int)]
    if err["type"] == "extra_forbidden":
        field = loc[0] if loc else "config"
        return ConfigError(field, f"not a RunConfig field (known: {', '.join(FIELDS)})", data.get(field))
    ctx_err = err.get("ctx", {}).get("error")
    if isinstance(ctx_err, ConfigError):
        return ctx_err
    field = loc[0] if loc else "config"
    value = data.get(field, err.get("input"))
    if err["type"] == "literal_error":
        allowed = "one of " + err["ctx"]["expected"]
    else:
        allowed = _allowed(err["msg"])
    return ConfigError(field, allowed, value)
