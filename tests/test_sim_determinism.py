"""The simulated cluster is deterministic by default and runs exactly the workers asked for.

* The same config twice gives bitwise the same steps, evaluations and parameters, for
  every registered algorithm, with CPU workers (the fixed default profile) and without.
* No wall-clock measurement enters virtual time unless `cpu_device="local"` asks for it;
  then this machine is timed once per model, cached, written into the summary, and a run
  replays bitwise from that summary or the cached file; a file of another model or
  machine is refused with one line naming what differs.
* `--gpus N` alone in a simulation is N GPU workers (no CPU compute workers); every
  `--simulate` command of the README and docs/ runs the workers it says.
"""
from __future__ import annotations

import json
import math
import re
import shlex
from pathlib import Path

import pytest

from workbench.algorithms import REGISTRY
from workbench.config import ConfigError, RunConfig
from workbench.sim import calibration
from workbench.sim.run import run_simulated

README = Path(__file__).resolve().parents[1] / "README.md"
SMALL = dict(dataset="digits", model="mlp", hidden=[16], batch_size=16, steps=6, eval_every=3, seed=4, lr=0.05,
             simulate=True)


def _same(a, b) -> None:
    assert a.summary["status"] == b.summary["status"]
    assert a.steps.equals(b.steps), "steps differ"
    assert a.evals.equals(b.evals), "evals differ"
    assert (a.params is None) == (b.params is None)
    if a.params is not None:
        assert a.params.tobytes() == b.params.tobytes(), "parameters differ"


