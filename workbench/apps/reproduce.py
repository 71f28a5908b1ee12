"""`python -m workbench reproduce experiments/<name>.yaml [--quick] --out DIR`.

An experiment file says what a paper reported, what we run, and the shape the result
should have. Reproducing it executes the experiment's parameterised notebook with
papermill (a real kernel), which writes its run directories under `DIR/runs/` and its
verdicts on the expected shape to `DIR/shape.json`; then one HTML report sets our
figures beside the paper's reported numbers and says, check by check, whether the
shape held.

Experiment file keys:
    title, paper, notebook, reported (list of str), we_run (str),
    expected_shape (list of {id, text, paper?}), parameters (dict), quick_parameters (dict),
    quick_skips (dict: shape id -> why quick mode does not reproduce it),
    seeds, quick_seeds (lists of seeds: the notebook runs once per seed)
    seed_jobs (how many seeds' notebooks run at once, default 1; at most the cores: only
        for notebooks that measure nothing on this machine, i.e. simulated clusters on a
        fixed device profile, whose virtual time is the same however busy the cores are;
        a real-cluster notebook measures the machine and must not share it with itself)

Verdicts fail loudly: `reproduce` returns `failed`, the shapes that did not hold or were
not measured, and the CLI exits with EXIT_SHAPE (3) when there is any (0 when every shape
held; 1 when the notebook itself failed; 2 for bad input). Quick mode checks every shape
too, except those `quick_skips` names: their verdict reads "skipped in quick mode"
with the reason, and they do not fail the run. An effect's verdict carries its margin
(`analysis.shape.ShapeChecks.compare`): it holds only beyond the run-to-run spread.

The run-to-run spread is measured over seeds: the notebook runs once per seed of the
file's `seeds` (`quick_seeds` in quick mode; `--seeds` overrides both), the first into
DIR (its runs, figures and report), each other into DIR/seeds/seed-N/, every seed's own
verdicts in DIR/seeds/seed-N/shape.json; DIR/shape.json is their combination
(`analysis.shape.combine_seeds`): a verdict holds only when its median distance from the
threshold exceeds both the notebook's margin and the range over the seeds, or when every
seed's distance exceeds the margin; one inside that range, with seeds on both sides of the
threshold, reads "not resolved" (and fails, exit 3).

An expected shape's optional `paper` is the paper's number for it, as text ("87%",
"5.3x"); the report's "paper vs simulated" table (`analysis.shape.paper_vs_measured`)
sets it beside the notebook's `measured`.

The notebook contract: a `parameters`-tagged cell with `quick` and `out_dir`; at the end
it writes `out_dir/shape.json` = [{"id", "held", "measured", "value", "threshold", "margin", "by",
"spread", ...}] (see `workbench.analysis.shape`: every expected shape goes through `compare`,
so each verdict says how far it held or failed).
"""
from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import ConfigError, read_yaml


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
    quick_skips: dict[str, str]
    seeds: list[int]
    quick_seeds: list[int]
    seed_jobs: int = 1


MAX_TEXT = 10_000     # characters in one parameter string
MAX_ITEMS = 1_000     # items in one parameter list
RESERVED = ("quick", "out_dir")   # set by reproduce itself


