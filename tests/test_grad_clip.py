"""Gradient clipping by global norm (`config.grad_clip`, `maths.optim.clip_gradient`): the
closed form, every rule fed the clipped gradient by hand, torch's clip_grad_norm_ before
torch.optim.SGD (when torch is installed), every algorithm that clips against
single-process training that clips, a real Dask cluster, the counts in the summary, the
note, and the combinations refused."""
from __future__ import annotations

import html
import json

import numpy as np
import pytest

from workbench.config import ConfigError, RunConfig
from workbench.learning import clip_note, clip_text
from workbench.maths.models import make_model
from workbench.maths.optim import OptimizerSettings, clip_factor, layout_of, make_optimizer

MODEL = make_model("mlp", n_features=6, n_classes=3, hidden=[5])


def _grads(steps: int, seed: int = 0) -> tuple[np.ndarray, list[np.ndarray]]:
    """Parameters and gradients of norms 0.25 to 4 (float32): some under a clip of 1, most over."""
    rng = np.random.default_rng(seed)
    x0 = MODEL.init(seed).astype(np.float32)
    grads = []
    for t in range(steps):
        g = rng.standard_normal(MODEL.n_params)
        grads.append((g / np.linalg.norm(g) * (0.25 * 2.0 ** (t % 5))).astype(np.float32))   # 0.25 .. 4
    return x0, grads


def _by_hand(g: np.ndarray, c: float) -> np.ndarray:
    """clip_grad_norm_'s rule in float64: g * min(1, c / (||g|| + 1e-6))."""
    norm = float(np.sqrt(np.sum(g.astype(np.float64) ** 2)))
    return (g.astype(np.float64) * min(1.0, c / (norm + 1e-6))).astype(np.float32)


def test_clip_factor_is_clip_grad_norms_rule():
    assert clip_factor(4.0, 1.0) == 1.0 / (4.0 + 1e-6)
    assert clip_factor(0.5, 1.0) == 1.0 and clip_factor(0.0, 1.0) == 1.0
    assert clip_factor(float("inf"), 1.0) == 0.0
    assert clip_factor(float("nan"), 1.0) != clip_factor(float("nan"), 1.0)       # NaN: the run diverges


def test_a_clipped_step_is_x_minus_lr_times_the_rescaled_gradient_and_the_gradient_is_untouched():
    x0, grads = _grads(5)
    opt = make_optimizer(OptimizerSettings("sgd", grad_clip=1.0), layout_of(MODEL), np, np.float32)
    x = x0.copy()
    for g in grads:
        before, x_before = g.copy(), x.copy()
        opt.step(x, g, 0.1)
        assert np.array_equal(g, before)
        np.testing.assert_allclose(x, x_before - 0.1 * _by_hand(g, 1.0), rtol=0, atol=1e-6)
        assert np.linalg.norm((x_before - x) / 0.1) <= 1.0 + 1e-5                 # the step's gradient is <= c
    assert opt.state["clip"].tolist() == [5, 3]        # norms 0.25, 0.5, 1, 2, 4: the last three (1 > 1 - 1e-6)
    assert opt.state["clip_norm"].tolist() == pytest.approx([7.75, 4.0], rel=1e-5)   # their sum, the largest


@pytest.mark.parametrize("name, knobs", [
    ("sgd", dict(momentum=0.9, nesterov=True, weight_decay=1e-2)),
    ("adamw", dict(weight_decay=1e-2)),
    ("lars", dict(momentum=0.9, weight_decay=5e-4)),
    ("lamb", dict(weight_decay=1e-2)),
])
def test_every_rule_clips_before_its_update(name, knobs):
    # the oracle: the same rule without clipping, fed the gradient clipped by hand (weight decay is
    # the rule's, after the clip, as torch's clip_grad_norm_ before optimizer.step())
    x0, grads = _grads(10)
    clipped = make_optimizer(OptimizerSettings(name, grad_clip=0.7, **knobs), layout_of(MODEL), np, np.float32)
    plain = make_optimizer(OptimizerSettings(name, **knobs), layout_of(MODEL), np, np.float32)
    a, b = x0.copy(), x0.copy()
    for g in grads:
        clipped.step(a, g, 0.05)
        plain.step(b, _by_hand(g, 0.7), 0.05)
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert clipped.state["clip"].tolist() == [10, 6]        # norms 1, 2 and 4 of each five
    unclipped = x0.copy()
    fresh = make_optimizer(OptimizerSettings(name, **knobs), layout_of(MODEL), np, np.float32)
    for g in grads:
        fresh.step(unclipped, g, 0.05)
    assert np.abs(unclipped - a).max() > 1e-3                 # the clip changed the run


