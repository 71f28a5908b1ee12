"""Runs that travel: compare run directories from the shell, export to TensorBoard (read
back with TensorBoard's own reader), the CLI sweep's figure, the git commit in
summary.json, and the lessons copied out of the package."""
from __future__ import annotations

import html
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import workbench as wb
from workbench.util.provenance import git_state

ENV = {**os.environ, "PYTHONWARNINGS": "ignore"}
ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "workbench", *args], capture_output=True, text=True, env=ENV,
                          cwd=cwd, timeout=300)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """Two short single-process runs (different lr), saved as run directories."""
    root = tmp_path_factory.mktemp("runs")
    dirs = []
    for lr in (0.1, 0.3):
        out = root / f"lr{lr}"
        wb.run(wb.RunConfig(algorithm="sgd", dataset="digits", steps=30, eval_every=10, lr=lr, out=str(out)),
               progress=False)
        dirs.append(out)
    return dirs


def test_compare_writes_one_report_of_every_run(two_runs, tmp_path):
    out = tmp_path / "cmp.html"
    proc = run_cli("compare", *map(str, two_runs), "--out", str(out), "--labels", "slow,fast")
    assert proc.returncode == 0, proc.stderr
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and "plotly" in page
    assert "slow" in page and "fast" in page and "comparison of 2 runs" in page
    assert page.count('class="figure"') >= 3          # progress (time, epoch) and comparison
    # and the terminal gets the runs table: each label, the config field that differs, the numbers
    lines = proc.stdout.splitlines()
    head, slow, fast = lines[0].split(), lines[1].split(), lines[2].split()
    assert head[:3] == ["run", "lr", "status"] and "test acc" in lines[0] and "samples/s" in lines[0]
    assert slow[:3] == ["slow", "0.1", "completed"] and fast[:3] == ["fast", "0.3", "completed"]
    for row, d in ((slow, two_runs[0]), (fast, two_runs[1])):
        acc = wb.load(d).summary["final_test_accuracy"]
        assert f"{acc:.4f}" in row
    assert lines[-1] == f"report: {out}"
    assert all(line.startswith("  note (") for line in lines[3:-1])   # what a run's numbers come with, if anything


def test_compare_says_what_each_runs_numbers_come_with(two_runs, tmp_path):
    """A run measured while other processes used the cores says so in `run`'s line and its
    report; `compare` printed its rate beside another's without it."""
    busy = tmp_path / "busy"
    shutil.copytree(two_runs[1], busy)
    summary = json.loads((busy / "summary.json").read_text())
    summary["machine_note"] = "other processes used 1.1 of 2 cores during this run: its throughput measures the machine"
    (busy / "summary.json").write_text(json.dumps(summary))
    out = tmp_path / "cmp.html"
    proc = run_cli("compare", str(two_runs[0]), str(busy), "--out", str(out), "--labels", "quiet,busy")
    assert proc.returncode == 0, proc.stderr
    assert f"  note (busy): {summary['machine_note']}" in proc.stdout.splitlines()
    assert "<li><b>busy</b>: other processes used 1.1 of 2 cores" in out.read_text()


def test_compare_gives_the_validation_numbers_of_runs_that_held_rows_out(two_runs, tmp_path):
    """A run with a validation set (`val_fraction`) beside one without: the table gains val acc
    and val loss, the run's own, and "-" for the run that held none out."""
    held = tmp_path / "held"
    wb.run(wb.RunConfig(algorithm="sgd", dataset="digits", steps=30, eval_every=10, val_fraction=0.2, out=str(held)),
           progress=False)
    proc = run_cli("compare", str(two_runs[0]), str(held), "--out", str(tmp_path / "c.html"), "--labels", "plain,held")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    head = lines[0]
    assert head.index("test loss") < head.index("val acc") < head.index("val loss") < head.index("wall s")
    s = wb.load(held).summary
    at = lambda line, name: line[head.index(name):head.index(name) + len(name)].strip()   # a right-aligned cell
    assert at(lines[2], "val acc") == f"{s['final_val_accuracy']:.4f}"
    assert at(lines[2], "val loss") == f"{s['final_val_loss']:.4f}"
    assert at(lines[1], "val acc") == "-" and at(lines[1], "val loss") == "-"


def _copy_with(src, dst, **changes):
    """A copy of run directory `src` whose summary.json has `changes` (a `config` dict updates the config)."""
    shutil.copytree(src, dst)
    summary = json.loads((dst / "summary.json").read_text())
    summary["config"].update(changes.pop("config", {}))
    summary.update(changes)
    (dst / "summary.json").write_text(json.dumps(summary))
    return summary


