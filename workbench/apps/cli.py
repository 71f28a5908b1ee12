"""Command line: `python -m workbench COMMAND ...` (also installed as `parallel-workbench`).

Commands: run, sweep, reproduce, compare, export, lessons, schema, algorithms, bench.
Every `RunConfig` field is a flag (underscores become dashes) and a YAML key; flags given
on the command line override `--config FILE.yaml`, which overrides the defaults. The
flags' help comes from the fields' descriptions (`python -m workbench schema`).

Exit codes: 0 the run completed; 2 invalid input (one line `error: <field>: <allowed>, got
<value>`, no traceback); 1 the run did not complete (stopped, diverged or failed; what was
gathered is still saved).
"""
from __future__ import annotations

import argparse
import contextlib
import html
import json
import re
import signal
import sys
import threading
import time
import typing
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from .. import __version__
from ..config import FIELD_GROUPS, GROUP_TITLES, ConfigError, RunConfig, config_schema, field_help
from ..util.fileio import RunDirError

EXIT_OK, EXIT_FAILED, EXIT_INVALID = 0, 1, 2
EXIT_SHAPE = 3   # reproduce: the notebook ran, but an expected shape did not hold (or was not measured)


def _flag_help(name: str) -> str:
    """A flag's help: the field's description (`field_help`: a knob's names the algorithms
    registered now) and its default (argparse-escaped)."""
    field = RunConfig.model_fields[name]
    default = "unset" if field.default is None else str(field.default).lower() if isinstance(field.default, bool) \
        else field.default
    return f"{field_help(name)} Default: {default}.".replace("%", "%%")


def _metavar(name: str) -> str:
    """`{a,b,c}` for a field with fixed choices, else the field name in capitals."""
    args = typing.get_args(RunConfig.model_fields[name].annotation)
    literals = [v for a in args if typing.get_origin(a) is typing.Literal for v in typing.get_args(a)]
    if typing.get_origin(RunConfig.model_fields[name].annotation) is typing.Literal:
        literals = list(args)
    if literals and len(literals) == len(args):
        return "{" + ",".join(map(str, literals)) + "}"
    if literals:   # a number or "auto"
        return name.upper() + "|" + "|".join(map(str, literals))
    return name.upper()


def _add_config_flags(p: argparse.ArgumentParser) -> None:
    """One flag per RunConfig field, grouped as the dashboard groups them; values stay
    strings until RunConfig validates them (so errors keep the one-line form)."""
    p.add_argument("--config", metavar="FILE.yaml", help="read fields from a YAML file first; flags override it")
    for group, names in FIELD_GROUPS.items():
        g = p.add_argument_group(GROUP_TITLES[group])
        for name in names:
            flag = "--" + name.replace("_", "-")
            if RunConfig.model_fields[name].annotation is bool:
                g.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction,
                               default=argparse.SUPPRESS, help=_flag_help(name))
            else:
                g.add_argument(flag, dest=name, default=argparse.SUPPRESS, metavar=_metavar(name),
                               help=_flag_help(name))


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """Merge defaults < --config file < flags into one validated RunConfig."""
    data: dict[str, Any] = {}
    if getattr(args, "config", None):   # the file's own keys: what it leaves unset (lr) stays unset
        data.update(RunConfig.from_yaml(args.config).model_dump(mode="json", exclude_unset=True))
    for name in RunConfig.model_fields:
        if name in vars(args):
            value = getattr(args, name)
            data[name] = None if value in ("none", "None", "") and _nullable(name) else value
    return RunConfig.from_dict(data)


def _nullable(name: str) -> bool:
    return RunConfig.model_fields[name].default is None


# Every subcommand with its one-line help: the top-level --help lists them in this order.
COMMANDS: dict[str, str] = {
    "run": "train one run and write its run directory (summary.json, CSVs, report.html)",
    "sweep": "strong or weak scaling sweep over worker counts (sweep.csv, sweep.html)",
    "grid": "which settings learn best: every combination of some fields' values, over seeds (grid.csv)",
    "reproduce": "run an experiment's notebook with papermill and write its report",
    "compare": "one HTML report comparing several run directories",
    "explain": "why N workers are (not) faster than one: a run's step decomposed, and what would change it",
    "predict": "a saved run's model answers each row of a CSV (a predicted column added)",
    "generate": "text written by a saved language model run (model gpt on a text)",
    "noise-scale": "how large a batch a run's model can use: the gradient noise scale at its parameters",
    "export": "write run directories as TensorBoard event files",
    "lessons": "copy the lesson notebooks and experiment files into a folder",
    "schema": "print RunConfig's JSON schema (every field, its description, default and group)",
    "algorithms": "list the algorithms with one line each",
    "bench": "throughput benchmark: algorithms vs the no-exchange limit vs PyTorch DDP",
}

DESCRIPTION = ("Train neural networks in parallel on Dask CPU workers and Dask-CUDA GPUs, and see how\n"
               "the algorithms behave: sync/async/Hogwild SGD, the EASGD family, LTFB, CGDP.\n\n"
               "commands:\n" + "\n".join(f"  {name:<11} {text}" for name, text in COMMANDS.items())
               + "\n\n`python -m workbench COMMAND --help` explains a command and its flags.")

EXAMPLES = """\
examples:
  python -m workbench run --algorithm sync_sgd --cpus 2 --batch-size 128 --epochs 5 --out runs/s
  python -m workbench run --algorithm async_easgd --cpus 2 --tau 4 --latency-ms 1 --out runs/ae
  python -m workbench run --config runs/s/config.yaml --lr 0.2 --out runs/s-lr0.2
  python -m workbench sweep --algorithm sync_sgd --workers 1,2 --mode weak --out runs/sweep
  python -m workbench reproduce experiments/sc17_easgd.yaml --quick --out runs/sc17
  python -m workbench compare runs/s runs/ae --out compare.html
  python -m workbench export --tensorboard runs/s runs/ae --logdir tb && tensorboard --logdir tb
  python -m workbench lessons ~/workbench-lessons"""

RUN_EXAMPLES = """\
examples:
  python -m workbench run --algorithm sync_sgd --dataset digits --cpus 2 --batch-size 128 --lr 0.1 \\
      --lr-scaling linear --warmup gradual --warmup-epochs 1 --epochs 5 --out runs/sync
  python -m workbench run --algorithm sync_easgd --cpus 2 --tau 4 --latency-ms 1 --out runs/se
  python -m workbench run --algorithm ltfb --cpus 2 --trainers 2 --lr-spread 4 --out runs/ltfb
  python -m workbench run --config runs/sync/config.yaml --lr 0.2 --out runs/sync-lr0.2  # a saved run, one change
  python -m workbench run --algorithm sync_sgd --scheduler tcp://10.0.0.5:8786  # an existing cluster

exit codes: 0 completed; 1 stopped, diverged or failed (what was gathered is saved);
2 invalid input (one line: error: <field>: <allowed>, got <value>)."""

SWEEP_EXAMPLES = """\
examples:
  python -m workbench sweep --algorithm sync_sgd --workers 1,2 --out runs/sweep
  python -m workbench sweep --algorithm async_easgd --workers 1,2 --mode weak --batch-size 64 --out runs/weak
  python -m workbench sweep --simulate --algorithm sync_sgd --cpus 0 --gpus 1 --device k80 \\
      --workers 1,2,4,8,16,32,64,128,256 --mode weak --batch-size 4 --steps 20 --out runs/sim-sweep"""


