"""Verdicts on a reproduction's expected shape, written by the experiment notebooks, and
the "paper vs simulated" table that sets them beside the papers' numbers.

An experiment file's `expected_shape` entries may carry `paper` (the paper's number for
that shape, as text, e.g. "87%"); a notebook's verdict carries `measured` (ours). The
table joins the two by shape id; `reproduce` puts it in report.html and the notebook
shows it (`ShapeChecks.table(experiment=...)`).
"""
from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

COLUMNS = ["id", "text", "paper", "measured", "margin", "verdict"]


def _evals(result: Any) -> Any:
    ev = result.evals
    return ev[ev["test_accuracy"].notna()].sort_values("time", kind="stable")


def accuracy_at(result: Any, t: float, between: bool = False) -> float | None:
    """The test accuracy of the last evaluation at or before time `t` (the run's own
    seconds: virtual ones for a simulated run); None before the first evaluation.
    Several evaluations at one time (LTFB's trainers): the best. `between`: read the curve
    through the evaluations instead, linearly between the last one at or before `t` and the
    next (as its figure draws it), so that a run is not read an evaluation late because
    its next one falls just after `t`.

    >>> import pandas as pd; from types import SimpleNamespace as R
    >>> r = R(evals=pd.DataFrame({"time": [1.0, 2.0, 3.0], "test_accuracy": [0.5, 0.7, 0.9]}))
    >>> accuracy_at(r, 2.5), accuracy_at(r, 3.0), accuracy_at(r, 0.5), round(accuracy_at(r, 2.5, between=True), 3)
    (0.7, 0.9, None, 0.8)
    """
    ev = _evals(result)
    best = ev.groupby("time", sort=True)["test_accuracy"].max()
    before = best[best.index <= t]
    if before.empty:
        return None
    t0, a0 = float(before.index[-1]), float(before.iloc[-1])
    after = best[best.index > t]
    if not between or after.empty:
        return a0
    t1, a1 = float(after.index[0]), float(after.iloc[0])
    return a0 + (a1 - a0) * (t - t0) / (t1 - t0)


def time_to_accuracy(result: Any, target: float) -> float | None:
    """The time of the first evaluation reaching `target` test accuracy; None if none did.

    >>> import pandas as pd; from types import SimpleNamespace as R
    >>> r = R(evals=pd.DataFrame({"time": [1.0, 2.0, 3.0], "test_accuracy": [0.5, 0.7, 0.9]}))
    >>> time_to_accuracy(r, 0.7), time_to_accuracy(r, 0.95)
    (2.0, None)
    """
    ev = _evals(result)
    hit = ev[ev["test_accuracy"] >= target]
    return None if hit.empty else float(hit["time"].iloc[0])


def leads_at_common_time(pairs: Iterable[tuple[Any, Any, Any, str]]) -> tuple[float, str, list]:
    """For pairs (label, run a, run b, note): a's test accuracy minus b's at the time both
    runs reached (the earlier of their last evaluations), each read off the curve through
    its evaluations (`accuracy_at(between=True)`: a run whose last evaluation came a moment
    after the other's is read at about its last one, not at the one before it, an epoch
    earlier). Returns the smallest lead (NaN when a run has no evaluation by then: not
    ahead), the pairs as text, and the labels where a is not ahead.

    >>> import pandas as pd; from types import SimpleNamespace as R
    >>> a = R(evals=pd.DataFrame({"time": [1.0, 2.0], "test_accuracy": [0.5, 0.8]}))
    >>> b = R(evals=pd.DataFrame({"time": [1.0, 3.0], "test_accuracy": [0.6, 0.9]}))
    >>> lead, text, behind = leads_at_common_time([(4, a, b, ""), (8, b, a, " (tuned)")])
    >>> round(lead, 3), text, behind
    (-0.05, '4: 0.8 vs 0.75 at 2 s; 8 (tuned): 0.75 vs 0.8 at 2 s', [8])
    """
    leads, parts, behind = [], [], []
    for label, ra, rb, note in pairs:
        t = min(float(ra.evals["time"].max()), float(rb.evals["time"].max()))
        a, b = accuracy_at(ra, t, between=True), accuracy_at(rb, t, between=True)
        leads.append(math.nan if a is None or b is None else a - b)
        if not leads[-1] > 0:
            behind.append(label)
        parts.append(f"{label}{note}: {a if a is None else round(a, 3)} vs {b if b is None else round(b, 3)} at {t:.0f} s")
    lead = math.nan if not leads or any(x != x for x in leads) else min(leads)
    return lead, "; ".join(parts), behind


