"""`python -m workbench reproduce`: the experiment files, one reproduction end to end, bad input.

The end-to-end test runs the real command in a subprocess (papermill, a real kernel, a
local Dask cluster) with the experiment's quick parameters and checks what a reader of
the report needs: the paper, its numbers, our verdicts and the executed notebook.
"""
from __future__ import annotations

import html
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from workbench.analysis.shape import _seed_list
from workbench.apps.reproduce import REQUIRED, load_experiment

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENTS = sorted((ROOT / "experiments").glob("*.yaml"))
REPRODUCTIONS = {"goyal_warmup", "sc17_easgd", "sync_async", "ltfb", "cgdp", "sc17_sim", "icpe_sim", "goyal_sim",
                  "ltfb_sim", "communication_efficient", "goyal_fig1", "sc17_knl_sim", "diloco_lm"}


def reproduce(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workbench", "reproduce", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def notebook_parameters(notebook: Path) -> set[str]:
    from papermill.inspection import inspect_notebook
    return set(inspect_notebook(str(notebook)))


# ------------------------------------------------------------------------------ the experiment files
def test_every_reproduction_has_an_experiment_file():
    assert REPRODUCTIONS <= {p.stem for p in EXPERIMENTS}


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.stem)
def test_experiment_file_is_complete(path):
    exp = load_experiment(path)   # raises on a missing key, a missing notebook, a bad check
    data = yaml.safe_load(path.read_text())
    assert set(REQUIRED) | {"parameters", "quick_parameters"} <= set(data)
    assert exp.title.strip() and exp.we_run.strip()
    assert exp.paper.count(",") >= 2 and any(str(y) in exp.paper for y in range(2011, 2020)), \
        "a full citation: authors, title, venue, year"
    assert exp.reported and all(isinstance(r, str) and r.strip() for r in exp.reported)
    ids = [c["id"] for c in exp.expected_shape]
    assert ids and len(ids) == len(set(ids)), "expected_shape ids are unique"
    assert all(c["text"].strip() for c in exp.expected_shape)
    # the report's "paper vs measured here" table: every shape says the paper's side (a number, or its words)
    assert all(str(c.get("paper", "")).strip() for c in exp.expected_shape), [c["id"] for c in exp.expected_shape if not c.get("paper")]


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.stem)
def test_experiment_parameters_are_the_notebooks_parameters(path):
    # papermill injects unknown names silently: a typo would quietly change nothing.
    pytest.importorskip("papermill")
    exp = load_experiment(path)
    known = notebook_parameters(exp.notebook)
    assert {"quick", "out_dir"} <= known
    assert set(exp.parameters) <= known, set(exp.parameters) - known
    assert set(exp.quick_parameters) <= known, set(exp.quick_parameters) - known
    assert not {"quick", "out_dir"} & (set(exp.parameters) | set(exp.quick_parameters)), \
        "reproduce sets quick and out_dir itself"


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.stem)
def test_notebook_checks_every_expected_shape(path):
    nbformat = pytest.importorskip("nbformat")
    exp = load_experiment(path)
    nb = nbformat.read(exp.notebook, as_version=4)
    source = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    for check in exp.expected_shape:
        # every expected shape states its margin: how far it held or failed by (`by` in shape.json)
        assert f'checks.compare("{check["id"]}"' in source, \
            f"{exp.notebook.name} never checks {check['id']!r} with checks.compare (value, threshold, margin)"


SIMULATED = sorted(p.stem for p in EXPERIMENTS if p.stem.endswith("_sim"))
# Shapes our simulation does not reproduce in quick mode (`reproduce` says so and exits 3).
# sc17_sim's two "EASGD ahead of SGD" shapes compare tuned methods, hold at 4 and 16 GPUs
# after quick's 2 epochs, fail at 4 GPUs after the full run's 10 (1.3 and 0.3 points), and so
# are in its quick_skips; the full run exits 3 for them. icpe_sim's VGG-16 size: its TDP
# communicates 10% of its step here, so hiding all of it gives at most 1.11x, not 1.21x.
# sc17_knl_sim: the modelled chip gives 16 partitions 1.7x the images/s of one and the larger
# batch costs examples, 1.2-1.6x in all against the paper's 3.3x; 4, 8 and 16 partitions lie
# within the seeds' spread of each other (the ordering is not resolved).
NOT_REPRODUCED: dict[str, set[str]] = {
    "icpe_sim": {"cgdp_speedup_vgg16"},
    "sc17_knl_sim": {"knl_more_partitions_sooner", "knl_speedup_16", "knl_time_4", "knl_time_8", "knl_time_16"},
}


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.stem)
def test_every_reproduction_measures_its_spread_over_seeds(path):
    # "held" needs a margin beyond the run-to-run spread, measured over seeds: every
    # experiment runs its notebook for 3 seeds in full mode and 2 in quick mode.
    exp = load_experiment(path)
    assert len(exp.seeds) >= 3 and len(exp.quick_seeds) >= 2, (exp.seeds, exp.quick_seeds)
    # seeds run side by side only where the notebook measures nothing on this machine
    assert exp.seed_jobs == 1 or path.stem.endswith("_sim") or path.stem in ("communication_efficient", "diloco_lm"), path
    assert "seed" in notebook_parameters(exp.notebook), "the notebook must take the seed reproduce sets"