GRID_EXAMPLES = """\
examples:
  python -m workbench grid --algorithm sgd --epochs 3 --vary lr=0.01,0.1,1 --vary batch-size=32,256 \\
      --seeds 0,1,2 --out runs/grid
  python -m workbench grid --algorithm sync_sgd --cpus 2 --vary optimizer=sgd,lamb --vary 'hidden=[[64],[256,128]]' \\
      --out runs/grid-models"""


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """argparse's, except that a flag's help never wraps inside a hyphenated word
    ("layer-wise", "1e-8"): the help says a field's description exactly."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        import textwrap
        return textwrap.wrap(self._whitespace_matcher.sub(" ", text).strip(), width, break_on_hyphens=False)


MODULE_PROG = "python -m workbench"


def called_as(argv0: str | None) -> str:
    """The command a user typed, for usage lines and examples: the console script's name
    (`parallel-workbench`), or `python -m workbench` for the module (and for calls of
    `main(argv)` from code, which have no command line of their own).

    >>> called_as("/home/me/.venv/bin/parallel-workbench"), called_as("/src/workbench/__main__.py"), called_as(None)
    ('parallel-workbench', 'python -m workbench', 'python -m workbench')
    """
    name = Path(argv0).name if argv0 else ""
    return MODULE_PROG if not name or name.endswith((".py", ".pyc")) or name.startswith("-") else name


def build_parser(prog: str = MODULE_PROG) -> argparse.ArgumentParser:
    fmt = _HelpFormatter
    parser = argparse.ArgumentParser(prog=prog, usage="%(prog)s [-h] [--version] COMMAND ...",
                                     description=DESCRIPTION, epilog=EXAMPLES, formatter_class=fmt)
    parser.add_argument("--version", action="version",
                        version=f"parallel-workbench {__version__} (import package workbench)")
    # listed once, in DESCRIPTION's order, rather than again by argparse
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", help=argparse.SUPPRESS,
                                prog=prog)

    run = sub.add_parser("run", help=COMMANDS["run"], formatter_class=fmt,
                         description="Train one run. Every RunConfig field is a flag; see the groups below.",
                         epilog=RUN_EXAMPLES)
    _add_config_flags(run)
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument("--overwrite", action="store_true",
                     help="replace a run already saved in --out (otherwise refused before training); the old run "
                          "stays until the new one commits")
    run.add_argument("--resume", metavar="DIR", default=None,
                     help="continue the stopped, failed or killed run in DIR from its last checkpoint, with its own "
                          "config (no other run flag is taken); see docs/checkpoints.md")

    sub.add_parser("algorithms", help=COMMANDS["algorithms"])
    sub.add_parser("schema", help=COMMANDS["schema"])

    comp = sub.add_parser("compare", help=COMMANDS["compare"],
                          description="Several run directories side by side: prints each run with the config "
                                      "fields that differ and its headline numbers, and overlays their "
                                      "loss/accuracy curves, throughput and time breakdown in one "
                                      "self-contained HTML page.")
    comp.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories (each with summary.json)")
    comp.add_argument("--out", required=True, metavar="FILE.html", help="the report to write")
    comp.add_argument("--title", default=None, help="page title (default: comparison of N runs)")
    comp.add_argument("--labels", default=None, help="comma-separated names, one per run (default: the directories "
                      "in the printed table, each run's label in the report)")

    why = sub.add_parser("explain", help=COMMANDS["explain"], formatter_class=fmt,
                         description="Read one run, or a 1-worker run and an N-worker run of the same config, and "
                                     "say what limits the N-worker step (first line: limited by: ...), its parts "
                                     "(compute, exchange, waiting for the slowest worker, the engine's overhead, "
                                     "contention from other processes), and what would change the answer (the "
                                     "batch and model size at which N workers beat one by 1.5x, the network at "
                                     "which DiLoCo or compression pays, the straggler), from the cost model fitted "
                                     "on the runs, each with its uncertainty. See docs/explain.md.",
                         epilog="example:\n  python -m workbench run --algorithm sync_sgd --cpus 1 --out runs/one\n"
                                "  python -m workbench run --algorithm sync_sgd --cpus 2 --out runs/two\n"
                                "  python -m workbench explain runs/one runs/two")
    why.add_argument("runs", nargs="+", metavar="RUN", help="run directories (each with summary.json)")

    pred = sub.add_parser("predict", help=COMMANDS["predict"], formatter_class=fmt,
                          description="Answer each row of ROWS.csv with RUN_DIR's trained model (its params.npy), "
                                      "the rows scaled as the run scaled its features and the answers in its class "
                                      "names. A run trained on a CSV takes its feature columns by name; where the "
                                      "rows also have the label column, how often the two agree is printed.",
                          epilog="example:\n  python -m workbench run --dataset flowers.csv --standardize --out runs/f\n"
                                 "  python -m workbench predict runs/f new_flowers.csv --out predicted.csv")
    pred.add_argument("run", metavar="RUN_DIR", help="a run directory (with summary.json and params.npy)")
    pred.add_argument("rows", metavar="ROWS", help="the rows to answer: a CSV (a header row; the run's feature "
                                                   "columns), or arrays (a .npy of rows, a .npz with X and maybe y)")
    pred.add_argument("--out", default=None, metavar="FILE.csv",
                      help="write the rows with a predicted column here, with the rows' own separator "
                           "(default: print them)")
    _add_best_flag(pred, "answer")

    gen = sub.add_parser("generate", help=COMMANDS["generate"], formatter_class=fmt,
                         description="Write text with RUN_DIR's trained language model (its params.npy): each "
                                     "character drawn from the model's next-character distribution over the last "
                                     "`context` characters. On markov_text, also how many of its transitions the "
                                     "generating language allows.",
                         epilog="example:\n  python -m workbench run --model gpt --dataset markov_text --optimizer adamw "
                                "--lr 0.003 --steps 800 --out runs/gpt\n"
                                "  python -m workbench generate runs/gpt --prompt 'the ' --length 300")
    gen.add_argument("run", metavar="RUN_DIR", help="a run directory of a language model (model gpt on a text)")
    gen.add_argument("--prompt", default=None, help="the text to go on from (default: one character of the "
                                                    "training text, drawn by --seed)")
    gen.add_argument("--length", type=int, default=200, help="characters to write (default 200)")
    gen.add_argument("--temperature", type=float, default=1.0,
                     help="scores divided by this before the softmax: below 1 surer, above 1 wilder; 0 takes the "
                          "most likely character each time (default 1)")
    gen.add_argument("--seed", type=int, default=0, help="the draws' seed: the same seed, the same text (default 0)")
    _add_best_flag(gen, "write")

    noise = sub.add_parser("noise-scale", help=COMMANDS["noise-scale"], formatter_class=fmt,
                           description="The gradient noise scale B_simple = tr(Sigma) / |G|^2 (McCandlish et al. "
                                       "2018) of RUN_DIR's model and training data at its parameters, from the "
                                       "gradients of single examples: below it a larger batch mostly removes noise "
                                       "(about proportionally fewer steps: linear lr scaling's regime), well above "
                                       "it a larger batch takes about as many steps. It grows as the loss falls, so "
                                       "compare the initial and the final parameters. With a band of one jackknife "
                                       "standard error. See docs/usage.md.",
                           epilog="example:\n  python -m workbench run --algorithm sync_sgd --steps 300 --out runs/a\n"
                                  "  python -m workbench noise-scale runs/a --at initial\n"
                                  "  python -m workbench noise-scale runs/a")
    noise.add_argument("run", metavar="RUN_DIR", help="a run directory (with summary.json, and params.npy unless "
                                                      "--at initial)")
    noise.add_argument("--at", choices=["final", "best", "initial"], default="final",
                       help="which parameters: the run's final (params.npy), its best (params_best.npy) or the "
                            "initial ones (default: final)")
    noise.add_argument("--rows", type=int, default=2048, help="training examples whose gradients are taken "
                                                              "(default: 2048, or the whole set if smaller)")
    noise.add_argument("--seed", type=int, default=0, help="which examples (default: 0)")

    exp = sub.add_parser("export", help=COMMANDS["export"],
                         description="Write each run's steps and evaluations as TensorBoard scalars, one "
                                     "subfolder of --logdir per run (needs the tensorboard extra: "
                                     "pip install 'parallel-workbench[tensorboard]').")
    exp.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories (each with summary.json)")
    exp.add_argument("--tensorboard", action="store_true", required=True,
                     help="the format to export to (the only one so far)")
    exp.add_argument("--logdir", required=True, metavar="DIR", help="TensorBoard log folder to write into")

    les = sub.add_parser("lessons", help=COMMANDS["lessons"],
                         description="Copy notebooks/ and experiments/ (as packaged with this install) into "
                                     "DIR, ready for `jupyter lab DIR/notebooks` and "
                                     "`python -m workbench reproduce DIR/experiments/NAME.yaml`.")
    les.add_argument("dir", metavar="DIR", help="folder to copy into (created; existing files are kept)")
    les.add_argument("--overwrite", action="store_true", help="replace files that already exist in DIR")

    bench = sub.add_parser("bench", help=COMMANDS["bench"],
                           description="The throughput table (bench alone), or, with one of --allreduce, "
                                       "--simulated, --sim-vs-real, --checkpoints, --gpt, --torch-adapter, another "
                                       "benchmark instead. Each flag is read by the benchmarks in its [read by: ...]; "
                                       "given to another, it is refused in one line.")
    reads: dict[str, tuple[tuple[str, ...], Any]] = {}   # a flag's dest -> (the modes that read it, its default)

    def flag(*names: str, modes: tuple[str, ...], default: Any = None, **kw: Any) -> None:
        """A bench flag, read by `modes` (BENCH_MODES' names; "bench" alone is THROUGHPUT): its
        help says where, from the same tuple `bench_mode` checks."""
        if names[0][2:].replace("-", "_") not in BENCH_MODES:
            kw["help"] += f" [read by: {', '.join(map(_mode_flag, modes))}]"
        action = bench.add_argument(*names, default=False if kw.get("action") == "store_true" else None, **kw)
        reads[action.dest] = (modes, default)

    T, C = THROUGHPUT, "checkpoints"
    flag("--algorithms", modes=(T,), default="all", help="comma-separated names, or all (default)")
    flag("--tau", modes=(T,), default=1, type=int, help="EASGD family: local steps between exchanges (default 1)")
    flag("--cpus", modes=(T, C), default=2, type=int, help="CPU worker processes (default 2)")
    flag("--sizes", modes=(T, C), default="teaching,535k",
         help="model sizes: teaching (MLP 64-128-10, batch 32/worker), 535k (MLP 784-512-256-10, 128/worker)")
    flag("--batch-per-worker", modes=(T, C), type=int, help="a custom size instead of --sizes")
    flag("--hidden", modes=(T, C), help="a custom size: hidden widths, e.g. 512,256")
    flag("--n-features", modes=(T, C), type=int, help="a custom size: input features")
    flag("--seconds", modes=(T, C), default=4.0, type=float, help="measured time per configuration (default 4)")
    flag("--no-torch", modes=(T, "allreduce"), action="store_true", help="skip the PyTorch DDP peer (and gloo)")
    flag("--rounds", modes=(T, "allreduce", "sim_vs_real", C, "gpt", "torch_adapter"), type=int,
         help="measure every row this many times, interleaved; the table shows the median "
              "ratio and its range (a shared machine's ratios move by tenths between runs); "
              "default 1, 5 with --sim-vs-real, 40 with --allreduce, 3 with --checkpoints, 5 with --gpt, "
              "7 with --torch-adapter")
    flag("--out", modes=(T, "allreduce", C),
         help="also write the table as CSV here (and the allreduce table beside it, NAME.allreduce.csv)")
    flag("--compare", modes=(T, "allreduce"), metavar="CSV",
         help="also print each row beside the same row of a table an earlier bench wrote with --out: "
              "then, now, and now / then")
    flag("--allreduce", modes=("allreduce",), action="store_true",
         help="instead: the allreduce table alone (the ring over Dask on tcp and tls, gloo when torch "
              "is installed, shared memory; 40 KB and 2.1 MB; at --workers worker processes, default "
              "2,3,4; --rounds rounds, default 40)")
    flag("--simulated", modes=("simulated",), action="store_true",
         help="instead: what the simulated cluster costs (workbench.bench.simulated): a simulated epoch "
              "against single-process sgd, and the memory of 1024 virtual workers")
    flag("--workers", modes=("simulated", "allreduce"),
         help="--simulated: virtual workers of the timed epochs (default 64); --allreduce: "
              "comma-separated numbers of worker processes, e.g. 2,8 (default 2,3,4)")
    flag("--repeats", modes=("simulated",), default=3, type=int, help="best of this many, interleaved (default 3)")
    flag("--rows-per-worker", modes=("simulated",), default=16, type=int,
         help="rows of the global batch per worker (default 16)")
    flag("--sim-vs-real", modes=("sim_vs_real",), action="store_true",
         help="instead: simulated against real runs of 1 and 2 workers on this machine (workbench.sim."
              "validate): the table, with the load and whether each is within +-15%%")
    flag("--steps", modes=("sim_vs_real",), default=150, type=int, help="steps of each run (default 150)")
    flag("--checkpoints", modes=(C,), action="store_true",
         help="instead: what checkpoints cost (workbench.bench.checkpoints): runs interleaved without "
              "and with a checkpoint every --every steps, the cost of one, its share of step time at "
              "that interval and at the default (60 s)")
    flag("--every", modes=(C,), default=200, type=int, help="steps between checkpoints (default 200)")
    flag("--gpt", modes=("gpt",), action="store_true",
         help="instead: a training step of the GPT (maths.gpt) on one core against the same architecture "
              "in PyTorch eager on one core (workbench.bench.gpt; needs torch): the ratio per size")
    flag("--torch-adapter", modes=("torch_adapter",), action="store_true",
         help="instead: a worker's step on a torch model through the adapter (maths.torchmodel) against "
              "a plain PyTorch loop of the same module and batch, one core each "
              "(workbench.bench.adapter; skipped without torch): the ratio per size")
    bench.set_defaults(bench_reads=reads)

    rep = sub.add_parser("reproduce", help=COMMANDS["reproduce"], formatter_class=fmt,
                         epilog="exit status: 0 every expected shape held; 1 the notebook failed; 2 invalid input; "
                                "3 the notebook ran but an expected shape did not hold (or was not measured)")
    rep.add_argument("experiment", help="experiments/<name>.yaml")
    rep.add_argument("--quick", action="store_true",
                     help="the experiment's quick parameters (about a minute); shapes the file's quick_skips "
                          "names read 'skipped in quick mode', every other shape is checked")
    rep.add_argument("--out", required=True, help="output directory")
    rep.add_argument("--notebook", default=None,
                     help="run this notebook instead of the experiment's (which must be in the repository's notebooks/)")
    rep.add_argument("--no-progress", action="store_true",
                     help="no cell progress bar and no notebook log on stderr")
    rep.add_argument("--seeds", default=None,
                     help="comma-separated seeds, e.g. 0,1,2: run the notebook once per seed (default: the file's "
                          "seeds, quick_seeds with --quick); a verdict holds only beyond the range over them")
    rep.add_argument("--seed-jobs", default=None,
                     help="how many seeds' notebooks run at once (default: the file's seed_jobs, 1 unless it says "
                          "otherwise; never more than the cores): for simulated notebooks only")

    grid = sub.add_parser("grid", help=COMMANDS["grid"], formatter_class=fmt,
                          description="Run the config at every combination of the --vary values, once per seed, "
                                      "and print each combination's metric over its seeds (mean, deviation, range) "
                                      "with a verdict against the best: told apart when the difference is beyond two "
                                      "standard errors, not distinguishable otherwise (one seed tells nothing apart). "
                                      "With --out: a run directory per run, grid_runs.csv and grid.csv.",
                          epilog=GRID_EXAMPLES)
    _add_config_flags(grid)
    grid.add_argument("--vary", action="append", required=True, metavar="FIELD=VALUES",
                      help="a config field and the values to try, comma-separated (lr=0.01,0.1) or as a YAML list "
                           "('hidden=[[64],[128,64]]'); repeat for more fields")
    grid.add_argument("--seeds", default="0", help="comma-separated seeds each combination runs with (default: 0; "
                                                   "three or more tell combinations apart)")
    grid.add_argument("--metric", default=None, choices=["final_test_accuracy", "final_test_loss", "best_test_loss",
                                                          "final_val_accuracy", "final_val_loss", "best_val_loss"],
                      help="what ranks the combinations (default: final_test_accuracy, final_test_loss for text; "
                           "with a validation set, val_fraction, the validation set's: the test set stays out of "
                           "the choice)")
    grid.add_argument("--no-progress", action="store_true", help="no progress bar")
    grid.add_argument("--overwrite", action="store_true",
                      help="replace a grid already saved in --out (otherwise refused before any run); once the new "
                           "grid ends, its earlier runs the new one did not replace are removed")

    sweep = sub.add_parser("sweep", help=COMMANDS["sweep"], formatter_class=fmt,
                           description="Run the config once per worker count; with --out, write one run "
                                       "directory per count, sweep.csv and the scaling figure sweep.html.",
                           epilog=SWEEP_EXAMPLES)
    _add_config_flags(sweep)
    sweep.add_argument("--workers", default="1,2",
                       help="comma-separated worker counts, e.g. 1,2,4; speedup and efficiency are against the "
                            "first (default: 1,2). --out is the sweep's folder: one run directory per count")
    sweep.add_argument("--mode", choices=["strong", "weak"], default="strong",
                       help="strong: the global batch stays fixed; weak: it grows with the workers")
    sweep.add_argument("--rounds", type=int, default=None,
                       help="measure the points interleaved this many times (1, 2, 1, 2, ...) and report the median "
                            "and range of each (default 3; 1 with --simulate: virtual time is deterministic)")
    sweep.add_argument("--max-rounds", type=int, default=None,
                       help="then repeat each point whose rate is not yet known to +-5%% up to this many rounds, "
                            "still interleaved; one still outside says 'not resolved' with its spread "
                            "(default max(--rounds, 8); --rounds with --simulate)")
    sweep.add_argument("--budget-s", type=float, default=None,
                       help="also stop repeating after this many seconds (checked between rounds; default: no "
                            "time cap beyond --max-rounds)")
    sweep.add_argument("--no-progress", action="store_true", help="no progress bars")
    sweep.add_argument("--overwrite", action="store_true",
                       help="replace a sweep already saved in --out (otherwise refused before any run); once the new "
                            "sweep ends, its earlier runs the new one did not replace are removed")
    if prog != MODULE_PROG:      # the examples name the command as it was called
        for p in (parser, *sub.choices.values()):
            p.description = p.description and p.description.replace(MODULE_PROG, prog)
            p.epilog = p.epilog and p.epilog.replace(MODULE_PROG, prog)
    return parser


THROUGHPUT = "throughput"   # `bench` with none of BENCH_MODES: the throughput table
BENCH_MODES = ("allreduce", "simulated", "sim_vs_real", "checkpoints", "gpt", "torch_adapter")   # each "instead: ..."


def _mode_flag(mode: str) -> str:
    """How a bench mode is asked for.

    >>> _mode_flag("sim_vs_real"), _mode_flag(THROUGHPUT)
    ('--sim-vs-real', 'bench alone')
    """
    return "bench alone" if mode == THROUGHPUT else "--" + mode.replace("_", "-")


def bench_mode(args: argparse.Namespace) -> str:
    """The benchmark `bench`'s flags ask for (`THROUGHPUT` or one of `BENCH_MODES`), after
    refusing (ConfigError) two modes at once or a flag given that the mode does not read
    (it was ignored without a word); fills in each flag left out with its default.

    >>> ns = argparse.Namespace(bench_reads={"allreduce": (("allreduce",), None), "simulated": (("simulated",), None),
    ...                                      "cpus": ((THROUGHPUT,), 2)}, allreduce=True, simulated=False, cpus=None)
    >>> bench_mode(ns), ns.cpus
    ('allreduce', 2)
    >>> ns.cpus = 4
    >>> bench_mode(ns)
    Traceback (most recent call last):
    ...
    workbench.config.ConfigError: cpus: only with bench alone (--allreduce does not read it), got 4
    """
    reads = args.bench_reads
    modes = [m for m in BENCH_MODES if getattr(args, m, False)]
    if len(modes) > 1:
        raise ConfigError(modes[1], f"one of {', '.join(map(_mode_flag, BENCH_MODES))} at a time",
                          " ".join(map(_mode_flag, modes)))
    mode = modes[0] if modes else THROUGHPUT
    for dest, (readers, _) in reads.items():
        value = getattr(args, dest)
        if dest in BENCH_MODES or value is None or value is False:
            continue
        if mode not in readers:
            raise ConfigError(dest, f"only with {' or '.join(map(_mode_flag, readers))} ({_mode_flag(mode)} does "
                              "not read it)", value)
    for dest, (_, default) in reads.items():
        if getattr(args, dest) is None:
            setattr(args, dest, default)
    return mode


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(called_as(sys.argv[0] if argv is None and sys.argv else None))
    args = parser.parse_args(argv)
    with notes_as_lines():
        return _command(parser, args)


@contextlib.contextmanager
def notes_as_lines() -> Iterator[None]:
    """In this block a `PlatformNote` (a limit a run works around, a busy worker it waits
    for) is printed as one `note: ...` line on stderr, as the CLI's other notes read, not in
    Python's warning format (file, line number and source line); other warnings pass as
    they are."""
    from ..execution.platforms import PlatformNote
    previous = warnings.showwarning

    def show(message: Any, category: type, filename: str, lineno: int, file: Any = None,
             line: str | None = None) -> None:
        if issubclass(category, PlatformNote):
            print(f"note: {message}", file=sys.stderr, flush=True)
            return
        previous(message, category, filename, lineno, file, line)
    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = previous


def _command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """`main` once the command line is parsed: the command, with its exit status."""
    from ..util.startup import STOPPED_BEFORE_START, started
    try:
        started()   # a Ctrl-C is caught below from here (before: `util.startup`'s one line)
        if args.command == "algorithms":
            from ..config import ALGORITHMS  # loads the algorithm modules (numpy, pandas): only here
            width = max(map(len, ALGORITHMS))
            for name, text in ALGORITHMS.items():
                print(f"{name:<{width}}  {text}")
            return EXIT_OK
        if args.command == "run":
            return _run(args)
        if args.command == "schema":
            print(json.dumps(config_schema(), indent=2))
            return EXIT_OK
        if args.command == "compare":
            return _compare(args)
        if args.command == "export":
            return _export(args)
        if args.command == "explain":
            return _explain(args)
        if args.command == "predict":
            return _predict(args)
        if args.command == "generate":
            return _generate(args)
        if args.command == "noise-scale":
            from ..api import noise_scale
            print(noise_scale(_run_dirs([args.run])[0], at=args.at, rows=args.rows, seed=args.seed).text())
            return EXIT_OK
        if args.command == "lessons":
            return _lessons(args)
        if args.command == "bench":
            bench_mode(args)
            if args.simulated:
                from ..bench.simulated import main as sim_bench_main
                return sim_bench_main(args)
            if args.sim_vs_real:
                from ..sim.validate import main as sim_vs_real_main
                return sim_vs_real_main(args)
            if args.checkpoints:
                from ..bench.checkpoints import main as checkpoints_main
                return checkpoints_main(args)
            if args.gpt:
                from ..bench.gpt import main as gpt_bench_main
                return gpt_bench_main(args)
            if args.torch_adapter:
                from ..bench.adapter import main as adapter_bench_main
                return adapter_bench_main(args)
            from ..bench.command import main as bench_main
            return bench_main(args)
        if args.command == "sweep":
            return _sweep(args)
        if args.command == "grid":
            return _grid(args)
        if args.command == "reproduce":
            from .reproduce import NotebookFailed, reproduce
            try:
                outcome = reproduce(args.experiment, args.out, quick=args.quick, progress=not args.no_progress,
                                    notebook=args.notebook, seeds=_seed_flag(args.seeds),
                                    seed_jobs=_seed_jobs_flag(args.seed_jobs))
            except NotebookFailed as exc:
                print(f"error: {exc}", file=sys.stderr)
                return EXIT_FAILED
            for c in outcome["checks"]:
                mark = c["verdict"] if c["verdict"] == "not resolved" else \
                    {True: "held", False: "did NOT hold"}.get(c["held"], c["verdict"])
                paper = f"; paper: {c['paper']}" if c.get("paper") else ""
                margin = f"; margin {c['margin']}" if c.get("margin") else ""
                note = f"; {c['note']}" if c.get("note") and c["held"] else ""   # a margin of 0: on signs alone
                print(f"  [{mark}] {c['text']}  ({c['measured']}{margin}{note}{paper})")
            print(f"report: {outcome['report']}")
            if outcome["failed"]:
                print(f"error: expected shape did not hold: {', '.join(outcome['failed'])} "
                      f"(exit {EXIT_SHAPE})", file=sys.stderr)
                return EXIT_SHAPE
            return EXIT_OK
    except RunDirError as exc:   # the disk filled up (or a quota): what could be kept was kept
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except (ConfigError, ValueError) as exc:
        # Invalid input: one line, no traceback (exit code 2: docs/usage.md, "Exit codes").
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except ImportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except KeyboardInterrupt:  # Ctrl-C while checking inputs: nothing had started, nothing to save
        print(STOPPED_BEFORE_START, file=sys.stderr)
        return EXIT_FAILED
    except (MemoryError, RuntimeError) as exc:   # an address space (ulimit -v) too small for what it met
        if isinstance(exc, RuntimeError) and "can't start new thread" not in str(exc):
            raise
        from ..util.limits import address_space_limit
        limit = address_space_limit()
        print(f"error: memory: ran out of address space ({type(exc).__name__}: {str(exc) or 'out of memory'}"
              f"{f'; ulimit -v is {limit >> 20} MiB' if limit else ''}); raise the limit or run less at once",
              file=sys.stderr)
        return EXIT_FAILED
    parser.error(f"unknown command {args.command!r}")
    return EXIT_INVALID


STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")


@contextlib.contextmanager
def stop_on_signals(on_signal: Callable[[str], None] | None = None, what: str = "the run"):
    """SIGINT, SIGTERM and SIGHUP stop the run as Ctrl-C does: the first one raises
    KeyboardInterrupt in the main thread (the engine asks the loops to stop and keeps
    what they gathered, the run directory is written, exit code 1); later ones are
    noted and ignored, so that nothing interrupts the saving. Off the main thread
    (signals cannot be caught there) this does nothing.

    A signal this process was started with ignored stays ignored: a job started with `cmd &`
    by a shell without job control (a script, CI) inherits SIGINT ignored, so that a Ctrl-C
    meant for the script is not for it, and one started under `nohup` inherits SIGHUP ignored.
    SIGTERM is always handled: it stops such a run.

    Args:
        on_signal: called with the first signal's name instead of raising (the sweep
            sets its stop flag, which the run in progress polls: nothing is interrupted
            between two bytecodes of a save).
        what: what the note on stderr says is stopping.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    state = {"stopping": False}

    def handler(signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if state["stopping"]:
            print(f"note: {name} received; already stopping, saving what was gathered", file=sys.stderr)
            return
        state["stopping"] = True
        print(f"note: {name} received; stopping {what} and saving what was gathered", file=sys.stderr, flush=True)
        if on_signal is not None:
            on_signal(name)
            return
        raise KeyboardInterrupt(name)

    saved = {}
    for name in STOP_SIGNALS:
        if hasattr(signal, name):
            sig = getattr(signal, name)
            if name != "SIGTERM" and signal.getsignal(sig) is signal.SIG_IGN:   # ignored by whoever
                continue                                                           # started us: kept so
            saved[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in saved.items():
            signal.signal(sig, old)


def _first_record_says(line: str, then: Any) -> Any:
    """An on_record that prints `line` to stderr when the first records arrive (training
    has started: an input refused before that is the only line printed), then calls `then`."""
    said = []

    def on_record(records: Any) -> None:
        if not said:
            said.append(True)
            print(line, file=sys.stderr)
        if then is not None:
            then(records)
    return on_record


def _default_out(config: RunConfig) -> str:
    return str(Path("runs") / f"{config.algorithm}-{dataset_slug(config.dataset)}-{time.strftime('%Y%m%d-%H%M%S')}")


def dataset_slug(dataset: str) -> str:
    """The dataset in a run directory's default name: a built-in one's key, a data file's
    name without its folders and suffix (a `.npy` pair's first file's, a folder's own name),
    in letters, digits, dots, dashes and underscores.

    >>> dataset_slug("digits"), dataset_slug("/data/iris.csv"), dataset_slug("x.npy,y.npy"), dataset_slug("~/my data/")
    ('digits', 'iris', 'x', 'my_data')
    """
    first = str(dataset).split(",")[0].strip().rstrip("/\\")
    name = Path(first).name
    stem = Path(name).stem if Path(name).suffix.lower() in (".csv", ".npz", ".npy", ".txt") else name
    return re.sub(r"[^A-Za-z0-9._-]+", "_", stem).strip("._") or "data"


def _run(args: argparse.Namespace) -> int:
    from ..execution.preflight import preflight

    if args.resume is not None:
        return _resume(args)
    config = config_from_args(args)
    if config.out is None:
        config = config.replace(out=_default_out(config))
    overwrite = bool(getattr(args, "overwrite", False))
    checked = preflight(config, overwrite=overwrite)  # every check that can fail, before a cluster starts
    from .. import api  # (after preflight: a refused --scheduler is said before api's imports, pandas among them)
    for message in checked:
        print(f"warning: {message}", file=sys.stderr)
    fixed = fixed_workers_note(config)
    if fixed:
        print(f"note: {fixed}", file=sys.stderr)
    progress = None if args.no_progress or not sys.stderr.isatty() else _progress_bar(config)
    from ..algorithms import REGISTRY
    spec = REGISTRY.get(config.algorithm)
    if not config.simulate and not (spec is not None and spec.in_process):   # a run on Dask: sgd and
        from ..execution.cluster import one_line_logs  # simulated runs skip importing Dask (0.5 s of CPU)
        one_line_logs()  # Dask's own log lines, without their tracebacks
    with stop_on_signals():
        try:
            from ..execution.engine import transport_for
            transport = transport_for(config)   # sgd: the thread transport (in this process, no cluster)
            on_record = progress
            if transport is not None and transport.name == "dask":   # the Dask dashboard, one click away
                from ..execution.cluster import dashboard_link
                on_record = _first_record_says(f"dask dashboard: {dashboard_link(transport.client)}", progress)
            result = api.run(config, cluster=transport, on_record=on_record, progress=False,  # the CLI's own bar
                             overwrite=overwrite, checked=checked,          # checked above: not again
                             report=False)   # report.html below, once the status line is out
        except KeyboardInterrupt:  # while the cluster started: nothing gathered, the run is saved as stopped
            from ..api import _stopped_before_start, save
            result = _stopped_before_start(config, 0.0, "SIGINT")
            save(result, config.out, overwrite=overwrite)
        finally:
            if progress is not None:
                progress.close()
            from ..execution.cluster import close_session
            try:
                close_session()  # a CLI run owns its cluster: shut it down before exiting
            except KeyboardInterrupt:  # a signal after the run was saved: nothing is lost
                pass
    return _report_run(result, config)


def fixed_workers_note(config: RunConfig) -> str | None:
    """One sentence where the config asks for more workers (`cpus`, `gpus` set, not left at
    their defaults) than its algorithm trains on (sgd: one, by design), else None: the run
    goes on with its own count, and the reader learns why the others stay idle.

    >>> fixed_workers_note(RunConfig(cpus=4))
    'sgd trains on one worker; --cpus 4 asked for 4: use sync_sgd (or another parallel algorithm) to use them'
    >>> fixed_workers_note(RunConfig()), fixed_workers_note(RunConfig(cpus=1)), fixed_workers_note(RunConfig(algorithm="sync_sgd", cpus=4))
    (None, None, None)
    """
    from ..config.registry import specs
    fixed = specs()[config.algorithm].workers
    asked = [(f, getattr(config, f)) for f in ("cpus", "gpus") if f in config.model_fields_set
             and isinstance(getattr(config, f), int) and getattr(config, f) > 0]
    total = sum(n for _, n in asked)
    if fixed is None or total <= fixed:
        return None
    return (f"{config.algorithm} trains on {'one worker' if fixed == 1 else f'{fixed} workers'}; "
            f"{' '.join(f'--{f} {n}' for f, n in asked)} asked for {total}: use sync_sgd (or another parallel "
            "algorithm) to use them")


def _resume(args: argparse.Namespace) -> int:
    """`run --resume DIR`: the run in DIR goes on from its last checkpoint (`api.resume`)."""
    from .. import api
    given = [name for name in RunConfig.model_fields if name in vars(args)] + \
        (["config"] if getattr(args, "config", None) else []) + (["overwrite"] if args.overwrite else [])
    if given:
        raise ConfigError(given[0], "no other run flag with --resume (the run goes on with its own config)",
                          getattr(args, given[0]))
    _, _, config, said = api.resume_checks(args.resume)   # every check that can fail, before a cluster starts
    for line in said:   # what the checkpoint's own checks found, before anything starts (the summary keeps them)
        if line.startswith("checkpoint:"):
            print(f"warning: {line}", file=sys.stderr, flush=True)
    progress = None if args.no_progress or not sys.stderr.isatty() else _progress_bar(config)
    if not config.simulate:
        from ..execution.cluster import one_line_logs
        one_line_logs()
    with stop_on_signals():
        try:
            from ..execution.engine import transport_for
            # the cluster starts here, as a new run's does: neither counts its start in the run's start-up
            transport = transport_for(config)
            on_record = progress
            if transport.name == "dask":
                from ..execution.cluster import dashboard_link
                on_record = _first_record_says(f"dask dashboard: {dashboard_link(transport.client)}", progress)
            result = api.resume(args.resume, cluster=transport, on_record=on_record, progress=False, report=False)
        finally:
            if progress is not None:
                progress.close()
            from ..execution.cluster import close_session
            try:
                close_session()
            except KeyboardInterrupt:
                pass
    return _report_run(result, RunConfig.from_dict(result.summary["config"]))


def _written(frame: Any) -> bool:
    """Whether a table of answers keeps the row index its rows came with (`data.files.read_rows`:
    the one `DataFrame.to_csv` writes), to be written back as their first column."""
    import pandas as pd
    return not isinstance(frame.index, pd.RangeIndex)


EVENTS_SHOWN = 3   # events of one kind the terminal shows after a run; the rest are counted


def _event_lines(events: list[dict]) -> list[str]:
    r"""The terminal's lines for a run's troubles (divergence, failures, lost workers): each
    kind's first `EVENTS_SHOWN` (each worker of an asynchronous run says it diverged: 1,024
    lines), then a count; a failure several workers sent alike (the model's own error, with
    its traceback) once, with who sent it.

    >>> tb = "RuntimeError: broke\nTraceback ..."
    >>> _event_lines([{"event": "failed", "worker": 0, "message": tb}, {"event": "failed", "worker": 1, "message": tb}])
    ['  failed: RuntimeError: broke\nTraceback ...', '  (the same failure from workers 0, 1)']
    """
    lines: list[str] = []
    said: dict[str, int] = {}
    alike: dict[str, list] = {}   # a failure's message -> the workers that sent it
    for event in events:
        kind = event["event"]
        if kind not in ("diverged", "failed", "worker_lost", "scheduler_lost"):
            continue
        if kind == "failed" and event["message"] in alike:
            alike[event["message"]].append(event.get("worker"))
            continue
        said[kind] = said.get(kind, 0) + 1
        if said[kind] <= EVENTS_SHOWN:
            lines.append(f"  {kind}: {event['message']}")
            if kind == "failed":
                alike[event["message"]] = [event.get("worker")]
    for workers in alike.values():
        if len(workers) > 1:
            lines.append(f"  (the same failure from workers {', '.join(str(w) for w in workers)})")
    for kind, n in said.items():
        if n > EVENTS_SHOWN:
            lines.append(f"  ... and {n - EVENTS_SHOWN:,} more {kind} events (all in the summary's events)")
    return lines


def _trouble_lines(s: dict) -> list[str]:
    """A finished run's troubles for the terminal: this segment's events (`_event_lines`; a
    resumed run's earlier segments were said when they ended, the summary keeps them), then
    each failed worker's error where no event above said it (a loop that never started has
    none).

    >>> tb = "RuntimeError: broke\\nTraceback ..."
    >>> _trouble_lines({"status": "failed", "events": [
    ...     {"event": "failed", "worker": 0, "message": "RuntimeError: old", "segment": 0},
    ...     {"event": "failed", "worker": 0, "message": tb, "segment": 1}],
    ...     "errors": {"0": "RuntimeError: broke", "1": "worker 1: a peer it waits for is gone"}})
    ['  failed: RuntimeError: broke\\nTraceback ...', '  worker 1: a peer it waits for is gone']
    """
    from ..results.result import last_segment
    lines = _event_lines(last_segment(s.get("events", [])))
    if s.get("status") == "failed":
        for rank, error in (s.get("errors") or {}).items():
            first = str(error).splitlines()[0] if error else str(error)
            if any(first in line for line in lines):   # its traceback is above already
                continue
            lines.append(f"  {first}" if first.startswith(f"worker {rank}:") else f"  worker {rank}: {first}")
    return lines


def resume_hint(out: str | Path, last: int) -> str:
    """The line a stopped or failed run's status ends with, where it can go on from.

    >>> resume_hint("runs/x", 1)
    '  resume: python -m workbench run --resume runs/x (its last checkpoint, after 1 step)'
    >>> resume_hint("runs/x", 1500)
    '  resume: python -m workbench run --resume runs/x (its last checkpoint, after 1,500 steps)'
    """
    return f"  resume: python -m workbench run --resume {out} (its last checkpoint, after {last:,} " \
           f"step{'s' if last != 1 else ''})"


def _report_run(result: Any, config: RunConfig) -> int:
    """The CLI's lines about a finished run, its report.html, and the exit code."""
    from .. import measure
    from ..learning import accuracy_text
    s = result.summary
    out = (s.get('config') or {}).get('out') or config.out
    if s["status"] == "stopped" and not s.get("workers") and not s.get("steps"):   # `api._stopped_before_start`
        why = next((e["message"] for e in s.get("events", []) if e["event"] == "stop_requested"), "stopped")
        print(f"stopped: {why}; nothing ran (run directory: {out}) (exit {EXIT_FAILED})", file=sys.stderr)
        return EXIT_FAILED
    on = s.get("workers_by_kind") or f"{len(s.get('workers') or [])} worker(s)"
    roles = "".join(f" + {r['role']}" for r in s.get("roles") or [])
    print(f"{s['status']}: {config.algorithm} on {config.dataset}, {on}{roles}{' (simulated)' if s.get('simulated') else ''}, "
          f"{s['steps']} steps, "
          f"{s['samples_per_s']:.0f} samples/s{_blas_clause(s)}, {accuracy_text(s)}, "
          + measure.comm_fraction_text(s))
    for line in _model_lines(s, config):
        print(f"  {line}")
    for line in _trouble_lines(s):
        print(line, file=sys.stderr)
    from ..measure import notes
    for line in notes(s):   # a run that learned nothing is a warning; the rest are notes
        print(f"  {'warning' if line == s.get('learning_note') else 'note'}: {line}")
    from ..learning import clip_text, per_class_text
    for line in (per_class_text(s.get("per_class")), clip_text(s.get("grad_clip"))):
        if line:   # a data file of yours: where its accuracy comes from; a clipping run: how often it clipped
            print(f"  {line}")
    print(f"run directory: {out}")
    for said in (w for w in s.get("warnings") or [] if w.startswith("out: ")):   # why not (or why again) --out's
        print(f"  note: {said}")
    last = (s.get("checkpoints") or {}).get("last_step")
    from ..api import resume_refusal
    if s["status"] in ("stopped", "failed") and last is not None \
            and resume_refusal(config, s) is None:   # where the run can go on from
        print(resume_hint(out, last))
    _write_report(result, out)
    return EXIT_OK if s["status"] == "completed" else EXIT_FAILED


def _nats(value: float) -> str:
    """A loss in nats to four decimals, or in three significant digits once it is past any
    loss a model that learns has (a diverging one's 28-digit number read as precision).

    >>> _nats(0.71136), _nats(4.28e27), _nats(float("inf"))
    ('0.7114', '4.28e+27', 'inf')
    """
    return f"{value:.4f}" if abs(value) < 1e4 else f"{value:.3g}"


def _model_lines(summary: dict, config: Any) -> list[str]:
    """A language model's numbers (nats per token, perplexity, the gap to the best loss) and,
    for a simulated run, its communication against sync_sgd's on the same virtual cluster."""
    out = []
    lm = summary.get("language")
    if lm:
        best = "" if lm.get("best_loss") is None else \
            f"; best possible {lm['best_loss']:.4f} (gap {_nats(lm['gap_to_best'])})"
        acc = lm.get("next_token_accuracy")
        out.append(f"language model: test loss {_nats(lm['loss_nats_per_token'])} nats/token (perplexity "
                   f"{lm['perplexity']:.3g}){'' if acc is None else f', next-token accuracy {acc:.4f}'}{best}")
    if summary.get("simulated"):
        from ..sim.costs import comm_against_sync, comm_text
        c = comm_against_sync(summary)
        if c is not None:
            name = config.algorithm + ("" if config.compression == "none" else f" ({config.compression})")
            out.append(comm_text(name, c))
    return out


def _blas_clause(summary: dict) -> str:
    """" (1 BLAS thread per worker)" for a real run (the rule every entry point follows,
    `util.blas`); "" for a simulated one, whose compute is charged, not run."""
    if summary.get("simulated") or "blas_threads" not in summary:
        return ""
    from ..util.blas import rule_text
    return f" ({rule_text(summary['blas_threads'])})"


def _write_report(result: Any, out: str) -> None:
    """report.html, rendered after the run directory is committed (its data is safe): a
    signal or a write error now costs only the report, and says how to render it later."""
    from .. import api
    with stop_on_signals():
        try:
            try:
                path = api.write_run_report(result, out)
            finally:   # the spool goes whether or not the report could be written (steps.csv holds its rows)
                api.settle_steps(result, out)
        except KeyboardInterrupt as exc:
            print(f"report: not written ({exc or 'interrupted'}); the run is saved: "
                  f"`python -m workbench compare {out} --out {Path(out) / 'report.html'}` renders one later",
                  file=sys.stderr)
            return
        except RunDirError as exc:
            print(f"warning: {exc}", file=sys.stderr)
            return
    if path is not None:
        print(f"report: {path}")


def _progress_bar(config: RunConfig):
    """The run's bar (epochs or steps, loss, accuracy): workbench.execution.progress.RunProgress."""
    from ..execution.progress import RunProgress
    return RunProgress(config)


def _sweep(args: argparse.Namespace) -> int:
    """`sweep`: the points run one after another; SIGINT, SIGTERM or SIGHUP stops the point
    in progress (saved as `stopped`), keeps every finished point, writes the table of the
    points that ran (sweep.csv, sweep.html) and exits 1."""
    signalled: list[str] = []
    with stop_on_signals(signalled.append, what="the sweep's current point"):
        return _sweep_points(args, signalled)


def _sweep_points(args: argparse.Namespace, signalled: list[str]) -> int:
    import warnings

    from .. import api
    from ..execution.preflight import preflight

    config = config_from_args(args)
    try:
        workers = [int(w) for w in args.workers.split(",") if w]
    except ValueError:
        raise ConfigError("workers", "comma-separated whole numbers >= 1", args.workers) from None
    if not workers or min(workers) < 1:
        raise ConfigError("workers", "comma-separated whole numbers >= 1", args.workers)
    # the sweep checked once (every point's config: a batch no point can take is the config's
    # fault, whatever the machine; the rounds), then the machine's checks on the largest point
    from ..analysis.sweep import Sweep
    from ..config.registry import specs
    if config.scheduler and not specs()[config.algorithm].in_process:
        from ..execution.preflight import check_reachable
        check_reachable(config.scheduler)   # a refused address in one line before the plan, as run says it
    plan = Sweep.plan(config, workers, args.mode, simulate=config.simulate, rounds=args.rounds,
                      max_rounds=args.max_rounds, budget_s=args.budget_s)
    progress = not getattr(args, "no_progress", False) and sys.stderr.isatty()
    with api.warnings_once(show=lambda message: print(f"warning: {message}", file=sys.stderr)):
        for message in preflight(plan.largest):   # once each, as `run` prints them, however many runs raise them
            warnings.warn(message, api.RunWarning, stacklevel=1)
        table = api.run_sweep(plan, out=config.out, progress=progress, should_stop=lambda: bool(signalled),
                              overwrite=args.overwrite)
    print(sweep_text(table))
    for _, row in table.iterrows():   # what the numbers can and cannot tell, in words
        for note in (row.get("resolution_note"), row.get("run_note"), row.get("machine_note")):
            if isinstance(note, str) and note and note != "one round: no spread measured":
                print(f"  note ({row['workers']} worker{'s' if row['workers'] != 1 else ''}): {note}")
    if config.out:
        paths = {"sweep": str(Path(config.out) / "sweep.csv")}
        figure = _sweep_figure(table, config, args.mode, Path(config.out) / "sweep.html") if len(table) else None
        if figure is not None:
            paths["figure"] = str(figure)
        print(json.dumps(paths))
    if signalled:
        stopped = [int(w) for w, st in zip(table["workers"], table["status"]) if st != "completed"]
        print(f"stopped: {signalled[0]} received; {len(table)} of {len(workers)} worker counts in the table"
              f"{f' ({stopped} stopped part-way)' if stopped else ''}"
              f"{f', every run that ran saved under {config.out}' if config.out else ''} (exit {EXIT_FAILED})",
              file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _add_best_flag(parser: argparse.ArgumentParser, verb: str) -> None:
    """`--best`: a saved run's parameters at its lowest validation (else test) loss instead of its final ones."""
    parser.add_argument("--best", action="store_true", help=f"{verb} with the parameters at the run's lowest "
                                                            "validation loss, or test loss without a validation set "
                                                            "(params_best.npy), instead of its final ones")


def vary_values(items: Sequence[str]) -> dict[str, list[Any]]:
    """`--vary FIELD=VALUES` flags as {field: values}: dashes in FIELD read as underscores,
    VALUES a YAML list or comma-separated YAML scalars.

    >>> vary_values(["lr=0.01,0.1", "batch-size=32", "hidden=[[64], [128, 64]]", "optimizer=sgd,lamb"])
    {'lr': [0.01, 0.1], 'batch_size': [32], 'hidden': [[64], [128, 64]], 'optimizer': ['sgd', 'lamb']}
    """
    import yaml
    out: dict[str, list[Any]] = {}
    for item in items:
        field, eq, text = item.partition("=")
        if not eq or not field.strip() or not text.strip():
            raise ConfigError("vary", "FIELD=VALUES, e.g. lr=0.01,0.1", item)
        field = field.strip().replace("-", "_")
        try:
            if text.strip().startswith("["):
                values = yaml.safe_load(text)
            else:
                values = [yaml.safe_load(v) for v in text.split(",") if v.strip()]
        except yaml.YAMLError:
            raise ConfigError("vary", "values as comma-separated numbers or words, or a YAML list", item) from None
        if not isinstance(values, list) or not values:
            raise ConfigError("vary", "at least one value: FIELD=V1,V2 or FIELD=[V1, V2]", item)
        if field in out:
            raise ConfigError("vary", f"each field once ({field} is given twice)", item)
        out[field] = values
    return out


def _grid(args: argparse.Namespace) -> int:
    """`grid`: the runs one after another; SIGINT, SIGTERM or SIGHUP stops the run in
    progress, keeps every finished one, writes the table of what ran and exits 1."""
    import warnings

    from .. import api
    from ..analysis.grid import GridPlan, verdict_text
    from ..execution.preflight import preflight
    config = config_from_args(args)
    seeds = _seeds_flag(args.seeds)
    plan = GridPlan.make(config, vary_values(args.vary), seeds, args.metric)
    signalled: list[str] = []
    progress = not getattr(args, "no_progress", False) and sys.stderr.isatty()
    with stop_on_signals(signalled.append, what="the grid's current run"), \
            api.warnings_once(show=lambda message: print(f"warning: {message}", file=sys.stderr)):
        for message in preflight(plan.config_at(plan.points()[0], plan.seeds[0]).replace(out=None)):
            warnings.warn(message, api.RunWarning, stacklevel=1)
        table = api.run_grid(plan, out=config.out, progress=progress, should_stop=lambda: bool(signalled),
                             overwrite=args.overwrite)
    print(grid_text(table, plan))
    print(verdict_text(table, plan))
    for label, note in grid_notes(table, plan):
        print(f"  note ({label}): {note}")
    if config.out:
        paths = {"grid": str(Path(config.out) / "grid.csv"), "runs": str(Path(config.out) / "grid_runs.csv")}
        figure = _grid_figure(table, plan, Path(config.out)) if len(table) else None
        if figure is not None:
            paths["figure"] = str(figure)
        print(json.dumps(paths))
    if signalled:
        print(f"stopped: {signalled[0]} received; {int(table['runs'].sum()) if len(table) else 0} of {plan.n_runs} runs "
              f"in the table{f', every run that ran saved under {config.out}' if config.out else ''} "
              f"(exit {EXIT_FAILED})", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _grid_figure(table: Any, plan: Any, out: Path) -> Path | None:
    """grid.html beside grid.csv: the runs' metric against the first varied field
    (`figures.grid_figure`) and the table."""
    try:
        import pandas as pd

        from ..ui import figures as F
        from ..ui.report import figure_div, page, table_view
    except ImportError as exc:  # no plotly (the lab extra): the CSVs are what matter
        from ..util.extras import missing_extra
        print(f"note: no grid.html: {missing_extra('grid.html', exc)}", file=sys.stderr)
        return None
    from ..analysis.grid import verdict_text
    from ..util.fileio import atomic_write
    runs = pd.read_csv(out / "grid_runs.csv")
    title = f"grid of {plan.config.algorithm} on {plan.config.dataset}: {', '.join(plan.values)} over seeds"
    notes = [f"<p>note ({html.escape(label)}): {html.escape(note)}</p>" for label, note in grid_notes(table, plan)]
    sections = [f"<p>{html.escape(verdict_text(table, plan))}</p>",
                f'<div class="figure">{figure_div(F.grid_figure(runs, plan), "fig-grid")}</div>',
                table_view(_verdict_first(table.drop(columns="note"), plan)).to_html(), *notes]
    return atomic_write(out / "grid.html", page(title, sections))


def _verdict_first(table: Any, plan: Any) -> Any:
    """The table with the combination, its metric over the seeds and its verdict first."""
    m = plan.metric
    first = [*plan.values, "completed", f"{m}_mean", f"{m}_std", f"{m}_min", f"{m}_max", "verdict"]
    return table[first + [c for c in table.columns if c not in first]]


def grid_notes(table: Any, plan: Any) -> list[tuple[str, str]]:
    """(combination, note): the first note any of its runs had (a run that learned nothing or
    learned its training set by heart), and how many of its runs other processes crowded
    (`machine_note`)."""
    from ..analysis.grid import GridPlan
    return [(GridPlan.label({k: row[k] for k in plan.values}), row[c]) for _, row in table.iterrows()
            for c in ("note", "machine_note") if isinstance(row.get(c), str) and row[c]]


def _seeds_flag(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in str(text).split(",") if s.strip()]
    except ValueError:
        raise ConfigError("seeds", "comma-separated whole numbers >= 0, e.g. 0,1,2", text) from None
    return seeds


def grid_text(table: Any, plan: Any) -> str:
    """A grid's table for the terminal: each combination, its metric over the seeds as
    mean +- deviation (range), beside a validation metric the test set's mean, the
    throughput as a sweep prints a point's rounds, median +-spread (range over the seeds),
    and the verdict (grid.csv keeps every column)."""
    if not len(table):
        return "(no run finished)"
    m = plan.metric
    shown = table[list(plan.values)].copy()
    shown["seeds"] = [f"{int(c)}/{int(r)}" for c, r in zip(table["completed"], table["runs"])]

    def over_seeds(row: Any) -> str:
        mean, std = row[f"{m}_mean"], row[f"{m}_std"]
        if mean is None or mean != mean:
            return "-"
        if std is None or std != std:
            return f"{mean:.4f}"
        return f"{mean:.4f} +-{std:.4f} ({row[f'{m}_min']:.4f}-{row[f'{m}_max']:.4f})"

    shown[m.replace("final_", "").replace("_", " ")] = [over_seeds(r) for _, r in table.iterrows()]
    if "_val_" in m:   # chosen on the validation rows: the test set's number beside it, the estimate no choice saw
        test = "final_test_accuracy" if m.endswith("accuracy") else "final_test_loss"
        shown[test.replace("final_", "").replace("_", " ") + " (mean)"] = [
            "-" if v is None or v != v else f"{v:.4f}" for v in table[test]]
    rate = "samples/virtual s" if plan.config.simulate else "samples/s"   # a simulated run's clock is virtual

    def over_seeds_rate(row: Any) -> str:   # the median, its +- and the range over the seeds where there are two
        from ..measure import spread_text
        v, lo, hi, spread = (row.get(c) for c in ("samples_per_s", "samples_per_s_lo", "samples_per_s_hi", "spread"))
        if v is None or v != v:
            return "-"
        if lo is None or hi is None or lo != lo or hi != hi or int(row["completed"]) < 2:
            return f"{v:,.0f}"
        return f"{v:,.0f} {spread_text(spread)} ({lo:,.0f}-{hi:,.0f})"
    shown[rate] = [over_seeds_rate(r) for _, r in table.iterrows()]
    shown["verdict"] = table["verdict"]
    return shown.to_string(index=False)


SWEPT = {"workers": "workers", "batch_size": "batch", "samples_per_s": "samples/s", "speedup": "speed-up",
         "efficiency": "efficiency", "comm_fraction": "comm", "final_test_accuracy": "test acc",
         "final_val_accuracy": "val acc", "steps": "steps", "status": "status", "rounds": "rounds", "spread": "+-"}   # sweep.csv's columns the terminal shows


SIMULATED_SWEEP = ("simulated: virtual workers on a virtual clock, samples per virtual second (not a measurement "
                   "of this machine); a simulated run on a named profile or a kept calibration is deterministic (the "
                   "same config gives the same numbers), so one round measures a point and there is no +- to measure")
# the header where a point's calibration of this machine's core was judged bad (`calibration_kept`
# false): charged, not kept, so the next sweep times the core again and gets other numbers
SIMULATED_SWEEP_UNKEPT = ("simulated: virtual workers on a virtual clock, samples per virtual second (not a "
                          "measurement of this machine); this machine's core was timed while busy and that calibration "
                          "was not kept (the notes say so), so these numbers will change from run to run (a kept "
                          "calibration, or the core or a named profile, gives the same numbers for the same config); "
                          "one round was run, so there is no +-")


def sweep_text(table: Any) -> str:
    """A sweep's table for the terminal: the columns a scaling question reads (sweep.csv
    keeps them all), each number at the precision it is known to; "-" where there is none.
    A simulated sweep's says so above its header (`SIMULATED_SWEEP`: virtual time, and why
    "+-" is "-"; `SIMULATED_SWEEP_UNKEPT` where a point's calibration of this machine's core was
    not kept, whose numbers change run to run) and heads its rates "samples/virtual s", as a
    simulated grid's are."""
    from ..measure import spread_text
    held_out = "final_val_accuracy" in table.columns and table["final_val_accuracy"].notna().any()
    shown = table[[c for c in SWEPT if c in table.columns and (held_out or c != "final_val_accuracy")]].rename(columns=SWEPT)
    fmt = {"samples/s": "{:,.0f}".format, "speed-up": "{:.2f}x".format, "efficiency": "{:.0%}".format,
           "comm": "{:.3f}".format, "test acc": "{:.4f}".format, "val acc": "{:.4f}".format,
           "+-": lambda v: spread_text(v).removeprefix("+-") if v == v else "-"}
    shown = _formatted(shown, fmt)
    if "speed-up" in shown.columns and {"speedup_lo", "speedup_hi", "rounds"} <= set(table.columns):
        # the speed-up's range between the rounds' extremes (`combine_rounds`, `measure.median_speedup`): a
        # ratio of medians alone read as settled where the rounds behind it ran from half to twice it
        ranged = [f"{s:.2f}x ({lo:.2f}-{hi:.2f})" if n >= 2 and lo == lo and hi == hi else None
                  for s, lo, hi, n in zip(table["speedup"].astype(float), table["speedup_lo"].astype(float),
                                          table["speedup_hi"].astype(float), table["rounds"].fillna(0).astype(int))]
        shown["speed-up"] = [r if r is not None else v for r, v in zip(ranged, shown["speed-up"])]
    if "+-" in shown.columns and "rounds" in shown.columns:   # one round measures no spread
        shown.loc[table["rounds"].fillna(0).astype(int).to_numpy() < 2, "+-"] = "-"
    simulated = len(table) > 0 and "simulated" in table.columns and table["simulated"].fillna(False).astype(bool).all()
    if simulated:   # virtual seconds: read as this machine's throughput, the table would mislead
        unkept = "calibration_kept" in table.columns and bool(table["calibration_kept"].eq(False).any())
        return (SIMULATED_SWEEP_UNKEPT if unkept else SIMULATED_SWEEP) + "\n" + \
            shown.rename(columns={"samples/s": "samples/virtual s"}).to_string(index=False)
    return shown.to_string(index=False)


def _sweep_figure(table: Any, config: RunConfig, mode: str, path: Path) -> Path | None:
    """The sweep's scaling figure, its runs overlaid, as one HTML page beside sweep.csv."""
    try:
        from ..ui import figures as F
        from ..ui.report import write_comparison_report
    except ImportError as exc:  # no plotly (the lab extra): the CSV is what matters
        from ..util.extras import missing_extra
        print(f"note: no sweep.html: {missing_extra('sweep.html', exc)}", file=sys.stderr)
        return None
    runs = [d for d in table["run_dir"] if isinstance(d, str) and (Path(d) / "summary.json").exists()]
    labels = [f"{w} worker{'s' if w != 1 else ''}" for w, d in zip(table["workers"], table["run_dir"]) if d in runs]
    return write_comparison_report(runs, path, title=f"{mode} scaling of {config.algorithm} on {config.dataset}",
                                   labels=labels, figures=[F.scaling_figure(table, mode=mode)])


def _run_dirs(paths: Sequence[str]) -> list[Path]:
    """The given run directories, each checked for a summary.json (exit 2 otherwise)."""
    from ..results.rundir import uncommitted_message
    dirs = [Path(p) for p in paths]
    for d in dirs:
        if d.is_dir() and not (d / "summary.json").exists():
            raise ConfigError("RUN_DIR", f"a committed run directory ({uncommitted_message(d)})", str(d))
        if not (d / "summary.json").is_file():
            raise ConfigError("RUN_DIR", "a run directory holding summary.json", str(d))
    return dirs


def _compare(args: argparse.Namespace) -> int:
    """`compare RUN_DIR... --out report.html`: the runs as a table (`comparison_text`), and
    ui.report's comparison page."""
    if args.out is not None and Path(args.out).is_dir():   # before any work: where the report goes
        raise ConfigError("out", "a file to write the report to (this is a directory)", args.out)
    dirs = _run_dirs(args.runs)
    labels = None
    if args.labels:
        labels = [p.strip() for p in args.labels.split(",")]
        if len(labels) != len(dirs):
            raise ConfigError("labels", f"one name per run ({len(dirs)} names)", args.labels)
    try:
        from ..ui.report import write_comparison_report
    except ImportError as exc:
        from ..util.extras import missing_extra
        raise missing_extra("compare", exc) from None
    from ..results.result import RunResult
    results = [RunResult.load(d) for d in dirs]
    title = args.title or f"comparison of {len(dirs)} runs"
    path = write_comparison_report(results, args.out, title=title, labels=labels)
    names = labels or [str(d) for d in dirs]
    print(comparison_text(results, names))
    from ..measure import notes
    from ..ui.report import comparison_notes, last_evaluated
    across = comparison_notes([r.summary for r in results], names, [last_evaluated(r) for r in results])
    for note in across:   # what the table cannot be read across
        print(f"  note: {note}")
    for name, r in zip(names, results):   # what each run's numbers come with, as `run` printed them
        for note in notes(r.summary):
            print(f"  note ({name}): {note}")
    print(f"report: {path}")
    return EXIT_OK


COMPARED = {"status": "status", "workers": "workers", "steps": "steps", "samples_per_s": "samples/s",
            "final_test_accuracy": "test acc", "final_test_loss": "test loss",
            "final_val_accuracy": "val acc", "final_val_loss": "val loss",   # where a run held rows out
            "wall_time_s": "wall s", "comm_fraction": "comm"}   # the report's summary columns the terminal shows


def comparison_text(results: list, labels: list[str]) -> str:
    """The runs `compare` writes a report of, as a table for the terminal: each run's label,
    the config fields that differ between them (`report.differing_config`), and its headline
    numbers (`report.summary_table`'s, a few of them)."""
    import pandas as pd

    from ..ui.report import accuracy_95_text, differing_config, summary_table
    table = summary_table(results, labels)
    shown = table[[c for c in COMPARED if c in table.columns]].rename(columns=COMPARED)
    if "test acc" in shown.columns:   # how sure each accuracy is: its 95% interval, beside it
        shown.insert(list(shown.columns).index("test acc") + 1, "test acc 95%",
                     [accuracy_95_text(r.summary, counted=False) or "-" for r in results])
    diff = differing_config([r.summary.get("config") or {} for r in results])
    diff = diff.drop(columns=[c for c in diff.columns if c == "out"])
    width = max(len(label) for label in labels)
    out = pd.concat([pd.DataFrame({"run": [label.ljust(width) for label in labels]}), diff, shown], axis=1)
    fmt = {"samples/s": "{:,.0f}".format, "test acc": "{:.4f}".format, "test loss": "{:.4f}".format,
           "val acc": "{:.4f}".format, "val loss": "{:.4f}".format, "wall s": "{:.2f}".format, "comm": "{:.3f}".format}
    return _formatted(out, fmt).to_string(index=False)


def _formatted(table: Any, fmt: dict[str, Any]) -> Any:
    """`table` with each column of `fmt` as text, its numbers through the column's format and
    anything else (a run with no rate, NaN) as "-" (a copy)."""
    table = table.copy()
    for col, f in fmt.items():
        if col in table.columns:
            table[col] = [f(v) if isinstance(v, (int, float)) and v == v else "-" for v in table[col]]
    return table


def _explain(args: argparse.Namespace) -> int:
    """`explain RUN [RUN...]`: each run with more workers against the one with fewest
    (`analysis.explain`), printed; the first line of each says what limits it."""
    from ..analysis.explain import explain, refuse_folder
    for d in args.runs:   # a sweep's folder: its runs are what to explain
        refuse_folder(d)
    found = explain(_run_dirs(args.runs))   # (directories: explain reads a demo's or a sweep's rounds beside them)
    print("\n\n".join(e.text() for e in found))
    return EXIT_OK


def _predict(args: argparse.Namespace) -> int:
    """`predict RUN_DIR ROWS.csv [--out FILE]`: the rows with a predicted column."""
    from .predict import predict_rows
    if args.out is not None and Path(args.out).is_dir():   # before any work: where the answers go
        raise ConfigError("out", "a file to write the answers to (this is a directory)", args.out)
    out, agreement, sep = predict_rows(_run_dirs([args.run])[0], args.rows, params="best" if args.best else "final")
    if args.out is None:
        sys.stdout.write(out.to_csv(sep=sep, index=_written(out)))
        if agreement:
            print(f"note: {agreement}", file=sys.stderr)
        return EXIT_OK
    from ..util.fileio import atomic_write
    try:
        atomic_write(args.out, out.to_csv(sep=sep, index=_written(out)))   # the rows' own separator
    except OSError as exc:
        raise ConfigError("out", f"a file that can be written ({exc.strerror or type(exc).__name__})",
                          args.out) from None
    print(f"wrote {len(out)} rows with their predicted class to {args.out}" + (f"; {agreement}" if agreement else ""))
    return EXIT_OK


def _generate(args: argparse.Namespace) -> int:
    """`generate RUN_DIR [--prompt ...]`: the prompt and what the model wrote after it."""
    from ..api import generate, load
    from .predict import allowed_text
    result = load(_run_dirs([args.run])[0])
    text = generate(result, prompt=args.prompt, length=args.length, temperature=args.temperature, seed=args.seed,
                    params="best" if args.best else "final")
    print((args.prompt or "") + text)
    said = allowed_text(result, text)
    if said:
        print(f"note: {said}", file=sys.stderr)
    return EXIT_OK


def _export(args: argparse.Namespace) -> int:
    """`export --tensorboard RUN_DIR... --logdir DIR`: scalars TensorBoard can open."""
    from .export import export_tensorboard
    dirs = _run_dirs(args.runs)
    for d, written in zip(dirs, export_tensorboard(dirs, args.logdir)):
        print(f"{d} -> {written}")
    print(f"view with: tensorboard --logdir {args.logdir}")
    return EXIT_OK


def _lessons(args: argparse.Namespace) -> int:
    """`lessons DIR`: copy the packaged notebooks and experiments out."""
    from .lessons import copy_lessons
    copied = copy_lessons(args.dir, overwrite=args.overwrite)
    print(f"copied {len(copied)} files into {args.dir}: jupyter lab {Path(args.dir) / 'notebooks'}")
    return EXIT_OK


def _seed_jobs_flag(text: str | None) -> int | None:
    """`reproduce --seed-jobs 2` as an int (None: the experiment file's seed_jobs).

    >>> _seed_jobs_flag("2"), _seed_jobs_flag(None)
    (2, None)
    """
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        raise ConfigError("seed_jobs", "an integer >= 1", text) from None


def _seed_flag(text: str | None) -> list[int] | None:
    """`reproduce --seeds 0,1,2` as a list (None: the experiment file's seeds).

    >>> _seed_flag("0,1,2"), _seed_flag(None)
    ([0, 1, 2], None)
    """
    if text is None:
        return None
    try:
        return [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ConfigError("seeds", "comma-separated whole numbers >= 0, e.g. 0,1,2", text) from None