def _no_timing(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("this machine was timed without cpu_device=local")
    monkeypatch.setattr(calibration, "local_device", refuse)
    monkeypatch.setattr(calibration, "co_run_device", refuse)


@pytest.fixture
def judged_good(monkeypatch):
    """These tests time this core for real and check how its calibration is cached and replayed;
    on a busy machine (this shared 2-core one at load 10) a real timing is judged not this
    machine's and is not cached (`calibration_problems`, tested on injected timings below):
    here every timing is judged good, whatever the load."""
    monkeypatch.setattr(calibration, "calibration_problems", lambda record, cpu_workers=None: [])


@pytest.mark.parametrize("workers", [dict(cpus=2), dict(gpus=2)], ids=["cpu-workers", "gpu-workers"])
@pytest.mark.parametrize("algorithm", sorted(REGISTRY))
def test_the_same_config_twice_is_bitwise_the_same_run(algorithm, workers, monkeypatch):
    _no_timing(monkeypatch)
    config = RunConfig(algorithm=algorithm, **SMALL, **workers)
    first, second = run_simulated(config), run_simulated(config)
    assert first.summary["status"] == "completed", first.summary.get("events")
    assert len(first.steps) > 0
    _same(first, second)
    assert first.summary.get("calibration") is None      # nothing was measured


@pytest.mark.usefixtures("judged_good")
def test_local_is_timed_once_cached_recorded_and_replayed(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_DATA", str(tmp_path / "cache"))
    calibration._LOCAL.clear()
    config = RunConfig(algorithm="async_sgd", cpus=3, cpu_device="local", **SMALL)
    first = run_simulated(config)
    record = first.summary["calibration"]
    assert record["kind"] == calibration.CALIBRATION_KIND and record["model"] == "mlp 64-16-10 (1,210 params)"
    cached = list((tmp_path / "cache" / "sim-calibration").glob("*.json"))
    assert len(cached) == 1 and json.loads(cached[0].read_text()) == record
    _no_timing(monkeypatch)                                # from here on nothing may be timed
    calibration._LOCAL.clear()
    _same(first, run_simulated(config))                    # the cached file
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps(first.summary, default=str))
    _same(first, run_simulated(config.replace(calibration=str(summary))))    # the run's own summary
    _same(first, run_simulated(config.replace(calibration=str(cached[0]))))  # the calibration file


@pytest.mark.usefixtures("judged_good")
def test_a_cached_calibration_timed_another_way_is_timed_again_and_a_given_file_replays(tmp_path, monkeypatch):
    # A calibration was the fastest of up to 9 calls, then (2026-12-04) the median, then the
    # mean, now the mean with flat timings fitted flat (calibration.CALIBRATION_METHOD). A cached record taken another way is stale: timed
    # again and rewritten. The same record given as a file still replays as it ran.
    monkeypatch.setenv("WORKBENCH_DATA", str(tmp_path / "cache"))
    calibration._LOCAL.clear()
    config = RunConfig(algorithm="sgd", cpus=1, cpu_device="local", **SMALL)
    first = run_simulated(config)
    record = first.summary["calibration"]
    assert record["method"] == calibration.CALIBRATION_METHOD == "mean, bounded fit"
    assert "mean of" in record["source"]
    assert 0 <= record["cv"] < 1                                  # the spread of the largest batch's calls
    assert record["load_average"] is None or record["load_average"] >= 0
    cached = next((tmp_path / "cache" / "sim-calibration").glob("*.json"))
    old = {k: v for k, v in record.items() if k not in ("load_average", "cv")}
    old["method"] = "mean"                                       # the fit of before 2026-12-06
    old["rate_flops"] = record["rate_flops"] * 2                 # as if the fastest calls had been kept
    cached.write_text(json.dumps(old))
    given = tmp_path / "old.json"
    given.write_text(json.dumps(old))
    calibration._LOCAL.clear()
    again = run_simulated(config)                                # the stale cache: timed anew
    assert again.summary["calibration"]["method"] == "mean, bounded fit"
    assert json.loads(cached.read_text())["method"] == "mean, bounded fit"
    _no_timing(monkeypatch)
    replay = run_simulated(config.replace(calibration=str(given)))
    assert replay.summary["calibration"]["rate_flops"] == old["rate_flops"]      # as it ran, not re-timed


@pytest.mark.usefixtures("judged_good")
def test_local_cpu_workers_computing_together_are_timed_together_recorded_and_replayed(tmp_path, monkeypatch):
    # Two local CPU workers compute at once in a synchronous step: the core is timed again
    # while another process computes the same model (co_run), that timing is what the two
    # workers are charged, it joins the cached record, and the run replays from its summary.
    # A calibration file without it (written before co-run timing) keeps the one-core numbers.
    monkeypatch.setenv("WORKBENCH_DATA", str(tmp_path / "cache"))
    monkeypatch.setattr("os.cpu_count", lambda: 2)          # the calibrated machine's cores, whatever CI has
    calibration._LOCAL.clear()
    config = RunConfig(algorithm="sync_sgd", cpus=2, cpu_device="local", **SMALL)
    first = run_simulated(config)
    record = first.summary["calibration"]
    together = record["co_run"]["2"]
    assert together["source"].startswith("this machine, one of 2 cores computing at once")
    assert 0 <= together["cv"] < 1
    assert "host_demand_cores" not in record                # measured only beside real runs (bench --sim-vs-real)
    assert [b for b, _ in together["timed"]] == [b for b, _ in record["timed"]]       # the same batch sizes
    one_core = {k: v for k, v in record.items() if k != "co_run"}
    old = tmp_path / "before-co-run.json"
    old.write_text(json.dumps(one_core))
    _no_timing(monkeypatch)
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps(first.summary, default=str))
    _same(first, run_simulated(config.replace(calibration=str(summary))))
    # what each worker is charged: the co-run fit with the record, the one-core fit with the old file
    from workbench.problem import Problem
    from workbench.sim.costs import make_costs
    problem = Problem.from_config(config)
    charged = make_costs(config, problem.new_model(), ["cpu", "cpu"], problem.data).devices
    assert [(d.step_overhead_s, d.rate) for d in charged] == [(together["step_overhead_s"],
                                                                together["rate_flops"])] * 2
    old_config = config.replace(calibration=str(old))
    charged = make_costs(old_config, problem.new_model(), ["cpu", "cpu"], problem.data).devices
    assert [(d.step_overhead_s, d.rate) for d in charged] == [(record["step_overhead_s"], record["rate_flops"])] * 2
    assert run_simulated(old_config).summary["status"] == "completed"
    # the host's other demands (the client's monitor beside two workers on two cores) slow
    # each worker's core by its share: recorded, charged, and replayed from the summary
    busy = dict(record, host_demand_cores=0.2)
    busy_file = tmp_path / "with-demand.json"
    busy_file.write_text(json.dumps(busy))
    busy_config = config.replace(calibration=str(busy_file))
    charged = make_costs(busy_config, problem.new_model(), ["cpu", "cpu"], problem.data).devices
    share = (2 - 0.2) / 2
    for d in charged:
        assert d.rate == pytest.approx(together["rate_flops"] * share, rel=1e-12)
        assert d.step_overhead_s == pytest.approx(together["step_overhead_s"] / share, rel=1e-12)
        assert "the host's other demands take 0.2 of its 2 cores" in d.source
    alone = make_costs(busy_config.replace(cpus=1), problem.new_model(), ["cpu"], problem.data).devices
    assert alone[0].rate == record["rate_flops"]              # one worker: a core is free for the demand
    slower = run_simulated(busy_config)
    assert slower.summary["calibration"]["host_demand_cores"] == 0.2
    assert slower.summary["sim_wall_s"] >= 0 and slower.steps["compute_s"].sum() > first.steps["compute_s"].sum()
    replay = tmp_path / "busy-summary.json"
    replay.write_text(json.dumps(slower.summary, default=str))
    _same(slower, run_simulated(config.replace(calibration=str(replay))))


