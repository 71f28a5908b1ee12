"""Learning-rate schedules: scaling rules, warmup, then decay (Goyal et al. 2017).

A schedule is a plain function ``step -> lr``: ``step`` is the 0-based optimiser step
and the result is a float. Factories check their arguments once and return the
function, so a bad value fails before a run starts and the training loop pays only for
a little arithmetic per step. Steps before 0 count as step 0.

``make_schedule`` is the full recipe a run uses: scale the base ``lr`` to the global
``batch_size``, warm up from the base to the scaled value, then decay.

>>> sched = make_schedule(lr=0.1, batch_size=1024, base_batch=256, lr_scaling="linear",
...                       warmup="gradual", warmup_steps=4, decay="none", total_steps=10)
>>> [round(sched(t), 3) for t in range(6)]
[0.1, 0.175, 0.25, 0.325, 0.4, 0.4]
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = [
    "Schedule", "SCALING_RULES", "WARMUPS", "DECAYS", "scaled_lr", "constant",
    "gradual_warmup", "constant_warmup", "step_decay", "cosine_decay", "join",
    "make_schedule", "describe", "lr_table",
]

Schedule = Callable[[int], float]
"""A learning-rate schedule: 0-based step -> lr."""

SCALING_RULES = ("none", "linear", "sqrt")  # how lr grows with batch_size / base_batch
WARMUPS = ("none", "gradual", "constant")   # how lr gets from the base to the scaled value
DECAYS = ("none", "step", "cosine")         # what happens after warmup


# --- argument checks: each raises ValueError("<arg>: <what is allowed>, got <value>") ---

def _fail(name: str, allowed: str, value: Any) -> None:
    raise ValueError(f"{name}: {allowed}, got {value!r}")


def _is_number(value: Any) -> bool:
    # bool is an int subclass, but lr=True is a mistake, not 1.0
    return (isinstance(value, numbers.Real) and not isinstance(value, bool)
            and math.isfinite(value))


def _positive(name: str, value: Any) -> float:
    if not (_is_number(value) and value > 0):
        _fail(name, "a finite number > 0", value)
    return float(value)


def _non_negative(name: str, value: Any) -> float:
    if not (_is_number(value) and value >= 0):
        _fail(name, "a finite number >= 0", value)
    return float(value)


def _in_range(name: str, value: Any, allowed: str, ok: Callable[[float], bool]) -> float:
    if not (_is_number(value) and ok(value)):
        _fail(name, allowed, value)
    return float(value)


def _integer(name: str, value: Any, low: int, high: int | None = None,
             allowed: str | None = None) -> int:
    if (not isinstance(value, numbers.Integral) or isinstance(value, bool)
            or value < low or (high is not None and value > high)):
        _fail(name, allowed or f"an integer >= {low}", value)
    return int(value)


def _choice(name: str, value: Any, options: tuple[str, ...]) -> str:
    if value not in options:
        _fail(name, f"one of {options}", value)
    return value


def _schedule(name: str, value: Any) -> Schedule:
    if not callable(value):
        _fail(name, "a schedule (a function step -> lr)", value)
    return value


# --- scaling ---

def scaled_lr(lr: float, batch_size: int, base_batch: int, rule: str) -> float:
    """The learning rate for a global ``batch_size``, given ``lr`` tuned for ``base_batch``.

    Args:
        lr: eta_base, the rate that works for ``base_batch``; finite and > 0.
        batch_size: the global batch (all workers together), >= 1.
        base_batch: the batch ``lr`` was tuned for, >= 1.
        rule: ``"linear"`` (lr * B / B_base, Goyal et al.), ``"sqrt"``
            (lr * sqrt(B / B_base)) or ``"none"`` (lr as given).

    Returns:
        The scaled learning rate.

    >>> scaled_lr(0.1, 2048, 256, "linear")
    0.8
    >>> scaled_lr(0.1, 1024, 256, "sqrt")
    0.2
    >>> scaled_lr(0.1, 2048, 256, "none")
    0.1
    """
    lr = _positive("lr", lr)
    batch_size = _integer("batch_size", batch_size, 1)
    base_batch = _integer("base_batch", base_batch, 1)
    rule = _choice("rule", rule, SCALING_RULES)
    if rule == "linear":
        return lr * batch_size / base_batch
    if rule == "sqrt":
        return lr * math.sqrt(batch_size / base_batch)
    return lr


# --- building blocks ---

def constant(value: float) -> Schedule:
    """The same ``value`` at every step, step 0 included.

    >>> constant(0.1)(0), constant(0.1)(10**6)
    (0.1, 0.1)
    """
    value = _non_negative("value", value)

    def schedule(step: int) -> float:
        return value

    return schedule


def gradual_warmup(start: float, target: float, warmup_steps: int) -> Schedule:
    """Rise linearly from ``start`` to ``target`` over ``warmup_steps``, then hold ``target``.

    Goyal et al.: ``eta_t = start + (target - start) * t / T_w`` for ``t < T_w``.
    Step 0 gives ``start``; step ``warmup_steps`` and later give ``target``.
    With ``warmup_steps == 0`` every step gives ``target``.

    >>> sched = gradual_warmup(0.5, 1.5, 4)
    >>> [sched(t) for t in (0, 1, 2, 4, 100)]
    [0.5, 0.75, 1.0, 1.5, 1.5]
    """
    start = _non_negative("start", start)
    target = _non_negative("target", target)
    warmup_steps = _integer("warmup_steps", warmup_steps, 0)

    def schedule(step: int) -> float:
        t = max(step, 0)
        if t >= warmup_steps:
            return target  # exactly target, whatever the rounding in the ramp
        return start + (target - start) * t / warmup_steps

    return schedule


def constant_warmup(start: float, target: float, warmup_steps: int) -> Schedule:
    """Hold ``start`` for ``warmup_steps`` steps, then jump to ``target``.

    Step 0 gives ``start`` (``target`` if ``warmup_steps == 0``); from step
    ``warmup_steps`` on, ``target``. The jump is what causes the loss spike that
    Goyal et al. report at large batch.

    >>> sched = constant_warmup(0.1, 0.8, 3)
    >>> [sched(t) for t in (0, 2, 3, 100)]
    [0.1, 0.1, 0.8, 0.8]
    """
    start = _non_negative("start", start)
    target = _non_negative("target", target)
    warmup_steps = _integer("warmup_steps", warmup_steps, 0)

    def schedule(step: int) -> float:
        return start if step < warmup_steps else target

    return schedule


def step_decay(value: float, step_size: int, factor: float = 0.1) -> Schedule:
    """``value * factor ** (step // step_size)``: cut by ``factor`` every ``step_size`` steps.

    Step 0 gives ``value``; there is no end: it keeps falling by ``factor``.

    >>> sched = step_decay(1.0, 10, 0.5)
    >>> [sched(t) for t in (0, 9, 10, 25, 30)]
    [1.0, 1.0, 0.5, 0.25, 0.125]
    """
    value = _non_negative("value", value)
    step_size = _integer("step_size", step_size, 1)
    factor = _in_range("factor", factor, "a number in (0, 1]", lambda f: 0 < f <= 1)

    def schedule(step: int) -> float:
        return value * factor ** (max(step, 0) // step_size)

    return schedule


def cosine_decay(value: float, decay_steps: int, final_fraction: float = 0.0) -> Schedule:
    """Half a cosine from ``value`` down to ``value * final_fraction`` over ``decay_steps``.

    Step 0 gives ``value``; step ``decay_steps`` and later give ``value * final_fraction``.

    >>> sched = cosine_decay(1.0, 10, 0.1)
    >>> [round(sched(t), 4) for t in (0, 5, 10, 100)]
    [1.0, 0.55, 0.1, 0.1]
    """
    value = _non_negative("value", value)
    decay_steps = _integer("decay_steps", decay_steps, 1)
    final_fraction = _in_range("final_fraction", final_fraction, "a number in [0, 1]",
                               lambda f: 0 <= f <= 1)
    final = value * final_fraction

    def schedule(step: int) -> float:
        t = min(max(step, 0), decay_steps)
        return final + (value - final) * 0.5 * (1 + math.cos(math.pi * t / decay_steps))

    return schedule


def join(warmup: Schedule, after: Schedule, boundary: int) -> Schedule:
    """``warmup(t)`` for ``t < boundary``, then ``after(t - boundary)``.

    ``after`` sees its own step count, starting again at 0 at the boundary, so a decay
    starts from its full value when warmup ends.

    >>> sched = join(constant(0.1), step_decay(1.0, 2, 0.5), boundary=3)
    >>> [sched(t) for t in range(7)]
    [0.1, 0.1, 0.1, 1.0, 1.0, 0.5, 0.5]
    """
    warmup = _schedule("warmup", warmup)
    after = _schedule("after", after)
    boundary = _integer("boundary", boundary, 0)

    def schedule(step: int) -> float:
        return warmup(step) if step < boundary else after(step - boundary)

    return schedule


# --- the full recipe ---

class _Plan(NamedTuple):
    """make_schedule's arguments, checked and resolved into what the phases need."""
    lr: float             # eta_base: where warmup starts
    target: float         # scaled lr: where warmup ends and decay starts
    lr_scaling: str
    warmup: str           # "none" whenever there is no warmup phase
    warmup_steps: int     # 0 whenever there is no warmup phase
    decay: str
    decay_steps: int      # total_steps - warmup_steps
    decay_step_size: int  # resolved default for "step" decay
    decay_factor: float
    final_fraction: float


def _plan(*, lr, batch_size, base_batch, lr_scaling, warmup, warmup_steps, decay,
          total_steps, decay_step_size, decay_factor, final_fraction) -> _Plan:
    lr = _positive("lr", lr)
    batch_size = _integer("batch_size", batch_size, 1)
    base_batch = _integer("base_batch", base_batch, 1)
    lr_scaling = _choice("lr_scaling", lr_scaling, SCALING_RULES)
    warmup = _choice("warmup", warmup, WARMUPS)
    decay = _choice("decay", decay, DECAYS)
    total_steps = _integer("total_steps", total_steps, 1)
    warmup_steps = _integer("warmup_steps", warmup_steps, 0, total_steps,
                            f"between 0 and total_steps ({total_steps})")
    if decay_step_size is not None:
        decay_step_size = _integer("decay_step_size", decay_step_size, 1,
                                   allowed="None or an integer >= 1")
    decay_factor = _in_range("decay_factor", decay_factor, "a number in (0, 1]",
                             lambda f: 0 < f <= 1)
    final_fraction = _in_range("final_fraction", final_fraction, "a number in [0, 1]",
                               lambda f: 0 <= f <= 1)

    if warmup == "none" or warmup_steps == 0:
        warmup, warmup_steps = "none", 0
    decay_steps = total_steps - warmup_steps
    if decay_step_size is None:
        # three plateaus in the decay phase: two cuts, the third would fall past the end
        decay_step_size = max(1, math.ceil(decay_steps / 3))
    return _Plan(lr=lr, target=scaled_lr(lr, batch_size, base_batch, lr_scaling),
                 lr_scaling=lr_scaling, warmup=warmup, warmup_steps=warmup_steps,
                 decay=decay, decay_steps=decay_steps, decay_step_size=decay_step_size,
                 decay_factor=decay_factor, final_fraction=final_fraction)


def make_schedule(*, lr: float, batch_size: int, base_batch: int, lr_scaling: str = "none",
                  warmup: str = "none", warmup_steps: int = 0, decay: str = "none",
                  total_steps: int, decay_step_size: int | None = None,
                  decay_factor: float = 0.1, final_fraction: float = 0.0) -> Schedule:
    """The schedule for a run: scale, warm up, decay.

    The target is ``scaled_lr(lr, batch_size, base_batch, lr_scaling)``. Warmup goes
    from ``lr`` (eta_base) to the target over ``warmup_steps``; then decay runs over
    the remaining ``total_steps - warmup_steps`` steps, starting from the target.

    Step 0 gives ``lr`` with a warmup, the target without one; never 0. The last step
    (``total_steps - 1``) gives the target for ``decay="none"``, about
    ``target * decay_factor ** 2`` for the default step decay, and just above
    ``target * final_fraction`` for cosine (which reaches it at ``total_steps``).

    Args:
        lr: eta_base, the rate tuned for ``base_batch``; finite and > 0.
        batch_size: the global batch, >= 1.
        base_batch: the batch ``lr`` was tuned for, >= 1.
        lr_scaling: one of ``SCALING_RULES``.
        warmup: one of ``WARMUPS``; ``"none"`` or ``warmup_steps == 0`` means none.
        warmup_steps: length of warmup, between 0 and ``total_steps``.
        decay: one of ``DECAYS``, applied after warmup.
        total_steps: steps in the whole run, >= 1.
        decay_step_size: steps between cuts for ``"step"`` decay; default a third of
            the decay phase (rounded up), giving three plateaus.
        decay_factor: multiplier at each cut for ``"step"`` decay, in (0, 1].
        final_fraction: where ``"cosine"`` ends, as a fraction of the target, in [0, 1].

    Returns:
        A schedule, step -> lr.

    >>> sched = make_schedule(lr=0.1, batch_size=2048, base_batch=256, lr_scaling="linear",
    ...                       warmup="gradual", warmup_steps=500, decay="cosine",
    ...                       total_steps=5000)
    >>> sched(0), sched(500), round(sched(2750), 6), round(sched(4999), 6), sched(5000)
    (0.1, 0.8, 0.4, 0.0, 0.0)
    """
    plan = _plan(lr=lr, batch_size=batch_size, base_batch=base_batch, lr_scaling=lr_scaling,
                 warmup=warmup, warmup_steps=warmup_steps, decay=decay,
                 total_steps=total_steps, decay_step_size=decay_step_size,
                 decay_factor=decay_factor, final_fraction=final_fraction)
    if plan.decay == "step":
        after = step_decay(plan.target, plan.decay_step_size, plan.decay_factor)
    elif plan.decay == "cosine":
        # decay_steps is 0 when warmup fills the run; the decay then only covers
        # steps past the end, and any length >= 1 will do
        after = cosine_decay(plan.target, max(plan.decay_steps, 1), plan.final_fraction)
    else:
        after = constant(plan.target)
    if plan.warmup == "none":
        return after
    ramp = gradual_warmup if plan.warmup == "gradual" else constant_warmup
    return join(ramp(plan.lr, plan.target, plan.warmup_steps), after, plan.warmup_steps)


def describe(*, lr: float, batch_size: int, base_batch: int, lr_scaling: str = "none",
             warmup: str = "none", warmup_steps: int = 0, decay: str = "none",
             total_steps: int, decay_step_size: int | None = None,
             decay_factor: float = 0.1, final_fraction: float = 0.0) -> str:
    """One line saying what ``make_schedule`` does with the same arguments.

    Checks the arguments exactly as ``make_schedule`` does.

    >>> describe(lr=0.1, batch_size=2048, base_batch=256, lr_scaling="linear",
    ...          warmup="gradual", warmup_steps=500, decay="cosine", total_steps=5000)
    'linear scaling 0.1 -> 0.8, gradual warmup 500 steps, cosine over 4500'
    >>> describe(lr=0.1, batch_size=256, base_batch=256, decay="step", total_steps=90)
    'no scaling, lr 0.1, no warmup, step decay x0.1 every 30 steps over 90'
    """
    plan = _plan(lr=lr, batch_size=batch_size, base_batch=base_batch, lr_scaling=lr_scaling,
                 warmup=warmup, warmup_steps=warmup_steps, decay=decay,
                 total_steps=total_steps, decay_step_size=decay_step_size,
                 decay_factor=decay_factor, final_fraction=final_fraction)
    if plan.lr_scaling == "none":
        scaling = f"no scaling, lr {plan.lr:g}"
    else:
        scaling = f"{plan.lr_scaling} scaling {plan.lr:g} -> {plan.target:g}"
    if plan.warmup == "none":
        warm = "no warmup"
    else:
        warm = f"{plan.warmup} warmup {plan.warmup_steps} steps"
    if plan.decay == "step":
        after = (f"step decay x{plan.decay_factor:g} every {plan.decay_step_size} steps"
                 f" over {plan.decay_steps}")
    elif plan.decay == "cosine" and plan.final_fraction > 0:
        after = f"cosine to {plan.target * plan.final_fraction:g} over {plan.decay_steps}"
    elif plan.decay == "cosine":
        after = f"cosine over {plan.decay_steps}"
    else:
        after = f"constant over {plan.decay_steps}"
    return f"{scaling}, {warm}, {after}"


def lr_table(schedule: Schedule, total_steps: int, points: int = 200) -> list[tuple[int, float]]:
    """Evenly spaced ``(step, lr)`` samples from step 0 to ``total_steps - 1``, for a plot.

    Every step when ``total_steps <= points``, else ``points`` samples; the first is
    step 0 and the last is ``total_steps - 1``.

    Args:
        schedule: the schedule to sample.
        total_steps: steps in the run, >= 1.
        points: how many samples at most, >= 2.

    Returns:
        A list of ``(step, lr)`` pairs, steps increasing.

    >>> lr_table(step_decay(1.0, 4, 0.5), total_steps=10, points=4)
    [(0, 1.0), (3, 1.0), (6, 0.5), (9, 0.25)]
    """
    schedule = _schedule("schedule", schedule)
    total_steps = _integer("total_steps", total_steps, 1)
    points = _integer("points", points, 2)
    if total_steps <= points:
        steps = range(total_steps)
    else:  # integer arithmetic: exact endpoints, no float drift
        steps = [i * (total_steps - 1) // (points - 1) for i in range(points)]
    return [(t, float(schedule(t))) for t in steps]
