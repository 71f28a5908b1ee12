"""The dashboard's own costs, measured: `python -m workbench.ui.dashbench [--what ...]`.

Prints, for the machine it runs on (with its load average, since a shared machine
distorts every number): how long Stop takes from the call to the run's end and to the
"stopped" status line, for a real run (the in-process threads transport, and Dask
workers) and a simulated one, pressed at the first live records and deep into the run
(`--stop-after`); how long the default quickstart run takes; and the kernel's RSS before
a run, after it, and after the dashboard has let go of it. Timings belong here, not in
tests (tests stop runs by events and assert no durations).
"""
from __future__ import annotations

import argparse
import gc
import os
import time
from typing import Any

import numpy as np

import workbench as wb
from workbench.results import STATUSES


def _rss_mb() -> float:
    import psutil
    return psutil.Process().memory_info().rss / 2**20


def _load() -> str:
    try:
        one, five, _ = os.getloadavg()
    except OSError:
        return "load unknown"
    from workbench.util.machine import usable_cores
    return f"load average {one:.1f} (5 min {five:.1f}) on {usable_cores()} cores"


def _dashboard(config: wb.RunConfig, cluster: str | None = "threads"):
    from workbench.ui.dashboard import Dashboard
    return Dashboard(cluster=cluster, config=config)


def stop_latency(config: wb.RunConfig, label: str, cluster: str | None = "threads", after_s: float = 0.0,
                 dash: Any = None) -> dict:
    """Start `config` from a dashboard, press Stop `after_s` seconds after its first steps
    are drawn (0: at once; later, deep into a run, the workers have more rows in flight and
    the records to save are many), and time
    the run's end (the training call returned), the status line saying how it ended (what
    the Stop button promises within `STOP_PROMISE_S`: the dashboard's own part of Stop, the
    kernel side; a browser adds its round trip, which the browser test prints) and the
    dashboard idle again (the final redraw and report.html done, Run enabled)."""
    from workbench.ui.liverun import STOP_PROMISE_S
    d = _dashboard(config, cluster) if dash is None else dash
    if dash is not None:
        d.config = config
    assert d.run(), d.status_text
    state = d.live.current
    while state.tally.steps_seen == 0 and not state.done.is_set():   # the first live records
        time.sleep(0.01)
    state.done.wait(after_s)
    at = time.monotonic() - state.t0          # the status log's clock: seconds since Run
    t = time.perf_counter()
    d.stop()
    state.done.wait()
    ended = time.perf_counter() - t
    result = d.wait()
    idle = time.perf_counter() - t
    status = result.summary["status"] if result is not None else f"failed: {d.last_error}"
    final = [since for since, text in d.status_log if since >= at and text.startswith(_ENDED)]
    shown = final[0] - at if final else float("nan")
    row = {"run": label, "after_s": after_s, "status": status, "steps": result.summary["steps"] if result is not None else None,
           "planned": state.total_steps, "to_end_s": ended, "to_stopped_s": shown, "to_idle_s": idle,
           "within_promise": shown <= STOP_PROMISE_S, "text": d.status_text}
    print(f"stop  {label:40s} {after_s:4.0f} s in: {status:9s} run ended {ended:5.2f} s, status '{status}' {shown:5.2f} s "
          f"({'within' if row['within_promise'] else 'OVER'} the {STOP_PROMISE_S:g} s promise), idle {idle:5.2f} s "
          f"after Stop ({row['steps']} of {row['planned']} steps)")
    return row


# how the dashboard's final status line starts: a run's end status, or "error:" (`liverun.error_text`)
_ENDED = tuple(s for s in STATUSES if s != "running") + ("error",)


def quickstart(cluster: str | None = None) -> dict:
    """The default dashboard config (what the quickstart notebook runs: on the session's
    local Dask cluster), from Run to the final status line; the cluster is started (and
    warmed by one short run) first, as a user's first click would find it after the
    notebook's set-up."""
    from workbench.ui.dashboard import Dashboard
    d = Dashboard(cluster=cluster)
    base = d.config
    d.config = base.replace(steps=5)
    assert d.run(), d.status_text
    d.wait()                                  # the cluster up, the data placed once
    d.config = base
    before = _rss_mb()
    t = time.perf_counter()
    assert d.run(), d.status_text
    result = d.wait()
    took = time.perf_counter() - t
    s = result.summary
    after = _rss_mb()
    print(f"quickstart {d.config.algorithm} {d.config.model} on {d.config.dataset}, {d.config.epochs:g} epochs: "
          f"{took:.2f} s from Run to the final status, "
          f"training {s.get('wall_time_s', 0):.2f} s, {s['steps']} steps, test accuracy "
          f"{s.get('final_test_accuracy', 0):.3f}; RSS {before:.0f} -> {after:.0f} MB")
    return {"took_s": took, "steps": s["steps"], "rss_before_mb": before, "rss_after_mb": after}


