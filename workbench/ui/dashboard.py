"""The interactive dashboard: a control for every knob, Run / Stop, live plots, scaling sweeps.

In a notebook, `Dashboard()` as a cell's value shows it. Without a frontend (papermill,
tests) the same object runs from code:

>>> import workbench as wb
>>> dash = Dashboard(cluster="threads", config=wb.RunConfig(algorithm="sync_sgd", steps=3))
>>> dash.run()
True
>>> dash.wait(60).status
'completed'

The only ipywidgets code of workbench. Every control is named after, and maps onto,
the `RunConfig` field of the same name (`CONTROL_FIELDS`), carries that field's
description as its tooltip (`config.field_help`, the text `--help` shows too), and sits
in the field's group (`config.FIELD_GROUPS`); an algorithm's or a dataset's own knobs
are shown only when they apply. The one field without a control, `out`, is named in
LEFT_TO_CODE. What the controls say is validated as a whole on every change, and a bad
combination shows its `ConfigError` text in the status line (never a traceback).

Threads: a run trains on a background thread (`workbench.run`), so the kernel stays
responsive and Stop works. Records arrive on the run's own thread, where `on_record`
only appends them to a buffer. A second thread wakes FLUSH_S times a second: it takes
the new records (a cheap count of steps, samples and their clock), rewrites the status
line (step, epoch, samples/s and an ETA from the rate over the last RATE_WINDOW_S of
the run's own clock), and redraws the live FigureWidgets when due: at least every
MAX_REDRAW_S, more often only while drawing costs under FLUSH_BUDGET of a core (CPU
time, which other processes on a busy machine do not inflate). Each redraw costs about
the same however long the run: a batch adds at most `figures.BATCH_POINTS` loss points
and a trace keeps at most `figures.LIVE_POINTS`. Widgets are never touched from the
training thread.

Before the first step a run shows its start-up as its own phase ("starting: cluster",
"starting: placing data ..."); its curves start at the first step (t = 0).

FigureWidgets inside ipywidgets containers need their whole state re-sent before they
are first shown (`figures.sync_widget`); the dashboard does that when it is displayed
and when the live plots appear at the first run. Once shown, a figure's edits wait
until its frontend can take them (`FigureSlot`).
"""
from __future__ import annotations

import collections
import functools
import html
import math
import os
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ipywidgets as widgets
import pandas as pd
import traitlets

from .. import measure
from ..config import (
    ALGORITHMS,
    DATASET_NAMES,
    FIELD_GROUPS,
    GROUP_TITLES,
    MAX_VIRTUAL_WORKERS,
    MODEL_NAMES,
    SIM_CPU_DEVICES,
    SIM_DEVICES,
    SIM_FIELDS,
    SIM_NETWORKS,
    SIM_TIMING_MODELS,
    ConfigError,
    RunConfig,
    field_help,
)
from ..data import DATASETS
from ..problem import Problem
from ..results import free_run_dir
from . import figures as F
from .report import differing_config, format_cell, summary_table

FLUSH_S = 0.25           # the status line follows 4 times a second ...
MAX_REDRAW_S = 1.0       # ... every live figure redraws at least once a second ...
FLUSH_BUDGET = 0.03      # ... and more often only while drawing costs under ~3% of a core (CPU time)
RATE_WINDOW_S = 10.0     # the ETA: step rate over the last 10 s of the run's own clock
DEFAULT_ALGORITHM = "sync_sgd"   # the dashboard starts on a parallel algorithm (sgd is the reference)
DEFAULT_SMOOTHING = 0.6  # EMA weight of the live train-loss line (TensorBoard's default)
POWERS_OF_TWO = tuple(2 ** k for k in range(14))   # 1 .. 8192: batch sizes on a log scale
DOWNLOADED = tuple(name for name, info in DATASETS.items() if info.download)
# RunConfig fields with no control, and why.
LEFT_TO_CODE = {"out": "each run is saved to the Dashboard's own folder, `Dashboard(out=...)` / run-<k>-<algorithm>"}
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


def _sorted_options(options: tuple, value: Any) -> list:
    return sorted(set(options) | {value})


def _blank_is_none(v: str) -> str | None:
    return v.strip() or None


def _none_is_blank(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, (list, tuple)):
        return ",".join(f"{x:g}" if isinstance(x, float) else str(x) for x in v)
    return str(v)


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


def _desc(name: str, note: str = "") -> dict:
    """Label (the field's name), tooltip (its description) and size of a control."""
    return {"description": name, "tooltip": field_help(name) + note, "style": {"description_width": LABEL_WIDTH},
            "layout": widgets.Layout(width=CONTROL_WIDTH)}


def _tooltip_on_label(w: Any) -> Any:
    """ipywidgets 8.1's Dropdown and Text views drop `tooltip` (no title anywhere in their
    DOM; a browser test saw it): their label then carries it as HTML, still reading as
    the field's name. Returns `w`."""
    if isinstance(w, (widgets.Dropdown, widgets.Text)) and w.tooltip and not w.description_allow_html:
        w.description = f'<span title="{html.escape(w.tooltip)}">{html.escape(w.description)}</span>'
        w.description_allow_html = True
    return w


def label_of(w: Any) -> str:
    """A control's label as the page shows it (without `_tooltip_on_label`'s markup)."""
    import re
    return html.unescape(re.sub(r"<[^>]+>", "", w.description))


class AutoFloat(widgets.HBox):
    """A slider for an optional float whose unset value resolves to something (alpha:
    0.9 / workers): "auto" checked means unset, and the slider then shows, disabled,
    the value the run will use (`show_resolved`). `value` is None or the float."""

    value = traitlets.Any(None, allow_none=True)

    def __init__(self, name: str, value: float | None, lo: float, hi: float, step: float):
        tip = field_help(name)
        self.slider = widgets.FloatSlider(value=value if value is not None else lo, min=lo, max=hi, step=step,
                                          readout_format=".3f", description=name, tooltip=tip,
                                          style={"description_width": LABEL_WIDTH},
                                          layout=widgets.Layout(width="270px"))
        self.auto = widgets.Checkbox(value=value is None, description="auto", indent=False,
                                     tooltip="unset: 0.9 / workers, shown on the slider",
                                     layout=widgets.Layout(width="64px"))
        # The tooltip lives on the slider and the box: a Box view's tooltip code wants a description.
        super().__init__([self.slider, self.auto], layout=widgets.Layout(width=CONTROL_WIDTH))
        self.description = name
        self.value = value
        self.slider.disabled = value is None
        self._busy = False
        self.slider.observe(self._from_parts, names="value")
        self.auto.observe(self._from_parts, names="value")
        self.observe(self._to_parts, names="value")

    def show_resolved(self, value: float) -> None:
        """While unset: show the value the run will use."""
        if self.value is None:
            self._busy = True
            try:
                self.slider.value = min(max(value, self.slider.min), self.slider.max)
            finally:
                self._busy = False

    def _from_parts(self, change: dict) -> None:
        if self._busy:
            return
        self.slider.disabled = self.auto.value
        self.value = None if self.auto.value else _tidy(self.slider.value)

    def _to_parts(self, change: dict) -> None:
        v = change["new"]
        self._busy = True
        try:
            self.auto.value = v is None
            self.slider.disabled = v is None
            if v is not None:
                self.slider.value = v
        finally:
            self._busy = False


def _dropdown(options: Any) -> Callable[[Any], Any]:
    return lambda name: lambda v: widgets.Dropdown(options=options, value=v, **_desc(name))


def _c(name: str, make: Callable[[str], Callable[[Any], Any]], **kw: Any) -> Control:
    return Control(name, make(name), **kw)


def _text(name: str) -> Callable[[Any], Any]:
    return lambda v: widgets.Text(value=v, placeholder="default", **_desc(name))


def _int(lo: int, hi: int) -> Callable[[str], Callable[[Any], Any]]:
    return lambda name: lambda v: widgets.BoundedIntText(value=v, min=lo, max=hi, **_desc(name))


def _float(lo: float, hi: float, step: float) -> Callable[[str], Callable[[Any], Any]]:
    return lambda name: lambda v: widgets.BoundedFloatText(value=v, min=lo, max=hi, step=step, **_desc(name))


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
    from ..algorithms.registry import with_knob
    algorithms = with_knob(field)
    return lambda c: c.algorithm in algorithms


def _rule(field: str) -> Callable[[RunConfig], bool]:
    """Shown for the update rules the optimiser knob `field` belongs to (config.OPTIMIZER_KNOBS)."""
    from ..config import OPTIMIZER_KNOBS
    return lambda c: c.optimizer in OPTIMIZER_KNOBS[field] and _takes_optimizer(c)


def _takes_optimizer(c: RunConfig) -> bool:
    """The algorithm applies the shared update rule (not hogwild_sgd's or async_measgd's own)."""
    from ..algorithms.registry import specs
    return specs()[c.algorithm].takes_optimizer


