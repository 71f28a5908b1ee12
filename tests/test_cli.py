"""`python -m workbench`: exit codes, one-line errors, the run directory."""
import gzip
import json
import os
import subprocess
import sys

import pytest

ENV = {**os.environ, "PYTHONWARNINGS": "ignore"}


def cli(*args, cwd=None, timeout=180):
    return subprocess.run([sys.executable, "-m", "workbench", *args], capture_output=True, text=True,
                          cwd=cwd, env=ENV, timeout=timeout)


def test_sgd_run_reaches_95_percent_and_writes_run_directory(tmp_path):
    out = tmp_path / "run"
    proc = cli("run", "--algorithm", "sgd", "--dataset", "digits", "--model", "mlp", "--epochs", "5",
               "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    for name in ("summary.json", "steps.csv", "evals.csv", "config.yaml"):
        assert (out / name).exists(), name
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed"
    assert summary["final_test_accuracy"] >= 0.95
    for key in ("config", "workers", "steps", "samples", "wall_time_s", "samples_per_s", "final_train_loss",
                "final_test_loss", "time_breakdown", "comm_fraction", "events", "versions"):
        assert key in summary, key
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]  # atomic writes left no temp files


def test_flags_override_yaml_config(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("algorithm: sgd\nsteps: 3\nlr: 0.3\nhidden: [16]\n")
    out = tmp_path / "run"
    proc = cli("run", "--config", str(cfg), "--lr", "0.2", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["lr"] == 0.2 and summary["config"]["hidden"] == [16]
    assert summary["steps"] == 3


def _corrupt_mnist(tmp_path):
    d = tmp_path / "data" / "mnist"
    d.mkdir(parents=True)
    for name in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                 "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        (d / name).write_bytes(gzip.compress(b"\x00\x00\x08\x03garbage"))
    return str(tmp_path / "data")


@pytest.mark.parametrize("args, field", [
    (["--algorithm", "sgdx"], "algorithm"),
    (["--algorithm", "sync_sgd", "--cpus", "4", "--batch-size", "2"], "batch_size"),
    (["--lr", "-1"], "lr"),
    (["--lr", "nan"], "lr"),
    (["--algorithm", "sync_easgd", "--tau", "0"], "tau"),
    (["--warmup", "gradual", "--warmup-epochs", "10", "--epochs", "2"], "warmup_epochs"),
    (["--algorithm", "sync_sgd", "--gpus", "2"], "gpus"),
    (["--algorithm", "sync_sgd", "--scheduler", "tcp://127.0.0.1:9"], "scheduler"),
    (["--hidden", "a,b"], "hidden"),
    (["--not-a-flag", "1"], None),
])
def test_invalid_input_exits_2_with_one_line(args, field, tmp_path):
    proc = cli("run", *args, "--out", str(tmp_path / "never"))
    assert proc.returncode == 2, proc.stderr
    if field is not None:
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1, proc.stderr
        assert lines[0].startswith(f"error: {field}: ") and ", got " in lines[0]
        assert "Traceback" not in proc.stderr
    assert not (tmp_path / "never").exists()  # failed before anything ran


def test_corrupt_dataset_file_exits_2(tmp_path):
    proc = cli("run", "--dataset", "mnist", "--data-dir", _corrupt_mnist(tmp_path), "--out", str(tmp_path / "x"))
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_algorithms_lists_every_algorithm():
    proc = cli("algorithms")
    assert proc.returncode == 0
    from workbench.config import ALGORITHMS
    for name in ALGORITHMS:
        assert name in proc.stdout


def test_a_divergence_every_worker_reports_is_said_three_times_then_counted(tmp_path):
    """Each asynchronous worker ends with its own `diverged` event (a 1,024-worker async_msgd
    printed 362 lines); the terminal shows three and counts the rest, the summary keeps all."""
    out = tmp_path / "run"
    proc = cli("run", "--simulate", "--algorithm", "async_sgd", "--cpus", "16", "--lr", "1e6", "--momentum", "0",
               "--steps", "200", "--no-progress", "--out", str(out))
    assert proc.returncode == 1, proc.stderr
    events = [e for e in json.loads((out / "summary.json").read_text())["events"] if e["event"] == "diverged"]
    assert len(events) > 3
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip().startswith("diverged:")]
    assert len(lines) == 3 and f"... and {len(events) - 3} more diverged events" in proc.stderr, proc.stderr


def test_diverged_run_exits_1_and_keeps_results(tmp_path):
    out = tmp_path / "run"
    proc = cli("run", "--lr", "1e6", "--momentum", "0", "--steps", "100", "--out", str(out))
    assert proc.returncode == 1
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "diverged"
