"""One validated `RunConfig` holding every knob of a run.

YAML files, CLI flags (underscores become dashes), notebook parameters and dashboard
widgets all map onto the field names below. Validation happens here, once, before any
worker starts; every error names the field, what is allowed and the value it got:

    batch_size: at least the number of workers (2), got 1
"""
from __future__ import annotations

import math
import numbers
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from .. import usercode
from ..algorithms.registry import LR_MAX
from ..data.dataset import DATASETS, NAMED_BY_PATH, DataError, Dataset, dataset_info, is_text_path
from ..data.files import is_data_path, save_arrays

# The algorithms are declared in `workbench.algorithms.registry` (reading it imports no
# algorithm module); `ALGORITHMS` (name -> one-line summary) and `SYNC_ALGORITHMS` are read
# from there on first use (module `__getattr__` below). The datasets are `data.DATASETS`'s
# entries (sizes, image shape, downloaded or not), read without loading any data.

DATASET_NAMES = tuple(DATASETS)
IMAGE_DATASETS = tuple(name for name, info in DATASETS.items() if info.image_shape is not None)
MODEL_NAMES = ("softmax", "mlp", "cnn", "gpt")


# The simulated cluster's named profiles. Their data and sources live in
# `workbench.sim.profiles`, which checks on import that it defines exactly these names;
# they are listed here so that validating a config never imports the simulator.
SIM_GPU_DEVICES = ("k80", "p100", "v100", "a100", "h100", "h200")
SIM_CPU_DEVICES = ("core", "knl", "power8", "xeon")
SIM_DEFAULT_CPU_DEVICE = "core"   # a fixed, named profile: no wall-clock measurement enters virtual time
SIM_DEVICES = SIM_GPU_DEVICES + SIM_CPU_DEVICES
SIM_DEFAULT_DEVICE = "v100"
# costmodel.NETWORKS, then the host-device and GPU-GPU links of sim.profiles.LINKS
SIM_NETWORKS = ("shm", "10GbE", "100GbE", "InfiniBand HDR", "NVLink", "pcie3", "pcie4", "nvlink1", "nvlink2",
                "mcdram")
SIM_CHIP_CORES = {"knl": 68}   # CPU profiles a run may split into `partitions`: their cores
SIM_TIMING_MODELS = ("alexnet", "vgg16", "googlenet", "resnet50", "resnet152",
                     "gpt2-124m", "gpt2-355m", "tinyllama-1.1b", "llama-7b")   # language models: per sequence
MAX_VIRTUAL_WORKERS = 1024
JITTER_MIN = 1e-6   # the smallest nonzero jitter: smaller ones overflow the gamma's shape 1/jitter**2
SIM_FIELDS = ("device", "cpu_device", "partitions", "calibration", "network", "timing_model", "jitter",
              "fail_worker", "join_worker")   # need simulate


def match_name(field: str, value: Any, names: tuple[str, ...]) -> str:
    """The entry of `names` that `value` spells, ignoring case, spaces, dashes and
    underscores; else ConfigError naming `field` and listing `names`.

    >>> match_name("network", "infiniband-hdr", SIM_NETWORKS), match_name("timing_model", "ResNet50", SIM_TIMING_MODELS)
    ('InfiniBand HDR', 'resnet50')
    >>> match_name("device", "tpu", SIM_DEVICES)
    Traceback (most recent call last):
    ...
    workbench.config.ConfigError: device: one of k80, p100, v100, a100, h100, h200, core, knl, power8, xeon, got 'tpu'
    """
    def key(s: str) -> str:
        return re.sub(r"[\s_-]+", "", s).lower()
    if isinstance(value, str) and len(value) <= 100:
        for name in names:
            if key(name) == key(value):
                return name
    raise ConfigError(field, "one of " + ", ".join(names), value)


_FAILURE = re.compile(r"\s*([0-9]+)\s*@\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*")


def parse_failures(text: str, field: str = "fail_worker") -> dict[int, float]:
    """`fail_worker` (or `join_worker`) text, RANK@SECONDS[,RANK@SECONDS...], as {rank: virtual seconds}.

    >>> parse_failures("3@12.5, 0@40")
    {3: 12.5, 0: 40.0}
    >>> parse_failures("3@soon")
    Traceback (most recent call last):
    ...
    workbench.config.ConfigError: fail_worker: RANK@SECONDS, separated by commas (e.g. 3@12.5,7@40), got '3@soon'
    """
    allowed = "RANK@SECONDS, separated by commas (e.g. 3@12.5,7@40)"
    if not isinstance(text, str) or len(text) > 100_000:
        raise ConfigError(field, allowed, text)
    out: dict[int, float] = {}
    for part in text.split(","):
        m = _FAILURE.fullmatch(part)
        if m is None or len(m.group(1)) > 16 or not math.isfinite(float(m.group(2))):
            raise ConfigError(field, allowed, text)
        rank = int(m.group(1))
        if rank in out:
            raise ConfigError(field, f"each rank at most once (rank {rank} is listed twice)", text)
        out[rank] = float(m.group(2))
    return out