GPU_COUNTS = tuple((str(i), i) for i in (*range(17), 32, 64, 128, 256, 512, 1024))
def _compressing(*kinds: str) -> Callable[[RunConfig], bool]:
    """Shown for the algorithms that compress their gradients (sync_sgd, or those that
    declare `compression` among their knobs) and, given `kinds`, only with one of them."""
    def applies(c: RunConfig) -> bool:
        from ..algorithms.registry import with_knob
        if c.algorithm not in {"sync_sgd", *with_knob("compression")}:
            return False
        return not kinds or c.compression in kinds
    return applies


CONTROLS: tuple[Control, ...] = (
    # what to train
    _c("algorithm", _dropdown(list(ALGORITHMS))),
    _c("dataset", _dropdown(list(DATASET_NAMES))),
    _c("model", _dropdown(list(MODEL_NAMES))),
    _c("hidden", _text, to_field=_blank_is_none, from_field=_none_is_blank, applies=lambda c: c.model != "softmax"),
    _c("n_samples", _int(10, 10**8), applies=lambda c: c.dataset in ("mnist1d", "synthetic")),
    _c("n_features", _int(1, 10**6), applies=lambda c: c.dataset == "synthetic"),
    _c("n_classes", _int(2, 10**4), applies=lambda c: c.dataset == "synthetic"),
    _c("data_dir", _text, to_field=_blank_is_none, from_field=_none_is_blank,
       applies=lambda c: c.dataset in DOWNLOADED),
    _c("download", _check, applies=lambda c: c.dataset in DOWNLOADED),
    # where to train
    _c("cpus", _int(0, MAX_VIRTUAL_WORKERS)),   # up to 1024 virtual workers when simulating
    _c("gpus", _dropdown([("auto", "auto"), *GPU_COUNTS])),
    _c("scheduler", lambda n: lambda v: widgets.Text(value=v, placeholder="local cluster", **_desc(n)),
       to_field=_blank_is_none, from_field=_none_is_blank, applies=lambda c: not _in_process(c)),
    _c("comm", _dropdown(["auto", "shm", "dask", "nccl"]), applies=lambda c: not _in_process(c)),
    _c("latency_ms", _float(0, 10000, 0.1), to_field=_tidy, applies=lambda c: not _in_process(c)),
    _c("bandwidth_gbps", _float(0, 10000, 0.1), to_field=_tidy, applies=lambda c: not _in_process(c)),
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
    _c("jitter", _float(0, 0.99, 0.05), to_field=_tidy, applies=_simulated),
    _c("fail_worker", lambda n: lambda v: widgets.Text(value=v, placeholder="e.g. 3@12.5", **_desc(n)),
       to_field=_blank_is_none, from_field=_none_is_blank, applies=_simulated),
    # optimisation
    _c("batch_size", lambda n: lambda v: widgets.SelectionSlider(options=_sorted_options(POWERS_OF_TWO, v),
                                                                 value=v, **_desc(n))),
    _c("lr", lambda n: lambda v: widgets.FloatLogSlider(value=v, base=10, min=-5, max=1, step=0.05,
                                                        readout_format=".3g", **_desc(n)), to_field=_tidy),
    _c("lr_scaling", _dropdown(["none", "linear", "sqrt"])),
    _c("base_batch", lambda n: lambda v: widgets.SelectionSlider(options=_sorted_options(POWERS_OF_TWO, v),
                                                                 value=v, **_desc(n)),
       applies=lambda c: c.lr_scaling != "none"),
    _c("warmup", _dropdown(["none", "gradual", "constant"])),
    _c("warmup_epochs", _float(0, 10000, 0.5), to_field=_tidy, applies=lambda c: c.warmup != "none"),
    _c("decay", _dropdown(["none", "step", "cosine"])),
    _c("optimizer", _dropdown(["sgd", "adamw", "lars", "lamb"]), applies=_takes_optimizer),
    _c("momentum", lambda n: lambda v: widgets.FloatSlider(value=v, min=0, max=0.99, step=0.01, **_desc(n)),
       to_field=_tidy, applies=_rule("momentum")),
    _c("nesterov", _check, applies=_rule("nesterov")),
    _c("weight_decay", _float(0, 10, 1e-4), to_field=_tidy),
    _c("beta1", _float(0, 0.9999, 0.01), to_field=_tidy, applies=_rule("beta1")),
    _c("beta2", _float(0, 0.999999, 0.001), to_field=_tidy, applies=_rule("beta2")),
    _c("eps", _float(0, 1, 1e-8), to_field=_tidy, applies=_rule("eps")),
    _c("trust_coefficient", _float(0, 10, 1e-4), to_field=_tidy, applies=_rule("trust_coefficient")),
    # algorithm knobs
    _c("tau", lambda n: lambda v: widgets.IntSlider(value=v, min=1, max=max(64, v), **_desc(n)),
       applies=_knob("tau")),
    Control("alpha", lambda v: AutoFloat("alpha", v, 0.01, 0.99, 0.01), applies=_knob("alpha")),
    _c("trainers", lambda n: lambda v: widgets.IntSlider(value=v, min=1, max=max(16, v), **_desc(n)),
       applies=_knob("trainers")),
    _c("round_size", _int(1, 10**6), applies=_knob("round_size")),
    _c("tournament_size", _int(1, 10**6), applies=_knob("tournament_size")),
    _c("trainer_lrs", lambda n: lambda v: widgets.Text(value=v, placeholder="from lr and lr_spread", **_desc(n)),
       to_field=_blank_is_none, from_field=_none_is_blank, applies=_knob("trainer_lrs")),
    _c("lr_spread", _float(1, 1000, 0.5), to_field=_tidy, applies=_knob("lr_spread")),
    _c("exchange_state", _check, applies=_knob("exchange_state")),
    _c("chunk_layers", _dropdown([("auto", "auto")] + [(str(i), i) for i in range(1, 17)]), applies=_knob("chunk_layers")),
    _c("split", _dropdown(["equal", "speed"]), applies=_knob("split")),
    _c("post_local_epoch", _float(0, 10**5, 0.5), to_field=_tidy, applies=_knob("post_local_epoch")),
    _c("outer_lr", _float(1e-4, 10, 0.05), to_field=_tidy, applies=_knob("outer_lr")),
    _c("outer_momentum", lambda n: lambda v: widgets.FloatSlider(value=v, min=0, max=0.99, step=0.01, **_desc(n)),
       to_field=_tidy, applies=_knob("outer_momentum")),
    _c("compression", _dropdown(["none", "topk", "randomk", "sign", "qsgd", "powersgd"]),
       applies=_compressing()),
    _c("compression_ratio", _float(1e-6, 1, 0.01), to_field=_tidy,
       applies=_compressing("topk", "randomk")),
    _c("compression_rank", _int(1, 4096), applies=_compressing("powersgd")),
    _c("compression_levels", _int(1, 2**16), applies=_compressing("qsgd")),
    _c("error_feedback", _check, applies=_compressing("topk", "randomk", "sign", "qsgd", "powersgd")),
    # how long
    _c("epochs", _float(0.01, 10**5, 1), to_field=_tidy),
    _c("steps", lambda n: lambda v: widgets.BoundedIntText(value=v, min=0, max=10**9, **_desc(n, UNSET_ZERO)),
       to_field=_zero_is_none, from_field=_none_is_zero),
    _c("eval_every", lambda n: lambda v: widgets.BoundedIntText(value=v, min=0, max=10**9, **_desc(n, UNSET_ZERO)),
       to_field=_zero_is_none, from_field=_none_is_zero),
    _c("seed", _int(0, 2**31 - 1)),
)
CONTROL_FIELDS: dict[str, str] = {c.field: c.field for c in CONTROLS}   # control name -> RunConfig field
RELEVANT = {c.field: c.applies for c in CONTROLS if c.applies is not None}


def _in_process(config: RunConfig) -> bool:
    """Whether the config's algorithm runs in this process, without a cluster (sgd)."""
    from ..algorithms.registry import specs
    spec = specs().get(config.algorithm)
    return spec is not None and spec.in_process


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


DEPENDENTS: tuple[Dependent, ...] = (
    Dependent("warmup_epochs", ("warmup",), lambda v: v["warmup"] != "none" and not (
        0 < v["warmup_epochs"] <= (v["epochs"] if v["steps"] is None else math.inf)), _warmup_default),
    # a simulated cluster counts its virtual GPUs: "auto" (detect) means none there
    Dependent("gpus", ("simulate",), lambda v: bool(v["simulate"]) and v["gpus"] == "auto", lambda v: 0),
    # more workers than the global batch has samples: a batch that gives each one
    Dependent("batch_size", ("cpus", "gpus", "algorithm"),
              lambda v: not _in_process(_raw(v)) and v["batch_size"] < _workers_raw(v), _batch_default),
)


