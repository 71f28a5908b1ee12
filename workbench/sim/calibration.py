"""This machine's core as a simulated device: timed on the model, alone and beside others.

`local_device` times the run's own `loss_and_grad` on one core (one BLAS thread) at a few
batch sizes and fits seconds = overhead + training FLOPs / rate; `co_run_device` times
it again while other processes compute the same model on the other cores, as a
synchronous step's workers do, and `host_share` / `charged_device` charge a run with
that. A calibration is a JSON record of what it is of (machine, model, dtype):
`local_profile` reads a given file, or a cached one, or times the core and caches it
(`read_calibration`, `calibration_cache_path`). The named devices it stands beside are
`sim/profiles.py`'s; the FLOPs it divides by are `sim/timing_models.py`'s.
"""
from __future__ import annotations

import copy
import math
import pickle
import time
from contextlib import contextmanager
from typing import Any

import numpy as np

from ..config import (
    ConfigError,
)
from ..usercode import dumps
from ..util.blas import blas_limit
from ..util.machine import cores_text
from .profiles import Device
from .timing_models import model_flops

# ------------------------------------------------------------------------------ this machine
CALIBRATION_TARGET_S = 0.005  # the largest batch timed takes about this long per call (see local_device)
CALIBRATION_REPEATS = 15      # timings per batch size (their mean is used) ...
CALIBRATION_MIN_REPEATS = 5   # ... fewer, down to this, where the sizes' timings would take longer
CALIBRATION_BUDGET_S = 0.5    # ... than this in all
_LOCAL: dict[tuple, Device] = {}      # (architecture, dtype) -> calibrated Device
_LOCAL_MEM_BW: list[float] = []       # measured once per process


@contextmanager
def _one_blas_thread():
    """One BLAS thread while timing (and one torch thread, for a torch model): a virtual
    CPU worker is one core."""
    with blas_limit(1):
        yield


def _best_s(fn, repeats: int) -> float:
    """The fastest of `repeats` timed calls: for a hardware limit (the copy bandwidth) and
    for choosing the batch sizes to time, where other processes only ever add time. What a
    step takes is `_typical_s`'s."""
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _timed_calls(fn, repeats: int) -> np.ndarray:
    """Seconds of each of `repeats` calls of `fn`."""
    times = np.empty(repeats)
    for i in range(repeats):
        t0 = time.perf_counter()
        fn()
        times[i] = time.perf_counter() - t0
    return times


def _typical_s(times: np.ndarray) -> float:
    """What a call takes over a run: the mean of the timed calls.

    A run's throughput is its mean step, occasional slow calls (another thread took the
    core a moment) included, and a calibration predicts throughputs. Until the evening of
    2026-12-04 the median was used, and before that the fastest call: on a quiet 2-vCPU VM here the fastest
    of 9 calls was 10-20% under their median, and simulated runs calibrated by the fastest
    came out 12-57% faster than the real ones beside them; the median still left out the
    slow calls every real step pays for (real 2-worker compute: mean 4.30 ms against a
    median of 4.10 ms). On a busy machine the mean is slowed by the others' work too: the
    record keeps the load it was timed at (`calibration_record`), and `bench --sim-vs-real`
    says when a machine was too busy."""
    return float(np.mean(times))


def _spread(times: np.ndarray) -> float:
    """How much typical calls vary: the interquartile range over 1.349 (a normal's standard
    deviation), over the median; 0 for fewer than four calls.

    Robust on purpose: the mean (`_typical_s`) already holds the occasional preempted call,
    and one such call among 15 once made the standard deviation 30% of the mean where the
    quartiles said 2-7% (2026-12-04), which as the simulated run's jitter charged a
    synchronous step a straggler it did not have.

    >>> round(_spread(np.array([1.0, 1.0, 1.1, 1.2, 1.2, 9.0])), 4)   # the 9.0 call barely moves it
    0.1128
    """
    if len(times) < 4:
        return 0.0
    q25, q50, q75 = np.percentile(times, [25, 50, 75])
    return float((q75 - q25) / 1.349 / q50) if q50 > 0 else 0.0


def _copy_bandwidth() -> float:
    """Bytes/s of one core copying 32 MB (read + write counted), the fastest of 5."""
    if not _LOCAL_MEM_BW:
        src = np.ones(1 << 23, np.float32)       # 32 MB: more than most caches hold
        dst = np.empty_like(src)
        np.copyto(dst, src)
        _LOCAL_MEM_BW.append(2 * src.nbytes / _best_s(lambda: np.copyto(dst, src), 5))
    return _LOCAL_MEM_BW[0]


def _repeats(first_s: float, sizes: int) -> int:
    """Timings of one batch size: CALIBRATION_REPEATS, fewer (at least CALIBRATION_MIN_REPEATS)
    where they would take more than the size's share of CALIBRATION_BUDGET_S."""
    fit = int(CALIBRATION_BUDGET_S / sizes / max(first_s, 1e-9))
    return max(CALIBRATION_MIN_REPEATS, min(CALIBRATION_REPEATS, fit))