def _seed_oracle(per_seed: list[dict], margin: float, inclusive: bool) -> tuple[float, bool]:
    """The rule, recomputed from each seed's own verdict: median distance from the threshold
    minus the larger of the margin and half the range of those distances, or, where that is
    less, the nearest seed's distance minus the margin (every seed beyond the margin holds)."""
    d = sorted(v["by"] + margin for v in per_seed)
    med = d[len(d) // 2] if len(d) % 2 else (d[len(d) // 2 - 1] + d[len(d) // 2]) / 2
    by = max(med - max(margin, (d[-1] - d[0]) / 2), d[0] - margin)
    return by, (by >= 0 if inclusive else by > 0)


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", SIMULATED)
def test_every_simulated_reproduction_holds_in_quick_mode(name, tmp_path):
    # Simulated reproductions are deterministic for a seed: in quick mode, over the quick
    # seeds, every expected shape holds beyond its spread over seeds, or the experiment
    # file's quick_skips says why quick mode does not reproduce it. Exit 0. The report sets
    # the paper's number beside ours for every shape.
    exp = load_experiment(ROOT / "experiments" / f"{name}.yaml")
    out = tmp_path / "out"
    proc = reproduce(f"experiments/{name}.yaml", "--quick", "--out", str(out), "--no-progress", timeout=900)
    failing = NOT_REPRODUCED.get(name, set())
    assert proc.returncode == (3 if failing else 0), (proc.stdout[-3000:], proc.stderr[-2000:])
    if failing:   # the failing shapes, named in one line (in the experiment file's order)
        line = next(ln for ln in proc.stderr.splitlines() if ln.startswith("error: expected shape did not hold: "))
        assert set(line.split(": ", 2)[2].removesuffix(" (exit 3)").split(", ")) == failing, line
    verdicts = {v["id"]: v for v in json.loads((out / "shape.json").read_text())}
    own = {s: {v["id"]: v for v in json.loads((out / "seeds" / f"seed-{s}" / "shape.json").read_text())}
           for s in exp.quick_seeds}
    report = (out / "report.html").read_text(encoding="utf-8")
    table = report[report.index("Expected shape: paper vs simulated"):]
    table = table[:table.index("</table>")]
    for check in exp.expected_shape:
        v = verdicts[check["id"]]
        # the margin: how far it held (by > 0) or failed (by <= 0), against the spread over seeds
        assert {"value", "threshold", "margin", "by", "spread", "seed_spread", "values"} <= set(v), v
        assert v["seeds"] == exp.quick_seeds and len(v["values"]) == len(exp.quick_seeds)
        assert v["spread"].startswith(f"over seeds {_seed_list(exp.quick_seeds)}: ")
        by, held = _seed_oracle([own[s][check["id"]] for s in exp.quick_seeds], v["margin"], v.get("inclusive"))
        assert v["by"] == pytest.approx(by, rel=1e-12, abs=1e-15) and v["held"] == held, (v, by)
        if check["id"] in exp.quick_skips:
            assert "[skipped in quick mode]" in proc.stdout and exp.quick_skips[check["id"]] in proc.stdout
        else:
            assert v["held"] == (check["id"] not in failing), (check["id"], v)
        row = table[table.index(f"<code>{check['id']}</code>"):]
        row = row[:row.index("</tr>")]
        assert check.get("paper") and html.escape(str(check["paper"])) in row, check
        assert html.escape(v["measured"]) in row and f"paper: {check['paper']}" in proc.stdout
    summaries = [json.loads(p.read_text()) for p in (out / "runs").glob("*/summary.json")]
    assert summaries and all(s["simulated"] and s["time_unit"] == "virtual seconds" for s in summaries)
    assert all(s["config"]["seed"] == exp.quick_seeds[0] for s in summaries), "out/runs are the first seed's"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_goyal_figure1_holds_in_quick_mode(tmp_path):
    # Single-process sgd (not simulated), so not in the test above; quick runs the same runs
    # as full at 256, 8k, 16k and 64k for seeds 0 and 1: every shape holds beyond its spread
    # over seeds, and the report sets Figure 1's numbers beside ours.
    exp = load_experiment(ROOT / "experiments" / "goyal_fig1.yaml")
    out = tmp_path / "out"
    proc = reproduce("experiments/goyal_fig1.yaml", "--quick", "--out", str(out), "--no-progress")
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-2000:])
    verdicts = {v["id"]: v for v in json.loads((out / "shape.json").read_text())}
    own = {s: {v["id"]: v for v in json.loads((out / "seeds" / f"seed-{s}" / "shape.json").read_text())}
           for s in exp.quick_seeds}
    report = (out / "report.html").read_text(encoding="utf-8")
    for check in exp.expected_shape:
        v = verdicts[check["id"]]
        assert v["held"] and v["seeds"] == exp.quick_seeds, v
        by, held = _seed_oracle([own[s][check["id"]] for s in exp.quick_seeds], v["margin"], v.get("inclusive"))
        assert v["by"] == pytest.approx(by, rel=1e-12, abs=1e-15) and held, (v, by)
        assert html.escape(str(check["paper"])) in report and html.escape(v["measured"]) in report
    for number in ("23.49%", "23.74%", "24.79%", "27.55%", "33.96%"):   # Figure 1's curve
        assert number in report, number
    # each batch's error is its run's own final test accuracy (one definition; out/runs: the first seed's)
    err = {}
    for b in (256, 8192, 16384, 65536):
        summary = json.loads((out / "runs" / f"B{b}" / "summary.json").read_text())
        assert summary["config"]["batch_size"] == b and summary["config"]["seed"] == exp.quick_seeds[0]
        err[b] = 100 * (1 - summary["final_test_accuracy"])
    assert f"B=256 {err[256]:.2f}%; 8192: {err[8192] - err[256]:+.2f} points" in verdicts["flat_to_8k"]["measured"]
    assert f"B=65536 {err[65536]:.2f}% vs B=16384 {err[16384]:.2f}%" in verdicts["keeps_rising"]["measured"]