_INTERVAL = re.compile(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(s|m|h|min)\s*")
CHECKPOINT_ALLOWED = ("a whole number of steps >= 1, a wall-clock interval such as 30s, 5m or 1h (at least 1s), "
                      "or none")


def parse_interval(value: Any) -> int | float | None:
    """`checkpoint_every` as steps (an int), seconds of wall clock (a float) or None (off).

    >>> parse_interval(500), parse_interval("500"), parse_interval("90s"), parse_interval("5m"), parse_interval("none")
    (500, 500, 90.0, 300.0, None)
    >>> parse_interval("0.1s")
    Traceback (most recent call last):
    ...
    workbench.config.ConfigError: checkpoint_every: a whole number of steps >= 1, a wall-clock interval such as 30s, 5m or 1h (at least 1s), or none, got '0.1s'
    """
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none", "off")):
        return None
    if isinstance(value, str) and _INT_TEXT.fullmatch(value) and len(value.strip()) <= 16:
        value = int(value)
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        if not 1 <= int(value) <= MAX_WHOLE:
            raise ConfigError("checkpoint_every", CHECKPOINT_ALLOWED, value)
        return int(value)
    m = _INTERVAL.fullmatch(value) if isinstance(value, str) and len(value) <= 40 else None
    if m is None:
        raise ConfigError("checkpoint_every", CHECKPOINT_ALLOWED, value)
    seconds = float(m.group(1)) * {"s": 1, "m": 60, "min": 60, "h": 3600}[m.group(2)]
    if not 1 <= seconds <= 1e9:
        raise ConfigError("checkpoint_every", CHECKPOINT_ALLOWED, value)
    return seconds


def __getattr__(name: str) -> Any:
    if name == "ALGORITHMS":        # name -> one-line summary, in the registry's order
        from ..algorithms.registry import summaries
        return summaries()
    if name == "SYNC_ALGORITHMS":   # a lost worker fails these runs
        from ..algorithms.registry import sync_names
        return sync_names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _algorithm_spec(name: str) -> Any:
    """The registry's entry for `name`, None when there is none."""
    from ..algorithms.registry import specs
    return specs().get(name)


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


_ARG_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse_model_args(v: Any) -> dict[str, Any] | None:
    """`model_args` as a dict of keyword arguments: a mapping (YAML, Python), JSON text, or
    `key=value` pairs separated by commas (each value read as YAML: numbers, true/false,
    lists in brackets); None or blank for none. Values must be plain data (saved with the run).

    >>> parse_model_args("width=64, act=tanh, sizes=[3, 4]")
    {'width': 64, 'act': 'tanh', 'sizes': [3, 4]}
    >>> parse_model_args('{"width": 64}')
    {'width': 64}
    >>> parse_model_args("64")
    Traceback (most recent call last):
    ...
    ValueError: keyword arguments: a mapping, JSON {"width": 64} or width=64,act=tanh
    """
    allowed = 'keyword arguments: a mapping, JSON {"width": 64} or width=64,act=tanh'
    if v is None or (isinstance(v, str) and not v.strip()):
        return None
    if isinstance(v, str):
        text = v.strip()
        if len(text) > 10_000:
            raise ValueError(allowed)
        if text.startswith("{"):
            import json
            try:
                v = json.loads(text)
            except ValueError:
                raise ValueError(allowed) from None
        else:
            out: dict[str, Any] = {}
            for part in re.split(r",(?![^\[]*\])", text):      # commas inside [...] belong to a list
                key, eq, value = part.partition("=")
                if not eq or not _ARG_KEY.fullmatch(key.strip()):
                    raise ValueError(allowed)
                try:
                    out[key.strip()] = yaml.safe_load(value.strip()) if value.strip() else ""
                except yaml.YAMLError:
                    raise ValueError(allowed) from None
            v = out
    if not isinstance(v, dict) or not all(isinstance(k, str) and _ARG_KEY.fullmatch(k) for k in v):
        raise ValueError(allowed)
    import json
    try:
        json.dumps(v)
    except (TypeError, ValueError):
        raise ValueError(allowed + " (plain values: numbers, text, true/false, lists, mappings)") from None
    return dict(v)


# The models' default widths, in one place: RunConfig.model_hidden and maths.models read it.
DEFAULT_HIDDEN: dict[str, tuple[int, ...]] = {"mlp": (128,), "cnn": (16, 32)}
# The GPT's default shape, in one place (RunConfig's fields and maths.gpt read it): a 2-layer
# character-level decoder a 2-core laptop trains in minutes (~0.1 M parameters, 64-token context).
DEFAULT_GPT: dict[str, int] = {"n_layers": 2, "d_model": 64, "n_heads": 4, "context": 64}
_INT_TEXT = re.compile(r"\s*[+-]?[0-9]+\s*")


# The largest whole number any count, size or seed may be: a step number travels as a
# float64 in the step records (exact to 2**53), and nothing a run counts comes near it.
# A larger one (`--steps 99999999999999999999999`, a 400-digit YAML integer) is refused
# here with the field's one line, not met later as an OverflowError.
MAX_WHOLE = 10**15


class TooLarge(ValueError):
    """A whole number beyond `MAX_WHOLE` (`_to_config_error` names the field's range)."""


def strict_int(v: Any, allowed: str = "a whole number") -> Any:
    """`v` as an int when it is one (or its decimal text); never from a bool or a float,
    and never beyond +-`MAX_WHOLE` (`TooLarge`).

    >>> strict_int("12"), strict_int(None)
    (12, None)
    >>> strict_int(True)
    Traceback (most recent call last):
    ...
    ValueError: a whole number: an integer such as 32 (not true/false, not a decimal like 2.5)
    >>> strict_int("9" * 400)
    Traceback (most recent call last):
    ...
    workbench.config.TooLarge: a whole number: at most 10^15
    """
    if v is None or (isinstance(v, numbers.Integral) and not isinstance(v, bool)):
        if v is not None and abs(int(v)) > MAX_WHOLE:
            raise TooLarge(f"{allowed}: at most 10^15")
        return v if v is None else int(v)
    if isinstance(v, str) and _INT_TEXT.fullmatch(v):
        if len(v.strip().lstrip("+-").lstrip("0")) > 16 or abs(int(v)) > MAX_WHOLE:   # never int() of 10^6 digits
            raise TooLarge(f"{allowed}: at most 10^15")
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


def strict_bool(v: Any) -> bool:
    """`v` when it is a bool, or true/false text (any case); never from 1, 0 or other text."""
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip().lower() in ("true", "false"):
        return v.strip().lower() == "true"
    raise ValueError("true or false")


def _wrong_type(parse: Any) -> Any:
    """A before-validator running `parse`, its refusal raised as a `wrong_type` error (its
    own text; a field whose `Allowed` says `says_type` puts its allowed text first)."""
    def check(v: Any) -> Any:
        try:
            return parse(v)
        except TooLarge as exc:
            raise PydanticCustomError("too_large", str(exc)) from None
        except ValueError as exc:
            raise PydanticCustomError("wrong_type", str(exc)) from None
    return BeforeValidator(check)


@dataclass(frozen=True)
class Allowed:
    """A field's allowed values in words: the `<what is allowed>` of its one-line error
    when a value breaks the bounds its `Field(ge=..., lt=...)` states (or a check beside
    them). `says_type`: a value of the wrong type says this text too, "<text> (not true/false)"
    (the communication-efficient knobs' wording; the others say "a number" or "a whole number")."""

    text: str
    says_type: bool = False


# Strict parsing. Pydantic's lax mode turns true into 1 and 2.7 into 2 (or 3.0 into 3)
# without a word; a config that says `batch_size: true` is a mistake to report. Text stays
# accepted: CLI flags and widgets hand values over as strings. (Written after a field's
# Field(...) bounds so that the JSON schema states them as minimum / maximum.)
WHOLE = _wrong_type(strict_int)
NUMBER = _wrong_type(strict_float)
Flag = Annotated[bool, _wrong_type(strict_bool)]
# The ranges several fields share (each field's own are written at the field).
WholeFrom0 = Annotated[int, Field(ge=0), WHOLE, Allowed("a whole number >= 0")]
WholeFrom1 = Annotated[int, Field(ge=1), WHOLE, Allowed("a whole number >= 1")]
WholeFrom1OrUnset = Annotated[int | None, Field(ge=1), WHOLE, Allowed("a whole number >= 1, or unset")]
FinitePositive = Annotated[float, Field(gt=0, allow_inf_nan=False), NUMBER, Allowed("a finite number > 0")]
FiniteFrom0 = Annotated[float, Field(ge=0, allow_inf_nan=False), NUMBER, Allowed("a finite number >= 0")]
FractionBelow1 = Annotated[float, Field(ge=0, lt=1), NUMBER, Allowed("a number in [0, 1)")]
# pydantic's error types for a value outside a field's bounds: reported with its `Allowed`
_OUT_OF_BOUNDS = ("greater_than", "greater_than_equal", "less_than", "less_than_equal", "finite_number",
                  "outside_allowed")
JITTER_ALLOWED = f"0, or a number >= {JITTER_MIN:g} and < 1 (the coefficient of variation of compute times)"
MAX_EPOCHS = 1_000_000   # a run's length in epochs: beyond this the step count is no number a run reaches


def _no_vanishing_jitter(v: float) -> float:
    # The charge's gamma has shape 1/jitter**2: below JITTER_MIN that overflows (1e-300
    # was a ZeroDivisionError in every virtual worker), and 1e-6 already moves a
    # charge by about a part in a million.
    if 0 < v < JITTER_MIN:
        raise PydanticCustomError("outside_allowed", JITTER_ALLOWED)
    return v


def _field_allowed(field: str) -> Allowed | None:
    """The `Allowed` marker on RunConfig's `field`, None when it has none."""
    info = RunConfig.model_fields.get(field)
    return next((m for m in (info.metadata if info else ()) if isinstance(m, Allowed)), None)


# The groups the `# ---` comments in RunConfig mark; each field states its own
# (`json_schema_extra={"group": ...}`) and FIELD_GROUPS is read from the fields. The CLI's
# help and the dashboard's control panel both lay the knobs out this way (keys match the
# dashboard's).
GROUP_TITLES: dict[str, str] = {
    "what": "what to train",
    "where": "where to train",
    "simulation": "simulated cluster",
    "optimisation": "optimisation",
    "algorithm": "algorithm knobs",
    "length": "how long, how often, reproducibility",
}


SCHEDULER_SCHEMES = ("tcp", "tls")   # tls: with the user's Dask TLS settings (execution.cluster.scheduler_security)


def check_scheduler_address(address: Any) -> str:
    """Raise ConfigError("scheduler", ...) unless `address` looks like tcp://HOST:PORT (or tls://).

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
    algorithm: str = Field("sgd", json_schema_extra={"group": "what"}, description=(
        "Parallel training algorithm, one of the names `python -m workbench algorithms` lists; "
        "sgd is the single-process reference."))
    dataset: str = Field("digits", json_schema_extra={"group": "what"}, description=(
        "Training data: digits (bundled 8x8 images), mnist1d or synthetic (generated, sized by "
        "n_samples / n_features / n_classes), or mnist, fashion_mnist, cifar10 (downloaded once "
        "with download=true, then cached); for a language model (model gpt) markov_text (generated text "
        "with a known entropy) or a path/to/text.txt (its characters, the end held out); or your own arrays: a "
        "path to an .npz (X_train, y_train, X_test, y_test, or X, y), a pair features.npy,labels.npy, a folder "
        "of such .npy files or a .csv with a label column (docs/models.md); in Python also a "
        "Dataset.from_arrays(...)."))
    model: str = Field("mlp", json_schema_extra={"group": "what"}, description=(
        "Model: softmax (softmax regression), mlp (fully connected, widths from hidden) or cnn "
        "(small convolutional net; image datasets only), or your own as package.module:Name, a class or "
        "factory called with n_features, n_classes and model_args (a model of the protocol or a torch "
        "module; docs/models.md). In Python also the class, factory or instance itself."))
    model_args: dict[str, Any] | None = Field(None, json_schema_extra={"group": "what"}, description=(
        "Keyword arguments of your model's class or factory (model package.module:Name), as a YAML "
        "mapping, JSON ({\"width\": 64}) or key=value pairs separated by commas (width=64,act=tanh)."))
    hidden: list[int] | None = Field(None, json_schema_extra={"group": "what"}, description=(
        "Layer widths as comma-separated positive integers, e.g. 512,256: the MLP's hidden "
        "layers (unset: 128) or the CNN's channels per conv layer (unset: 16,32)."))
    n_samples: Annotated[int, Field(ge=10), WHOLE, Allowed("a whole number >= 10")] = Field(
        10000, json_schema_extra={"group": "what"}, description=(
        "Number of examples generated for the synthetic and mnist1d datasets (>= 10; 20% are "
        "held out for testing). Ignored by the other datasets."))
    n_features: WholeFrom1 = Field(64, json_schema_extra={"group": "what"}, description=(
        "Input width of the synthetic dataset (>= 1). Ignored by the other datasets."))
    n_classes: Annotated[int, Field(ge=2), WHOLE, Allowed("a whole number >= 2")] = Field(
        10, json_schema_extra={"group": "what"}, description=(
        "Number of classes of the synthetic dataset (>= 2). Ignored by the other datasets."))
    test_fraction: Annotated[float, Field(gt=0, lt=1), NUMBER, Allowed("a number in (0, 1)")] = Field(
        0.2, json_schema_extra={"group": "what"}, description=(
        "Share of the examples held out for testing where the data is split here: the generated sets "
        "(mnist1d, synthetic, markov_text), digits, a text file's windows (its end) and a file of yours "
        "holding only X, y (in (0, 1); 0.2). Ignored by datasets with a fixed test set."))
    # --- the GPT (model gpt, maths/gpt.py) and text datasets: one block
    n_layers: WholeFrom1 = Field(DEFAULT_GPT["n_layers"], json_schema_extra={"group": "what"}, description=(
        "gpt: transformer blocks (whole number >= 1), each causal self-attention then a GELU MLP."))
    d_model: WholeFrom1 = Field(DEFAULT_GPT["d_model"], json_schema_extra={"group": "what"}, description=(
        "gpt: width of the residual stream (whole number >= 1, a multiple of n_heads); the MLP is 4 d_model wide."))
    n_heads: WholeFrom1 = Field(DEFAULT_GPT["n_heads"], json_schema_extra={"group": "what"}, description=(
        "gpt: attention heads (whole number >= 1 dividing d_model), each of d_model / n_heads dimensions."))
    context: WholeFrom1 = Field(DEFAULT_GPT["context"], json_schema_extra={"group": "what"}, description=(
        "Text datasets (markov_text, a .txt file) and gpt: tokens per sequence (whole number >= 1); each "
        "sequence's next tokens are its labels."))
    data_dir: str | None = Field(None, json_schema_extra={"group": "what"}, description=(
        "Folder where downloaded datasets are cached; unset: $WORKBENCH_DATA if set, else "
        "~/.cache/workbench."))
    download: Flag = Field(False, json_schema_extra={"group": "what"}, description=(
        "Allow fetching MNIST, Fashion-MNIST or CIFAR-10 (about 11-163 MB, checksum verified) when "
        "they are not in the cache; without it a missing file is an error."))

    # --- where to train
    cpus: WholeFrom0 = Field(2, json_schema_extra={"group": "where"}, description=(
        "Number of CPU workers (whole number >= 0); each is one Dask worker process. cpus + gpus "
        "is the number of workers P."))
    gpus: Union[int, Literal["auto"]] = Field(0, json_schema_extra={"group": "where"}, description=(
        "Number of GPU workers (whole number >= 0), or auto for one per visible GPU; needs the "
        "gpu extra (CuPy and dask-cuda)."))
    scheduler: str | None = Field(None, json_schema_extra={"group": "where"}, description=(
        "Address tcp://HOST:PORT of an existing Dask scheduler to run on (tls://HOST:PORT with Dask's TLS "
        "settings, distributed.comm.tls.*, in your Dask config); unset: start (or reuse) a local cluster on "
        "127.0.0.1."))
    comm: Literal["auto", "shm", "dask", "nccl"] = Field("auto", json_schema_extra={"group": "where"}, description=(
        "How workers exchange arrays: shm (shared memory, one host), dask (through Dask, any "
        "hosts), nccl (GPU workers only), or auto (nccl between GPU-only workers when "
        "available, else shm on one host, else dask)."))
    latency_ms: FiniteFrom0 = Field(0.0, json_schema_extra={"group": "where"}, description=(
        "Network emulator: milliseconds of latency added to every message (>= 0; 0 = off), to "
        "see what a slow network does to each algorithm."))
    bandwidth_gbps: FiniteFrom0 = Field(0.0, json_schema_extra={"group": "where"}, description=(
        "Network emulator: bandwidth cap in gigabits per second (>= 0; 0 = no cap)."))
    elastic: Flag = Field(False, json_schema_extra={"group": "where"}, description=(
        "Synchronous family (sync_sgd and its compressed form, local_sgd, post_local_sgd, diloco): go on when a "
        "worker is lost, and take in workers that join the cluster, at the next step or round (the global batch "
        "re-split over who is there); false: a lost worker fails the run."))
    min_workers: WholeFrom1OrUnset = Field(None, json_schema_extra={"group": "where"}, description=(
        "With elastic: the run fails when fewer workers than this remain (whole number >= 1); unset: 1."))
    blas_threads: WholeFrom1 = Field(1, json_schema_extra={"group": "where"}, description=(
        "BLAS threads each worker computes with (whole number >= 1): 1, one core per worker, makes "
        "1 worker against N a fair comparison whichever way the run starts; more only when every "
        "worker has cores of its own to spare."))

    # --- simulation
    simulate: Flag = Field(False, json_schema_extra={"group": "simulation"}, description=(
        "Run on the simulated cluster: cpus and gpus become counts of virtual workers (1 to 1024 in "
        "total, mixed allowed) that run the real algorithm in this process on a virtual clock; "
        "compute and messages are charged by the device and network models, so times are "
        "virtual seconds and the run is deterministic."))
    device: str | None = Field(None, json_schema_extra={"group": "simulation"}, description=(
        "Simulation: profile of the virtual GPU workers, one of " + ", ".join(SIM_DEVICES) +
        " (k80 is one GK210 die; knl, power8 and xeon make them CPU nodes); unset: v100 when "
        "gpus >= 1."))
    cpu_device: str = Field(SIM_DEFAULT_CPU_DEVICE, json_schema_extra={"group": "simulation"}, description=(
        "Simulation: profile of the virtual CPU workers, one of " + ", ".join(SIM_CPU_DEVICES) +
        " (fixed, named profiles: core is one measured NumPy core, the default), or local: this "
        "machine's core, timed once per machine and model and cached, its numbers written into "
        "the run's summary (the only way wall clock time enters a simulation)."))
    partitions: WholeFrom1OrUnset = Field(None, json_schema_extra={"group": "simulation"}, description=(
        "Simulation: split one many-core chip (cpu_device " + ", ".join(SIM_CHIP_CORES) + ") into this many "
        "partitions, each a virtual CPU worker holding its own replica on its share of the cores, "
        "exchanging through the chip's memory (You et al. SC'17 split one KNL into 1, 4, 8 and 16); "
        "cpus must equal it. Unset: each CPU worker is a whole node."))
    calibration: str | None = Field(None, json_schema_extra={"group": "simulation"}, description=(
        "Simulation with cpu_device local: a calibration file to use instead of timing this "
        "machine (the JSON a local run caches, or that run's summary.json), so a run replays "
        "bitwise; it must be of this machine and this model. Unset: this machine's cached one."))
    network: str | None = Field(None, json_schema_extra={"group": "simulation"}, description=(
        "Simulation: network model between the virtual workers, one of " + ", ".join(SIM_NETWORKS) +
        " (case, spaces and dashes ignored); unset: shm between CPU workers of this host, else "
        "InfiniBand HDR."))
    timing_model: str | None = Field(None, json_schema_extra={"group": "simulation"}, description=(
        "Simulation: charge compute time as if the model were this published network (" +
        ", ".join(SIM_TIMING_MODELS) + ") while the maths trains the configured model; unset: the "
        "configured model's own FLOPs."))
    jitter: Annotated[float, Field(ge=0, lt=1), NUMBER,
                      AfterValidator(_no_vanishing_jitter), Allowed(JITTER_ALLOWED)] = Field(
        0.0, json_schema_extra={"group": "simulation"}, description=(
        "Simulation: seeded stragglers, the coefficient of variation of every compute charge "
        "(0, or >= 1e-06 and < 1; 0 = every step of a device costs the same)."))
    fail_worker: str | None = Field(None, json_schema_extra={"group": "simulation"}, description=(
        "Simulation: kill virtual workers at virtual times, RANK@SECONDS, separated by commas for "
        "several (e.g. 3@12.5,7@40); ranks run from 0 to cpus + gpus - 1."))
    join_worker: str | None = Field(None, json_schema_extra={"group": "simulation"}, description=(
        "Simulation with elastic: virtual workers that join late, RANK@SECONDS, separated by commas (e.g. "
        "3@10); the rank is absent until that virtual second, then joins at the next step or round. Ranks "
        "run from 1 to cpus + gpus - 1 (rank 0 starts the run)."))

    # --- optimisation
    batch_size: WholeFrom1 = Field(32, json_schema_extra={"group": "optimisation"}, description=(
        "GLOBAL minibatch size in examples, summed over all workers (whole number >= 1 and at "
        "least the number of workers); each worker computes its slice."))
    lr: FinitePositive = Field(0.1, json_schema_extra={"group": "optimisation"}, description=(
        "Base learning rate (finite, > 0), tuned for base_batch examples; lr_scaling scales it "
        "to batch_size and warmup ramps up to that scaled rate. Unset: the default of the algorithm "
        "and the optimizer, one that learns the default dataset (sgd 0.1, adamw 0.003, lamb 0.003, "
        "lars 3; diloco's inner steps 0.01, 0.001, 0.001 and 0.01)."))
    lr_scaling: Literal["none", "linear", "sqrt"] = Field(
        "none", json_schema_extra={"group": "optimisation"}, description=(
        "How the learning rate grows with the batch: none (lr as given), linear "
        "(lr * batch_size / base_batch, Goyal et al.) or sqrt (lr * sqrt(batch_size / base_batch))."))
    base_batch: WholeFrom1 = Field(32, json_schema_extra={"group": "optimisation"}, description=(
        "Batch size (whole number >= 1) that lr was tuned for; the reference of lr_scaling."))
    warmup: Literal["none", "gradual", "constant"] = Field(
        "none", json_schema_extra={"group": "optimisation"}, description=(
        "Learning-rate warmup: none, gradual (rise linearly from lr to the scaled rate over "
        "warmup_epochs) or constant (lr for warmup_epochs, then jump to the scaled rate)."))
    warmup_epochs: FiniteFrom0 = Field(0.0, json_schema_extra={"group": "optimisation"}, description=(
        "Length of the warmup in epochs (>= 0, may be fractional; > 0 when warmup is not none, "
        "at most epochs)."))
    decay: Literal["none", "step", "cosine"] = Field("none", json_schema_extra={"group": "optimisation"}, description=(
        "Learning-rate decay after warmup: none (constant), step (x0.1 at a third and two thirds "
        "of the steps after warmup) or cosine (half a cosine down to 0, reached one step after the "
        "last: the last step's lr is just above 0)."))
    momentum: FractionBelow1 = Field(0.9, json_schema_extra={"group": "optimisation"}, description=(
        "Heavy-ball momentum coefficient in [0, 1) (0.9 as in Goyal et al.; 0 = plain SGD). "
        "async_msgd keeps it on the server, async_measgd uses it as the workers' delta; "
        "async_sgd and hogwild_sgd apply plain updates and ignore it."))
    nesterov: Flag = Field(False, json_schema_extra={"group": "optimisation"}, description=(
        "Use Nesterov momentum instead of heavy ball."))
    weight_decay: FiniteFrom0 = Field(0.0, json_schema_extra={"group": "optimisation"}, description=(
        "Weight decay coefficient (>= 0; 0 = off): sgd adds weight_decay * params to the gradient "
        "(every parameter); adamw and lamb decay the weights decoupled from the gradient, lars adds it "
        "inside its layer-wise rate; those three leave biases undecayed (papers: lars 5e-4, lamb 0.01)."))
    # --- the optimiser (maths/optim.py): which update rule, and the knobs of each
    optimizer: Literal["sgd", "adamw", "lars", "lamb"] = Field(
        "sgd", json_schema_extra={"group": "optimisation"}, description=(
        "Update rule: sgd (momentum / Nesterov), adamw (Adam with decoupled weight decay), lars "
        "(layer-wise rate trust_coefficient * ||w|| / ||g||, with momentum; You et al. 2017) or lamb "
        "(Adam with the layer-wise ratio ||w|| / ||update||; You et al. 2019). hogwild_sgd and "
        "async_measgd have their own update and take sgd only."))
    beta1: FractionBelow1 = Field(0.9, json_schema_extra={"group": "optimisation"}, description=(
        "adamw, lamb: decay of the first moment (mean of gradients), in [0, 1) (papers: 0.9)."))
    beta2: FractionBelow1 = Field(0.999, json_schema_extra={"group": "optimisation"}, description=(
        "adamw, lamb: decay of the second moment (mean of squared gradients), in [0, 1) (0.999; "
        "LAMB's BERT runs also 0.999)."))
    eps: FinitePositive = Field(1e-8, json_schema_extra={"group": "optimisation"}, description=(
        "adamw, lamb: added to sqrt of the second moment; lars: added to the layer-wise rate's "
        "denominator (finite, > 0; 1e-8; LAMB's BERT runs use 1e-6)."))
    trust_coefficient: FinitePositive = Field(0.001, json_schema_extra={"group": "optimisation"}, description=(
        "lars: trust coefficient eta of the layer-wise rate eta * ||w|| / (||g|| + weight_decay * ||w||), "
        "finite and > 0 (0.001 in You et al.; the global lr is then large, e.g. 2 to 30)."))

    # --- algorithm knobs
    tau: WholeFrom1 = Field(1, json_schema_extra={"group": "algorithm"}, description=(
        "Local steps between exchanges (whole number >= 1): the EASGD family's elastic exchanges with the "
        "centre (1 = every step, as You et al.), local_sgd's and post_local_sgd's parameter averages (H in "
        "Lin et al.) and diloco's outer steps (H in Douillard et al.)."))
    alpha: Annotated[float | None, Field(gt=0, lt=1), NUMBER,
                     Allowed("a number in (0, 1), or unset for 0.9 / workers")] = Field(
        None, json_schema_extra={"group": "algorithm"}, description=(
        "EASGD family: elastic coefficient in (0, 1), how far worker and centre move toward each "
        "other at an exchange; unset: 0.9 / number of workers (the EASGD authors' default)."))
    elastic_sync: Literal["ring", "tree_host", "tree_device", "tree_device_overlap"] = Field(
        "ring", json_schema_extra={"group": "algorithm"}, description=(
        "sync_easgd: how the elastic exchange travels, SC'17's chain (You et al., Table 3): ring (the "
        "transport's allreduce, the centre on each worker's device), tree_host (a binary-tree reduction with "
        "the centre on the host: every exchange copies the vector to the host and back and the host "
        "updates the centre), tree_device (the tree, the centre kept on the devices), tree_device_overlap "
        "(also the exchange's vector overlapping the next local step). The maths is the same for all four; "
        "the simulator charges each; real transports run their own collective and overlap nothing."))
    trainers: WholeFrom1 = Field(2, json_schema_extra={"group": "algorithm"}, description=(
        "LTFB: number of trainers K (whole number >= 1, a divisor of the number of workers); "
        "each trainer spans workers / K workers."))
    round_size: WholeFrom1 = Field(50, json_schema_extra={"group": "algorithm"}, description=(
        "LTFB: local steps each trainer takes between tournaments (whole number >= 1)."))
    tournament_size: WholeFrom1 = Field(256, json_schema_extra={"group": "algorithm"}, description=(
        "LTFB: examples in each trainer's own held-out tournament set (whole number >= 1)."))
    trainer_lrs: list[float] | None = Field(None, json_schema_extra={"group": "algorithm"}, description=(
        "LTFB: one base lr per trainer as comma-separated numbers > 0 (exactly trainers values); "
        "unset: derived from lr and lr_spread."))
    lr_spread: Annotated[float, Field(ge=1, allow_inf_nan=False), NUMBER,
                         Allowed("a finite number >= 1 (1 means every trainer uses lr)")] = Field(
        1.0, json_schema_extra={"group": "algorithm"}, description=(
        "LTFB: spread of the trainers' learning rates (>= 1): trainer k gets "
        "lr * lr_spread**(k - (K-1)/2); 1 = every trainer uses lr."))
    exchange_state: Flag = Field(False, json_schema_extra={"group": "algorithm"}, description=(
        "LTFB: whether the optimiser state (momentum) travels with the weights a trainer adopts."))
    chunk_layers: Union[int, Literal["auto"]] = Field("auto", json_schema_extra={"group": "algorithm"}, description=(
        "CGDP: layers per update chunk, a whole number >= 1, or auto to choose it by timing "
        "iterations at the start of the run."))
    weight_return: Literal["chunks", "whole"] = Field("chunks", json_schema_extra={"group": "algorithm"}, description=(
        "CGDP: how fresh weights go back to the devices: chunks (each chunk's as soon as the host has "
        "updated it, while the devices finish the backward pass; the next forward pass waits only for "
        "the chunk updated last, as Le et al.; on threads, shared memory, the Dask actor and the "
        "simulator) or whole (the whole vector once every chunk is updated: the earlier implementation, "
        "kept for comparison)."))
    split: Literal["equal", "speed"] = Field("equal", json_schema_extra={"group": "algorithm"}, description=(
        "Synchronous algorithms: how each global batch is shared out: equal slices, or speed "
        "(slices sized by each worker's measured speed, for mixed CPU/GPU workers)."))
    # communication-efficient training (algorithms/local.py, maths/compress.py): one block
    post_local_epoch: Annotated[float, Field(ge=0, allow_inf_nan=False), NUMBER,
                                Allowed("a finite number >= 0", says_type=True)] = Field(
        1.0, json_schema_extra={"group": "algorithm"}, description=(
        "post_local_sgd: the epoch (>= 0, may be fractional) from which workers average their "
        "parameters every tau steps; before it they average after every step, as sync_sgd (Lin et al. "
        "switch at the first learning-rate decay)."))
    outer_lr: Annotated[float, Field(gt=0, le=LR_MAX, allow_inf_nan=False), NUMBER,
                        Allowed("a finite number > 0", says_type=True)] = Field(
        0.7, json_schema_extra={"group": "algorithm"}, description=(
        "diloco: learning rate of the outer Nesterov step on the averaged parameter change (finite, > 0; "
        "0.7 as Douillard et al.; 1 with outer_momentum 0 is plain parameter averaging)."))
    outer_momentum: Annotated[float, Field(ge=0, lt=1), NUMBER,
                              Allowed("a number >= 0 and < 1", says_type=True)] = Field(
        0.9, json_schema_extra={"group": "algorithm"}, description=(
        "diloco: Nesterov momentum of the outer step, in [0, 1) (0.9 as Douillard et al.)."))
    compression: Literal["none", "topk", "randomk", "sign", "qsgd", "powersgd"] = Field(
        "none", json_schema_extra={"group": "algorithm"}, description=(
        "sync_sgd: how each worker compresses its gradient before the exchange: none, topk (the "
        "compression_ratio largest entries, with Deep Gradient Compression's momentum correction), randomk "
        "(compression_ratio of the entries, the same random ones on every worker), sign (scaled signs, "
        "one bit each), qsgd (stochastic quantisation to compression_levels levels) or powersgd (rank "
        "compression_rank approximation of each layer's matrix)."))
    compression_ratio: Annotated[float, Field(gt=0, le=1), NUMBER,
                                 Allowed("a number > 0 and <= 1", says_type=True)] = Field(
        0.01, json_schema_extra={"group": "algorithm"}, description=(
        "sync_sgd with compression topk or randomk: share of the gradient's entries each worker sends, "
        "in (0, 1] (0.01 = 1%; 1 sends everything, exact sync_sgd)."))
    compression_rank: WholeFrom1 = Field(4, json_schema_extra={"group": "algorithm"}, description=(
        "sync_sgd with compression powersgd: rank of each layer's approximation (whole number >= 1; at "
        "the layer's smaller dimension or above the approximation is exact)."))
    compression_levels: WholeFrom1 = Field(16, json_schema_extra={"group": "algorithm"}, description=(
        "sync_sgd with compression qsgd: quantisation levels s per sign (whole number >= 1; QSGD's "
        "s; 1 keeps only signs and the norm)."))
    topology: Literal["ring", "torus", "exponential", "complete"] = Field(
        "ring", json_schema_extra={"group": "algorithm"}, description=(
        "dpsgd and adpsgd: the graph workers gossip over: ring (two neighbours), torus (four, on the most square "
        "grid), exponential (ranks 2^k apart, about 2 log2 P) or complete (everyone: synchronous "
        "averaging)."))
    error_feedback: Flag = Field(True, json_schema_extra={"group": "algorithm"}, description=(
        "sync_sgd with compression: keep what compression dropped in a per-worker memory and add it "
        "to the next gradient (error feedback), or drop it for good (false)."))

    @model_validator(mode="after")
    def _commeff_combinations(self) -> RunConfig:
        if self.compression != "none" and self.algorithm != "sync_sgd":
            raise ConfigError("compression", f"none unless algorithm is sync_sgd (the knob compresses its gradient "
                              f"allreduce; {self.algorithm} has none)", self.compression)
        if self.weight_return != "chunks" and self.algorithm != "cgdp":
            raise ConfigError("weight_return", f"chunks unless algorithm is cgdp (the knob is how cgdp's host "
                              f"master returns weights; {self.algorithm} has none)", self.weight_return)
        if self.elastic_sync != "ring" and self.algorithm != "sync_easgd":
            raise ConfigError("elastic_sync", f"ring unless algorithm is sync_easgd (the knob is SC'17's chain of "
                              f"Sync EASGD; {self.algorithm} has no elastic allreduce)", self.elastic_sync)
        if self.compression == "topk" and self.error_feedback and self.momentum > 0 and self.nesterov \
                and self.optimizer == "sgd":
            raise ConfigError("nesterov", "false with compression topk and error feedback (Deep Gradient "
                              "Compression's momentum correction is heavy ball)", self.nesterov)
        return self

    # --- how long, how often, reproducibility
    epochs: Annotated[float, Field(gt=0, le=MAX_EPOCHS, allow_inf_nan=False), NUMBER,
                      Allowed(f"a finite number > 0 and at most {MAX_EPOCHS:,.0f}")] = Field(
        5.0, json_schema_extra={"group": "length"}, description=(
        "Length of training in passes over the training set (finite, > 0; may be fractional)."))
    steps: WholeFrom1OrUnset = Field(None, json_schema_extra={"group": "length"}, description=(
        "Length of training in global optimiser steps (whole number >= 1); if set, overrides "
        "epochs."))
    eval_every: WholeFrom1OrUnset = Field(None, json_schema_extra={"group": "length"}, description=(
        "Global steps between evaluations on the test set (whole number >= 1); unset: once per "
        "epoch."))
    seed: WholeFrom0 = Field(0, json_schema_extra={"group": "length"}, description=(
        "Random seed (whole number >= 0) for initial weights and the minibatch order; the same "
        "seed gives the same data order whatever the number of workers."))
    out: str | None = Field(None, json_schema_extra={"group": "length"}, description=(
        "Run directory to write (summary.json, steps.csv, evals.csv, config.yaml, report.html); "
        "unset: not saved (the CLI picks runs/<algorithm>-<dataset>-<time>)."))
    checkpoint_every: Union[int, str, None] = Field("60s", json_schema_extra={"group": "length"}, description=(
        "With a run directory (out): write a checkpoint (parameters, optimiser and algorithm state, data position, "
        "generator states, records) every this many steps (e.g. 500), or every this much wall-clock time (30s, "
        "5m, 1h), and when the run stops; none: never. `run --resume DIR` continues from the last one."))
    checkpoint_keep: WholeFrom1 = Field(2, json_schema_extra={"group": "length"}, description=(
        "Checkpoints kept in the run directory (whole number >= 1: the newest; older ones are removed)."))
    out_private: Flag = Field(True, json_schema_extra={"group": "length"}, description=(
        "Make the run directory and its files private to you (folder mode 0700, files 0600) whatever "
        "the umask; false: as the umask allows (e.g. to share runs with a group)."))

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

    def __getstate__(self) -> dict[Any, Any]:
        # A model given in Python travels with the config wherever it is pickled (the
        # dashboard's simulation process): its code by value unless installed (`usercode`).
        state = super().__getstate__()
        shipped = usercode.shipment(self.model)
        return state if shipped is None else {**state, "_workbench_model": shipped}

    def __setstate__(self, state: dict[Any, Any]) -> None:
        usercode.receive(state.pop("_workbench_model", None))
        super().__setstate__(state)

    @field_validator("algorithm")
    @classmethod
    def _algorithm(cls, v: str) -> str:
        if _algorithm_spec(v) is None:
            from ..algorithms.registry import specs
            raise ValueError(f"one of {sorted(specs())}")
        return v

    @field_validator("dataset", mode="before")
    @classmethod
    def _dataset(cls, v: Any) -> str:
        if isinstance(v, Dataset):     # arrays given in Python: saved once by their hash, named by the folder
            return save_arrays(v)
        if isinstance(v, os.PathLike):
            v = os.fspath(v)
        if isinstance(v, str) and v in DATASET_NAMES:
            return v
        if is_text_path(v) or is_data_path(v):   # a file: kept as an absolute path, so every worker reads the same
            parts = [str(Path(p.strip()).expanduser().absolute()) for p in v.split(",")] if is_data_path(v) \
                else [str(Path(v.strip()).expanduser().absolute())]
            return ",".join(parts)
        raise ValueError(f"one of {list(DATASET_NAMES)}, or {NAMED_BY_PATH} (or a Dataset in Python)")

    @field_validator("model", mode="before")
    @classmethod
    def _model(cls, v: Any) -> str:
        if isinstance(v, str):
            if v in MODEL_NAMES or usercode.is_spec(v):
                return v
            raise ValueError(f"one of {list(MODEL_NAMES)}, or package.module:Name of your own")
        if v is None or isinstance(v, (bool, numbers.Number, list, dict, tuple)):
            raise ValueError(f"one of {list(MODEL_NAMES)}, package.module:Name, or a model class, factory "
                             "or instance")
        try:
            return usercode.spec_of(v)    # a class, a factory or an instance: kept in this process
        except usercode.UserCodeError as exc:
            raise ValueError(exc.allowed) from None

    @field_validator("model_args", mode="before")
    @classmethod
    def _model_args(cls, v: Any) -> Any:
        return parse_model_args(v)

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

    @field_validator("gpus", mode="before")
    @classmethod
    def _gpus(cls, v: Any) -> Any:
        if isinstance(v, str) and v != "auto":
            try:
                v = strict_int(v)
            except TooLarge:
                raise ValueError('a whole number >= 0 (at most 10^15) or "auto"') from None
            except ValueError:
                raise ValueError('a whole number >= 0 or "auto"') from None
        if isinstance(v, (bool, float)) or (isinstance(v, int) and v < 0):
            raise ValueError('a whole number >= 0 or "auto"')
        if isinstance(v, int) and v > MAX_WHOLE:
            raise ValueError('a whole number >= 0 (at most 10^15) or "auto"')
        return v

    @field_validator("scheduler")
    @classmethod
    def _scheduler(cls, v: str | None) -> str | None:
        if v is not None:
            check_scheduler_address(v)
        return v

    @field_validator("device", mode="before")
    @classmethod
    def _device(cls, v: Any) -> str | None:
        return None if v is None else match_name("device", v, SIM_DEVICES)

    @field_validator("cpu_device", mode="before")
    @classmethod
    def _cpu_device(cls, v: Any) -> str:
        allowed = (*SIM_CPU_DEVICES, "local")
        if isinstance(v, str) and v.strip().lower() in SIM_GPU_DEVICES:
            raise ConfigError("cpu_device", "a CPU profile, one of " + ", ".join(allowed) + f" ({v} is a GPU "
                              "profile: ask for GPU workers with gpus and device)", v)
        return match_name("cpu_device", v, allowed)

    @field_validator("network", mode="before")
    @classmethod
    def _network(cls, v: Any) -> str | None:
        return None if v is None else match_name("network", v, SIM_NETWORKS)

    @field_validator("timing_model", mode="before")
    @classmethod
    def _timing_model(cls, v: Any) -> str | None:
        return None if v is None else match_name("timing_model", v, SIM_TIMING_MODELS)

    @field_validator("fail_worker", mode="before")
    @classmethod
    def _fail_worker(cls, v: Any) -> Any:
        if v is None or (isinstance(v, str) and not v.strip()):
            return None
        # one spelling, exact: repr round-trips a float
        return ",".join(f"{rank}@{repr(t).removesuffix('.0')}" for rank, t in parse_failures(v).items())

    @field_validator("join_worker", mode="before")
    @classmethod
    def _join_worker(cls, v: Any) -> Any:
        if v is None or (isinstance(v, str) and not v.strip()):
            return None
        return ",".join(f"{rank}@{repr(t).removesuffix('.0')}" for rank, t in parse_failures(v, "join_worker").items())

    @field_validator("checkpoint_every", mode="before")
    @classmethod
    def _checkpoint_every(cls, v: Any) -> Any:
        every = parse_interval(v)
        if every is None or isinstance(every, int):
            return every
        return f"{every:g}s"   # one spelling: seconds

    @field_validator("chunk_layers", mode="before")
    @classmethod
    def _chunk_layers(cls, v: Any) -> Any:
        if isinstance(v, str) and v != "auto":
            try:
                v = strict_int(v)
            except TooLarge:
                raise ValueError('a whole number >= 1 (at most 10^15) or "auto"') from None
            except ValueError:
                raise ValueError('a whole number >= 1 or "auto"') from None
        if isinstance(v, (bool, float)):
            raise ValueError('a whole number >= 1 or "auto"')
        if isinstance(v, int) and v < 1:
            raise ValueError('a whole number >= 1 or "auto"')
        if isinstance(v, int) and v > MAX_WHOLE:
            raise ValueError('a whole number >= 1 (at most 10^15) or "auto"')
        return v

    @model_validator(mode="before")
    @classmethod
    def _simulated_gpus_alone(cls, data: Any) -> Any:
        # In a simulation `gpus=N` alone means N GPU workers: the CPU workers' default (2,
        # this machine's cores in a real run) would add two compute workers nobody asked for.
        if isinstance(data, dict) and "cpus" not in data and str(data.get("simulate")).lower() == "true" \
                and str(data.get("gpus", 0)).strip() not in ("0", "auto", "None", ""):
            data = {**data, "cpus": 0}
        return data

    @model_validator(mode="after")
    def _combinations(self) -> RunConfig:
        if "lr" not in self.model_fields_set:   # unset: the algorithm's and the rule's own (stays unset)
            self.__dict__["lr"] = default_lr(self.algorithm, self.optimizer)
        _check_simulation(self)   # first: the virtual cluster's size frames the checks below
        workers = self.n_workers
        spec = _algorithm_spec(self.algorithm)
        fixed = spec.workers is not None   # its worker count is its own (sgd: 1)
        if not fixed and workers is not None and workers < 1:
            raise ConfigError("cpus", f"at least 1 worker in total for {self.algorithm} (cpus + gpus)", self.cpus)
        if workers is not None and not fixed and self.batch_size < workers:
            raise ConfigError("batch_size", f"at least the number of workers ({workers})", self.batch_size)
        broken = spec.check(self)    # the algorithm's own rules for its knobs (LTFB: its trainers)
        if broken is not None:
            raise ConfigError(*broken)
        if self.trainer_lrs is not None and len(self.trainer_lrs) != self.trainers:
            raise ConfigError("trainer_lrs", f"one lr per trainer ({self.trainers} values)", self.trainer_lrs)
        builtin = self.model in MODEL_NAMES
        if self.hidden is not None and not builtin:
            raise ConfigError("hidden", "unset with a model of your own (its sizes go in model_args)", self.hidden)
        if self.model_args is not None and builtin:
            raise ConfigError("model_args", f"unset with the built-in {self.model} (its sizes are hidden), or a "
                              "model package.module:Name", self.model_args)
        if self.model == "cnn" and self.data_shape.image_shape is None:
            raise ConfigError("model", f"cnn only with an image dataset ({', '.join(IMAGE_DATASETS)})", self.model)
        _check_language_model(self)
        if self.warmup != "none" and self.warmup_epochs <= 0:
            raise ConfigError("warmup_epochs", f"> 0 when warmup is {self.warmup!r}", self.warmup_epochs)
        if self.steps is None and self.warmup_epochs > self.epochs:
            raise ConfigError("warmup_epochs", f"at most epochs ({self.epochs:g})", self.warmup_epochs)
        if self.comm == "nccl" and not fixed and (self.cpus > 0 or self.gpus == 0):
            raise ConfigError("comm", "nccl only when every worker is a GPU (gpus >= 1 or auto, cpus 0); "
                              "auto, shm or dask for CPU workers", self.comm)
        _check_optimizer(self)
        _check_scaled_lr(self, spec.peak_lr(self))
        _check_elastic(self, spec)
        return self

    # ---------------------------------------------------------------- helpers
    @property
    def data_shape(self) -> Any:
        """The dataset's `data.Shape` (sizes, width, classes, image shape) from its entry, or a
        file's (a text's, or a data file's from its arrays' headers and labels): the features
        are not loaded."""
        try:
            return dataset_info(self.dataset).shape(self.n_samples, self.n_features, self.n_classes,
                                                    self.test_fraction, context=self.context)
        except DataError as exc:     # what the file holds, in the words the loader uses (its field first)
            err = ConfigError("dataset", "", self.dataset)
            err.field, err.args = str(exc).partition(":")[0], (str(exc),)
            raise err from None

    @property
    def model_hidden(self) -> tuple[int, ...]:
        """`hidden`, or the model's default widths."""
        if self.hidden is not None:
            return tuple(self.hidden)
        return DEFAULT_HIDDEN.get(self.model, DEFAULT_HIDDEN["mlp"])

    @property
    def n_workers(self) -> int | None:
        """Workers the run asks for; None while `gpus="auto"` is unresolved."""
        fixed = _algorithm_spec(self.algorithm).workers
        if fixed is not None:
            return fixed
        if self.gpus == "auto":
            return None
        return self.cpus + self.gpus

    @property
    def is_sync(self) -> bool:
        """Whether every worker must reach every step (a lost worker fails the run)."""
        return _algorithm_spec(self.algorithm).sync

    @property
    def resolved_device(self) -> str | None:
        """The virtual GPU workers' profile: `device`, or v100 when simulating GPU workers."""
        if self.device is not None or not self.simulate or not self.gpus:
            return self.device
        return SIM_DEFAULT_DEVICE

    @property
    def failures(self) -> dict[int, float]:
        """`fail_worker` as {rank: virtual seconds at which that worker dies}; {} when unset."""
        return {} if self.fail_worker is None else parse_failures(self.fail_worker)

    @property
    def joins(self) -> dict[int, float]:
        """`join_worker` as {rank: virtual seconds at which that worker joins}; {} when unset."""
        return {} if self.join_worker is None else parse_failures(self.join_worker, "join_worker")

    @property
    def checkpoint_interval(self) -> int | float | None:
        """`checkpoint_every` as steps (int), wall-clock seconds (float) or None (off)."""
        return parse_interval(self.checkpoint_every)

    def resolved_alpha(self, workers: int) -> float:
        """The elastic coefficient: `alpha`, or 0.9 / workers (the EASGD authors' default)."""
        return self.alpha if self.alpha is not None else 0.9 / workers

    def replace(self, **changes: Any) -> RunConfig:
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
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        """Validate a dict (keys may use dashes, as CLI flags do)."""
        if not isinstance(data, dict):
            raise ConfigTypeError("config", "a RunConfig or a mapping of field names to values", data)
        return cls(**{str(k).replace("-", "_"): v for k, v in data.items()})

    @classmethod
    def from_yaml(cls, path: str | Path) -> RunConfig:
        """Read and validate a YAML file of field names."""
        data = read_yaml(path, "config")
        return cls.from_dict({} if data is None else data)


