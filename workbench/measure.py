"""One measurement: a step's start, the training span, steady state, its throughput and shares.

Every number the workbench shows about speed is computed here, from the step records
(`results.STEP_COLUMNS`), and read from here by every consumer: the run summary, the
dashboard's status line and figures, the progress bar, sweeps, the cost model, the
benchmark, the demo, reports and lessons.

A step record's `time` is the moment the step ended; its `compute_s`, `comm_s` and
`wait_s` are the parts of the step the worker booked. So a step **started** at
``time - compute_s - comm_s - wait_s`` (`step_starts`), and the **training span** runs
from the earliest step start to the latest step end (`training_span`).

**Steady state** (the rule, `steady_window`): the steady window opens at the later of

1. the end of the last warm-up step, a warm-up step being one of a worker's first
   ``WARMUP_STEPS`` (3) steps: lazy set-up (BLAS thread pools, first touches of buffers
   and pages, a peer still arriving) lands there; single-process `sgd` took 0.11 s and
   0.44 s for its steps 0 and 1 against ~120 us later, and
2. the end of the first ``WARMUP_FRACTION`` (10%) of the training span,

and closes when the first worker is done (the drain at the end of an asynchronous run,
fewer workers running, is not its steady state). The steady state is **reached** when at
least ``MIN_STEADY_STEPS`` (10) steps per worker end inside it. When it is not reached (a
very short run) the window opens after the warm-up steps only and closes at the last
step (or, if no step ends after the warm-up, spans the whole training);
`Steady.reached` is then False and the summary says so.

Steadiness is judged by steps, and a window also needs **time**: one shorter than
``MIN_WINDOW_S`` (0.2 s) of wall time is dominated by one pause of the OS or the garbage
collector (10 ms moves its rate by 5% at 0.2 s, by 22% at 46 ms), and `window_note` says so
wherever the run's notes go (`notes`); the rate itself is unchanged.

**Steady throughput** is the samples of the steps inside the window over its length (all
workers together; a step across an edge counts for its part inside). The **shares** are
each component's part of those steps' booked time:
``compute_share + comm_share + wait_share == 1`` and ``comm_fraction = comm_share +
wait_share`` (the time a worker spent not computing).

The same rule holds for every algorithm, every transport and the simulated cluster (whose
records carry virtual seconds).
"""
from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from .learning import clip_note, early_stop_note

COMPONENTS = ("compute_s", "comm_s", "wait_s")   # the booked parts of a step, as STEP_COLUMNS name them
WARMUP_STEPS = 3          # each worker's first steps: lazy set-up, never steady
WARMUP_FRACTION = 0.1     # ... and the first tenth of the training span
MIN_STEADY_STEPS = 10     # steady rows per worker needed for the steady state to count as reached
RULE = (f"steady window: after each worker's first {WARMUP_STEPS} steps and the first {WARMUP_FRACTION:.0%} of "
        f"the training span, until the first worker is done; reached with at least {MIN_STEADY_STEPS} steps "
        f"per worker inside")


def step_starts(steps: pd.DataFrame) -> pd.Series:
    """When each step row started: its end (`time`) less the time it booked.

    >>> step_starts(pd.DataFrame({"time": [1.0, 2.5], "compute_s": [0.5, 1.0], "comm_s": [0.25, 0.0],
    ...                           "wait_s": [0.0, 0.5]})).tolist()
    [0.25, 1.0]
    """
    busy = sum(steps[c].astype(float) for c in COMPONENTS if c in steps)
    return steps["time"].astype(float) - busy


def training_span(steps: pd.DataFrame) -> tuple[float, float]:
    """(first step's start, last step's end) on the records' clock; (0, 0) without rows.

    >>> training_span(pd.DataFrame({"time": [1.0, 2.5], "compute_s": [0.5, 1.0], "comm_s": [0.0, 0.0],
    ...                             "wait_s": [0.0, 0.0]}))
    (0.5, 2.5)
    """
    if not len(steps):
        return 0.0, 0.0
    return float(step_starts(steps).min()), float(steps["time"].max())


def train_time(steps: pd.DataFrame) -> float:
    """Seconds from the first step's start to the last step's end (0 without rows)."""
    first, last = training_span(steps)
    return max(last - first, 0.0)


def _worker_ids(steps: pd.DataFrame) -> pd.Series:
    return steps["worker"] if "worker" in steps else pd.Series(0, index=steps.index)