# ------------------------------------------------------------------------------ end to end
@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.timeout(600)
def test_reproduce_runs_an_experiment_end_to_end(tmp_path):
    out = tmp_path / "out"
    # one seed (the seeds' combination is tested above and on the simulated reproductions): suite time
    proc = reproduce("experiments/sc17_easgd.yaml", "--quick", "--out", str(out), "--seeds", "0")
    assert proc.returncode in (0, 3), proc.stderr[-3000:]      # 3: a shape did not hold (on a busy machine)
    assert "Executing" in proc.stderr and "cell/s" in proc.stderr   # papermill's progress bar
    assert "[notebook] Executing notebook with kernel" in proc.stderr  # and the notebook's log
    exp = load_experiment(ROOT / "experiments" / "sc17_easgd.yaml")

    executed = out / "easgd_family.ipynb"
    assert executed.exists()
    assert json.loads(executed.read_text())["metadata"]["papermill"]["parameters"]["quick"] is True
    runs = sorted(p.parent.name for p in (out / "runs").glob("*/summary.json"))
    assert {"easgd", "sync_easgd", "async_easgd", "hogwild_easgd", "async_measgd"} <= set(runs)

    verdicts = {v["id"]: v for v in json.loads((out / "shape.json").read_text())}
    report = (out / "report.html").read_text(encoding="utf-8")
    assert "You, Y., Buluç, A., Demmel, J." in report
    for number in ("87%", "14%", "5.3x", "91.5%", "4253 KNL cores"):   # the paper's numbers
        assert number in report, number
    for check in exp.expected_shape:
        assert check["id"] in verdicts, f"the notebook did not measure {check['id']}"
        verdict = "held" if verdicts[check["id"]]["held"] else "did not hold"
        assert html.escape(check["text"]) in report
        assert html.escape(verdicts[check["id"]]["measured"]) in report
        assert f"[{verdict if verdict == 'held' else 'did NOT hold'}] {check['text']}" in proc.stdout
    assert "did not hold" in report or "held" in report
    assert "(quick parameters)" in report
    assert "report: " in proc.stdout and str(out / "report.html") in proc.stdout


