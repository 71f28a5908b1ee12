"""A run directory is claimed at start and committed at the end: concurrent runs never
collide, summary.json is written last, a write error is one line with what could be kept
kept, and load / compare / export recognise an uncommitted or broken directory."""
import errno
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import workbench as wb
import workbench.results as results
from workbench.config import ConfigError, RunConfig
from workbench.results import CLAIM, RunResult, UncommittedRunError, claim_run_dir

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONPATH": str(ROOT)}
QUICK = dict(steps=3, dataset="digits", model="softmax")


def test_a_claimed_directory_sends_the_next_claim_to_a_sibling(tmp_path):
    first = claim_run_dir(tmp_path / "run")
    second = claim_run_dir(tmp_path / "run")
    assert first == tmp_path / "run" and second == tmp_path / "run-2"
    assert (first / CLAIM).exists() and (second / CLAIM).exists()
    (tmp_path / "done").mkdir()
    (tmp_path / "done" / "summary.json").write_text("{}")
    assert claim_run_dir(tmp_path / "done") == tmp_path / "done-2"             # holds a run
    stage = claim_run_dir(tmp_path / "done", overwrite=True)                    # unless replacing it: beside it,
    assert stage.parent == tmp_path and stage.name.startswith(".done.overwrite-")   # until the new run commits
    assert results.final_dir(stage) == tmp_path / "done" and (stage / CLAIM).exists()


def test_two_runs_given_the_same_directory_both_keep_their_runs(tmp_path):
    out = str(tmp_path / "same")
    got, errors = [], []

    def one(seed):
        try:
            got.append(wb.run(RunConfig(**QUICK, seed=seed, out=out), progress=False))
        except Exception as exc:   # noqa: BLE001 - the test reports it
            errors.append(exc)
    threads = [threading.Thread(target=one, args=(s,)) for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    dirs = sorted(r.summary["config"]["out"] for r in got)
    assert dirs == sorted([out, out + "-2"])
    for d in dirs:
        assert RunResult.load(d).summary["config"]["seed"] in (1, 2) and not (Path(d) / CLAIM).exists()
    moved = [r for r in got if r.summary["config"]["out"] != out][0]
    assert any("was claimed by another run" in e["message"] for e in moved.events)


def test_summary_json_is_written_last(tmp_path, monkeypatch):
    order = []
    real = results.result.atomic_write
    monkeypatch.setattr(results.result, "atomic_write",
                        lambda path, text, **kw: (order.append(Path(path).name), real(path, text, **kw)))
    close = results.StepStore.close     # steps.csv is streamed while the run goes, and synced here
    monkeypatch.setattr(results.StepStore, "close", lambda self: (order.append("steps.csv"), close(self)))
    wb.run(RunConfig(**QUICK, out=str(tmp_path / "run")), progress=False)
    assert order[-1] == "summary.json" and {"steps.csv", "evals.csv", "config.yaml"} <= set(order[:-1])
    assert not (tmp_path / "run" / CLAIM).exists()


def test_a_full_disk_is_one_error_keeping_what_was_written(tmp_path, monkeypatch):
    real = results.result.atomic_write

    def full(path, text, **kw):
        if Path(path).name == "evals.csv":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real(path, text, **kw)
    monkeypatch.setattr(results.result, "atomic_write", full)
    with pytest.raises(results.RunDirError, match="No space left on device") as info:
        wb.run(RunConfig(**QUICK, out=str(tmp_path / "run")), progress=False)
    assert "\n" not in str(info.value)
    assert (tmp_path / "run" / "steps.csv").exists() and not (tmp_path / "run" / "summary.json").exists()
    with pytest.raises(UncommittedRunError, match="uncommitted run directory .* holds steps.csv"):
        RunResult.load(tmp_path / "run")


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "workbench", *args], capture_output=True, text=True, env=ENV,
                          timeout=300)


@pytest.mark.slow
def test_the_cli_says_a_write_error_in_one_line_and_exits_1(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "evals.csv").mkdir()           # evals.csv cannot be written: a directory is in its place
    proc = _cli("run", "--algorithm", "sgd", "--steps", "3", "--model", "softmax", "--out", str(out))
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 1, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("error: out: could not write the run directory"), proc.stderr
    assert (out / "steps.csv").exists() and not (out / "summary.json").exists()
    cmp = _cli("compare", str(out), "--out", str(tmp_path / "c.html"))
    assert cmp.returncode == 2 and "uncommitted run directory" in cmp.stderr and "Traceback" not in cmp.stderr


