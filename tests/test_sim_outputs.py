"""Simulated runs' outputs: sweeps (API and CLI), figures and reports in virtual seconds, live records."""
from __future__ import annotations

import threading
import time

import pandas as pd
import pytest

import workbench as wb
from workbench import ConfigError, RunConfig
from workbench.apps.cli import main as cli_main
from workbench.config import ConfigTypeError

# Named profiles: the same virtual times in every process (cpu_device="local" is calibrated).
SIM = dict(algorithm="sync_sgd", dataset="digits", simulate=True, cpu_device="power8", batch_size=64, steps=12,
           seed=0)


# ------------------------------------------------------------------------------ sweeps
def test_a_simulated_sweep_runs_every_point_on_virtual_workers(no_dask, tmp_path):
    seen = []
    table = wb.sweep(RunConfig(**SIM), workers=[1, 2, 4, 8], simulate=True, out=tmp_path / "sw", progress=False,
                     on_result=lambda row, result: seen.append(result))
    assert list(table.workers) == [1, 2, 4, 8] and list(table.status) == ["completed"] * 4
    assert table.simulated.tolist() == [True] * 4 and (table.sim_wall_s > 0).all()
    for w, result in zip([1, 2, 4, 8], seen):
        s = result.summary
        assert s["simulated"] and s["cpu_device"] == "power8" and len(s["workers"]) == w
        assert s["config"]["cpus"] == w and s["config"]["gpus"] == 0
    # each point is the simulated run of its config, bit for bit (deterministic virtual time)
    alone = wb.run(RunConfig(**{**SIM, "cpus": 4, "gpus": 0}), progress=False)
    row = table.set_index("workers").loc[4]
    assert row.samples_per_s == alone.summary["samples_per_s"]
    assert row.final_test_accuracy == alone.summary["final_test_accuracy"]
    # sync SGD on the same global batch is the same trajectory on any number of workers
    assert table.final_test_accuracy.nunique() == 1
    # speedup/efficiency are the sweep maths on the virtual throughputs
    sps = table.samples_per_s.to_numpy()
    assert table.speedup.tolist() == pytest.approx((sps / sps[0]).tolist())
    assert table.efficiency.tolist() == pytest.approx((sps / sps[0] / [1, 2, 4, 8]).tolist())
    saved = pd.read_csv(tmp_path / "sw" / "sweep.csv")
    assert saved.simulated.tolist() == [True] * 4
    assert (tmp_path / "sw" / "w8" / "summary.json").is_file()


def test_a_simulated_sweep_varies_gpus_for_a_gpu_config(no_dask):
    table = wb.sweep(RunConfig(**{**SIM, "cpus": 0, "gpus": 1, "device": "k80", "steps": 4}), workers=[2, 4],
                     progress=False, simulate=True)
    assert list(table.workers) == [2, 4] and table.simulated.all()


def test_a_simulated_sweep_of_cgdp_varies_its_gpus_and_keeps_the_cpu_master(no_dask):
    cfg = RunConfig(**{**SIM, "algorithm": "cgdp", "cpus": 1, "gpus": 2, "device": "p100", "steps": 4})
    seen = []
    table = wb.sweep(cfg, workers=[2, 4], progress=False, on_result=lambda row, result: seen.append(result))
    assert list(table.workers) == [2, 4] and list(table.status) == ["completed"] * 2
    kinds = [[w["kind"] for w in r.summary["workers"]] for r in seen]
    assert kinds == [["gpu"] * 2 + ["cpu"], ["gpu"] * 4 + ["cpu"]]


def test_config_simulate_alone_makes_a_simulated_sweep(no_dask):
    table = wb.sweep(RunConfig(**{**SIM, "steps": 3}), workers=[1, 2], progress=False)
    assert table.simulated.all()


def test_bad_simulated_sweeps_fail_before_any_point_runs(no_dask):
    calls = []
    cfg = RunConfig(algorithm="sync_sgd", dataset="digits", batch_size=64, steps=3)
    with pytest.raises(ConfigError, match=r"^cluster: None with simulate .*got 'threads'$"):
        wb.sweep(cfg, workers=[1, 2], simulate=True, cluster="threads", on_result=lambda *a: calls.append(a))
    with pytest.raises(ConfigError, match="at most 1024 virtual workers"):
        wb.sweep(cfg.replace(batch_size=4096, dataset="synthetic", n_samples=6000), workers=[1, 2048], simulate=True,
                 on_result=lambda *a: calls.append(a))
    with pytest.raises(ConfigError, match="^algorithm: a parallel algorithm with simulate"):
        wb.sweep(cfg.replace(algorithm="sgd"), workers=[1, 2], simulate=True, on_result=lambda *a: calls.append(a))
    with pytest.raises(ConfigTypeError, match="simulate"):
        wb.sweep(cfg, workers=[1, 2], simulate="yes")
    assert calls == []