FIELDS: tuple[str, ...] = tuple(RunConfig.model_fields)


def _check_scaled_lr(c: RunConfig, peak: float) -> None:
    """`lr` after scaling must stay a float32 number: name `lr`, not the schedule's internal
    argument, when it does not. `peak`: the largest base lr (`AlgorithmSpec.peak_lr`)."""
    factor = {"linear": c.batch_size / c.base_batch, "sqrt": math.sqrt(c.batch_size / c.base_batch)}.get(c.lr_scaling, 1.0)
    if not math.isfinite(peak * factor) or peak * factor > LR_MAX:
        raise ConfigError("lr", f"small enough that {c.lr_scaling} scaling to batch {c.batch_size} (x{factor:g}) "
                          f"keeps it under {LR_MAX:g}", c.lr)


# Which optimiser knobs apply to which rule (`momentum` and `nesterov`: sgd's; lars has
# momentum too). A knob that does not apply is refused when it differs from its default,
# as the simulation knobs are without simulate: a value that would be silently ignored
# is a mistake to report, not to warn about.
OPTIMIZER_KNOBS: dict[str, tuple[str, ...]] = {
    "momentum": ("sgd", "lars"), "nesterov": ("sgd",), "beta1": ("adamw", "lamb"), "beta2": ("adamw", "lamb"),
    "eps": ("adamw", "lars", "lamb"), "trust_coefficient": ("lars",),
}