def test_compare_says_which_runs_do_not_compare(two_runs, tmp_path):
    """A simulated run beside a measured one (virtual seconds against wall-clock ones), a run on
    another dataset and a stopped one (its accuracy from an evaluation before its last step):
    `compare` set their rates and accuracies in the same columns and said nothing; each is now
    said, naming the runs, in the terminal and the page."""
    _copy_with(two_runs[1], tmp_path / "sim", simulated=True, device=None, network="shm", timing_model="mlp")
    _copy_with(two_runs[1], tmp_path / "other", config={"dataset": "mnist1d"}, status="stopped",
               total_steps_planned=300, steps=35)   # stopped 5 steps past its last evaluation
    evaluated = int(pd.read_csv(tmp_path / "other" / "evals.csv")["step"].iloc[-1]) + 1   # steps run at it
    assert evaluated == 30
    out = tmp_path / "cmp.html"
    proc = run_cli("compare", str(two_runs[0]), str(tmp_path / "sim"), str(tmp_path / "other"), "--out", str(out),
                   "--labels", "real,sim,other")
    assert proc.returncode == 0, proc.stderr
    said = [line[len("  note: "):] for line in proc.stdout.splitlines() if line.startswith("  note: ")]
    assert said == [
        "simulated: sim (times and samples/s in virtual seconds of the simulated cluster); measured: real, other "
        "(wall-clock seconds): times and rates do not compare between the two",
        "different datasets (digits: real, sim; mnist1d: other): their losses and accuracies are of different tasks "
        "and do not compare across them",
        "other stopped after 35 of 300 planned steps: its numbers are where it ended, its test numbers from its "
        f"last evaluation, after {evaluated} steps"]
    page = out.read_text()
    assert "<b>simulated</b> (sim): " in page           # the header says which run is simulated
    for line in said:
        assert f"<li>{html.escape(line)}</li>" in page
    # runs of one kind, one dataset, completed: nothing to say
    proc = run_cli("compare", *map(str, two_runs), "--out", str(tmp_path / "same.html"))
    assert proc.returncode == 0 and not [ln for ln in proc.stdout.splitlines() if ln.startswith("  note: ")]
    assert '<ul class="compared">' not in (tmp_path / "same.html").read_text()


def test_compare_gives_each_test_accuracy_its_95_percent_interval(two_runs, tmp_path):
    """How sure each accuracy is, beside it: the Wilson score interval of the run's accuracy on
    its test rows, checked against the closed form and the run's own `final_test_accuracy_95`."""
    out = tmp_path / "cmp.html"
    proc = run_cli("compare", *map(str, two_runs), "--out", str(out), "--labels", "a,b")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    head = lines[0]
    assert head.index("test acc") < head.index("test acc 95%") < head.index("test loss")
    page = out.read_text()
    for line, d in zip(lines[1:3], two_runs):
        s = wb.load(d).summary
        p, n, z = s["final_test_accuracy"], s["test_rows"], 1.959963984540054
        mid, half = (p + z * z / (2 * n)) / (1 + z * z / n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (
            1 + z * z / n)
        assert s["final_test_accuracy_95"] == pytest.approx([mid - half, mid + half], abs=1e-12)
        shown = f"{mid - half:.2f}-{mid + half:.2f}"
        at = head.index("test acc 95%")
        assert line[at:at + len("test acc 95%")].strip() == shown   # (a right-aligned cell, under its header)
        assert f"<td class=\"text\">{shown} of {n:,} rows</td>" in page


def test_a_resumed_runs_report_and_compare_say_it_was_resumed(two_runs, tmp_path):
    """A run stopped and resumed showed as one uninterrupted completed run in its report and in
    `compare`, its wall time a sum over both segments without a word; both now say how it got there."""
    segments = [{"from_step": 0, "to_step": 12, "ran_to": 12, "status": "stopped",
                 "ended": "stopped: KeyboardInterrupt (SIGINT) after 12 steps; resumed from its checkpoint at step 12"},
                {"from_step": 12, "to_step": 30, "ran_to": 30, "status": "completed", "ended": "completed"}]
    _copy_with(two_runs[0], tmp_path / "res", segments=segments, resumed_from={"step": 12, "checkpoint": "x.npz"})
    expected = ("resumed once (2 segments: stopped: KeyboardInterrupt (SIGINT) after 12 steps; resumed from its "
                "checkpoint at step 12; then completed): wall_time_s and startup_s are sums over its segments, the "
                "time between them counted nowhere")
    proc = run_cli("compare", str(two_runs[1]), str(tmp_path / "res"), "--out", str(tmp_path / "c.html"),
                   "--labels", "plain,res")
    assert proc.returncode == 0, proc.stderr
    assert f"  note (res): {expected}" in proc.stdout.splitlines()
    from workbench.ui.report import write_report
    page = write_report(tmp_path / "res", tmp_path / "res" / "report.html").read_text()
    assert html.escape(expected) in page
    assert "resumed" not in write_report(two_runs[1], tmp_path / "plain.html").read_text().split("<body>")[1]


def test_a_runs_report_gives_its_test_accuracy_with_its_95_percent_interval(two_runs, tmp_path):
    """report.html gave "final test accuracy 89.7 %" with nothing of how sure it is; its summary
    now has the interval the run recorded (`final_test_accuracy_95`), in % as the accuracy is."""
    from workbench.ui.report import write_report
    s = wb.load(two_runs[0]).summary
    page = write_report(two_runs[0], tmp_path / "report.html").read_text()
    lo, hi = s["final_test_accuracy_95"]
    assert lo < s["final_test_accuracy"] < hi
    assert (f"<td>{100 * lo:.2f}-{100 * hi:.2f}</td><td class=\"text\">%</td><td class=\"text\">"
            "<code>final_test_accuracy_95</code>") in page


@pytest.mark.parametrize("args, field", [
    (["nowhere"], "RUN_DIR"),
    (["{a}", "{b}", "--labels", "only-one"], "labels"),
])
def test_compare_bad_input_exits_2_with_one_line(two_runs, tmp_path, args, field):
    args = [a.format(a=two_runs[0], b=two_runs[1]) for a in args]
    proc = run_cli("compare", *args, "--out", str(tmp_path / "x.html"))
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: {field}: ") and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x.html").exists()