def test_a_dict_config_may_carry_simulation_fields(no_dask):
    table = wb.sweep({**SIM, "simulate": False, "device": "p100", "cpus": 0, "gpus": 1, "steps": 3},
                     workers=[1, 2], simulate=True, progress=False)
    assert table.simulated.all() and list(table.workers) == [1, 2]


def test_cli_simulated_sweep_writes_csv_and_a_labelled_figure(no_dask, tmp_path, capsys):
    out = tmp_path / "cli"
    code = cli_main(["sweep", "--simulate", "--algorithm", "sync_sgd", "--cpus", "0", "--gpus", "1",
                     "--device", "k80", "--network", "10GbE", "--timing-model", "alexnet", "--workers", "1,2,4,8",
                     "--mode", "weak", "--batch-size", "8", "--steps", "6", "--no-progress", "--out", str(out)])
    assert code == 0
    table = pd.read_csv(out / "sweep.csv")
    assert table.workers.tolist() == [1, 2, 4, 8] and table.batch_size.tolist() == [8, 16, 32, 64]
    assert table.simulated.all()
    page = (out / "sweep.html").read_text()
    assert "<b>simulated</b>: virtual workers, device k80 (GPU workers), network 10GbE, timing model alexnet" in page
    assert "samples per virtual second" in page and "time (virtual seconds)" in page
    assert "too short for a steady state" in page     # 6 steps, 3 of them warm-up: the note and the rings say so


def test_cli_simulated_sweep_rejects_too_many_workers(capsys):
    code = cli_main(["sweep", "--simulate", "--algorithm", "sync_sgd", "--workers", "1,2048", "--batch-size",
                     "4096", "--dataset", "synthetic", "--n-samples", "6000", "--no-progress"])   # 4800 rows to train
    assert code == 2
    assert "at most 1024 virtual workers" in capsys.readouterr().err


# ------------------------------------------------------------------------------ figures and reports
@pytest.fixture(scope="module")
def sim_result():
    return wb.run(RunConfig(**{**SIM, "cpus": 4, "network": "10GbE", "timing_model": "alexnet"}), progress=False)


@pytest.fixture(scope="module")
def real_result():
    return wb.run(RunConfig(algorithm="sgd", dataset="digits", batch_size=64, steps=12), progress=False)


def _titles(fig) -> list[str]:
    out = []
    fig.for_each_xaxis(lambda a: out.append(a.title.text))
    fig.for_each_yaxis(lambda a: out.append(a.title.text))
    return [t for t in out if t] + [a.text for a in fig.layout.annotations]


def test_every_time_axis_of_a_simulated_run_says_virtual_seconds(sim_result, real_result):
    from workbench.ui import figures as F

    sim, real = F.run_figures(sim_result), F.run_figures(real_result)
    for key in ("progress_time", "throughput", "breakdown"):
        sim_titles, real_titles = _titles(sim[key]), _titles(real[key])
        assert any("virtual seconds" in t for t in sim_titles), (key, sim_titles)
        assert not any(t in ("time (s)", "seconds") for t in sim_titles), (key, sim_titles)
        assert not any("virtual" in t for t in real_titles), (key, real_titles)
    assert "samples per virtual second" in _titles(sim["throughput"])
    assert "epoch" in _titles(sim["progress_epoch"]) and "step" in _titles(sim["lr"])
    # overlaid runs of both kinds: the axis says which clock is whose
    mixed = _titles(F.progress_figure([sim_result, real_result], "time"))
    assert "time (s) (virtual for simulated runs)" in mixed
    assert "throughput (samples per virtual second)" in _titles(F.comparison_figure([sim_result]))
    # live figures of a simulated run are laid out the same way
    assert "time (virtual seconds)" in _titles(F.live_base("progress_time", simulated=True))
    assert "time (s)" in _titles(F.mark_virtual(F.live_base("throughput", simulated=True), False))


def test_a_simulated_sweeps_scaling_figure_is_in_virtual_seconds():
    from workbench.ui import figures as F

    table = pd.DataFrame({"workers": [1, 2], "samples_per_s": [10.0, 19.0], "efficiency": [1.0, 0.95],
                          "wall_time_s": [0.01, 0.01], "steady_reached": [True, True], "status": ["completed"] * 2,
                          "simulated": [True, True]})
    fig = F.scaling_figure(table)
    names = {t.name: t for t in fig.data}
    assert "simulated" in names and "measured" not in names
    assert len(names["too short for a steady state"].x) == 0      # hundredths of a virtual second, steady reached
    assert "samples per virtual second" in _titles(fig) and "samples/s" not in _titles(fig)
    real = F.scaling_figure(table.assign(simulated=False))
    assert "measured" in {t.name for t in real.data} and "samples/s" in _titles(real)


