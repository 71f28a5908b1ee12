"""The dashboard's control table: one widget per `RunConfig` field, and how its value maps
onto the field (`CONTROLS`, `CONTROL_FIELDS`: control name -> field, the identity).

Each control is named after its field, carries the field's description as its tooltip
(`config.field_help`), sits in the field's group (`config.FIELD_GROUPS`) and says when it
applies (`Control.applies`); a field that another field's value makes required gets a
default that passes validation when that value is chosen (`DEPENDENTS`). The widgets are
made by the dashboard's form (`form.Form`); nothing here holds state.
"""
from __future__ import annotations

import html
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ipywidgets as widgets
import traitlets

from ..config import (
    ALGORITHMS,
    DATASET_NAMES,
    FIELD_GROUPS,
    GPT_KNOBS,
    MODEL_NAMES,
    SIM_CPU_DEVICES,
    SIM_DEVICES,
    SIM_NETWORKS,
    SIM_TIMING_MODELS,
    RunConfig,
    field_help,
    is_text_dataset,
)
from ..data import DATASETS
from ..problem import Problem

POWERS_OF_TWO = tuple(2 ** k for k in range(14))   # 1 .. 8192: batch sizes on a log scale
DOWNLOADED = tuple(name for name, info in DATASETS.items() if info.download)
# RunConfig fields with no control, and why.
LEFT_TO_CODE = {"out": "each run is saved to the Dashboard's own folder, `Dashboard(out=...)` / run-<k>-<algorithm> "
                       "(a sweep's runs to sweep-<k>-<algorithm>)",
                "partitions": "one simulated chip split into replicas moves cpus and cpu_device with it: "
                              "`RunConfig(partitions=...)` or `--partitions`, as notebooks/sim_knl.ipynb does",
                "out_private": "the Dashboard's run directories are private to you (0700/0600): "
                               "`RunConfig(out_private=False)` or `--no-out-private` shares them as the umask allows",
                "checkpoint_every": "the Dashboard's runs checkpoint every 60 s; a stopped run's Resume button "
                                    "continues it: `RunConfig(checkpoint_every=...)` in code",
                "checkpoint_keep": "`RunConfig(checkpoint_keep=...)` in code (2 by default)",
                "label_column": "a .csv's label column, when two of its columns are named as labels: "
                                "`RunConfig(label_column=...)` or `--label-column`",
                "elastic": "membership that changes is a run on a cluster that changes: `RunConfig(elastic=True)`, "
                           "`--elastic`, as notebooks/faults_and_recovery.ipynb does",
                "min_workers": "with elastic, in code: `RunConfig(min_workers=...)`",
                "join_worker": "simulated joins, with elastic, in code: `RunConfig(join_worker='3@10')`, as "
                               "notebooks/faults_and_recovery.ipynb does"}
LABEL_WIDTH = "118px"
CONTROL_WIDTH = "340px"


# ------------------------------------------------------------------------------ controls
def _same(v: Any) -> Any:
    return v


def _tidy(v: float) -> float:
    """A float widget's value to 12 significant digits: a frontend's slider arithmetic
    (0.9 -> 0.9000000000000001) must not change the config.

    >>> _tidy(0.9000000000000001)
    0.9
    """
    return float(f"{float(v):.12g}")


def sorted_options(options: tuple, value: Any) -> list:
    return sorted(set(options) | {value})


def _blank_is_none(v: str) -> str | None:
    return v.strip() or None


def _none_is_blank(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, (list, tuple)):
        return ",".join(f"{x:g}" if isinstance(x, float) else str(x) for x in v)
    return str(v)


def _args_text(v: dict | None) -> str:
    """`model_args` as the text field shows it: key=value pairs (JSON values), or blank.

    >>> _args_text({"width": 64, "act": "tanh"}), _args_text(None)
    ('width=64,act="tanh"', '')
    """
    import json
    return "" if not v else ",".join(f"{k}={json.dumps(x)}" for k, x in v.items())


def _zero_is_none(v: int) -> int | None:
    return int(v) or None


def _none_is_zero(v: int | None) -> int:
    return 0 if v is None else v


