"""Every RunConfig field against the outcomes of the validators it had before its
constraints moved onto the fields (`Annotated[...]` markers, pydantic's Field bounds).

`tests/config_oracle.json` holds, for each field and each probe value below, what the
old code did: the value it stored (its repr: 3 and 3.0 differ) or its exception's class
and one-line message. It was captured once from main before the move
(`python tests/test_config_fields.py --capture`) and is the oracle: the new code must
accept and refuse exactly the same values with exactly the same messages, through the
constructor and through assignment. A second test walks each constrained field's own
bounds (read from its Field metadata) just inside and just outside, plus a wrong type,
and checks those probes are in the oracle: a new bound cannot dodge the comparison.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from workbench.config import FIELDS, JITTER_MIN, MAX_EPOCHS, ConfigError, RunConfig, short_repr
from workbench.config.registry import LR_MAX

ORACLE = Path(__file__).with_name("config_oracle.json")


def _around(b: float) -> list:
    """b and its float neighbours (and, for a whole b, the ints beside it)."""
    out = [b, math.nextafter(b, -math.inf), math.nextafter(b, math.inf)]
    if float(b).is_integer() and abs(b) < 2**53:
        out += [int(b) - 1, int(b), int(b) + 1]
    return out


BOUNDS = (0.0, 1.0, 2.0, 10.0, JITTER_MIN, MAX_EPOCHS, LR_MAX)
PROBES: list = [
    None, True, False, "", "abc", [], [1], {}, "true", "false", " True ", "auto",
    2**70, 0.5, 1.5, 3.0, -1.5, 1e-300, 1e308, math.inf, -math.inf, math.nan,
    "3", " 3 ", "+3", "-1", "1.5", "3.0", "inf", "nan", "1e-6", "1e308", "2,4",
    "9" * 41, "9" * 39, np.int64(3), np.float64(0.5), np.bool_(True), 3 + 0j,
    -1, -2, -1.0, math.nextafter(-1.0, math.inf), -5e-324, -0.0,
]
for _b in BOUNDS:
    PROBES += _around(_b)
PROBES = list({f"{type(v).__name__}:{v!r}": v for v in PROBES}.values())

# A context per field in which its in-range values are accepted (the knob applies).
CONTEXT: dict[str, dict] = {
    "device": {"simulate": True, "gpus": 1}, "cpu_device": {"simulate": True}, "network": {"simulate": True},
    "timing_model": {"simulate": True}, "jitter": {"simulate": True}, "fail_worker": {"simulate": True},
    "beta1": {"optimizer": "adamw"}, "beta2": {"optimizer": "adamw"}, "eps": {"optimizer": "adamw"},
    "trust_coefficient": {"optimizer": "lars"}, "batch_size": {"cpus": 1},
    "compression_ratio": {"algorithm": "sync_sgd", "compression": "topk"},
    "compression_rank": {"algorithm": "sync_sgd", "compression": "powersgd"},
    "compression_levels": {"algorithm": "sync_sgd", "compression": "qsgd"},
    "alpha": {"algorithm": "async_easgd"}, "tau": {"algorithm": "async_easgd"},
    "trainers": {"algorithm": "ltfb", "cpus": 4}, "round_size": {"algorithm": "ltfb"},
    "tournament_size": {"algorithm": "ltfb"}, "lr_spread": {"algorithm": "ltfb"},
    "chunk_layers": {"algorithm": "cgdp"}, "post_local_epoch": {"algorithm": "post_local_sgd"},
    "outer_lr": {"algorithm": "diloco"}, "outer_momentum": {"algorithm": "diloco"},
    "warmup_epochs": {"warmup": "gradual"}, "cpus": {"simulate": True},
    "partitions": {"simulate": True, "cpu_device": "knl", "cpus": 1},
}
# The fields whose values are numbers, flags or lists of numbers (the names, texts and
# literals kept their own validators).
FIELDS_COMPARED = ("hidden", "n_samples", "n_features", "n_classes", "download", "cpus", "gpus", "latency_ms",
                   "bandwidth_gbps", "simulate", "jitter", "batch_size", "lr", "base_batch", "warmup_epochs",
                   "momentum", "nesterov", "weight_decay", "beta1", "beta2", "eps", "trust_coefficient", "tau",
                   "alpha", "trainers", "round_size", "tournament_size", "trainer_lrs", "lr_spread",
                   "exchange_state", "chunk_layers", "post_local_epoch", "outer_lr", "outer_momentum",
                   "compression_ratio", "compression_rank", "compression_levels", "error_feedback", "epochs",
                   "steps", "eval_every", "seed", "partitions")


def _key(value) -> str:
    return f"{type(value).__name__}:{value!r}"


def outcome(field: str, value, how: str) -> str:
    """What RunConfig does with `field=value`: "ok:<repr stored>", "E:<allowed>" for a
    ConfigError saying `<field>: <allowed>, got <value>`, else "X:<class>:<message>"."""
    ctx = {} if how.startswith("default") else CONTEXT[field]
    try:
        if how.endswith("assign"):
            cfg = RunConfig(**ctx)
            setattr(cfg, field, value)
        else:
            cfg = RunConfig(**{**ctx, field: value})
        return f"ok:{getattr(cfg, field)!r}"
    except Exception as exc:   # noqa: BLE001 - the class is part of the outcome
        text = str(exc)
        head, tail = f"{field}: ", f", got {short_repr(value)}"
        if type(exc) is ConfigError and text.startswith(head) and text.endswith(tail):
            return "E:" + text[len(head):-len(tail)]
        return f"X:{type(exc).__name__}:{text}"


def _hows(field: str) -> list[str]:
    return ["default"] + (["context", "context-assign"] if field in CONTEXT else ["default-assign"])


def walk() -> dict:
    """{field|how: {outcome: [probe keys]}} over every compared field and probe."""
    out: dict = {}
    for field in FIELDS_COMPARED:
        for how in _hows(field):
            by: dict = out.setdefault(f"{field}|{how}", {})
            for v in PROBES:
                by.setdefault(outcome(field, v, how), []).append(_key(v))
    return out


def _flat(walked: dict) -> dict:
    return {case: {p: o for o, probes in by.items() for p in probes} for case, by in walked.items()}


@pytest.fixture(scope="module")
def oracle() -> dict:
    return _flat(json.loads(ORACLE.read_text()))


# The only outcomes that changed on purpose: None for the communication-efficient knobs
# escaped as a bare TypeError from their hand-written range checks (a traceback at the
# CLI); now they say what the other numeric fields say for None.
FIXED = {f"{field}|{how}": {"NoneType:None": f"E:Input should be a valid {kind}"}
         for field, kind in [("post_local_epoch", "number"), ("outer_lr", "number"), ("outer_momentum", "number"),
                             ("compression_ratio", "number"), ("compression_rank", "integer"),
                             ("compression_levels", "integer")]
         for how in _hows(field)}


# Whole numbers beyond config.MAX_WHOLE (10^15), changed on purpose (issue 47): 2**70 was
# stored and met later as an OverflowError (`--steps 99999999999999999999999`), 41 nines
# said "an integer such as 32"; each now says the field's range and its cap.
HUGE = {"int:1180591620717411303424", "str:'" + "9" * 41 + "'", "str:'" + "9" * 39 + "'"}


def _capped(old: str, now: str) -> bool:
    """A huge whole number's new outcome: refused, naming the cap (where it was kept, or
    refused as not a whole number, before)."""
    return now.startswith("E:") and "at most 10^15" in now and old != now


def test_every_field_accepts_and_refuses_as_before(oracle):
    now = _flat(walk())
    assert set(oracle) <= set(now), sorted(set(oracle) - set(now))
    for case, fixed in FIXED.items():
        for probe, outcome_now in fixed.items():
            assert oracle[case][probe].startswith("X:TypeError:") and now[case][probe] == outcome_now
    capped = [(case, probe) for case, results in now.items() if case in oracle for probe in HUGE
              if probe in results and oracle[case].get(probe, results[probe]) != results[probe]]
    assert capped and all(_capped(oracle[c][p], now[c][p]) for c, p in capped), capped
    diffs = [(case, probe, oracle[case].get(probe), got)
             for case, results in now.items() if case in oracle
             for probe, got in results.items()
             if probe in oracle[case] and oracle[case][probe] != got and probe not in FIXED.get(case, {})
             and not (probe in HUGE and _capped(oracle[case][probe], got))]
    assert not diffs, "\n".join(f"{c} {p}: was {w}, now {g}" for c, p, w, g in diffs[:20])


def _bounds(field: str) -> list:
    """The field's numeric bounds from its Field metadata (annotated_types Ge/Gt/Le/Lt)."""
    out = []
    for m in RunConfig.model_fields[field].metadata:
        for attr in ("ge", "gt", "le", "lt"):
            if getattr(m, attr, None) is not None:
                out.append(getattr(m, attr))
    return out


