"""Tests for workbench.maths.schedules: tables of expected values plus endpoints."""

import inspect
import itertools
import math

import pytest

from workbench.maths import schedules
from workbench.maths.schedules import (
    DECAYS,
    SCALING_RULES,
    WARMUPS,
    constant,
    constant_warmup,
    cosine_decay,
    describe,
    gradual_warmup,
    join,
    lr_table,
    make_schedule,
    scaled_lr,
    step_decay,
)

approx = pytest.approx


# --- scaled_lr ---

@pytest.mark.parametrize("lr, batch_size, base_batch, rule, expected", [
    (0.1, 256, 256, "linear", 0.1),
    (0.1, 2048, 256, "linear", 0.8),
    (0.1, 64, 256, "linear", 0.025),   # smaller batch scales down
    (0.1, 1024, 256, "sqrt", 0.2),
    (0.1, 2048, 256, "sqrt", 0.1 * math.sqrt(8)),
    (0.1, 64, 256, "sqrt", 0.05),
    (0.1, 2048, 256, "none", 0.1),
])
def test_scaled_lr(lr, batch_size, base_batch, rule, expected):
    assert scaled_lr(lr, batch_size, base_batch, rule) == approx(expected)


# --- building blocks: step 0, middle, boundary, end, past the end ---

@pytest.mark.parametrize("factory, steps, expected", [
    (lambda: constant(0.3), (0, 5, 10**9), (0.3, 0.3, 0.3)),
    # gradual: 0.1 -> 0.5 over 4 steps
    (lambda: gradual_warmup(0.1, 0.5, 4), (0, 1, 2, 3, 4, 5, 1000),
     (0.1, 0.2, 0.3, 0.4, 0.5, 0.5, 0.5)),
    (lambda: gradual_warmup(0.0, 1.0, 10), (0, 5, 9, 10, 11), (0.0, 0.5, 0.9, 1.0, 1.0)),
    (lambda: gradual_warmup(0.1, 0.5, 0), (0, 1, 100), (0.5, 0.5, 0.5)),
    (lambda: gradual_warmup(0.8, 0.2, 2), (0, 1, 2), (0.8, 0.5, 0.2)),   # may go down
    # constant: 0.1 until step 3, then 0.8
    (lambda: constant_warmup(0.1, 0.8, 3), (0, 1, 2, 3, 4, 1000),
     (0.1, 0.1, 0.1, 0.8, 0.8, 0.8)),
    (lambda: constant_warmup(0.1, 0.8, 0), (0, 1), (0.8, 0.8)),
    # step: 1.0 cut by 10x every 30 steps
    (lambda: step_decay(1.0, 30), (0, 15, 29, 30, 59, 60, 89, 90),
     (1.0, 1.0, 1.0, 0.1, 0.1, 0.01, 0.01, 0.001)),
    (lambda: step_decay(0.4, 1, 0.5), (0, 1, 2, 3), (0.4, 0.2, 0.1, 0.05)),
    (lambda: step_decay(0.4, 5, 1.0), (0, 5, 500), (0.4, 0.4, 0.4)),
    # cosine: 1.0 -> 0 over 100 steps
    (lambda: cosine_decay(1.0, 100), (0, 25, 50, 75, 99, 100, 1000),
     (1.0, 0.5 + 0.5 * math.cos(math.pi / 4), 0.5, 0.5 - 0.5 * math.cos(math.pi / 4),
      0.5 + 0.5 * math.cos(math.pi * 0.99), 0.0, 0.0)),
    (lambda: cosine_decay(0.8, 10, 0.25), (0, 5, 10, 11), (0.8, 0.5, 0.2, 0.2)),
    (lambda: cosine_decay(0.8, 10, 1.0), (0, 5, 10), (0.8, 0.8, 0.8)),
])
def test_factory_values(factory, steps, expected):
    sched = factory()
    got = [sched(t) for t in steps]
    assert got == approx(list(expected), abs=1e-12)
    assert all(isinstance(v, float) for v in got)


def test_warmups_hit_target_exactly_at_boundary():
    # float rounding in the ramp must not leave the boundary a hair off the target
    assert gradual_warmup(0.1, 0.7, 3)(3) == 0.7
    assert constant_warmup(0.1, 0.7, 3)(3) == 0.7


def test_negative_steps_count_as_step_zero():
    for sched in (gradual_warmup(0.1, 0.5, 4), constant_warmup(0.1, 0.5, 4),
                  step_decay(1.0, 2), cosine_decay(1.0, 10), constant(0.2)):
        assert sched(-3) == sched(0)