# Each update rule's base lr for base_batch 32: (lowest, default, highest) of the rates that
# learn the default dataset (digits; MLP 128 for 5 epochs and MLP 512-256 for 40, every
# algorithm that takes the rule, 2 workers, 2026-12-05): lamb at 0.03 ended at chance (0.10),
# lars at 1 reached only 0.78-0.81 in the EASGD family's 5 epochs (0.89-0.97 at 3). An
# algorithm may declare its own (`AlgorithmSpec.lr_defaults`: diloco).
OPTIMIZER_LR: dict[str, tuple[float, float, float]] = {
    "sgd": (0.03, 0.1, 0.3), "adamw": (0.001, 0.003, 0.01), "lamb": (0.001, 0.003, 0.01), "lars": (1.0, 3.0, 10.0),
}


def lr_range(algorithm: str, optimizer: str) -> tuple[float, float, float]:
    """(lowest, default, highest) base lr that learns the default dataset with `algorithm`
    and the update rule `optimizer`.

    >>> lr_range("sync_sgd", "lamb"), lr_range("diloco", "sgd")
    ((0.001, 0.003, 0.01), (0.003, 0.01, 0.01))
    """
    spec = _algorithm_spec(algorithm)
    own = getattr(spec, "lr_defaults", None) or {}
    return own.get(optimizer) or OPTIMIZER_LR.get(optimizer) or OPTIMIZER_LR["sgd"]