CONSTRAINED = [f for f in FIELDS if _bounds(f)]


def test_the_constrained_fields_are_the_ranged_ones():
    assert {"batch_size", "lr", "momentum", "epochs", "seed", "n_samples", "jitter", "steps",
            "compression_ratio", "outer_lr"} <= set(CONSTRAINED)


# Fields added after the capture, each declared with the same type as a captured one: they
# must accept and refuse every probe exactly as that one does without a context (its messages
# name the field; the outcome strips the name); a field that applies only somewhere (the
# GPT's knobs) does so in its CONTEXT, against the captured field's outcomes without one.
SAME_AS = {"blas_threads": "round_size", "n_layers": "round_size", "d_model": "round_size", "n_heads": "round_size",
           "context": "round_size", "checkpoint_keep": "round_size", "out_private": "download",
           "min_workers": "steps", "elastic": "download", "standardize": "download",
           "grad_clip": "weight_decay", "early_stop": "steps", "accumulate": "round_size"}
_GPT = {"model": "gpt", "dataset": "markov_text", "algorithm": "sync_sgd"}
N_HEADS_MAX = 10**4
# min_workers applies with elastic, and is at most the workers: as many as a count may be
CONTEXT.update({"min_workers": {"algorithm": "sync_sgd", "elastic": True, "cpus": 10**15, "batch_size": 10**15},
                "elastic": {"algorithm": "sync_sgd"},
                # at most a worker's rows of a batch: one worker's batch as large as a count may be
                "accumulate": {"algorithm": "sgd", "batch_size": 10**15}})
