"""The papers' numbers beside ours: docs/reproductions.md's table, run.

Each row of the table names a paper's number, ours, a tolerance and a verdict ("held": ours
within the tolerance of the paper's; "gap": outside it, for the reason the row gives). The
simulated runs are deterministic (virtual time on fixed device profiles), so ours must be the
number the docs print, to its last digit, and the verdict must follow from the paper's number
(the oracle) and the stated tolerance. A change that moves a number fails here until the
docs say the new one.
"""
from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

from workbench.config import RunConfig
from workbench.execution.engine import run

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "reproductions.md"


def _number(cell: str) -> tuple[float, int]:
    """`"88.0%"` -> (0.880, 3 decimals), `"2.64x"` -> (2.64, 2), `"+9.9%"` -> (0.099, 3)."""
    m = re.search(r"[+-]?\d+(?:\.(\d+))?", cell)
    assert m, cell
    value, decimals = float(m.group(0)), len(m.group(1) or "")
    if "%" in cell:
        return value / 100, decimals + 2
    return value, decimals


def _table() -> dict[str, dict[str, str]]:
    text = DOC.read_text()
    start = text.index("## The papers' numbers beside ours")
    rows = {}
    for line in text[start:].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 7 and not set(cells[0]) <= {"-"} and cells[0] != "id":
            rows[cells[0]] = dict(zip(("claim", "paper", "ours", "tolerance", "verdict", "run"), cells[1:]))
    return rows


# --------------------------------------------------------------------------- our numbers, measured
def _sim(**fields) -> dict:
    return run(RunConfig(simulate=True, cpus=0, seed=0, **fields)).summary


_SC17_STEP_S: dict[str, float] = {}


@cache
def _sc17() -> dict[str, float]:
    # sim_sc17's chain: 8 K80s, AlexNet's timing, PCIe 3, 72 per GPU, 100 steps, one evaluation
    base = dict(algorithm="sync_easgd", gpus=8, device="k80", timing_model="alexnet", network="pcie3",
                dataset="mnist1d", n_samples=40000, model="mlp", hidden=[128], batch_size=8 * 72, lr=0.1, tau=1,
                steps=100, eval_every=100)
    s = {"easgd": _sim(**{**base, "algorithm": "easgd"})}
    for path in ("tree_host", "tree_device", "tree_device_overlap"):
        s[path] = _sim(**base, elastic_sync=path)
    sps = {k: v["samples_per_s"] for k, v in s.items()}
    _SC17_STEP_S.update({k: 8 * 72 / v for k, v in sps.items()})   # virtual seconds a step
    return {"sc17_share_easgd": s["easgd"]["comm_fraction"],
            "sc17_share_sync_easgd": s["tree_device_overlap"]["comm_fraction"],
            "sc17_gain_tree": sps["tree_host"] / sps["easgd"],
            "sc17_gain_device": sps["tree_device"] / sps["tree_host"],
            "sc17_gain_overlap": sps["tree_device_overlap"] / sps["tree_device"],
            "sc17_gain_total": sps["tree_device_overlap"] / sps["easgd"]}


@cache
def _sc17_headline() -> dict[str, float]:
    # sim_sc17's headline pair: easgd and sync_easgd on 8 K80s at AlexNet's 128 per GPU, 10 epochs
    from workbench.analysis.shape import time_to_accuracy
    cfg = RunConfig(dataset="mnist1d", n_samples=40000, model="mlp", hidden=[128], batch_size=8 * 128, lr=0.1, tau=1,
                    epochs=10, seed=0, simulate=True, gpus=8, cpus=0, device="k80", timing_model="alexnet",
                    network="pcie3")
    runs = {name: run(cfg.replace(algorithm=name)) for name in ("easgd", "sync_easgd")}
    target = min(r.summary["final_test_accuracy"] for r in runs.values())   # both reach it: the lower final
    return {"sc17_share_easgd_128": runs["easgd"].summary["comm_fraction"],
            "sc17_share_sync_easgd_128": runs["sync_easgd"].summary["comm_fraction"],
            "sc17_time_to_accuracy": time_to_accuracy(runs["easgd"], target) / time_to_accuracy(runs["sync_easgd"], target)}