def default_lr(algorithm: str, optimizer: str) -> float:
    """The base lr a config gets when it sets none (`lr_range`'s middle value).

    >>> default_lr("sync_sgd", "sgd"), default_lr("sync_sgd", "adamw"), default_lr("diloco", "sgd")
    (0.1, 0.003, 0.01)
    """
    return lr_range(algorithm, optimizer)[1]


def _check_optimizer(c: RunConfig) -> None:
    """The optimiser's knobs: only those of the chosen rule, Nesterov only with momentum,
    a rule other than sgd only for algorithms that use the shared rule."""
    for name, rules in OPTIMIZER_KNOBS.items():
        default = type(c).model_fields[name].default
        if c.optimizer not in rules and getattr(c, name) != default:
            raise ConfigError(name, f"only with optimizer {' or '.join(rules)} (optimizer is {c.optimizer}; "
                              f"leave it at {default})", getattr(c, name))
    if c.nesterov and c.momentum == 0:
        raise ConfigError("nesterov", "false when momentum is 0 (Nesterov momentum needs momentum > 0)", c.nesterov)
    if c.optimizer != "sgd":
        spec = _algorithm_spec(c.algorithm)
        if spec is not None and not getattr(spec, "takes_optimizer", True):
            raise ConfigError("optimizer", f"sgd for {c.algorithm} (its update is its own; adamw, lars and "
                              "lamb apply to the other algorithms)", c.optimizer)


