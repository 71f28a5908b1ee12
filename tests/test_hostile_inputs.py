"""Hostile and careless inputs (issue 15): each is refused before any worker starts, with one
line naming the field, or warned about; outputs are checked first and never mixed.

Real processes throughout: the CLI in a subprocess, real FIFOs and devices, silent and
garbage TCP servers on 127.0.0.1.
"""
from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import workbench as wb
from workbench.api import RunWarning
from workbench.config import ConfigError, ConfigTypeError, RunConfig, read_yaml

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONPATH": str(ROOT)}


def cli(*args, timeout=120, cwd=None):
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "workbench", *args], capture_output=True, text=True,
                          env=ENV, timeout=timeout, cwd=cwd)
    proc.seconds = time.monotonic() - t0
    return proc


def one_line_error(proc, field):
    """Exit 2, one line `error: <field>: ...`, no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"error: {field}: "), lines[0]
    assert "Traceback" not in proc.stderr
    return lines[0]


# ------------------------------------------------------------------------------ YAML files
BOMB = "a: &a [1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n" \
       "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n" \
       "g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\nh: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]\nhidden: [*h,*h,*h,*h,*h,*h,*h,*h,*h]\n"


def test_alias_bomb_is_refused_at_once(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    assert path.stat().st_size < 1024
    proc = cli("run", "--config", str(path))
    assert "anchors or aliases" in one_line_error(proc, "config")
    assert proc.seconds < 60                 # a hang guard: expanding the bomb would take hours


def test_alias_bomb_given_as_a_value_gives_a_short_message():
    import yaml
    bomb = yaml.safe_load(BOMB)["hidden"]          # 9**9 elements through shared references
    t0 = time.monotonic()
    with pytest.raises(ConfigError) as info:
        RunConfig(hidden=bomb)
    assert time.monotonic() - t0 < 30        # a hang guard: 9**9 elements would take minutes
    assert info.value.field == "hidden" and len(str(info.value)) < 400


@pytest.mark.parametrize("make, fragment", [
    (lambda p: Path("/dev/zero"), "regular YAML file"),
    (lambda p: (os.mkfifo(p / "fifo.yaml"), p / "fifo.yaml")[1], "regular YAML file"),
    (lambda p: (p / "latin1.yaml").write_bytes("lr: 0.1 # caf\xe9\n".encode("latin-1")) and p / "latin1.yaml",
     "UTF-8"),
    (lambda p: (p / "big.yaml").write_text("# " + "x" * (2 << 20)) and p / "big.yaml", "at most 1024 KiB"),
    (lambda p: p, "regular YAML file"),
    (lambda p: p / "missing.yaml", "readable YAML file"),
    (lambda p: (p / "bad.yaml").write_text("lr: [\n") and p / "bad.yaml", "valid YAML"),
    (lambda p: (p / "list.yaml").write_text("- 1\n- 2\n") and p / "list.yaml", "mapping"),
], ids=["dev-zero", "fifo", "not-utf8", "over-1MB", "directory", "missing", "invalid", "not-a-mapping"])
def test_unreadable_config_files_are_one_line_errors(tmp_path, make, fragment):
    path = make(tmp_path)
    proc = cli("run", "--config", str(path), timeout=60)
    assert fragment in one_line_error(proc, "config")


def test_read_yaml_never_opens_a_fifo(tmp_path):
    fifo = tmp_path / "f.yaml"
    os.mkfifo(fifo)
    done = threading.Event()

    def read():
        with pytest.raises(ConfigError):
            read_yaml(fifo)
        done.set()
    threading.Thread(target=read, daemon=True).start()
    assert done.wait(5), "read_yaml blocked on a FIFO"


# ------------------------------------------------------------------------------ strict types
@pytest.mark.parametrize("changes, field", [
    ({"batch_size": True}, "batch_size"),
    ({"cpus": True}, "cpus"),
    ({"hidden": [2.7, 3.9]}, "hidden"),
    ({"hidden": [True, 3]}, "hidden"),
    ({"batch_size": 32.0}, "batch_size"),
    ({"steps": 2.5}, "steps"),
    ({"lr": True}, "lr"),
    ({"download": 1}, "download"),
    ({"nesterov": "yes"}, "nesterov"),
    ({"gpus": 1.5}, "gpus"),
    ({"chunk_layers": True}, "chunk_layers"),
    ({"trainer_lrs": [True, 0.1]}, "trainer_lrs"),
    ({"seed": "1e3"}, "seed"),
])
def test_no_silent_coercion(changes, field):
    with pytest.raises(ConfigError) as info:
        RunConfig(**changes)
    assert info.value.field == field


def test_strict_types_keep_what_the_cli_and_yaml_give():
    c = RunConfig(batch_size="64", lr="0.5", hidden="32,16", nesterov="true", gpus="0", epochs=2)
    assert (c.batch_size, c.lr, c.hidden, c.nesterov, c.gpus, c.epochs) == (64, 0.5, [32, 16], True, 0, 2.0)


def test_yaml_true_for_a_number_is_an_error(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("batch_size: true\n")
    one_line_error(cli("run", "--config", str(path), timeout=60), "batch_size")


def test_error_messages_never_repr_a_huge_value():
    err = ConfigError("hidden", "widths", list(range(10**6)))
    assert len(str(err)) < 300
    err = ConfigError("out", "a path", "x" * 10**6)
    assert len(str(err)) < 300


@pytest.mark.parametrize("call", [
    lambda: wb.run(None), lambda: wb.run(42), lambda: wb.run("config.yaml"), lambda: wb.run([("lr", 1)]),
    lambda: wb.run(RunConfig(), on_record=5), lambda: wb.run(RunConfig(), should_stop="no"),
    lambda: wb.run(RunConfig(algorithm="sync_sgd"), cluster=3.5), lambda: RunConfig.from_dict(None),
    lambda: wb.sweep(None), lambda: wb.load(None),
], ids=["None", "int", "str", "list", "on_record", "should_stop", "cluster", "from_dict", "sweep", "load"])
def test_api_wrong_types_raise_a_config_type_error(call):
    with pytest.raises(ConfigTypeError) as info:
        call()
    assert isinstance(info.value, TypeError) and isinstance(info.value, ConfigError)
    assert "\n" not in str(info.value) and ": " in str(info.value)


# ------------------------------------------------------------------------------ values known to fail
@pytest.mark.parametrize("args, field, fragment", [
    (["--algorithm", "sync_sgd", "--comm", "nccl"], "comm", "GPU"),
    (["--algorithm", "sync_sgd", "--latency-ms", "1e9"], "latency_ms", "at most"),
    (["--algorithm", "sync_sgd", "--bandwidth-gbps", "1e-300"], "bandwidth_gbps", "Gbit/s"),
    (["--lr", "1e308", "--lr-scaling", "linear", "--batch-size", "1024"], "lr", "scaling"),
    (["--algorithm", "ltfb", "--lr-spread", "1e300"], "lr_spread", "trainer"),
    (["--hidden", "100000,100000"], "hidden", "memory"),
    (["--dataset", "synthetic", "--n-samples", "1000000000000"], "n_samples", "memory"),
    (["--dataset", "synthetic", "--n-features", "1000000000"], "n_features", "memory"),
    (["--algorithm", "sync_sgd", "--cpus", "100000", "--batch-size", "100000", "--dataset", "synthetic",
      "--n-samples", "200000"], "cpus", "memory"),
    (["--algorithm", "sync_sgd", "--scheduler", "tcp://127.0.0.1:99999"], "scheduler", "port"),
    (["--algorithm", "sync_sgd", "--scheduler", "http://127.0.0.1:8786"], "scheduler", "http://"),
    (["--algorithm", "sync_sgd", "--scheduler", "inproc://x"], "scheduler", "inproc://"),
    (["--algorithm", "sync_sgd", "--scheduler", "tls://127.0.0.1:8786"], "scheduler", "tls://"),
    (["--algorithm", "sync_sgd", "--scheduler", "ws://127.0.0.1:8786"], "scheduler", "ws://"),
])
def test_values_that_would_fail_later_are_refused_first(tmp_path, args, field, fragment):
    proc = cli("run", *args, "--out", str(tmp_path / "run"), timeout=60)
    assert fragment in one_line_error(proc, field)
    assert proc.seconds < 30, proc.seconds            # no cluster was started
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("args, field", [
    (["--seconds=-1"], "seconds"), (["--seconds=nan"], "seconds"), (["--cpus=0"], "cpus"),
    (["--batch-per-worker=0"], "batch_per_worker"), (["--hidden=2.5"], "hidden"),
    (["--n-features=1000000000"], "n_features"), (["--algorithms=nope"], "algorithms"), (["--rounds=0"], "rounds"),
    (["--compare=/nonexistent/bench.csv"], "compare"), (["--compare=pyproject.toml"], "compare"),
])
def test_bench_arguments_are_checked_before_workers_start(args, field):
    proc = cli("bench", "--no-torch", *args, timeout=60)
    one_line_error(proc, field)
    assert "benchmark:" not in proc.stdout


# ------------------------------------------------------------------------------ scheduler servers
class _Server:
    """A TCP server on 127.0.0.1 that accepts and then stays silent or answers garbage."""

    def __init__(self, mode: str):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.mode, self.conns = mode, []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            if self.mode == "garbage":
                try:
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello" * 50)
                except OSError:
                    pass

    def close(self):
        self.sock.close()
        for c in self.conns:
            c.close()


@pytest.mark.parametrize("mode", ["silent", "garbage"])
def test_a_server_that_is_not_a_scheduler_is_a_bounded_one_line_error(mode):
    server = _Server(mode)
    try:
        proc = cli("run", "--algorithm", "sync_sgd", "--scheduler", f"tcp://127.0.0.1:{server.port}",
                   "--steps", "3", timeout=60)
    finally:
        server.close()
    line = one_line_error(proc, "scheduler")
    assert "Dask scheduler" in line
    assert proc.seconds < 60, proc.seconds   # a hang guard: the probe gives up after 5 s (plus start-up)


def test_connect_to_a_silent_server_returns_within_its_timeout():
    from workbench.execution.cluster import connect
    server = _Server("silent")
    t0 = time.monotonic()
    try:
        with pytest.raises(ConfigError, match="scheduler: a Dask scheduler answering within 2 s"):
            connect(f"tcp://127.0.0.1:{server.port}", timeout=2)
    finally:
        server.close()
    assert time.monotonic() - t0 < 30        # a hang guard around the 2 s timeout


# ------------------------------------------------------------------------------ output
@pytest.mark.parametrize("make, fragment", [
    (lambda p: (p / "file").write_text("x") and p / "file", "existing file"),
    (lambda p: (p / "file").write_text("x") and p / "file" / "run", "is a file"),
    (lambda p: Path("/proc/self/run"), "outside /proc"),
    (lambda p: Path("/sys/run"), "outside /proc"),
    (lambda p: p / ("x" * 300), "255 bytes"),
], ids=["exists-as-file", "under-a-file", "proc", "sys", "long-name"])
def test_bad_out_is_refused_before_training(tmp_path, make, fragment):
    out = make(tmp_path)
    proc = cli("run", "--algorithm", "sync_sgd", "--epochs", "1", "--out", str(out), timeout=60)
    assert fragment in one_line_error(proc, "out")
    assert proc.seconds < 30


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_read_only_out_is_refused(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        assert "write" in one_line_error(cli("run", "--out", str(ro / "run"), timeout=60), "out")
    finally:
        ro.chmod(0o755)


def test_out_with_a_nul_byte_is_refused_by_the_api(tmp_path):
    with pytest.raises(ConfigError, match="^out: .*NUL"):
        wb.run(RunConfig(steps=2, out=str(tmp_path / "a\x00b")))


def test_a_directory_holding_another_run_needs_overwrite(tmp_path):
    out = tmp_path / "run"
    first = cli("run", "--steps", "3", "--out", str(out), timeout=120)
    assert first.returncode == 0, first.stderr
    (out / "tournaments.csv").write_text("round,trainer\n0,0\n")   # an LTFB run's file, left over
    (out / "notes.txt").write_text("mine")
    before = json.loads((out / "summary.json").read_text())["run_id"]
    proc = cli("run", "--steps", "4", "--out", str(out), timeout=120)
    assert "--overwrite" in one_line_error(proc, "out")
    assert json.loads((out / "summary.json").read_text())["run_id"] == before   # untouched
    proc = cli("run", "--steps", "4", "--out", str(out), "--overwrite", timeout=120)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["run_id"] != before and summary["steps"] == 4
    assert not (out / "tournaments.csv").exists()          # no stale file of the old run
    assert (out / "notes.txt").read_text() == "mine"        # not a run file: kept
    result = wb.load(out)
    assert len(result.tournaments) == 0 and result.summary["steps"] == 4


def test_result_save_refuses_another_run_unless_overwrite(tmp_path):
    a = wb.run(RunConfig(steps=2))
    b = wb.run(RunConfig(steps=3))
    a.save(tmp_path)
    a.save(tmp_path)                      # the same run again: fine
    with pytest.raises(FileExistsError, match="overwrite"):
        b.save(tmp_path)
    b.save(tmp_path, overwrite=True)
    assert wb.load(tmp_path).summary["steps"] == 3


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_run_files_follow_the_umask_when_asked(tmp_path, umask, mode):
    out = tmp_path / "run"
    code = (f"import os; os.umask({umask}); import workbench as wb; "
            f"wb.run(wb.RunConfig(steps=2, out={str(out)!r}, out_private=False))")
    subprocess.run([sys.executable, "-c", code], check=True, env=ENV, timeout=120)
    files = [p for p in out.iterdir() if p.is_file()]
    assert {p.name for p in files} >= {"summary.json", "steps.csv", "evals.csv", "config.yaml"}
    for p in files:
        assert stat.S_IMODE(p.stat().st_mode) == mode, (p.name, oct(p.stat().st_mode))
    assert stat.S_IMODE(out.stat().st_mode) == 0o777 & ~umask


@pytest.mark.parametrize("umask", [0o022, 0o002])
def test_run_directories_are_private_by_default(tmp_path, umask):
    """Issue 47: the run directory 0700 and every file in it 0600, whatever the umask (the
    report too, written after the commit; the CLI's run, as a user starts it)."""
    out = tmp_path / "run"
    proc = subprocess.run(["/bin/sh", "-c", f"umask {umask:03o}; exec {sys.executable} -m workbench run --steps 2 "
                           f"--checkpoint-every 1 --out {out}"], capture_output=True, text=True, env=ENV, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    entries = list(out.rglob("*"))
    assert {p.name for p in entries} >= {"summary.json", "steps.csv", "evals.csv", "config.yaml", "report.html",
                                         "checkpoints", "step-000000000001.npz"}
    for p in entries:
        want = 0o700 if p.is_dir() else 0o600
        assert stat.S_IMODE(p.stat().st_mode) == want, (p.name, oct(p.stat().st_mode))


# ------------------------------------------------------------------------------ warnings and is_sync
def test_tau_longer_than_the_run_warns_on_stderr_and_in_the_summary(tmp_path):
    out = tmp_path / "run"
    proc = cli("run", "--algorithm", "async_easgd", "--cpus", "2", "--tau", "1000000", "--epochs", "0.5",
               "--out", str(out), timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert "warning: tau (1000000) is longer than the run" in proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert any(e["event"] == "warning" and "tau" in e["message"] for e in summary["events"])


def test_lr_scaled_past_the_curvature_bound_warns():
    with pytest.warns(RunWarning, match="stability bound"):
        result = wb.run(RunConfig(algorithm="sgd", lr=1.0, lr_scaling="linear", batch_size=1024, steps=5))
    assert any(e["event"] == "warning" for e in result.events)


def test_a_modest_lr_does_not_warn(recwarn):
    wb.run(RunConfig(algorithm="sgd", lr=0.1, lr_scaling="linear", batch_size=256, steps=5))
    assert not [w for w in recwarn if issubclass(w.category, RunWarning)]


def test_is_sync_matches_the_engine_for_every_algorithm():
    from workbench.algorithms import REGISTRY
    for name, spec in REGISTRY.items():
        cfg = RunConfig(algorithm=name, cpus=2, batch_size=32)
        assert cfg.is_sync == spec.sync, name
    assert RunConfig(algorithm="ltfb", cpus=2).is_sync


# ------------------------------------------------------------------------------ reproduce
def _experiment(tmp_path, notebook="notebooks/easgd_family.ipynb", parameters=None, root=None):
    import yaml
    root = root or tmp_path / "repo"
    (root / "experiments").mkdir(parents=True, exist_ok=True)
    nbs = root / "notebooks"
    if not nbs.exists():
        nbs.symlink_to(ROOT / "notebooks", target_is_directory=True)
    data = {"title": "t", "paper": "A, B, C, 2017", "notebook": notebook, "reported": ["r"], "we_run": "w",
            "expected_shape": [{"id": "x", "text": "y"}], "parameters": parameters or {"seed": 0}}
    path = root / "experiments" / "hostile.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("notebook", [
    "/tmp/evil.ipynb", "../outside.ipynb", "notebooks/../../outside.ipynb", "experiments/x.ipynb",
    "notebooks/quickstart.py", ["notebooks/quickstart.ipynb"],
])
def test_reproduce_runs_only_notebooks_of_the_repository(tmp_path, notebook):
    evil = tmp_path / "outside.ipynb"
    evil.write_text("{}")
    Path("/tmp/evil.ipynb").write_text("{}") if not Path("/tmp/evil.ipynb").exists() else None
    path = _experiment(tmp_path, notebook=notebook)
    proc = cli("reproduce", str(path), "--out", str(tmp_path / "out"), timeout=60)
    assert "notebooks/" in one_line_error(proc, "notebook")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("parameters, field", [
    ({"x = 1\nimport os; os.system('touch PWNED')\ny": 1}, "parameters"),
    ({"import": 1}, "parameters"),
    ({"out_dir": "/etc"}, "parameters"),
    ({"seed": {"__class__": "x"}}, "parameters.seed"),
    ({"seed": [[[1]]]}, "parameters.seed"),
    ({"lr_typo": 0.1}, "parameters"),
])
def test_reproduce_refuses_hostile_parameters(tmp_path, parameters, field):
    path = _experiment(tmp_path, parameters=parameters)
    proc = cli("reproduce", str(path), "--out", str(tmp_path / "out"), timeout=120, cwd=tmp_path)
    one_line_error(proc, field)
    assert not (tmp_path / "PWNED").exists() and not (tmp_path / "out").exists()


def test_reproduce_alias_bomb_and_special_files(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    one_line_error(cli("reproduce", str(path), "--out", str(tmp_path / "o"), timeout=60), "experiment")
    one_line_error(cli("reproduce", "/dev/zero", "--out", str(tmp_path / "o"), timeout=60), "experiment")


def test_reproduce_takes_a_notebook_named_on_the_command_line(tmp_path):
    from workbench.apps.reproduce import load_experiment
    path = _experiment(tmp_path, notebook="/tmp/evil.ipynb")
    exp = load_experiment(path, notebook=ROOT / "notebooks" / "easgd_family.ipynb")
    assert exp.notebook == (ROOT / "notebooks" / "easgd_family.ipynb").resolve()


# ------------------------------------------------------------------------------ workers' own memory
@pytest.mark.slow
@pytest.mark.cluster
def test_memory_is_checked_against_the_workers_own_limit():
    from workbench.execution.cluster import make_cluster
    from workbench.execution.engine import run
    client = make_cluster(cpus=2, gpus=0, memory_limit="400MiB", quiet=True)
    try:
        cfg = RunConfig(algorithm="sync_sgd", cpus=2, dataset="synthetic", n_samples=200_000, n_features=784,
                        steps=5)
        def transitions():
            return client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.transition_counter)
        before = transitions()
        with pytest.raises(ConfigError, match=r"^n_samples: a size whose run fits in 80% of a worker's memory \(0.3 GiB of 0.4 GiB\)"):
            run(cfg, cluster=client)
        assert transitions() == before          # refused before any task (no data generated on a worker)
        assert not client.processing() or not any(client.processing().values())
        small = run(cfg.replace(n_samples=2000), cluster=client)   # the cluster is fine for what fits
        assert small.status == "completed"
        assert transitions() > before           # the counter does see a run's tasks
    finally:
        cluster = client.cluster
        client.close()
        cluster.close()


def test_free_run_dir_never_picks_a_folder_holding_a_run(tmp_path):
    from workbench.results import free_run_dir
    assert free_run_dir(tmp_path, "run-1-sgd") == tmp_path / "run-1-sgd"
    wb.run(RunConfig(steps=2, out=str(tmp_path / "run-1-sgd")))
    assert free_run_dir(tmp_path, "run-1-sgd") == tmp_path / "run-1-sgd-2"


# ------------------------------------------------------------------------------ issue 29's cases
def test_epochs_too_large_to_count_is_one_line():
    line = one_line_error(cli("run", "--epochs", "1e308"), "epochs")
    assert "at most 1,000,000" in line and "1e308" in line


def test_a_vanishing_jitter_is_one_line():
    """`--jitter 1e-300` overflowed the gamma's shape 1/jitter**2: a ZeroDivisionError in every
    virtual worker (176 lines). Now refused before the run; the smallest allowed jitter
    charges within a few parts per million of the jitter-free cost."""
    line = one_line_error(cli("run", "--simulate", "--algorithm", "async_sgd", "--cpus", "4", "--jitter", "1e-300"),
                          "jitter")
    assert "0, or a number >= 1e-06 and < 1" in line and "1e-300" in line
    from workbench.config import JITTER_MIN
    from workbench.problem import Problem
    from workbench.sim.costs import make_costs
    cfg = RunConfig(algorithm="async_sgd", dataset="digits", cpus=4, simulate=True)
    model = Problem.from_config(cfg).model
    plain = make_costs(cfg, model, ["cpu"] * 4)
    tiny = make_costs(cfg.replace(jitter=JITTER_MIN), model, ["cpu"] * 4)
    charges = [tiny.compute(r, 16) / plain.compute(r, 16) for r in range(4) for _ in range(50)]
    assert all(abs(c - 1) < 10 * JITTER_MIN for c in charges)   # a gamma of sd 1e-6: 10 sd never reached here
    assert any(c != 1 for c in charges)                           # but jitter it is


def test_duplicate_yaml_keys_are_refused_naming_the_key(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("algorithm: sgd\nlr: 0.1\nsteps: 3\nlr: 10\n")      # PyYAML alone keeps lr: 10 silently
    line = one_line_error(cli("run", "--config", str(path)), "config")
    assert "'lr' is given twice, line 4" in line


def test_ltfb_with_more_trainers_than_the_data_holds_names_trainers():
    with pytest.raises(ConfigError) as info:
        wb.run(RunConfig(algorithm="ltfb", simulate=True, cpus=1024, trainers=1024, batch_size=1024, steps=3),
               progress=False)
    assert info.value.field == "trainers" and "at most 1 for 1438 training examples" in str(info.value)


def test_the_dask_dashboard_line_waits_for_training(capsys):
    # An input the engine refuses on an external cluster exits 2 with its one line only:
    # the dashboard link is printed when the first records arrive, not before the checks.
    from workbench.apps.cli import _first_record_says
    seen = []
    on_record = _first_record_says("dask dashboard: http://x/status", seen.append)
    assert capsys.readouterr().err == ""
    on_record([{"kind": "step"}])
    on_record([{"kind": "step"}])
    assert capsys.readouterr().err == "dask dashboard: http://x/status\n" and len(seen) == 2


# ------------------------------------------------------------------------------ issue 47's hostile inputs
def test_a_count_too_large_for_a_field_is_one_line(tmp_path):
    """`--steps 99999999999999999999999` met an OverflowError in the live binning (and a
    400-digit YAML integer another in the schedule); both are the field's one line."""
    line = one_line_error(cli("run", "--algorithm", "sync_sgd", "--steps", "99999999999999999999999",
                              "--out", str(tmp_path / "a")), "steps")
    assert "a whole number >= 1, or unset (at most 10^15)" in line and "99999999999999999999999" in line
    path = tmp_path / "big.yaml"
    path.write_text(f"algorithm: sync_sgd\nbatch_size: {'9' * 400}\n")
    line = one_line_error(cli("run", "--config", str(path), "--out", str(tmp_path / "b")), "batch_size")
    assert "(at most 10^15)" in line and len(line) < 400
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_deeply_nested_yaml_is_refused_at_once(tmp_path):
    """10^5 nested brackets: PyYAML's composer recursed for minutes before a RecursionError;
    refused as the nesting is met (a few ms here; the bound guards against a hang)."""
    for text in ("a: " + "[" * 100_000 + "]" * 100_000, "a: " + "{b: " * 30_000 + "1" + "}" * 30_000,
                 "a:\n" + "".join("  " * i + "- \n" for i in range(40))):
        path = tmp_path / "deep.yaml"
        path.write_text(text)
        t0 = time.perf_counter()
        with pytest.raises(ConfigError, match="nested at most 32 levels deep"):
            read_yaml(path)
        assert time.perf_counter() - t0 < 1.0
    (tmp_path / "ok.yaml").write_text("hidden: [64, 32]\n")
    assert read_yaml(tmp_path / "ok.yaml") == {"hidden": [64, 32]}
    assert "nested" in one_line_error(cli("run", "--config", str(path)), "config")


@pytest.mark.parametrize("how", ["cli", "api"])
def test_a_failed_report_leaves_no_spool(tmp_path, monkeypatch, capsys, how):
    """report.html cannot be written (a full disk as it renders): the run is committed, the
    CLI warns in one line (the API raises its one-line RunDirError), and the raw step spool
    beside steps.csv is gone all the same."""
    import errno

    import workbench.ui.report as report
    from workbench import api
    from workbench.apps import cli as C

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(report, "write_report", full)
    out = tmp_path / "run"
    if how == "cli":
        result = wb.run(RunConfig(algorithm="sgd", steps=3, out=str(out)), progress=False, report=False)
        assert (out / ".steps-spool").is_dir()        # until the report is done
        C._write_report(result, str(out))
        assert "report.html could not be written" in capsys.readouterr().err
    else:
        with pytest.raises(api.RunDirError, match="report.html could not be written"):
            wb.run(RunConfig(algorithm="sgd", steps=3, out=str(out)), progress=False)
    assert (out / "summary.json").exists() and not (out / ".steps-spool").exists()


def _limited(megabytes):
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (megabytes << 20, resource.RLIM_INFINITY))
    return limit


@pytest.mark.parametrize("megabytes, algorithm, field", [(96, "sgd", "ulimit -v"), (700, "sync_sgd", "ulimit -v")])
def test_an_address_space_too_small_is_one_line(tmp_path, megabytes, algorithm, field):
    """`ulimit -v` below what NumPy needs to load (OpenBLAS aborted the process), or below
    what a local Dask worker maps (tracebacks: "can't start new thread"): one line, exit 2,
    before anything starts."""
    proc = subprocess.run([sys.executable, "-m", "workbench", "run", "--algorithm", algorithm, "--steps", "2",
                           "--out", str(tmp_path / "r")], capture_output=True, text=True, env=ENV, timeout=120,
                          preexec_fn=_limited(megabytes))
    line = one_line_error(proc, field)
    assert f"got {megabytes} MiB" in line or "got '0.7 GiB'" in line
    assert not (tmp_path / "r").exists()


def test_a_cluster_string_and_a_compare_directory_are_refused_naming_their_own_argument(tmp_path, capsys):
    with pytest.raises(ConfigError, match=r'^cluster: "threads", or a scheduler address \(an address like '
                                          r"tcp://HOST:PORT.*got 'procs'$"):
        wb.run(RunConfig(algorithm="sgd", steps=1), cluster="procs", progress=False)
    from workbench.apps.cli import main
    run = tmp_path / "r"
    wb.run(RunConfig(algorithm="sgd", steps=2, out=str(run)), cluster="threads", progress=False)
    assert main(["compare", str(run), "--out", str(tmp_path)]) == 2       # was a raw IsADirectoryError
    assert capsys.readouterr().err.strip() == (f"error: out: a file to write the report to (this is a directory), "
                                               f"got '{tmp_path}'")


def test_a_model_argument_without_a_value_is_refused_not_passed_as_empty_text():
    with pytest.raises(ConfigError, match=r"^model_args: .*each with a value \(k= has none; k=\"\" for empty text\), "
                                          r"got 'width=3,k='$"):
        RunConfig(model="mymodels:Wrap", model_args="width=3,k=")
    assert RunConfig(model="mymodels:Wrap", model_args='k=""').model_args == {"k": ""}   # said so: kept


@pytest.mark.parametrize("text", ["k=1,k=2", '{"k": 1, "k": 2}', '{"width": 3, "k": 1, "k": 2}'],
                         ids=["pairs", "json", "json-later-key"])
def test_a_model_argument_given_twice_is_refused_in_one_line(text):
    # JSON's own reader took the last of a repeated key without a word (the pairs were refused already)
    with pytest.raises(ConfigError, match=r"^model_args: .*each key once \(k is given twice\), got "):
        RunConfig(model="mymodels:Wrap", model_args=text)
    proc = cli("run", "--model", "mymodels:Wrap", "--model-args", text, "--steps", "1", "--no-progress")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        'error: model_args: keyword arguments: a mapping, JSON {"width": 64} or width=64,act=tanh, '
        f"each key once (k is given twice), got {text!r}"], proc.stderr
    with pytest.raises(ConfigError, match=r"^model_args: .*each key once \(k is given twice\)"):   # at any depth
        RunConfig(model="mymodels:Wrap", model_args='{"inner": {"k": 1, "k": 2}}')
    assert RunConfig(model="mymodels:Wrap", model_args='{"a": {"k": 1}, "b": {"k": 2}}').model_args == \
        {"a": {"k": 1}, "b": {"k": 2}}   # the same key in two objects is two keys