def load_experiment(path: str | Path, notebook: str | Path | None = None) -> Experiment:
    """Read and check an experiment file; paths are relative to the repository root.

    An experiment file is data, never code: its `notebook` must lie in the repository's
    `notebooks/` folder (the folder beside the file's `experiments/` folder), unless the
    caller names a notebook explicitly; parameter names must be Python identifiers and
    values plain YAML scalars or lists of them (papermill writes them into the notebook's
    code, so anything else could run there).
    """
    p = Path(path)
    data = read_yaml(p, "experiment")
    if not isinstance(data, dict):
        raise ConfigError("experiment", "a YAML mapping with keys " + ", ".join(REQUIRED), str(path))
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise ConfigError("experiment", f"a file with keys {list(REQUIRED)} (missing {missing})", str(path))
    for key in ("title", "paper", "we_run"):
        if not isinstance(data[key], str):
            raise ConfigError(key, "text", data[key])
    root = p.resolve().parent.parent
    nb = _notebook_path(data["notebook"], root) if notebook is None else _explicit_notebook(notebook)
    if not isinstance(data["reported"], list) or not all(isinstance(r, str) for r in data["reported"]):
        raise ConfigError("reported", "a list of text lines", data["reported"])
    if not isinstance(data["expected_shape"], list):
        raise ConfigError("expected_shape", "a list of entries with `id` and `text`", data["expected_shape"])
    for check in data["expected_shape"]:
        if not isinstance(check, dict) or not {"id", "text"} <= set(check):
            raise ConfigError("expected_shape", "entries with `id` and `text`", check)
        if "paper" in check and not isinstance(check["paper"], (str, int, float)):
            raise ConfigError("expected_shape.paper", "the paper's number as text, like \"87%\"", check["paper"])
    return Experiment(path=p, title=data["title"], paper=data["paper"], notebook=nb, reported=list(data["reported"]),
                      we_run=data["we_run"], expected_shape=list(data["expected_shape"]),
                      parameters=check_parameters(data.get("parameters"), "parameters"),
                      quick_parameters=check_parameters(data.get("quick_parameters"), "quick_parameters"),
                      quick_skips=_quick_skips(data.get("quick_skips"), data["expected_shape"]),
                      seed_jobs=check_seed_jobs(data.get("seed_jobs", 1)), **_seeds(data))


def check_seed_jobs(value: Any, field: str = "seed_jobs") -> int:
    """How many seeds run at once: an integer >= 1.

    >>> check_seed_jobs(2)
    2
    >>> check_seed_jobs(0)
    Traceback (most recent call last):
    ...
    workbench.config.ConfigError: seed_jobs: an integer >= 1, got 0
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(field, "an integer >= 1", value)
    return value


def _seeds(data: dict) -> dict[str, list[int]]:
    """`seeds` and `quick_seeds`: lists of distinct integers >= 0 (default: the parameters'
    seed, or 0; quick_seeds defaults to seeds)."""
    default = [(data.get("parameters") or {}).get("seed", 0)] if isinstance(data.get("parameters"), dict) else [0]
    out = {}
    for key, fallback in (("seeds", default), ("quick_seeds", None)):
        value = data.get(key, fallback if fallback is not None else out["seeds"])
        out[key] = check_seeds(value, key)
    return out


def check_seeds(value: Any, field: str = "seeds") -> list[int]:
    """A list of distinct seeds (integers >= 0), at least one.

    >>> check_seeds([0, 1, 2])
    [0, 1, 2]
    >>> check_seeds([0, 0])
    Traceback (most recent call last):
    ...
    workbench.config.ConfigError: seeds: a list of distinct integers >= 0, at least one, got [0, 0]
    """
    if (not isinstance(value, list) or not value or len(set(map(repr, value))) != len(value)
            or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in value)):
        raise ConfigError(field, "a list of distinct integers >= 0, at least one", value)
    return list(value)


def _quick_skips(value: Any, expected: list[dict]) -> dict[str, str]:
    """The shapes quick mode does not reproduce: id -> why (ids of the expected shape)."""
    if value is None:
        return {}
    ids = {c["id"] for c in expected}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) and v.strip()
                                              for k, v in value.items()):
        raise ConfigError("quick_skips", "a mapping of expected-shape ids to the reason quick mode does not "
                          "reproduce them", value)
    unknown = sorted(set(value) - ids)
    if unknown:
        raise ConfigError("quick_skips", f"ids of the expected shape ({', '.join(sorted(ids))})", unknown[0])
    return dict(value)


def _notebook_path(value: Any, root: Path) -> Path:
    """The experiment's notebook: a relative path inside root/notebooks, nothing else."""
    allowed = "a notebook in the repository's notebooks/ folder, like notebooks/NAME.ipynb"
    if not isinstance(value, str) or "\x00" in value or Path(value).is_absolute() or ".." in Path(value).parts:
        raise ConfigError("notebook", allowed, value)
    folder = (root / "notebooks").resolve()
    nb = (root / value).resolve()
    if not nb.is_relative_to(folder) or nb.suffix != ".ipynb":
        raise ConfigError("notebook", allowed, value)
    if not nb.is_file():
        raise ConfigError("notebook", f"{allowed} (no such file)", value)
    return nb


def _explicit_notebook(value: str | Path) -> Path:
    """A notebook the user named on the command line: any .ipynb file they can read."""
    nb = Path(value).expanduser().resolve()
    if nb.suffix != ".ipynb" or not nb.is_file():
        raise ConfigError("notebook", "an existing .ipynb file", str(value))
    return nb


