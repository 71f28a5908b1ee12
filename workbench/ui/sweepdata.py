"""What the figures of several runs draw: scaling curves, the machine's load, comparisons.

`scaling_series` turns a sweep's table (`workbench.analysis.sweep`) and the cost model's
predictions into the scaling figure's series (throughput and efficiency against workers,
the ideal line, rings and crosses over the points that cannot be trusted);
`comparison_series` puts runs side by side (steady samples/s and the time's shares).
NumPy and pandas only: `ui/figures.py` draws them.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from .. import measure
from ..analysis.sweep import SHORT_LABEL, too_short
from ..results import RunResult
from .figdata import COMPONENT_COLORS, COMPONENT_NAMES, COMPONENTS, PALETTE, run_color
from .series import Series


def scaling_series(table: pd.DataFrame, predicted: pd.DataFrame | None = None,
                   name: str | None = None) -> list[Series]:
    """Throughput (column 1) and efficiency (column 2) against workers.

    Args:
        table: a `workbench.analysis.sweep.sweep` table (workers, samples_per_s, efficiency;
            steady_reached marks runs `too_short` for a steady state).
        predicted: a `workbench.analysis.costmodel.predict` table (workers, network,
            samples_per_s, efficiency), one curve per network.
        name: the measured points' name (default "measured", or "simulated" when every
            row of the table is a simulated run).
    Returns:
        Series "<name>", "ideal" (linear from the first measured point, over the
        measured workers and the predicted ones up to 4x the largest measured count;
        efficiency 1), "predicted: <network>" ("predicted: calibrated" for the
        network "measured"), `SHORT_LABEL` (rings over the points `too_short` for a steady state) and
        BUSY_LABEL (crosses over points measured while other processes used a noticeable
        share of the cores; their hover text carries the sentence), each in both columns
        (efficiency ones suffixed " efficiency").
    """
    out: list[Series] = []
    if name is None:
        sim = table["simulated"].fillna(False).astype(bool) if "simulated" in table and len(table) else None
        name = "simulated" if sim is not None and sim.all() else "measured"
    measured = table.sort_values("workers", kind="stable") if len(table) else table
    mws = measured["workers"].astype(float).tolist() if len(measured) else []
    ws = sorted(set(mws) | set(predicted["workers"].tolist() if predicted is not None and len(predicted) else []))
    if mws:       # the ideal line stays near the data: a line to 64 workers dwarfs 2 measured points
        ws = [w for w in ws if w <= 4 * max(mws)] or ws
    if len(measured):
        w0, s0 = float(measured["workers"].iloc[0]), float(measured["samples_per_s"].iloc[0])
        ideal = dict(mode="lines", line_color="#999", line_dash="dash", legendgroup="ideal")
        out.append(Series("ideal", ws, [s0 * w / w0 for w in ws], col=1, mode="replace", style=ideal))
        out.append(Series("ideal efficiency", ws, [1.0] * len(ws), col=2, mode="replace",
                          style={**ideal, "showlegend": False}))
    if predicted is not None and len(predicted):
        for i, (network, p) in enumerate(predicted.groupby("network", sort=False)):
            p = p.sort_values("workers", kind="stable")
            pname = "predicted: calibrated" if network == "measured" else f"predicted: {network}"
            style = dict(mode="lines", line_dash="dot", line_color=PALETTE[(i + 1) % len(PALETTE)],
                         legendgroup=pname)
            out.append(Series(pname, p["workers"].tolist(), p["samples_per_s"].tolist(),
                              col=1, mode="replace", style=style))
            out.append(Series(f"{pname} efficiency", p["workers"].tolist(),
                              p["efficiency"].tolist(), col=2, mode="replace",
                              style={**style, "showlegend": False}))
    if len(measured):
        short = too_short(measured)
        secs = pd.to_numeric(measured.get("wall_time_s", pd.Series([np.nan] * len(measured))),
                             errors="coerce").tolist()
        status = measured.get("status", pd.Series([""] * len(measured))).tolist()
        unit = " virtual s" if name == "simulated" else " s"
        busy = machine_busy(measured)
        notes = measured.get("machine_note", pd.Series([None] * len(measured))).tolist()
        unresolved = measured.get("resolution_note", pd.Series([None] * len(measured))).tolist()
        runs = measured.get("run_note", pd.Series([None] * len(measured))).tolist()   # too short, learned nothing
        # a point too short for a steady state says so once: its run note's sentence, or the label
        text = [(f"{st}, {s:.2g}{unit}" if s == s else f"{st}")
                + (f" ({SHORT_LABEL})" if sh and SHORT_LABEL not in str(r) else "")
                + "".join(f"<br>{n}" for n in (n, u, r) if isinstance(n, str) and n)
                for st, s, sh, n, u, r in zip(status, secs, short, notes, unresolved, runs)]
        style = dict(mode="lines+markers", marker_size=10, line_color=PALETTE[0], legendgroup=name)
        if "samples_per_s_lo" in measured and (pd.to_numeric(measured.get("rounds"), errors="coerce") > 1).any():
            med = measured["samples_per_s"].astype(float)   # interleaved rounds: the range as error bars
            style["error_y"] = dict(type="data", symmetric=False, visible=True,
                                    array=(measured["samples_per_s_hi"].astype(float) - med).tolist(),
                                    arrayminus=(med - measured["samples_per_s_lo"].astype(float)).tolist())
        out.append(Series(name, measured["workers"].tolist(), measured["samples_per_s"].tolist(), col=1,
                          mode="replace", text=text, style=style))
        eff_style = {**{k: v for k, v in style.items() if k != "error_y"}, "showlegend": False}
        if "error_y" in style and {"speedup_lo", "speedup_hi"} <= set(measured.columns):
            # the efficiency's range is the speed-up's (`combine_rounds`: between the rounds' extremes) over
            # the workers, not the throughput's bars: those leave out the reference's own spread
            per = float(measured["workers"].iloc[0]) / measured["workers"].astype(float)
            eff = measured["efficiency"].astype(float)
            hi = (measured["speedup_hi"].astype(float) * per - eff).fillna(0.0)
            lo = (eff - measured["speedup_lo"].astype(float) * per).fillna(0.0)
            eff_style["error_y"] = dict(type="data", symmetric=False, visible=True, array=hi.tolist(),
                                        arrayminus=lo.tolist())
        out.append(Series(f"{name} efficiency", measured["workers"].tolist(), measured["efficiency"].tolist(),
                          col=2, mode="replace", text=text, style=eff_style))
        warn = dict(mode="markers", marker_symbol="circle-open", marker_size=20, marker_line_width=2.5,
                    marker_color="#e67e00", legendgroup="short", hoverinfo="skip")
        label = SHORT_LABEL
        sw = measured["workers"][short].tolist()
        out.append(Series(label, sw, measured["samples_per_s"][short].tolist(), col=1, mode="replace",
                          style={**warn, "showlegend": bool(short.any())}))
        out.append(Series(f"{label} efficiency", sw, measured["efficiency"][short].tolist(), col=2,
                          mode="replace", style={**warn, "showlegend": False}))
        shared = dict(mode="markers", marker_symbol="x-thin-open", marker_size=18, marker_line_width=2.5,
                      marker_color="#c0392b", legendgroup="busy", hoverinfo="skip")
        label = BUSY_LABEL
        bw = measured["workers"][busy].tolist()
        out.append(Series(label, bw, measured["samples_per_s"][busy].tolist(), col=1, mode="replace",
                          style={**shared, "showlegend": bool(busy.any())}))
        out.append(Series(f"{label} efficiency", bw, measured["efficiency"][busy].tolist(), col=2,
                          mode="replace", style={**shared, "showlegend": False}))
    return out


BUSY_LABEL = "other processes busy: measures the machine"


def machine_busy(table: pd.DataFrame) -> pd.Series:
    """Which sweep rows ran while other processes took a noticeable share of the cores
    (their `machine_note`, `workbench.util.machine.note`).

    >>> machine_busy(pd.DataFrame({"machine_note": [None, "other processes used 1.6 of 2 cores ..."]})).tolist()
    [False, True]
    """
    if "machine_note" not in table:
        return pd.Series(False, index=table.index)
    return table["machine_note"].map(lambda n: isinstance(n, str) and bool(n))


# ------------------------------------------------------------------------------ comparison
def comparison_series(results: Sequence[RunResult], labels: Sequence[str]) -> list[Series]:
    """Per run: steady samples/s (column 1) and the steady shares of compute / comm / wait
    (column 2), both `workbench.measure.steady`'s."""
    out = [Series("samples/s", list(labels), [float(r.summary.get("samples_per_s") or 0.0) for r in results],
                  col=1, trace="bar", mode="replace",
                  style={"marker_color": [run_color(i) for i in range(len(results))], "showlegend": False})]
    shares = []
    for r in results:
        st = measure.steady(r.steps) if len(r.steps) else None
        shares.append([st.compute_share, st.comm_share, st.wait_share] if st is not None else [0.0] * 3)
    for k, c in enumerate(COMPONENTS):
        out.append(Series(f"{COMPONENT_NAMES[c]} share", list(labels), [sh[k] for sh in shares], col=2,
                          trace="bar", mode="replace", style={"marker_color": COMPONENT_COLORS[c]}))
    return out