def test_join():
    sched = join(gradual_warmup(0.0, 1.0, 4), cosine_decay(1.0, 4), boundary=4)
    steps = (0, 2, 3, 4, 6, 8, 9)
    assert [sched(t) for t in steps] == approx([0.0, 0.5, 0.75, 1.0, 0.5, 0.0, 0.0])
    # boundary 0: only `after`, with its own count
    assert join(constant(9.0), step_decay(1.0, 1, 0.5), 0)(2) == 0.25


# --- make_schedule ---

def reference_lr(t, *, lr, batch_size, base_batch, lr_scaling="none", warmup="none",
                 warmup_steps=0, decay="none", total_steps, decay_step_size=None,
                 decay_factor=0.1, final_fraction=0.0):
    """The recipe written out once more as a plain branchy function: the oracle."""
    ratio = batch_size / base_batch
    target = {"none": lr, "linear": lr * ratio, "sqrt": lr * ratio ** 0.5}[lr_scaling]
    w = warmup_steps if warmup != "none" else 0
    if t < w:
        return lr + (target - lr) * t / w if warmup == "gradual" else lr
    s, remaining = t - w, total_steps - w
    if decay == "step":
        size = decay_step_size or max(1, -(-remaining // 3))
        return target * decay_factor ** (s // size)
    if decay == "cosine":
        progress = min(s / max(remaining, 1), 1.0)
        low = target * final_fraction
        return low + (target - low) * (1 + math.cos(math.pi * progress)) / 2
    return target


BASE = dict(lr=0.1, batch_size=2048, base_batch=256)


@pytest.mark.parametrize("kwargs, steps, expected", [
    # linear x gradual x cosine: 0.1 -> 0.8 over 500, then cosine to 0 over 4500
    (dict(BASE, lr_scaling="linear", warmup="gradual", warmup_steps=500, decay="cosine",
          total_steps=5000),
     (0, 250, 499, 500, 2750, 4999, 5000, 6000),
     (0.1, 0.45, 0.1 + 0.7 * 499 / 500, 0.8, 0.4,
      0.4 * (1 + math.cos(math.pi * 4499 / 4500)), 0.0, 0.0)),
    # constant warmup: base until the boundary, then the jump
    (dict(BASE, lr_scaling="linear", warmup="constant", warmup_steps=100, total_steps=1000),
     (0, 50, 99, 100, 999, 2000), (0.1, 0.1, 0.1, 0.8, 0.8, 0.8)),
    # sqrt rule, gradual warmup, step decay with the default step size (900 / 3 = 300)
    (dict(BASE, lr_scaling="sqrt", warmup="gradual", warmup_steps=100, decay="step",
          total_steps=1000),
     (0, 50, 100, 399, 400, 700, 999),
     (0.1, 0.1 + (0.1 * 8 ** 0.5 - 0.1) / 2, 0.1 * 8 ** 0.5, 0.1 * 8 ** 0.5,
      0.01 * 8 ** 0.5, 0.001 * 8 ** 0.5, 0.001 * 8 ** 0.5)),
    # no scaling, no warmup, no decay: lr everywhere
    (dict(BASE, total_steps=10), (0, 5, 9, 100), (0.1, 0.1, 0.1, 0.1)),
    # no warmup: scaled lr from step 0
    (dict(BASE, lr_scaling="linear", decay="cosine", total_steps=100, final_fraction=0.5),
     (0, 50, 100), (0.8, 0.6, 0.4)),
    # warmup named but 0 steps: no warmup
    (dict(BASE, lr_scaling="linear", warmup="gradual", warmup_steps=0, total_steps=10),
     (0, 9), (0.8, 0.8)),
    # warmup steps but warmup "none": no warmup, decay over the whole run
    (dict(BASE, lr_scaling="linear", warmup_steps=50, decay="cosine", total_steps=100),
     (0, 50, 100), (0.8, 0.4, 0.0)),
    # explicit step size and factor
    (dict(BASE, decay="step", decay_step_size=10, decay_factor=0.5, total_steps=100),
     (0, 9, 10, 25), (0.1, 0.1, 0.05, 0.025)),
    # warmup fills the whole run
    (dict(BASE, lr_scaling="linear", warmup="gradual", warmup_steps=10, decay="cosine",
          total_steps=10),
     (0, 5, 9, 10), (0.1, 0.45, 0.1 + 0.7 * 0.9, 0.8)),
])
def test_make_schedule_values(kwargs, steps, expected):
    sched = make_schedule(**kwargs)
    assert [sched(t) for t in steps] == approx(list(expected), abs=1e-12)


def test_default_step_decay_gives_three_plateaus():
    sched = make_schedule(**BASE, decay="step", total_steps=90)
    assert sorted({sched(t) for t in range(90)}, reverse=True) == approx([0.1, 0.01, 0.001])


COMBINATIONS = [
    dict(BASE, lr_scaling=rule, warmup=warmup, warmup_steps=warmup_steps, decay=decay,
         total_steps=total_steps, final_fraction=final_fraction)
    for rule, warmup, decay, (warmup_steps, total_steps), final_fraction in itertools.product(
        SCALING_RULES, WARMUPS, DECAYS, [(0, 1), (0, 50), (10, 50), (50, 50), (1, 1)],
        [0.0, 0.3])
]


@pytest.mark.parametrize("kwargs", COMBINATIONS, ids=lambda k: describe(**k))
def test_make_schedule_matches_reference_and_never_starts_at_zero(kwargs):
    sched = make_schedule(**kwargs)
    assert sched(0) > 0
    steps = range(kwargs["total_steps"] + 5)
    assert [sched(t) for t in steps] == approx([reference_lr(t, **kwargs) for t in steps],
                                               rel=1e-12, abs=1e-15)


def test_step_zero_never_zero_with_tiny_lr_and_small_batch():
    for rule, warmup, decay in itertools.product(SCALING_RULES, WARMUPS, DECAYS):
        sched = make_schedule(lr=1e-12, batch_size=1, base_batch=65536, lr_scaling=rule,
                              warmup=warmup, warmup_steps=3, decay=decay, total_steps=10)
        assert sched(0) > 0


# --- describe and lr_table ---

@pytest.mark.parametrize("kwargs, expected", [
    (dict(BASE, lr_scaling="linear", warmup="gradual", warmup_steps=500, decay="cosine",
          total_steps=5000),
     "linear scaling 0.1 -> 0.8, gradual warmup 500 steps, cosine over 4500"),
    (dict(BASE, lr_scaling="sqrt", warmup="constant", warmup_steps=10, total_steps=100),
     "sqrt scaling 0.1 -> 0.282843, constant warmup 10 steps, constant over 90"),
    (dict(BASE, decay="step", total_steps=90),
     "no scaling, lr 0.1, no warmup, step decay x0.1 every 30 steps over 90"),
    (dict(BASE, lr_scaling="linear", decay="cosine", final_fraction=0.1, total_steps=100),
     "linear scaling 0.1 -> 0.8, no warmup, cosine to 0.08 over 100"),
    (dict(BASE, warmup="gradual", warmup_steps=0, total_steps=100),
     "no scaling, lr 0.1, no warmup, constant over 100"),
])
def test_describe(kwargs, expected):
    assert describe(**kwargs) == expected


def test_describe_takes_the_same_arguments_as_make_schedule():
    assert (inspect.signature(describe).parameters
            == inspect.signature(make_schedule).parameters)


@pytest.mark.parametrize("total_steps, points, expected_steps", [
    (1, 200, [0]),
    (5, 200, [0, 1, 2, 3, 4]),
    (5, 5, [0, 1, 2, 3, 4]),
    (10, 4, [0, 3, 6, 9]),
    (101, 5, [0, 25, 50, 75, 100]),
    (1000, 2, [0, 999]),
])
def test_lr_table_steps(total_steps, points, expected_steps):
    table = lr_table(constant(0.5), total_steps, points)
    assert [t for t, _ in table] == expected_steps
    assert all(lr == 0.5 for _, lr in table)


def test_lr_table_samples_the_schedule():
    sched = make_schedule(**BASE, lr_scaling="linear", warmup="gradual", warmup_steps=500,
                          decay="cosine", total_steps=5000)
    table = lr_table(sched, 5000)
    assert len(table) == 200
    assert table[0] == (0, 0.1)
    assert table[-1][0] == 4999
    assert all(lr == sched(t) for t, lr in table)
    assert [t for t, _ in table] == sorted({t for t, _ in table})


# --- argument checks: the message names the argument and echoes the value ---

INVALID = [
    # (call, argument name, value as echoed)
    (lambda: scaled_lr(0.0, 256, 256, "linear"), "lr", "0.0"),
    (lambda: scaled_lr(0.1, 0, 256, "linear"), "batch_size", "0"),
    (lambda: scaled_lr(0.1, 256, 0, "linear"), "base_batch", "0"),
    (lambda: scaled_lr(0.1, 256, 256, "cubic"), "rule", "'cubic'"),
    (lambda: constant(-1.0), "value", "-1.0"),
    (lambda: constant(float("inf")), "value", "inf"),
    (lambda: gradual_warmup(-0.1, 1.0, 5), "start", "-0.1"),
    (lambda: gradual_warmup(0.1, float("nan"), 5), "target", "nan"),
    (lambda: gradual_warmup(0.1, 1.0, -1), "warmup_steps", "-1"),
    (lambda: gradual_warmup(0.1, 1.0, 2.5), "warmup_steps", "2.5"),
    (lambda: constant_warmup(0.1, 1.0, -2), "warmup_steps", "-2"),
    (lambda: constant_warmup("0.1", 1.0, 2), "start", "'0.1'"),
    (lambda: step_decay(1.0, 0), "step_size", "0"),
    (lambda: step_decay(1.0, 10, 0.0), "factor", "0.0"),
    (lambda: step_decay(1.0, 10, 1.5), "factor", "1.5"),
    (lambda: cosine_decay(1.0, 0), "decay_steps", "0"),
    (lambda: cosine_decay(1.0, 10, -0.1), "final_fraction", "-0.1"),
    (lambda: cosine_decay(1.0, 10, 1.1), "final_fraction", "1.1"),
    (lambda: join(0.1, constant(0.1), 5), "warmup", "0.1"),
    (lambda: join(constant(0.1), None, 5), "after", "None"),
    (lambda: join(constant(0.1), constant(0.1), -1), "boundary", "-1"),
    (lambda: lr_table(None, 10), "schedule", "None"),
    (lambda: lr_table(constant(0.1), 0), "total_steps", "0"),
    (lambda: lr_table(constant(0.1), 10, 1), "points", "1"),
]


def recipe(**changes):
    kwargs = dict(lr=0.1, batch_size=2048, base_batch=256, lr_scaling="linear",
                  warmup="gradual", warmup_steps=10, decay="step", total_steps=100)
    kwargs.update(changes)
    return kwargs


RECIPE_INVALID = [
    (recipe(lr=0), "lr", "0"),
    (recipe(lr=-0.1), "lr", "-0.1"),
    (recipe(lr=float("nan")), "lr", "nan"),
    (recipe(lr=float("inf")), "lr", "inf"),
    (recipe(lr=True), "lr", "True"),
    (recipe(lr=None), "lr", "None"),
    (recipe(batch_size=0), "batch_size", "0"),
    (recipe(batch_size=64.0), "batch_size", "64.0"),
    (recipe(base_batch=-256), "base_batch", "-256"),
    (recipe(lr_scaling="Linear"), "lr_scaling", "'Linear'"),
    (recipe(warmup="slow"), "warmup", "'slow'"),
    (recipe(decay="exponential"), "decay", "'exponential'"),
    (recipe(warmup_steps=-1), "warmup_steps", "-1"),
    (recipe(warmup_steps=150), "warmup_steps", "150"),
    (recipe(total_steps=0), "total_steps", "0"),
    (recipe(decay_step_size=0), "decay_step_size", "0"),
    (recipe(decay_factor=0), "decay_factor", "0"),
    (recipe(decay_factor=1.01), "decay_factor", "1.01"),
    (recipe(final_fraction=-0.5), "final_fraction", "-0.5"),
    (recipe(final_fraction=2), "final_fraction", "2"),
]


@pytest.mark.parametrize("call, name, echoed", INVALID)
def test_factories_reject_bad_arguments(call, name, echoed):
    with pytest.raises(ValueError) as info:
        call()
    message = str(info.value)
    assert message.startswith(f"{name}: ")
    assert message.endswith(f", got {echoed}")


@pytest.mark.parametrize("build", [make_schedule, describe])
@pytest.mark.parametrize("kwargs, name, echoed", RECIPE_INVALID)
def test_recipe_rejects_bad_arguments(build, kwargs, name, echoed):
    with pytest.raises(ValueError) as info:
        build(**kwargs)
    message = str(info.value)
    assert message.startswith(f"{name}: ")
    assert message.endswith(f", got {echoed}")


def test_error_messages_say_what_is_allowed():
    with pytest.raises(ValueError, match=r"^lr: a finite number > 0, got nan$"):
        make_schedule(**recipe(lr=float("nan")))
    with pytest.raises(ValueError,
                       match=r"^warmup_steps: between 0 and total_steps \(100\), got 150$"):
        make_schedule(**recipe(warmup_steps=150))
    with pytest.raises(ValueError,
                       match=r"^lr_scaling: one of \('none', 'linear', 'sqrt'\), got 'cubic'$"):
        make_schedule(**recipe(lr_scaling="cubic"))


def test_valid_edge_values_are_accepted():
    make_schedule(**recipe(warmup_steps=0))
    make_schedule(**recipe(warmup_steps=100))
    make_schedule(**recipe(total_steps=1, warmup_steps=1))
    make_schedule(**recipe(decay_factor=1.0, final_fraction=0.0))
    make_schedule(**recipe(final_fraction=1.0))
    make_schedule(**recipe(batch_size=1, base_batch=1))


def test_public_names():
    assert SCALING_RULES == ("none", "linear", "sqrt")
    assert WARMUPS == ("none", "gradual", "constant")
    assert DECAYS == ("none", "step", "cosine")
    for name in schedules.__all__:
        assert hasattr(schedules, name)