@pytest.mark.usefixtures("judged_good")
def test_a_pass_larger_than_any_size_timed_is_timed_itself_cached_and_replayed(tmp_path, monkeypatch):
    # The core is timed on short calls and charged along the line through them; a pass beyond
    # the largest is timed at its own size (a GPT's rows per second fall with the pass: 0.82 ms
    # a sequence at 8, 1.13 at 512 here). The run records that size's record, the cache keeps it
    # beside the line's, and a run whose passes are within the timed sizes is charged the line.
    monkeypatch.setenv("WORKBENCH_DATA", str(tmp_path / "cache"))
    calibration._LOCAL.clear()
    timed_rows = []
    real = calibration.local_device
    monkeypatch.setattr(calibration, "local_device",
                        lambda *a, **k: timed_rows.append(k.get("rows")) or real(*a, **k))
    monkeypatch.setattr(calibration, "CALIBRATION_TARGET_S", 1e-9)      # the line: calls of 4 rows at most
    config = RunConfig(algorithm="sync_sgd", cpus=1, cpu_device="local", **{**SMALL, "batch_size": 48})
    first = run_simulated(config)
    record = first.summary["calibration"]
    assert timed_rows == [None, 48] and record["timed"][0][0] == 48 and len(record["timed"]) == 1
    assert "timed at batch 48:" in record["source"]
    cached = json.loads(next((tmp_path / "cache" / "sim-calibration").glob("*.json")).read_text())
    assert max(b for b, _ in cached["timed"]) == 4 and cached["at_rows"]["48"] == record
    small = run_simulated(config.replace(batch_size=4))               # within the line: no new timing
    assert timed_rows == [None, 48] and small.summary["calibration"]["timed"] == cached["timed"]
    micro = run_simulated(config.replace(accumulate=12))                # passes of 4: the line too
    assert timed_rows == [None, 48] and micro.summary["calibration"]["timed"] == cached["timed"]
    _no_timing(monkeypatch)
    calibration._LOCAL.clear()
    _same(first, run_simulated(config))                                 # from the cache
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps(first.summary, default=str))
    _same(first, run_simulated(config.replace(calibration=str(summary))))   # from the run's summary