def check_parameters(params: Any, field: str) -> dict[str, Any]:
    """Notebook parameters: identifier -> plain scalar or list of scalars (a copy).

    >>> check_parameters({"lr": 0.1, "hidden": [128]}, "parameters")
    {'lr': 0.1, 'hidden': [128]}
    >>> check_parameters({"x = 1\\nimport os": 1}, "parameters")
    Traceback (most recent call last):
    ...
    workbench.config.ConfigError: parameters: names that are Python identifiers (not keywords, not quick or out_dir), got 'x = 1\\nimport os'
    """
    import keyword
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise ConfigError(field, "a mapping of parameter names to values", params)
    out: dict[str, Any] = {}
    for name, value in params.items():
        if (not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name) or name in RESERVED
                or name.startswith("__")):
            raise ConfigError(field, "names that are Python identifiers (not keywords, not quick or out_dir)", name)
        out[name] = _plain(value, f"{field}.{name}")
    return out


def _plain(value: Any, field: str, depth: int = 0) -> Any:
    allowed = "a plain YAML scalar (text, number, true/false, null) or a list of them"
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        if len(value) > MAX_TEXT:
            raise ConfigError(field, f"text of at most {MAX_TEXT} characters", value)
        return value
    if isinstance(value, list) and depth < 2 and len(value) <= MAX_ITEMS:
        return [_plain(v, field, depth + 1) for v in value]
    raise ConfigError(field, allowed, value)


def reproduce(path: str | Path, out: str | Path, quick: bool = False, kernel: str = "python3",
              progress: bool = True, notebook: str | Path | None = None,
              seeds: list[int] | None = None, seed_jobs: int | None = None) -> dict[str, Any]:
    """Run one experiment end to end; returns {"report", "notebook", "checks", "all_held",
    "failed", "seeds"}.

    With `progress`, papermill's bar counts the cells, and papermill's log (each cell's
    printed and text output, the notebook's warnings) goes to this process's stderr as
    the notebook runs. `notebook` runs that notebook instead of the one the experiment
    file names (which must lie in the repository's notebooks/ folder). `seeds`: run the
    notebook once per seed (default: the file's `seeds`, `quick_seeds` in quick mode).
    `seed_jobs`: how many of those run at once (default: the file's `seed_jobs`; never more
    than this machine's cores or the seeds), each in a process of its own; the results are
    the same as one at a time (each seed's notebook is its own kernel and folder).
    """
    import sys

    exp = load_experiment(path, notebook=notebook)   # every check of the file first: a bad one is refused
    try:
        from papermill.inspection import inspect_notebook  # before papermill's imports (~2 s of CPU)
    except ImportError as exc:
        from ..util.extras import missing_extra
        raise missing_extra("reproduce", exc) from None

    params = {**exp.parameters, **(exp.quick_parameters if quick else {})}
    known = set(inspect_notebook(str(exp.notebook)))
    unknown = sorted(set(params) - known)
    if unknown:  # papermill would inject them silently
        raise ConfigError("parameters", f"names from the notebook's parameters cell ({', '.join(sorted(known))})",
                          unknown[0])
    seeds = check_seeds(list(seeds), "seeds") if seeds is not None else (exp.quick_seeds if quick else exp.seeds)
    if len(seeds) > 1 and "seed" not in known:
        raise ConfigError("seeds", f"one seed: the notebook {exp.notebook.name} has no `seed` parameter", seeds)
    from ..execution.preflight import check_out
    check_out(out, overwrite=True)   # a reproduction's folder is rewritten run by run
    out = Path(out).resolve()
    executed = out / exp.notebook.name
    _claim_files(out, [exp.notebook.name, "report.html", "shape.json", "seeds"], exp.notebook)
    jobs = check_seed_jobs(exp.seed_jobs if seed_jobs is None else seed_jobs)
    from ..util.machine import usable_cores
    jobs = min(jobs, len(seeds), usable_cores())   # affinity and CPU quota, not the host's cores
    runs = []                                  # (seed, where, the notebook's parameters)
    for i, seed in enumerate(seeds):
        where = out if i == 0 else out / "seeds" / f"seed-{seed}"
        seed_params = {**params, "seed": seed} if "seed" in known else dict(params)
        runs.append((seed, where, {**seed_params, "quick": quick, "out_dir": str(where)}))
    per_seed: dict[int, list[dict]] = {}
    if jobs == 1:
        for i, (seed, where, p) in enumerate(runs):
            if progress and len(seeds) > 1:
                print(f"[reproduce] seed {seed} ({i + 1} of {len(seeds)}) -> {where}", file=sys.stderr)
            per_seed[seed] = _execute(exp, where, p, kernel, progress)
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor
        if progress:
            print(f"[reproduce] seeds {', '.join(map(str, seeds))}, {jobs} at a time (seed_jobs); progress shown for "
                  f"seed {seeds[0]} -> {out}", file=sys.stderr)
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {seed: pool.submit(_execute, exp, where, p, kernel, progress and i == 0)
                       for i, (seed, where, p) in enumerate(runs)}
            try:
                for seed in seeds:
                    per_seed[seed] = futures[seed].result()
            except BaseException:
                for f in futures.values():
                    f.cancel()
                raise
    for seed in seeds:
        own = out / "seeds" / f"seed-{seed}" / "shape.json"     # every seed's own verdicts, kept
        own.parent.mkdir(parents=True, exist_ok=True)
        own.write_text(json.dumps(per_seed[seed], indent=2))
    from ..analysis.shape import combine_seeds, paper_vs_measured, skip_in_quick
    combined = combine_seeds(per_seed)
    (out / "shape.json").write_text(json.dumps(combined, indent=2))
    verdicts = {v["id"]: v for v in combined}
    checks = paper_vs_measured(exp.expected_shape, verdicts.values())
    if quick:   # what quick mode changes, said instead of a verdict (the notebook's table says the same)
        checks = skip_in_quick(checks, exp.quick_skips)
    expected_ids = {c["id"] for c in exp.expected_shape}
    also = [v for v in verdicts.values() if v["id"] not in expected_ids]   # measured, not expected to hold
    report = out / "report.html"
    _write_report(exp, checks, out, report, quick, also, seeds)
    failed = [c["id"] for c in checks if c["held"] is False
              or (c["held"] is None and not (quick and c["id"] in exp.quick_skips))]
    return {"report": str(report), "notebook": str(executed), "checks": checks,
            "all_held": not failed, "failed": failed, "seeds": seeds}


