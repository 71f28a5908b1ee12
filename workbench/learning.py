"""Did a run learn? One rule, said wherever a run's numbers are (issue 48).

A run can end `completed` and have learned nothing: DiLoCo at the shared default lr ended
at 0.111 test accuracy in the dashboard, LAMB at lr 0.1 at 0.100 (10 classes: chance). Its
throughput then measures nothing worth having. So a completed run whose final test accuracy
is near chance, or whose training loss rose tenfold, carries one sentence (`note`): what
it reached against chance (or how its loss rose), and a concrete hint about the lr from the
range that learns the default dataset with this algorithm and update rule
(`config.lr_range`): "did not learn: test accuracy 0.10, chance 0.10; lr 0.1 is large for
lamb, try 0.001-0.01". The summary keeps it (`learning_note`); `measure.notes` hands it to
the CLI, the dashboard's status line and the report.
"""
from __future__ import annotations

import math
import re
from typing import Any

NEAR_CHANCE = 0.1     # within a tenth of the way from chance to perfect: near chance (10 classes: < 0.19)
LOSS_ROSE = 10.0      # the final training loss at 10x the first steps' or more: it rose, it did not learn
BARELY_MOVED = 0.1    # the final training loss within a tenth of the first steps' (either way): it barely moved
CLIP_MOSTLY = 0.9   # clipping this share of the updates or more: the clip set the steps (`clip_note`)
OVERFIT_RISE = 1.25   # the final test loss at 1.25x its best or more (and 0.05 above it) ...
OVERFIT_MIN_RISE = 0.05   # (nats: a loss near 0 moving by a rounding is not a rise)


def chance_accuracy(config: dict[str, Any]) -> float | None:
    """The accuracy a model reaches without learning: 1 / classes of a built-in dataset (its
    entry, nothing loaded; they are balanced) or of a text (its vocabulary); for a data file
    of the user's, which need not be balanced, the share of the training set's commonest
    class when it is larger (what always answering that class scores on data like it; the
    data as this process loaded it for the run); None when unknown (a file no longer there).

    >>> chance_accuracy({"dataset": "digits"})
    0.1
    >>> chance_accuracy({"dataset": "synthetic", "n_classes": 4})
    0.25
    >>> chance_accuracy({"dataset": "/no/such/table.csv"}) is None
    True
    """
    shape = _shape(config)
    classes = shape.n_classes if shape is not None else None
    if not classes or classes < 2:
        return None
    from .data import load_dataset
    from .data.files import is_data_path
    name = str(config.get("dataset"))
    if is_data_path(name):
        try:
            data = load_dataset(name, test_fraction=float(config.get("test_fraction") or 0.2),
                                label_column=config.get("label_column"))
        except (TypeError, ValueError, OSError):
            return 1.0 / classes
        import numpy as np
        counts = np.bincount(np.asarray(data.y_train, dtype=np.int64))
        return max(float(counts.max() / counts.sum()), 1.0 / classes)
    return 1.0 / classes


def _shape(config: dict[str, Any]) -> Any:
    """The `Shape` of a run's dataset as its config names it (a built-in's from its entry, a
    file's from the file; None when it cannot be read: a file no longer there)."""
    from .data.dataset import dataset_info
    try:
        info = dataset_info(str(config.get("dataset")))
        return info.shape(int(config.get("n_samples") or 10000), int(config.get("n_features") or 64),
                          int(config.get("n_classes") or 10), test_fraction=float(config.get("test_fraction") or 0.2),
                          context=int(config.get("context") or 64), label_column=config.get("label_column"))
    except (TypeError, ValueError, OSError):   # (DataError is a ValueError)
        return None


def best_test_loss(evals: Any) -> tuple[Any, Any] | None:
    """Rank 0's evaluation stream (`eval_stream`), step by step, and the row of its lowest
    test loss; None without a finite test loss. A (stream, best row) pair of pandas objects."""
    return lowest(evals, "test_loss")