GPT_KNOBS = ("n_layers", "d_model", "n_heads")   # the GPT's own; `context` also sizes text datasets


def is_text_dataset(dataset: str) -> bool:
    """Whether a dataset's rows are token sequences (a language model's data): markov_text,
    or a .txt file.

    >>> is_text_dataset("markov_text"), is_text_dataset("books/emma.txt"), is_text_dataset("digits")
    (True, True, False)
    """
    info = DATASETS.get(dataset)
    return bool(info is not None and info.tokens) or is_text_path(dataset)


def _check_language_model(c: RunConfig) -> None:
    """gpt trains on text and text trains gpt (or a model of the user's); the GPT's knobs and
    `context` only where they apply (a value that would be ignored is a mistake to report)."""
    text = is_text_dataset(c.dataset)
    if c.model == "gpt" and not text:
        raise ConfigError("model", "gpt only with a text dataset (markov_text, or a path/to/text.txt)", c.model)
    if text and c.model in ("softmax", "mlp", "cnn"):
        raise ConfigError("model", f"gpt (or a model of your own) for the text dataset {c.dataset} (its labels are "
                          "the next token at every position)", c.model)
    if c.model != "gpt":
        for name in GPT_KNOBS:
            default = type(c).model_fields[name].default
            if getattr(c, name) != default:
                raise ConfigError(name, f"only with model gpt (leave it at {default})", getattr(c, name))
    if not text and c.context != type(c).model_fields["context"].default:
        raise ConfigError("context", f"only with a text dataset (leave it at {DEFAULT_GPT['context']})", c.context)
    if c.model == "gpt" and c.d_model % c.n_heads:
        raise ConfigError("n_heads", f"a divisor of d_model ({c.d_model}), so every head gets d_model / n_heads "
                          "dimensions", c.n_heads)