def steady_window(steps: pd.DataFrame) -> tuple[float, float, bool]:
    """(open, close, reached): the steady window on the records' clock, by the module's rule.

    It opens at the later of the end of the last warm-up step (any worker's first
    `WARMUP_STEPS`) and the first `WARMUP_FRACTION` of the training span; it closes when
    the first worker is done (the earliest of the workers' last step ends: after it fewer
    workers run, the drain of an asynchronous run is not its steady state). Workers with
    too few steps to have a steady state of their own (lost early) do not close it.
    Not reached (fewer than `MIN_STEADY_STEPS` steps per worker inside it): it opens after
    the warm-up steps only and closes at the last step's end, or, when no step ends after
    the warm-up, spans the whole training.

    >>> n = 40
    >>> df = pd.DataFrame({"worker": 0, "step": range(n), "time": np.arange(1, n + 1) * 1.0,
    ...                    "compute_s": 1.0, "comm_s": 0.0, "wait_s": 0.0})
    >>> steady_window(df)                          # 10% of 40 s: from 4 s on
    (4.0, 40.0, True)
    >>> steady_window(df.head(8))                  # too short: after steps 0-2 only
    (3.0, 8.0, False)
    """
    if not len(steps):
        return 0.0, 0.0, False
    workers = _worker_ids(steps)
    step = steps["step"].astype(float)
    warm = step - step.groupby(workers).transform("min") < WARMUP_STEPS
    starts, ends = step_starts(steps), steps["time"].astype(float)
    first, last = float(starts.min()), float(ends.max())
    warm_end = float(ends[warm].max()) if warm.any() else first
    opening = max(warm_end, first + WARMUP_FRACTION * (last - first))
    counts = ends.groupby(workers).size()
    long_enough = counts[counts >= WARMUP_STEPS + MIN_STEADY_STEPS].index
    closing = float(ends.groupby(workers).max().loc[long_enough].min()) if len(long_enough) else last
    inside = ((ends > opening) & (ends <= closing)).sum()
    if closing > opening and inside >= MIN_STEADY_STEPS * workers.nunique():
        return opening, closing, True
    return (warm_end if warm_end < last else first), last, False


def steady_weights(steps: pd.DataFrame) -> tuple[np.ndarray, float, float, bool]:
    """(each row's part inside the steady window, open, close, reached): 1 for a step inside,
    0 outside, the part inside for a step across the opening or the closing."""
    opening, closing, reached = steady_window(steps)
    if not len(steps):
        return np.zeros(0), opening, closing, reached
    starts, ends = step_starts(steps).to_numpy(), steps["time"].astype(float).to_numpy()
    length = ends - starts
    overlap = np.minimum(ends, closing) - np.maximum(starts, opening)
    part = np.where(length > 0, np.clip(overlap / np.where(length > 0, length, 1.0), 0.0, 1.0),
                    ((ends > opening) & (ends <= closing)).astype(float))
    return part, opening, closing, reached


def steady_mask(steps: pd.DataFrame) -> tuple[pd.Series, bool]:
    """(which rows lie mostly inside the steady window, whether the steady state was reached).

    A worker's first steps are counted from its own lowest `step` (asynchronous workers
    number their own steps), so binned live rows are judged by their last step.
    """
    part, _, _, reached = steady_weights(steps)
    return pd.Series(part >= 0.5, index=steps.index), reached


def steady_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """The rows of `steps` mostly inside the steady window (the input is not changed)."""
    mask, _ = steady_mask(steps)
    return steps[mask]