def eval_stream(workers: Any) -> str:
    """Which evaluation stream a run's `best_test_loss` (and `best_val_loss`) is read from,
    among the `worker` names of its evaluations: the one rank 0 records, whose lowest loss
    `params_best` keeps (every algorithm's only one; ltfb's trainer 0's). Chosen by name,
    never by the order the evaluations arrived in (on Dask, a race).

    >>> eval_stream(["trainer-1", "trainer-10", "trainer-0", "trainer-2"]), eval_stream(["0", "0"])
    ('trainer-0', '0')
    """
    def key(name: str) -> tuple:
        return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))
    return min({str(w) for w in workers}, key=key)


def lowest(evals: Any, column: str) -> tuple[Any, Any] | None:
    """`best_test_loss` by any loss column (`val_loss`: the validation set's): the stream and
    the row of its lowest finite value (the first such row at a tie); None without one."""
    if evals is None or not len(evals) or column not in evals:
        return None
    names = evals["worker"].astype(str)
    stream = evals[names == eval_stream(names)]
    finite = stream[stream[column].map(lambda v: v is not None and math.isfinite(float(v)))]
    if not len(finite):
        return None
    return stream, finite.loc[finite[column].astype(float).idxmin()]


def overfit_note(config: dict[str, Any], evals: Any, n_params: int | None = None,
                 kept: dict[str, Any] | None = None) -> str | None:
    """The sentence for a run whose test loss rose well past its best while its training
    loss kept falling (it learned its training set by heart), else None.

    Said when the final test loss is at least OVERFIT_RISE x its best and OVERFIT_MIN_RISE
    above it, and the final training loss is below the training loss at the best (a rise of
    both is a run that went wrong: `note`'s). Over rank 0's evaluation stream, the one
    `best_test_loss` is read from. `kept`: the summary's `params_best` (the parameters
    kept at the lowest test loss: said where they are the same step's).

    >>> import pandas as pd
    >>> ev = pd.DataFrame({"worker": ["0"] * 4, "step": [9, 19, 29, 39], "train_loss": [2.0, 1.0, 0.5, 0.1],
    ...                    "test_loss": [2.1, 1.5, 1.9, 3.0]})
    >>> print(overfit_note({"dataset": "digits"}, ev, n_params=1000))
    overfitting: the test loss rose from its best, 1.5 after 20 steps, to 3 after 40 while the training loss fell from 1 to 0.1: the model (1,000 parameters) is learning its 1,438 training rows by heart; it was best after 20 steps: run 20 steps (early_stop stops a run whose test loss stopped falling), or give it more data or a smaller model
    >>> overfit_note({"dataset": "digits"}, ev.assign(train_loss=[2.0, 1.0, 1.5, 2.5])) is None   # both rose
    True
    """
    found = best_test_loss(evals)
    if found is None:
        return None
    stream, best = found
    last = stream.iloc[-1]
    best_loss, final_loss = float(best["test_loss"]), float(last["test_loss"])
    best_train, final_train = float(best["train_loss"]), float(last["train_loss"])
    if not (math.isfinite(final_loss) and math.isfinite(final_train) and math.isfinite(best_train)):
        return None
    if final_loss < OVERFIT_RISE * best_loss or final_loss - best_loss < OVERFIT_MIN_RISE or final_train >= best_train:
        return None
    at, end = int(best["step"]) + 1, int(last["step"]) + 1
    shape = _shape(config)
    from .config import is_text_dataset
    text = is_text_dataset(str(config.get("dataset")))
    held = "" if shape is None else (f"{shape.n_train:,} training sequences ({shape.n_train * shape.n_features:,} "
                                     f"tokens)" if text else f"{shape.n_train:,} training rows")
    what = f"the model{f' ({n_params:,} parameters)' if n_params else ''} is learning its {held or 'training set'} by heart"
    where = ("its parameters then are kept (params_best.npy; predict and generate take them with --best)"
             if kept and kept.get("steps") == at else f"run {at} steps")
    if not config.get("early_stop"):      # the run may stop there by itself
        where += " (early_stop stops a run whose test loss stopped falling)"
    return (f"overfitting: the test loss rose from its best, {best_loss:.3g} after {at} steps, to {final_loss:.3g} "
            f"after {end} while the training loss fell from {best_train:.3g} to {final_train:.3g}: {what}; it was "
            f"best after {at} steps: {where}, or give it more data or a smaller model")