ICPE = dict(gpus=4, device="p100", cpu_device="power8", network="nvlink1", dataset="mnist1d", model="mlp",
            hidden=[16, 32, 64], lr=0.05, chunk_layers="auto")


@cache
def _icpe() -> dict[str, float]:
    # icpe_sim's quick settings: 1 epoch of 6400 training examples, 32 per GPU (50 steps)
    got = {}
    for tm in ("alexnet", "vgg16", "googlenet", "resnet152"):
        cfg = dict(ICPE, n_samples=8000, batch_size=4 * 32, epochs=1, timing_model=tm)
        tdp, cgdp = _sim(**cfg, algorithm="sync_sgd"), _sim(**cfg, algorithm="cgdp")
        got[f"icpe_speedup_{tm}"] = tdp["wall_time_s"] / cgdp["wall_time_s"]
    weak = []
    for tm in ("alexnet", "vgg16", "googlenet", "resnet152"):   # per-GPU samples/s on 4 GPUs against 1
        cfg = dict(ICPE, n_samples=8000, steps=50, eval_every=50, timing_model=tm, algorithm="cgdp")
        one, four = _sim(**{**cfg, "gpus": 1, "batch_size": 32}), _sim(**cfg, batch_size=4 * 32)
        weak.append(four["samples_per_s"] / (4 * one["samples_per_s"]))
    got["icpe_weak_scaling"] = min(weak)
    return got


@cache
def _goyal() -> dict[str, float]:
    # goyal_sim's timing: ResNet-50 on P100s over a flat 100 GbE ring, 32 images per GPU
    step = {}
    for gpus in (8, 256, 352):
        cfg = RunConfig(algorithm="sync_sgd", simulate=True, gpus=gpus, cpus=0, device="p100", network="100GbE",
                        timing_model="resnet50", dataset="mnist1d", n_samples=40000, model="mlp", lr=0.05,
                        lr_scaling="none", batch_size=32 * gpus, steps=5, eval_every=5, seed=0)
        r = run(cfg)
        step[gpus] = float(r.steps.query("worker == 0").eval("compute_s + comm_s + wait_s").median())
    return {"goyal_weak_scaling": step[8] / step[256],   # per-worker rows/s at 256 against 8
            "goyal_iteration_time_44x": step[352] / step[8] - 1.0}


@cache
def _diloco() -> dict[str, float]:
    # DiLoCo's H = 500: two outer steps of 8 simulated workers against sync_sgd's 1000 allreduces
    from workbench.analysis.traffic import bytes_per_worker
    base = RunConfig(algorithm="sync_sgd", dataset="digits", model="mlp", hidden=[16], cpus=8, simulate=True,
                     network="10GbE", batch_size=64, lr=0.05, steps=1000, eval_every=1000, seed=0)
    sync, diloco = run(base), run(base.replace(algorithm="diloco", tau=500))
    return {"diloco_traffic_h500": bytes_per_worker(sync) / bytes_per_worker(diloco)}


MEASURE = {"sc17": _sc17, "sc17_headline": _sc17_headline, "icpe": _icpe, "goyal": _goyal, "diloco": _diloco}


def _within(ours: float, paper: float, tolerance: str) -> bool:
    """Whether `ours` is within the row's stated tolerance of the paper's number."""
    if tolerance == "at least 90%":
        return ours >= 0.90
    if tolerance == "85-95%":
        return 0.85 <= ours <= 0.95
    if tolerance.endswith(" points"):
        return abs(ours - paper) <= float(tolerance.split()[0]) / 100 + 1e-12
    if tolerance.endswith("%"):
        return abs(ours / paper - 1.0) <= float(tolerance[:-1]) / 100
    return abs(ours - paper) <= float(tolerance) + 1e-12


