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


# ------------------------------------------------------------------------------ a run killed before its first checkpoint
def _killed_before_its_first_checkpoint(d: Path) -> bytes:
    """`python -m workbench run` (sgd: no cluster) killed with SIGKILL, its whole process group,
    once it has written step rows and before any checkpoint (one an hour); returns steps.csv."""
    import signal
    import time
    proc = subprocess.Popen([sys.executable, "-m", "workbench", "run", "--algorithm", "sgd", "--dataset", "digits",
                             "--model", "softmax", "--epochs", "100000", "--checkpoint-every", "1h", "--no-progress",
                             "--out", str(d)], env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    deadline = time.monotonic() + 120
    try:
        spool = d / ".steps-spool" / "step.f64"
        while not (spool.is_file() and spool.stat().st_size >= 8 * 100):   # (a hundred rows written)
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "no step rows in 120 s"
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL and not (d / "summary.json").exists() and (d / CLAIM).exists()
    assert not list((d / "checkpoints").glob("*.npz"))
    return (d / "steps.csv").read_bytes()


def test_a_run_killed_before_its_first_checkpoint_is_said_so_and_kept_until_overwritten(tmp_path, capsys):
    """What a `kill -9` before the first checkpoint leaves (step rows, the claim of a process
    that is gone, no checkpoint) is a run's computed work. Before: `run --resume` said only
    "a run directory holding a checkpoint to continue from"; `run --out` there went to `x-2`
    and said "claimed by another run" (only in summary.json), and so did `--overwrite`, so the
    killed run's folder could never be reused. Now resume and a new run are refused in one
    line saying what the folder holds and offering --overwrite, which replaces it in place."""
    from workbench.apps.cli import main
    d = tmp_path / "x"
    rows = _killed_before_its_first_checkpoint(d)
    assert main(["run", "--resume", str(d), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"{d} holds a run killed before its first checkpoint (process " in err, err
    assert "step rows in steps.csv and no checkpoint to go on from" in err and "--overwrite" in err, err
    assert len(err.strip().splitlines()) == 1, err
    quick = ["--algorithm", "sgd", "--dataset", "digits", "--model", "softmax", "--steps", "3", "--no-progress"]
    assert main(["run", *quick, "--out", str(d)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: out: a directory that does not hold a run already") and "pass --overwrite" in err
    assert (d / "steps.csv").read_bytes() == rows and not (tmp_path / "x-2").exists()   # nothing touched
    assert "which is gone: a run killed before it committed" in results.uncommitted_message(d)
    assert main(["run", *quick, "--out", str(d), "--overwrite"]) == 0
    out = capsys.readouterr().out
    assert f"run directory: {d}\n" in out, out
    assert not (tmp_path / "x-2").exists() and not (d / CLAIM).exists()
    assert wb.load(d).summary["steps"] == 3 and len(wb.load(d).steps) == 3


def test_a_folder_holding_only_a_killed_runs_claim_is_reused_and_a_live_claim_is_named(tmp_path):
    """A run killed in its start-up leaves its claim and nothing it computed: the next run
    given that folder takes it (before: `x-2`, "claimed by another run"), and says so; a
    folder a live run holds still sends the next one to a sibling, naming the process."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    d = tmp_path / "x"
    d.mkdir()
    (d / CLAIM).write_text(str(gone.pid))
    r = wb.run(RunConfig(**QUICK, out=str(d)), progress=False)
    assert r.summary["config"]["out"] == str(d) and not (tmp_path / "x-2").exists()
    assert f"out: {d} held only the claim of a run killed before its first step (process {gone.pid} is gone); " \
           "reused" in r.summary["warnings"]
    live = tmp_path / "live"
    live.mkdir()
    (live / CLAIM).write_text(str(os.getppid()))   # (a process that is running: this one's parent)
    r = wb.run(RunConfig(**QUICK, out=str(live)), progress=False)
    assert r.summary["config"]["out"] == str(tmp_path / "live-2")
    assert f"out: {live} was claimed by another run (process {os.getppid()}, still running); this run is " \
           f"written to {tmp_path / 'live-2'}" in r.summary["warnings"]