@dataclass(frozen=True)
class Steady:
    """The steady state of a run: window, rows, throughput and where the time went."""
    reached: bool           # enough steady rows by the rule (else: a short run, warm-up steps only dropped)
    start_s: float          # the steady window on the records' clock
    end_s: float
    steps: int              # rows ending in the window (one per worker per step)
    samples: float          # samples inside the window (a row across its opening counts pro rata)
    samples_per_s: float    # steady throughput, all workers together
    compute_share: float    # of the steady rows' booked time
    comm_share: float
    wait_share: float
    comm_fraction: float    # comm_share + wait_share
    rule: str = RULE

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def steady(steps: pd.DataFrame) -> Steady:
    """The steady state of `steps` by the module's rule (zeros without rows).

    Throughput counts the samples of the steps inside the window; a step across its opening
    or closing counts for its part inside (so one worker's rate is exact, and many
    asynchronous workers' steps straddling the edges are not lost). Shares weigh the
    steps the same way.

    >>> compute = np.r_[0.11, 0.44, np.full(38, 0.009)]      # sgd-like warm-up in steps 0 and 1
    >>> df = pd.DataFrame({"worker": 0, "step": range(40), "time": np.cumsum(compute + 0.001), "samples": 8,
    ...                    "compute_s": compute, "comm_s": 0.001, "wait_s": 0.0})
    >>> s = steady(df)
    >>> s.reached, round(s.samples_per_s), round(s.compute_share, 3), round(s.comm_fraction, 3)
    (True, 800, 0.9, 0.1)
    """
    if not len(steps):
        return Steady(False, 0.0, 0.0, 0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    part, start, end, reached = steady_weights(steps)
    samples = float((steps["samples"].astype(float).to_numpy() * part).sum())
    booked = {c: float((steps[c].astype(float).to_numpy() * part).sum()) for c in COMPONENTS}
    total = sum(booked.values())
    share = {c: (v / total if total > 0 else 0.0) for c, v in booked.items()}
    return Steady(reached=reached, start_s=start, end_s=end, steps=int((part >= 0.5).sum()), samples=samples,
                  samples_per_s=samples / (end - start) if end > start else 0.0,
                  compute_share=share["compute_s"], comm_share=share["comm_s"], wait_share=share["wait_s"],
                  comm_fraction=share["comm_s"] + share["wait_s"])


def steady_chunks(chunks: Any) -> Steady:
    """`steady` over step rows handed over a chunk at a time: `chunks()` yields dicts of
    arrays (worker, step, time, samples and the COMPONENTS), the same rows each call (a
    long run's step table read back from its run directory a piece at a time). The same
    rule as `steady`, the same numbers up to the rounding of sums taken in pieces
    (~1e-15 relative), in memory bounded by one chunk; it reads the rows three or four
    times (the window needs the whole run before any row can be weighed).

    >>> compute = np.r_[0.11, 0.44, np.full(38, 0.009)]
    >>> df = pd.DataFrame({"worker": 0, "step": range(40), "time": np.cumsum(compute + 0.001), "samples": 8,
    ...                    "compute_s": compute, "comm_s": 0.001, "wait_s": 0.0})
    >>> parts = lambda: ({k: df[k].to_numpy(float)[i:i + 7] for k in df} for i in range(0, 40, 7))
    >>> a, b = steady_chunks(parts).to_dict(), steady(df).to_dict()
    >>> all(a[k] == b[k] if isinstance(a[k], (str, bool, int)) else np.isclose(a[k], b[k], rtol=1e-12) for k in a)
    True
    """
    # 1. per worker: lowest step, rows, last end; the training span
    per: pd.DataFrame | None = None
    first, last = np.inf, -np.inf
    for c in chunks():
        if not len(c["step"]):
            continue
        ends = np.asarray(c["time"], dtype=float)
        starts = ends - sum(np.asarray(c[k], dtype=float) for k in COMPONENTS)
        first, last = min(first, float(starts.min())), max(last, float(ends.max()))
        part = pd.DataFrame({"low": np.asarray(c["step"], dtype=float), "n": 1, "end": ends}).groupby(
            np.asarray(c["worker"])).agg({"low": "min", "n": "sum", "end": "max"})
        per = part if per is None else pd.concat([per, part]).groupby(level=0).agg(
            {"low": "min", "n": "sum", "end": "max"})
    if per is None:
        return Steady(False, 0.0, 0.0, 0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    # 2. the end of the last warm-up step (each worker's first WARMUP_STEPS steps)
    warm_end = -np.inf
    for c in chunks():
        if not len(c["step"]):
            continue
        low = per["low"].reindex(np.asarray(c["worker"])).to_numpy()
        warm = np.asarray(c["step"], dtype=float) - low < WARMUP_STEPS
        if warm.any():
            warm_end = max(warm_end, float(np.asarray(c["time"], dtype=float)[warm].max()))
    warm_end = first if warm_end == -np.inf else warm_end
    opening = max(warm_end, first + WARMUP_FRACTION * (last - first))
    long_enough = per.index[per["n"] >= WARMUP_STEPS + MIN_STEADY_STEPS]
    closing = float(per["end"].loc[long_enough].min()) if len(long_enough) else last

    def weigh(lo: float, hi: float) -> tuple[int, int, float, dict[str, float]]:
        inside = steps = 0
        samples, booked = 0.0, dict.fromkeys(COMPONENTS, 0.0)
        for c in chunks():
            if not len(c["step"]):
                continue
            ends = np.asarray(c["time"], dtype=float)
            starts = ends - sum(np.asarray(c[k], dtype=float) for k in COMPONENTS)
            length = ends - starts
            overlap = np.minimum(ends, hi) - np.maximum(starts, lo)
            within = (ends > lo) & (ends <= hi)
            part = np.where(length > 0, np.clip(overlap / np.where(length > 0, length, 1.0), 0.0, 1.0),
                            within.astype(float))
            inside += int(within.sum())
            steps += int((part >= 0.5).sum())
            samples += float((np.asarray(c["samples"], dtype=float) * part).sum())
            for k in COMPONENTS:
                booked[k] += float((np.asarray(c[k], dtype=float) * part).sum())
        return inside, steps, samples, booked

    # 3. the rows' parts inside the window (again over the fallback window when not reached)
    inside, steps, samples, booked = weigh(opening, closing)
    if closing > opening and inside >= MIN_STEADY_STEPS * len(per):
        start, end, reached = opening, closing, True
    else:
        start, end, reached = (warm_end if warm_end < last else first), last, False
        inside, steps, samples, booked = weigh(start, end)
    total = sum(booked.values())
    share = {c: (v / total if total > 0 else 0.0) for c, v in booked.items()}
    return Steady(reached=reached, start_s=start, end_s=end, steps=steps, samples=samples,
                  samples_per_s=samples / (end - start) if end > start else 0.0,
                  compute_share=share["compute_s"], comm_share=share["comm_s"], wait_share=share["wait_s"],
                  comm_fraction=share["comm_s"] + share["wait_s"])


def steady_note(steady_state: dict[str, Any] | Steady | None, workers: int | None = None) -> str | None:
    """The sentence for a run too short for a steady state (None when it was reached); with
    the run's `workers`, its steps a worker (the rule's count: `Steady.steps` counts every
    worker's rows, so 32 workers' 7 steps each read as 224).

    >>> steady_note({"reached": False, "steps": 12})
    'too short for a steady state (12 steps after warm-up): its throughput includes start-up effects'
    >>> steady_note({"reached": False, "steps": 224}, workers=32)
    'too short for a steady state (7 steps a worker after warm-up, 10 make one): its throughput includes start-up effects'
    >>> steady_note({"reached": False, "steps": 4}, workers=8)[:60]
    'too short for a steady state (under 1 step a worker after wa'
    >>> steady_note({"reached": True}) is None
    True
    """
    if steady_state is None:
        return None
    d = steady_state.to_dict() if isinstance(steady_state, Steady) else steady_state
    if d.get("reached", True):
        return None
    rows = int(d.get("steps", 0))
    if workers:   # whole steps: the rows of a step caught at the window's edge count for none
        each = rows // workers
        told = (f"{each if each else 'under 1'} step{'s' if each > 1 else ''} a worker after warm-up, "
                f"{MIN_STEADY_STEPS} make one")
    else:
        told = f"{rows} steps after warm-up"
    return f"too short for a steady state ({told}): its throughput includes start-up effects"


# A steady window shorter than MIN_WINDOW_S is judged too short to time a rate (`window_note`).
# A pause of h seconds inside a window of W seconds moves the rate by about h / W. Pauses of
# 5-10 ms are ordinary (the OS scheduling another process, a garbage collection, a timer
# tick): a busy Python loop on the 2-core development VM at load 4.5 was held up over 10 ms
# 8 times in 3 s, the longest 32 ms. At 0.2 s one 10 ms pause moves the rate by 5%, the
# spread the workbench calls a rate known (`TARGET_SPREAD`); below it by more.
PAUSE_S = 0.010
MIN_WINDOW_S = 0.2


def window_note(steady_state: dict[str, Any] | Steady | None, simulated: bool = False) -> str | None:
    """The sentence for a steady window shorter than `MIN_WINDOW_S` of wall time (None for a
    longer one, a window of no length, a steady state not reached (`steady_note` says the
    window holds start-up effects), or a simulated run, whose virtual clock no pause of
    this machine's enters). The rate is not changed: it says how little its window can tell.

    >>> window_note({"reached": True, "start_s": 0.010, "end_s": 0.056})
    'its steady window lasted 46 ms (under 200 ms): one 10 ms pause of the OS or the garbage collector moves its samples/s by about 22%; train about 5x the steps or epochs for a rate to compare'
    >>> window_note({"reached": True, "start_s": 1.0, "end_s": 1.25}) is None
    True
    >>> window_note({"reached": True, "start_s": 0.0, "end_s": 0.05}, simulated=True) is None
    True
    >>> window_note({"reached": False, "start_s": 0.0, "end_s": 0.05}) is None
    True
    """
    if steady_state is None or simulated:
        return None
    d = steady_state.to_dict() if isinstance(steady_state, Steady) else steady_state
    length = float(d.get("end_s") or 0.0) - float(d.get("start_s") or 0.0)
    if not d.get("reached") or not (0.0 < length < MIN_WINDOW_S):   # not reached: `steady_note` says it
        return None
    more = max(math.ceil(MIN_WINDOW_S / length), 2)
    return (f"its steady window lasted {duration_text(length)} (under {duration_text(MIN_WINDOW_S)}): one "
            f"{duration_text(PAUSE_S)} pause of the OS or the garbage collector moves its samples/s by about "
            f"{PAUSE_S / length:.0%}; train about {more}x the steps or epochs for a rate to compare")


def run_workers(summary: dict[str, Any]) -> int | None:
    """How many workers a run's summary says it had (its `workers` entries); None when it does not say."""
    return len(summary.get("workers") or []) or None


def numerics_note(numerics: dict[str, int] | None) -> str | None:
    """What NumPy's floating-point errors in the workers' maths say (`summary["numerics"]`:
    kind -> the first step it happened in, `algorithms.base.float_errors`); None without any.

    >>> numerics_note({"overflow": 146, "invalid value": 147})
    "floating-point overflow from step 146, invalid value from step 147 in the workers' maths (NumPy)"
    >>> numerics_note({})
    """
    if not numerics:
        return None
    said = ", ".join(f"{kind} from step {step}" for kind, step in numerics.items())
    return f"floating-point {said} in the workers' maths (NumPy)"


def kept_note(summary: dict[str, Any]) -> str | None:
    """What a run that failed kept of its model (`summary["params_final"]`, from rank 0's
    `WorkerContext.kept_on_failure`), else None.

    >>> kept_note({"status": "failed", "steps": 287, "params_final": {"steps": 280, "of": "its last evaluation"}})
    'the run failed after 287 steps: its parameters (params.npy) are those of its last evaluation, after 280 steps'
    """
    kept = summary.get("params_final")
    if not kept:
        return None
    return (f"the run {summary.get('status', 'failed')} after {summary.get('steps', 0):,} steps: its parameters "
            f"(params.npy) are those of {kept['of']}, after {kept['steps']:,} steps")


def segments_note(summary: dict[str, Any]) -> str | None:
    """How a resumed run got to its end (`summary["segments"]`, `execution.engine.ended_text`
    of each segment but the last), and what its totals add up; None for a run of one segment.

    >>> segments_note({"segments": [{"ended": "stopped after 1,167 steps; resumed from its checkpoint at step 1,167"},
    ...                              {"ended": "completed"}]})[:111]
    'resumed once (2 segments: stopped after 1,167 steps; resumed from its checkpoint at step 1,167; then completed)'
    >>> segments_note({"segments": [{"ended": "completed"}]}) is None
    True
    """
    segments = [s for s in summary.get("segments") or [] if isinstance(s, dict)]
    if len(segments) < 2:
        return None
    times = {2: "once", 3: "twice"}.get(len(segments), f"{len(segments) - 1} times")
    said = "; then ".join(str(s.get("ended") or s.get("status") or "?") for s in segments)
    return (f"resumed {times} ({len(segments)} segments: {said}): wall_time_s and startup_s are sums over its "
            "segments, the time between them counted nowhere")


def notes(summary: dict[str, Any]) -> list[str]:
    """The sentences a run's numbers come with (CLI, status line, reports): a run that
    learned nothing or learned its training set by heart (`summary["learning_note"]`,
    `summary["overfit_note"]`, `workbench.learning`), a run `early_stop` ended, what a failed run kept
    (`kept_note`), gradient clipping that changed nothing or
    nearly every update (`learning.clip_note`), a steady state not
    reached, a steady window too short to time a rate (`window_note`), NumPy's floating-point errors in the workers' maths (`numerics_note`), more CPU workers than cores (`summary["crowding_note"]`,
    `util.machine.crowding_note`), a machine other processes were using (`summary["machine_note"]`), a
    worker that took on another client's tasks mid-run (`summary["busy_note"]`, `transports.dask.busy_note`), a
    resumed run's segments, how each ended (`segments_note`: its report and `compare` would otherwise show a
    stopped-then-resumed run as one uninterrupted run), a
    resumed run whose steps after the resume are not the bits of the run never stopped (`summary["resumed_note"]`,
    `api.resumed_note`), checkpoints that were due and not written (`checkpoints_note`).

    >>> notes({"steady": {"reached": True}, "machine_note": "other processes used 1.6 of 2 cores ..."})
    ['other processes used 1.6 of 2 cores ...']
    """
    return [n for n in (summary.get("learning_note"), summary.get("overfit_note"), early_stop_note(summary),
                        kept_note(summary),
                        clip_note(summary.get("grad_clip")),
                        steady_note(summary.get("steady"), run_workers(summary)),
                        window_note(summary.get("steady"), bool(summary.get("simulated"))),
                        numerics_note(summary.get("numerics")),
                        summary.get("crowding_note"), summary.get("machine_note"), summary.get("busy_note"),
                        segments_note(summary), summary.get("resumed_note"),
                        checkpoints_note(summary.get("checkpoints"))) if n]


def checkpoints_note(checkpoints: dict[str, Any] | None) -> str | None:
    """How many of a run's checkpoints were due and not written, and why (the summary's
    `checkpoints`, `execution.saver`); None when none was missed.

    >>> checkpoints_note({"written": 5, "missed": 3, "missed_why": {"a worker had passed its step": 2,
    ...                                                             "its write failed: No space left": 1}})
    '3 checkpoints due were not written (5 were): 2 because a worker had passed its step; 1 because its write failed: No space left'
    >>> checkpoints_note({"written": 5, "missed": 0}) is None
    True
    """
    missed = (checkpoints or {}).get("missed") or 0
    if not missed:
        return None
    why = "; ".join(f"{n} because {what}" for what, n in (checkpoints.get("missed_why") or {}).items())
    return (f"{missed} checkpoint{'s' if missed != 1 else ''} due {'were' if missed != 1 else 'was'} not written "
            f"({checkpoints.get('written', 0)} {'were' if checkpoints.get('written', 0) != 1 else 'was'})"
            + (f": {why}" if why else ""))


def steady_throughput(steps: pd.DataFrame) -> float:
    """Steady samples/s of `steps` (`steady(steps).samples_per_s`)."""
    return steady(steps).samples_per_s


def timing(*, called: float, first_step_wall: float | None, ended: float, train_s: float) -> dict[str, float]:
    """The run's time identities, all in seconds on one clock (wall clock, or virtual):

    ``startup_s`` from the call to the first step's start (cluster, data, workers' set-up),
    ``train_time_s`` from the first step's start to the last step's end (`train_time`),
    ``teardown_s`` from there to the end (last records, closing), and
    ``wall_time_s = startup_s + train_time_s + teardown_s`` exactly, each part >= 0.

    Workers stamp their first step on their own clock; where it disagrees with the caller's
    (another host), a negative remainder is clipped to 0 and the sum still holds.

    >>> timing(called=10.0, first_step_wall=12.0, ended=20.0, train_s=7.5)
    {'startup_s': 2.0, 'train_time_s': 7.5, 'teardown_s': 0.5, 'wall_time_s': 10.0}
    >>> timing(called=10.0, first_step_wall=None, ended=11.0, train_s=0.0)    # no step ran
    {'startup_s': 1.0, 'train_time_s': 0.0, 'teardown_s': 0.0, 'wall_time_s': 1.0}
    """
    first = ended if first_step_wall is None else min(max(first_step_wall, called), ended)
    startup = first - called
    train = max(float(train_s), 0.0)
    teardown = max(ended - first - train, 0.0)
    return {"startup_s": startup, "train_time_s": train, "teardown_s": teardown,
            "wall_time_s": startup + train + teardown}


def warm(step: int, elapsed_s: float, planned_s: float) -> bool:
    """For a loop that keeps no records (the benchmark's bare loops): whether it is past
    warm-up by the same rule, having run `step` steps for `elapsed_s` of `planned_s`.

    >>> warm(2, 5.0, 10.0), warm(3, 0.5, 10.0), warm(3, 1.0, 10.0)
    (False, False, True)
    """
    return step >= WARMUP_STEPS and elapsed_s >= WARMUP_FRACTION * planned_s


LIVE_RATE_EVERY_S = 1.0   # a display's steady rate is recomputed at most this often (`LiveSteady.recent_rate`)


class LiveSteady:
    """The steady rate of a run while it runs, from the live step records (dicts), by the
    same rule as `steady` (binned live rows are judged by their last step).

    Feed it every record batch (`add`); `rate()` is the steady samples/s so far (None
    until the steady state is reached), `startup_s(pressed, arrived)` estimates start-up
    from when the first records arrived, less how long the run had already gone on.

    >>> live = LiveSteady()
    >>> live.add([{"kind": "step", "worker": 0, "step": k, "time": (k + 1) * 0.01, "samples": 8,
    ...            "compute_s": 0.01, "comm_s": 0.0, "wait_s": 0.0} for k in range(40)])
    >>> round(live.rate())
    800
    """

    def __init__(self) -> None:
        self._rows: list[tuple[float, ...]] = []
        self._frame: pd.DataFrame | None = None
        self.newest_time: float | None = None   # the newest record's time at the first batch
        self._said: tuple[float, float | None] = (-math.inf, None)   # (monotonic time, rate) of `recent_rate`

    def add(self, records: Any) -> None:
        """A batch: record dicts, or a columnar `results.RecordBatch` (its `steps` columns)."""
        steps = getattr(records, "steps", None)
        if isinstance(steps, dict):   # columnar: no dict per row
            if steps:
                n = len(steps["step"])
                cols = [np.asarray(steps[c], dtype=float) if c in steps else np.zeros(n)
                        for c in ("worker", "step", "time", "samples", *COMPONENTS)]
                self._rows.extend(zip(*(c.tolist() for c in cols)))
                self._frame = None
            records = getattr(records, "others", ())
        for r in records:
            if r.get("kind") != "step" or r.get("time") is None or r.get("step") is None:
                continue
            self._rows.append((float(r.get("worker") or 0), float(r["step"]), float(r["time"]),
                               float(r.get("samples") or 0), float(r.get("compute_s") or 0.0),
                               float(r.get("comm_s") or 0.0), float(r.get("wait_s") or 0.0)))
            self._frame = None
        if self._rows and self.newest_time is None:
            self.newest_time = max(row[2] for row in self._rows)

    def frame(self) -> pd.DataFrame:
        if self._frame is None:
            self._frame = pd.DataFrame(self._rows, columns=["worker", "step", "time", "samples", *COMPONENTS])
        return self._frame

    def rate(self) -> float | None:
        """Steady samples/s so far; None before the steady state is reached."""
        if not self._rows:
            return None
        s = steady(self.frame())
        return s.samples_per_s if s.reached else None

    def recent_rate(self, every_s: float = LIVE_RATE_EVERY_S) -> float | None:
        """`rate()`, recomputed at most every `every_s` of wall time (a display's: the
        terminal's bar, the dashboard's status line, several times a second), else its
        last value."""
        now = time.monotonic()
        if now - self._said[0] >= every_s:
            self._said = (now, self.rate())
        return self._said[1]

    def startup_s(self, pressed: float, arrived: float) -> float | None:
        """Start-up estimated live: the first batch `arrived` (a monotonic time) carried rows
        up to `newest_time` into the run, so step 0 began that long before it arrived."""
        if self.newest_time is None:
            return None
        return max(arrived - self.newest_time - pressed, 0.0)


# ------------------------------------------------------------------ a scaling point, repeated
ROUNDS = 3              # interleaved rounds every real scaling point runs at least
MAX_ROUNDS = 8          # ... and at most: the budget, after which an unsettled point says so
TARGET_SPREAD = 0.05    # a point is known when its rounds' spread (below) is within +-5% of their median


def median_rate(values: list[float]) -> float:
    """The median of a point's rounds: the lower middle one of an even count (one measured run's).

    >>> median_rate([3.0, 1.0, 2.0]), median_rate([1.0, 2.0, 3.0, 4.0])
    (2.0, 2.0)
    """
    import statistics
    return float(statistics.median_low([float(v) for v in values]))


def median_speedup(rates_n: Sequence[float], rates_1: Sequence[float]) -> tuple[float, float, float]:
    """(speed-up, low, high) of N workers' rounds over 1 worker's, as the demo prints it: the
    ratio of the two sides' medians (`median_rate`), and its range between the rounds'
    extremes (the slowest N-worker round over the fastest lone one, the fastest over the
    slowest). The two sides may have run different numbers of rounds (each is repeated until
    its own rate is known: `Repeats`).

    >>> [round(x, 3) for x in median_speedup([180.0, 175.0, 178.0, 170.0, 182.0], [100.0, 98.0, 102.0])]
    [1.78, 1.667, 1.857]
    """
    n = [float(v) for v in rates_n]
    one = [float(v) for v in rates_1]
    return median_rate(n) / median_rate(one), min(n) / max(one), max(n) / min(one)


MEDIAN_COVERAGE = 0.75   # how sure "+-spread" is that the rounds' median lies within it (`relative_spread`)


def median_interval_rank(n: int, coverage: float = MEDIAN_COVERAGE) -> int:
    """k of the narrowest pair of order statistics, the k-th lowest and the k-th highest of
    n rounds, that holds the median of the rate's distribution with probability >= `coverage`
    whatever that distribution is (each round lands below the median with probability 1/2,
    so the count below is binomial); 1, the whole range, where no pair reaches it.

    >>> [median_interval_rank(n) for n in (1, 2, 3, 4, 5, 6, 7, 8, 9)]
    [1, 1, 1, 1, 1, 2, 2, 2, 3]
    """
    from math import comb
    k = 1
    while 2 * (k + 1) <= n + 1:
        at_most_k = sum(comb(n, i) for i in range(k + 1)) / 2 ** n   # P(k or fewer rounds below the median)
        if 1 - 2 * at_most_k < coverage:         # the pair one further in would hold it less often
            break
        k += 1
    return k


def relative_spread(values: list[float]) -> float:
    """The "+-" of "a point's rate is known to +-5%": half the width of an interval that
    holds the median of the rate's distribution with probability >= 75% whatever the
    rounds' distribution (`median_interval_rank`), over the rounds' median. With 3 to 5
    rounds that is the whole range: three rounds that agree say little about a rate that
    moves run to run, and 3 tight rounds of a rate that wanders by +-10% were seen to claim
    +-5% while other doors measured 25% apart (tests/test_agreement.py). From 6 rounds the
    extremes fall outside it, so one round disturbed by another process is outvoted by
    repeating, which is what repeating a point is for; the full range (lo, hi) is still
    reported and drawn. NaN for no rounds or a median <= 0.

    >>> relative_spread([100.0, 104.0, 97.0]), relative_spread([100.0])
    (0.035, 0.0)
    >>> round(relative_spread([150.0, 200.0, 160.0, 160.0, 158.0, 162.0]), 4)    # the 150 and 200 outvoted
    0.0125
    """
    if not values:
        return float("nan")
    med = median_rate(values)
    lo, hi = median_interval(values)
    return float((hi - lo) / 2 / med) if med > 0 else float("nan")


def median_interval(values: Sequence[float]) -> tuple[float, float]:
    """(lo, hi): the pair of the rounds' order statistics that holds the median of their
    distribution with probability >= `MEDIAN_COVERAGE` (`median_interval_rank`).

    >>> median_interval([0.92, 0.87, 1.03, 0.95, 0.90, 0.93])
    (0.9, 0.95)
    """
    xs = sorted(float(v) for v in values)
    k = median_interval_rank(len(xs))
    return xs[k - 1], xs[len(xs) - k]


def comm_fraction_text(summary: dict[str, Any]) -> str:
    """A run's `comm_fraction` as every run line says it, with what it is of (a simulated
    run's "communication" line gives another share, of all its steps' communication alone,
    `sim.costs.comm_text`).

    >>> comm_fraction_text({"comm_fraction": 0.2})
    'comm fraction 0.20 (comm + wait, steady window)'
    """
    return f"comm fraction {summary.get('comm_fraction') or 0:.2f} (comm + wait, steady window)"


def duration_text(seconds: float) -> str:
    """Seconds as a short duration, in the unit that shows its digits (us, ms, s).

    >>> duration_text(0.00042), duration_text(0.0123), duration_text(1.5), duration_text(3e-7), duration_text(-0.0007)
    ('0.42 ms', '12.3 ms', '1.50 s', '0.30 us', '-0.70 ms')
    """
    if seconds < 0:
        return "-" + duration_text(-seconds)
    if seconds >= 1.0:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    if seconds >= 1e-4:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.2f} us"


def spread_text(spread: float) -> str:
    """A spread (`relative_spread`) as the "+-" people read: whole percents from 1%, one
    decimal below it (rounded to "+-0%", rounds that agree to within 0.2% would read as a
    rate known exactly), "no rate measured" for NaN.

    >>> spread_text(0.0521), spread_text(0.0021), spread_text(float("nan"))
    ('+-5%', '+-0.2%', 'no rate measured')
    """
    if spread != spread:
        return "no rate measured"
    return f"+-{spread:.1%}" if spread < 0.0095 else f"+-{spread:.0%}"


class Repeats:
    """Interleaved rounds of the points of a scaling measurement, each point repeated until its
    rate is known to +-`target` (`relative_spread`) or the budget runs out.

    Every point runs in each of the first `min_rounds` rounds (1, 2, 1, 2, 1, 2); after that a
    round runs only the points not yet known, still interleaved. The budget is `max_rounds`
    rounds and, when given, `budget_s` seconds of `clock` from the first `next_round` (checked
    between rounds: a started round is finished). A point still outside +-target when the
    budget runs out is **not resolved**, and `note` says so with its spread. A rate measured
    as 0 or missing (a failed run) never becomes known.

    >>> rates = {1: iter([100, 101, 99]), 2: iter([150, 200, 120, 180, 160, 170])}
    >>> rep = Repeats([1, 2], max_rounds=5)
    >>> while todo := rep.next_round():
    ...     for p in todo:
    ...         rep.add(p, next(rates[p]))
    >>> rep.rounds(1), rep.known(1), rep.rounds(2), rep.known(2)
    (3, True, 5, False)
    >>> rep.note(2)
    'not resolved: +-25% over 5 rounds (target +-5%; budget: 5 rounds)'
    """

    def __init__(self, points: list[Any], *, min_rounds: int = ROUNDS, max_rounds: int = MAX_ROUNDS,
                 budget_s: float | None = None, target: float = TARGET_SPREAD, clock: Any = None) -> None:
        if isinstance(min_rounds, bool) or not isinstance(min_rounds, int) or min_rounds < 1:
            raise ValueError(f"rounds: a whole number of rounds >= 1, got {min_rounds!r}")
        if isinstance(max_rounds, bool) or not isinstance(max_rounds, int) or max_rounds < min_rounds:
            raise ValueError(f"max_rounds: a whole number >= rounds ({min_rounds}), got {max_rounds!r}")
        if budget_s is not None and not (budget_s > 0):
            raise ValueError(f"budget_s: seconds > 0 or None, got {budget_s!r}")
        if not (target > 0):
            raise ValueError(f"target: a relative spread > 0, got {target!r}")
        import time
        self.points = list(points)
        self.min_rounds, self.max_rounds, self.budget_s, self.target = min_rounds, max_rounds, budget_s, target
        self.clock = clock or time.monotonic
        self.values: dict[Any, list[float]] = {p: [] for p in self.points}
        self.round = 0                     # rounds started
        self.started: float | None = None
        self.out_of: str | None = None     # which budget ran out

    def add(self, point: Any, value: float | None) -> None:
        """Record one round's rate of `point` (None or NaN: the run measured none)."""
        v = float("nan") if value is None else float(value)
        self.values[point].append(v if v == v else 0.0)

    def rounds(self, point: Any) -> int:
        return len(self.values[point])

    def spread(self, point: Any) -> float:
        return relative_spread(self.values[point])

    def known(self, point: Any) -> bool:
        """At least `min_rounds` rounds, a positive median and a `relative_spread` within +-target."""
        vals = self.values[point]
        return len(vals) >= self.min_rounds and median_rate(vals) > 0 and self.spread(point) <= self.target

    def next_round(self) -> list[Any]:
        """The points to run in the next round, in order; [] when every point is known or the
        budget has run out (then `out_of` says which)."""
        if self.started is None:
            self.started = self.clock()
        if self.round < self.min_rounds:
            todo = list(self.points)
        else:
            todo = [p for p in self.points if not self.known(p)]
            if todo and self.round >= self.max_rounds:
                self.out_of, todo = f"{self.max_rounds} rounds", []
            elif todo and self.budget_s is not None and self.clock() - self.started >= self.budget_s:
                self.out_of, todo = f"{self.budget_s:g} s", []
        if todo:
            self.round += 1
        return todo

    def note(self, point: Any) -> str:
        """"" for a known point; otherwise the sentence saying it is not resolved, with its spread."""
        if self.known(point):
            return ""
        n, spread = self.rounds(point), self.spread(point)
        if n < self.min_rounds:
            return f"not resolved: {n} of {self.min_rounds} rounds measured (stopped)"
        budget = f"; budget: {self.out_of}" if self.out_of else ""
        return f"not resolved: {spread_text(spread)} over {n} rounds (target +-{self.target:.0%}{budget})"