FLAT_SHARE = 0.01   # timings flat in the batch: the per-FLOP cost adds this much of the overhead at the largest batch timed


def fit_overhead_rate(flops: list[float], seconds: list[float]) -> tuple[float, float]:
    """Least squares seconds = overhead + flops / rate: (overhead >= 0, rate > 0).

    Errors count relative to each time (weights 1/seconds), so a batch of 64 is fitted
    as well as one of 1024 rather than lost in its milliseconds. Where the free fit breaks
    a bound (a negative intercept, or a slope that is not positive: timings flat in the
    batch, as a small model's per-call overhead makes them, plus noise), the best fit within
    the bounds lies on one of them: through the origin, or flat (the timings' overhead, the
    per-FLOP cost too small to resolve: FLAT_SHARE of it at the largest batch). The one
    with the smaller relative error is taken. One point gives overhead 0 and its rate.

    >>> overhead, rate = fit_overhead_rate([1e6, 2e6, 4e6], [0.0011, 0.0021, 0.0041])
    >>> round(overhead * 1e6, 6), round(rate / 1e9, 6)       # 100 us + FLOPs / 1 GFLOP/s
    (100.0, 1.0)

    Timings flat in the batch (an audit's small torch model: 0.214, 0.578 and 0.232 ms at
    batches 8, 32 and 128) are not charged through the origin (33 us a batch of 16):

    >>> overhead, rate = fit_overhead_rate([8e3, 32e3, 128e3], [0.000214, 0.000578, 0.000232])
    >>> round(overhead * 1e6), round((overhead + 16e3 / rate) * 1e6)
    (247, 247)
    """
    f, t = np.asarray(flops, float), np.asarray(seconds, float)
    if len(f) >= 2 and np.ptp(f) > 0 and np.all(t > 0):
        slope, intercept = np.polyfit(f, t, 1, w=1 / t)     # polyfit weighs residuals by w
        if slope > 0 and intercept >= 0:
            return float(intercept), float(1 / slope)
        flat = float(np.sum(1 / t) / np.sum(1 / t ** 2))      # min sum((a - t) / t)^2
        through = float(np.sum(f / t) / np.sum((f / t) ** 2))  # min sum((slope f - t) / t)^2
        if np.sum(((flat - t) / t) ** 2) <= np.sum(((through * f - t) / t) ** 2) or through <= 0:
            return flat, float(f.max() / (FLAT_SHARE * flat))
        return 0.0, 1 / through
    i = int(np.argmax(f))
    return 0.0, float(f[i] / max(t[i], 1e-12))


def _worker_step(model: Any, params: Any, X: Any, y: Any, b: int) -> Any:
    """A call that does what a worker's step computes on `b` rows: the next `b` rows of a
    fixed shuffle of the set gathered into a batch, then `loss_and_grad` (the same rows
    every call, a view, ran 2-3% faster here: their input stays in the caches)."""
    n = int(X.shape[0])
    order = np.random.default_rng(0).permutation(n)
    at = [0]

    def call() -> Any:
        lo = at[0]
        at[0] = lo + b if lo + 2 * b <= n else 0
        idx = order[lo:lo + b]
        try:
            return model.loss_and_grad(params, X[idx], y[idx])
        except Exception as exc:   # the model's own error, at a batch size the run may never use
            raise _timing_failed(model, b, n, exc) from None
    return call


def _timing_failed(model: Any, b: int, n: int, exc: Exception) -> Exception:
    """ModelError for a model that raised while it was timed: which batch, and how to avoid
    the timing (a bare error here read as invalid input, with a batch size the user never gave)."""
    from ..maths.models import ModelError
    name = getattr(model, "spec", None) or getattr(model, "name", None) or type(model).__name__
    text = (str(exc).strip().splitlines() or [""])[0][:200]
    return ModelError(f"a model whose loss_and_grad runs on the batches this machine's core is timed at, to "
                      f"charge a simulated run's compute (batches of 1 to {min(n, 1024):,} rows; {name} raised "
                      f"{type(exc).__name__} at {b:,} rows: {text}); or state its cost instead of timing it: "
                      "flops_per_sample on the model, or a timing_model", name)


