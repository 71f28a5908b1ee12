"""Static, self-contained HTML reports of runs (one file, plotly.js included once).

>>> import tempfile, workbench as wb
>>> result = wb.run(wb.RunConfig(algorithm="sgd", steps=3), progress=False)
>>> path = write_report(result, tempfile.mkdtemp() + "/report.html")   # what `workbench.api.save` writes
>>> path.read_text().count("plotly.js v") >= 1 and path.name
'report.html'

`write_comparison_report([a, b], path, title)` draws several runs overlaid.

The figures are `workbench.ui.figures`' static ones; the page embeds plotly.js in its
head once and every figure as a div, so it opens offline and can be mailed around.
Files are written atomically (temp file + rename).
"""
from __future__ import annotations

import html
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.io as pio

from .. import learning, measure
from ..results import RunResult
from ..util.fileio import atomic_write
from . import figdata, series
from . import figures as F

SUMMARY_FIELDS = ("status", "algorithm", "workers", "steps", "samples", "wall_time_s", "samples_per_s",
                  "final_train_loss", "final_test_loss", "final_test_accuracy", "best_test_accuracy",
                  "comm_fraction")
# The report's summary: key -> (what it is, unit); fractions are shown as percentages.
SUMMARY_UNITS: dict[str, tuple[str, str]] = {
    "status": ("how the run ended", ""),
    "algorithm": ("algorithm", ""),
    "workers": ("workers", "processes"),
    "steps": ("steps", "global steps"),
    "samples": ("samples trained on", "examples"),
    "startup_s": ("start-up (cluster, data, workers' first imports)", "s"),
    "train_time_s": ("training time, first step to last", "s"),
    "wall_time_s": ("wall time of the run", "s"),
    "teardown_s": ("teardown, last step to the result (wall = start-up + training + teardown)", "s"),
    "samples_per_s": ("steady throughput (warm-up excluded: docs/architecture.md, One measurement)", "samples/s"),
    "final_train_loss": ("final train loss", "cross-entropy"),
    "final_test_loss": ("final test loss", "cross-entropy"),
    "final_test_accuracy": ("final test accuracy", "%"),
    "final_test_accuracy_95": ("its 95% interval (Wilson score, over the test rows: test_rows; "
                               "a language model's tokens)", "%"),
    "best_test_accuracy": ("best test accuracy", "%"),
    "best_test_loss": ("lowest test loss (without a validation set, its parameters: params_best.npy; "
                       "params.npy when it was the last)", "cross-entropy"),
    "best_test_loss_step": ("steps run at the lowest test loss", "steps"),
    "final_val_loss": ("final validation loss (rows held out of the training set: val_fraction)", "cross-entropy"),
    "final_val_accuracy": ("final validation accuracy", "%"),
    "best_val_loss": ("lowest validation loss (its parameters: params_best.npy; params.npy when it was the last)",
                      "cross-entropy"),
    "best_val_loss_step": ("steps run at the lowest validation loss", "steps"),
    "test_loss_at_best_val": ("test loss there: the chosen model on rows no choice looked at", "cross-entropy"),
    "test_accuracy_at_best_val": ("test accuracy there", "%"),
    "comm_fraction": ("communication + waiting, share of worker time", "%"),
    "compute_s": ("compute, summed over workers", "worker-s"),
    "comm_s": ("communication, summed over workers", "worker-s"),
    "wait_s": ("waiting, summed over workers", "worker-s"),
    "sim_wall_s": ("what simulating the run took (wall clock)", "s"),
}
# Quantities timed by a simulated run's virtual clock (the simulation's own time,
# sim_wall_s and sim_startup_s, is wall-clock seconds even then).
VIRTUAL_KEYS = ("startup_s", "train_time_s", "teardown_s", "wall_time_s", "samples_per_s", "compute_s", "comm_s",
                "wait_s")