# The algorithms whose runs go on when a worker is lost and take in joiners with
# `elastic` (their loops re-split the global batch over whoever is there, `algorithms.elastic`).
ELASTIC_ALGORITHMS = ("sync_sgd", "local_sgd", "post_local_sgd", "diloco")


def _check_elastic(c: RunConfig, spec: Any) -> None:
    """`elastic` only for the algorithms that can change their membership; `min_workers`
    only with it, and at most the workers asked for."""
    if c.elastic and c.algorithm not in ELASTIC_ALGORITHMS:
        raise ConfigError("elastic", f"false for {c.algorithm} (elastic membership: {', '.join(ELASTIC_ALGORITHMS)}; "
                          "the asynchronous algorithms go on without a lost worker anyway)", c.elastic)
    if c.min_workers is not None:
        if not c.elastic:
            raise ConfigError("min_workers", "unset unless elastic (without it a lost worker fails the run)",
                              c.min_workers)
        workers = c.n_workers
        if workers is not None and c.min_workers > workers:
            raise ConfigError("min_workers", f"at most the number of workers ({workers})", c.min_workers)


def _check_simulation(c: RunConfig) -> None:
    """The simulation fields: only with simulate, and within the virtual cluster."""
    if not c.simulate:
        defaults = {"cpu_device": (SIM_DEFAULT_CPU_DEVICE, "local"), "jitter": (0.0,)}   # local: a real run's
        for name in SIM_FIELDS:
            if getattr(c, name) not in defaults.get(name, (None,)):
                raise ConfigError(name, "only with simulate (a knob of the simulated cluster; add --simulate)",
                                  getattr(c, name))
        return
    if c.gpus == "auto":
        raise ConfigError("gpus", "a whole number >= 0 with simulate (virtual GPUs are counted, not detected)",
                          c.gpus)
    total = c.cpus + c.gpus
    if c.device is not None and c.gpus == 0:
        raise ConfigError("device", "the GPU workers' profile, only with gpus >= 1 (CPU workers take "
                          "cpu_device)", c.device)
    if c.calibration is not None and c.cpu_device != "local":
        raise ConfigError("calibration", "a calibration file only with cpu_device local (the named profiles "
                          "are fixed)", c.calibration)
    if c.partitions is not None:
        _check_partitions(c)
    if not 1 <= total <= MAX_VIRTUAL_WORKERS:
        field = "gpus" if c.gpus > c.cpus else "cpus"
        raise ConfigError(field, f"at least 1 and at most {MAX_VIRTUAL_WORKERS} virtual workers with simulate "
                          f"(cpus + gpus = {c.cpus} + {c.gpus})", getattr(c, field))
    ghosts = sorted(r for r in c.failures if r >= total)
    if ghosts:
        raise ConfigError("fail_worker", f"ranks of existing workers, 0 to {total - 1} (cpus + gpus = {total}); "
                          f"rank {ghosts[0]} does not exist", c.fail_worker)
    if c.join_worker is not None:
        if not c.elastic:
            raise ConfigError("join_worker", "only with elastic (a worker joins an elastic run; add --elastic)",
                              c.join_worker)
        odd = sorted(r for r in c.joins if not 1 <= r < total)
        if odd:
            raise ConfigError("join_worker", f"ranks 1 to {total - 1} (cpus + gpus = {total}; rank 0 starts the "
                              f"run); rank {odd[0]} cannot join", c.join_worker)