# ------------------------------------------------------------------------------ bad input: exit 2, one line
def _one_line_error(proc: subprocess.CompletedProcess, prefix: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(prefix), proc.stderr
    assert "Traceback" not in proc.stderr


def test_missing_experiment_file_exits_2(tmp_path):
    proc = reproduce(str(tmp_path / "nope.yaml"), "--out", str(tmp_path / "out"))
    _one_line_error(proc, "error: experiment: ")
    assert "nope.yaml" in proc.stderr


def test_experiment_file_without_required_keys_exits_2(tmp_path):
    bad = tmp_path / "experiments" / "bad.yaml"
    bad.parent.mkdir()
    bad.write_text("title: only a title\n")
    proc = reproduce(str(bad), "--out", str(tmp_path / "out"))
    _one_line_error(proc, "error: experiment: ")
    assert "missing" in proc.stderr and "paper" in proc.stderr


def _experiment(tmp_path: Path, notebook: str, **changes) -> Path:
    data = {"title": "t", "paper": "A. Author, \"T\", Venue, 2017.", "notebook": notebook, "reported": ["x"],
            "we_run": "y", "expected_shape": [{"id": "a", "text": "b"}], "parameters": {}, "quick_parameters": {}}
    data.update(changes)
    path = tmp_path / "experiments" / "x.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    return path


def test_experiment_naming_a_missing_notebook_exits_2(tmp_path):
    proc = reproduce(str(_experiment(tmp_path, "notebooks/missing.ipynb")), "--out", str(tmp_path / "out"))
    _one_line_error(proc, "error: notebook: ")
    assert "notebooks/missing.ipynb" in proc.stderr


def test_expected_shape_entry_without_an_id_exits_2(tmp_path):
    nb = tmp_path / "notebooks" / "n.ipynb"
    nb.parent.mkdir()
    nbformat = pytest.importorskip("nbformat")
    nbformat.write(nbformat.v4.new_notebook(), nb)
    path = _experiment(tmp_path, "notebooks/n.ipynb", expected_shape=[{"text": "no id"}])
    proc = reproduce(str(path), "--out", str(tmp_path / "out"))
    _one_line_error(proc, "error: expected_shape: ")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_failing_notebook_exits_1_and_names_the_cell(tmp_path):
    pytest.importorskip("papermill")
    nbformat = pytest.importorskip("nbformat")
    from nbformat.v4 import new_code_cell, new_notebook
    nb = new_notebook(cells=[new_code_cell("quick = False\nout_dir = 'x'", metadata={"tags": ["parameters"]}),
                             new_code_cell("raise RuntimeError('boom')")],
                      metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    path = tmp_path / "notebooks" / "fails.ipynb"
    path.parent.mkdir()
    nbformat.write(nb, path)
    out = tmp_path / "out"
    proc = reproduce(str(_experiment(tmp_path, "notebooks/fails.ipynb")), "--quick", "--out", str(out))
    assert proc.returncode == 1, proc.stderr
    assert "fails.ipynb failed in cell" in proc.stderr and "RuntimeError: boom" in proc.stderr
    assert (out / "fails.ipynb").exists(), "the executed notebook shows where it failed"


def _verdict_notebook(tmp_path: Path, verdicts: str) -> str:
    """A notebook that only writes the given shape.json verdicts (Python source of a list)."""
    nbformat = pytest.importorskip("nbformat")
    from nbformat.v4 import new_code_cell, new_notebook
    nb = new_notebook(cells=[new_code_cell("quick = False\nout_dir = 'x'", metadata={"tags": ["parameters"]}),
                             new_code_cell("import json, pathlib\n"
                                           f"pathlib.Path(out_dir, 'shape.json').write_text(json.dumps({verdicts}))")],
                      metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    path = tmp_path / "notebooks" / "verdicts.ipynb"
    path.parent.mkdir(exist_ok=True)
    nbformat.write(nb, path)
    return "notebooks/verdicts.ipynb"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_shape_that_does_not_hold_exits_3_and_quick_skips_say_why(tmp_path):
    pytest.importorskip("papermill")
    verdicts = ('[{"id": "a", "held": True, "measured": "2x"}, {"id": "b", "held": False, "measured": "1.003x", '
                '"value": 1.003, "threshold": 1.0, "margin": 0.02, "above": True, "spread": "seeds 0-2"}]')
    shapes = [{"id": "a", "text": "held"}, {"id": "b", "text": "inside the spread"}, {"id": "c", "text": "unmeasured"}]
    nb = _verdict_notebook(tmp_path, verdicts)
    path = _experiment(tmp_path, nb, expected_shape=shapes)
    proc = reproduce(str(path), "--out", str(tmp_path / "full"), "--no-progress")
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "error: expected shape did not hold: b, c (exit 3)" in proc.stderr
    assert "margin > 1 + 0.02 (spread: seeds 0-2)" in proc.stdout
    # quick mode: the skipped shapes say why and do not fail; every other one still must hold
    path = _experiment(tmp_path, nb, expected_shape=shapes, quick_skips={"b": "too few steps", "c": "needs 8k steps"})
    proc = reproduce(str(path), "--quick", "--out", str(tmp_path / "quick"), "--no-progress")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "[skipped in quick mode] inside the spread  (1.003x (quick mode: too few steps)" in proc.stdout
    proc = reproduce(str(_experiment(tmp_path, nb, expected_shape=shapes, quick_skips={"z": "?"})), "--quick",
                     "--out", str(tmp_path / "bad"))
    _one_line_error(proc, "error: quick_skips: ")


def _seeded_notebook(tmp_path, *compares: str) -> None:
    """notebooks/seeded.ipynb under tmp_path: a parameters cell (quick, out_dir, seed), then
    ShapeChecks with one line of `compares` each, written to out_dir (papermill and nbformat
    needed: skipped without them)."""
    pytest.importorskip("papermill")
    nbformat = pytest.importorskip("nbformat")
    from nbformat.v4 import new_code_cell, new_notebook
    nb = new_notebook(cells=[
        new_code_cell("quick = False\nout_dir = 'x'\nseed = 0", metadata={"tags": ["parameters"]}),
        new_code_cell("from workbench.analysis.shape import ShapeChecks\nchecks = ShapeChecks()\n"
                      + "".join(compares) + "checks.write(out_dir)")],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    (tmp_path / "notebooks").mkdir()
    nbformat.write(nb, tmp_path / "notebooks" / "seeded.ipynb")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_verdict_inside_its_spread_over_seeds_is_not_resolved(tmp_path):
    # The notebook runs once per seed; "steady" clears its threshold by far more than it moves
    # between seeds (held), "noisy" clears it on the median but moves more than that between
    # seeds: not resolved, exit 3, and every seed's own verdicts are kept.
    _seeded_notebook(tmp_path, "checks.compare('steady', 2.0 + 0.01 * seed, 1.0, margin=0.1, spread='stated')\n",
                     "checks.compare('noisy', {0: 1.3, 1: 0.8, 2: 1.2}[seed], 1.0, margin=0.05, spread='stated')\n")
    path = _experiment(tmp_path, "notebooks/seeded.ipynb", seeds=[0, 1, 2],
                       expected_shape=[{"id": "steady", "text": "far beyond"}, {"id": "noisy", "text": "inside"}])
    out = tmp_path / "out"
    proc = reproduce(str(path), "--out", str(out), "--no-progress")
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "error: expected shape did not hold: noisy (exit 3)" in proc.stderr
    assert "[held] far beyond" in proc.stdout and "[not resolved] inside  (not resolved: " in proc.stdout
    v = {x["id"]: x for x in json.loads((out / "shape.json").read_text())}
    # steady: distances 1.0, 1.01, 1.02 from 1.0; median 1.01 - max(0.1, half the range 0.01)
    assert v["steady"]["held"] and v["steady"]["by"] == pytest.approx(0.91)
    assert v["steady"]["values"] == pytest.approx([2.0, 2.01, 2.02]) and v["steady"]["value"] == pytest.approx(2.01)
    # noisy: distances 0.3, -0.2, 0.2: median 0.2 inside +-0.25 (half the range), seeds on both sides
    assert not v["noisy"]["held"] and v["noisy"]["resolved"] is False
    assert v["noisy"]["by"] == pytest.approx(0.2 - 0.25) and v["noisy"]["seed_spread"] == pytest.approx(0.25)
    assert v["noisy"]["spread"] == "over seeds 0-2: +-0.25 (0.8 to 1.3)" and v["noisy"]["spread_note"] == "stated"
    for seed, value in ((0, 1.3), (1, 0.8), (2, 1.2)):
        own = {x["id"]: x for x in json.loads((out / "seeds" / f"seed-{seed}" / "shape.json").read_text())}
        assert own["noisy"]["value"] == value
    assert (out / "seeds" / "seed-2" / "seeded.ipynb").exists() and (out / "seeded.ipynb").exists()
    assert "not resolved" in (out / "report.html").read_text(encoding="utf-8")
    # two seeds at a time (each its own process and kernel): the same verdicts, values and
    # per-seed files as one at a time
    proc = reproduce(str(path), "--out", str(tmp_path / "two"), "--no-progress", "--seed-jobs", "2")
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert json.loads((tmp_path / "two" / "shape.json").read_text()) == list(v.values())
    for seed in (0, 1, 2):
        assert (json.loads((tmp_path / "two" / "seeds" / f"seed-{seed}" / "shape.json").read_text())
                == json.loads((out / "seeds" / f"seed-{seed}" / "shape.json").read_text()))
    proc = reproduce(str(path), "--out", str(tmp_path / "bad"), "--seed-jobs", "0")
    _one_line_error(proc, "error: seed_jobs: an integer >= 1, got 0")
    # --seeds overrides the file: one seed, whose own verdict holds
    proc = reproduce(str(path), "--out", str(tmp_path / "one"), "--seeds", "0", "--no-progress")
    assert proc.returncode == 0, proc.stderr[-2000:]
    proc = reproduce(str(path), "--out", str(tmp_path / "bad"), "--seeds", "0,0")
    _one_line_error(proc, "error: seeds: ")


# ------------------------------------------------------------------------------ paper vs simulated
def test_report_sets_the_papers_numbers_beside_ours(tmp_path):
    # An expected shape may carry the paper's number; the notebook's verdict carries ours; the
    # report's table joins them by id (a shape not measured reads so; the paper column is text).
    from workbench.analysis.shape import ShapeChecks, paper_vs_measured
    from workbench.apps.reproduce import _write_report
    nbformat = pytest.importorskip("nbformat")
    nb = tmp_path / "notebooks" / "n.ipynb"
    nb.parent.mkdir()
    nbformat.write(nbformat.v4.new_notebook(), nb)
    path = _experiment(tmp_path, "notebooks/n.ipynb", expected_shape=[
        {"id": "comm_share", "text": "original EASGD mostly communicates", "paper": "87% <b>"},
        {"id": "speedup", "text": "sync several times faster", "paper": "5.3x"},
        {"id": "words_only", "text": "a shape the paper gave in words"}])
    exp = load_experiment(path)
    checks = ShapeChecks()
    checks.check("comm_share", True, "91.2%")
    checks.check("speedup", False, "2.4x (needed >= 3x)")
    checks.check("extra", True, "measured beyond the shape")
    rows = paper_vs_measured(exp.expected_shape, checks.verdicts)
    assert [(r["paper"], r["measured"], r["verdict"]) for r in rows] == [
        ("87% <b>", "91.2%", "held"), ("5.3x", "2.4x (needed >= 3x)", "did not hold"),
        ("", "not measured", "not checked")]

    report = tmp_path / "report.html"
    _write_report(exp, rows, tmp_path, report, quick=False)
    text = report.read_text(encoding="utf-8")
    assert "paper vs measured here" in text
    table = text[text.index("class='paper-vs'"):]
    table = table[:table.index("</table>")]
    cells = [c.split("</td>")[0] for c in table.split("<td")[1:]]
    cells = [c[c.index(">") + 1:] for c in cells]
    assert cells[:6] == ["<code>comm_share</code>", "original EASGD mostly communicates", "87% &lt;b&gt;", "91.2%",
                         "", "held"]
    assert cells[6:12] == ["<code>speedup</code>", "sync several times faster", "5.3x", "2.4x (needed &gt;= 3x)",
                           "", "did not hold"]
    assert cells[14:18] == ["", "not measured", "", "not checked"]

    # the notebook's own view: the same rows, then what was measured beyond the shape
    df = checks.table(experiment=path)
    assert list(df.columns) == ["id", "text", "paper", "measured", "margin", "verdict"]
    assert df["paper"].tolist() == ["87% <b>", "5.3x", "", ""]
    assert df["id"].tolist() == ["comm_share", "speedup", "words_only", "extra"]


def test_a_paper_number_that_is_not_text_exits_2(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nb = tmp_path / "notebooks" / "n.ipynb"
    nb.parent.mkdir()
    nbformat.write(nbformat.v4.new_notebook(), nb)
    path = _experiment(tmp_path, "notebooks/n.ipynb", expected_shape=[{"id": "a", "text": "b", "paper": [87]}])
    proc = reproduce(str(path), "--out", str(tmp_path / "out"))
    _one_line_error(proc, "error: expected_shape.paper: ")


# ------------------------------------------------------------------------------ never overwrite what it did not write
def test_reproduce_into_the_notebooks_folder_refuses_to_overwrite_the_lesson():
    lesson = ROOT / "notebooks" / "easgd_family.ipynb"
    before = lesson.read_bytes()
    proc = reproduce("experiments/sc17_easgd.yaml", "--quick", "--out", str(ROOT / "notebooks"))
    _one_line_error(proc, "error: out: ")
    assert "is the lesson notebook" in proc.stderr
    assert lesson.read_bytes() == before and not (ROOT / "notebooks" / ".workbench-reproduce").exists()


def test_reproduce_rewrites_only_the_files_it_wrote(tmp_path):
    from workbench.apps.reproduce import _claim_files
    from workbench.config import ConfigError
    source = ROOT / "notebooks" / "easgd_family.ipynb"
    names = [source.name, "report.html", "shape.json"]
    out = tmp_path / "out"
    _claim_files(out, names, source)
    for name in names:
        (out / name).write_text("ours")
    _claim_files(out, names, source)                  # a second reproduction into its own folder: fine
    other = tmp_path / "other"
    other.mkdir()
    (other / "report.html").write_text("someone's report")
    with pytest.raises(ConfigError, match="report.html exists: move it"):
        _claim_files(other, names, source)
    assert (other / "report.html").read_text() == "someone's report"


# ------------------------------------------------------------------------------ a researcher's data and model
# the lessons whose config is built from `dataset`: each takes `label_column` (a CSV of yours) and,
# where its MLP is not the lesson's premise, `model` (sim_icpe's layer shape is: cgdp's chunks)
TAKE_DATA = {"communication_efficient", "cpu_gpu", "easgd_family", "faults_and_recovery", "goyal_fig1", "large_batch",
             "ltfb_tournaments", "scaling_costmodel", "sim_goyal", "sim_icpe", "sim_knl", "sim_ltfb", "sim_sc17",
             "sync_async_hogwild"}
KEEP_MODEL = {"sim_icpe"}


@pytest.mark.parametrize("stem", sorted(TAKE_DATA))
def test_reproduce_passes_a_lessons_label_column_and_model_to_its_notebook(stem, tmp_path, monkeypatch):
    """An experiment file's `label_column` and `model` reach the lesson's parameters cell through
    reproduce's own parameter handling (its check of the notebook's names, then what it injects;
    the notebook's execution stood in for): reproduce refused both, naming the cell's names."""
    pytest.importorskip("papermill")
    from workbench.apps import reproduce as rep
    from workbench.config import ConfigError
    injected: list[dict] = []
    monkeypatch.setattr(rep, "_execute", lambda exp, where, params, kernel, progress: injected.append(params) or [])
    asked = {"dataset": str(tmp_path / "table.csv"), "label_column": "grade", "model": "softmax"}
    if stem in KEEP_MODEL:
        asked.pop("model")
    exp = tmp_path / "exp.yaml"
    exp.write_text(yaml.safe_dump({"title": "t", "paper": "p", "notebook": f"notebooks/{stem}.ipynb", "reported": [],
                                   "we_run": "w", "expected_shape": [], "parameters": asked}))
    rep.reproduce(exp, tmp_path / "out", progress=False, notebook=ROOT / "notebooks" / f"{stem}.ipynb", seeds=[0])
    assert len(injected) == 1 and {k: injected[0][k] for k in asked} == asked
    if stem in KEEP_MODEL:    # its model stays the lesson's: a model asked is refused, naming the names it takes
        exp.write_text(exp.read_text().replace("parameters:\n", "parameters:\n  model: softmax\n"))
        with pytest.raises(ConfigError, match=r"^parameters: names from the notebook's parameters cell \(.*label_column"):
            rep.reproduce(exp, tmp_path / "out", progress=False, notebook=ROOT / "notebooks" / f"{stem}.ipynb", seeds=[0])


def test_a_verdicts_threshold_reads_as_one_number_where_its_margin_is_0():
    # the audit's "margin < 1 - 0": a margin of 0 moves nothing, so the threshold is the one number;
    # a margin that is there is still said beside it (what the value had to clear)
    from workbench.analysis.shape import ShapeChecks, margin_text
    checks = ShapeChecks()
    checks.compare("ratio", 0.8, 1.0, margin=0.0, above=False)
    checks.compare("gap", 0.0, 0.0, margin=0.0, above=False, inclusive=True)
    checks.compare("gain", 1.5, 1.0, margin=0.02, spread="seeds 0-4")
    assert [margin_text(v) for v in checks.verdicts] == [
        "< 1; held by 0.2", "<= 0; held by 0", "> 1 + 0.02 (spread: seeds 0-4); held by 0.48"]


@pytest.mark.timeout(300)
def test_a_verdict_held_with_margin_0_says_it_held_on_the_seeds_signs_alone(tmp_path):
    # With a margin of 0, an effect every seed shows on the expected side holds however small:
    # reproduce now says so beside it, with the odds of that under no effect (each seed on either
    # side with even odds: all N on one side 1 time in 2^N); a margin that is there, and a verdict
    # that did not hold, get no such note.
    _seeded_notebook(tmp_path, "checks.compare('tiny', 1.0 + 1e-9 * (seed + 1), 1.0, margin=0.0, spread='stated')\n",
                     "checks.compare('wide', 2.0 + 0.01 * seed, 1.0, margin=0.1, spread='stated')\n",
                     "checks.compare('median', {0: 1.5, 1: 0.99, 2: 1.6}[seed], 1.0, margin=0.0, spread='stated')\n",
                     "checks.compare('wrong', 0.9, 1.0, margin=0.0, spread='stated')\n")
    shapes = [{"id": "tiny", "text": "a hair above"}, {"id": "wide", "text": "far above"},
              {"id": "median", "text": "two of three"}, {"id": "wrong", "text": "below"}]
    path = _experiment(tmp_path, "notebooks/seeded.ipynb", seeds=[0, 1, 2], expected_shape=shapes)
    out = tmp_path / "out"
    proc = reproduce(str(path), "--out", str(out), "--no-progress", "--seed-jobs", "3")
    assert proc.returncode == 3, proc.stderr[-2000:]
    lines = {line.split("]")[1].split("  (")[0].strip(): line for line in proc.stdout.splitlines() if "] " in line}
    assert lines["a hair above"].startswith("  [held]")
    assert "margin 0: held on the sign of each of 3 seeds alone (with no effect, 1 in 8 by chance)" \
        in lines["a hair above"]
    # medians 1.6 and 1.5 against a range of +-0.305: held, with seed 1 below the threshold
    assert lines["two of three"].startswith("  [held]")
    assert "margin 0: held on the median of 3 seeds beyond their range, one or more seeds on the other side" \
        in lines["two of three"]
    assert "margin 0" not in lines["far above"] and "margin 0" not in lines["below"]
    assert "1 in 8 by chance" in (out / "report.html").read_text(encoding="utf-8")
    # one seed: 1 in 2
    proc = reproduce(str(path), "--out", str(tmp_path / "one"), "--seeds", "0", "--no-progress")
    assert "margin 0: held on the sign of 1 seed alone (with no effect, 1 in 2 by chance)" in proc.stdout


@pytest.mark.timeout(300)
def test_reproduce_no_progress_shows_no_kernel_transport_warning(tmp_path):
    # the audit: `reproduce --no-progress` printed "[IPKernelApp] WARNING | Kernel is running over TCP
    # without encryption" twice, though its help says no notebook log on stderr; the kernel's own log
    # is at ERROR now, and a notebook's failure still reaches stderr (the test above)
    pytest.importorskip("papermill")
    nb = _verdict_notebook(tmp_path, '[{"id": "a", "held": True, "measured": "2x"}]')
    proc = reproduce(str(_experiment(tmp_path, nb)), "--out", str(tmp_path / "out"), "--no-progress")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "IPKernelApp" not in proc.stderr and "without encryption" not in proc.stderr, proc.stderr