def preview_n_train(config: RunConfig) -> int:
    """Training-set size for the schedule preview, from the dataset's entry (nothing loaded)."""
    return Problem.from_config(config).shape.n_train


def _workers_of(config: RunConfig) -> int:
    if config.n_workers is not None:
        return config.n_workers
    from ..maths.backend import gpu_count
    return config.cpus + gpu_count()


def _jupyter_root() -> tuple[Path, str] | None:
    """(root dir, base URL) of the Jupyter server whose root holds this kernel's working
    directory (the notebook's folder): the innermost one `list_running_servers` knows."""
    try:
        from jupyter_server.serverapp import list_running_servers
    except ImportError:
        return None
    cwd = Path.cwd().resolve()
    best = None
    try:
        for info in list_running_servers():
            root = Path(info.get("root_dir") or info.get("notebook_dir") or "/").resolve()
            if cwd.is_relative_to(root) and (best is None or len(root.parts) > len(best[0].parts)):
                best = (root, info.get("base_url") or "/")
    except Exception:   # a stale or unreadable server file: no links rather than an error
        return None
    return best


def lab_href(path: str | os.PathLike, directory: bool = False) -> str:
    """A link to a file (or a folder) that a browser showing this kernel's JupyterLab follows.

    Inside the Jupyter server's root: `<base>files/<path>` for a file (served as is:
    report.html opens as a page) and `<base>lab/tree/<path>` for a folder (the file
    browser). The server is the one whose root holds the kernel's working directory;
    JUPYTERHUB_SERVICE_PREFIX (Binder, JupyterHub) is the base when no server file is
    found. Elsewhere: a file:// URI.
    """
    from urllib.parse import quote

    p = Path(path).resolve()
    found = _jupyter_root()
    if found is None and os.environ.get("JUPYTERHUB_SERVICE_PREFIX"):
        found = (Path.home().resolve(), os.environ["JUPYTERHUB_SERVICE_PREFIX"])
    if found is not None and p.is_relative_to(found[0]):
        base = found[1] if found[1].endswith("/") else found[1] + "/"
        return f"{base}{'lab/tree' if directory else 'files'}/{quote(p.relative_to(found[0]).as_posix())}"
    return p.as_uri()


def describe_calibration(cal: Any, error: float | None, table: pd.DataFrame) -> str:
    """The cost model's state in sentences (the scaling tab), as HTML.

    Args:
        cal: a `costmodel.Calibration`.
        error: mean relative error of its predictions on the measured points.
        table: the sweep table it was fitted on.
    """
    n = len(table)
    ws = ", ".join(str(int(w)) for w in table["workers"]) if n else "-"
    parts = [f"The cost model was fitted on {n} run{'s' if n != 1 else ''} (on {ws} workers)."]
    if n and F.table_simulated(table) is True:
        parts.append("They were simulated: it was fitted to their virtual times, so it restates what the "
                     "simulated device and network profiles imply (not a measurement of this machine).")
    for kind, (c0, c1) in cal.compute.items():
        parts.append(f"A {kind.upper()} worker computes one sample in {c1 * 1e6:.3g} µs, plus "
                     f"{c0 * 1e3:.3g} ms per step.")
    if cal.overhead_s:
        parts.append(f"Each step also spends {cal.overhead_s * 1e3:.3g} ms outside compute and communication.")
    bw = f"{1 / cal.beta / 1e9:.3g} GB/s" if cal.beta > 0 else "unlimited bandwidth"
    how = {"fit": "both fitted to the measured communication times",
           "beta": "the bandwidth fitted to the measured communication times, the latency kept at its "
                   f"default for {cal.network} (the runs could not tell the two apart)",
           "default": f"both the defaults for {cal.network}: the runs measured no communication"}.get(cal.how, cal.how)
    parts.append(f"A message costs {cal.alpha * 1e6:.3g} µs of latency (alpha) and {cal.beta * 1e9:.3g} ns "
                 f"per byte (beta, {bw}): {how}. The model has {cal.n_params:,} parameters of 4 bytes.")
    if error is not None and math.isfinite(error):
        parts.append(f"On the measured points its predictions are off by {error:.0%} on average.")
    short = int(F.too_short(table).sum()) if n else 0
    if short:
        parts.append(f"<b>{short} of {n} runs lasted under {F.MIN_MEASURE_S:g} s</b> (ringed in the figure): "
                     "start-up and the first steps weigh on them, so their throughput is not a measurement. "
                     "Run more epochs before reading their efficiency.")
    return " ".join(parts)


# ------------------------------------------------------------------------------ figures
READY_WAIT_S = 30.0   # a shown figure no view reports in for gets its edits after this (no browser)
DRAWN_WAIT_S = 5.0    # a view that has not said it drew the last edit gets the next one after this
_REPORTS = ["_js2py_traceDeltas"]   # plotly's view sets it after its first draw


