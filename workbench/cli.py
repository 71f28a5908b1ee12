"""Command line: `python -m workbench run|algorithms|bench|sweep ...`.

Every `RunConfig` field is a flag (underscores become dashes) and a YAML key; flags given
on the command line override `--config FILE.yaml`, which overrides the defaults.

Exit codes: 0 the run completed; 2 invalid input (one line `error: <field>: <allowed>, got
<value>`, no traceback); 1 the run did not complete (stopped, diverged or failed; what was
gathered is still saved).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from .config import ALGORITHMS, ConfigError, RunConfig

EXIT_OK, EXIT_FAILED, EXIT_INVALID = 0, 1, 2


def _add_config_flags(p: argparse.ArgumentParser) -> None:
    """One flag per RunConfig field; values stay strings until RunConfig validates them."""
    p.add_argument("--config", metavar="FILE.yaml", help="read fields from a YAML file first")
    for name, field in RunConfig.model_fields.items():
        flag = "--" + name.replace("_", "-")
        helptext = f"default: {field.default!r}"
        if field.annotation is bool:
            p.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction,
                           default=argparse.SUPPRESS, help=helptext)
        else:
            p.add_argument(flag, dest=name, default=argparse.SUPPRESS, metavar=name.upper(), help=helptext)


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """Merge defaults < --config file < flags into one validated RunConfig."""
    data: dict[str, Any] = {}
    if getattr(args, "config", None):
        data.update(RunConfig.from_yaml(args.config).to_dict())
    for name in RunConfig.model_fields:
        if name in vars(args):
            value = getattr(args, name)
            data[name] = None if value in ("none", "None", "") and _nullable(name) else value
    return RunConfig.from_dict(data)


def _nullable(name: str) -> bool:
    return RunConfig.model_fields[name].default is None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m workbench", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="train one run and write its run directory")
    _add_config_flags(run)
    run.add_argument("--no-progress", action="store_true", help="no progress bar")

    sub.add_parser("algorithms", help="list the algorithms")

    bench = sub.add_parser("bench", help="throughput benchmark: algorithms vs the no-exchange limit vs PyTorch DDP")
    bench.add_argument("--algorithms", default="all", help="comma-separated names, or all")
    bench.add_argument("--tau", type=int, default=1, help="EASGD family: local steps between exchanges")
    bench.add_argument("--cpus", type=int, default=2)
    bench.add_argument("--batch-per-worker", type=int, default=128)
    bench.add_argument("--hidden", default="512,256")
    bench.add_argument("--n-features", type=int, default=784)
    bench.add_argument("--seconds", type=float, default=4.0, help="measured time per configuration")
    bench.add_argument("--no-torch", action="store_true", help="skip the PyTorch DDP peer")
    bench.add_argument("--out", help="also write the table as CSV here")

    rep = sub.add_parser("reproduce", help="run an experiment's notebook with papermill and write its report")
    rep.add_argument("experiment", help="experiments/<name>.yaml")
    rep.add_argument("--quick", action="store_true", help="the experiment's quick parameters (about a minute)")
    rep.add_argument("--out", required=True, help="output directory")

    sweep = sub.add_parser("sweep", help="strong or weak scaling sweep over worker counts")
    _add_config_flags(sweep)
    sweep.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    sweep.add_argument("--mode", choices=["strong", "weak"], default="strong")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "algorithms":
            width = max(map(len, ALGORITHMS))
            for name, text in ALGORITHMS.items():
                print(f"{name:<{width}}  {text}")
            return EXIT_OK
        if args.command == "run":
            return _run(args)
        if args.command == "bench":
            from .bench import main as bench_main
            return bench_main(args)
        if args.command == "sweep":
            return _sweep(args)
        if args.command == "reproduce":
            from .reproduce import NotebookFailed, reproduce
            try:
                outcome = reproduce(args.experiment, args.out, quick=args.quick)
            except NotebookFailed as exc:
                print(f"error: {exc}", file=sys.stderr)
                return EXIT_FAILED
            for c in outcome["checks"]:
                mark = {True: "held", False: "did NOT hold", None: "not checked"}[c["held"]]
                print(f"  [{mark}] {c['text']}  ({c['measured']})")
            print(f"report: {outcome['report']}")
            return EXIT_OK
    except (ConfigError, ValueError) as exc:
        # Invalid input: one line, no traceback (DESIGN.md's exit code 2 contract).
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except ImportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    parser.error(f"unknown command {args.command!r}")
    return EXIT_INVALID


def _default_out(config: RunConfig) -> str:
    return str(Path("runs") / f"{config.algorithm}-{config.dataset}-{time.strftime('%Y%m%d-%H%M%S')}")


def _run(args: argparse.Namespace) -> int:
    from . import api
    from .preflight import preflight

    config = config_from_args(args)
    if config.out is None:
        config = config.replace(out=_default_out(config))
    preflight(config)  # every check that can fail before a worker starts
    progress = None if args.no_progress or not sys.stderr.isatty() else _progress_bar(config)
    try:
        if config.algorithm != "sgd":          # the Dask dashboard, one click away (starts the session's cluster)
            from .cluster import dashboard_link, session_client
            print(f"dask dashboard: {dashboard_link(session_client(config.cpus, config.gpus, config.scheduler))}",
                  file=sys.stderr)
        result = api.run(config, on_record=progress)
    finally:
        if progress is not None:
            progress.close()
        from .cluster import close_session
        close_session()  # a CLI run owns its cluster: shut it down before exiting
    s = result.summary
    acc = s.get("final_test_accuracy")
    print(f"{s['status']}: {config.algorithm} on {config.dataset}, {s['steps']} steps, "
          f"{s['samples_per_s']:.0f} samples/s, test accuracy "
          f"{'n/a' if acc is None else f'{acc:.4f}'}, comm fraction {s['comm_fraction']:.2f}")
    for event in s.get("events", []):
        if event["event"] in ("diverged", "failed", "worker_lost"):
            print(f"  {event['event']}: {event['message']}", file=sys.stderr)
    print(f"run directory: {config.out}")
    return EXIT_OK if s["status"] == "completed" else EXIT_FAILED


class _progress_bar:
    """tqdm over global steps, fed from the record stream."""

    def __init__(self, config: RunConfig):
        from tqdm import tqdm
        self.bar = tqdm(desc=config.algorithm, unit="step", dynamic_ncols=True)
        self.seen = 0

    def __call__(self, records: list[dict]) -> None:
        steps = [r["step"] for r in records if r["kind"] == "step"]
        if steps and max(steps) + 1 > self.seen:
            self.bar.update(max(steps) + 1 - self.seen)
            self.seen = max(steps) + 1
        losses = [r["loss"] for r in records if r["kind"] == "step"]
        if losses:
            self.bar.set_postfix(loss=f"{losses[-1]:.4f}")

    def close(self) -> None:
        self.bar.close()


def _sweep(args: argparse.Namespace) -> int:
    from . import api
    from .preflight import preflight

    config = config_from_args(args)
    try:
        workers = [int(w) for w in args.workers.split(",") if w]
    except ValueError:
        raise ConfigError("workers", "comma-separated whole numbers >= 1", args.workers) from None
    if not workers or min(workers) < 1:
        raise ConfigError("workers", "comma-separated whole numbers >= 1", args.workers)
    preflight(config.replace(cpus=max(workers), gpus=0))
    table = api.sweep(config, workers=workers, mode=args.mode, out=config.out)
    print(table.to_string(index=False))
    if config.out:
        print(json.dumps({"sweep": str(Path(config.out) / "sweep.csv")}))
    return EXIT_OK