def test_the_report_header_says_what_was_simulated(sim_result, real_result):
    from workbench.ui.report import report_html

    page = report_html(sim_result)
    header = page.split("<h2>summary</h2>")[0]
    s = sim_result.summary
    assert "<b>simulated</b>: 4 virtual workers, CPU workers power8, network 10GbE, timing model alexnet" in header
    assert f"simulating it took {s['sim_wall_s']:.3g} s of wall time (sim_wall_s)" in header
    assert "virtual seconds" in header
    summary = page.split("<h2>summary</h2>")[1].split("<h2>")[0]
    assert "samples per virtual s" in summary and "<code>sim_wall_s</code>" in summary
    assert "virtual time of the run" in summary and "wall time of the run" not in summary
    assert "virtual workers" in summary and "processes" not in summary
    assert "<b>simulated</b>" not in report_html(real_result)
    real = report_html(real_result).split("<h2>summary</h2>")[1]
    assert "wall time of the run" in real and "processes" in real


def test_a_1024_worker_runs_figures_draw_at_most_16_worker_lines():
    from workbench.ui.figdata import MAX_WORKER_TRACES, lr_series, throughput_series, time_bins

    steps = pd.DataFrame({"worker": list(range(1024)) * 2, "step": [0] * 1024 + [1] * 1024,
                          "time": [1.0] * 1024 + [2.0] * 1024, "samples": 1, "lr": 0.1,
                          "compute_s": 0.5, "comm_s": 0.5, "wait_s": 0.0})
    names = [s.name for s in throughput_series(time_bins(steps, 2))]
    assert names == [f"worker {k}" for k in range(MAX_WORKER_TRACES)] + ["all workers"]
    all_workers = throughput_series(time_bins(steps, 2))[-1]
    assert list(all_workers.y) == [1024.0, 1024.0]      # every worker counted in "all": 1024 samples per s
    # ... and it heads the legend (plotly's default rank is 1000), not 17th past its scroll
    from workbench.ui import figures as F
    from workbench.ui.traces import add_series
    ranks = {t.name: t.legendrank for t in add_series(F.live_base("throughput", 1),
                                                      throughput_series(time_bins(steps, 2))).data}
    assert ranks["all workers"] < min(r if r is not None else 1000 for n, r in ranks.items() if n != "all workers")
    assert len(lr_series(steps)) == MAX_WORKER_TRACES


# ------------------------------------------------------------------------------ live records
def test_a_simulated_runs_live_batches_reach_on_record_while_it_runs():
    """The driver thread runs the virtual workers; their loops flush live batches every
    FLUSH_S of *wall* time, so on_record sees the run as it goes, not all at the end."""
    arrivals: list[tuple[float, float]] = []     # (wall time seen, newest virtual step time in the batch)
    main = threading.get_ident()
    threads = set()

    def on_record(batch):
        threads.add(threading.get_ident())
        times = [r["time"] for r in batch if r.get("kind") == "step"]
        if times:
            arrivals.append((time.perf_counter(), max(times)))
    # a run of over a second of wall time (two flush intervals of 32 workers): an idle machine
    # ran 800 steps in 0.8 s (2026-12-04), so the steps double until a run lasts that long
    for steps in (800, 1600, 3200, 6400):
        arrivals.clear()
        cfg = RunConfig(**{**SIM, "cpus": 32, "batch_size": 256, "steps": steps})
        result = wb.run(cfg, on_record=on_record, progress=False)
        assert result.status == "completed", result.summary.get("events")
        if result.summary["sim_wall_s"] > 1.0:
            break
    assert result.summary["sim_wall_s"] > 1.0, result.summary["sim_wall_s"]
    # batches that held part of the run (by their content, not by when the caller got back: on a
    # loaded machine the run's saving after its last batch can take longer than any fixed margin)
    early = [(t, v) for t, v in arrivals if v < result.steps.time.max()]
    assert len(early) >= 2, arrivals[:5]                                 # several flushes, not one at the end
    assert arrivals[-1][0] - early[0][0] > 0.2, arrivals[:5]             # the first came while the run went on
    assert threads == {main}                                             # delivered on the caller's thread