@pytest.mark.usefixtures("judged_good")
def test_a_calibration_of_another_model_or_machine_is_refused_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_DATA", str(tmp_path / "cache"))
    config = RunConfig(algorithm="sync_sgd", cpus=2, cpu_device="local", **SMALL)
    record = run_simulated(config).summary["calibration"]
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**record, "model": "mlp 64-512-10 (38,410 params)"}))
    with pytest.raises(ConfigError) as err:
        run_simulated(config.replace(calibration=str(other)))
    message = str(err.value)
    assert "\n" not in message and message.startswith("calibration: ") and "model 'mlp 64-512-10" in message
    assert "this run: 'mlp 64-16-10 (1,210 params)'" in message
    other.write_text(json.dumps({**record, "machine": {**record["machine"], "cpu": "Some Other CPU"}}))
    with pytest.raises(ConfigError, match=r"^calibration: .*machine .*Some Other CPU"):
        run_simulated(config.replace(calibration=str(other)))
    for bad in (-0.1, 2.0, "0.1", True):          # the host's other demand: cores in [0, the machine's)
        other.write_text(json.dumps({**record, "host_demand_cores": bad}))
        with pytest.raises(ConfigError) as err:
            run_simulated(config.replace(calibration=str(other)))
        assert str(err.value).startswith("calibration: a file whose host_demand_cores is a number of cores in [0, ")
        assert f"(got {bad!r})" in str(err.value) and "\n" not in str(err.value)
    other.write_text("{}")
    with pytest.raises(ConfigError, match="^calibration: a calibration file written by"):
        run_simulated(config.replace(calibration=str(other)))
    with pytest.raises(ConfigError, match="^calibration: .*only with cpu_device local"):
        RunConfig(algorithm="sync_sgd", cpus=2, calibration=str(other), **SMALL)


def test_gpus_alone_are_gpu_workers_only():
    c = RunConfig(algorithm="easgd", gpus=8, **{**SMALL, "batch_size": 64})
    assert (c.cpus, c.gpus) == (0, 8)
    assert RunConfig(algorithm="easgd", gpus=8, cpus=2, **{**SMALL, "batch_size": 64}).cpus == 2   # when asked
    assert RunConfig(algorithm="easgd", gpus=8, batch_size=64).cpus == 2      # a real run: unchanged
    assert RunConfig.from_dict({"algorithm": "easgd", "gpus": "8", "simulate": "true", "batch_size": 64}).cpus == 0
    assert RunConfig(algorithm="easgd", **SMALL).cpus == 2                    # no gpus: the default CPU workers
    assert c.replace(steps=3).cpus == 0                                       # stable under replace


@pytest.mark.parametrize("fields, message", [
    (dict(cpus=2, cpu_device="v100"), "cpu_device: a CPU profile, one of core, knl, power8, xeon, local (v100 is a "
                                      "GPU profile: ask for GPU workers with gpus and device), got 'v100'"),
    (dict(cpus=2, device="v100"), "device: the GPU workers' profile, only with gpus >= 1 (CPU workers take "
                                  "cpu_device), got 'v100'"),
])
def test_cpu_workers_with_a_gpu_profile_is_one_line(fields, message):
    with pytest.raises(ConfigError) as err:
        RunConfig(algorithm="sync_sgd", **{**SMALL, **fields})
    assert str(err.value) == message


def test_the_summary_names_workers_by_kind_and_the_host_roles():
    s = run_simulated(RunConfig(algorithm="async_sgd", gpus=3, cpus=1, **SMALL)).summary
    assert s["workers_by_kind"] == "3 GPU (v100) + 1 CPU (core)"
    assert s["roles"] == [{"role": "parameter server", "host": "sim-host", "runs_on": "one host core over the network"}]
    assert run_simulated(RunConfig(algorithm="sync_sgd", gpus=2, **SMALL)).summary["roles"] == []


# ------------------------------------------------------------------ README commands
def readme_simulate_commands() -> list[list[str]]:
    """Every `python -m workbench run|sweep|grid --simulate ...` command of the README and the docs, as argv."""
    text = "\n".join(p.read_text() for p in [README, *sorted((README.parent / "docs").glob("*.md"))])
    text = text.replace("\\\n", " ")
    commands = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("python -m workbench ") and "--simulate" in line:
            argv = shlex.split(line.split(" #")[0])[3:]
            if argv not in commands:        # the README and a docs page may show the same one
                commands.append(argv)
    return commands