CONTEXT.update({"n_layers": _GPT, "d_model": {**_GPT, "n_heads": 1}, "context": _GPT,
                # a d_model every accepted probe up to N_HEADS_MAX divides, so n_heads meets only its own
                # bounds (the probes near 10^6 together need a d_model past the cap of 10^15)
                "n_heads": {**_GPT, "d_model": math.lcm(*(int(o[3:]) for o in json.loads(ORACLE.read_text())
                                                          ["round_size|default"]
                                                          if o.startswith("ok:") and int(o[3:]) <= N_HEADS_MAX))}})
# Fields added after the capture with bounds no captured field has: what they allow, said in
# their one-line errors; their bounds are walked against it (inside: kept, outside or a
# wrong type: refused with exactly this text).
NEW_BOUNDED = {"test_fraction": "a number in (0, 1)", "val_fraction": "a number in [0, 1)"}
INSIDE = {"test_fraction": lambda v: 0 < v < 1, "val_fraction": lambda v: 0 <= v < 1}
# inside the type's bounds, but refused by the data: a share of digits' 1,438 training rows that holds none out
TOO_FEW = {"val_fraction": (lambda v: 0 < v < 1 / 1438, "0, or at least 1/1,438 = 0.000695, so that at least one "
                            "of the 1,438 training rows is held out")}


def _whole_above(v, limit: int) -> bool:
    """Whether probe `v` is a whole number (or its text) above `limit`."""
    try:
        return not isinstance(v, bool) and float(v) == int(float(v)) and int(float(v)) > limit
    except (TypeError, ValueError, OverflowError):
        return False


def _walk_new_bounds(field: str) -> None:
    allowed = NEW_BOUNDED[field]
    for b in _bounds(field):
        for value in (b, math.nextafter(b, -math.inf), math.nextafter(b, math.inf), True, "abc"):
            got = outcome(field, value, "default")
            if isinstance(value, (bool, str)):
                assert got == "E:a number (not true/false)", (field, value, got)
            elif field in TOO_FEW and TOO_FEW[field][0](value):
                assert got == f"E:{TOO_FEW[field][1]}", (field, value, got)
            elif INSIDE[field](value):
                assert got == f"ok:{float(value)!r}", (field, value, got)
            else:
                assert got == f"E:{allowed}", (field, value, got)


@pytest.mark.parametrize("field", CONSTRAINED)
def test_each_bound_just_inside_and_outside_and_a_wrong_type(field, oracle):
    if field in NEW_BOUNDED:
        _walk_new_bounds(field)
        return
    kind = RunConfig.model_fields[field].annotation
    whole = "int" in str(kind)
    source = SAME_AS.get(field, field)
    own = "context" if source != field and field in CONTEXT else "default"   # where the new field applies
    if source != field:
        assert kind == RunConfig.model_fields[source].annotation and _bounds(field) == _bounds(source)
        probes = [v for v in PROBES if field != "n_heads" or not _whole_above(v, N_HEADS_MAX)]
        assert all(outcome(field, v, own) == oracle[f"{source}|default"][_key(v)]
                   or (_key(v) in HUGE and _capped(oracle[f"{source}|default"][_key(v)], outcome(field, v, own)))
                   for v in probes)
    hows = ["default"] if source != field else _hows(field)
    for b in _bounds(field):
        probes = [b - 1, b, b + 1] if whole and not isinstance(b, float) else \
            [b, math.nextafter(b, -math.inf), math.nextafter(b, math.inf)]
        for value in probes + [True, "abc"]:
            for how in hows:
                key = _key(value)
                assert key in oracle[f"{source}|{how}"], f"{field}: probe {key} was not captured"
                got = outcome(field, value, own if source != field else how)
                assert got == oracle[f"{source}|{how}"][key], (field, how, key)
    results = oracle[f"{source}|{_hows(source)[-2]}"].values()
    assert any(r.startswith("ok:") for r in results) and any(r.startswith("E:") for r in results)


if __name__ == "__main__" and sys.argv[1:] == ["--capture"]:
    ORACLE.write_text(json.dumps(walk(), indent=0, sort_keys=True, ensure_ascii=True) + "\n")
    print(f"wrote {ORACLE}")