def early_stop_note(summary: dict[str, Any]) -> str | None:
    """The sentence for a run that `early_stop` ended (`summary["early_stopped"]`), else None.

    >>> early = {"evaluated_at": 700, "patience": 3, "best_steps": 400, "on": "test", "best_loss": 0.1234,
    ...          "synchronous": True}
    >>> print(early_stop_note({"early_stopped": early, "steps": 701, "total_steps_planned": 1000}))
    early_stop 3: the test loss had not gone below its best, 0.1234 after 400 steps, in 3 evaluations, so the run stopped after 701 of its 1,000 planned steps; its parameters at the best are kept (params_best.npy; predict and generate take them with --best)
    >>> print(early_stop_note({"early_stopped": {**early, "synchronous": False}, "steps": 980, "total_steps_planned": 1000}))
    early_stop 3: the test loss had not gone below its best, 0.1234 after 400 steps, in 3 evaluations, so rank 0 asked every worker to stop after 700 steps; they ran up to 980 of the 1,000 planned (an asynchronous worker stops when the request reaches it); its parameters at the best are kept (params_best.npy; predict and generate take them with --best)
    """
    early = summary.get("early_stopped")
    if not early:
        return None
    ran, planned = summary.get("steps"), summary.get("total_steps_planned")
    if ran is None or not planned:
        where = f"so the run stopped after the evaluation at {early['evaluated_at']:,} steps"
    elif early.get("synchronous", True):
        where = f"so the run stopped after {ran:,} of its {planned:,} planned steps"
    else:
        where = (f"so rank 0 asked every worker to stop after {early['evaluated_at']:,} steps; they ran up to {ran:,} "
                 f"of the {planned:,} planned (an asynchronous worker stops when the request reaches it)")
    n = early["patience"]
    return (f"early_stop {n}: the {early.get('on', 'test')} loss had not gone below its best, {early['best_loss']:.4g} after "
            f"{early['best_steps']:,} steps, in {n} evaluation{'s' if n > 1 else ''}, {where}; its parameters at the "
            "best are kept (params_best.npy; predict and generate take them with --best)")


def clip_note(clip: dict[str, Any] | None) -> str | None:
    """The sentence for gradient clipping that changed nothing or nearly every update (the
    summary's `grad_clip`: counts and norms, `maths.optim.clip_summary`), else None.

    >>> clip = {"max_norm": 1.0, "updates": 300, "clipped": 0, "mean_norm": 0.21, "largest_norm": 0.43,
    ...         "counted": "every update"}
    >>> print(clip_note(clip))
    grad_clip 1 clipped none of the 300 updates (every update): the largest gradient norm was 0.43 (mean 0.21), so the run is the one it would be without clipping
    >>> print(clip_note({**clip, "max_norm": 0.05, "clipped": 295}))
    grad_clip 0.05 clipped 295 of the 300 updates (98%; every update): the gradients' norms were 0.21 on average (the largest 0.43), so nearly every one was scaled down to 0.05 and the clip, more than the gradients, set the steps
    >>> clip_note({**clip, "clipped": 40}) is None
    True
    """
    if not clip or not clip.get("updates"):
        return None
    c, u, k, who = clip["max_norm"], int(clip["updates"]), int(clip["clipped"]), clip.get("counted")
    mean, largest = clip.get("mean_norm"), clip.get("largest_norm")
    if k == 0:
        seen = f"the largest gradient norm was {largest:.3g} (mean {mean:.3g})" if largest is not None and \
            mean is not None else f"every gradient's norm stayed below {c:g}"
        return (f"grad_clip {c:g} clipped none of the {u:,} updates{f' ({who})' if who else ''}: {seen}, so the run is "
                "the one it would be without clipping")
    if k >= CLIP_MOSTLY * u:
        seen = f"the gradients' norms were {mean:.3g} on average (the largest {largest:.3g}), so " \
            if largest is not None and mean is not None else ""
        return (f"grad_clip {c:g} clipped {k:,} of the {u:,} updates ({k / u:.0%}{'; ' + who if who else ''}): "
                f"{seen}nearly every one was scaled down to {c:g} and the clip, more than the gradients, set the steps")
    return None


MEASURED_ON = "digits"   # the dataset the algorithms' lr ranges (`config.lr_range`) were measured on