def _budget(argv: list[str], out: Path) -> list[str]:
    """The command with a short budget: 3 steps (sweeps: 2), its out in a temporary folder."""
    argv = list(argv)
    for flag in ("--epochs", "--steps", "--out"):
        while flag in argv:
            i = argv.index(flag)
            del argv[i:i + 2]
    return argv + ["--steps", "2" if argv[0] == "sweep" else "3", "--out", str(out), "--no-progress"]


def _asked(argv: list[str]) -> dict[str, int]:
    def flag(name: str) -> int | None:
        return int(argv[argv.index(name) + 1]) if name in argv else None
    gpus = flag("--gpus") or 0
    cpus = flag("--cpus")
    return {"gpu": gpus, "cpu": cpus if cpus is not None else (0 if gpus else 2)}


def test_the_readme_has_simulate_commands():
    cmds = readme_simulate_commands()
    assert {c[0] for c in cmds} == {"run", "sweep", "grid"} and len(cmds) >= 3


@pytest.mark.slow
@pytest.mark.parametrize("argv", readme_simulate_commands(), ids=lambda a: " ".join(a[:4]))
def test_each_readme_simulate_command_runs_the_workers_it_says(argv, tmp_path):
    from workbench.apps.cli import main
    out = tmp_path / "out"
    assert main(_budget(argv, out)) in (0, 1)            # 1: a command that kills a worker may end failed
    if argv[0] == "run":
        summary = json.loads((out / "summary.json").read_text())
        kinds = [w["kind"] for w in summary["workers"]]
        asked = _asked(argv)
        assert (kinds.count("gpu"), kinds.count("cpu")) == (asked["gpu"], asked["cpu"]), summary["workers_by_kind"]
    elif argv[0] == "grid":                               # every combination once per seed, each on the workers asked
        import pandas as pd
        combos = math.prod(len(argv[i + 1].split("=", 1)[1].split(",")) for i, a in enumerate(argv) if a == "--vary")
        seeds = len(argv[argv.index("--seeds") + 1].split(",")) if "--seeds" in argv else 1
        runs = pd.read_csv(out / "grid_runs.csv")
        assert len(runs) == combos * seeds and set(runs["status"]) <= {"completed", "diverged"}
        for run_dir in runs["run_dir"]:
            summary = json.loads((Path(run_dir) / "summary.json").read_text())
            assert [w["kind"] for w in summary["workers"]].count("cpu") == _asked(argv)["cpu"]
    else:
        points = [int(w) for w in argv[argv.index("--workers") + 1].split(",")]
        runs = sorted(p for p in out.rglob("summary.json"))
        got = sorted(len(json.loads(p.read_text())["workers"]) for p in runs)
        assert got == sorted(points)
        assert all(re.fullmatch(r"\d+ CPU \(core\)", json.loads(p.read_text())["workers_by_kind"]) for p in runs)


# ------------------------------------------------------------------ batched compute
@pytest.mark.parametrize("workers", [dict(cpus=4), dict(gpus=2, cpus=2, jitter=0.3)], ids=["same-device", "mixed"])
@pytest.mark.parametrize("algorithm", sorted(REGISTRY))
def test_batched_compute_is_bitwise_the_call_by_call_run(algorithm, workers):
    # The workers of one virtual instant compute together (ComputePool): the same run, bit for bit.
    from workbench.execution.engine import execute
    from workbench.sim.transport import SimTransport
    config = RunConfig(algorithm=algorithm, **SMALL, **workers)
    batched = execute(config, SimTransport())
    one_by_one = execute(config, SimTransport(batch_compute=False))
    assert batched.summary["status"] == "completed", batched.summary.get("events")
    _same(batched, one_by_one)