def _paper(cell: str) -> float:
    if cell in ("above 90%", "about 90%"):
        return 0.90
    return _number(cell)[0]


def test_the_table_names_every_number_this_file_measures():
    rows = _table()
    assert set(rows) == {"sc17_share_easgd", "sc17_share_sync_easgd", "sc17_gain_tree", "sc17_gain_device",
                         "sc17_gain_overlap", "sc17_gain_total", "sc17_share_easgd_128",
                         "sc17_share_sync_easgd_128", "sc17_time_to_accuracy", "icpe_speedup_alexnet", "icpe_speedup_vgg16",
                         "icpe_speedup_googlenet", "icpe_speedup_resnet152", "icpe_weak_scaling",
                         "goyal_weak_scaling", "goyal_iteration_time_44x", "diloco_traffic_h500"}, sorted(rows)
    for name, row in rows.items():
        assert row["verdict"] in ("held", "gap"), (name, row["verdict"])
        assert row["tolerance"], name      # every row states its tolerance


@pytest.mark.slow
@pytest.mark.parametrize("group", sorted(MEASURE))
def test_our_number_is_the_documented_one_and_the_verdict_follows_from_the_papers(group):
    measured = MEASURE[group]()
    rows = _table()
    for name, ours in measured.items():
        row = rows[name]
        documented, decimals = _number(row["ours"])
        # deterministic virtual time: the docs' number is ours rounded to the digits it prints
        assert abs(ours - documented) <= 0.5 * 10 ** -decimals + 1e-9, (name, ours, row["ours"])
        held = _within(ours, _paper(row["paper"]), row["tolerance"])
        assert row["verdict"] == ("held" if held else "gap"), (name, ours, row)


@pytest.mark.slow
def test_the_tree_steps_gap_is_the_arithmetic_its_row_gives():
    # the row explains 2.64x against the paper's 3.7x as a round of the round-robin master (8 x 114 ms)
    # against a local step plus the host-staged tree: the step times it names must be the runs'
    _sc17()
    row = _table()["sc17_gain_tree"]["run"]
    m = re.search(r"(\d+) ms = (\d+) ms; .*\((\d+) ms\) and the host-staged tree \((\d+) ms\), (\d+) ms: (\d+) / (\d+)", row)
    assert m, row
    exchange, round_ms, compute, tree, step_ms, num, den = map(int, m.groups())
    assert 8 * exchange == pytest.approx(round_ms, abs=2) and compute + tree == step_ms and (num, den) == (round_ms, step_ms)
    assert 1000 * _SC17_STEP_S["easgd"] == pytest.approx(round_ms, abs=1)
    assert 1000 * _SC17_STEP_S["tree_host"] == pytest.approx(step_ms, abs=1)
    assert 1000 * (_SC17_STEP_S["tree_host"] - _SC17_STEP_S["tree_device"]) == pytest.approx(exchange, abs=1)


@pytest.mark.parametrize(("tolerance", "ours", "paper", "held"), [
    ("5 points", 0.880, 0.87, True), ("5 points", 0.114, 0.14, True), ("5 points", 0.08, 0.14, False),
    ("25%", 2.64, 3.7, False), ("25%", 1.49, 1.3, True), ("0.06", 1.068, 1.21, False), ("0.06", 1.018, 1.07, True),
    ("at least 90%", 0.908, 0.90, True), ("at least 90%", 0.899, 0.90, False), ("85-95%", 0.93, 0.90, True),
    ("85-95%", 0.96, 0.90, False)])
def test_the_tolerances_read_as_stated(tolerance, ours, paper, held):
    assert _within(ours, paper, tolerance) is held


def test_numbers_parse_with_their_printed_digits():
    assert _number("88.0%") == (pytest.approx(0.88), 3)
    assert _number("2.64x") == (2.64, 2)
    assert _number("+9.9%") == (pytest.approx(0.099), 3)
    assert _number("1.186x") == (1.186, 3)