def test_clipped_momentum_sgd_matches_torch():
    torch = pytest.importorskip("torch")
    x0, grads = _grads(8)
    ours = make_optimizer(OptimizerSettings("sgd", momentum=0.9, weight_decay=1e-3, grad_clip=0.6), layout_of(MODEL),
                          np, np.float32)
    x = x0.copy()
    for g in grads:
        ours.step(x, g, 0.05)
    t = torch.tensor(x0.copy(), requires_grad=True)
    opt = torch.optim.SGD([t], lr=0.05, momentum=0.9, weight_decay=1e-3)
    for g in grads:
        t.grad = torch.tensor(g.copy())
        torch.nn.utils.clip_grad_norm_([t], max_norm=0.6)
        opt.step()
    np.testing.assert_allclose(x, t.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_a_chunk_cannot_be_clipped():
    opt = make_optimizer(OptimizerSettings("sgd", grad_clip=1.0), layout_of(MODEL), np, np.float32)
    x = np.ones(MODEL.n_params, np.float32)
    with pytest.raises(ValueError, match="grad_clip: the whole gradient"):
        opt.step(x, x, 0.1, 0, 10)


@pytest.mark.parametrize("algorithm, why", [
    ("hogwild_sgd", "its update is its own"), ("async_measgd", "its update is its own"),
    ("cgdp", "chunk of layers as its sum arrives"),
])
def test_what_cannot_clip_is_refused_naming_the_field(algorithm, why):
    with pytest.raises(ConfigError) as err:
        RunConfig(algorithm=algorithm, cpus=2, grad_clip=1.0)
    assert err.value.field == "grad_clip" and why in str(err.value)
    assert RunConfig(algorithm=algorithm, cpus=2).grad_clip == 0.0


# ---------------------------------------------------------------- in runs
def _same_clip(a: dict, b: dict) -> None:
    """Two runs' clip summaries: the same counts, norms within float32 sums' rounding."""
    assert (a["updates"], a["clipped"]) == (b["updates"], b["clipped"])
    assert a["mean_norm"] == pytest.approx(b["mean_norm"], rel=1e-5)
    assert a["largest_norm"] == pytest.approx(b["largest_norm"], rel=1e-5)


BASE = dict(dataset="digits", model="mlp", batch_size=64, seed=3, steps=20, lr=0.3, momentum=0.9)


@pytest.mark.parametrize("algorithm, cpus, extra", [
    ("sync_sgd", 2, {}), ("sync_sgd", 3, {"optimizer": "adamw", "lr": 0.01}),
    ("local_sgd", 1, {"tau": 4}), ("diloco", 1, {"tau": 1, "outer_lr": 1.0, "outer_momentum": 0.0}),
    ("async_sgd", 1, {"momentum": 0.0}), ("async_msgd", 1, {}),
])
def test_algorithms_that_clip_follow_single_process_training_that_clips(algorithm, cpus, extra):
    # one worker of a local-step algorithm, or the synchronous family's sum, is single-process
    # sgd with the same rule: clipping included, the runs agree; without it they differ
    from workbench.execution.engine import run_threads
    cfg = RunConfig(algorithm=algorithm, cpus=cpus, grad_clip=0.4, **{**BASE, **extra})
    ref = run_threads(cfg.replace(algorithm="sgd", cpus=2, tau=1, outer_lr=RunConfig.model_fields["outer_lr"].default,
                                  outer_momentum=RunConfig.model_fields["outer_momentum"].default))
    got = run_threads(cfg)
    assert got.status == ref.status == "completed"
    np.testing.assert_allclose(got.params, ref.params, rtol=0, atol=2e-5)
    clip = got.summary["grad_clip"]
    assert clip["updates"] == 20 and 0 < clip["clipped"] <= 20
    _same_clip(clip, ref.summary["grad_clip"])
    free = run_threads(cfg.replace(grad_clip=0.0))
    assert "grad_clip" not in free.summary
    assert np.abs(free.params - got.params).max() > 1e-3


def test_ltfb_trainers_of_two_workers_clip_the_trainers_summed_gradient_as_trainers_of_one():
    from workbench.execution.engine import run_threads
    kw = dict(algorithm="ltfb", trainers=2, round_size=10, grad_clip=0.4, **BASE)
    one, two = run_threads(RunConfig(cpus=2, **kw)), run_threads(RunConfig(cpus=4, **kw))
    np.testing.assert_allclose(one.params, two.params, rtol=0, atol=1e-4)
    _same_clip(one.summary["grad_clip"], two.summary["grad_clip"])
    assert 0 < one.summary["grad_clip"]["clipped"] <= one.summary["grad_clip"]["updates"] == 20


def test_a_clip_no_gradient_reaches_changes_nothing_and_says_so():
    from workbench.execution.engine import run_threads
    from workbench.measure import notes
    cfg = RunConfig(algorithm="sync_sgd", cpus=2, **BASE)
    free, huge = run_threads(cfg), run_threads(cfg.replace(grad_clip=1e6))
    assert np.array_equal(free.params, huge.params)                      # bitwise: the factor was never applied
    clip = huge.summary["grad_clip"]
    assert clip["clipped"] == 0 and 0 < clip["mean_norm"] <= clip["largest_norm"] < 1e6
    said = [n for n in notes(huge.summary) if n.startswith("grad_clip")]
    assert said == [clip_note(huge.summary["grad_clip"])] and "clipped none of the 20 updates" in said[0]
    tight = run_threads(cfg.replace(grad_clip=1e-3))
    assert tight.summary["grad_clip"]["clipped"] == 20
    assert any("nearly every one was scaled down to 0.001" in n for n in notes(tight.summary))


@pytest.mark.parametrize("algorithm, cpus", [("sgd", 1), ("sync_sgd", 3), ("async_sgd", 1)])
def test_the_norm_the_summary_gives_is_the_first_gradients_by_hand(algorithm, cpus):
    # one step: the only norm taken is that of the global batch's gradient at the initial parameters
    from workbench.data import global_batch
    from workbench.execution.engine import run_threads
    from workbench.problem import Problem
    cfg = RunConfig(algorithm=algorithm, cpus=cpus, grad_clip=1e6, **{**BASE, "steps": 1, "momentum": 0.0})
    clip = run_threads(cfg).summary["grad_clip"]
    problem = Problem.from_config(cfg)
    model, data = problem.new_model(), problem.data
    idx = global_batch(data.n_train, cfg.batch_size, cfg.seed, 0)
    _, g = model.loss_and_grad(model.init(cfg.seed), data.X_train[idx], data.y_train[idx])
    want = float(np.linalg.norm(g.astype(np.float64)))
    assert clip["updates"] == 1 and clip["clipped"] == 0
    assert clip["mean_norm"] == pytest.approx(want, rel=1e-5) and clip["largest_norm"] == pytest.approx(want, rel=1e-5)


@pytest.mark.cluster
def test_dask_sync_sgd_clips_as_single_process_sgd(client):
    from workbench.api import run
    from workbench.execution.engine import run_threads
    cfg = RunConfig(algorithm="sync_sgd", cpus=2, grad_clip=0.4, **BASE)
    ref = run_threads(cfg.replace(algorithm="sgd"))
    got = run(cfg, cluster=client, progress=False)
    assert got.status == "completed"
    np.testing.assert_allclose(got.params, ref.params, rtol=0, atol=1e-5)
    assert got.summary["grad_clip"]["clipped"] == ref.summary["grad_clip"]["clipped"] > 0


def test_the_simulator_charges_clipping_three_passes_and_the_run_is_otherwise_the_same():
    from workbench.api import run
    from workbench.problem import Problem
    from workbench.sim.costs import make_costs
    cfg = RunConfig(algorithm="sync_sgd", cpus=4, simulate=True, **BASE)
    model = Problem.from_config(cfg).new_model()
    plain, clipped = (make_costs(c, model, ["cpu"] * 4) for c in (cfg, cfg.replace(grad_clip=1e6)))
    assert clipped.update(0) == pytest.approx(plain.update(0) * (3 + 3) / 3)          # sgd's 3 passes, 3 more
    a, b = run(cfg, progress=False), run(cfg.replace(grad_clip=1e6), progress=False)
    assert np.array_equal(a.params, b.params)                                          # nothing was clipped
    assert b.summary["wall_time_s"] > a.summary["wall_time_s"]                         # but the norm was taken


def test_the_cli_and_the_report_say_how_often_it_clipped(tmp_path, capsys):
    from workbench.apps.cli import main
    out = tmp_path / "run"
    assert main(["run", "--algorithm", "sync_sgd", "--cpus", "2", "--simulate", "--steps", "20", "--lr", "0.3",
                 "--grad-clip", "0.4", "--out", str(out), "--no-progress"]) == 0
    said = [line.strip() for line in capsys.readouterr().out.splitlines() if "gradient clipping at norm 0.4" in line]
    summary = json.loads((out / "summary.json").read_text())
    assert said == [clip_text(summary["grad_clip"])]
    assert "of 20 updates clipped" in said[0] and "every update" in said[0]
    report = (out / "report.html").read_text()
    assert html.escape(said[0]) in report