def _saved(tmp_path):
    d = tmp_path / "run"
    wb.run(RunConfig(**QUICK, out=str(d)), progress=False)
    return d


@pytest.mark.parametrize("break_it, file", [
    (lambda d: (d / "steps.csv").unlink(), "steps.csv"),
    (lambda d: (d / "summary.json").write_text("[1, 2]"), "summary.json"),
    (lambda d: (d / "summary.json").write_text("{not json"), "summary.json"),
    (lambda d: (d / "steps.csv").write_text("a,b\n1,2\n"), "steps.csv"),
    (lambda d: (d / "evals.csv").write_bytes(b"\xff\xfe\x00bad"), "evals.csv"),
], ids=["missing-csv", "summary-list", "summary-not-json", "wrong-columns", "binary-csv"])
def test_a_broken_run_directory_is_one_line_naming_the_file(tmp_path, break_it, file):
    d = _saved(tmp_path)
    break_it(d)
    with pytest.raises(ConfigError, match=f"^RUN_DIR: a run directory whose {file}"):
        RunResult.load(d)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_in_place_of_steps_csv_is_refused_not_read(tmp_path):
    d = _saved(tmp_path)
    (d / "steps.csv").unlink()
    os.mkfifo(d / "steps.csv")            # opening it for reading would block for good
    with pytest.raises(ConfigError, match="steps.csv is a regular file"):
        RunResult.load(d)


def test_an_uncommitted_directory_is_named_as_such(tmp_path):
    d = claim_run_dir(tmp_path / "run")
    (d / "steps.csv").write_text("x\n")
    with pytest.raises(UncommittedRunError, match=f"claimed by process {os.getpid()}"):
        wb.load(d)
    assert json.dumps(str(d))   # (the message names the directory)


# ------------------------------------------------------------------------------ --overwrite (issue 47)
def test_overwrite_keeps_the_committed_run_until_the_new_one_commits(tmp_path, monkeypatch):
    """A new run over a committed one is written beside it: when it fails to commit (a full
    disk at summary.json), the old run is still there, whole and loadable; when it commits,
    it replaces the old run whole (no file of the old run left, a user's own file kept)."""
    out = tmp_path / "run"
    old = wb.run(RunConfig(**QUICK, out=str(out)), progress=False)
    (out / "notes.txt").write_text("mine")
    real = results.result.atomic_write
    seen = []

    def full(path, text, **kw):
        if Path(path).name == "summary.json":
            seen.append(Path(path).parent)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real(path, text, **kw)
    monkeypatch.setattr(results.result, "atomic_write", full)
    with pytest.raises(results.RunDirError, match="No space left on device"):
        wb.run(RunConfig(**QUICK, seed=5, out=str(out)), progress=False, overwrite=True)
    assert seen and seen[0] != out and seen[0].parent == tmp_path       # the new run was written beside it
    kept = RunResult.load(out)
    assert kept.summary["run_id"] == old.summary["run_id"] and len(kept.steps) == len(old.steps)
    monkeypatch.setattr(results.result, "atomic_write", real)
    new = wb.run(RunConfig(**QUICK, seed=6, out=str(out)), progress=False, overwrite=True)
    got = RunResult.load(out)
    assert got.summary["run_id"] == new.summary["run_id"] != old.summary["run_id"]
    assert got.summary["config"]["out"] == str(out) and got.summary["config"]["seed"] == 6
    assert (out / "notes.txt").read_text() == "mine"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".run.") and p != seen[0]]   # nothing else left
    assert new.steps["loss"].tolist() == got.steps["loss"].tolist()   # its steps read from where they moved to


def test_result_save_with_overwrite_swaps_the_new_run_in(tmp_path):
    a = wb.run(RunConfig(**QUICK))
    b = wb.run(RunConfig(**QUICK, seed=3))
    a.save(tmp_path / "r")
    b.save(tmp_path / "r", overwrite=True)
    assert RunResult.load(tmp_path / "r").summary["run_id"] == b.summary["run_id"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]