@dataclass(frozen=True)
class Control:
    """One widget and how its value maps onto the RunConfig field of the same name.

    `applies(config)` says whether the knob matters for that config; the dashboard hides
    it otherwise (its value still goes into the config)."""

    field: str
    make: Callable[[Any], Any]                 # current field value -> widget
    to_field: Callable[[Any], Any] = _same     # widget value -> RunConfig value
    from_field: Callable[[Any], Any] = _same   # RunConfig value -> widget value
    applies: Callable[[RunConfig], bool] | None = None

    @property
    def group(self) -> str:
        return next(g for g, names in FIELD_GROUPS.items() if self.field in names)


UNSET_ZERO = " Here 0 means unset."     # said by the tooltips of number boxes that stand in for None
# Fields whose unset value the config works out from the others (`config.registry.tournament_fit`:
# LTFB's 256, or what a small dataset's trainers can hold out): the dashboard passes one only once
# its control has been changed, and while unset the control shows the value the run will use.
FOLLOWS_WHEN_UNSET = ("tournament_size",)
UNSET_FOLLOWS = " Left alone, the box shows what the run will use; a value typed in is kept and checked."


def _desc(name: str, note: str = "") -> dict:
    """Label (the field's name), tooltip (its description) and size of a control."""
    return {"description": name, "tooltip": field_help(name) + note, "style": {"description_width": LABEL_WIDTH},
            "layout": widgets.Layout(width=CONTROL_WIDTH)}


def tooltip_on_label(w: Any) -> Any:
    """ipywidgets 8.1's Dropdown and Text views drop `tooltip` (no title anywhere in their
    DOM; a browser test saw it): their label then carries it as HTML, still reading as
    the field's name. Returns `w`."""
    if isinstance(w, (widgets.Dropdown, widgets.Text)) and w.tooltip and not w.description_allow_html:
        w.description = f'<span title="{html.escape(w.tooltip)}">{html.escape(w.description)}</span>'
        w.description_allow_html = True
    return w


def label_of(w: Any) -> str:
    """A control's label as the page shows it (without `tooltip_on_label`'s markup)."""
    import re
    return html.unescape(re.sub(r"<[^>]+>", "", w.description))


class AutoFloat(widgets.HBox):
    """A number box for an optional float whose unset value resolves to something (alpha:
    0.9 / workers): "auto" checked means unset, and the box then shows, disabled, the
    value the run will use (`show_resolved`). `value` is None or the float. A box, not a
    slider: a slider clamps and snaps what is typed (alpha 0.125 ran as 0.13, 1.5 as 0.99);
    the config refuses a bad value by name."""

    value = traitlets.Any(None, allow_none=True)

    def __init__(self, name: str, value: float | None, step: float):
        tip = field_help(name)
        self.number = widgets.FloatText(value=value if value is not None else 0.0, step=step,
                                        description=name, tooltip=tip, style={"description_width": LABEL_WIDTH},
                                        layout=widgets.Layout(width="270px"))
        self.auto = widgets.Checkbox(value=value is None, description="auto", indent=False,
                                     tooltip="unset: 0.9 / workers, shown in the box",
                                     layout=widgets.Layout(width="64px"))
        # The tooltip lives on the box and the HBox: a Box view's tooltip code wants a description.
        super().__init__([self.number, self.auto], layout=widgets.Layout(width=CONTROL_WIDTH))
        self.description = name
        self.value = value
        self.number.disabled = value is None
        self._busy = False
        self.number.observe(self._from_parts, names="value")
        self.auto.observe(self._from_parts, names="value")
        self.observe(self._to_parts, names="value")

    def show_resolved(self, value: float) -> None:
        """While unset: show the value the run will use."""
        if self.value is None:
            self._busy = True
            try:
                self.number.value = _tidy(value)
            finally:
                self._busy = False

    def _from_parts(self, change: dict) -> None:
        if self._busy:
            return
        self.number.disabled = self.auto.value
        self.value = None if self.auto.value else _tidy(self.number.value)

    def _to_parts(self, change: dict) -> None:
        v = change["new"]
        self._busy = True
        try:
            self.auto.value = v is None
            self.number.disabled = v is None
            if v is not None:
                self.number.value = v
        finally:
            self._busy = False


def _dropdown(options: Any) -> Callable[[Any], Any]:
    return lambda name: lambda v: widgets.Dropdown(options=options, value=v, **_desc(name))


def _c(name: str, make: Callable[[str], Callable[[Any], Any]], **kw: Any) -> Control:
    return Control(name, make(name), **kw)


