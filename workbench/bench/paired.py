"""Two steps timed against each other in a fresh one-thread process, round by round (the
child's `interleaved`, the parent's `paired_rounds`): the shared half of `bench --torch-adapter` (`bench.adapter`) and `bench --gpt` (`bench.gpt`)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def rounds_flag(args: Any, default: int) -> int:
    """`--rounds` of `bench --gpt` / `--torch-adapter` (`default` when not given);
    ConfigError unless a whole number >= 1 (0 took the default without a word).

    >>> from argparse import Namespace
    >>> rounds_flag(Namespace(rounds=None), 5), rounds_flag(Namespace(rounds=2), 5)
    (5, 2)
    """
    rounds = getattr(args, "rounds", None)
    if rounds is None:
        return default
    if rounds < 1:
        from ..config import ConfigError
        raise ConfigError("rounds", "a whole number >= 1", rounds)
    return int(rounds)


def paired_rounds(module: str, spec: dict, what: str) -> dict[str, Any]:
    """Run `workbench.bench.<module>.child(spec)` in a fresh one-thread process, which prints a
    JSON line whose "rounds" are (ours, theirs) seconds per interleaved round; returns that
    line's fields with each side's median ms (`ours_ms`, `theirs_ms`), the ratio ours /
    theirs (median and range over rounds) and the load before and after."""
    import numpy as np
    load = (lambda: os.getloadavg()[0]) if hasattr(os, "getloadavg") else (lambda: float("nan"))
    load0 = load()
    proc = subprocess.run([sys.executable, "-c", f"from workbench.bench.{module} import child; child({json.dumps(spec)!r})"],
                          capture_output=True, text=True, env={**os.environ, **ONE_THREAD}, timeout=1800)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"the {what} benchmark failed: {(proc.stderr or proc.stdout).strip()[-400:]}")
    got = json.loads(lines[-1])
    r = np.array(got["rounds"])
    ratios = r[:, 0] / r[:, 1]
    return {**got, "ours_ms": float(np.median(r[:, 0]) * 1e3), "theirs_ms": float(np.median(r[:, 1]) * 1e3),
            "ratio": float(np.median(ratios)), "ratio_min": float(ratios.min()), "ratio_max": float(ratios.max()),
            "load_before": load0, "load_after": load()}


def ratio_text(ours_ms: float, theirs_ms: float, ratio: float, lo: float, hi: float, digits: int = 3) -> str:
    """A paired benchmark's ratio, said as what it is: the median of the per-round ratios
    (ours / theirs, each round's two sides timed together, so a round's load is on both)
    with their range. That median need not be the quotient of the two sides' medians shown
    beside it (each taken over the rounds on its own), so the quotient is given too.

    >>> ratio_text(0.369, 0.340, 0.833, 0.75, 1.21)
    'ratio per round: median 0.833 (0.750-1.210), of the medians 1.085'
    """
    return (f"ratio per round: median {ratio:.{digits}f} ({lo:.{digits}f}-{hi:.{digits}f}), of the medians "
            f"{ours_ms / theirs_ms:.{digits}f}")


def interleaved(ours: Callable[[], Any], theirs: Callable[[], Any], rounds: int, steps: int,
                warm: int = 3) -> list[list[float]]:
    """The child's half: each step's median seconds over `steps` calls, per round, the two
    taken in turn (who goes first alternating), after `warm` calls of each; (ours, theirs)
    per round."""
    import numpy as np

    def timed(fn: Callable[[], Any], n: int) -> float:
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return float(np.median(times))

    timed(ours, warm)
    timed(theirs, warm)      # first-call costs on both sides
    out = []
    for r in range(rounds):
        if r % 2 == 0:
            a = timed(ours, steps)
            b = timed(theirs, steps)
        else:
            b = timed(theirs, steps)
            a = timed(ours, steps)
        out.append([a, b])
    return out
