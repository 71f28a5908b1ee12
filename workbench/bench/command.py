"""`python -m workbench bench`: the benchmark's command (arguments, sizes and rounds, the printout).

The measurements and the table's maths are `workbench.bench.throughput`'s (see its docstring
for what is measured and against what); the torch peer's rows are
`workbench.bench.torchpeer`'s, present only when torch is importable (a note says so
otherwise); the allreduce table that ends the printout (and is all `--allreduce` prints)
is `workbench.bench.allreduce`'s. `--compare CSV` prints each row beside the same row
of a table saved with `--out`.
"""
from __future__ import annotations

import argparse
import os
import time
from typing import Any

import numpy as np
import pandas as pd

from .throughput import (
    PLAIN_BARE,
    PLAIN_ENGINE,
    RUNDIR,
    Bench,
    Entry,
    Size,
    _algorithm_entry,
    _bare_sync_entry,
    _bench_config,
    _limit_entry,
    _plain_engine_entry,
    _plain_entry,
    _shm_exchange_entry,
    _sizes,
    above_limit_notes,
    combine_rounds,
    compare_tables,
    spending_notes,
    verdict,
)
from .torchpeer import _ddp_entry, _gloo_entry, _torch_limit_entry, torch_available

# ------------------------------------------------------------------------------ the table
TORCH_MISSING = ("PyTorch rows (its no-exchange limit, DDP, gloo's all_reduce) not measured: torch is not "
                 "installed here (`pip install 'parallel-workbench[torch]'` adds the peer; the workbench never "
                 "needs it)")


def entries(args: argparse.Namespace, algorithms: list[str]) -> list[Entry]:
    """The benchmark's rows, in order; the torch peer's only when torch is importable
    (`TORCH_MISSING` says so otherwise)."""
    out = [Entry("no-exchange limit", _limit_entry),
           Entry("allreduce, shared memory (ours)", _shm_exchange_entry),
           Entry("bare sync loop (no engine)", _bare_sync_entry),
           Entry(PLAIN_BARE, _plain_entry)]
    if "sync_sgd" in algorithms:
        out.append(Entry(PLAIN_ENGINE, _plain_engine_entry))
    out += [Entry(a, _algorithm_entry(a)) for a in algorithms]
    if "sync_sgd" in algorithms:   # as a user's run makes it: what keeping the record costs
        out.append(Entry(RUNDIR, _algorithm_entry("sync_sgd", rundir=True)))
    if not args.no_torch and torch_available():
        out += [Entry("PyTorch no-exchange limit", _torch_limit_entry),
                Entry("PyTorch DDP (gloo)", _ddp_entry),
                Entry("all_reduce, gloo (PyTorch)", _gloo_entry)]
    return out


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        if not np.isfinite(v):
            return ""
        return f"{v:,.3f}" if abs(v) < 10 else f"{v:,.0f}"
    return str(v)


def check_args(args: argparse.Namespace) -> list[Size]:
    """The sizes to measure, after raising ConfigError for any benchmark argument that
    cannot work (before any worker starts)."""
    import math

    from ..config import ConfigError, RunConfig
    from ..execution.preflight import check_memory
    if not (math.isfinite(args.seconds) and 0.5 <= args.seconds <= 3600):
        raise ConfigError("seconds", "a number of seconds in [0.5, 3600] per measurement", args.seconds)
    for name in ("cpus", "batch_per_worker", "tau", "n_features", "rounds", "every"):
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise ConfigError(name, "a whole number >= 1", value)
    if getattr(args, "out", None):
        parent = os.path.dirname(os.path.abspath(args.out))
        if os.path.isdir(args.out) or not os.path.isdir(parent) or not os.access(parent, os.W_OK):
            raise ConfigError("out", "a CSV file path in a writable directory", args.out)
    if getattr(args, "compare", None):
        saved_table(args.compare)
    sizes = _sizes(args)
    for size in sizes:
        cfg = RunConfig(algorithm="sync_sgd", dataset="synthetic", n_samples=max(20000, 8 * size.batch_per_worker * args.cpus),
                        n_features=size.n_features, hidden=size.hidden, cpus=args.cpus,
                        batch_size=size.batch_per_worker * args.cpus, steps=10)
        check_memory(cfg)
    return sizes


ALLREDUCE_ROUNDS = 20   # the full bench's allreduce table (`--allreduce` alone: 40 by default)


def allreduce_path(out: str) -> str:
    """Where the full bench writes its allreduce table beside the main one (--out).

    >>> allreduce_path("runs/bench.csv")
    'runs/bench.allreduce.csv'
    """
    root, ext = os.path.splitext(out)
    return f"{root}.allreduce{ext or '.csv'}"