def _text(name: str) -> Callable[[Any], Any]:
    return lambda v: widgets.Text(value=v, placeholder="default", **_desc(name))


# Number boxes take what is typed: a bounded box would clamp -1 to its minimum without a word
# (`steps` -3 read as 0, "unset"; `cpus` -1 refused as 0). What is allowed has one home, the
# config, whose error names the field, the value typed and what is allowed. A slider clamps
# and snaps too (its frontend, before Python sees the value): lr typed as -0.1 ran at 1e-5,
# 50 at 10 and 0.05 at 0.0501 (a log slider's grid), tau 0 ran as 1, momentum 1.5 as 0.99,
# all as "ready". So every free number is a box; sliders stay only for choices from a list
# (batch_size, base_batch: powers of two).
def _int(name: str) -> Callable[[Any], Any]:
    return lambda v: widgets.IntText(value=v, **_desc(name))


def _float(step: float) -> Callable[[str], Callable[[Any], Any]]:
    return lambda name: lambda v: widgets.FloatText(value=v, step=step, **_desc(name))


def _check(name: str) -> Callable[[Any], Any]:
    return lambda v: widgets.Checkbox(value=v, indent=False, **_desc(name))


DEFAULT = "default"


def _default_is_none(v: str) -> str | None:
    return None if v == DEFAULT else v


def _none_is_default(v: str | None) -> str:
    return DEFAULT if v is None else v


def _simulated(c: RunConfig) -> bool:
    return c.simulate


def _knob(field: str) -> Callable[[RunConfig], bool]:
    """Shown for the algorithms that declare `field` among their knobs (the registry)."""
    from ..config.registry import with_knob
    algorithms = with_knob(field)
    return lambda c: c.algorithm in algorithms


def _rule(field: str) -> Callable[[RunConfig], bool]:
    """Shown for the update rules the optimiser knob `field` belongs to (config.OPTIMIZER_KNOBS)."""
    from ..config import OPTIMIZER_KNOBS
    return lambda c: c.optimizer in OPTIMIZER_KNOBS[field]   # (async_measgd's delta is momentum: shown)


def _clips(c: RunConfig) -> bool:
    """Gradient clipping applies where the shared rule updates from the whole gradient."""
    from ..config.registry import specs
    spec = specs()[c.algorithm]
    return spec.takes_optimizer and spec.needs.server != "cgdp_master"


def _takes_optimizer(c: RunConfig) -> bool:
    """The algorithm applies the shared update rule (not hogwild_sgd's or async_measgd's own)."""
    from ..config.registry import specs
    return specs()[c.algorithm].takes_optimizer


GPU_COUNTS = tuple((str(i), i) for i in (*range(17), 32, 64, 128, 256, 512, 1024))
def _compressing(*kinds: str) -> Callable[[RunConfig], bool]:
    """Shown for the algorithms that compress their gradients (sync_sgd, or those that
    declare `compression` among their knobs) and, given `kinds`, only with one of them."""
    def applies(c: RunConfig) -> bool:
        from ..config.registry import with_knob
        if c.algorithm not in {"sync_sgd", *with_knob("compression")}:
            return False
        return not kinds or c.compression in kinds
    return applies