def memory(config: wb.RunConfig, label: str) -> dict:
    """RSS before a dashboard run of `config`, right after it, and after a collection."""
    warm = _dashboard(config.replace(cpus=min(8, config.cpus), batch_size=min(8, config.batch_size), steps=2), "threads")
    assert warm.run(), warm.status_text
    warm.wait()                              # imports and first-use caches are not the run's
    del warm
    d = _dashboard(config, "threads")
    gc.collect()
    before = _rss_mb()
    assert d.run(), d.status_text
    d.wait()
    after = _rss_mb()
    gc.collect()
    settled = _rss_mb()
    print(f"rss   {label:40s} before {before:6.0f} MB, after {after:6.0f} MB, after gc {settled:6.0f} MB "
          f"(+{settled - before:.0f} MB)")
    return {"before_mb": before, "after_mb": after, "settled_mb": settled}


def _status_gaps(d: Any) -> float:
    """The longest wall-time gap (s) between two status lines while the run was running."""
    times = [t for t, text in d.status_log if text.startswith("running")]
    return max((b - a for a, b in zip(times, times[1:])), default=float("nan"))


def sim_overhead(config: wb.RunConfig, label: str, rounds: int = 2, modes: tuple[str, ...] = ("child", "thread")) -> dict:
    """`sim_wall_s` of the same simulated run without a dashboard (`workbench.run`, as the
    CLI runs it) and in one (live figures, status line), interleaved `rounds` times;
    medians and their ratio. Modes: "child" (the dashboard's way: the simulation in a
    child process, `ui.simproc`) and "thread" (on a thread of the kernel, as before).
    Also the wall time from Run to the final status and the longest gap between two
    status lines while running (the status must move at least once a second)."""
    import statistics
    plain: list[float] = []
    shown: dict[str, list] = {m: [] for m in modes}
    for _ in range(rounds):
        plain.append(wb.run(config, progress=False).summary["sim_wall_s"])
        for mode in modes:
            d = _dashboard(config, None)
            d.sim_in_child = mode == "child"
            t = time.perf_counter()
            assert d.run(), d.status_text
            r = d.wait()
            assert r is not None, d.status_text
            shown[mode].append({"sim_wall_s": r.summary["sim_wall_s"], "run_to_end_s": time.perf_counter() - t,
                                "plot_cpu_s": d.last_plot_cpu_s, "status_gap_s": _status_gaps(d)})
    a = statistics.median(plain)
    rows = {"alone_s": plain}
    for mode in modes:
        med = {k: statistics.median(x[k] for x in shown[mode]) for k in shown[mode][0]}
        rows[mode] = {**med, "ratio": med["sim_wall_s"] / a, "rounds": shown[mode]}
        print(f"sim   {label:40s} {mode:6s}: sim_wall_s alone {a:6.2f} s {plain}, in the dashboard "
              f"{med['sim_wall_s']:6.2f} s: x{med['sim_wall_s'] / a:.3f}; Run to the final status "
              f"{med['run_to_end_s']:6.2f} s; drawing {med['plot_cpu_s']:.2f} s of CPU; longest status gap "
              f"{med['status_gap_s']:.2f} s")
    return rows


def _drawn_points(d: Any) -> int:
    """Points in the dashboard's loss/accuracy figures (what every redraw and the browser carry)."""
    return sum(len(t.x) if t.x is not None else 0 for key in ("progress_time", "progress_epoch")
               for t in d.figures[key].data)


SESSION_RUNS = (   # a long session's runs: what a user varies, one of them diverging
    {}, {"optimizer": "adamw", "lr": 0.003}, {"optimizer": "lamb", "lr": 0.003}, {"cpus": 1},
    {"algorithm": "diloco", "tau": 8, "lr": 0.01}, {"compression": "topk"}, {"lr": 0.03}, {"lr": 10.0, "batch_size": 8},
    {"algorithm": "local_sgd", "tau": 4}, {"batch_size": 64},
)