def saved_table(path: str) -> pd.DataFrame:
    """A table an earlier bench wrote with --out (ConfigError if it is not one)."""
    from ..config import ConfigError
    from .throughput import COMPARE_KEYS
    try:
        table = pd.read_csv(path)
    except (OSError, ValueError, pd.errors.ParserError):
        raise ConfigError("compare", "a CSV file that bench --out wrote", path) from None
    if not any(set(k) <= set(table.columns) for k in COMPARE_KEYS):
        raise ConfigError("compare", f"a CSV file that bench --out wrote (columns {' or '.join(map(str, COMPARE_KEYS))})",
                          path)
    return table


def render(table: pd.DataFrame) -> str:
    """A table as printed: text left-aligned (every line starts with its row's name, so no
    row looks like a traceback's indented line), numbers right-aligned, blanks for NaN.

    >>> print(render(pd.DataFrame({"what": ["a", "longer"], "vs_limit": [0.5, float("nan")]})))
    what    vs_limit
    a          0.500
    longer
    """
    cols = list(table.columns)
    text = [not pd.api.types.is_numeric_dtype(table[c]) for c in cols]
    cells = [[str(c) for c in cols]] + [[_fmt(v) if not t else ("" if pd.isna(v) else str(v))
                                         for v, t in zip(row, text)] for row in table.itertuples(index=False)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(cols))]
    return "\n".join("  ".join(c.ljust(w) if t else c.rjust(w) for c, w, t in zip(r, widths, text)).rstrip()
                     for r in cells)


def size_tables(table: pd.DataFrame, sizes: list[Size], rounds: int) -> str:
    """The combined table as printed: one block per size, headed by the size, with every
    row measured at it (`render`: each line starts with the row's name), and after one round
    the note that its ratios have no range (`one_round_note`).

    >>> t = pd.DataFrame({"size": ["teaching", "535k"], "what": ["sync_sgd"] * 2, "vs_limit": [0.6, 0.9]})
    >>> print(size_tables(t, [Size("teaching", 64, "128", 32), Size("535k", 784, "512,256", 128)], 3))
    <BLANKLINE>
    teaching: MLP 64-128-10, batch 32/worker, 3 round(s)
    what      vs_limit
    sync_sgd     0.600
    <BLANKLINE>
    535k: MLP 784-512-256-10, batch 128/worker, 3 round(s)
    what      vs_limit
    sync_sgd     0.900
    """
    blocks = []
    for size in sizes:
        rows = table.loc[table["size"] == size.name].drop(columns="size")
        blocks.append(f"\n{size.name}: {size.label()}, {rounds} round(s)\n{render(rows)}")
    said = one_round_note(rounds)
    return "\n".join(blocks + ([f"note: {said}"] if said else []))


def limit_notes(table: pd.DataFrame, per_round: list[pd.DataFrame], sizes: list[Size]) -> list[str]:
    """The notes under the table for its rows above their own limit (`above_limit_notes`),
    size by size: `table` combined over the rounds (`combine_rounds`), `per_round` each
    size's rows of every round."""
    notes = []
    for size in sizes:
        rounds = next((t for t in per_round if (t["size"] == size.name).all()), None)
        notes += above_limit_notes(table[table["size"] == size.name], size.name, rounds=rounds)
    return notes


def one_round_note(rounds: int) -> str | None:
    """The sentence under a table of one round (None for more): its ratios come without a
    range, and how to get one.

    >>> one_round_note(3) is None
    True
    """
    if rounds > 1:
        return None
    return ("one round: its ratios (vs_limit, the DDP verdict, the notes' \"of the bare sync loop\" and \"of "
            "sync_sgd\") have no range, and a shared machine's ratios move by tenths between runs: --rounds 3 "
            "measures every row three times, interleaved, and gives each ratio its range")


def print_comparison(table: pd.DataFrame, path: str) -> None:
    """Each row of `table` beside the same row of the saved table at `path`: now / then."""
    print(f"\ncompared with {path} (ratio: now / then; vs_limit higher is better, ms lower):")
    print(render(compare_tables(table, saved_table(path))))


def allreduce_main(args: argparse.Namespace) -> int:
    """`bench --allreduce`: the allreduce table alone (`bench.allreduce`), at `--workers`
    worker processes (default 2, 3 and 4)."""
    from .allreduce import ROUNDS, allreduce_table, format_table, gloo_plan, header_line, worker_counts
    ranks = worker_counts(getattr(args, "workers", None))
    rounds = int(getattr(args, "rounds", None) or ROUNDS)
    gloo, told = gloo_plan(False if args.no_torch else None)
    print(header_line(rounds, gloo) + "; other processes share the host", flush=True)
    table, notes = allreduce_table(ranks=ranks, rounds=rounds, gloo=gloo)
    notes = told + notes
    print(format_table(table))
    for note in notes:
        print(f"note: {note}")
    if args.out:
        table.to_csv(args.out, index=False)
    if getattr(args, "compare", None):
        print_comparison(table, args.compare)
    return 0


