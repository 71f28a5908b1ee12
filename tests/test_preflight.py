"""Each check made before a worker starts (`execution.preflight`): it passes a good value,
and fails a bad one with one `ConfigError` naming the field, the value and what is allowed."""
from __future__ import annotations

import os
import time

import pytest

from workbench import ConfigError, RunConfig
from workbench.execution import preflight as P
from workbench.maths.backend import gpu_count


def refused(call, field: str, value_text: str, allowed: str) -> ConfigError:
    """`call()` raises a ConfigError for `field`, whose one line names the value and what is allowed."""
    with pytest.raises(ConfigError) as info:
        call()
    err = info.value
    message = str(err)
    assert err.field == field, message
    assert message.startswith(f"{field}: ") and "\n" not in message, message
    assert message.endswith(f"got {value_text}"), message
    assert allowed in err.allowed, message
    return err


# ------------------------------------------------------------------------------ out
def test_out_passes_a_new_directory_and_its_own_run_again(tmp_path):
    assert P.check_out(tmp_path / "new" / "run") == tmp_path / "new" / "run"
    assert not (tmp_path / "new").exists()                       # checking creates nothing
    (tmp_path / "done").mkdir()
    (tmp_path / "done" / "summary.json").write_text("{}")
    assert P.check_out(tmp_path / "done", overwrite=True) == tmp_path / "done"