VIRTUAL_UNITS = {"s": "virtual s", "worker-s": "virtual worker-s", "samples/s": "samples per virtual s"}
# What a simulated run's quantities are: its time is virtual and its workers are virtual ones.
VIRTUAL_WHAT = {"wall_time_s": ("virtual time of the run", "virtual s"), "workers": ("virtual workers", "virtual workers")}
DATA_FILES = ("steps.csv", "evals.csv", "tournaments.csv", "summary.json", "config.yaml", "params.npy",
              "params_best.npy")
_STYLE = """
body { font-family: system-ui, -apple-system, Segoe UI, sans-serif; margin: 1.5em auto; max-width: 1200px;
       color: #222; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 1.8em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; display: block; max-width: 100%;
        overflow-x: auto; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: right; }
th { background: #f5f5f5; } td.text, th.text { text-align: left; }
td:not(.text) { white-space: nowrap; }
.figure { margin: 1em 0; } .notes { background: #fafafa; padding: 0.5em 1em; border-left: 3px solid #ccc; }
details { margin: 0.5em 0; } code { font-size: 0.9em; }
"""


# ------------------------------------------------------------------------------ tables
def format_cell(v: Any) -> str:
    """A table cell's text: "-" for missing values; floats of 1,000 and more as whole numbers
    with thousands separators (as the status line and the CLI write samples/s), smaller ones
    to 4 significant digits.

    >>> format_cell(141234.56), format_cell(0.012345), format_cell(None), format_cell(2.0)
    ('141,235', '0.01235', '-', '2')
    """
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1000 and math.isfinite(v) else f"{v:.4g}"
    return str(v)


def summary_row(result: RunResult, label: str | None = None) -> dict[str, Any]:
    """The headline numbers of one run (SUMMARY_FIELDS, workers counted) as a flat dict."""
    s = result.summary
    cfg = s.get("config") or {}
    row: dict[str, Any] = {"run": label or figdata.run_label(result)}
    for k in SUMMARY_FIELDS:
        v = s.get(k)
        row[k] = len(v) if k == "workers" and isinstance(v, list) else v
        if k == "final_test_accuracy" and s.get("final_val_accuracy") is not None:   # rows held out: beside it
            row["final_val_loss"], row["final_val_accuracy"] = s.get("final_val_loss"), s["final_val_accuracy"]
    row["batch_size"] = cfg.get("batch_size")
    row["lr"] = _scaled_lr(cfg)              # what the schedule scales the base lr to (after warmup)
    row["base_lr"] = cfg.get("lr")
    tb = s.get("time_breakdown") or {}
    for c in figdata.COMPONENTS:
        row[c] = tb.get(c)
    return row


def _scaled_lr(cfg: dict[str, Any]) -> float | None:
    """The config's lr scaled to its batch size by its lr_scaling rule (None if it lacks them)."""
    from ..maths.schedules import scaled_lr

    try:
        return scaled_lr(cfg["lr"], cfg["batch_size"], cfg.get("base_batch", cfg["batch_size"]),
                         cfg.get("lr_scaling", "none"))
    except (KeyError, TypeError, ValueError):
        return cfg.get("lr")


def table_view(df: pd.DataFrame, digits: int = 4) -> Any:
    """A DataFrame as a notebook shows it whole: every column and the full text of each
    cell (pandas' own display cuts wide tables to "..." and long strings at 50 characters),
    floats to `digits` significant digits, no index unless it labels the rows.

    Args:
        df: the table (not modified).
        digits: significant digits of floats.
    Returns:
        A pandas Styler (the cell's value renders it).
    """
    styler = df.style
    if isinstance(df.index, pd.RangeIndex):            # a pivot table keeps its index: it labels the rows
        styler = styler.hide(axis="index")
    styler = styler.format(precision=digits, na_rep="-",
                                                formatter={c: (lambda v, d=digits: f"{v:.{d}g}")
                                                           for c in df.columns if df[c].dtype.kind == "f"})
    return styler.set_table_styles([
        {"selector": "td, th", "props": "text-align: left; white-space: normal; padding: 2px 8px;"},
        {"selector": "", "props": "border-collapse: collapse; font-size: 12px;"}])