def session(runs: int = 20, sim_workers: int = 1024, sim_steps: int = 40, after_s: float = 2.0) -> dict:
    """A long session in one dashboard: `runs` finished runs drawn (the configs of
    `SESSION_RUNS` in turn, one diverging to a loss of ~1e21 and beyond), then in the same
    dashboard Stop pressed `after_s` into a long real run, and a simulation of `sim_workers`
    virtual workers against the same simulation without a dashboard (`sim_wall_s`, as the
    CLI runs it). Prints the points drawn, Stop's latency and the simulation's ratio."""
    from workbench.ui.dashboard import Dashboard
    base = wb.RunConfig(algorithm="sync_sgd", dataset="digits", model="mlp", hidden=[64], cpus=2, batch_size=32,
                        epochs=8, seed=0)
    d = Dashboard(cluster="threads", config=base)
    t = time.perf_counter()
    statuses, per_redraw = [], []
    for k in range(runs):
        d.config = base.replace(**SESSION_RUNS[k % len(SESSION_RUNS)])
        assert d.run(), d.status_text
        r = d.wait()
        statuses.append(r.summary["status"] if r is not None else "failed")
        per_redraw.append(d.last_plot_cpu_s / max(d.last_redraws, 1))   # the kernel's drawing, per redraw
    points = _drawn_points(d)
    loss_axis = d.figures["progress_time"].layout.yaxis
    max_loss = max((float(np.nanmax(np.asarray(t.y, float))) for t in d.figures["progress_time"].data
                    if t.yaxis in (None, "y") and t.y is not None and len(t.y)), default=float("nan"))
    print(f"session {runs} runs drawn in {time.perf_counter() - t:.1f} s ({', '.join(f'{s} x{statuses.count(s)}' for s in sorted(set(statuses)))}): "
          f"{points:,} points in the loss/accuracy figures, "
          f"{sum(len(d.figures[k].data) for k in ('progress_time', 'progress_epoch'))} traces; drawing CPU per redraw "
          f"{per_redraw[0] * 1e3:.1f} ms (run 1) -> {per_redraw[-1] * 1e3:.1f} ms (run {runs}); loss axis "
          f"{f'range {tuple(round(v, 2) for v in loss_axis.range)} (log10)' if loss_axis.autorange is False else 'autorange'}"
          f", the largest loss drawn {max_loss:.3g}", flush=True)
    stop = stop_latency(base.replace(epochs=2000, hidden=[512, 256]), f"real, after {runs} runs drawn", after_s=after_s,
                        dash=d)
    sim = wb.RunConfig(algorithm="sync_sgd", dataset="digits", model="softmax", simulate=True, cpus=sim_workers,
                       batch_size=sim_workers, steps=sim_steps, seed=0)
    alone = wb.run(sim, progress=False).summary["sim_wall_s"]
    d.config = sim
    t = time.perf_counter()
    assert d.run(), d.status_text
    r = d.wait()
    shown = r.summary["sim_wall_s"]
    print(f"session simulated {sim_workers} workers, {sim_steps} steps, after {runs} runs drawn: sim_wall_s alone "
          f"{alone:.2f} s, in the dashboard {shown:.2f} s: x{shown / alone:.3f} (target <= 1.2); Run to the final "
          f"status {time.perf_counter() - t:.2f} s", flush=True)
    return {"points": points, "stop": stop, "sim_alone_s": alone, "sim_dashboard_s": shown, "ratio": shown / alone}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--what", default="stop,quickstart,memory,sim,session",
                   help="comma list of stop, quickstart, memory, sim, session (20 runs drawn, then Stop and a simulation)")
    p.add_argument("--session-runs", type=int, default=20, help="session: finished runs drawn before the measurements")
    p.add_argument("--sim-workers", type=int, default=256, help="virtual workers of the simulated runs")
    p.add_argument("--sim-steps", type=int, default=100, help="steps of the simulated overhead runs")
    p.add_argument("--rounds", type=int, default=2, help="rounds of the simulated overhead runs")
    p.add_argument("--modes", default="child,thread", help="where the dashboard simulates: child, thread")
    p.add_argument("--stop-after", default="0,10",
                   help="comma list of seconds after the first live records at which Stop is pressed")
    args = p.parse_args(argv)
    try:
        afters = [float(a) for a in args.stop_after.split(",")]
    except ValueError:
        afters = [-1.0]
    if not all(0 <= a <= 3600 for a in afters):
        p.error(f"--stop-after: a comma list of seconds in [0, 3600], got {args.stop_after!r}")
    what = set(args.what.split(","))
    print(_load())
    long_real = wb.RunConfig(algorithm="sync_sgd", dataset="digits", model="mlp", cpus=2, batch_size=32,
                             epochs=2000, seed=0)
    long_sim = wb.RunConfig(algorithm="sync_sgd", dataset="digits", model="softmax", simulate=True,
                            cpus=args.sim_workers, batch_size=args.sim_workers, epochs=2000, seed=0)
    if "stop" in what:
        for after in afters:
            stop_latency(long_real, "real: sync_sgd, 2 threads workers", after_s=after)
            stop_latency(long_real, "real: sync_sgd, 2 Dask workers", cluster=None, after_s=after)
            stop_latency(long_sim, f"simulated: sync_sgd, {args.sim_workers} virtual workers", cluster=None,
                         after_s=after)
    if "quickstart" in what:
        quickstart()
    if "memory" in what:
        memory(long_sim.replace(steps=20), f"simulated: {args.sim_workers} workers, 20 steps")
    if "sim" in what:
        sim_overhead(long_sim.replace(steps=args.sim_steps), f"simulated: {args.sim_workers} workers, "
                     f"{args.sim_steps} steps", rounds=args.rounds, modes=tuple(args.modes.split(",")))
    if "session" in what:
        session(runs=args.session_runs, sim_workers=max(args.sim_workers, 1024))
    print(_load())


if __name__ == "__main__":
    main()