CONTROLS: tuple[Control, ...] = (
    # what to train
    _c("algorithm", _dropdown(list(ALGORITHMS))),
    _c("dataset", lambda n: lambda v: widgets.Combobox(value=v, options=list(DATASET_NAMES), ensure_option=False,
                                                       placeholder="digits, or a path: text.txt, data.npz, x.npy,y.npy",
                                                       continuous_update=False, **_desc(n)),
       to_field=lambda v: v.strip() or "digits"),
    _c("model", lambda n: lambda v: widgets.Combobox(value=v, options=list(MODEL_NAMES), ensure_option=False,
                                                     placeholder="mlp, or package.module:Name", continuous_update=False,
                                                     **_desc(n)), to_field=lambda v: v.strip() or "mlp"),
    _c("model_args", lambda n: lambda v: widgets.Text(value=v, placeholder="e.g. width=64,act=tanh",
                                                      continuous_update=False, **_desc(n)),
       to_field=_blank_is_none, from_field=_args_text, applies=lambda c: c.model not in MODEL_NAMES),
    _c("hidden", _text, to_field=_blank_is_none, from_field=_none_is_blank, applies=lambda c: c.model in ("mlp", "cnn")),
    _c("n_layers", _int, applies=lambda c: c.model == "gpt"),
    _c("d_model", _int, applies=lambda c: c.model == "gpt"),
    _c("n_heads", _int, applies=lambda c: c.model == "gpt"),
    _c("context", _int, applies=lambda c: c.model == "gpt" or is_text_dataset(c.dataset)),
    _c("n_samples", _int, applies=lambda c: c.dataset in ("mnist1d", "synthetic", "markov_text")),
    _c("n_features", _int, applies=lambda c: c.dataset == "synthetic"),
    _c("n_classes", _int, applies=lambda c: c.dataset == "synthetic"),
    _c("test_fraction", _float(0.05), to_field=_tidy,
       applies=lambda c: c.dataset in ("digits", "mnist1d", "synthetic", "markov_text") or c.dataset not in DATASETS),
    _c("val_fraction", _float(0.05), to_field=_tidy),
    _c("standardize", _check, applies=lambda c: not is_text_dataset(c.dataset)),
    _c("data_dir", _text, to_field=_blank_is_none, from_field=_none_is_blank,
       applies=lambda c: c.dataset in DOWNLOADED),
    _c("download", _check, applies=lambda c: c.dataset in DOWNLOADED),
    # where to train
    _c("cpus", _int),   # up to 1024 virtual workers when simulating
    _c("gpus", _dropdown([("auto", "auto"), *GPU_COUNTS])),
    _c("scheduler", lambda n: lambda v: widgets.Text(value=v, placeholder="local cluster", **_desc(n)),
       to_field=_blank_is_none, from_field=_none_is_blank, applies=lambda c: not in_process(c)),
    _c("comm", _dropdown(["auto", "shm", "dask", "nccl"]), applies=lambda c: not in_process(c)),
    _c("latency_ms", _float(0.1), to_field=_tidy, applies=lambda c: not in_process(c)),
    _c("bandwidth_gbps", _float(0.1), to_field=_tidy, applies=lambda c: not in_process(c)),
    _c("blas_threads", _int, applies=lambda c: not c.simulate),
    # simulated cluster ("default" stands for unset: the simulator picks)
    _c("simulate", _check),
    _c("device", _dropdown([DEFAULT, *SIM_DEVICES]), to_field=_default_is_none, from_field=_none_is_default,
       applies=_simulated),
    _c("cpu_device", _dropdown(["local", *SIM_CPU_DEVICES]), applies=_simulated),
    _c("calibration", lambda n: lambda v: widgets.Text(value=v, placeholder="this machine's cached one", **_desc(n)),
       to_field=_blank_is_none, from_field=_none_is_blank,
       applies=lambda c: c.simulate and c.cpu_device == "local"),
    _c("network", _dropdown([DEFAULT, *SIM_NETWORKS]), to_field=_default_is_none, from_field=_none_is_default,
       applies=_simulated),
    _c("timing_model", _dropdown([DEFAULT, *SIM_TIMING_MODELS]), to_field=_default_is_none,
       from_field=_none_is_default, applies=_simulated),
    _c("jitter", _float(0.05), to_field=_tidy, applies=_simulated),
    _c("fail_worker", lambda n: lambda v: widgets.Text(value=v, placeholder="e.g. 3@12.5", **_desc(n)),
       to_field=_blank_is_none, from_field=_none_is_blank, applies=_simulated),
    # optimisation
    _c("batch_size", lambda n: lambda v: widgets.SelectionSlider(options=sorted_options(POWERS_OF_TWO, v),
                                                                 value=v, **_desc(n))),
    _c("accumulate", _int),
    _c("lr", _float(None), to_field=_tidy),
    _c("lr_scaling", _dropdown(["none", "linear", "sqrt"])),
    _c("base_batch", lambda n: lambda v: widgets.SelectionSlider(options=sorted_options(POWERS_OF_TWO, v),
                                                                 value=v, **_desc(n)),
       applies=lambda c: c.lr_scaling != "none"),
    _c("warmup", _dropdown(["none", "gradual", "constant"])),
    _c("warmup_epochs", _float(0.5), to_field=_tidy, applies=lambda c: c.warmup != "none"),
    _c("decay", _dropdown(["none", "step", "cosine"])),
    _c("optimizer", _dropdown(["sgd", "adamw", "lars", "lamb"]), applies=_takes_optimizer),
    _c("momentum", _float(0.01), to_field=_tidy, applies=_rule("momentum")),
    _c("nesterov", _check, applies=_rule("nesterov")),
    _c("weight_decay", _float(1e-4), to_field=_tidy),
    _c("beta1", _float(0.01), to_field=_tidy, applies=_rule("beta1")),
    _c("beta2", _float(0.001), to_field=_tidy, applies=_rule("beta2")),
    _c("eps", _float(1e-8), to_field=_tidy, applies=_rule("eps")),
    _c("trust_coefficient", _float(1e-4), to_field=_tidy, applies=_rule("trust_coefficient")),
    _c("grad_clip", _float(0.1), to_field=_tidy, applies=_clips),
    # algorithm knobs
    _c("tau", _int, applies=_knob("tau")),
    Control("alpha", lambda v: AutoFloat("alpha", v, 0.01), applies=_knob("alpha")),
    _c("elastic_sync", _dropdown(["ring", "tree_host", "tree_device", "tree_device_overlap"]),
       applies=lambda c: c.algorithm == "sync_easgd"),   # SC'17's chain: sync_easgd's only (config refuses it elsewhere)
    _c("trainers", _int, applies=_knob("trainers")),
    _c("round_size", _int, applies=_knob("round_size")),
    _c("tournament_size", lambda n: lambda v: widgets.IntText(value=v, **_desc(n, UNSET_FOLLOWS)),
       applies=_knob("tournament_size")),
    _c("trainer_lrs", lambda n: lambda v: widgets.Text(value=v, placeholder="from lr and lr_spread", **_desc(n)),
       to_field=_blank_is_none, from_field=_none_is_blank, applies=_knob("trainer_lrs")),
    _c("lr_spread", _float(0.5), to_field=_tidy, applies=_knob("lr_spread")),
    _c("exchange_state", _check, applies=_knob("exchange_state")),
    _c("chunk_layers", _dropdown([("auto", "auto")] + [(str(i), i) for i in range(1, 17)]), applies=_knob("chunk_layers")),
    _c("weight_return", _dropdown(["chunks", "whole"]), applies=_knob("weight_return")),   # cgdp's host master
    _c("split", _dropdown(["equal", "speed"]), applies=_knob("split")),
    _c("post_local_epoch", _float(0.5), to_field=_tidy, applies=_knob("post_local_epoch")),
    _c("outer_lr", _float(0.05), to_field=_tidy, applies=_knob("outer_lr")),
    _c("outer_momentum", _float(0.01), to_field=_tidy, applies=_knob("outer_momentum")),
    _c("topology", _dropdown(["ring", "torus", "exponential", "complete"]), applies=_knob("topology")),
    _c("compression", _dropdown(["none", "topk", "randomk", "sign", "qsgd", "powersgd"]),
       applies=_compressing()),
    _c("compression_ratio", _float(0.01), to_field=_tidy,
       applies=_compressing("topk", "randomk")),
    _c("compression_rank", _int, applies=_compressing("powersgd")),
    _c("compression_levels", _int, applies=_compressing("qsgd")),
    _c("error_feedback", _check, applies=_compressing("topk", "randomk", "sign", "qsgd", "powersgd")),
    # how long
    _c("epochs", _float(1), to_field=_tidy),
    _c("steps", lambda n: lambda v: widgets.IntText(value=v, **_desc(n, UNSET_ZERO)),
       to_field=_zero_is_none, from_field=_none_is_zero),
    _c("eval_every", lambda n: lambda v: widgets.IntText(value=v, **_desc(n, UNSET_ZERO)),
       to_field=_zero_is_none, from_field=_none_is_zero),
    _c("early_stop", lambda n: lambda v: widgets.IntText(value=v, **_desc(n, UNSET_ZERO)),
       to_field=_zero_is_none, from_field=_none_is_zero, applies=lambda c: c.algorithm != "ltfb"),
    _c("seed", _int),
)
CONTROL_FIELDS: dict[str, str] = {c.field: c.field for c in CONTROLS}   # control name -> RunConfig field
RELEVANT = {c.field: c.applies for c in CONTROLS if c.applies is not None}


