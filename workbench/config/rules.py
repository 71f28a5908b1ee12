"""Rules across fields: the optimiser's knobs and learning rates, the language model's
data and shape, elastic membership; each algorithm's own rules are on its declaration
(`config.registry.AlgorithmSpec`)."""
from __future__ import annotations

import math
from typing import Any

from ..data.dataset import DATASETS, is_text_path
from .registry import LR_MAX, with_knob
from .values import DEFAULT_GPT, ConfigError


def algorithm_spec(name: str) -> Any:
    """The registry's entry for `name`, None when there is none."""
    from .registry import specs
    return specs().get(name)




def check_scaled_lr(c: Any, peak: float) -> None:
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
    spec = algorithm_spec(algorithm)
    own = getattr(spec, "lr_defaults", None) or {}
    return own.get(optimizer) or OPTIMIZER_LR.get(optimizer) or OPTIMIZER_LR["sgd"]


def default_lr(algorithm: str, optimizer: str) -> float:
    """The base lr a config gets when it sets none (`lr_range`'s middle value).

    >>> default_lr("sync_sgd", "sgd"), default_lr("sync_sgd", "adamw"), default_lr("diloco", "sgd")
    (0.1, 0.003, 0.01)
    """
    return lr_range(algorithm, optimizer)[1]


def check_optimizer(c: Any) -> None:
    """The optimiser's knobs: only those of the chosen rule, Nesterov only with momentum,
    a rule other than sgd, and clipping, only for algorithms that use the shared rule on
    the whole gradient."""
    for name, rules in OPTIMIZER_KNOBS.items():
        default = type(c).model_fields[name].default
        if c.optimizer not in rules and getattr(c, name) != default:
            raise ConfigError(name, f"only with optimizer {' or '.join(rules)} (optimizer is {c.optimizer}; "
                              f"leave it at {default})", getattr(c, name))
    if c.nesterov and c.momentum == 0:
        raise ConfigError("nesterov", "false when momentum is 0 (Nesterov momentum needs momentum > 0)", c.nesterov)
    if c.optimizer != "sgd":
        spec = algorithm_spec(c.algorithm)
        if spec is not None and not getattr(spec, "takes_optimizer", True):
            raise ConfigError("optimizer", f"sgd for {c.algorithm} (its update is its own; adamw, lars and "
                              "lamb apply to the other algorithms)", c.optimizer)
    if c.grad_clip:
        spec = algorithm_spec(c.algorithm)
        if spec is not None and not getattr(spec, "takes_optimizer", True):
            raise ConfigError("grad_clip", f"0 for {c.algorithm} (its update is its own, not the shared rule that "
                              "clips)", c.grad_clip)
        if spec is not None and spec.needs.server == "cgdp_master":
            raise ConfigError("grad_clip", f"0 for {c.algorithm} (its master updates each chunk of layers as its "
                              "sum arrives, before the whole gradient's norm is known)", c.grad_clip)


GPT_KNOBS = ("n_layers", "d_model", "n_heads")   # the GPT's own; `context` also sizes text datasets


def is_text_dataset(dataset: str) -> bool:
    """Whether a dataset's rows are token sequences (a language model's data): markov_text,
    or a .txt file.

    >>> is_text_dataset("markov_text"), is_text_dataset("books/emma.txt"), is_text_dataset("digits")
    (True, True, False)
    """
    info = DATASETS.get(dataset)
    return bool(info is not None and info.tokens) or is_text_path(dataset)


def check_language_model(c: Any) -> None:
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
    if text and c.standardize:
        raise ConfigError("standardize", f"false for the text dataset {c.dataset} (its features are token ids)",
                          c.standardize)
    if not text and c.context != type(c).model_fields["context"].default:
        raise ConfigError("context", f"only with a text dataset (leave it at {DEFAULT_GPT['context']})", c.context)
    if c.model == "gpt" and c.d_model % c.n_heads:
        raise ConfigError("n_heads", f"a divisor of d_model ({c.d_model}), so every head gets d_model / n_heads "
                          "dimensions", c.n_heads)


def check_elastic(c: Any, spec: Any) -> None:
    """`elastic` only for the algorithms that can change their membership (`spec.elastic`); `min_workers`
    only with it, and at most the workers asked for."""
    if c.elastic and not spec.elastic:
        from .registry import elastic_names
        raise ConfigError("elastic", f"false for {c.algorithm} (elastic membership: {', '.join(elastic_names())}; "
                          "the asynchronous algorithms go on without a lost worker anyway)", c.elastic)
    if c.min_workers is not None:
        if not c.elastic:
            raise ConfigError("min_workers", "unset unless elastic (without it a lost worker fails the run)",
                              c.min_workers)
        workers = c.n_workers
        if workers is not None and c.min_workers > workers:
            raise ConfigError("min_workers", f"at most the number of workers ({workers})", c.min_workers)


# Knobs that only their own algorithms read (their declarations name them, `AlgorithmSpec.knobs`):
# set off the default while another algorithm runs they would be ignored, so they are refused.
# The words say what the knob is.
OWNED_KNOBS: dict[str, str] = {
    "compression": "the knob compresses its gradient allreduce",
    "weight_return": "the knob is how cgdp's host master returns weights",
    "elastic_sync": "the knob is SC'17's chain of Sync EASGD",
}


def check_owned_knobs(c: Any) -> None:
    """Each knob of `OWNED_KNOBS` at its default unless the RunConfig `c`'s algorithm declares it."""
    for knob, what in OWNED_KNOBS.items():
        default, owners = type(c).model_fields[knob].default, with_knob(knob)
        if getattr(c, knob) != default and c.algorithm not in owners:
            raise ConfigError(knob, f"{default} unless algorithm is {' or '.join(owners)} ({what}; {c.algorithm} "
                              "has none)", getattr(c, knob))