def main(args: argparse.Namespace) -> int:
    from ..algorithms import REGISTRY
    from ..config import ConfigError
    from ..execution.cluster import close_client, make_cluster, workers_of
    from ..execution.engine import run
    from ..maths.models import make_model

    algorithms = list(REGISTRY) if args.algorithms == "all" else [a for a in str(args.algorithms).split(",") if a]
    for a in algorithms:
        if a not in REGISTRY:
            raise ConfigError("algorithms", f"comma-separated names from {sorted(REGISTRY)}", a)
    from ..util.machine import usable_cores
    sizes = check_args(args)
    if getattr(args, "allreduce", False):
        return allreduce_main(args)
    rounds = int(getattr(args, "rounds", None) or 1)
    blas = {k: os.environ.get(k, "(unset)") for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"benchmark: {args.cpus} CPU workers, {args.seconds:g} s per measurement, {rounds} round(s); {blas}; "
          f"load average {load:.2f} on {usable_cores()} cores", flush=True)
    client = make_cluster(cpus=args.cpus, gpus=0, quiet=True)
    tables: list[pd.DataFrame] = []
    per_round: list[pd.DataFrame] = []   # each size's rows of every round (the notes' paired ratios)
    notes: list[str] = []
    try:
        workers = workers_of(client)[: args.cpus]
        # A warm cluster: how long from run() to the first training step (the first run
        # on fresh workers imports and loads data; the second is what a session sees).
        run(_bench_config(args, "sync_sgd", 3, sizes[0]), cluster=client)
        t0 = time.perf_counter()
        warm = run(_bench_config(args, "sync_sgd", 3, sizes[0]), cluster=client)
        warm_run_s = time.perf_counter() - t0
        for size in sizes:
            print(f"\n{size.name}: {size.label()}", flush=True)
            b = Bench(client, workers, size, args)
            b.n_params = make_model("mlp", size.n_features, 10, hidden=size.widths).n_params
            rows = []
            for rnd in range(rounds):        # every row once per round: drifts hit all rows alike
                for entry in entries(args, algorithms):
                    got = entry.measure(b)
                    if got is not None:
                        rows.append({"size": size.name, "what": entry.what, "round": rnd, **got})
                        print(f"  {entry.what}: " + ", ".join(f"{k} {_fmt(v)}" for k, v in got.items()), flush=True)
            table = pd.DataFrame(rows)
            for col in ("samples_per_s", "limit", "limit_moved", "comm_fraction", "exchange_ms"):
                if col not in table:
                    table[col] = float("nan")
            table["vs_limit"] = table["samples_per_s"] / table["limit"]
            per_round.append(table)
            tables.append(combine_rounds(table))
            notes += b.notes
    finally:
        close_client(client)
    table = pd.concat(tables, ignore_index=True)
    cols = ["size", "what", "samples_per_s", "limit", "vs_limit", "vs_limit_min", "vs_limit_max", "comm_fraction",
            "bytes_per_step", "exchange_ms"]
    cols = [c for c in cols if c in table.columns]
    cols += [c for c in table.columns if c not in cols]
    print(size_tables(table[[c for c in cols if c != "limit_moved"]], sizes, rounds))   # (the CSV keeps it)
    print()
    for size in sizes:
        print(verdict(table[table["size"] == size.name], size.name))
    for size in sizes:                 # what each algorithm under 0.8 of its limit spends
        notes += spending_notes(table[table["size"] == size.name], size.name,
                                rounds=next((t for t in per_round if (t["size"] == size.name).all()), None))
    notes += limit_notes(table, per_round, sizes)   # a row above its own limit: the load moved, not a faster run
    print(f"warm cluster: first training step {warm.summary['startup_s']:.3f} s after run() was called "
          f"(whole 3-step run {warm_run_s:.2f} s)")
    if args.no_torch or not torch_available():
        notes.append("--no-torch: PyTorch rows not measured" if args.no_torch else TORCH_MISSING)
    from .allreduce import allreduce_table, format_table, gloo_plan, header_line
    gloo, told = gloo_plan(False if args.no_torch else None)
    print("\n" + header_line(ALLREDUCE_ROUNDS, gloo), flush=True)
    exchanges, more = allreduce_table(rounds=ALLREDUCE_ROUNDS, gloo=gloo)
    more = told + more
    print(format_table(exchanges))
    for note in notes + more:
        print(f"note: {note}")
    if args.out:
        table[cols].assign(startup_s=warm.summary["startup_s"]).to_csv(args.out, index=False)
        exchanges.to_csv(allreduce_path(args.out), index=False)
    if getattr(args, "compare", None):
        print_comparison(table[cols], args.compare)
    return 0