@pytest.mark.parametrize("algorithm", ["async_sgd", "easgd", "hogwild_sgd"])
def test_asynchronous_workers_whose_computes_overlap_are_batched_and_the_run_is_the_same(algorithm, monkeypatch):
    # Asynchronous workers start their computes at staggered virtual times; a call is
    # computed when its result is first needed (the end of some worker's compute), with
    # every call started before then: pooled calls per computation > 1, bitwise the same run.
    from workbench.execution.engine import execute
    from workbench.sim.transport import ComputePool, SimTransport
    sizes: list[int] = []
    flush = ComputePool.flush

    def counted(self):
        sizes.append(len(self.calls))
        flush(self)
    monkeypatch.setattr(ComputePool, "flush", counted)
    config = RunConfig(algorithm=algorithm, **{**SMALL, "steps": 60, "eval_every": 20, "batch_size": 64}, cpus=8,
                       jitter=0.2)
    batched = execute(config, SimTransport(lockstep=False))   # the pool (easgd's lockstep batches its own way)
    assert batched.summary["status"] == "completed"
    assert sum(sizes) == 8 * 60 and max(sizes) > 1         # every step's call, some computed together
    _same(batched, execute(config, SimTransport(batch_compute=False)))


# ------------------------------------------------------------------ a calibration judges itself
# An audit's `sweep --simulate --cpu-device local --workers 1,2` at load 8.5 (2026-12-07) answered
# 1.56x with no word of doubt, from a calibration that had batch 256 cheaper than batch 64, calls
# spreading 38.7% (alone) and 319% (two cores at once), a call at batch 64 faster beside another
# process than alone; and it cached that, so every later run replayed it. The timings below are
# injected (the audit's numbers, or a core's that grow with the rows), and so is what the machine
# did meanwhile: the test needs no load of its own.
AUDIT_ALONE = ((64, 0.5316e-3), (256, 0.3904e-3), (1024, 2.9695e-3))
AUDIT_CO_RUN = ((64, 0.2254e-3), (256, 1.0941e-3), (1024, 5.8182e-3))
STEADY_ALONE = ((4, 0.10e-3), (16, 0.12e-3), (64, 0.20e-3))
STEADY_CO_RUN = ((4, 0.11e-3), (16, 0.13e-3), (64, 0.22e-3))


def _device(timed, spread: float):
    from workbench.sim.profiles import Device
    flops = [float(b) * 1e6 for b, _ in timed]
    overhead, rate = calibration.fit_overhead_rate(flops, [t for _, t in timed])
    return Device("local", "cpu", rate, 2e10, 1.0, overhead, "injected: " + ", ".join(f"{b}: {t}" for b, t in timed),
                  tuple(timed), spread=spread)


def _inject(monkeypatch, alone, co_run, spreads=(0.03, 0.05), others: float = 0.02) -> list[str]:
    """local_device / co_run_device return these timings; `_watched` says other processes
    used `others` of 2 cores meanwhile. Returns the list each timing appends its name to."""
    from contextlib import contextmanager
    timed: list[str] = []
    monkeypatch.setattr(calibration, "local_device",
                        lambda *a, **k: timed.append("alone") or _device(alone, spreads[0]))
    monkeypatch.setattr(calibration, "co_run_device",
                        lambda *a, **k: timed.append("co_run") or _device(co_run, spreads[1]))

    @contextmanager
    def watched(into):
        yield into
        into.update({"cores": 2, "wall_s": 0.5, "load_before": 0.2, "load_after": 0.3, "our_cores": 1.0,
                     "other_cores": others, "steal_cores": 0.0})
    monkeypatch.setattr(calibration, "_watched", watched, raising=False)   # (raising=False: also before it was)
    return timed