def test_tensorboard_export_reads_back_with_tensorboards_own_reader(two_runs, tmp_path):
    pytest.importorskip("tensorboardX", reason="the tensorboard extra (tensorboardX) is not installed")
    ea_mod = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator",
                                 reason="TensorBoard is not installed (pip install tensorboard)")
    logdir = tmp_path / "tb"
    proc = run_cli("export", "--tensorboard", *map(str, two_runs), "--logdir", str(logdir))
    assert proc.returncode == 0, proc.stderr
    for run_dir in two_runs:
        folder = logdir / run_dir.name
        acc = ea_mod.EventAccumulator(str(folder), size_guidance={ea_mod.SCALARS: 0, ea_mod.TENSORS: 0})
        acc.Reload()
        tags = set(acc.Tags()["scalars"])
        assert {"train/loss", "train/lr", "eval/test_accuracy", "time/compute_s"} <= tags
        steps = pd.read_csv(run_dir / "steps.csv")
        evals = pd.read_csv(run_dir / "evals.csv")
        loss = acc.Scalars("train/loss")
        assert [e.step for e in loss] == steps["step"].tolist()
        assert [e.value for e in loss] == pytest.approx(steps["loss"].tolist(), rel=1e-6)
        acc_events = acc.Scalars("eval/test_accuracy")
        assert [e.step for e in acc_events] == evals["step"].tolist()
        assert [e.value for e in acc_events] == pytest.approx(evals["test_accuracy"].tolist(), rel=1e-6)
        summary = json.loads((run_dir / "summary.json").read_text())
        assert acc.Scalars("train/lr")[0].value == pytest.approx(summary["config"]["lr"])
        # wall times are the run's own: in order, spanning the training
        walls = [e.wall_time for e in loss]
        assert walls == sorted(walls) and walls[-1] - walls[0] == pytest.approx(
            steps["time"].iloc[-1] - steps["time"].iloc[0], abs=1e-3)