def loss_case(first_loss: float | None, last_loss: float | None, diverged: bool = False) -> str | None:
    """Which way a run's training loss went, read for the lr hint: "rose" (it diverged, ended
    NaN or inf, or more than `BARELY_MOVED` above where it began: the steps overshoot, a lower
    lr), "flat" (it ended within `BARELY_MOVED` of where it began either way, as one
    minibatch's loss differs from the next: the steps are too small, a higher lr), "fell"
    (further: the lr is not what the loss says is wrong), None (no losses).

    >>> loss_case(2.3, 40.0), loss_case(2.3, float("nan")), loss_case(2.3, 2.25), loss_case(2.3, 2.4), loss_case(2.3, 1.2)
    ('rose', 'rose', 'flat', 'flat', 'fell')
    >>> loss_case(None, None, diverged=True), loss_case(None, None)
    ('rose', None)
    """
    if diverged:
        return "rose"
    if first_loss is None or last_loss is None or not math.isfinite(first_loss):
        return None
    if not math.isfinite(last_loss) or last_loss > (1.0 + BARELY_MOVED) * first_loss:
        return "rose"
    return "flat" if last_loss >= (1.0 - BARELY_MOVED) * first_loss else "fell"


def _lrs(lr: float, factors: tuple[float, ...]) -> str:
    """A grid's lrs, `lr` times each factor, in two significant figures (`--vary lr=...`)."""
    return ",".join(f"{lr * f:.2g}" for f in factors)


LOWER = (1 / 3, 1 / 10, 1 / 30)   # the lrs a loss that rose suggests: below the one that failed
HIGHER = (3.0, 10.0, 30.0)        # ... a loss that barely moved: above it
AROUND = (1 / 10, 1.0, 10.0)      # ... a loss that fell yet learned nothing: nothing says which way


def lr_hint(config: dict[str, Any], steps: int | None = None, case: str | None = None) -> str:
    """What to try with the lr: larger or smaller than the range that learns the default
    dataset with this algorithm and rule (`config.lr_range`), or, inside it, longer. Where
    no range decides (another dataset, or an lr inside the range whose loss still rose) the
    way the loss went does (`case`, `loss_case`), and the hint says which it read: a loss
    that rose (or diverged) asks for lower lrs, one that barely moved for higher ones; a
    grid around the lr only when neither says which way.

    >>> lr_hint({"algorithm": "sync_sgd", "optimizer": "lamb", "lr": 0.1})
    'lr 0.1 is large for lamb, try 0.001-0.01'
    >>> lr_hint({"algorithm": "diloco", "optimizer": "sgd", "lr": 0.1})
    "lr 0.1 is large for diloco's inner sgd, try 0.003-0.01"
    >>> lr_hint({"algorithm": "sync_sgd", "optimizer": "sgd", "lr": 0.1}, steps=3)
    'lr 0.1 is in the range that learns digits with sgd (0.03-0.3); it ran 3 steps: train longer'

    The ranges were measured on digits only: another dataset gets no claim, but a grid to run.

    >>> lr_hint({"algorithm": "sgd", "optimizer": "sgd", "lr": 0.1, "dataset": "runs/prices.csv"})
    "lr 0.1: no range that learns prices.csv is measured (digits' with sgd is 0.03-0.3): compare a few with grid --vary lr=0.01,0.1,1"
    >>> lr_hint({"algorithm": "sgd", "optimizer": "sgd", "lr": 3.0, "dataset": "synthetic"}, case="rose")
    "lr 3: no range that learns synthetic is measured (digits' with sgd is 0.03-0.3); the training loss rose, so the lr is too large: compare lower ones with grid --vary lr=1,0.3,0.1"
    >>> lr_hint({"algorithm": "sgd", "optimizer": "sgd", "lr": 1e-5, "dataset": "synthetic"}, case="flat")
    "lr 1e-05: no range that learns synthetic is measured (digits' with sgd is 0.03-0.3); the training loss barely moved, so the lr is too small: compare higher ones with grid --vary lr=3e-05,0.0001,0.0003"
    """
    from .config import lr_range
    algorithm, optimizer = str(config.get("algorithm") or "sgd"), str(config.get("optimizer") or "sgd")
    lr = float(config.get("lr") or 0.0)
    lo, _, hi = lr_range(algorithm, optimizer)
    from .config.registry import specs
    spec = specs().get(algorithm)
    rule = f"{algorithm}'s inner {optimizer}" if spec is not None and optimizer in spec.lr_defaults else optimizer
    dataset = str(config.get("dataset") or "digits")
    if dataset != MEASURED_ON:
        name = dataset.replace("\\", "/").rsplit("/", 1)[-1]
        unmeasured = f"lr {lr:g}: no range that learns {name} is measured ({MEASURED_ON}' with {rule} is {lo:g}-{hi:g})"
        if case == "rose":
            return f"{unmeasured}; {READ['rose']}: compare lower ones with grid --vary lr={_lrs(lr, LOWER)}"
        if case == "flat":
            return f"{unmeasured}; {READ['flat']}: compare higher ones with grid --vary lr={_lrs(lr, HIGHER)}"
        return f"{unmeasured}: compare a few with grid --vary lr={lr / 10:g},{lr:g},{lr * 10:g}"
    if lr > hi:
        return f"lr {lr:g} is large for {rule}, try {lo:g}-{hi:g}"
    if lr < lo:
        return f"lr {lr:g} is small for {rule}, try {lo:g}-{hi:g}"
    if case == "rose":   # inside the range, and still it rose: lower, within the range
        return (f"lr {lr:g} is in the range that learns digits with {rule} ({lo:g}-{hi:g}), but {READ['rose']}: "
                f"compare lower ones with grid --vary lr={_lrs(lr, LOWER)}")
    ran = f"; it ran {steps} steps: train longer" if steps is not None else ": train longer, or warm up"
    return f"lr {lr:g} is in the range that learns digits with {rule} ({lo:g}-{hi:g}){ran}"


