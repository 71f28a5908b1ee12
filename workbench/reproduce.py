"""`python -m workbench reproduce experiments/<name>.yaml [--quick] --out DIR`.

An experiment file says what a paper reported, what we run, and the shape the result
should have. Reproducing it executes the experiment's parameterised notebook with
papermill (a real kernel), which writes its run directories under `DIR/runs/` and its
verdicts on the expected shape to `DIR/shape.json`; then one HTML report sets our
figures beside the paper's reported numbers and says, check by check, whether the
shape held.

Experiment file keys:
    title, paper, notebook, reported (list of str), we_run (str),
    expected_shape (list of {id, text}), parameters (dict), quick_parameters (dict)

The notebook contract: a `parameters`-tagged cell with `quick` and `out_dir`; at the end
it writes `out_dir/shape.json` = [{"id", "held", "measured"}] (see `workbench.shape`).
"""
from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .config import ConfigError

class NotebookFailed(RuntimeError):
    """The experiment's notebook raised; the executed notebook shows where."""


REQUIRED = ("title", "paper", "notebook", "reported", "we_run", "expected_shape")


@dataclass
class Experiment:
    path: Path
    title: str
    paper: str
    notebook: Path
    reported: list[str]
    we_run: str
    expected_shape: list[dict[str, str]]
    parameters: dict[str, Any]
    quick_parameters: dict[str, Any]


def load_experiment(path: str | Path) -> Experiment:
    """Read and check an experiment file; paths are relative to the repository root."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError("experiment", "an experiment YAML file (see experiments/)", str(path))
    data = yaml.safe_load(p.read_text()) or {}
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise ConfigError("experiment", f"a file with keys {list(REQUIRED)} (missing {missing})", str(path))
    root = p.resolve().parent.parent
    nb = (root / data["notebook"]).resolve()
    if not nb.is_file():
        raise ConfigError("notebook", "a notebook path relative to the repository root", data["notebook"])
    for check in data["expected_shape"]:
        if not {"id", "text"} <= set(check):
            raise ConfigError("expected_shape", "entries with `id` and `text`", check)
    return Experiment(path=p, title=data["title"], paper=data["paper"], notebook=nb, reported=list(data["reported"]),
                      we_run=data["we_run"], expected_shape=list(data["expected_shape"]),
                      parameters=dict(data.get("parameters") or {}), quick_parameters=dict(data.get("quick_parameters") or {}))


def reproduce(path: str | Path, out: str | Path, quick: bool = False, kernel: str = "python3",
              progress: bool = True) -> dict[str, Any]:
    """Run one experiment end to end; returns {"report", "notebook", "checks", "all_held"}.

    With `progress`, papermill's bar counts the cells, and papermill's log (each cell's
    printed and text output, the notebook's warnings) goes to this process's stderr as
    the notebook runs.
    """
    import logging
    import sys

    import papermill

    exp = load_experiment(path)
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    params = {**exp.parameters, **(exp.quick_parameters if quick else {}), "quick": quick, "out_dir": str(out)}
    executed = out / exp.notebook.name
    log, handler = logging.getLogger("papermill"), None
    level = log.level
    if progress and not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("[notebook] %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
    try:
        papermill.execute_notebook(str(exp.notebook), str(executed), parameters=params, kernel_name=kernel,
                                   cwd=str(exp.notebook.parent), progress_bar=progress, log_output=progress)
    except papermill.PapermillExecutionError as exc:
        raise NotebookFailed(f"{exp.notebook.name} failed in cell {exc.exec_count}: {exc.ename}: {exc.evalue} "
                             f"(executed notebook: {executed})") from None
    finally:
        if handler is not None:
            log.removeHandler(handler)
            log.setLevel(level)
    verdicts = {v["id"]: v for v in json.loads((out / "shape.json").read_text())}
    checks = []
    for check in exp.expected_shape:
        v = verdicts.get(check["id"], {})
        checks.append({"id": check["id"], "text": check["text"], "held": v.get("held"),
                       "measured": v.get("measured", "not measured")})
    expected_ids = {c["id"] for c in exp.expected_shape}
    also = [v for v in verdicts.values() if v["id"] not in expected_ids]   # measured, not expected to hold
    report = out / "report.html"
    _write_report(exp, checks, out, report, quick, also)
    return {"report": str(report), "notebook": str(executed), "checks": checks,
            "all_held": all(c["held"] for c in checks)}


def _write_report(exp: Experiment, checks: list[dict], out: Path, report: Path, quick: bool,
                  also: list[dict] = ()) -> None:
    from .results import RunResult
    from .ui.report import write_comparison_report

    runs = sorted((out / "runs").glob("*/summary.json")) if (out / "runs").exists() else []
    results = [RunResult.load(p.parent) for p in runs]
    esc = html.escape
    rows = "".join(
        f"<tr><td>{esc(c['text'])}</td><td>{esc(str(c['measured']))}</td>"
        f"<td style='font-weight:bold;color:{'#1a7f37' if c['held'] else '#cf222e'}'>"
        f"{'held' if c['held'] else ('did not hold' if c['held'] is False else 'not checked')}</td></tr>" for c in checks)
    notes = (f"<p><b>Paper:</b> {esc(exp.paper)}</p>"
             f"<h3>What the paper reported</h3><ul>{''.join(f'<li>{esc(r)}</li>' for r in exp.reported)}</ul>"
             f"<h3>What we run</h3><p>{esc(exp.we_run)}{' (quick parameters)' if quick else ''}</p>"
             f"<h3>Expected shape</h3><table border='1' cellpadding='4' style='border-collapse:collapse'>"
             f"<tr><th>check</th><th>measured here</th><th>verdict</th></tr>{rows}</table>")
    if also:
        extra = "".join(f"<tr><td>{esc(v['id'])}</td><td>{esc(str(v.get('measured', '')))}</td>"
                        f"<td>{'yes' if v.get('held') else 'no'}</td></tr>" for v in also)
        notes += ("<h3>Also measured (not part of the expected shape)</h3>"
                  "<table border='1' cellpadding='4' style='border-collapse:collapse'>"
                  f"<tr><th>comparison</th><th>measured here</th><th>as the paper found?</th></tr>{extra}</table>")
    write_comparison_report(results, report, title=exp.title, notes_html=notes)
