"""`sweep` stops like `run` (issue 29, deliverable 7): SIGINT, SIGTERM or SIGHUP to the CLI
ends the point in progress as `stopped`, keeps every finished point with its rows, writes
the table of the points that ran and exits 1.

Real signals to a real `python -m workbench sweep` process. Event-driven: the signal is
sent when the second point's first live records arrive (a line on stderr), and that point's
plan is far longer than any reaction (88,000 steps), so neither a fast nor a slow machine
changes what is tested. The plan of the second point is lengthened by a shim around
`workbench.api.run` in the child process (the CLI itself is unchanged): a sweep's points all
share one plan, and the first one must finish.
"""
from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import foreground

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONPATH": str(ROOT)}
LONG_EPOCHS = 4000   # digits, batch 64: 22 steps an epoch, 88,000 steps

SHIM = f"""
import sys
import workbench.api as api
from workbench.apps import cli

real_run = api.run

def run(config, **kw):
    if config.out and config.out.endswith("w2"):
        config = config.replace(epochs={LONG_EPOCHS})
        then, said = kw.get("on_record"), []
        def on_record(records):
            if not said:
                said.append(True)
                print("shim: training " + config.out, file=sys.stderr, flush=True)
            if then is not None:
                then(records)
        kw["on_record"] = on_record
    return real_run(config, **kw)

api.run = run
sys.exit(cli.main(sys.argv[1:]))
"""

pytestmark = pytest.mark.slow


def _lines(stream, q: queue.Queue) -> None:
    for line in stream:
        q.put(line)
    q.put(None)


def _sweep_training_its_second_point(out: Path, **popen) -> tuple[subprocess.Popen, queue.Queue, list[str]]:
    """A simulated sweep of 1 then 2 workers into `out`, started with `popen`'s arguments and
    returned once its second point's first live records came (its stderr so far, and the queue
    the rest of its lines arrive on)."""
    proc = subprocess.Popen([sys.executable, "-c", SHIM, "sweep", "--simulate", "--algorithm", "sync_sgd",
                             "--dataset", "digits", "--model", "mlp", "--batch-size", "64", "--epochs", "1",
                             "--workers", "1,2", "--out", str(out), "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV, **popen)
    q: queue.Queue = queue.Queue()
    threading.Thread(target=_lines, args=(proc.stderr, q), daemon=True).start()
    err: list[str] = []
    try:
        while True:   # the event: the second point's first live records
            line = q.get(timeout=300)   # a hang guard, not a speed assumption
            assert line is not None, "the sweep ended before its second point trained:\n" + "".join(err)
            err.append(line)
            if line.startswith("shim: training"):
                return proc, q, err
    except BaseException:
        proc.kill()
        proc.wait()
        raise


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_signal_stops_the_current_point_and_keeps_the_finished_ones(tmp_path, sig):
    out = tmp_path / "sw"
    proc, q, err = _sweep_training_its_second_point(out, **foreground())
    stdout, stderr = _ended(proc, q, err, lambda: proc.send_signal(getattr(signal, sig)))
    assert proc.returncode == 1, stderr
    assert "Traceback" not in stderr, stderr
    assert f"note: {sig} received; stopping the sweep's current point" in stderr
    assert f"stopped: {sig} received; 2 of 2 worker counts in the table ([2] stopped part-way)" in stderr

    first = json.loads((out / "w1" / "summary.json").read_text())
    second = json.loads((out / "w2" / "summary.json").read_text())
    assert first["status"] == "completed" and first["steps"] == 22   # one epoch of digits at batch 64
    assert second["status"] == "stopped" and 0 < second["steps"] < 22 * LONG_EPOCHS
    for d, s in ((out / "w1", first), (out / "w2", second)):   # every step of each run kept
        assert len(pd.read_csv(d / "steps.csv")["step"].unique()) == s["steps"]
    table = pd.read_csv(out / "sweep.csv")
    assert table["workers"].tolist() == [1, 2]
    assert table["status"].tolist() == ["completed", "stopped"]
    assert table["steps"].tolist() == [first["steps"], second["steps"]]
    assert json.loads(stdout.strip().splitlines()[-1])["sweep"] == str(out / "sweep.csv")


def _ended(proc: subprocess.Popen, q: queue.Queue, err: list[str], act) -> tuple[str, str]:
    """`act()` (what the test does to the running sweep), then the sweep's stdout and whole
    stderr once it has exited; killed if it has not when `act` fails."""
    try:
        act()
        stdout = proc.stdout.read()   # to its end: the process exited or closed it
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    while (line := q.get(timeout=30)) is not None:
        err.append(line)
    return stdout, "".join(err)


def _rows(path: Path) -> int:
    """Data rows in a steps.csv so far (0 while it is not there)."""
    try:
        return max(0, path.read_bytes().count(b"\n") - 1)
    except OSError:
        return 0


def _as_background_job() -> None:
    """preexec_fn: SIGINT and SIGHUP ignored, as `nohup cmd &` in a script starts `cmd`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


def test_a_sweep_started_with_sigint_and_sighup_ignored_goes_on_and_stops_on_sigterm(tmp_path):
    # A sweep started by `nohup ... &` in a script inherits SIGINT and SIGHUP ignored; the CLI
    # re-armed them, so a `kill -INT` meant for the script stopped the sweep. They now stay
    # ignored: the second point trains on past both (its steps.csv grows by 1,000 rows while
    # the process lives) and SIGTERM stops it as above. (The armed case: the test above.)
    out = tmp_path / "sw"
    proc, q, err = _sweep_training_its_second_point(out, start_new_session=True, preexec_fn=_as_background_job)
    steps = out / "w2" / "steps.csv"
    at_signals = _rows(steps)

    def signals_then_sigterm() -> None:
        proc.send_signal(signal.SIGINT)
        proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 300          # a hang guard
        while _rows(steps) < at_signals + 1000:   # it goes on training
            assert proc.poll() is None, "SIGINT or SIGHUP stopped the sweep"
            assert time.monotonic() < deadline, "no steps after the signals"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)

    stdout, stderr = _ended(proc, q, err, signals_then_sigterm)
    assert proc.returncode == 1, stderr
    assert "Traceback" not in stderr and "SIGINT" not in stderr and "SIGHUP" not in stderr, stderr
    assert "note: SIGTERM received; stopping the sweep's current point" in stderr
    assert "stopped: SIGTERM received; 2 of 2 worker counts in the table ([2] stopped part-way)" in stderr
    assert _rows(out / "w2" / "steps.csv") >= at_signals + 1000
    assert json.loads((out / "w2" / "summary.json").read_text())["status"] == "stopped"
    assert pd.read_csv(out / "sweep.csv")["status"].tolist() == ["completed", "stopped"]
    assert json.loads(stdout.strip().splitlines()[-1])["sweep"] == str(out / "sweep.csv")