class FigureSlot:
    """A FigureWidget in its own Box, edited only once its frontend model takes edits.

    A FigureWidget's frontend model sets up plotly's code asynchronously (it waits for
    plotly's module: `plotly_widget`); an edit that arrives before that (traces added
    or deleted, a relayout) changes the model's traits with nobody listening, so a view
    drawn later shows the figure without it, and later edits address traces it does
    not have. So, once the figure has been shown:

    - edits queue until a view reports in: plotly's view draws only after plotly's
      model code is set up, and reports right after its first draw; queued edits are
      then applied in order, and later ones at once;
    - with no report READY_WAIT_S after showing (papermill, no browser), or when
      forced (a run's last flush), edits apply anyway, so the Python figure is whole.

    - flow control: after that, a figure gets its next edit only once its view says it
      has drawn the last one (`plotly_widget`'s `_wb_drawn`), or DRAWN_WAIT_S later;
      edits made meanwhile queue and go out together. A browser slower than the kernel's
      redraws (a busy machine) then sees fewer, larger updates instead of a growing
      backlog that delays everything behind it, a Stop click's reply included.

    Never shown (tests, headless use), edits apply at once. Thread-safe: the flusher
    edits from its thread while reports arrive on the kernel's.
    """

    def __init__(self, fig: Any, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        # A block box: plotly sizes the figure to its parent's width (a flex box's child has
        # none of its own, and plotly then falls back to 700 px, wider than the plot column).
        self.box = widgets.Box([fig], layout=widgets.Layout(display="block", width="100%"))
        self._lock = threading.RLock()
        self._pending: list[Callable[[Any], Any]] = []
        self._shown = False
        self._attach(fig)

    @property
    def fig(self) -> Any:
        """The current FigureWidget (`replace` changes it)."""
        return self._fig

    @property
    def pending(self) -> int:
        """Edits waiting for the frontend."""
        return len(self._pending)

    @property
    def viewed(self) -> bool:
        """Whether a view has reported in since the figure was shown."""
        return self._viewed

    def _attach(self, fig: Any) -> None:
        self._fig = fig
        self._since = self._clock()            # when its whole state last went out
        self._viewed = False
        self._sent_edit, self._sent_at = 0, 0.0   # the last trace edit sent to a view, and when
        fig.observe(self._on_report, names=_REPORTS)
        if fig.has_trait("_wb_drawn"):
            fig.observe(self._on_drawn, names=["_wb_drawn"])

    def shown(self) -> None:
        """The figure is being displayed: send its whole state again (`figures.sync_widget`)
        and hold later edits until a view reports in."""
        with self._lock:
            F.sync_widget(self._fig)
            self._shown, self._since = True, self._clock()

    def ready(self) -> bool:
        """Whether an edit made now reaches the frontend's copy of the figure, and its view
        has drawn the last one."""
        if not self._shown:
            return True
        now = self._clock()
        if not self._viewed:
            return now - self._since >= READY_WAIT_S
        drawn = getattr(self._fig, "_wb_drawn", None)
        return drawn is None or drawn >= self._sent_edit or now - self._sent_at >= DRAWN_WAIT_S

    def edit(self, fn: Callable[[Any], Any]) -> None:
        """Apply `fn(fig)` (inside one batch_update) now, or once the frontend is ready;
        edits apply in the order given."""
        with self._lock:
            self._pending.append(fn)
            if self.ready():
                self._apply()

    def flush(self) -> None:
        """Apply queued edits now, ready or not (a run's last flush)."""
        with self._lock:
            self._apply()

    def replace(self, fig: Any) -> None:
        """Show `fig` instead (its whole state goes out with it); queued edits apply to it."""
        with self._lock:
            self._fig.unobserve(self._on_report, names=_REPORTS)
            if self._fig.has_trait("_wb_drawn"):
                self._fig.unobserve(self._on_drawn, names=["_wb_drawn"])
            self._attach(fig)
            self.box.children = (fig,)

    def _apply(self) -> None:
        if not self._pending:
            return
        edits, self._pending = self._pending, []
        before = getattr(self._fig, "_last_trace_edit_id", 0)
        with self._fig.batch_update():
            for fn in edits:
                fn(self._fig)
        after = getattr(self._fig, "_last_trace_edit_id", 0)
        if after != before:                     # traces changed: the view will say when it drew them
            self._sent_edit, self._sent_at = after, self._clock()

    def apply_if_ready(self) -> None:
        """Apply queued edits if the view can take them now (the flusher calls it)."""
        with self._lock:
            if self._pending and self.ready():
                self._apply()

    def _on_drawn(self, change: dict) -> None:
        if self._pending and (change.get("new") or 0) >= self._sent_edit:
            with self._lock:
                if self.ready():
                    self._apply()

    def _on_report(self, change: dict) -> None:
        if self._viewed or not change.get("new"):
            return
        with self._lock:
            self._viewed = True
            self._apply()


class _Figures(Mapping):
    """FIGURE_KEYS -> the current FigureWidget of each slot (`FigureSlot.replace` changes it)."""

    def __init__(self, slots: dict[str, FigureSlot]):
        self._slots = slots

    def __getitem__(self, key: str) -> Any:
        return self._slots[key].fig

    def __iter__(self) -> Iterator[str]:
        return iter(self._slots)

    def __len__(self) -> int:
        return len(self._slots)


# ------------------------------------------------------------------------------ runs
class _Buffer:
    """Records handed over from the training thread; taking them is atomic."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[dict] = []

    def add(self, records: list[dict]) -> None:
        with self._lock:
            self._items.extend(records)

    def take(self) -> list[dict]:
        with self._lock:
            items, self._items = self._items, []
        return items


@dataclass
class _Run:
    """One run started from the dashboard, while it lasts."""

    index: int
    config: RunConfig
    total_steps: int
    live: F.LiveState
    buffer: _Buffer = field(default_factory=_Buffer)
    done: threading.Event = field(default_factory=threading.Event)
    t0: float = field(default_factory=time.monotonic)   # Run pressed
    phase: str = "starting"            # "starting: <what>" until the first step, then "running"
    pending: list = field(default_factory=list)          # records taken, not drawn yet
    lock: threading.Lock = field(default_factory=threading.Lock)   # pending: status thread -> draw thread
    samples: int = 0
    steps_seen: int = 0                # highest step + 1
    epoch: float = 0.0
    first_time: float | None = None    # record clock of the first step's start
    last_time: float = 0.0             # record clock of the newest step
    first_seen: float | None = None    # monotonic time the first step arrived here
    clock: collections.deque = field(default_factory=collections.deque)   # (record time, step, samples)
    redraws: int = 0
    redraw_log: list = field(default_factory=list)       # (start, end) of each timed redraw, monotonic
    plot_cpu_s: float = 0.0            # CPU time the flusher spent drawing this run
    result: Any = None
    error: BaseException | None = None

    def take(self) -> None:
        """Move the buffer's records to `pending`, counting steps, samples and their clock."""
        records = self.buffer.take()
        if not records:
            return
        with self.lock:
            self.pending.extend(records)
        newest = None
        for r in records:
            if r.get("kind") != "step":
                continue
            self.samples += r.get("samples", 0) or 0
            step, t = r.get("step", 0), float(r.get("time", 0.0))
            if step + 1 > self.steps_seen:
                self.steps_seen = step + 1
            self.epoch = max(self.epoch, float(r.get("epoch", 0.0) or 0.0))
            if self.first_time is None:
                busy = sum(float(r.get(c, 0.0) or 0.0) for c in F.COMPONENTS)
                self.first_time, self.first_seen = t - busy, time.monotonic()
                self.phase = "running"
            if t >= self.last_time:
                self.last_time, newest = t, t
        if newest is not None:
            self.clock.append((newest, self.steps_seen, self.samples))
            while len(self.clock) > 2 and newest - self.clock[1][0] >= RATE_WINDOW_S:
                self.clock.popleft()

    def rates(self) -> tuple[float, float] | None:
        """(steps/s, samples/s) over the last RATE_WINDOW_S of the run's clock; None
        before two points a tenth of a second apart have arrived."""
        if len(self.clock) < 2:
            return None
        (t0, s0, n0), (t1, s1, n1) = self.clock[0], self.clock[-1]
        if t1 - t0 < 0.1:
            return None
        return (s1 - s0) / (t1 - t0), (n1 - n0) / (t1 - t0)


class Dashboard:
    """Controls for every knob, Run / Stop, live plots, a runs table and a scaling tab.

    Args:
        cluster: passed to `workbench.run` (a Client, a cluster, an address, "threads";
            default: the session's local cluster, `workbench.client()`).
        config: the starting values (default `RunConfig(algorithm="sync_sgd")`).
        out: a folder; each run is then saved to out/run-<k>-<algorithm>.

    Usable without a frontend: `config`, `run()`, `stop()`, `wait(timeout)`,
    `sweep(workers, mode)`, `history`, `runs_table()`, `status_text`.
    """

    def __init__(self, cluster: Any = None, config: RunConfig | None = None, out: str | os.PathLike | None = None):
        self.cluster = cluster
        self.out = None if out is None else Path(out)
        self._base = (config or RunConfig(algorithm=DEFAULT_ALGORITHM)).replace(out=None)
        self.history: list[Any] = []            # RunResults of this session, in order
        self.plot_errors: list[str] = []        # live-plot failures (shown in the status line too)
        self.last_error: BaseException | None = None
        self.last_plot_cpu_s = 0.0              # CPU seconds the last run's live plots took
        self.last_redraws = 0                   # how often the last run's figures were redrawn
        self.last_redraw_log: list[tuple[float, float]] = []   # ... and when: (start, end), monotonic
        self.status_log: list[tuple[float, str]] = []   # (seconds since Run, status line) of the last run
        self.sweep_table = pd.DataFrame()
        self.status_text = ""
        self.dask_link: str | None = None
        self._stop = threading.Event()
        self._active: threading.Thread | None = None   # the flusher of a run, or a sweep's thread
        self._current: _Run | None = None
        self._last: Any = None
        self._runs_started = 0
        self._syncing = False
        self._displayed = False                          # the dashboard has been shown in a frontend
        self._shown_config: RunConfig | None = None     # the config the preview and status show
        self._sweep_results: list[Any] = []
        self._progress_kinds: set[bool] = set()         # simulated or not, of the runs in the progress plots
        self._time_axes: dict[str, bool | str] = {}     # live figure -> what its time axis says (mark_virtual)
        self.predicted: pd.DataFrame | None = None      # the last sweep's cost-model curves
        self.calibration: Any = None                    # ... and the calibration behind them
        self._build()

    # ------------------------------------------------------------------ widgets
    def _build(self) -> None:
        base = self._base
        self.controls: dict[str, Any] = {}
        groups: dict[str, list] = {g: [] for g in GROUP_TITLES}
        for c in CONTROLS:
            w = _tooltip_on_label(c.make(c.from_field(getattr(base, c.field))))
            w.observe(self._on_change, names="value")
            self.controls[c.field] = w
            groups[c.group].append(w)
        left_out = "; ".join(f"<code>{k}</code>: {html.escape(v)}" for k, v in LEFT_TO_CODE.items())
        sections = []
        for g, ws in groups.items():
            if ws:
                sections.append(widgets.HTML(f"<b>{GROUP_TITLES[g]}</b>", layout=widgets.Layout(margin="6px 0 0 0")))
                sections.extend(ws)
        sections.append(widgets.HTML(f"<small>Hover a control for what it means. Left to code: {left_out}.</small>",
                                     layout=widgets.Layout(width=CONTROL_WIDTH)))

        self.run_button = widgets.Button(description="Run", button_style="success", icon="play",
                                         tooltip="train the controls' config; live plots follow")
        self.stop_button = widgets.Button(description="Stop", button_style="danger", icon="stop", disabled=True,
                                          tooltip="end the run within about a second; it is kept as stopped")
        self.clear_button = widgets.Button(description="Clear plots", tooltip="forget earlier runs' curves")
        self.run_button.on_click(lambda _: self.run())
        self.stop_button.on_click(lambda _: self.stop())
        self.clear_button.on_click(lambda _: self.clear())
        self.progress = widgets.FloatProgress(value=0.0, min=0.0, max=1.0, layout=widgets.Layout(width="240px"))
        self.status = widgets.HTML(value="")
        self.links = widgets.HTML(value="")
        self.smoothing = widgets.FloatSlider(value=DEFAULT_SMOOTHING, min=0.0, max=0.99, step=0.01,
                                             description="smoothing", readout_format=".2f",
                                             tooltip="exponential moving average of the train-loss line "
                                                     "(0: raw points only; the raw points stay, faded)",
                                             style={"description_width": "70px"},
                                             layout=widgets.Layout(width="330px", flex="0 0 auto"))
        self.smoothing.observe(self._on_smoothing, names="value")
        self.log_loss = widgets.Checkbox(value=True, description="log loss", indent=False,
                                         tooltip="the loss axis on a log scale (a warm-up spike flattens a linear one)",
                                         layout=widgets.Layout(width="100px", flex="0 0 auto"))
        self.log_loss.observe(self._on_log_loss, names="value")

        self._slots = {k: FigureSlot(F.live_base(k, _workers_of(base) if k == "breakdown" else 1))
                       for k in F.FIGURE_KEYS}
        for key in ("progress_time", "progress_epoch"):
            self._slots[key].fig.layout.height = 460
            F.set_loss_scale(self._slots[key].fig, self.log_loss.value)
        for key in ("throughput", "lr"):
            self._slots[key].fig.layout.height = 300
        self.figures: Mapping[str, Any] = _Figures(self._slots)
        self._lineage_box = self._slots["lineage"].box    # shown for ltfb only
        self._plot_boxes = [
            widgets.HBox([self.log_loss, self.smoothing,
                          widgets.HTML("<small>A legend entry shows or hides its run (double-click: only "
                                       "that run); drag to zoom, double-click to reset.</small>")],
                         layout=widgets.Layout(align_items="center", flex_flow="row wrap")),
            self._slots["progress_time"].box, self._slots["throughput"].box, self._slots["breakdown"].box,
            self._slots["lr"].box, self._slots["progress_epoch"].box, self._lineage_box]
        self.plots = widgets.VBox([widgets.HTML(
            "<p style='color:#666'>Live plots appear here when a run starts: loss and test accuracy, "
            "throughput per worker, where each worker's time goes, the lr actually used.</p>")],
            layout=widgets.Layout(flex="1 1 auto", min_width="0"))

        cpus = max(1, os.cpu_count() or 1)
        default_ws = ",".join(str(w) for w in POWERS_OF_TWO if w <= cpus) or "1"
        self.sweep_workers = widgets.Text(value=default_ws, description="workers",
                                          tooltip="worker counts, comma-separated: one run each",
                                          style={"description_width": "60px"}, layout=widgets.Layout(width="200px"))
        self.sweep_mode = widgets.ToggleButtons(options=["strong", "weak"], value="strong",
                                                tooltips=["strong: the same global batch split over more workers",
                                                          "weak: the same batch per worker (global batch grows)"],
                                                style={"button_width": "64px"},
                                                layout=widgets.Layout(width="auto"))
        from ..analysis.costmodel import NETWORKS
        self.sweep_network = widgets.Dropdown(options=list(NETWORKS), value="10GbE", description="network",
                                              tooltip="a network to predict for, besides the calibrated one",
                                              style={"description_width": "60px"}, layout=widgets.Layout(width="200px"))
        self.sweep_button = widgets.Button(description="Sweep", button_style="info", icon="line-chart",
                                           tooltip="run the controls' config on each worker count")
        self.sweep_button.on_click(lambda _: self.sweep())
        self._scaling_slot = FigureSlot(F.scaling_figure(
            pd.DataFrame(columns=["workers", "samples_per_s", "efficiency"]), live=True))
        self.sweep_html = widgets.HTML("", layout=widgets.Layout(width="100%"))
        self.model_html = widgets.HTML("", layout=widgets.Layout(width="100%"))
        scaling = widgets.VBox([
            widgets.HTML("Run the controls' config on each worker count; the figure gains a point as each "
                         "run ends, then the cost model's predictions (calibrated on these runs, and for the "
                         "network picked) are drawn over them."),
            widgets.HBox([self.sweep_workers, widgets.Label("mode"), self.sweep_mode, self.sweep_network,
                          self.sweep_button], layout=widgets.Layout(flex_flow="row wrap", align_items="center")),
            self.model_html, self._scaling_slot.box, self.sweep_html], layout=widgets.Layout(width="100%"))
        self._scaling_slot.box.layout.display = "none"      # no empty axes before the first sweep

        self.runs_sort = widgets.Dropdown(options=["run"], value="run", description="sort by",
                                          tooltip="the column to sort the runs by",
                                          style={"description_width": "50px"}, layout=widgets.Layout(width="260px"))
        self.runs_descending = widgets.ToggleButton(value=False, description="descending", icon="sort",
                                                    tooltip="largest first", layout=widgets.Layout(width="120px"))
        self.runs_sort.observe(lambda _: self._show_runs(), names="value")
        self.runs_descending.observe(lambda _: self._show_runs(), names="value")
        self.runs_html = widgets.HTML(value="<i>no runs yet</i>", layout=widgets.Layout(width="100%"))
        runs = widgets.VBox([widgets.HBox([self.runs_sort, self.runs_descending]), self.runs_html],
                            layout=widgets.Layout(width="100%"))

        self._preview_slot: FigureSlot | None = None
        self._refresh()                                   # validates, says "ready" or what is wrong
        self._preview_slot = FigureSlot(F.as_widget(self._preview_figure(self._shown_config)))
        self._preview_slot.box.layout.width = CONTROL_WIDTH
        controls = widgets.VBox([*sections, self._preview_slot.box],
                                layout=widgets.Layout(width="370px", min_width="370px", max_height="820px",
                                                      overflow="hidden auto", padding="0 8px 0 0"))
        run_tab = widgets.HBox([controls, self.plots], layout=widgets.Layout(width="100%"))
        self.tabs = widgets.Tab(children=[run_tab, scaling, runs])
        self.tabs.titles = ("run", "scaling", "runs")
        bar = widgets.HBox([self.run_button, self.stop_button, self.clear_button, self.progress, self.links],
                           layout=widgets.Layout(align_items="center", flex_flow="row wrap"))
        self.widget = widgets.VBox([bar, self.status, self.tabs])

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        self._displayed = True
        for slot in self._all_slots():        # see figures.sync_widget: nested FigureWidgets
            if slot is self._preview_slot or (slot is self._scaling_slot and self._scaling_slot.box.layout.display
                                              != "none") or (slot in self._slots.values() and self._plots_live()):
                slot.shown()                  # show stale state unless it is sent again
        return self.widget._repr_mimebundle_(**kwargs)

    def _plots_live(self) -> bool:
        return self.plots.children and self.plots.children[0] is self._plot_boxes[0]

    def _show_plots(self) -> None:
        """Put the live figures on the page (the first run); until then there is nothing to plot."""
        if self._plots_live():
            return
        if self._displayed:
            for slot in self._slots.values():
                slot.shown()
        self.plots.children = tuple(self._plot_boxes)

    @property
    def preview(self) -> Any:
        """The lr-schedule preview FigureWidget."""
        return None if self._preview_slot is None else self._preview_slot.fig

    @property
    def scaling_figure(self) -> Any:
        """The scaling tab's FigureWidget."""
        return self._scaling_slot.fig

    def _all_slots(self) -> list[FigureSlot]:
        return [s for s in (self._preview_slot, self._scaling_slot, *self._slots.values()) if s is not None]

    def _figure_widgets(self) -> list[Any]:
        return [s.fig for s in self._all_slots()]

    # ------------------------------------------------------------------ config
    def _values(self) -> dict[str, Any]:
        values = {c.field: c.to_field(self.controls[c.field].value) for c in CONTROLS}
        if not values.get("simulate"):
            # The simulated cluster's knobs are valid only with it (RunConfig refuses them
            # otherwise): off, they take their defaults; their controls keep what was set
            # for when the toggle goes on again.
            values.update({name: RunConfig.model_fields[name].default for name in SIM_FIELDS})
        return values

    @property
    def config(self) -> RunConfig:
        """The RunConfig the controls describe; raises ConfigError for a bad combination."""
        return self._base.replace(**self._values())

    @config.setter
    def config(self, config: RunConfig) -> None:
        self._base = config.replace(out=None)
        self._syncing = True
        try:
            for c in CONTROLS:
                w, value = self.controls[c.field], c.from_field(getattr(config, c.field))
                if isinstance(w, widgets.SelectionSlider) and value not in w.options:
                    w.options = _sorted_options(tuple(w.options), value)
                w.value = value
        finally:
            self._syncing = False
        self._refresh()

    def _on_change(self, change: dict) -> None:
        if self._syncing:
            return
        changed = next((name for name, w in self.controls.items() if w is change.get("owner")), None)
        if changed is not None:
            self._fill_dependents(changed)
        self._refresh()

    def _fill_dependents(self, changed: str) -> None:
        """Give the fields that `changed`'s new value makes required a value that passes
        validation (`DEPENDENTS`), without a refresh per field."""
        rules = [d for d in DEPENDENTS if changed in d.triggers]
        if not rules:
            return
        values = {c.field: c.to_field(self.controls[c.field].value) for c in CONTROLS}
        self._syncing = True
        try:
            for d in rules:
                if d.needed(values):
                    c = next(c for c in CONTROLS if c.field == d.field)
                    values[d.field] = d.default(values)
                    w, value = self.controls[d.field], c.from_field(values[d.field])
                    if isinstance(w, widgets.SelectionSlider) and value not in w.options:
                        w.options = _sorted_options(tuple(w.options), value)
                    w.value = value
        finally:
            self._syncing = False

    def _show_relevant(self) -> None:
        """Show the controls that apply to what the controls say now, valid or not (a
        control that would fix an invalid combination must be on the page)."""
        values = {**self._base.model_dump(), **self._values()}
        raw = RunConfig.model_construct(**values)      # unvalidated: `applies` reads plain fields
        for name, applies in RELEVANT.items():
            try:
                show = applies(raw)
            except Exception:         # a half-typed value: keep the control visible
                show = True
            self.controls[name].layout.display = None if show else "none"
        # "auto" (detect the GPUs) is no choice on a simulated cluster, which counts them
        gpus = self.controls["gpus"]
        options = list(GPU_COUNTS) if values.get("simulate") else [("auto", "auto"), *GPU_COUNTS]
        if [v for _, v in gpus._options_full] != [v for _, v in options]:
            was, self._syncing = self._syncing, True
            try:
                value = gpus.value
                gpus.options = options
                gpus.value = value if value != "auto" or not values.get("simulate") else 0
            finally:
                self._syncing = was

    def _refresh(self) -> RunConfig | None:
        """Validate the controls; redraw the schedule preview; say what is wrong, if anything.

        Leaves the status line alone when the config did not change (a frontend echoing
        a control's value back must not hide the last run's result)."""
        self._show_relevant()
        try:
            cfg = self.config
            if cfg == self._shown_config:
                return cfg
            plan = Problem.from_config(cfg).plan   # the run's own plan, built once (preflight reuses it)
        except (ConfigError, ValueError) as exc:   # DataError and schedule errors are ValueErrors
            self._shown_config = None
            self._set_status(f"error: {exc}", error=True)
            self._set_buttons(self.running)
            return None
        self._shown_config = cfg
        self.controls["alpha"].show_resolved(cfg.resolved_alpha(max(1, _workers_of(cfg))))
        self._lineage_box.layout.display = "block" if cfg.algorithm == "ltfb" else "none"
        if self._preview_slot is not None:
            def redraw(fig: Any, series: list = F.planned_series(plan), title: str = plan.schedule_text) -> None:
                F.extend_series(fig, series)
                fig.layout.title.text = f"lr schedule: {title}"
            self._preview_slot.edit(redraw)
        if not self.running:
            self._set_buttons(False)
            where = f", on {_workers_of(cfg)} simulated workers" if cfg.simulate else ""
            self._set_status(f"ready: {cfg.algorithm} on {cfg.dataset}, {plan.total_steps} steps "
                             f"of {cfg.batch_size} samples{where}")
        return cfg

    @staticmethod
    def _preview_figure(cfg: RunConfig | None) -> Any:
        """The schedule preview as a static figure (the widget is made from it once)."""
        fig = F.schedule_figure(Problem.from_config(cfg).plan) if cfg is not None else F._lr_base()
        title = f"lr schedule: {fig.layout.title.text}" if cfg is not None else "lr schedule"
        return fig.update_layout(height=240, margin={"t": 50, "b": 30, "l": 50, "r": 10}, title=title,
                                 title_font_size=11, showlegend=False)

    def _set_status(self, text: str, error: bool = False) -> None:
        self.status_text = text
        color = "#b00020" if error else "#333"
        self.status.value = f'<span style="color:{color}">{html.escape(text, quote=False)}</span>'

    def _set_dask_link(self, client: Any) -> None:
        from ..execution.cluster import dashboard_link
        link = dashboard_link(client) if client is not None and not isinstance(client, str) else None
        if link and link != self.dask_link:
            self.dask_link = link
            self.links.value = (f'<a href="{html.escape(link)}" target="_blank" rel="noopener" '
                                f'title="the Dask dashboard of the cluster the runs use: tasks, workers, memory">'
                                f'Dask dashboard &#8599;</a>')

    # ------------------------------------------------------------------ running
    @property
    def running(self) -> bool:
        """Whether a run or a sweep is in progress."""
        return self._active is not None and self._active.is_alive()

    def _config_to_start(self) -> RunConfig | None:
        """The controls' config if nothing is running and it is valid; else None, with
        the reason in the status line."""
        if self.running:
            self._set_status("busy: a run or sweep is in progress; Stop it first", error=True)
            return None
        return self._refresh()

    def run(self) -> bool:
        """Start a run of the controls' config in the background (the Run button).

        Returns:
            True if it started; False if the config is invalid or something is running
            (the status line says why).
        """
        cfg = self._config_to_start()
        if cfg is None:
            return False
        index = self._runs_started
        self._runs_started += 1
        if self.out is not None:
            cfg = cfg.replace(out=str(free_run_dir(self.out, f"run-{index + 1}-{cfg.algorithm}")))
        state = _Run(index=index, config=cfg, total_steps=Problem.from_config(cfg).plan.total_steps,
                     live=F.LiveState(label=f"#{index + 1} {cfg.algorithm} P={_workers_of(cfg)} B={cfg.batch_size}",
                                      color=F.run_color(index), n_workers=_workers_of(cfg)))
        self._show_plots()
        self._reset_run_figures(state)
        self._stop.clear()
        self._current = state
        self.status_log = []
        self._set_buttons(running=True)
        self._set_status(f"starting {state.live.label} ...")
        trainer = threading.Thread(target=self._train, args=(state,), name="workbench-dashboard-run", daemon=True)
        flusher = threading.Thread(target=self._flush_loop, args=(state,), name="workbench-dashboard-plots",
                                   daemon=True)
        self._active = flusher
        trainer.start()
        flusher.start()
        return True

    def stop(self) -> None:
        """Ask the run (or sweep) to stop; it ends within about a second, as "stopped"."""
        self._stop.set()
        if self.running:
            self._set_status("stopping ...")

    def wait(self, timeout: float | None = None) -> Any:
        """Block until the current run or sweep has ended and the plots are final.

        Args:
            timeout: seconds; None waits as long as it takes.
        Returns:
            The run's RunResult (None if it failed: see the status line and
            `last_error`), or a sweep's table.
        Raises:
            TimeoutError: still running after `timeout` seconds.
            KeyboardInterrupt: the kernel was interrupted; the run was asked to stop first.
        """
        thread = self._active
        if thread is not None:
            try:
                thread.join(timeout)
            except KeyboardInterrupt:   # interrupting the kernel while waiting stops the run too
                self.stop()
                thread.join(10)
                raise
            if thread.is_alive():
                raise TimeoutError(f"timeout: still running after {timeout} s (dashboard.stop() ends it)")
        return self._last

    def clear(self) -> None:
        """Forget earlier runs' curves in the loss / accuracy plots (history stays)."""
        self._progress_kinds = set()
        for key in ("progress_time", "progress_epoch"):
            self._slots[key].edit(_clear_traces)

    def _on_log_loss(self, change: dict) -> None:
        weight = float(self.smoothing.value)
        for key in ("progress_time", "progress_epoch"):
            self._slots[key].edit(functools.partial(F.set_loss_scale, log=bool(change["new"])))
            self._slots[key].edit(functools.partial(F.apply_smoothing, weight=weight))   # log or linear mean

    def _on_smoothing(self, change: dict) -> None:
        for key in ("progress_time", "progress_epoch"):
            self._slots[key].edit(functools.partial(F.apply_smoothing, weight=float(change["new"])))

    def _set_buttons(self, running: bool) -> None:
        invalid = self._shown_config is None     # the controls describe a bad config
        self.run_button.disabled = running or invalid
        self.sweep_button.disabled = running or invalid
        self.stop_button.disabled = not running

    def _reset_run_figures(self, state: _Run) -> None:
        """Per-run figures start empty; the breakdown gets one row per worker."""
        n = max(1, min(state.live.n_workers, F.MAX_WORKER_ROWS))
        breakdown = self._slots["breakdown"]
        breakdown.flush()                     # the layout checked below must be the current one
        if len(breakdown.fig.layout.annotations or ()) != n + 1:
            breakdown.replace(F.live_base("breakdown", state.live.n_workers,   # a whole new state
                                          simulated=state.config.simulate))
            self._time_axes["breakdown"] = state.config.simulate
        for key in ("throughput", "breakdown", "lr", "lineage"):
            self._slots[key].edit(_clear_traces)
        # Time axes in virtual seconds for a simulated run; the progress plots keep earlier
        # runs' curves, so they say "virtual for simulated runs" once both kinds are drawn.
        simulated = state.config.simulate
        self._progress_kinds.add(simulated)
        overlaid = "mixed" if len(self._progress_kinds) > 1 else simulated
        for key, virtual in (("throughput", simulated), ("breakdown", simulated), ("progress_time", overlaid)):
            if self._time_axes.get(key, False) != virtual:     # an edit only when the clock changes
                self._time_axes[key] = virtual
                self._slots[key].edit(functools.partial(F.mark_virtual, virtual=virtual))

    def _train(self, state: _Run) -> None:
        from .. import api
        try:
            cluster = self.cluster
            cfg = state.config
            if cfg.simulate:      # its own virtual cluster, in this process: no Dask cluster
                cluster = None
                state.phase = f"starting: a simulated cluster of {_workers_of(cfg)} virtual worker(s)"
            elif _in_process(cfg):
                state.phase = "starting: loading data"
            elif cluster is None:
                from ..execution.cluster import client, session_warm
                if not session_warm(cfg.cpus, cfg.gpus, cfg.scheduler):
                    state.phase = "starting: a local Dask cluster (the session's first run)"
                cluster = client(cfg.cpus, cfg.gpus, cfg.scheduler)      # the session's, found by dask-labextension
            from ..execution.engine import transport_for  # the one choice: simulated, threads or Dask
            transport = transport_for(cfg, cluster)   # sgd: threads, in this process
            if getattr(transport, "name", None) == "dask":
                self._set_dask_link(transport.client)
                state.phase = f"starting: placing data on {_workers_of(cfg)} worker(s) and starting their loops"
            state.result = api.run(cfg, cluster=transport, on_record=state.buffer.add, should_stop=self._stop.is_set,
                                   progress=False)  # its own plots
        except BaseException as exc:  # shown in the status line; the flusher reports it
            state.error = exc
        finally:
            state.done.set()

    def _flush_loop(self, state: _Run) -> None:
        """The status line, FLUSH_S times a second; the figures are redrawn on a thread of
        their own (`_draw_loop`), so a slow redraw never holds the status line up."""
        drawer = threading.Thread(target=self._draw_loop, args=(state,), name="workbench-dashboard-draw",
                                  daemon=True)
        drawer.start()
        while True:
            finished = state.done.wait(FLUSH_S)
            state.take()
            if finished:
                break
            self._show_progress(state)
        drawer.join()
        self._flush(state, last=True)
        self._finish(state)

    def _draw_loop(self, state: _Run) -> None:
        """Redraw the live figures with the records taken so far: at least every
        MAX_REDRAW_S, more often while a redraw costs under FLUSH_BUDGET of a core."""
        next_draw = 0.0
        while not state.done.is_set():
            for slot in self._slots.values():     # edits held for a view that never said it drew
                slot.apply_if_ready()
            now = time.monotonic()
            if now < next_draw or not state.pending:
                state.done.wait(min(FLUSH_S / 2, max(0.0, next_draw - now)) or FLUSH_S / 2)
                continue
            cost = self._flush(state)
            state.redraw_log.append((now, time.monotonic()))
            next_draw = now + min(MAX_REDRAW_S, max(FLUSH_S, cost / FLUSH_BUDGET))

    def _flush(self, state: _Run, last: bool = False) -> float:
        """Draw the records taken so far; returns the CPU seconds it took."""
        cpu = time.thread_time()
        with state.lock:
            records, state.pending = state.pending, []
        try:
            if records:
                for key, series in F.live_series(records, state.live).items():
                    if series:
                        self._slots[key].edit(functools.partial(F.extend_series, series=series))
                weight = float(self.smoothing.value)
                if weight > 0:
                    for key in ("progress_time", "progress_epoch"):
                        self._slots[key].edit(functools.partial(F.apply_smoothing, weight=weight))
                state.redraws += 1
            if last:                  # the figures' Python state must be whole when a run ends
                for slot in self._slots.values():
                    slot.flush()
        except Exception as exc:      # a plotting bug must not end the run; it is reported
            self.plot_errors.append(f"{type(exc).__name__}: {exc}")
        cost = time.thread_time() - cpu
        state.plot_cpu_s += cost
        return cost

    def _show_progress(self, state: _Run) -> None:
        if state.done.is_set():
            return
        since_run = time.monotonic() - state.t0
        stopping = " stopping ..." if self._stop.is_set() else ""
        note = f" (plot errors: {self.plot_errors[-1]})" if self.plot_errors else ""
        if state.first_time is None:
            text = f"{state.phase} ... {since_run:.1f} s ({state.live.label}){stopping}{note}"
        else:
            done = min(1.0, state.steps_seen / max(1, state.total_steps))
            self.progress.value = done
            train_s = max(0.0, state.last_time - state.first_time)
            startup = state.first_seen - state.t0
            parts = [f"running {state.live.label}: step {state.steps_seen}/{state.total_steps} ({done:.0%})",
                     f"epoch {state.epoch:.2f}"]
            rates = state.rates()
            left = max(0, state.total_steps - state.steps_seen)
            if state.config.simulate:
                # the records' clock is virtual: the rate is the simulated cluster's, the
                # time left is the simulation's own (steps per wall second since the first)
                parts.append(f"{train_s:.3g} virtual s")
                if train_s > 0:    # over the whole run so far: virtual spans are too short for a window
                    parts.append(f"{state.samples / train_s:,.0f} samples per virtual s")
                wall = time.monotonic() - state.first_seen
                if wall > 0.5 and state.steps_seen:
                    parts.append(f"~{left * wall / state.steps_seen:,.0f} s left to simulate")
            else:
                parts.append(f"{train_s:.1f} s")
                if rates is not None:
                    steps_per_s, samples_per_s = rates
                    parts.append(f"{samples_per_s:,.0f} samples/s")
                    if steps_per_s > 0:
                        parts.append(f"~{left / steps_per_s:,.0f} s left")
            parts.append(f"start-up {startup:.1f} s")
            text = ", ".join(parts) + stopping + note
        self.status_log.append((round(since_run, 2), text))
        self._set_status(text)

    def _finish(self, state: _Run) -> None:
        self._current = None
        self._last = state.result
        self.last_plot_cpu_s = state.plot_cpu_s
        self.last_redraws = state.redraws
        self.last_redraw_log = list(state.redraw_log)
        if state.error is not None:
            self.last_error = state.error
            self._set_status(_error_text(state.error), error=True)
        else:
            r = state.result
            self.history.append(r)
            self._show_runs()
            s = r.summary
            acc = s.get("final_test_accuracy")
            startup = s.get("startup_s")   # the summary's (measure.timing), not when records first arrived here
            train_s = s.get("train_time_s", s.get("wall_time_s", 0)) or 0
            self.progress.value = min(1.0, s.get("steps", 0) / max(1, state.total_steps))
            if s.get("simulated"):
                took = f"{train_s:.3g} virtual s (simulated in {s.get('sim_wall_s', 0):.1f} s)"
                rate = f"{s.get('samples_per_s', 0):,.0f} samples per virtual s"
            else:
                took, rate = f"{train_s:.1f} s", f"{s.get('samples_per_s', 0):,.0f} samples/s"
            self._set_status(f"{s['status']}: {state.live.label}, {s.get('steps')} steps in {took}"
                             + (f" (start-up {startup:.1f} s)" if startup is not None else "")
                             + f", {rate}, "
                             f"test accuracy {'n/a' if acc is None else f'{acc:.4f}'}, "
                             f"comm fraction {s.get('comm_fraction', 0):.2f}"
                             + "".join(f"; {n}" for n in measure.notes(s)),   # busy machine, no steady state
                             error=s["status"] in ("failed", "diverged"))
        self._set_buttons(running=False)

    # ------------------------------------------------------------------ runs tab
    def runs_table(self) -> pd.DataFrame:
        """The session's runs, one row each: headline numbers, the hyper-parameters that
        differ between them, and each run's directory (the runs tab shows it)."""
        table = summary_table(self.history)
        if not len(table):
            return table
        diff = differing_config([r.summary.get("config") or {} for r in self.history])
        diff = diff.drop(columns=[c for c in diff.columns if c in table.columns or c == "out"])
        table = pd.concat([table.iloc[:, :1], diff, table.iloc[:, 1:]], axis=1)
        table["run_dir"] = [(r.summary.get("config") or {}).get("out") for r in self.history]
        return table

    def _show_runs(self) -> None:
        table = self.runs_table()
        if not len(table):
            return
        options = [c for c in table.columns if c != "run_dir"]
        if list(self.runs_sort.options) != options:
            keep = self.runs_sort.value if self.runs_sort.value in options else "run"
            self.runs_sort.options = options
            self.runs_sort.value = keep
        self.runs_html.value = runs_html(table, self.runs_sort.value, self.runs_descending.value)

    # ------------------------------------------------------------------ scaling
    def sweep(self, workers: Any = None, mode: str | None = None, network: str | None = None) -> bool:
        """Start a scaling sweep of the controls' config in the background (the Sweep button).

        Args:
            workers: worker counts (default: the scaling tab's, e.g. "1,2,4").
            mode: "strong" or "weak" (default: the tab's).
            network: a costmodel.NETWORKS name for the predicted curve (default: the tab's).
        Returns:
            True if it started (the status line says why not).
        """
        cfg = self._config_to_start()
        if cfg is None:
            return False
        from ..analysis.sweep import sweep_configs, worker_field
        ws = workers if workers is not None else [p for p in self.sweep_workers.value.replace(" ", "").split(",") if p]
        mode = mode or self.sweep_mode.value
        network = network or self.sweep_network.value
        try:
            configs = sweep_configs(cfg, ws, mode)          # every run checked before the first starts
        except (ConfigError, ValueError) as exc:
            self._set_status(f"error: {exc}", error=True)
            return False
        ws = [getattr(c, worker_field(cfg)) for c in configs]
        self.sweep_table = pd.DataFrame()
        self._sweep_results = []
        self.model_html.value = ""
        if self._scaling_slot.box.layout.display == "none":
            if self._displayed:
                self._scaling_slot.shown()
            self._scaling_slot.box.layout.display = "block"
        def reset(fig: Any, title: str = f"{mode} scaling: {cfg.algorithm}") -> None:
            fig.data = ()
            fig.layout.title.text = title
        self._scaling_slot.edit(reset)
        self._stop.clear()
        self._set_buttons(running=True)
        self._set_status(f"sweep: {cfg.algorithm} on {ws} workers ({mode}) ...")
        thread = threading.Thread(target=self._sweep_main, args=(cfg, ws, mode, network),
                                  name="workbench-dashboard-sweep", daemon=True)
        self._active = thread
        thread.start()
        return True

    def _on_sweep_result(self, row: dict, result: Any) -> None:
        """Called by the sweep after each run: one more point on the scaling figure."""
        from ..analysis.sweep import SWEEP_COLUMNS, add_scaling
        self._sweep_results.append(result)
        self.history.append(result)
        rows = self.sweep_table.to_dict("records") + [row]
        self.sweep_table = add_scaling(pd.DataFrame(rows, columns=list(SWEEP_COLUMNS)))
        self._scaling_slot.edit(functools.partial(F.update_scaling, table=self.sweep_table))
        if not row.get("simulated"):
            from ..execution.cluster import current_client
            self._set_dask_link(self.cluster if self.cluster is not None else current_client())
        self._show_runs()
        unit = "samples per virtual s" if row.get("simulated") else "samples/s"
        self._set_status(f"sweep: {len(rows)} run(s) done, last on {row['workers']} "
                         f"{'virtual ' if row.get('simulated') else ''}workers: "
                         f"{row['samples_per_s']:,.0f} {unit} ({row['status']})")

    def _sweep_main(self, cfg: RunConfig, ws: list[int], mode: str, network: str) -> None:
        from .. import api
        from ..analysis import costmodel
        try:
            table = api.sweep(cfg, ws, mode, cluster=None if cfg.simulate else self.cluster,
                              on_result=self._on_sweep_result, should_stop=self._stop.is_set, progress=False,
                              simulate=cfg.simulate)
            self.sweep_table = table
            self._last = table
            message = f"sweep done: {len(table)} run(s)"
            if len(table) and self._sweep_results:
                cal = costmodel.calibrate(self._sweep_results)
                top = max(64, 8 * max(ws))
                pred_ws = sorted({ws[0], *[w for w in POWERS_OF_TWO if ws[0] <= w <= top]})
                predicted = costmodel.predict(cal, cfg.algorithm, pred_ws, cfg.batch_size, mode,
                                              networks=[costmodel.MEASURED, network], tau=cfg.tau,
                                              round_size=cfg.round_size, tournament_size=cfg.tournament_size,
                                              optimizer=cfg.optimizer)
                _, error = costmodel.compare(cal, table, cfg.algorithm, tau=cfg.tau, round_size=cfg.round_size,
                                             tournament_size=cfg.tournament_size, optimizer=cfg.optimizer)
                self.predicted, self.calibration = predicted, cal
                self._scaling_slot.edit(functools.partial(F.update_scaling, table=table, predicted=predicted,
                                                          error=error))
                self.model_html.value = f"<p>{describe_calibration(cal, error, table)}</p>"
                message += f"; cost model fitted, prediction error on measured points {error:.0%} (details above the figure)"
            self._scaling_slot.flush()     # the figure's Python state is whole when a sweep ends
            self.sweep_html.value = runs_html(table, "workers", False)
            self._set_status(message)
        except BaseException as exc:
            self.last_error = exc
            self._last = None
            self._set_status(_error_text(exc), error=True)
        finally:
            self._set_buttons(running=False)


def runs_html(table: pd.DataFrame, sort: str = "run", descending: bool = False) -> str:
    """A full-width, horizontally scrollable HTML table of runs, sorted by `sort`; a
    `run_dir` column becomes links to the run's folder and its report.html."""
    df = table.copy()
    if sort in df.columns:
        df = df.sort_values(sort, ascending=not descending, kind="stable", na_position="last")
    links = df.pop("run_dir") if "run_dir" in df.columns else None
    th = "<th style='text-align:left;padding:2px 6px;border-bottom:1px solid #999'>"
    heads = [f"{th}{html.escape(str(c))}{' ▼' if c == sort and descending else ' ▲' if c == sort else ''}</th>"
             for c in df.columns]
    if links is not None:                  # right after the first column: no scrolling to reach it
        heads.insert(1, f"{th}files</th>")
    head = "".join(heads)
    rows = []
    for i, row in enumerate(df.itertuples(index=False)):
        cells = [f"<td style='padding:2px 6px;white-space:nowrap'>{html.escape(format_cell(v))}</td>" for v in row]
        if links is not None:
            d = links.iloc[i]
            if isinstance(d, str) and d:
                cells.insert(1, f"<td style='padding:2px 6px;white-space:nowrap'>"
                                f"<a href='{html.escape(lab_href(d, directory=True))}' target='_blank'>folder</a> · "
                                f"<a href='{html.escape(lab_href(Path(d) / 'report.html'))}' target='_blank'>"
                                f"report</a></td>")
            else:
                cells.insert(1, "<td style='padding:2px 6px'>-</td>")
        cells = "".join(cells)
        shade = " style='background:#f6f6f6'" if i % 2 else ""
        rows.append(f"<tr{shade}>{cells}</tr>")
    return (f"<div style='width:100%;overflow-x:auto'><table style='border-collapse:collapse;font-size:12px;"
            f"min-width:100%'><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>")


def _clear_traces(fig: Any) -> None:
    fig.data = ()


def _error_text(exc: BaseException) -> str:
    """One line for the status: the ConfigError text as is, else the error's type and message."""
    if isinstance(exc, (ConfigError, ValueError)):
        return f"error: {exc}"
    if isinstance(exc, KeyboardInterrupt):
        return "stopped: KeyboardInterrupt"
    return f"failed: {type(exc).__name__}: {exc}"


# ------------------------------------------------------------------------------ overhead
def live_overhead(config: RunConfig, cluster: Any = None, repeats: int = 3) -> dict[str, Any]:
    """What the dashboard's live plots cost a run, measured two ways.

    1. Throughput: `config` runs alternately through `workbench.run` (no on_record) and
       through a Dashboard (records buffered, live figures redrawn), `repeats` pairs;
       training-span throughputs (`costmodel.training_throughput`) are compared pair by
       pair, so load that drifts affects both halves of a pair alike.
    2. CPU time: the CPU seconds the dashboard's flusher spent drawing, against the CPU
       seconds of this process during the live run (all its threads). This one holds up
       on a busy machine, where throughput ratios are noisy.

    Args:
        config: the run.
        cluster: as for `workbench.run`.
        repeats: pairs of runs.
    Returns:
        {"plain", "live": samples/s per run; "pair_ratios": live / plain; "ratio": their
        median; "plot_cpu_fraction": plot CPU / process CPU of each live run; "records":
        records drawn per live run}.
    """
    from .. import api
    from ..analysis.costmodel import training_throughput

    plain, live, records, cpu_fraction = [], [], [], []
    dash = Dashboard(cluster=cluster, config=config)
    for _ in range(repeats):
        plain.append(training_throughput(api.run(config, cluster=cluster, progress=False)))
        dash.clear()
        cpu0 = time.process_time()
        if not dash.run():
            raise ConfigError("config", "a config the dashboard can run", dash.status_text)
        result = dash.wait()
        cpu = time.process_time() - cpu0
        if result is None:
            raise RuntimeError(dash.status_text)
        live.append(training_throughput(result))
        records.append(len(result.steps) + len(result.evals))
        cpu_fraction.append(dash.last_plot_cpu_s / cpu if cpu > 0 else math.nan)
    pairs = [lv / pl for lv, pl in zip(live, plain) if pl > 0]
    return {"plain": plain, "live": live, "pair_ratios": pairs,
            "ratio": statistics.median(pairs) if pairs else math.nan,
            "plot_cpu_fraction": cpu_fraction, "records": records}