def test_tensorboard_wall_times_are_when_the_steps_ran(two_runs, tmp_path):
    """The export laid each step at the run's start plus its `time`, but `time` counts from the
    first training step, `startup_s` after the start: TensorBoard's wall-time axis put every step
    a start-up too early (24.7 s for a run whose cluster took that to start). Oracle: the time
    identity wall = startup + train + teardown, summary.json written at the end, so the last step
    ended `teardown_s` before it was written. A simulated run's status text says its times are virtual."""
    pytest.importorskip("tensorboardX")
    ea_mod = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    from workbench.apps.export import export_tensorboard
    s = json.loads((two_runs[0] / "summary.json").read_text())
    slow = tmp_path / "slow"   # the same run, its start-up 100 s longer
    _copy_with(two_runs[0], slow, startup_s=s["startup_s"] + 100, wall_time_s=s["wall_time_s"] + 100, simulated=True)
    written = 1_800_000_000.0
    os.utime(slow / "summary.json", (written, written))
    folder, = export_tensorboard([slow], tmp_path / "tb")
    acc = ea_mod.EventAccumulator(str(folder), size_guidance={ea_mod.SCALARS: 0, ea_mod.TENSORS: 0})
    acc.Reload()
    last_end = pd.read_csv(slow / "steps.csv")["time"].iloc[-1]
    # (the last step's record time is the training's end, to the microsecond: train_time_s)
    assert last_end == pytest.approx(s["train_time_s"], abs=1e-3)
    assert acc.Scalars("train/loss")[-1].wall_time == pytest.approx(written - s["teardown_s"], abs=2e-3)
    status = acc.Tensors("status/text_summary")[0].tensor_proto.string_val[0].decode()
    assert status.endswith("; simulated: its times are virtual seconds"), status


def test_tensorboard_export_never_mixes_two_exports(two_runs, tmp_path):
    pytest.importorskip("tensorboardX")
    from workbench.apps.export import export_tensorboard
    first = export_tensorboard(two_runs[:1], tmp_path)
    second = export_tensorboard(two_runs[:1], tmp_path)
    assert first[0] != second[0] and second[0].name == f"{two_runs[0].name}-2"


def test_summary_records_the_git_commit_of_the_code(two_runs):
    summary = json.loads((two_runs[0] / "summary.json").read_text())
    assert "git_commit" in summary and "git_dirty" in summary
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(wb.__file__).parent, capture_output=True,
                          text=True)
    if head.returncode == 0:
        assert summary["git_commit"] == head.stdout.strip() and isinstance(summary["git_dirty"], bool)
    else:
        assert summary["git_commit"] is None and summary["git_dirty"] is None


def test_git_state_clean_dirty_and_outside_a_checkout(tmp_path, monkeypatch):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    (repo / "f.txt").write_text("a\n")
    subprocess.run([*git, "add", "f.txt"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "one"], cwd=repo, check=True)
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    assert git_state(repo) == {"git_commit": sha, "git_dirty": False}
    (repo / "new.txt").write_text("untracked files do not count\n")
    assert git_state(repo / "f.txt")["git_dirty"] is False
    (repo / "f.txt").write_text("b\n")
    assert git_state(repo) == {"git_commit": sha, "git_dirty": True}
    outside = tmp_path / "plain"
    outside.mkdir()
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))   # never look above tmp_path
    assert git_state(outside) == {"git_commit": None, "git_dirty": None}
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))            # no git at all: None, no error
    assert git_state(repo) == {"git_commit": None, "git_dirty": None}


def test_cli_sweep_writes_its_scaling_figure_beside_the_csv(tmp_path):
    out = tmp_path / "sweep"
    proc = run_cli("sweep", "--algorithm", "sgd", "--steps", "20", "--workers", "1,2", "--mode", "weak",
                   "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    paths = json.loads(proc.stdout.strip().splitlines()[-1])
    assert paths == {"sweep": str(out / "sweep.csv"), "figure": str(out / "sweep.html")}
    page = (out / "sweep.html").read_text()
    assert "weak scaling of sgd on digits" in page
    assert "efficiency" in page and "1 worker" in page and "2 workers" in page


def test_lessons_copies_notebooks_and_experiments_and_keeps_edits(tmp_path):
    dest = tmp_path / "lessons"
    proc = run_cli("lessons", str(dest))
    assert proc.returncode == 0, proc.stderr
    for part, pattern in (("notebooks", "*.ipynb"), ("experiments", "*.yaml")):
        src = sorted(p.name for p in (ROOT / part).glob(pattern))
        assert sorted(p.name for p in (dest / part).glob(pattern)) == src and src
        for name in src:
            assert (dest / part / name).read_bytes() == (ROOT / part / name).read_bytes()
    edited = dest / "notebooks" / "quickstart.ipynb"
    edited.write_text("{}")
    assert run_cli("lessons", str(dest)).returncode == 0
    assert edited.read_text() == "{}"                       # a second copy keeps your edits
    assert run_cli("lessons", str(dest), "--overwrite").returncode == 0
    assert edited.read_bytes() == (ROOT / "notebooks" / "quickstart.ipynb").read_bytes()
    # the copied experiment resolves its notebook inside the copy
    from workbench.apps.reproduce import load_experiment
    exp = load_experiment(dest / "experiments" / "sc17_easgd.yaml")
    assert exp.notebook == (dest / "notebooks" / "easgd_family.ipynb").resolve()