def _execute(exp: Experiment, where: Path, params: dict[str, Any], kernel: str, progress: bool) -> list[dict]:
    """Run the experiment's notebook once into `where` (papermill); its verdicts (shape.json)."""
    import logging
    import sys

    import papermill

    executed = where / exp.notebook.name
    where.mkdir(parents=True, exist_ok=True)
    (where / "shape.json").unlink(missing_ok=True)      # a notebook that writes none must not pass on a stale one
    log, handler = logging.getLogger("papermill"), None
    level = log.level
    if progress and not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("[notebook] %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
    try:
        papermill.execute_notebook(str(exp.notebook), str(executed), parameters=params, kernel_name=kernel,
                                   cwd=str(exp.notebook.parent), progress_bar=progress, log_output=progress,
                                   **kernel_quiet())
    except papermill.PapermillExecutionError as exc:
        raise NotebookFailed(f"{exp.notebook.name} failed in cell {exc.exec_count}: {exc.ename}: {exc.evalue} "
                             f"(executed notebook: {executed})") from None
    finally:
        if handler is not None:
            log.removeHandler(handler)
            log.setLevel(level)
    shape = where / "shape.json"
    if not shape.is_file():
        raise NotebookFailed(f"{exp.notebook.name} ran but wrote no shape.json (executed notebook: {executed})")
    return json.loads(shape.read_text())


# The log level of the kernel reproduce starts (its own application log, not the notebook's output).
KERNEL_LOG_LEVEL = "ERROR"


def kernel_quiet() -> dict[str, Any]:
    """papermill's keyword for the kernel reproduce starts: its application log at ERROR. Over
    TCP ipykernel 7 writes "[IPKernelApp] WARNING | Kernel is running over TCP without
    encryption" to stderr at every start, which `--no-progress` promised not to show (the
    kernel listens on 127.0.0.1 only). A notebook's own warnings and errors are its cells'
    outputs and still show; the kernel's errors still reach stderr. (Local ipc sockets
    instead of TCP were tried: a kernel then failed to answer in 60 s now and then while the
    suite ran two notebooks at once.)

    >>> kernel_quiet()
    {'extra_arguments': ['--IPKernelApp.log_level=ERROR']}
    """
    return {"extra_arguments": [f"--IPKernelApp.log_level={KERNEL_LOG_LEVEL}"]}


MANIFEST = ".workbench-reproduce"   # in --out: the files reproduce wrote there (it may rewrite only those)


def _claim_files(out: Path, names: list[str], source: Path) -> None:
    """Refuse an --out where reproduce would overwrite a file it did not write (the
    lesson notebook itself when --out is the notebooks folder, any other file of the same
    name); else note `names` as reproduce's own in out's manifest."""
    manifest = out / MANIFEST
    try:
        own = set(json.loads(manifest.read_text())) if manifest.is_file() else set()
    except (OSError, ValueError):
        own = set()
    for name in names:
        path = out / name
        if path.resolve() == source.resolve():
            raise ConfigError("out", f"a folder other than the notebook's own ({path} is the lesson notebook, which "
                              "the executed copy would overwrite)", str(out))
        if (path.exists() or path.is_symlink()) and name not in own:
            raise ConfigError("out", f"a folder without files of reproduce's names that it did not write ({path} "
                              "exists: move it, or choose another --out)", str(out))
    out.mkdir(parents=True, exist_ok=True)
    from ..util.fileio import atomic_write
    atomic_write(manifest, json.dumps(sorted(own | set(names))))


def _write_report(exp: Experiment, checks: list[dict], out: Path, report: Path, quick: bool,
                  also: list[dict] = (), seeds: list[int] = ()) -> None:
    from ..results.result import RunResult
    from ..ui.report import write_comparison_report

    runs = sorted((out / "runs").glob("*/summary.json")) if (out / "runs").exists() else []
    results = [RunResult.load(p.parent) for p in runs]
    esc = html.escape
    simulated = any(r.summary.get("simulated") for r in results)
    rows = "".join(
        f"<tr><td><code>{esc(c['id'])}</code></td><td>{esc(c['text'])}</td><td>{esc(c['paper'])}</td>"
        f"<td>{esc(c['measured'])}</td>"
        f"<td>{esc(c.get('margin', ''))}{'; ' + esc(c['note']) if c.get('note') and c['held'] else ''}</td>"
        f"<td style='font-weight:bold;color:{_colour(c['held'])}'>{esc(c['verdict'])}</td></tr>"
        for c in checks)
    ours = "simulated" if simulated else "measured here"
    notes = (f"<p><b>Paper:</b> {esc(exp.paper)}</p>"
             f"<h3>What the paper reported</h3><ul>{''.join(f'<li>{esc(r)}</li>' for r in exp.reported)}</ul>"
             f"<h3>What we run</h3><p>{esc(exp.we_run)}{' (quick parameters)' if quick else ''}</p>"
             + (f"<p><b>Seeds:</b> {esc(', '.join(map(str, seeds)))}: the notebook ran once per seed; figures and "
                f"runs are seed {seeds[0]}'s, and a verdict holds only when its median distance from the threshold "
                "exceeds both its margin and the range over the seeds, or every seed's distance exceeds the margin "
                "(else: not resolved, or did not hold).</p>"
                if len(seeds) > 1 else "<p><b>Seeds:</b> one: the spread over seeds is not measured.</p>"
                if seeds else "")
             + f"<h3>Expected shape: paper vs {ours}</h3>"
             f"<table class='paper-vs' border='1' cellpadding='4' style='border-collapse:collapse'>"
             f"<tr><th>shape</th><th>check</th><th>paper</th><th>{ours}</th><th>margin</th><th>verdict</th></tr>"
             f"{rows}</table>")
    if also:
        extra = "".join(f"<tr><td>{esc(v['id'])}</td><td>{esc(str(v.get('measured', '')))}</td>"
                        f"<td>{'yes' if v.get('held') else 'no'}</td></tr>" for v in also)
        notes += ("<h3>Also measured (not part of the expected shape)</h3>"
                  "<table border='1' cellpadding='4' style='border-collapse:collapse'>"
                  f"<tr><th>comparison</th><th>measured here</th><th>as the paper found?</th></tr>{extra}</table>")
    write_comparison_report(results, report, title=exp.title, notes_html=notes)


def _colour(held: bool | None) -> str:
    return "#1a7f37" if held else ("#cf222e" if held is False else "#9a6700")