def verdict_word(held: bool | None, resolved: bool | None = None) -> str:
    """How a verdict reads in the tables ("not resolved": the effect was inside the spread
    over seeds, so the runs cannot tell it from noise).

    >>> verdict_word(True), verdict_word(False), verdict_word(None), verdict_word(False, resolved=False)
    ('held', 'did not hold', 'not checked', 'not resolved')
    """
    if held is False and resolved is False:
        return "not resolved"
    return "held" if held else ("did not hold" if held is False else "not checked")


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def _seed_list(seeds: list[int]) -> str:
    """Seeds as text.

    >>> _seed_list([0, 1, 2]), _seed_list([3, 7])
    ('0-2', '3, 7')
    """
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"{seeds[0]}-{seeds[-1]}"
    return ", ".join(map(str, seeds))


def combine_seeds(per_seed: dict[int, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One verdict per shape from the same notebook run once per seed (seed -> its verdicts).

    The rule ("held needs a margin beyond the run-to-run spread, measured over seeds"): for
    an effect (`compare`), each seed's distance from the threshold is d = by + margin (in the
    value's units, positive on the side the shape expects); the spread is half the range of
    d over the seeds (the median is known to +-spread); the verdict holds when the median d
    exceeds both the notebook's stated margin and that spread, or when every seed's d
    exceeds the margin (`by` = the larger of median d - max(margin, spread) and min d -
    margin; `inclusive`: at 0 too). With 2 seeds both are: both seeds beyond the margin; the
    second keeps one seed far out on the expected side (which widens the range) from making
    an effect every seed shows undecided. An effect whose median d lies within the spread of
    0 and whose seeds lie on both sides of the threshold (they cannot say on which side it
    is) is "not resolved" (`resolved` False): it does not hold, and its text says so; one
    beyond it on the wrong side "did not hold". `value` is the median value,
    `values` each seed's; `spread` says over which seeds and how wide, `spread_note` keeps
    the notebook's own note; `measured` is the first seed's text plus the range. A verdict
    missing from a seed was not measured there: it does not hold. One seed: the verdicts as
    they are, with `seeds`.

    >>> a = {"id": "gain", "held": True, "measured": "1.1x", "value": 1.1, "threshold": 1.0, "margin": 0.02,
    ...      "above": True, "inclusive": False, "spread": "one seed", "by": 0.08}
    >>> b = dict(a, value=1.3, by=0.28); c = dict(a, value=0.98, by=-0.04)
    >>> v = combine_seeds({0: [a], 1: [b], 2: [c]})[0]
    >>> v["held"], v["resolved"], round(v["value"], 2), round(v["seed_spread"], 2), round(v["by"], 2)
    (False, False, 1.1, 0.16, -0.04)
    >>> v["spread"]
    'over seeds 0-2: +-0.16 (0.98 to 1.3)'
    >>> v = combine_seeds({0: [a], 1: [a], 2: [dict(a, value=1.46, by=0.44)]})[0]   # every seed shows it
    >>> v["held"], v["resolved"], round(v["seed_spread"], 2), round(v["by"], 2)
    (True, True, 0.18, 0.08)
    >>> v = combine_seeds({0: [a], 1: [dict(a, value=1.12, by=0.1)]})[0]
    >>> v["held"], v["resolved"], round(v["by"], 3), v["values"]
    (True, True, 0.09, [1.1, 1.12])
    >>> v = combine_seeds({0: [dict(a, value=0.9, by=-0.12)], 1: [dict(a, value=0.9, by=-0.12)]})[0]
    >>> v["held"], v["resolved"], v["measured"]        # beyond the spread, on the wrong side
    (False, True, '1.1x (seed 0); over seeds 0, 1: +-0 (0.9 to 0.9)')
    """
    seeds = list(per_seed)
    if len(seeds) == 1:
        return [dict(v, seeds=seeds) for v in per_seed[seeds[0]]]
    ids: list[str] = []
    for vs in per_seed.values():
        ids += [v["id"] for v in vs if v["id"] not in ids]
    out = []
    for id in ids:
        got = {s: next((v for v in per_seed[s] if v["id"] == id), None) for s in seeds}
        first = next(v for v in got.values() if v is not None)
        missing = [s for s, v in got.items() if v is None]
        v = dict(first, seeds=seeds)
        if missing:
            v.update(held=False, measured=f"{first.get('measured', '')}; not measured for seed(s) {_seed_list(missing)}")
            out.append(v)
            continue
        runs = [got[s] for s in seeds]
        if not all("by" in r for r in runs):        # a bare check(): it holds for every seed or not at all
            v.update(held=all(r["held"] for r in runs),
                     measured=f"{first['measured']} (seed {seeds[0]}); held for seeds "
                              f"{_seed_list([s for s in seeds if got[s]['held']]) or 'none'} of {_seed_list(seeds)}")
            out.append(v)
            continue
        margin = float(first["margin"])
        d = [float(r["by"]) + margin for r in runs]
        values = [float(r["value"]) for r in runs]
        if any(x != x for x in d):                  # NaN: a seed did not measure it
            v.update(held=False, by=float("nan"), values=values, resolved=None,
                     measured=f"{first['measured']}; not measured for every seed (values {values})")
            out.append(v)
            continue
        spread, med = (max(d) - min(d)) / 2, _median(d)
        # every seed beyond the margin holds too: one seed far out on the expected side widens the
        # range (goyal_warmup's gradual-beats-constant: 0.15, 0.07 and 0.46 read "not resolved")
        by = max(med - max(margin, spread), min(d) - margin)
        inclusive = bool(first.get("inclusive"))
        held = bool(by >= 0) if inclusive else bool(by > 0)
        # resolved: the median lies beyond the spread on one side, or every seed lies on one side
        # (held or failed); otherwise undecided
        beyond = (lambda x: x >= 0) if inclusive else (lambda x: x > 0)
        resolved = beyond(abs(med) - spread) or all(beyond(x) for x in d) or all(beyond(-x) for x in d)
        text = f"over seeds {_seed_list(seeds)}: +-{spread:.3g} ({min(values):.4g} to {max(values):.4g})"
        if len({float(r["threshold"]) for r in runs}) > 1:      # a threshold measured per seed (another run's value)
            text = (f"over seeds {_seed_list(seeds)}: +-{spread:.3g} (distance from each seed's threshold "
                    f"{min(d):.4g} to {max(d):.4g}; values {min(values):.4g} to {max(values):.4g})")
        measured = f"{first['measured']} (seed {seeds[0]}); {text}"
        if not resolved:
            measured = (f"not resolved: the effect ({med:.3g} beyond the threshold, median over seeds) is inside "
                        f"the spread over seeds ({spread:.3g}); {measured}")
        v.update(held=held, resolved=resolved, value=_median(values), values=values, by=float(by),
                 by_seed=[float(r["by"]) for r in runs], seed_spread=float(spread), spread=text,
                 spread_note=str(first.get("spread", "")), measured=measured)
        out.append(v)
    return out


def margin_text(verdict: dict[str, Any]) -> str:
    """How far an effect had to clear its threshold, as text ("" for an exact check).

    >>> margin_text({"threshold": 1.0, "margin": 0.02, "above": True, "spread": "seeds 0-4"})
    '> 1 + 0.02 (spread: seeds 0-4)'
    >>> margin_text({"threshold": 0.25, "margin": 0.0, "above": False, "by": -0.031})
    '< 0.25; failed by 0.031'
    >>> margin_text({"threshold": 0.0, "margin": 0.0, "above": False, "inclusive": True, "by": 0.0})
    '<= 0; held by 0'

    A margin of 0 adds nothing to the threshold: it reads as the one number.
    """
    if "margin" not in verdict:
        return ""
    sign = (">" if verdict.get("above", True) else "<") + ("=" if verdict.get("inclusive") else "")
    op = "+" if verdict.get("above", True) else "-"
    spread = f" (spread: {verdict['spread']})" if verdict.get("spread") else ""
    held = "by" in verdict and (verdict["by"] >= 0 if verdict.get("inclusive") else verdict["by"] > 0)
    by = f"; {'held' if held else 'failed'} by {abs(verdict['by']):.3g}" if "by" in verdict else ""
    plus = f" {op} {verdict['margin']:g}" if verdict["margin"] else ""
    return f"{sign} {verdict['threshold']:g}{plus}{spread}{by}"


def sign_alone_note(verdict: dict[str, Any]) -> str:
    """What a held effect with a margin of 0 rests on, as text ("" for any other verdict): with
    no margin, an effect every seed shows on the expected side of its threshold holds however
    small it is, so it held on the seeds' signs alone; were there no effect (each seed on
    either side with even odds), N seeds all land on the expected side 1 time in 2^N. One
    held by its median beyond the seeds' range, with a seed on the other side, says that.

    >>> v = {"held": True, "margin": 0.0, "by": 0.01, "by_seed": [0.01, 0.3, 0.02], "seeds": [0, 1, 2]}
    >>> sign_alone_note(v)
    'margin 0: held on the sign of each of 3 seeds alone (with no effect, 1 in 8 by chance)'
    >>> sign_alone_note({"held": True, "margin": 0.0, "by": 0.2, "seeds": [0]})
    'margin 0: held on the sign of 1 seed alone (with no effect, 1 in 2 by chance)'
    >>> sign_alone_note(dict(v, by_seed=[-0.01, 0.5, 0.6]))
    'margin 0: held on the median of 3 seeds beyond their range, one or more seeds on the other side'
    >>> sign_alone_note(dict(v, margin=0.02)), sign_alone_note(dict(v, held=False)), sign_alone_note({"held": True})
    ('', '', '')
    """
    if not verdict.get("held") or verdict.get("margin") != 0 or "by" not in verdict:
        return ""
    by_seed = [float(b) for b in verdict.get("by_seed") or [verdict["by"]]]
    n = len(by_seed)
    if all(b > 0 for b in by_seed):
        return f"margin 0: held on the sign of {'each of ' if n > 1 else ''}{n} seed{'s' if n > 1 else ''} alone " \
               f"(with no effect, 1 in {2 ** n} by chance)"
    if n > 1 and any(b < 0 for b in by_seed):
        return f"margin 0: held on the median of {n} seeds beyond their range, one or more seeds on the other side"
    return ""   # (inclusive, a seed exactly at the threshold: an exact check, not a sign)


def paper_vs_measured(expected_shape: Iterable[dict[str, Any]], verdicts: Iterable[dict[str, Any]]) -> list[dict]:
    """One row per expected shape: id, text, the paper's number, ours, the verdict.

    A shape the notebook did not measure reads "not measured" / "not checked"; one
    without a paper number has paper "" (the paper reported it in words).

    >>> rows = paper_vs_measured([{"id": "comm", "text": "mostly comm", "paper": "87%"}, {"id": "x", "text": "t"}],
    ...                          [{"id": "comm", "held": True, "measured": "91%"}])
    >>> [(r["id"], r["paper"], r["measured"], r["verdict"]) for r in rows]
    [('comm', '87%', '91%', 'held'), ('x', '', 'not measured', 'not checked')]
    """
    by_id = {v["id"]: v for v in verdicts}
    rows = []
    for check in expected_shape:
        v = by_id.get(check["id"], {})
        rows.append({"id": check["id"], "text": check["text"], "paper": str(check.get("paper", "")),
                     "measured": str(v.get("measured", "not measured")), "held": v.get("held"),
                     "verdict": verdict_word(v.get("held"), v.get("resolved")), "margin": margin_text(v),
                     "note": sign_alone_note(v)})
    return rows


QUICK_SKIPPED = "skipped in quick mode"   # the verdict of a shape quick mode's parameters cannot reproduce


def skip_in_quick(rows: list[dict[str, Any]], quick_skips: dict[str, str]) -> list[dict[str, Any]]:
    """`paper_vs_measured` rows with the shapes an experiment's `quick_skips` names marked
    "skipped in quick mode" (held None), the reason after what was measured: a quick run
    says what it cannot show instead of a verdict of False. The input is not changed.

    >>> rows = [{"id": "gain", "measured": "0.2 points", "held": False, "verdict": "did not hold"}]
    >>> r = skip_in_quick(rows, {"gain": "3 epochs: too short"})[0]
    >>> r["verdict"], r["held"], r["measured"]
    ('skipped in quick mode', None, '0.2 points (quick mode: 3 epochs: too short)')
    >>> rows[0]["verdict"]
    'did not hold'
    """
    return [dict(r, held=None, verdict=QUICK_SKIPPED, measured=f"{r['measured']} (quick mode: {quick_skips[r['id']]})")
            if r["id"] in quick_skips else dict(r) for r in rows]


class ShapeChecks:
    """Collects `check(id, held, measured)` calls and writes `out_dir/shape.json`.

    >>> checks = ShapeChecks()
    >>> checks.check("faster", 2.0 > 1.0, "2.0x")
    True
    >>> checks.verdicts[0]["held"]
    True
    """

    def __init__(self) -> None:
        self.verdicts: list[dict[str, Any]] = []

    def check(self, id: str, held: bool, measured: str) -> bool:
        """Record whether the expected shape `id` held, with what was measured (an exact
        shape: the same trajectory, a flag; an effect with a size goes through `compare`)."""
        self.verdicts.append({"id": id, "held": bool(held), "measured": str(measured)})
        return bool(held)

    def compare(self, id: str, value: float | None, threshold: float, margin: float, *, above: bool = True,
                inclusive: bool = False, measured: str | None = None, spread: str = "") -> bool:
        """Record an effect's verdict: it holds only when `value` clears `threshold` by more
        than `margin`, the run-to-run spread of that value (over seeds; stated in shape.json
        with `spread`, how it was measured; 0 with `spread` saying why where none was
        measured). An effect inside the spread "did not hold": the run cannot tell it from
        noise. shape.json gets `by`: how far the value cleared threshold and margin
        (positive: held by that much) or fell short of them (negative), in `value`'s units.
        A check of several conditions passes the one closest to failing, or their ratios to
        their limits (threshold 1). `inclusive`: a value exactly at the limit holds too (for
        ">=" shapes and exact ones: a difference of 0 at threshold 0). None (not measured)
        never holds.

        >>> checks = ShapeChecks()
        >>> checks.compare("gain", 1.003, 1.0, margin=0.02, measured="1.003x")      # inside the spread
        False
        >>> checks.compare("gap", 4.0, 1.0, margin=0.5, above=True), checks.verdicts[-1]["margin"]
        (True, 0.5)
        >>> checks.compare("error", 0.2, 1.0, margin=0.5, above=False)              # below 1 - 0.5
        True
        >>> round(checks.verdicts[-1]["by"], 3), round(checks.verdicts[0]["by"], 3)
        (0.3, -0.017)
        >>> checks.compare("none", None, 1.0, margin=0.0)                          # not measured: fails
        False
        >>> checks.compare("same", 0.0, 0.0, margin=0.0, above=False), checks.compare("same", 0.0, 0.0, 0.0, inclusive=True)
        (False, True)
        """
        if not (margin >= 0):
            raise ValueError(f"margin: the run-to-run spread, >= 0, got {margin=}")
        value = float(value) if value is not None else float("nan")
        by = value - threshold - margin if above else threshold - margin - value
        held = bool(by >= 0) if inclusive else bool(by > 0)      # NaN holds neither way
        self.verdicts.append({"id": id, "held": held, "measured": str(measured if measured is not None else value),
                              "value": value, "threshold": float(threshold), "margin": float(margin),
                              "above": bool(above), "inclusive": bool(inclusive), "spread": str(spread), "by": float(by)})
        return held

    def write(self, out_dir: str | Path) -> Path:
        path = Path(out_dir) / "shape.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.verdicts, indent=2))
        return path

    def table(self, experiment: str | Path | None = None, quick: bool = False) -> Any:
        """The verdicts as a pandas DataFrame (for the notebook to show).

        With `experiment` (an experiment file), the "paper vs simulated" table: one row
        per expected shape with the paper's number beside ours (`paper_vs_measured`),
        then any verdict measured beyond the expected shape (paper ""); with `quick`, the
        shapes its `quick_skips` names read "skipped in quick mode" (`skip_in_quick`), as
        `reproduce --quick` says them.
        """
        import pandas as pd
        if experiment is None:
            return pd.DataFrame(self.verdicts, columns=["id", "held", "measured"])
        from ..config import read_yaml  # the file's expected shape only (`reproduce` checks the whole file)
        data = read_yaml(experiment, "experiment")
        expected = [c for c in (data.get("expected_shape") or []) if isinstance(c, dict) and "id" in c] \
            if isinstance(data, dict) else []
        rows = paper_vs_measured(expected, self.verdicts)
        skips = data.get("quick_skips") if isinstance(data, dict) else None
        if quick and isinstance(skips, dict):
            rows = skip_in_quick(rows, {str(k): str(v) for k, v in skips.items()})
        ids = {c["id"] for c in expected}
        rows += [{"id": v["id"], "text": "(measured, not part of the expected shape)", "paper": "",
                  "measured": v["measured"], "margin": margin_text(v), "verdict": verdict_word(v["held"], v.get("resolved"))}
                 for v in self.verdicts if v["id"] not in ids]
        return pd.DataFrame(rows, columns=COLUMNS)