def test_virtual_workers_that_flush_together_send_their_next_batches_spread_over_the_interval(monkeypatch):
    """1,024 lockstep workers all flush at their first step; their next live batches must not
    leave together 16 s later (the live view stood still for 16 s, then got 1,024 batches at
    once): each worker keeps its own phase, so the batches leave spread over the interval,
    one every interval/P, and a worker that flushes late keeps its phase."""
    from types import SimpleNamespace

    import numpy as np

    from workbench.algorithms.base import FLUSH_S
    from workbench.sim import transport as sim

    now = [1000.0]
    monkeypatch.setattr(sim, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    monkeypatch.setattr(sim, "SimModel", lambda *a: None)
    size = 1024
    interval = FLUSH_S * size / 16
    ctxs = []
    for rank in range(size):
        ctx = SimpleNamespace(model=None, evaluator=None, flush=lambda done=False, force=False: None, _next_flush=0.0,
                              save_state=lambda step, state, tag=None: None)
        sim.SimTransport._adapt(SimpleNamespace(size=size), ctx, None, None, rank, None)
        ctxs.append(ctx)
    for ctx in ctxs:                      # the first step: every worker flushes at once
        ctx.flush()
    nxt = np.array([c._next_flush for c in ctxs])
    assert (nxt > now[0]).all() and (nxt <= now[0] + interval).all()
    gaps = np.diff(np.sort(nxt))
    assert len(np.unique(nxt)) == size
    assert gaps.max() == pytest.approx(interval / size, rel=1e-6)       # one batch every 1/64 s
    # worker 5 flushes 0.3 of an interval late: its next batch is back on its own grid
    now[0] = nxt[5] + 0.3 * interval
    ctxs[5].flush()
    assert ctxs[5]._next_flush == pytest.approx(nxt[5] + interval, rel=1e-12)


def test_a_simulated_runs_communication_line_never_prints_inf_and_says_what_its_share_is_of(no_dask, tmp_path,
                                                                                               capsys):
    # the audit: sgd (no exchange) printed "infx less"; one GPU worker, whose allreduce costs 0 s, was
    # compared all the same; and the run line's comm fraction (comm + wait, steady window) sat beside
    # the communication line's share (comm, all steps) as if they were one number
    def lines(*flags):
        code = cli_main(["run", "--simulate", "--steps", "12", "--batch-size", "32", "--no-progress",
                         "--out", str(tmp_path / str(len(list(tmp_path.iterdir())))), *flags])
        assert code == 0
        out = capsys.readouterr().out.splitlines()
        return next(line for line in out if line.startswith("completed:")), \
            [line.strip() for line in out if line.strip().startswith("communication:")]

    run, comm = lines()                                          # sgd on one CPU worker
    # one worker on this host's shared memory: sync_sgd's exchange meets nobody and copies its buffer once
    # (`shm.solo_copies`, what the real ShmComm does at size 1): said so, not offered as an allreduce
    assert comm == [comm[0]] and comm[0].startswith("communication: sgd exchanges nothing; sync_sgd on this one "
                                                    "worker would meet nobody, only copy its buffer: ")
    assert "inf" not in comm[0] and " less" not in comm[0] and " more" not in comm[0]
    assert run.endswith("comm fraction 0.00 (comm + wait, steady window)")
    _, comm = lines("--gpus", "4", "--cpus", "0", "--device", "v100")   # one GPU worker: 0 s on both sides
    assert comm == ["communication: sgd exchanges nothing"]
    run, comm = lines("--algorithm", "sync_sgd", "--cpus", "2", "--network", "10GbE")
    assert len(comm) == 1 and " s per worker (" in comm[0] and "% of all its steps' booked time); " in comm[0]
    assert "(comm + wait, steady window)" in run


def test_sgd_given_more_workers_says_it_trains_on_one(no_dask, tmp_path, capsys, monkeypatch):
    # sgd is one worker by design: an explicit --cpus 4 (or --gpus 4) ran one, silently
    for flags, asked in ((["--cpus", "4"], "--cpus 4 asked for 4"), (["--gpus", "4", "--cpus", "0"], "--gpus 4 asked for 4")):
        assert cli_main(["run", "--simulate", "--steps", "4", "--no-progress", "--out", str(tmp_path / flags[0][2:]),
                         *flags]) == 0
        got = capsys.readouterr()
        assert f"note: sgd trains on one worker; {asked}: use sync_sgd (or another parallel algorithm) to use them" \
            in got.err.splitlines()
        assert "1 CPU" in got.out or "1 GPU" in got.out          # still one worker
    assert cli_main(["run", "--simulate", "--steps", "4", "--no-progress", "--out", str(tmp_path / "plain")]) == 0
    assert "trains on one worker" not in capsys.readouterr().err   # the default: nothing asked, nothing said
    monkeypatch.chdir(tmp_path)     # ... nor without --out, where the run's default folder is set on a copy
    assert cli_main(["run", "--simulate", "--steps", "4", "--no-progress"]) == 0
    assert "trains on one worker" not in capsys.readouterr().err