def test_a_calibration_on_a_busy_machine_says_so_and_is_not_kept_as_this_machines(tmp_path, monkeypatch, capsys):
    from workbench.apps.cli import SIMULATED_SWEEP_UNKEPT, main
    from workbench.measure import notes
    monkeypatch.setenv("WORKBENCH_DATA", str(tmp_path / "cache"))
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    calibration._LOCAL.clear()
    config = RunConfig(algorithm="sync_sgd", cpus=2, cpu_device="local", **SMALL)
    cache = tmp_path / "cache" / "sim-calibration"
    # the audit's timings: the run is charged them (and records them, to replay), and says so
    timed = _inject(monkeypatch, AUDIT_ALONE, AUDIT_CO_RUN, spreads=(0.387, 3.19))
    busy = run_simulated(config)
    said = busy.summary["machine_note"]
    assert said.startswith("calibrated on a busy machine: batch 256 took 0.39 ms, under batch 64's 0.532 ms; "
                           "its calls spread 38.7% (bound 25%); with 2 cores computing at once, its calls spread "
                           "319.0% (bound 25%), batch 64 took 0.225 ms, under its 0.532 ms alone; its times are not "
                           "this machine's"), said
    assert said in notes(busy.summary)
    assert busy.summary["calibration"]["timed"] == [list(t) for t in AUDIT_ALONE]
    assert not cache.exists() or not list(cache.glob("*.json"))          # not this machine's calibration
    run_simulated(config)
    assert timed == ["alone", "co_run"] * 2                              # timed again, not replayed
    # a given file of it replays as it ran, and still says so
    given = tmp_path / "busy.json"
    given.write_text(json.dumps(busy.summary, default=str))
    replay = run_simulated(config.replace(calibration=str(given)))
    _same(busy, replay)
    assert replay.summary["machine_note"].endswith("(replayed from the calibration file given)")
    # timings that grow with the rows, but other processes used 1.4 of the 2 cores meanwhile
    timed = _inject(monkeypatch, STEADY_ALONE, STEADY_CO_RUN, others=1.4)
    crowded = run_simulated(config)
    assert crowded.summary["machine_note"].startswith(
        "calibrated on a busy machine: other processes used 1.4 of 2 cores while it was timed; with 2 cores "
        "computing at once, other processes used 1.4 of 2 cores while it was timed; its times are not")
    assert not cache.exists() or not list(cache.glob("*.json"))
    # a quiet machine's calibration: no note, cached, replayed bitwise without timing again
    timed = _inject(monkeypatch, STEADY_ALONE, STEADY_CO_RUN)
    quiet = run_simulated(config)
    assert quiet.summary.get("machine_note") is None and timed == ["alone", "co_run"]
    assert quiet.summary["calibration"]["timed_on"]["other_cores"] == 0.02
    assert len(list(cache.glob("*.json"))) == 1
    _same(quiet, run_simulated(config))
    assert timed == ["alone", "co_run"]
    # a calibration cached before it was judged (the audit's, its load average 8.53): timed again
    stale = {**busy.summary["calibration"], "load_average": 8.53}
    stale.pop("timed_on")
    stale["co_run"]["2"].pop("timed_on")
    next(cache.glob("*.json")).write_text(json.dumps(stale))
    calibration._LOCAL.clear()
    run_simulated(config)
    assert timed == ["alone", "co_run"] * 2
    assert "timed_on" in json.loads(next(cache.glob("*.json")).read_text())   # the good one, cached in its place
    # the sweep's output shows it
    for f in cache.glob("*.json"):
        f.unlink()
    calibration._LOCAL.clear()
    _inject(monkeypatch, AUDIT_ALONE, AUDIT_CO_RUN, spreads=(0.387, 3.19))
    assert main(["sweep", "--simulate", "--cpu-device", "local", "--algorithm", "sync_sgd", "--dataset", "digits",
                 "--hidden", "16", "--batch-size", "16", "--steps", "6", "--workers", "1,2"]) == 0
    out = capsys.readouterr().out
    assert "note (1 worker): calibrated on a busy machine: batch 256 took 0.39 ms" in out
    assert "note (2 workers): calibrated on a busy machine: " in out
    assert out.splitlines()[0] == SIMULATED_SWEEP_UNKEPT     # no promise of the same numbers next time
    assert (busy.summary["calibration_kept"], replay.summary["calibration_kept"], quiet.summary["calibration_kept"]) \
        == (False, True, True)                               # (a given file replays: its numbers are its own)
    # a short timing's few ticks of others' CPU are not a busy machine (CPU times count in 10 ms ticks)
    assert calibration._busy_while_timed({"cores": 2, "wall_s": 0.2, "other_cores": 0.3, "steal_cores": 0.0}, None, 2) is None
    assert calibration._busy_while_timed({"cores": 2, "wall_s": 0.2, "other_cores": 1.5, "steal_cores": 0.0}, None, 2)