def control_applies(applies: Callable[[RunConfig], bool], raw: RunConfig) -> bool:
    """Whether a control applies to the (unvalidated) config; a half-typed value that its
    rule cannot read keeps the control visible."""
    try:
        return bool(applies(raw))
    except Exception:
        return True


def hidden_fields(config: dict[str, Any]) -> set[str]:
    """The fields whose control does not apply to `config` (a dict of RunConfig fields, the
    rest at their defaults; unvalidated): the controls the dashboard hides, the fields it runs
    at their defaults and leaves out of a run's name and row."""
    raw = RunConfig.model_construct(**{**RunConfig().model_dump(), **config})
    return {k for k, applies in RELEVANT.items() if not control_applies(applies, raw)}


def applying(config: dict[str, Any]) -> dict[str, Any]:
    """A run's config (`RunConfig.to_dict`) without the fields whose control does not apply
    to it (`RELEVANT`: `tau` under sync_sgd, `warmup_epochs` with no warmup): what a run's
    name and the runs table say of it, as the dashboard's page shows it.

    >>> easgd = applying(RunConfig(algorithm="sync_easgd", cpus=2, tau=8).to_dict())
    >>> sync = applying(RunConfig(algorithm="sync_sgd", cpus=2, tau=8).to_dict())
    >>> easgd["tau"], "tau" in sync, "warmup_epochs" in sync
    (8, False, False)
    """
    hidden = hidden_fields(config)
    return {k: v for k, v in config.items() if k not in hidden}