def test_out_fails_each_way_with_field_value_and_allowed(tmp_path):
    refused(lambda: P.check_out(str(tmp_path) + "/a\x00b"), "out", repr(str(tmp_path) + "/a\x00b"), "no NUL bytes")
    refused(lambda: P.check_out("/proc/workbench"), "out", "'/proc/workbench'", "outside /proc")
    long = str(tmp_path / ("x" * 300))
    with pytest.raises(ConfigError, match=r"^out: a path whose names are at most 255 bytes each, got '/"):
        P.check_out(long)                       # (the value is shortened in the message)
    (tmp_path / "file").write_text("")
    refused(lambda: P.check_out(tmp_path / "file"), "out", repr(str(tmp_path / "file")), "this is an existing file")
    refused(lambda: P.check_out(tmp_path / "file" / "run"), "out", repr(str(tmp_path / "file" / "run")),
            "is a file")
    (tmp_path / "done").mkdir()
    (tmp_path / "done" / "summary.json").write_text("{}")
    refused(lambda: P.check_out(tmp_path / "done"), "out", repr(str(tmp_path / "done")), "--overwrite")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_out_fails_under_a_read_only_directory(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        refused(lambda: P.check_out(ro / "run"), "out", repr(str(ro / "run")), "not writable")
    finally:
        ro.chmod(0o700)


# ------------------------------------------------------------------------------ memory
def test_memory_passes_a_small_run_and_estimates_its_parts(tiny):
    est = P.check_memory(tiny(), workers_memory=[4 << 30, 4 << 30])
    assert est["n_params"] == 64 * 32 + 32 + 32 * 10 + 10       # the tiny MLP 64-32-10 on digits
    assert est["total"] == est["data"] + est["params"] + est["activations"] + P.WORKER_OVERHEAD
    assert est["data"] == 1797 * 65 * 4                            # every example, float32, with its label


@pytest.mark.parametrize("changes, field, value", [
    (dict(), "cpus", "2"),                                                         # overhead dominates
    (dict(dataset="synthetic", n_features=200_000, n_samples=100_000), "n_features", "200000"),
    (dict(hidden=[20_000, 20_000]), "hidden", "[20000, 20000]"),
    (dict(dataset="synthetic", n_samples=10**9), "n_samples", "1000000000"),
])
def test_memory_fails_naming_the_field_to_shrink(changes, field, value, tiny):
    cfg = tiny(**changes)
    t0 = time.perf_counter()
    # the tiny run against a 100 MiB worker; the 400M-parameter MLP against two 4 GiB workers (against
    # this machine's free memory it fitted or not by what else was running); the rest any machine refuses
    memory = {"cpus": [100 << 20], "hidden": [4 << 30, 4 << 30]}.get(field)
    err = refused(lambda: P.check_memory(cfg, workers_memory=memory),
                  field, value, "a size whose run fits in")
    assert "parameters" in err.allowed
    assert time.perf_counter() - t0 < 30       # a hang guard: estimated, never generated (that would take minutes)


@pytest.mark.parametrize("simulate", [False, True])
def test_a_context_too_long_for_memory_is_named_with_its_activations(simulate):
    """A GPT's pass grows with context squared: at 100,000 tokens its activations are
    thousands of GiB however the batch is split. The refusal names context (it named the
    dataset, or on the simulator told 4 virtual workers to be fewer, which could not fit
    either), and says the activations are what is large."""
    from workbench.config import RunConfig
    cfg = RunConfig(algorithm="sync_sgd", model="gpt", dataset="markov_text", context=100_000, cpus=4,
                    simulate=simulate, steps=2)
    err = refused(lambda: P.check_memory(cfg, workers_memory=None if simulate else [64 << 30] * 4),
                  "context", "100000", "a size whose run fits in")
    assert "GiB of activations" in err.allowed and ("one virtual worker" in err.allowed) == simulate


# ------------------------------------------------------------------------------ emulator
def test_emulator_passes_no_emulation_and_a_plausible_network(tiny):
    P.check_emulator(tiny(), 10_000)
    P.check_emulator(tiny(latency_ms=1.0, bandwidth_gbps=1.0), 10_000)


def test_emulator_fails_a_crawling_link_and_a_huge_latency(tiny):
    refused(lambda: P.check_emulator(tiny(bandwidth_gbps=1e-6), 10_000),
            "bandwidth_gbps", "1e-06", "0 (no cap) or at least")
    refused(lambda: P.check_emulator(tiny(latency_ms=40_000.0), 10_000),
            "latency_ms", "40000.0", "at most 30000 ms")


# ------------------------------------------------------------------------------ scheduler
def test_scheduler_address_must_parse_and_answer():
    refused(lambda: P.check_reachable("nonsense", timeout=1), "scheduler", "'nonsense'", "tcp://HOST:PORT")
    t0 = time.perf_counter()
    refused(lambda: P.check_reachable("tcp://127.0.0.1:9", timeout=1), "scheduler", "'tcp://127.0.0.1:9'",
            "a reachable Dask scheduler")
    assert time.perf_counter() - t0 < 30       # a hang guard around the 1 s timeout, not a timing claim


def refused_port() -> int:
    """A port of 127.0.0.1 where nothing listens (bound, then closed): a connection is refused."""
    import socket
    with socket.create_server(("127.0.0.1", 0)) as s:
        return s.getsockname()[1]


def test_a_refused_scheduler_is_reported_before_the_data_or_the_model_is_built(monkeypatch):
    """A refused port was reported after preflight generated the dataset and built the model
    (seconds for a large synthetic set): the probe is now made before them."""
    from workbench import api
    from workbench.problem import Problem
    built = []

    def never(*args, **kwargs):
        built.append("problem")
        raise AssertionError("the data and the model were built before the scheduler was checked")
    monkeypatch.setattr(Problem, "from_config", classmethod(never))
    monkeypatch.setattr(P, "check_memory", never)
    address = f"tcp://127.0.0.1:{refused_port()}"
    config = RunConfig(algorithm="sync_sgd", scheduler=address, epochs=1)
    refused(lambda: P.preflight(config), "scheduler", repr(address), "a reachable Dask scheduler")
    refused(lambda: api.run(config, progress=False), "scheduler", repr(address), "a reachable Dask scheduler")
    # the API's own argument: an address given as `cluster` is checked before preflight too
    refused(lambda: api.run(RunConfig(algorithm="sync_sgd", epochs=1), cluster=address, progress=False),
            "cluster", repr(address), "a reachable Dask scheduler")
    refused(lambda: api.grid(RunConfig(algorithm="sync_sgd", epochs=1), {"lr": [0.1, 0.2]}, cluster=address,
                             progress=False), "cluster", repr(address), "a reachable Dask scheduler")
    assert built == []


def test_a_sweep_probes_its_scheduler_before_it_plans(monkeypatch):
    """`sweep(cluster=ADDRESS)` planned its points first (every point's dataset entry and
    schedule, `Problem.from_config`) and then refused the address as `scheduler`, from the
    client it opened: the address is now probed first, named as the argument given, as `run`
    and `grid` do; `config.scheduler` too, by the API and by the CLI."""
    from workbench import api
    from workbench.analysis.sweep import Sweep
    from workbench.apps.cli import main
    from workbench.problem import Problem
    planned = []

    def never(*args, **kwargs):
        planned.append("problem")
        raise AssertionError("the sweep was planned before its scheduler was checked")
    monkeypatch.setattr(Problem, "from_config", classmethod(never))
    address = f"tcp://127.0.0.1:{refused_port()}"
    base = {"algorithm": "sync_sgd", "epochs": 1}
    refused(lambda: api.sweep(base, workers=[1, 2], cluster=address, progress=False),
            "cluster", repr(address), "a reachable Dask scheduler")
    refused(lambda: api.sweep(RunConfig(**base, scheduler=address), workers=[1, 2], progress=False),
            "scheduler", repr(address), "a reachable Dask scheduler")
    assert main(["sweep", "--algorithm", "sync_sgd", "--scheduler", address, "--workers", "1,2",
                 "--no-progress"]) == 2
    assert planned == []
    # a sweep planned already (the CLI's path into the API): its `cluster` named as such too
    monkeypatch.undo()
    plan = Sweep.plan(RunConfig(**base), [1, 2])
    refused(lambda: api.run_sweep(plan, cluster=address, progress=False), "cluster", repr(address),
            "a reachable Dask scheduler")


def test_a_refused_scheduler_is_reported_before_dask_is_imported():
    """The probe's plain TCP connection comes before Dask's imports (0.5-1 s): a refusal needs none."""
    import subprocess
    import sys
    code = ("import sys\n"
            "from workbench.execution.preflight import check_reachable\n"
            "from workbench import ConfigError\n"
            f"try:\n    check_reachable('tcp://127.0.0.1:{refused_port()}', timeout=5)\n"
            "except ConfigError as exc:\n    print(exc.field)\n"
            "print('distributed' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["scheduler", "False"], out.stdout + out.stderr
    # the CLI's run: refused (exit 2, the one line) before Dask, the API module or pandas is imported
    code = ("import sys\n"
            "from workbench.apps.cli import main\n"
            f"rc = main(['run', '--algorithm', 'sync_sgd', '--scheduler', 'tcp://127.0.0.1:{refused_port()}', "
            "'--no-progress'])\n"
            "print(rc, *(m in sys.modules for m in ('distributed', 'workbench.api', 'pandas')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["2", "False", "False", "False"], out.stdout + out.stderr
    assert out.stderr.startswith("error: scheduler: a reachable Dask scheduler"), out.stderr


# ------------------------------------------------------------------------------ the whole preflight
def test_a_scheduler_address_answered_by_another_server_is_named_as_such():
    """An HTTP server at the address was "spoke another protocol (MemoryError)": the error Dask's
    comm raised reading an HTTP reply as a frame, which reads like a memory problem here."""
    import socket
    import threading
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def answer() -> None:
        for _ in range(4):     # the probe's plain connection, then Dask's
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n" * 64)
    threading.Thread(target=answer, daemon=True).start()
    try:
        with pytest.raises(ConfigError) as err:
            P.check_reachable(f"tcp://127.0.0.1:{port}", timeout=3)
    finally:
        server.close()
    text = str(err.value)
    assert "something that is not a Dask scheduler answered there (it spoke another protocol)" in text, text
    assert "Error" not in text, text


def test_preflight_passes_a_good_config_without_warnings(tiny):
    assert P.preflight(tiny()) == []


@pytest.mark.skipif(gpu_count() > 0, reason="a GPU is visible here")
def test_preflight_fails_gpus_that_are_not_there(tiny):
    refused(lambda: P.preflight(tiny(gpus=1)), "gpus", "1", "at most the 0 visible GPU(s)")


def test_preflight_fails_a_model_that_does_not_fit_the_dataset(tiny):
    refused(lambda: P.preflight(tiny(dataset="synthetic", model="cnn")), "model", "'cnn'",
            "only with an image dataset")


def test_preflight_checks_out_every_time_even_for_a_config_it_already_passed(tmp_path, tiny):
    cfg = tiny(out=str(tmp_path / "run"))
    assert P.preflight(cfg) == []
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "summary.json").write_text("{}")           # another run landed there meanwhile
    refused(lambda: P.preflight(cfg), "out", repr(str(tmp_path / "run")), "--overwrite")
    assert P.preflight(cfg, overwrite=True) == []


# ------------------------------------------------------------------------------ warnings
def test_warnings_for_settings_that_make_the_algorithm_pointless():
    assert P.run_warnings(RunConfig(algorithm="sync_easgd", tau=10), 10) == []
    [tau] = P.run_warnings(RunConfig(algorithm="sync_easgd", tau=11), 10)
    assert tau.startswith("tau (11) is longer than the run (10 steps") and "the centre stays" in tau
    for local in ("local_sgd", "post_local_sgd", "diloco"):   # no centre: one average, after the last step
        [tau] = P.run_warnings(RunConfig(algorithm=local, tau=11), 10)
        assert tau.endswith("meet once, in the average after the run's last step") and "centre" not in tau
    assert P.run_warnings(RunConfig(algorithm="sync_sgd", tau=11), 10) == []          # tau means nothing there
    [rounds] = P.run_warnings(RunConfig(algorithm="ltfb", round_size=10), 10)
    assert rounds.startswith("round_size (10) is at least the run's 10 steps")
    assert P.run_warnings(RunConfig(algorithm="ltfb", round_size=9), 10) == []


def test_every_setting_longer_than_the_run_is_refused_or_warned_as_its_siblings(tmp_path):
    # digits: 1437 training rows, batch 32 -> 44 whole batches an epoch
    base = dict(dataset="digits", batch_size=32, cpus=2)
    # a warmup past --steps runs (a short look at a config), said (against --epochs it is refused)
    [warm] = P.preflight(RunConfig(algorithm="sgd", warmup="gradual", warmup_epochs=2, steps=5, **base))
    assert warm == ("the warmup (2 epochs, 88 steps) is longer than the run (5 steps): the lr rises for the whole "
                    "run and never reaches its peak")
    assert P.preflight(RunConfig(algorithm="sgd", warmup="gradual", warmup_epochs=0.1, steps=5, **base)) == []

    def says(**kw):
        return " ".join(P.preflight(RunConfig(**{**base, **kw})))
    assert "post_local_epoch (50) is at or after the run's end (44 steps" in says(algorithm="post_local_sgd",
                                                                                  post_local_epoch=50, epochs=1)
    assert "post_local_epoch" not in says(algorithm="post_local_sgd", post_local_epoch=0.5, epochs=1)
    assert "early_stop (3) waits for more evaluations than the run makes (1" in says(
        algorithm="sgd", early_stop=3, eval_every=100000, steps=20)
    assert "early_stop" not in says(algorithm="sgd", early_stop=3, eval_every=2, steps=20)
    ck = dict(algorithm="sgd", steps=20, out=str(tmp_path / "r"))
    assert "checkpoint_every (100000 steps) is at least the run's 20 steps" in says(**ck, checkpoint_every=100000)
    assert "checkpoint_every" not in says(**ck, checkpoint_every=5)


def test_the_stability_bound_takes_the_momentum_the_algorithm_uses():
    """The curvature bound 2(1 + momentum)/sharpness counts momentum only where the steps use
    it (`AlgorithmSpec.uses_momentum`): async_sgd's server and hogwild_sgd's writes are plain."""
    from workbench.problem import Problem

    def said(algorithm):
        cfg = RunConfig(algorithm=algorithm, lr=1.0, lr_scaling="linear", batch_size=1024, momentum=0.9, steps=5)
        problem = Problem.from_config(cfg)
        return " ".join(P.run_warnings(cfg, 5, problem.data, problem.model))
    assert "momentum 0.9)" in said("sync_sgd")
    assert "momentum 0)" in said("async_sgd") and "momentum 0)" in said("hogwild_sgd")


def test_the_curvature_estimate_leaves_no_buffers_in_the_cached_model():
    """The estimate runs on the problem's model, which its cache keeps for the session: the
    work buffers of its 256 rows go when it ends (large_batch's GPT kept 74 MB of them in the
    kernel), and the warning is the same the second time."""
    from workbench.problem import Problem

    cfg = RunConfig(algorithm="sync_sgd", lr=1.0, lr_scaling="linear", batch_size=1024, momentum=0.9, steps=5,
                    seed=3)
    problem = Problem.from_config(cfg)
    first = P.run_warnings(cfg, 5, problem.data, problem.model)
    assert any("stability bound" in w for w in first), first        # the estimate ran
    assert problem.model._work == {}
    assert P.run_warnings(cfg, 5, problem.data, problem.model) == first