def _check_partitions(c: RunConfig) -> None:
    """`partitions` splits one chip of a CPU profile with cores: one virtual CPU worker per
    partition, no GPUs, the chip's own memory between them."""
    chips = ", ".join(SIM_CHIP_CORES)
    if c.cpu_device not in SIM_CHIP_CORES:
        raise ConfigError("partitions", f"only with cpu_device {chips} (a chip with cores to split; "
                          f"cpu_device is {c.cpu_device})", c.partitions)
    cores = SIM_CHIP_CORES[c.cpu_device]
    if c.partitions > cores:
        raise ConfigError("partitions", f"1 to {cores} (the cores of one {c.cpu_device} chip)", c.partitions)
    if c.gpus:
        raise ConfigError("gpus", "0 with partitions (the partitions of one CPU chip are the workers)", c.gpus)
    if c.cpus != c.partitions:
        raise ConfigError("cpus", f"the number of partitions with partitions (one chip: a virtual worker per "
                          f"partition; partitions is {c.partitions})", c.cpus)
    if c.network not in (None, "mcdram"):
        raise ConfigError("network", "mcdram or unset with partitions (the partitions of one chip exchange "
                          "through its memory)", c.network)


# Config files are small, hand-written mappings: anything else is refused before parsing.
YAML_MAX_BYTES = 1 << 20
YAML_MAX_DEPTH = 32   # a config is two levels deep (a mapping of lists); composing 10^5 levels took minutes
_OPENERS = re.compile(r"[\[{](?:\s*[\[{]){" + str(YAML_MAX_DEPTH) + "}")   # more brackets opened in a row than that


class _DuplicateKey(Exception):
    def __init__(self, key: Any, line: int):
        self.key, self.line = key, line


def _unique_key_loader() -> Any:
    """A yaml.SafeLoader that refuses a mapping giving one key twice (PyYAML keeps the
    last silently: `lr: 0.1` then `lr: 10` would run with 10)."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                try:
                    if key in seen:
                        raise _DuplicateKey(key, key_node.start_mark.line + 1)
                    seen.add(key)
                except TypeError:   # an unhashable key: construct_mapping itself says so
                    pass
            return super().construct_mapping(node, deep=deep)
    return UniqueKeyLoader


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
    deep = f"YAML nested at most {YAML_MAX_DEPTH} levels deep"
    if _OPENERS.search(text):   # `[[[[...`: refused before PyYAML's scanner looks ahead through it
        raise ConfigError(field, deep, text_path)
    try:
        depth = 0
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                raise ConfigError(field, "YAML without anchors or aliases (& and *)", text_path)
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > YAML_MAX_DEPTH:   # refused as the parser meets it, before the composer recurses
                    raise ConfigError(field, deep, text_path)
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
        return yaml.load(text, Loader=_unique_key_loader())   # noqa: S506 - a SafeLoader subclass
    except _DuplicateKey as dup:
        raise ConfigError(field, f"YAML with each key once ({dup.key!r} is given twice, line {dup.line})",
                          text_path) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(field, f"valid YAML ({exc.__class__.__name__}{where})", text_path) from None
    except RecursionError:
        raise ConfigError(field, "YAML nested less deeply", text_path) from None

def _groups_of_fields() -> dict[str, tuple[str, ...]]:
    """{group: its fields in declaration order}, read from each field's `json_schema_extra`."""
    groups: dict[str, list[str]] = {g: [] for g in GROUP_TITLES}
    for name, info in RunConfig.model_fields.items():
        group = (info.json_schema_extra or {}).get("group") if isinstance(info.json_schema_extra, dict) else None
        if group not in groups:
            raise RuntimeError(f"RunConfig.{name}: json_schema_extra must name its group, one of "
                               f"{', '.join(GROUP_TITLES)} (got {group!r})")
        groups[group].append(name)
    return {g: tuple(names) for g, names in groups.items()}


FIELD_GROUPS: dict[str, tuple[str, ...]] = _groups_of_fields()


def field_group(name: str) -> str:
    """The group key (a key of `GROUP_TITLES`) of a RunConfig field.

    >>> field_group("tau"), GROUP_TITLES[field_group("lr")]
    ('algorithm', 'optimisation')
    """
    for group, names in FIELD_GROUPS.items():
        if name in names:
            return group
    raise ConfigError("field", f"a RunConfig field (known: {', '.join(FIELDS)})", name)


def field_help(name: str) -> str:
    """The description of a RunConfig field: what it means, its unit and allowed values.

    >>> field_help("batch_size").split(" (")[0]
    'GLOBAL minibatch size in examples, summed over all workers'
    """
    if name not in RunConfig.model_fields:
        raise ConfigError("field", f"a RunConfig field (known: {', '.join(FIELDS)})", name)
    return RunConfig.model_fields[name].description or ""


def config_schema() -> dict[str, Any]:
    """RunConfig's JSON schema, each property also carrying its `group` (a GROUP_TITLES key).

    The descriptions are the fields' own, so the schema, `--help` and the dashboard's
    tooltips say the same thing.
    """
    schema = RunConfig.model_json_schema()   # each property carries its group (json_schema_extra)
    schema["groups"] = {g: {"title": GROUP_TITLES[g], "fields": list(names)} for g, names in FIELD_GROUPS.items()}
    return schema


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
    marker = _field_allowed(field)
    if err["type"] == "literal_error":
        allowed = "one of " + err["ctx"]["expected"]
    elif marker is not None and err["type"] in _OUT_OF_BOUNDS:
        allowed = marker.text
    elif err["type"] == "too_large":
        allowed = f"{marker.text if marker is not None else 'a whole number'} (at most 10^15)"
    elif marker is not None and marker.says_type and err["type"] == "wrong_type":
        allowed = f"{marker.text} (not true/false)"
    else:
        allowed = _allowed(err["msg"])
    return ConfigError(field, allowed, value)