READ = {"rose": "the training loss rose, so the lr is too large",      # what `lr_hint` read (`loss_case`)
        "flat": "the training loss barely moved, so the lr is too small"}


def note(config: dict[str, Any], accuracy: float | None, first_loss: float | None, last_loss: float | None,
         steps: int | None = None, overfit: bool = False, diverged: str | None = None) -> str | None:
    """The sentence for a run that learned nothing (or diverged), else None. The lr hint
    reads which way the training loss went (`loss_case`): lower lrs where it rose or the run
    diverged, higher where it barely moved.

    Args:
        config: the run's config (a dict of RunConfig's fields).
        accuracy: its final test accuracy (None: not evaluated).
        first_loss: the training loss of its first steps; last_loss: at its end.
        steps: the steps it ran (for the hint).
        overfit: whether it learned its training set by heart (`overfit_note`): then an lr in
            the range that learns is not told to train longer.
        diverged: how a diverged run diverged (its event's message: "loss became nan at step
            20 with lr 30"), None for a run that did not.

    >>> cfg = {"algorithm": "sync_sgd", "optimizer": "lamb", "lr": 0.1, "dataset": "digits"}
    >>> note(cfg, 0.1003, 2.47, 2.31)
    'did not learn: test accuracy 0.10, chance 0.10; lr 0.1 is large for lamb, try 0.001-0.01'
    >>> note(cfg, 0.71, 2.4, 35.8)
    'did not learn: the training loss rose from 2.4 to 35.8 (x15); lr 0.1 is large for lamb, try 0.001-0.01'
    >>> note(cfg, 0.95, 2.4, 0.1) is None
    True
    >>> note({**cfg, "optimizer": "sgd", "lr": 30.0, "dataset": "synthetic"}, None, 2.9, None, diverged="loss became nan at step 20")
    "did not learn: it diverged (loss became nan at step 20); lr 30: no range that learns synthetic is measured (digits' with sgd is 0.03-0.3); the training loss rose, so the lr is too large: compare lower ones with grid --vary lr=10,3,1"
    """
    chance = chance_accuracy(config)
    said = None
    if diverged is not None:
        said = f"it diverged ({diverged})"
    elif accuracy is not None and chance is not None and math.isfinite(accuracy) \
            and accuracy < chance + NEAR_CHANCE * (1.0 - chance):
        said = f"test accuracy {accuracy:.2f}, chance {chance:.2f}"
    elif first_loss is not None and last_loss is not None and first_loss > 0 and math.isfinite(first_loss) \
            and last_loss >= LOSS_ROSE * first_loss:
        said = f"the training loss rose from {first_loss:.3g} to {last_loss:.3g} (x{last_loss / first_loss:.0f})"
    if said is None:
        return None
    scale = _unscaled(config)
    if scale is not None:   # raw features: the first thing to change, before the lr
        return f"did not learn: {said}; its features are not standardized ({scale}): try standardize (--standardize)"
    hint = lr_hint(config, steps, loss_case(first_loss, last_loss, diverged=diverged is not None))
    if overfit and ("in the range that learns" in hint or "no range that learns" in hint):
        hint = "its training loss fell while its test loss rose: it learned its training set, not what carries over"
    return f"did not learn: {said}; {hint}"