@dataclass(frozen=True)
class Dependent:
    """A field that another field's value makes required: when `trigger` changes and
    `needed(values)` holds, the dashboard sets `field` to `default(values)` (the control
    then shows, with a value that passes validation, instead of an error and a hidden box)."""

    field: str
    triggers: tuple[str, ...]
    needed: Callable[[dict], bool]
    default: Callable[[dict], Any]


def _warmup_default(v: dict) -> float:
    """One epoch of warmup, or half the run when it is shorter (validation wants
    0 < warmup_epochs <= epochs)."""
    return _tidy(min(1.0, float(v["epochs"]) / 2))


def _raw(values: dict) -> RunConfig:
    """The controls' values as an unvalidated RunConfig (for rules that read a half-valid one)."""
    return RunConfig.model_construct(**{**RunConfig().model_dump(), **values})


def _workers_raw(values: dict) -> int:
    cfg = _raw(values)
    if cfg.gpus == "auto":
        from ..maths.backend import gpu_count
        return int(cfg.cpus) + gpu_count()
    return int(cfg.cpus) + int(cfg.gpus)


def _batch_default(v: dict) -> int:
    """The smallest power of two that gives every worker a sample, or the worker count
    itself when that power of two is more than the training set holds."""
    workers = _workers_raw(v)
    power = next((b for b in POWERS_OF_TWO if b >= workers), workers)
    try:
        n_train = preview_n_train(_raw(v))
    except Exception:          # an unknown size: the power of two, and validation says the rest
        return power
    return power if power <= n_train else workers