def local_device(model: Any, X: Any, y: Any, params: Any, rows: int | None = None,
                 repeats: int | None = CALIBRATION_REPEATS) -> Device:
    """This machine's core as a Device, calibrated by timing `model.loss_and_grad`.

    A call gathers its batch from the set as a worker's step does (`_worker_step`).
    Batches of a geometric range up to one that takes about CALIBRATION_TARGET_S are
    tried (short calls: on a busy machine a call of a few ms often runs undisturbed, one
    of 20 ms almost never), then three of them (largest, a quarter, a sixteenth) are
    timed CALIBRATION_REPEATS times each, with one BLAS thread; their mean times fit seconds =
    overhead + training FLOPs (3x `model_flops`' forward) / rate. Memory bandwidth is
    a 32 MB copy. Cached per architecture: later calls are free. Takes well under a
    second (a copy of the model is timed, so the caller's buffers are untouched).

    `rows`: time that one batch size instead, `repeats` times (None: as many as the time
    budget allows, CALIBRATION_MIN_REPEATS at least; not cached): a run whose
    workers only ever compute slices of `rows` rows is charged what that size took, not a
    line fitted through others (`bench --sim-vs-real`: on this 2-vCPU VM the co-run timings
    of 16- and 64-row batches once came out 1.9x their usual while 256 rows did not, and
    the fitted line charged 128-row steps 7.5 ms where they took 4.3 ms, 2026-12-04).
    """
    if not isinstance(params, np.ndarray):   # a GPU array would need synchronising to time; CPU workers only
        raise TypeError(f"params: a NumPy vector (local_device times this machine's CPU), got {type(params).__name__}")
    key = (model.describe(), str(params.dtype))
    if key in _LOCAL and rows is None:
        return _LOCAL[key]
    tm = model_flops(model)
    m = copy.deepcopy(model)       # fresh workspaces (Model.__getstate__ drops them); a user model too
    n = int(X.shape[0])

    def step(b: int):
        return _worker_step(m, params, X, y, b)

    with _one_blas_thread():
        if rows is not None:
            if not 1 <= int(rows) <= n:
                raise ValueError(f"rows: a batch size from 1 to the {n} rows given, got {rows}")
            sizes = [int(rows)]
        else:
            b, limit = 1, min(n, 1024)
            while 2 * b <= limit:
                step(b)()                            # first call: allocates the workspace
                if b >= 4 and _best_s(step(b), 2) >= CALIBRATION_TARGET_S:
                    break
                b *= 2
            sizes = sorted({max(1, b // 16), max(1, b // 4), b})
        calls = []
        for size in sizes:
            t = _best_s(step(size), 1)           # warm (workspace) and a first estimate
            count = int(repeats) if rows is not None and repeats is not None else _repeats(t, len(sizes))
            calls.append(_timed_calls(step(size), count))
    best = [_typical_s(c) for c in calls]
    overhead, rate = fit_overhead_rate([tm.train_flops * s for s in sizes], best)
    measured = ", ".join(f"{s}: {t * 1e3:.3g} ms" for s, t in zip(sizes, best))
    counts = f"{len(calls[0])}" if rows is not None else f"{CALIBRATION_MIN_REPEATS}-{CALIBRATION_REPEATS}"
    device = Device("local", "cpu", rate, _copy_bandwidth(), 1.0, overhead,
                    f"this machine, one core: loss_and_grad of {tm.name} timed at batch {measured} (mean of "
                    f"{counts}; spread {_spread(calls[-1]):.1%} at the largest), "
                    f"fitted as {overhead * 1e6:.3g} us + FLOPs / {rate / 1e9:.3g} GFLOP/s",
                    tuple(zip(sizes, best)), spread=_spread(calls[-1]))
    if rows is None:
        _LOCAL[key] = device
    return device


# ------------------------------------------------------------------------------ cores computing together
CO_RUN_LIMIT_S = 120.0   # a helper process computes at most this long (it ends itself if never stopped)


def _co_run_helper(path: str) -> None:
    """In a helper process: what another worker process of this host does while the core is
    timed. It loads the pickled (model, X, y, params), says "ready", then for each line it
    reads (a batch size, sent as a timed call starts) computes one worker step of that many
    rows (`_worker_step`) on one BLAS thread and says "done": the two start each call
    together, as a synchronous step's workers do. It ends when its input closes (or after
    CO_RUN_LIMIT_S)."""
    import sys
    with open(path, "rb") as f:
        model, X, y, params = pickle.load(f)
    steps: dict[int, Any] = {}
    end = time.perf_counter() + CO_RUN_LIMIT_S
    with _one_blas_thread():
        model.loss_and_grad(params, X[:1], y[:1])
        print("ready", flush=True)
        for line in sys.stdin:
            if time.perf_counter() > end:
                break
            b = int(line)
            if b not in steps:
                steps[b] = _worker_step(model, params, X, y, b)
            steps[b]()
            print("done", flush=True)
    sys.stdout.close()


def co_run_device(model: Any, X: Any, y: Any, params: Any, cores: int, alone: Device,
                  repeats: int | None = None) -> Device:
    """This machine's core timed as `local_device` times it, while `cores - 1` other
    processes compute the same model's `loss_and_grad` at once, each on its own core:
    what each of `cores` worker processes of one host takes when they share its caches
    and memory bandwidth (a synchronous step's workers compute at the same time: each
    helper starts a step of the same size as each timed call starts). The
    batch sizes are `alone`'s (the same fit, seconds = overhead + FLOPs / rate), each timed
    `repeats` times (default: as `local_device` chooses). A helper that cannot start (no
    `sys.executable`) raises RuntimeError."""
    import os
    import subprocess
    import sys
    import tempfile
    tm = model_flops(model)
    sizes = [b for b, _ in alone.calibration] or [min(int(X.shape[0]), 64)]
    m = copy.deepcopy(model)
    big = max(sizes)
    fd, path = tempfile.mkstemp(prefix="workbench-corun-", suffix=".pkl")
    helpers: list[subprocess.Popen] = []
    try:
        rows = min(int(X.shape[0]), 16 * big)            # fresh rows for its calls, as a worker reads
        with open(fd, "wb") as f:   # a model of the user's with its code by value: the helper has no files of theirs
            f.write(dumps((model, np.ascontiguousarray(X[:rows]), np.ascontiguousarray(y[:rows]), params),
                          code=getattr(model, "code", model)))
        code = f"from workbench.sim.calibration import _co_run_helper; _co_run_helper({path!r})"
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
                   PYTHONPATH=os.pathsep.join(p for p in sys.path if p))   # this process's workbench
        for _ in range(cores - 1):
            helpers.append(subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True))
        for h in helpers:
            if h.stdout is None or h.stdout.readline().strip() != "ready":
                raise RuntimeError("a co-run helper process did not start")

        def together(step: Any, b: int, count: int) -> np.ndarray:
            # every helper starts a step of b rows as the timed one starts (a synchronous step's
            # workers compute at once, their weights' reads at the same moments), and the next
            # call waits for all of them, untimed
            times = np.empty(count)
            for i in range(count):
                for h in helpers:
                    h.stdin.write(f"{b}\n")
                    h.stdin.flush()
                t0 = time.perf_counter()
                step()
                times[i] = time.perf_counter() - t0
                for h in helpers:
                    if h.stdout.readline().strip() != "done":
                        raise RuntimeError("a co-run helper process stopped")
            return times

        calls = []
        with _one_blas_thread():
            for size in sizes:
                step = _worker_step(m, params, X, y, size)
                t = float(together(step, size, 1)[0])    # warm (workspaces) and a first estimate
                calls.append(together(step, size, int(repeats) if repeats else _repeats(t, len(sizes))))
    finally:
        for h in helpers:
            h.kill()
            h.wait()
        os.unlink(path)
    best = [_typical_s(c) for c in calls]
    overhead, rate = fit_overhead_rate([tm.train_flops * s for s in sizes], best)
    measured = ", ".join(f"{s}: {t * 1e3:.3g} ms" for s, t in zip(sizes, best))
    return Device("local", "cpu", rate, alone.mem_bw, 1.0, overhead,
                  f"this machine, one of {cores_text(cores)} computing at once: loss_and_grad of {tm.name} timed at batch "
                  f"{measured} while {cores - 1} other process(es) computed the same (spread {_spread(calls[-1]):.1%} "
                  f"at the largest), fitted as {overhead * 1e6:.3g} us + FLOPs / {rate / 1e9:.3g} GFLOP/s",
                  tuple(zip(sizes, best)), spread=_spread(calls[-1]))


def co_run_cores(record: dict[str, Any], cpu_workers: int) -> int:
    """How many of this host's cores compute at once for `cpu_workers` local CPU workers:
    one per worker, up to the calibrated machine's cores (more workers than cores share
    cores in a real run; the simulation gives each its own, as a cluster of such hosts would).

    >>> co_run_cores({"machine": {"cores": 2}}, 1), co_run_cores({"machine": {"cores": 2}}, 8)
    (1, 2)
    """
    cores = int(record.get("machine", {}).get("cores") or 1)
    return max(1, min(cpu_workers, cores))


# ------------------------------------------------------------------------------ calibration files
CALIBRATION_KIND = "workbench simulated-cluster calibration"
# how a record's times were taken; a cached record taken another way is timed again (a given
# file still replays as it ran): the fastest of up to 9 calls, then (2026-12-04) the median, then
# the mean; "mean, bounded fit" (2026-12-06): flat timings are fitted flat, not through the origin
CALIBRATION_METHOD = "mean, bounded fit"


def machine_identity() -> dict[str, Any]:
    """What a calibration is of: this machine's CPU model, architecture and core count."""
    import os
    import platform
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return {"cpu": cpu or "unknown", "arch": platform.machine(), "cores": os.cpu_count()}


def calibration_record(device: Device, model: Any, dtype: str) -> dict[str, Any]:
    """A calibrated `local` Device as plain JSON data, with what it is of (machine, model,
    dtype): what the cache file holds and the run's summary records (`calibration`)."""
    import datetime
    return {"kind": CALIBRATION_KIND, "machine": machine_identity(), "model": model.describe(), "dtype": dtype,
            "rate_flops": device.peak_flops * device.efficiency, "mem_bw": device.mem_bw,
            "step_overhead_s": device.step_overhead_s, "timed": [list(t) for t in device.calibration],
            "cv": device.spread, "source": device.source, "method": CALIBRATION_METHOD, "load_average": _load_now(),
            "measured_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}


def _load_now() -> float | None:
    """The 1-minute load average as the calibration was timed (None where the platform has none)."""
    import os
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


# ------------------------------------------------------------------------------ a calibration's quality
CALIBRATION_SPREAD_BOUND = 0.25   # a timing whose calls spread (`cv`) past this is not this core's steady time
CALIBRATION_CHEAPER = 0.8         # a larger batch under this share of a smaller one's time: not a core's cost
OTHERS_MIN_S = 0.1                # other processes' CPU seconds a timing must see to call them busy: CPU times
#                                   count in the kernel's 10 ms ticks, and a timing alone lasts 0.2-0.5 s


def _children_cpu_s() -> float:
    """CPU seconds of this process's children that have ended and been waited for (the
    co-run helpers: ours, not other processes')."""
    import os
    t = os.times()
    return t.children_user + t.children_system


@contextmanager
def _watched(into: dict[str, Any]):
    """Who else used the cores while the body timed this one: `into` gets the
    `util.machine` state of those seconds (cores, load before and after, our cores, other
    processes' cores and steal), this process and the co-run helpers it waited for counted
    as ours (how `bench --sim-vs-real` watches its calibrations)."""
    from ..util import machine
    before, helpers = machine.snapshot(), _children_cpu_s()
    try:
        yield into
    finally:
        state = machine.summarise(before, machine.snapshot(),
                                  [{"pid": "co-run helpers", "process_cpu_s": _children_cpu_s() - helpers}])
        into.update({k: state.get(k) for k in ("cores", "wall_s", "load_before", "load_after", "our_cores",
                                                "other_cores", "steal_cores")})


def _busy_while_timed(state: dict[str, Any] | None, load: float | None, cores: int) -> str | None:
    """The clause for a timing that other processes (or steal) disturbed, by the rule every
    run's `machine_note` follows (`util.machine.OTHERS_NOTICEABLE` of the cores, and at least
    OTHERS_MIN_S of their CPU: a few ticks over a short timing are not a measurement), else None.
    A record from before this was watched has only the load average after its timing (which
    counts the timing process itself): a load of the cores or more says the machine was busy."""
    from ..util.machine import OTHERS_NOTICEABLE
    if state and state.get("other_cores") is not None:
        cores = int(state.get("cores") or cores)
        others = float(state["other_cores"]) + float(state.get("steal_cores") or 0.0)
        if others >= OTHERS_NOTICEABLE * cores and others * float(state.get("wall_s") or math.inf) >= OTHERS_MIN_S:
            return f"other processes used {others:.1f} of {cores_text(cores)} while it was timed"
        return None
    if load is not None and load >= cores:
        return f"the load average was {load:.1f} on {cores} cores as it was timed"
    return None


def calibration_problems(record: dict[str, Any] | None, cpu_workers: int | None = None) -> list[str]:
    """What says a `local` calibration record is not this machine's times, in words; [] for
    a good one (or no record).

    A core's time for a call grows with its rows, its calls' spread (`cv`, the quartiles'
    over the median) stays within CALIBRATION_SPREAD_BOUND, a call does not get faster with
    other processes computing beside it, and nobody else used the cores while it was timed
    (`timed_on`: `util.machine`'s measure, by `machine_note`'s rule; a record from before it
    was watched: its `load_average`). An audit's calibration at load 8.5 (2026-12-07) broke
    all of them: batch 64 at 0.532 ms, 256 at 0.390 ms; spreads 38.7% and 319%; batch 64
    co-run at 0.225 ms. `cpu_workers`: judge what a run of that many local CPU workers is
    charged (the core alone, and its co-run timing for them); None: every part.

    >>> good = {"machine": {"cores": 2}, "timed": [[64, 5e-4], [256, 9e-4]], "cv": 0.04, "load_average": 0.3,
    ...         "co_run": {"2": {"timed": [[64, 5.5e-4], [256, 1e-3]], "cv": 0.06}}}
    >>> calibration_problems(good)
    []
    >>> bad = {"machine": {"cores": 2}, "timed": [[64, 5.32e-4], [256, 3.9e-4]], "cv": 0.387,
    ...        "timed_on": {"cores": 2, "other_cores": 1.4, "steal_cores": 0.0},
    ...        "co_run": {"2": {"timed": [[64, 2.25e-4], [256, 1.09e-3]], "cv": 3.19}}}
    >>> for p in calibration_problems(bad): print(p)
    other processes used 1.4 of 2 cores while it was timed
    batch 256 took 0.39 ms, under batch 64's 0.532 ms
    its calls spread 38.7% (bound 25%)
    with 2 cores computing at once, its calls spread 319.0% (bound 25%), batch 64 took 0.225 ms, under its 0.532 ms alone
    >>> calibration_problems(bad, cpu_workers=1)[1:]
    ["batch 256 took 0.39 ms, under batch 64's 0.532 ms", 'its calls spread 38.7% (bound 25%)']
    """
    if not record:
        return []
    def ms(seconds: float) -> str:
        return f"{seconds * 1e3:.3g} ms"            # as the record's source says them
    cores = int((record.get("machine") or {}).get("cores") or 1)
    alone = {int(b): float(t) for b, t in record.get("timed", ())}

    def judge(part: dict[str, Any], load: float | None) -> list[str]:
        out = []
        busy = _busy_while_timed(part.get("timed_on"), load, cores)
        if busy:
            out.append(busy)
        timed = sorted((int(b), float(t)) for b, t in part.get("timed", ()))
        cheaper = next(((b1, t1, b0, t0) for i, (b0, t0) in enumerate(timed) for b1, t1 in timed[i + 1:]
                        if b1 > b0 and t1 < CALIBRATION_CHEAPER * t0), None)
        if cheaper:
            b1, t1, b0, t0 = cheaper
            out.append(f"batch {b1} took {ms(t1)}, under batch {b0}'s {ms(t0)}")
        cv = float(part.get("cv") or 0.0)
        if cv > CALIBRATION_SPREAD_BOUND:
            out.append(f"its calls spread {cv:.1%} (bound {CALIBRATION_SPREAD_BOUND:.0%})")
        return out

    problems = judge(record, record.get("load_average"))
    k = co_run_cores(record, cpu_workers) if cpu_workers is not None else None
    for key, entry in sorted((record.get("co_run") or {}).items()):
        if k is not None and key != str(k):
            continue
        found = judge(entry, None)
        faster = next(((b, t) for b, t in entry.get("timed", ())
                       if int(b) in alone and float(t) < CALIBRATION_CHEAPER * alone[int(b)]), None)
        if faster:
            b, t = faster
            found.append(f"batch {int(b)} took {ms(float(t))}, under its {ms(alone[int(b)])} alone")
        if found:
            problems.append(f"with {key} cores computing at once, " + ", ".join(found))
    return problems


def calibration_note(record: dict[str, Any] | None, cpu_workers: int | None = None,
                     given: bool = False) -> str | None:
    """The sentence a simulated run's summary (`machine_note`), its notes and a sweep show when
    the `local` calibration it was charged is not this machine's times
    (`calibration_problems`), else None: such a calibration is not cached (`local_profile`);
    `given`: the run replayed a file it was given (`calibration`), which it says instead.

    >>> calibration_note({"machine": {"cores": 2}, "timed": [[64, 5.32e-4], [256, 3.9e-4]], "cv": 0.05})
    "calibrated on a busy machine: batch 256 took 0.39 ms, under batch 64's 0.532 ms; its times are not this machine's, so neither is this simulated run's throughput (not kept as this machine's calibration: the next run times it again)"
    >>> calibration_note({"machine": {"cores": 2}, "timed": [[64, 5e-4], [256, 9e-4]], "cv": 0.05}) is None
    True
    """
    problems = calibration_problems(record, cpu_workers)
    if not problems:
        return None
    kept = ("replayed from the calibration file given" if given else
            "not kept as this machine's calibration: the next run times it again")
    return (f"calibrated on a busy machine: {'; '.join(problems)}; its times are not this machine's, so neither "
            f"is this simulated run's throughput ({kept})")


def device_from_record(record: dict[str, Any], origin: str) -> Device:
    """The `local` Device a calibration record describes (bitwise its numbers: JSON keeps floats exact)."""
    return Device("local", "cpu", float(record["rate_flops"]), float(record["mem_bw"]), 1.0,
                  float(record["step_overhead_s"]), f"{record.get('source', '')} [{origin}]",
                  tuple((int(b), float(t)) for b, t in record.get("timed", ())), spread=float(record.get("cv", 0.0)))


def read_calibration(path: str, model: Any, dtype: str) -> tuple[Device, dict[str, Any]]:
    """The `local` Device and record of a calibration file (or of a run's summary.json, its
    `calibration`), refused with one ConfigError naming what differs when it is of another
    machine, model or dtype."""
    import json
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        raise ConfigError("calibration", f"a readable calibration JSON file ({type(exc).__name__})", path) from None
    if isinstance(data, dict) and data.get("kind") != CALIBRATION_KIND and isinstance(data.get("calibration"), dict):
        data = data["calibration"]                      # a run's summary.json
    needed = ("machine", "model", "dtype", "rate_flops", "mem_bw", "step_overhead_s")
    if not isinstance(data, dict) or data.get("kind") != CALIBRATION_KIND or any(k not in data for k in needed):
        raise ConfigError("calibration", "a calibration file written by a cpu_device=local run (or its "
                          "summary.json)", path)
    demand = data.get("host_demand_cores", 0.0)
    cores = (data.get("machine") or {}).get("cores") or 1
    if not isinstance(demand, (int, float)) or isinstance(demand, bool) or not 0 <= demand < cores:
        raise ConfigError("calibration", f"a file whose host_demand_cores is a number of cores in [0, {cores}) "
                          f"(got {demand!r})", path)
    here = {"machine": machine_identity(), "model": model.describe(), "dtype": dtype}
    differ = [f"{k} {data[k]!r} (this run: {here[k]!r})" for k in ("machine", "model", "dtype") if data[k] != here[k]]
    if differ:
        raise ConfigError("calibration", "a calibration of this machine and model; the file's " + "; ".join(differ),
                          path)
    return device_from_record(data, f"from {path}"), data


def calibration_cache_path(model: Any, dtype: str) -> Any:
    """This machine's cached calibration for `model`: a file under the cache folder
    (`$WORKBENCH_DATA`, else ~/.cache/workbench), sim-calibration/<hash>.json."""
    import hashlib
    import json

    from ..data.dataset import cache_dir
    key = json.dumps([machine_identity(), model.describe(), dtype], sort_keys=True)
    return cache_dir() / "sim-calibration" / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"




def local_profile(model: Any, X: Any, y: Any, params: Any, calibration: str | None = None,
                  cpu_workers: int = 1, rows: int | None = None) -> tuple[Device, dict]:
    """The `local` Device and its record: from `calibration` (a file) when given, else this
    machine's cached calibration, timed (`local_device`) and cached on first use. A cached
    file that cannot be read, or was timed another way (`CALIBRATION_METHOD`), is timed
    again and rewritten.

    Every timing is watched (`_watched`: who else used the cores meanwhile, the record's
    `timed_on`) and judged (`calibration_problems`: times that do not grow with the rows, a
    spread past CALIBRATION_SPREAD_BOUND, a co-run call faster than alone, other processes
    busy). A timing judged bad is what this run is charged (and records, so it replays; its
    summary says so, `calibration_note`), but it is not cached, nor kept in this process: the
    next run times the core again. A cached record judged bad (written before the judging)
    is timed again.

    With `cpu_workers` > 1 the Device is the core timed while the others compute too
    (`co_run_device`, for `co_run_cores` cores: the record's `co_run[k]`), timed once and
    added to the cached record when it has none; a given file without it keeps its
    one-core numbers (a run from before co-run timing replays as it ran).

    `rows`: the rows of the run's passes (a worker's slice, or its micro-batch). The core is
    timed on calls of up to CALIBRATION_TARGET_S, and a pass beyond them is not charged
    along that line: its rows per second differ (a GPT's 8-sequence calls ran at 0.82 ms a
    sequence here, its passes of 512 at 1.13: 1.4x, likely the memory traffic of their
    activations). A
    pass of more rows than the largest size timed is timed itself, alone and co-run as
    above, kept in the cached record (`at_rows`), and the run is charged (and records) that
    size's own record."""
    import json

    from ..util.fileio import atomic_write
    dtype = str(params.dtype)
    if calibration is not None:
        device, record = read_calibration(calibration, model, dtype)
        return charged_device(record, cpu_workers, device), record
    path = calibration_cache_path(model, dtype)
    device = record = None
    if path.exists():
        try:
            device, record = read_calibration(str(path), model, dtype)
        except ConfigError:
            pass                                           # unreadable: time again
        if record is not None and (record.get("method") != CALIBRATION_METHOD or calibration_problems(record)):
            device = record = None                         # timed the old way, or on a busy machine: time again
    changed = record is None
    if record is None:
        with _watched({}) as state:
            alone = local_device(model, X, y, params)
        record = {**calibration_record(alone, model, dtype), "timed_on": state}
        device = device_from_record(record, f"cached in {path}")
    k = co_run_cores(record, cpu_workers)
    if k > 1 and _co_run_of(record, cpu_workers) is None:
        with _watched({}) as state:
            together = co_run_device(model, X, y, params, k, device)
        record = {**record, "co_run": {**record.get("co_run", {}), str(k): {**co_run_entry(together),
                                                                             "timed_on": state}}}
        changed = True
    largest = max((int(b) for b, _ in record.get("timed", ())), default=0)
    if rows is not None and largest < int(rows) <= int(X.shape[0]):
        sub = record.get("at_rows", {}).get(str(int(rows)))
        if sub is None or sub.get("method") != CALIBRATION_METHOD or calibration_problems(sub):
            with _watched({}) as state:
                alone = local_device(model, X, y, params, rows=int(rows), repeats=None)
            sub = {**calibration_record(alone, model, dtype), "timed_on": state}
            if "host_demand_cores" in record:
                sub["host_demand_cores"] = record["host_demand_cores"]
        if k > 1 and _co_run_of(sub, cpu_workers) is None:
            with _watched({}) as state:
                together = co_run_device(model, X, y, params, k, device_from_record(sub, "timed now"))
            sub = {**sub, "co_run": {**sub.get("co_run", {}), str(k): {**co_run_entry(together), "timed_on": state}}}
        if record.get("at_rows", {}).get(str(int(rows))) is not sub:
            record = {**record, "at_rows": {**record.get("at_rows", {}), str(int(rows)): sub}}
            changed = True
    else:
        sub = None
    if changed:
        # what a busy machine timed is not this machine's calibration (`calibration_problems`):
        # the run is charged it and says so (`calibration_note`), the cache keeps only good timings
        good = {**record, "at_rows": {r: s for r, s in record.get("at_rows", {}).items() if not calibration_problems(s)}}
        if not good["at_rows"]:
            del good["at_rows"]
        if not calibration_problems(good):
            try:
                atomic_write(path, json.dumps(good, indent=1))
            except OSError:                                # a read-only home: the summary still has it
                pass
        else:
            _LOCAL.pop((model.describe(), dtype), None)    # nor kept in this process: the next run times again
    if sub is not None:   # the run's own pass size: its record, complete in itself (a replay reads it as a file)
        return charged_device(sub, cpu_workers, device_from_record(sub, f"cached in {path} at {int(rows)} rows")), sub
    return charged_device(record, cpu_workers, device_from_record(record, f"cached in {path}")), record


def co_run_entry(together: Device) -> dict[str, Any]:
    """A `co_run_device` timing as the calibration record's `co_run[k]` entry."""
    return {"rate_flops": together.peak_flops, "step_overhead_s": together.step_overhead_s,
            "timed": [list(t) for t in together.calibration], "cv": together.spread, "source": together.source}


def host_share(record: dict[str, Any], cpu_workers: int) -> float:
    """The share of a core each of `cpu_workers` local CPU workers gets on the calibrated host
    when the host's other demands take their part: `host_demand_cores` (the run's own machinery
    beside the workers' compute: the client's monitor and the local scheduler, measured by
    `bench --sim-vs-real` on its real runs; 0 when the record has none) of its `cores`. With
    k = `co_run_cores` workers computing at once, each gets (cores - demand) / k of a core
    where k + demand is more than the cores, else a whole one.

    >>> rec = {"machine": {"cores": 2}, "host_demand_cores": 0.1}
    >>> host_share(rec, 1), round(host_share(rec, 2), 6), host_share({"machine": {"cores": 2}}, 2)
    (1.0, 0.95, 1.0)
    """
    cores = int(record.get("machine", {}).get("cores") or 1)
    demand = float(record.get("host_demand_cores") or 0.0)
    k = co_run_cores(record, cpu_workers)
    if demand <= 0 or k + demand <= cores:
        return 1.0
    return max(cores - demand, 1e-3) / k


def charged_device(record: dict[str, Any], cpu_workers: int, alone: Device) -> Device:
    """What each of `cpu_workers` local CPU workers is charged: the record's co-run timing
    for that many (`_co_run_of`; else `alone`), slowed by the host's other demands
    (`host_share`: its rate, memory bandwidth and per-call overhead all scale)."""
    device = _co_run_of(record, cpu_workers) or alone
    share = host_share(record, cpu_workers)
    if share == 1.0:
        return device
    import dataclasses
    return dataclasses.replace(
        device, peak_flops=device.peak_flops * share, mem_bw=device.mem_bw * share,
        step_overhead_s=device.step_overhead_s / share,
        source=f"{device.source}; a {share:.1%} share of a core: the host's other demands take "
               f"{float(record['host_demand_cores']):.3g} of its {record['machine']['cores']} cores")


def _co_run_of(record: dict[str, Any], cpu_workers: int) -> Device | None:
    """The record's Device for `cpu_workers` computing at once (None: one core, or not timed)."""
    k = co_run_cores(record, cpu_workers)
    entry = record.get("co_run", {}).get(str(k)) if k > 1 else None
    if entry is None:
        return None
    return Device("local", "cpu", float(entry["rate_flops"]), float(record["mem_bw"]), 1.0,
                  float(entry["step_overhead_s"]), str(entry.get("source", "")),
                  tuple((int(b), float(t)) for b, t in entry.get("timed", ())), spread=float(entry.get("cv", 0.0)))