def _unscaled(config: dict[str, Any]) -> str | None:
    """`data.files.unscaled` of a run's own data file when the run did not standardize it
    (the data as this process loaded it for the run, from its cache); else None."""
    from .data import load_dataset
    from .data.files import is_data_path, unscaled
    name = config.get("dataset")
    if config.get("standardize") or not is_data_path(name):
        return None
    try:
        data = load_dataset(name, test_fraction=float(config.get("test_fraction") or 0.2),
                            label_column=config.get("label_column"))
    except (TypeError, ValueError, OSError):   # (DataError is a ValueError): a file no longer there
        return None
    return unscaled(data.X_train)


Z95 = 1.959963984540054   # the standard normal's 97.5% quantile: a two-sided 95% interval
SHOWN_HALF_WIDTH = 0.01   # an accuracy's interval is said beside it when wider than +-0.01


def wilson_interval(p: float, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval (95% by default) of an accuracy `p` measured on `n`
    independent labels (test rows): where the true accuracy lies, given that a share of n
    rows is a binomial count. Unlike p +- z sqrt(p (1 - p) / n) it stays inside [0, 1] and is
    not 0 wide at p = 0 or 1 (one right answer from one row says little).

    centre = (p + z^2 / 2n) / (1 + z^2 / n),
    half width = z / (1 + z^2 / n) * sqrt(p (1 - p) / n + z^2 / 4n^2).

    >>> [round(v, 4) for v in wilson_interval(1.0, 1)]
    [0.2065, 1.0]
    >>> [round(v, 4) for v in wilson_interval(0.5, 100)]
    [0.4038, 0.5962]
    """
    if n < 1:
        raise ValueError(f"an accuracy measured on at least one label, got {n=}")
    zz = z * z / n
    centre = (p + zz / 2) / (1 + zz)
    half = z / (1 + zz) * math.sqrt(p * (1 - p) / n + zz / (4 * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def accuracy_se(p: float, n: int) -> float:
    """The standard error an accuracy `p` on `n` labels has from their sampling: the 95%
    Wilson interval's half width in units of z (`wilson_interval`), what `analysis.grid`
    weighs differences by. Near p(1 - p)/n's root where p is inside (0, 1) with many rows;
    above 0 at p = 1.

    >>> round(accuracy_se(0.9, 359), 4), round(accuracy_se(1.0, 60), 4)
    (0.0159, 0.0154)
    """
    lo, hi = wilson_interval(p, n)
    return (hi - lo) / (2 * Z95)


def accuracy_interval_text(p: float | None, n: int | None, unit: str = "row") -> str | None:
    """"95%: lo-hi from n rows" for an accuracy whose Wilson interval is wider than
    +-`SHOWN_HALF_WIDTH` (few test rows); None where it is narrower or n is unknown.

    >>> accuracy_interval_text(1.0, 1), accuracy_interval_text(0.95, 100000)
    ('95%: 0.21-1.00 from 1 row', None)
    """
    if p is None or not n or p != p:
        return None
    lo, hi = wilson_interval(float(p), int(n))
    if (hi - lo) / 2 <= SHOWN_HALF_WIDTH:
        return None
    return f"95%: {lo:.2f}-{hi:.2f} from {int(n):,} {unit}{'s' if n != 1 else ''}"


def accuracy_text(summary: dict[str, Any]) -> str:
    """A run's final accuracy in its one-line verdicts (the CLI's, the dashboard's status):
    the test set's, with its 95% interval where the test rows are few enough that it is wider
    than +-0.01 (`accuracy_interval_text`, from `summary["test_rows"]`), and the validation
    set's beside it when the run held one out.

    >>> accuracy_text({"final_test_accuracy": 0.9276})
    'test accuracy 0.9276'
    >>> accuracy_text({"final_test_accuracy": 0.947, "final_val_accuracy": 0.9306})
    'test accuracy 0.9470 (validation 0.9306)'
    >>> accuracy_text({"final_test_accuracy": 1.0, "test_rows": 1})
    'test accuracy 1.0000 (95%: 0.21-1.00 from 1 row)'
    >>> accuracy_text({})
    'test accuracy n/a'
    """
    acc, val = summary.get("final_test_accuracy"), summary.get("final_val_accuracy")
    text = f"test accuracy {'n/a' if acc is None else f'{acc:.4f}'}"
    unit = "token" if summary.get("language") else "row"   # a language model's labels are its tokens
    said = [t for t in (accuracy_interval_text(acc, summary.get("test_rows"), unit),
                        None if val is None else f"validation {val:.4f}") if t]
    return f"{text} ({'; '.join(said)})" if said else text


def clip_text(clip: dict[str, Any] | None) -> str | None:
    """A clipping run's counts and gradient norms (`summary["grad_clip"]`), in one line; None
    for a run that did not clip.

    >>> print(clip_text({"max_norm": 1.0, "updates": 300, "clipped": 91, "clipped_share": 91 / 300, "mean_norm": 0.84,
    ...                  "largest_norm": 2.9, "counted": "every update"}))
    gradient clipping at norm 1: 91 of 300 updates clipped (30%; every update); the gradients' norm 0.84 on average, 2.9 at most
    """
    if not clip or not clip.get("updates"):
        return None
    mean, largest = clip.get("mean_norm"), clip.get("largest_norm")
    norms = "" if mean is None or largest is None else \
        f"; the gradients' norm {mean:.3g} on average, {largest:.3g} at most"
    who = clip.get("counted")
    share = clip["clipped"] / clip["updates"]
    shown = "under 1%" if 0 < share < 0.005 else f"{share:.0%}"
    return (f"gradient clipping at norm {clip['max_norm']:g}: {clip['clipped']:,} of {clip['updates']:,} updates "
            f"clipped ({shown}{'; ' + who if who else ''}){norms}")


PER_CLASS_SHOWN = 20   # classes named on the per-class line at most (the summary keeps them all)


def per_class_text(per_class: list[dict[str, Any]] | None) -> str | None:
    """A run's test accuracy class by class (`summary["per_class"]`, a data file of the
    user's), in one line; None when it has none. Classes without test rows are counted, not
    listed, and at most PER_CLASS_SHOWN classes are named (the rest counted).

    >>> per_class_text([{"class": "high", "rows": 27, "accuracy": 0.7037}, {"class": "low", "rows": 25, "accuracy": 0.84}])
    'per class (test rows): high 0.70 of 27, low 0.84 of 25'
    >>> per_class_text([{"class": str(k), "rows": 0 if k % 10 else 5, "accuracy": None if k % 10 else 1.0}
    ...                 for k in range(31)])
    'per class (test rows): 0 1.00 of 5, 10 1.00 of 5, 20 1.00 of 5, 30 1.00 of 5; 27 classes without test rows'
    >>> per_class_text([{"class": "no", "rows": 0, "accuracy": None}, {"class": "yes", "rows": 1, "accuracy": 1.0}])
    'per class (test rows): yes 1.00 of 1; 1 class without test rows (no)'
    """
    if not per_class:
        return None
    tested = [c for c in per_class if c["rows"]]
    parts = [f"{c['class']} {'n/a' if c['accuracy'] is None else format(c['accuracy'], '.2f')} of {c['rows']}"
             for c in tested[:PER_CLASS_SHOWN]]
    more = [f"{len(tested) - PER_CLASS_SHOWN:,} more classes (summary['per_class'])"] \
        if len(tested) > PER_CLASS_SHOWN else []
    empty = len(per_class) - len(tested)
    # a few are named (a small file's class that the split left without test rows), many counted
    named = f" ({', '.join(str(c['class']) for c in per_class if not c['rows'])})" if 0 < empty <= 5 else ""
    tail = f"; {empty:,} class{'' if empty == 1 else 'es'} without test rows{named}" if empty else ""
    return "per class (test rows): " + ", ".join(parts + more) + tail