def summary_table(results: Sequence[RunResult], labels: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per run with its headline numbers (the dashboard's runs table, reports).

    Args:
        results: RunResults.
        labels: one name per run (default `figures.run_label` with the run's index).
    Returns:
        A DataFrame: run, status, algorithm, workers, steps, ..., batch_size, lr (scaled
        by lr_scaling: the rate training reaches after warmup), base_lr (the config's
        lr), compute_s, comm_s, wait_s.
    """
    return pd.DataFrame([summary_row(r, labels[i] if labels else figdata.run_label(r, i))
                         for i, r in enumerate(results)])


def differing_config(configs: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """The config fields whose values differ between runs, one row per run (the
    hyper-parameters a runs table needs); none for a single run.

    >>> differing_config([{"lr": 0.1, "seed": 0}, {"lr": 0.2, "seed": 0}]).to_dict("list")
    {'lr': [0.1, 0.2]}
    """
    if len(configs) < 2:
        return pd.DataFrame(index=range(len(configs)))
    keys = list(dict.fromkeys(k for c in configs for k in c))
    cols = {}
    for k in keys:
        shown = [json.dumps(c.get(k), sort_keys=True, default=str) for c in configs]
        if len(set(shown)) > 1:
            cols[k] = [c.get(k) if not isinstance(c.get(k), (list, dict)) else json.dumps(c.get(k)) for c in configs]
    return pd.DataFrame(cols, index=range(len(configs)))


def config_changes(config: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Fields of a run's config that differ from RunConfig's defaults: name -> (value, default).

    >>> config_changes({"algorithm": "sync_sgd", "lr": 0.1})
    {'algorithm': ('sync_sgd', 'sgd')}
    """
    from ..config import RunConfig

    defaults = RunConfig().to_dict()
    return {k: (v, defaults.get(k)) for k, v in config.items() if k not in defaults or defaults[k] != v}


def _names(labels: Sequence[str]) -> str:
    return ", ".join(labels)


def last_evaluated(result: RunResult) -> int | None:
    """The steps a run had run at its last evaluation (its evals.csv's last step + 1, as
    `best_test_loss_step` counts them), None without evaluations."""
    evals = result.evals
    if evals is None or not len(evals) or "step" not in evals.columns:
        return None
    return int(evals["step"].max()) + 1


def comparison_notes(summaries: Sequence[dict[str, Any]], labels: Sequence[str],
                     evaluated: Sequence[int | None] = ()) -> list[str]:
    """What a comparison of runs must say before its numbers are read side by side (`compare`'s
    terminal table and page): simulated runs beside measured ones (virtual seconds against
    this machine's), runs on different datasets (losses and accuracies of different tasks), and
    runs that ended before their plan (stopped, failed: their numbers are where they ended, their
    test numbers from their last evaluation: `evaluated`, each run's `last_evaluated`, says when).

    >>> comparison_notes([{"simulated": True, "config": {"dataset": "digits"}, "status": "completed"},
    ...                   {"config": {"dataset": "mnist1d"}, "status": "stopped", "steps": 5,
    ...                    "total_steps_planned": 50}], ["a", "b"], [30, 4])   # doctest: +NORMALIZE_WHITESPACE
    ['simulated: a (times and samples/s in virtual seconds of the simulated cluster); measured: b (wall-clock
      seconds): times and rates do not compare between the two',
     'different datasets (digits: a; mnist1d: b): their losses and accuracies are of different tasks and do not
      compare across them',
     'b stopped after 5 of 50 planned steps: its numbers are where it ended, its test numbers from its last
      evaluation, after 4 steps']
    """
    out = []
    sim = [label for label, s in zip(labels, summaries) if s.get("simulated")]
    real = [label for label, s in zip(labels, summaries) if not s.get("simulated")]
    if sim and real:
        out.append(f"simulated: {_names(sim)} (times and samples/s in virtual seconds of the simulated cluster); "
                   f"measured: {_names(real)} (wall-clock seconds): times and rates do not compare "
                   "between the two")
    datasets: dict[str, list[str]] = {}
    for label, s in zip(labels, summaries):
        datasets.setdefault(str((s.get("config") or {}).get("dataset")), []).append(label)
    if len(datasets) > 1:
        out.append("different datasets (" + "; ".join(f"{d}: {_names(ls)}" for d, ls in datasets.items()) +
                   "): their losses and accuracies are of different tasks and do not compare across them")
    evaluated = list(evaluated) or [None] * len(summaries)
    for label, s, at in zip(labels, summaries, evaluated):
        status = s.get("status")
        if status not in (None, "completed"):
            ran, planned = s.get("steps"), s.get("total_steps_planned")
            of = f" of {planned:,} planned" if isinstance(planned, int) else ""
            ran_text = f" after {ran:,}{of} steps" if isinstance(ran, int) else ""
            earlier = (f", its test numbers from its last evaluation, after {at:,} step{'s' if at != 1 else ''}"
                       if isinstance(at, int) and isinstance(ran, int) and at < ran else "")
            out.append(f"{label} {status}{ran_text}: its numbers are where it ended{earlier}")
    return out


def accuracy_95_text(summary: dict[str, Any], counted: bool = True) -> str | None:
    """The run's final test accuracy's 95% Wilson interval (`learning.wilson_interval`, as
    `final_test_accuracy_95`) with the labels it is a share of, for tables that set runs side by
    side (shown whatever its width: there the width says whether two runs differ); None
    without an accuracy or `test_rows`. `counted=False`: the interval alone.

    >>> accuracy_95_text({"final_test_accuracy": 0.9081, "test_rows": 359})
    '0.87-0.93 of 359 rows'
    >>> accuracy_95_text({"final_test_accuracy": 0.2979, "test_rows": 128000, "language": {}})
    '0.30-0.30 of 128,000 tokens'
    """
    acc, n = summary.get("final_test_accuracy"), summary.get("test_rows")
    if not isinstance(acc, (int, float)) or acc != acc or not isinstance(n, int) or n < 1:
        return None
    lo, hi = learning.wilson_interval(float(acc), n)
    unit = "token" if summary.get("language") is not None else "row"   # a language model's labels: its tokens
    return f"{lo:.2f}-{hi:.2f}" + (f" of {n:,} {unit}{'s' if n != 1 else ''}" if counted else "")


def _table_html(df: pd.DataFrame) -> str:
    cols = list(df.columns)
    head = "".join(f'<th class="{"text" if df[c].dtype == object else ""}">{html.escape(str(c))}</th>'
                   for c in cols)
    body = []
    for row in df.itertuples(index=False):
        cells = "".join(f'<td class="{"text" if isinstance(v, str) else ""}">{html.escape(format_cell(v))}</td>'
                        for v in row)
        body.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _kv_html(d: dict[str, Any], numbers: bool = False) -> str:
    """A two-column table; `numbers` shows floats to 4 significant digits, else values as JSON."""
    def show(v: Any) -> str:
        if numbers and isinstance(v, (int, float)) and not isinstance(v, bool):
            return format_cell(v)
        return v if isinstance(v, str) else json.dumps(v)
    rows = "".join(f'<tr><th class="text">{html.escape(str(k))}</th>'
                   f'<td class="text"><code>{html.escape(show(v))}</code></td></tr>' for k, v in d.items())
    return f"<table>{rows}</table>"


def _events_html(result: RunResult) -> str:
    events = result.events
    if not events:
        return "<p>none</p>"
    df = pd.DataFrame(events)
    keep = [c for c in ("time", "event", "worker", "message") if c in df.columns]
    return _table_html(df[keep])


# ------------------------------------------------------------------------------ pages
def figure_div(fig: Any, div_id: str) -> str:
    """One figure as a div + script, without plotly.js (the page carries it once)."""
    return pio.to_html(fig, full_html=False, include_plotlyjs=False, div_id=div_id,
                       config={"responsive": True, "displaylogo": False})


def page(title: str, sections: Sequence[str]) -> str:
    """A whole HTML page with plotly.js in its head, once.

    Args:
        title: the page title and heading.
        sections: HTML fragments, in order.
    Returns:
        The page.
    """
    from plotly.offline import get_plotlyjs

    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{_STYLE}</style>"
            f"<script type=\"text/javascript\">{get_plotlyjs()}</script></head>"
            f"<body><h1>{html.escape(title)}</h1>\n" + "\n".join(sections) + "\n</body></html>\n")


def _figures_html(figs: dict[str, Any]) -> list[str]:
    return [f'<div class="figure">{figure_div(fig, f"fig-{key}")}</div>' for key, fig in figs.items()]


def simulated_html(summary: dict[str, Any], runs: Sequence[str] = ()) -> str:
    """A simulated run's header line: what cluster it simulated, in which clock; "" for a real run.
    `runs` names the runs it is about where a page also shows measured ones.

    >>> line = simulated_html({"simulated": True, "workers": [{}] * 8, "device": "k80", "cpu_device": None,
    ...                        "network": "10GbE", "timing_model": "alexnet", "jitter": 0.0, "sim_wall_s": 1.5})
    >>> "8 virtual workers, device k80 (GPU workers), network 10GbE, timing model alexnet" in line
    True
    >>> simulated_html({})
    ''
    """
    if not summary.get("simulated"):
        return ""
    workers = summary.get("workers")
    n = len(workers) if isinstance(workers, list) else workers
    parts = [f"{n} virtual worker{'' if n == 1 else 's'}" if n else "virtual workers"]
    if summary.get("device"):
        parts.append(f"device {summary['device']} (GPU workers)")
    if summary.get("cpu_device"):
        parts.append(f"CPU workers {summary['cpu_device']}")
    parts.append(f"network {summary.get('network') or 'default'}")
    parts.append(f"timing model {summary.get('timing_model') or 'the trained model'}")
    if summary.get("jitter"):
        parts.append(f"jitter {summary['jitter']:g}")
    wall = summary.get("sim_wall_s")
    took = f"; simulating it took {wall:.3g} s of wall time (sim_wall_s)" if isinstance(wall, (int, float)) else ""
    whose = f" ({html.escape(_names(runs))})" if runs else ""
    return (f'<p class="notes simulated"><b>simulated</b>{whose}: {html.escape(", ".join(parts))}. Times and '
            f"throughput are in virtual seconds{html.escape(took)}.</p>")


def _summary_html(result: RunResult) -> str:
    """The headline numbers with what they are and their units (virtual ones for a simulated run)."""
    s = result.summary
    values: dict[str, Any] = {k: s.get(k) for k in SUMMARY_UNITS}
    values["workers"] = len(s["workers"]) if isinstance(s.get("workers"), list) else s.get("workers")
    values.update(s.get("time_breakdown") or {})
    ci = s.get("final_test_accuracy_95")
    if isinstance(ci, (list, tuple)) and len(ci) == 2 and all(isinstance(v, (int, float)) for v in ci):
        values["final_test_accuracy_95"] = f"{100 * ci[0]:.2f}-{100 * ci[1]:.2f}"   # in % as the accuracy above it
    rows = []
    for key, (what, unit) in SUMMARY_UNITS.items():
        v = values.get(key)
        if v is None:
            continue
        if s.get("simulated") and key in VIRTUAL_KEYS:
            unit = VIRTUAL_UNITS.get(unit, unit)
        if s.get("simulated") and key in VIRTUAL_WHAT:
            what, unit = VIRTUAL_WHAT[key]
        if unit == "%" and isinstance(v, (int, float)):
            shown = f"{100 * v:.2f}"
        elif isinstance(v, float):
            shown = f"{v:,.4g}" if abs(v) < 1e4 else f"{v:,.0f}"
        elif isinstance(v, int):
            shown = f"{v:,}"
        else:
            shown = str(v)
        rows.append(f'<tr><th class="text">{html.escape(what)}</th><td>{html.escape(shown)}</td>'
                    f'<td class="text">{html.escape(unit)}</td><td class="text"><code>{key}</code></td></tr>')
    head = '<tr><th class="text">quantity</th><th>value</th><th class="text">unit</th><th class="text">key</th></tr>'
    notes = "".join(f'<p class="notes machine">{html.escape(n)}</p>' for n in measure.notes(s)) + \
        "".join(f'<p class="notes machine">warning: {html.escape(w)}</p>' for w in s.get("warnings") or ()) + \
        "".join(f'<p class="notes">{html.escape(t)}</p>'
                for t in [learning.per_class_text(s.get("per_class")), learning.clip_text(s.get("grad_clip"))] if t)
    return f"{notes}<table><thead>{head}</thead><tbody>{''.join(rows)}</tbody></table>"


SAMPLE_CHARS = 200   # what a language model's report shows it writing


def _writes_html(result: RunResult) -> str:
    """For a language model's run with its parameters: what it writes (`wb.generate`, 200
    characters at temperature 1, seed 0, from a character of the training text), and on
    markov_text how much of it the language allows; "" for any other run."""
    config = result.summary.get("config") or {}
    from ..config import is_text_dataset
    if result.params is None or not is_text_dataset(str(config.get("dataset"))):
        return ""
    from ..config import ConfigError
    from ..data import DataError
    from ..trained import generate
    try:
        text = generate(result, length=SAMPLE_CHARS, seed=0)
    except (ConfigError, DataError, OSError):   # the text gone or changed since: nothing to show
        return ""
    from ..data.text import allowed_note
    note = allowed_note(text) if config.get("dataset") == "markov_text" else None
    return (f"<h2>what it writes</h2><p>{SAMPLE_CHARS} characters from its final parameters (temperature 1, seed 0; "
            f"<code>wb.generate</code>):</p><pre>{html.escape(text)}</pre>"
            + (f"<p>{html.escape(note)}</p>" if note else ""))


def _config_html(config: dict[str, Any]) -> str:
    """What differs from RunConfig's defaults; the whole config folded below."""
    changes = config_changes(config)
    if changes:
        rows = "".join(f'<tr><th class="text">{html.escape(k)}</th><td class="text"><code>'
                       f'{html.escape(json.dumps(v))}</code></td><td class="text"><code>{html.escape(json.dumps(d))}'
                       f'</code></td></tr>' for k, (v, d) in changes.items())
        diff = ('<table><thead><tr><th class="text">field</th><th class="text">this run</th>'
                f'<th class="text">default</th></tr></thead><tbody>{rows}</tbody></table>')
    else:
        diff = "<p>every field at its default</p>"
    return diff + "<details><summary>full config</summary>" + _kv_html(config) + "</details>"


def _files_html(data_href: str | None, present: Sequence[str] = DATA_FILES) -> str:
    if data_href is None:
        return ""
    base = data_href.rstrip("/") + "/" if data_href else ""
    links = " · ".join(f'<a href="{html.escape(base + name)}">{name}</a>' for name in present)
    return f'<p class="files">data: {links}</p>'


def report_html(result: RunResult, title: str | None = None, data_href: str | None = None,
                files: Sequence[str] = DATA_FILES) -> str:
    """The report page of one run: summary with units, figures, events, workers, what
    differs from the default config (the whole config folded), versions.

    Args:
        result: the run.
        title: page title (default: the run's label and status).
        data_href: the run directory relative to the page ("" when the page is in it),
            for links to its steps.csv / evals.csv; None: no links.
        files: which of the run directory's files to link.
    """
    s = result.summary
    on = f" on {s['workers_by_kind']}" if s.get("workers_by_kind") else ""
    roles = "".join(f" + {r['role']} ({r.get('host', 'host')})" for r in s.get("roles") or [])
    title = title or f"workbench run: {figdata.run_label(result)}{on}{roles} ({s.get('status', '?')})"
    sections = [simulated_html(s), _files_html(data_href, files), "<h2>summary</h2>", _summary_html(result)]
    if s.get("lr_schedule"):
        sections.append(f"<p>lr schedule: {html.escape(str(s['lr_schedule']))}</p>")
    sections.append(_writes_html(result))
    sections.append("<h2>figures</h2><p>Time axes start at the first training step; start-up is in the "
                    "summary above.</p>")
    sections += _figures_html(F.run_figures(result))
    sections += ["<h2>events</h2>", _events_html(result)]
    if s.get("workers"):
        sections += ["<h2>workers</h2>", _table_html(pd.DataFrame(s["workers"]))]
    sections += ["<h2>config: what differs from the defaults</h2>", _config_html(s.get("config") or {})]
    if s.get("versions"):
        sections += ["<details><summary>versions</summary>", _kv_html(s["versions"]), "</details>"]
    return page(title, sections)


def comparison_html(results: Sequence[Any], title: str, notes_html: str = "",
                    labels: Sequence[str] | None = None, figures: Sequence[Any] = ()) -> str:
    """The page of several runs: notes, summary table, overlaid figures, extra figures."""
    runs = [series.as_result(r) for r in results]
    labels = list(labels) if labels else [figdata.run_label(r, i) for i, r in enumerate(runs)]
    sections = []
    if notes_html:
        sections.append(f'<div class="notes">{notes_html}</div>')  # the caller's own HTML
    # each simulated cluster once (a sweep's points differ only in their worker counts)
    shown: dict[tuple, tuple[dict[str, Any], list[str]]] = {}
    mixed = not all(r.summary.get("simulated") for r in runs)   # then each header names its runs
    for label, r in zip(labels, runs):
        if r.summary.get("simulated"):
            key = tuple(r.summary.get(k) for k in ("device", "cpu_device", "network", "timing_model", "jitter"))
            shown.setdefault(key, ({**r.summary, "workers": None, "sim_wall_s": None}, []))[1].append(label)
    sections += [simulated_html(s, names if mixed else ()) for s, names in shown.values()]
    table = summary_table(runs, labels)
    if "final_test_accuracy" in table.columns:   # how sure each accuracy is, beside it (no runs: no columns)
        at = list(table.columns).index("final_test_accuracy") + 1
        table.insert(at, "test_accuracy_95", [accuracy_95_text(r.summary) for r in runs])
    diff = differing_config([r.summary.get("config") or {} for r in runs])
    diff = diff.drop(columns=[c for c in diff.columns if c in table.columns or c == "out"])
    table = pd.concat([table.iloc[:, :1], diff, table.iloc[:, 1:]], axis=1)
    sections += ["<h2>runs</h2>", '<div style="overflow-x:auto">' + _table_html(table) + "</div>"]
    across = comparison_notes([r.summary for r in runs], labels, [last_evaluated(r) for r in runs])
    if across:   # what the table cannot be read across (virtual against measured time, other datasets, runs cut short)
        sections.append('<ul class="compared">' + "".join(f"<li>{html.escape(n)}</li>" for n in across) + "</ul>")
    said = [(label, n) for label, r in zip(labels, runs) for n in measure.notes(r.summary)]
    if said:   # what each run's numbers come with (a busy machine, a steady state not reached), as its own report says
        sections.append("<ul>" + "".join(f"<li><b>{html.escape(label)}</b>: {html.escape(n)}</li>"
                                         for label, n in said) + "</ul>")
    sections.append("<h2>figures</h2>")
    figs = {"progress_time": F.progress_figure(runs, "time", labels=labels),
            "progress_epoch": F.progress_figure(runs, "epoch", labels=labels),
            "comparison": F.comparison_figure(runs, labels)}
    figs.update({f"extra-{i}": fig for i, fig in enumerate(figures)})
    sections += _figures_html(figs)
    sections.append("<h2>configs</h2>")
    for label, r in zip(labels, runs):
        sections += [f"<details><summary>{html.escape(label)}</summary>",
                     _kv_html(r.summary.get("config") or {}), "</details>"]
    return page(title, sections)




def write_report(result: RunResult | str | os.PathLike, path: str | os.PathLike,
                 title: str | None = None) -> Path:
    """Write one run's self-contained HTML report (atomically).

    Args:
        result: a RunResult or a run directory.
        path: the file to write (e.g. run_dir / "report.html").
        title: page title (default: the run's label and status).
    Returns:
        The path written.
    """
    path = Path(path)
    run_dir = Path(result) if isinstance(result, (str, os.PathLike)) else path.parent
    present = [name for name in DATA_FILES if (run_dir / name).is_file()]
    href = None
    if present:
        rel = os.path.relpath(run_dir.resolve(), path.parent.resolve())
        href = "" if rel == "." else Path(rel).as_posix()
    res = series.as_result(result)
    private = bool((res.summary.get("config") or {}).get("out_private", True))   # as the run's own files
    return atomic_write(path, report_html(res, title, data_href=href, files=present), private=private)


def write_comparison_report(results: Sequence[Any], path: str | os.PathLike, title: str,
                            notes_html: str = "", labels: Sequence[str] | None = None,
                            figures: Sequence[Any] = ()) -> Path:
    """Write a report comparing several runs (reproductions, sweeps), atomically.

    Args:
        results: RunResults or run directories, overlaid one colour each.
        path: the file to write.
        title: page title.
        notes_html: HTML placed first, as given (trusted: the caller's text).
        labels: one name per run (default `figures.run_label`).
        figures: extra plotly figures to append (e.g. a scaling figure).
    Returns:
        The path written.
    """
    return atomic_write(Path(path), comparison_html(results, title, notes_html, labels, figures))


# ------------------------------------------------------------------------------ runs tables with links
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


def _numeric_key(column: pd.Series) -> pd.Series:
    """Sort numbers as numbers: a text column whose every value is a number, or starts with
    a run number such as "#12 sync_sgd P=2", sorts by that number (#2 before #10); a column
    of numbers held as objects (None among them) as numbers; others as they are.

    >>> _numeric_key(pd.Series(["#10 sync_sgd P=2", "#2 sgd P=1", "#1 sgd"])).tolist()
    [10, 2, 1]
    >>> _numeric_key(pd.Series([1500.0, None, 20.0], dtype=object)).tolist()
    [1500.0, nan, 20.0]
    >>> _numeric_key(pd.Series(["sgd", "ltfb"])).tolist()
    ['sgd', 'ltfb']
    """
    if pd.api.types.is_numeric_dtype(column) or pd.api.types.is_bool_dtype(column):
        return column
    text = column.astype(str).where(column.notna())
    numbers = pd.to_numeric(text.str.extract(r"^\s*#?\s*([-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)(?:\s|$)",
                                             expand=False), errors="coerce")
    return numbers if numbers.notna().sum() == column.notna().sum() else column


def _blank(v: Any) -> bool:
    """An empty cell: None, NaN, NA or an empty string."""
    if isinstance(v, str):
        return not v
    return v is None or (pd.api.types.is_scalar(v) and bool(pd.isna(v)))


def runs_html(table: pd.DataFrame, sort: str = "run", descending: bool = False) -> str:
    """A full-width, horizontally scrollable HTML table of runs, sorted by `sort`; a
    `run_dir` column becomes links to the run's folder and its report.html. A column empty
    in every row (no validation set: no `final_val_accuracy`; a quiet machine: no
    `machine_note`) is left out, the sort column kept.

    >>> page = runs_html(pd.DataFrame({"workers": [1, 2], "final_val_accuracy": [None, float("nan")],
    ...                                "machine_note": ["", "busy"], "run_dir": [None, ""]}), "workers")
    >>> "final_val_accuracy" in page, "machine_note" in page, "files" in page
    (False, True, False)
    """
    df = table.copy()
    blank = df.apply(lambda col: col.map(_blank).all())
    df = df.drop(columns=[c for c in df.columns if blank[c] and c != sort])
    if sort in df.columns:
        df = df.sort_values(sort, ascending=not descending, kind="stable", na_position="last", key=_numeric_key)
    links = df.pop("run_dir") if "run_dir" in df.columns else None
    if links is not None and links.map(_blank).all():      # no run kept a folder: no column of dashes
        links = None
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
