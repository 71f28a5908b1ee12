"""Two steps timed against each other in a fresh one-thread process, round by round: the
shared half of `bench --torch-adapter` (`bench.adapter`) and `bench --gpt` (`bench.gpt`)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


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