def _slice_raw(values: dict) -> int:
    """A worker's rows of a batch (an equal share; sgd's one worker: the whole batch)."""
    from ..config.registry import specs
    spec = specs().get(_raw(values).algorithm)
    workers = (spec.workers if spec is not None and spec.workers else None) or _workers_raw(values)
    return max(1, int(values["batch_size"]) // max(1, workers))


def _is_text(values: dict) -> bool:
    """Whether the values' dataset is a language model's (rows of tokens)."""
    return is_text_dataset(values.get("dataset"))


DEPENDENTS: tuple[Dependent, ...] = (
    # the GPT trains on text and the built-in classifiers on rows of features: a choice of one
    # brings the other along (the config refuses the mixed pairs)
    Dependent("dataset", ("model",), lambda v: v["model"] == "gpt" and not _is_text(v), lambda v: "markov_text"),
    Dependent("dataset", ("model",), lambda v: v["model"] in ("softmax", "mlp", "cnn") and _is_text(v),
              lambda v: RunConfig.model_fields["dataset"].default),
    Dependent("model", ("dataset",), lambda v: _is_text(v) and v["model"] in ("softmax", "mlp", "cnn"), lambda v: "gpt"),
    Dependent("model", ("dataset",), lambda v: not _is_text(v) and v["model"] == "gpt", lambda v: "mlp"),
    # text is token ids, which are not standardized (the config refuses it): off when the data becomes text
    Dependent("standardize", ("dataset", "model"), lambda v: bool(v["standardize"]) and _is_text(v), lambda v: False),
    # the GPT's own knobs go back to their defaults with another model (the config refuses them there)
    *(Dependent(knob, ("model",), lambda v, k=knob: v["model"] != "gpt" and v[k] != RunConfig.model_fields[k].default,
                lambda v, k=knob: RunConfig.model_fields[k].default) for knob in GPT_KNOBS),
    Dependent("warmup_epochs", ("warmup",), lambda v: v["warmup"] != "none" and not (
        0 < v["warmup_epochs"] <= (v["epochs"] if v["steps"] is None else math.inf)), _warmup_default),
    # a simulated cluster counts its virtual GPUs: "auto" (detect) means none there
    Dependent("gpus", ("simulate",), lambda v: bool(v["simulate"]) and v["gpus"] == "auto", lambda v: 0),
    # simulated GPUs chosen while cpus is at its default: the GPUs alone, as the config's own rule
    # (`RunConfig(simulate=True, gpus=8)` is 8 GPU workers); the default 2 CPU workers would add
    # two compute workers nobody asked for. A cpus typed afterwards is kept.
    Dependent("cpus", ("gpus", "simulate"), lambda v: bool(v["simulate"]) and isinstance(v["gpus"], int)
              and v["gpus"] >= 1 and v["cpus"] == RunConfig.model_fields["cpus"].default, lambda v: 0),
    # more workers than the global batch has samples: a batch that gives each one
    Dependent("batch_size", ("cpus", "gpus", "algorithm"),
              lambda v: not in_process(_raw(v)) and v["batch_size"] < _workers_raw(v), _batch_default),
    # micro-batches of at least a row: at most a worker's rows of a batch (after the batch itself follows)
    Dependent("accumulate", ("batch_size", "cpus", "gpus", "algorithm"),
              lambda v: v["accumulate"] > _slice_raw(v), _slice_raw),
)


def lr_follows(changed: str, old: Any, values: dict) -> tuple[float, str] | None:
    """The lr the controls move to when the update rule or the algorithm changes, with the
    sentence the status line says, or None to leave it (`config.lr_range`: each rule's lr
    differs by up to 1000x, and LAMB at SGD's 0.1 ended at chance).

    A new update rule always takes its default; a new algorithm only when the lr was the
    old one's default (a rate the user chose stays).

    >>> lr_follows("optimizer", "sgd", {"algorithm": "sync_sgd", "optimizer": "lamb", "lr": 0.1})
    (0.003, "lr moved to 0.003, lamb's default for sync_sgd (was 0.1)")
    >>> lr_follows("algorithm", "sync_sgd", {"algorithm": "diloco", "optimizer": "sgd", "lr": 0.25}) is None
    True
    """
    from ..config import default_lr
    algorithm, optimizer, lr = values.get("algorithm"), values.get("optimizer"), values.get("lr")
    if changed == "optimizer":
        was_default = True
    elif changed == "algorithm":
        try:
            was_default = lr is not None and math.isclose(float(lr), default_lr(str(old), str(optimizer)))
        except Exception:       # an algorithm the registry does not know: leave the lr
            return None
    else:
        return None
    try:
        new = default_lr(str(algorithm), str(optimizer))
    except Exception:
        return None
    if not was_default or lr is None or math.isclose(float(lr), new):
        return None
    return new, f"lr moved to {new:g}, {optimizer}'s default for {algorithm} (was {float(lr):g})"


def in_process(config: RunConfig) -> bool:
    """Whether the config's algorithm runs in this process, without a cluster (sgd)."""
    from ..config.registry import specs
    spec = specs().get(config.algorithm)
    return spec is not None and spec.in_process


def preview_n_train(config: RunConfig) -> int:
    """Training-set size for the schedule preview, from the dataset's entry (nothing loaded)."""
    return Problem.from_config(config).shape.n_train


def workers_of(config: RunConfig) -> int:
    """The workers a run of `config` has (cpus + gpus, detected GPUs for "auto")."""
    if config.n_workers is not None:
        return config.n_workers
    from ..maths.backend import gpu_count
    return config.cpus + gpu_count()
