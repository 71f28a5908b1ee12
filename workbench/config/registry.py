"""The algorithm registry: what each algorithm is and what a run of it needs, declared once.

Every algorithm is declared once, in the table at the bottom of this module, as an
`AlgorithmSpec`: its name and one-line summary, its worker class (named, loaded on first
use), whether its workers step together (`sync`), who evaluates, what the transport must
set up before the loops start (`Needs`: a collective, rank groups, a server role, shared
arrays, extra client-side set-up), its knobs (`RunConfig` field names), its communication
pattern for the cost model, whether it can span hosts, how many workers it runs on and
where, and the facts about its own knobs (`check`, `peak_lr`).

Everything that needs a fact about an algorithm reads this table: config validation
(`config.ALGORITHMS`, `config.SYNC_ALGORITHMS`, the algorithm's `check`), the engine and
its transports, preflight, the cost model (each pattern's terms), the dashboard (which
knobs apply), `bench` and `python -m workbench algorithms`.

This module imports nothing of the workbench, and reading it imports no algorithm module:
a worker class (and a `Needs` hook named as ``"module:function"``) is imported when a run
first needs it. So `RunConfig(algorithm="sync_sgd")` loads neither the algorithms nor
pandas. A module may still declare an algorithm itself with `register(...)` at import
(list it in `MODULES`; `specs()` then imports it); the table is the usual place.
"""
from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# The server roles a transport knows how to provide (cores in `workbench.comm.roles`).
SERVER_ROLES = {
    "parameter_server": "parameters (+ momentum / Nesterov / weight decay) updated by pushed gradients, FCFS",
    "elastic_centre": "the EASGD centre variable: elastic exchanges FCFS, or in round-robin turns with retirement",
    "tournament": "LTFB's mailbox: trainers deposit their model, partners collect it (or learn it departed)",
    "cgdp_master": "CGDP's host-side master: per-chunk sums and updates, chunk size tuned at run time",
    "pairwise": "AD-PSGD's models, one row per worker: a worker averages its row with a neighbour's atomically",
}
# The cost model's communication patterns (see `workbench.analysis.costmodel`).
PATTERNS = ("none", "allreduce", "server", "shared", "round_robin", "elastic_server", "elastic_shared",
            "elastic_allreduce", "tournament", "host", "local_allreduce", "post_local_allreduce", "gossip", "pairwise")
EVALUATORS = ("rank0", "all", "trainers")
# The simulator's fast paths: every virtual worker stepped in one loop, on stacks of rows, calling
# the family's own maths (`sim/lockstep.py`, `sim/server.py`); bitwise the
# per-worker run. An algorithm's declaration names the one it has (`AlgorithmSpec.fast_path`).
FAST_PATHS = {
    "replicas": "identical replicas: one stacked pass over the global batch's slices, one update (sync_sgd)",
    "shared": "one shared buffer: the workers' reads and writes replayed in the order they happen (hogwild_sgd)",
    "server": "a server role: the workers' timing replayed, their maths in stacked passes in the server's order",
}

ALGORITHMS = "workbench.algorithms"   # the package of the worker classes and hooks a spec names
Hook = Callable[..., Any] | str   # a function, or "module:function" of `ALGORITHMS`, imported on first use


def _load(ref: Any) -> Any:
    """A `Hook` or a class named ``"module:attr"`` (a module of `ALGORITHMS`) -> the object."""
    if not isinstance(ref, str):
        return ref
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(f"{ALGORITHMS}.{module}"), attr)


@dataclass(frozen=True)
class Needs:
    """What a transport must provide before an algorithm's loops start."""

    collective: bool = False     # an allreduce (`ctx.comm`) among the workers of each rank group
    groups: Hook | None = None   # (config, P) -> rank groups; default one group
    server: str | None = None    # a server role (SERVER_ROLES), reached as `ctx.server`
    server_options: Hook | None = None  # config -> the role's options
    shared: tuple[str, ...] = ()  # shared arrays (`ctx.shared[name]`), initialised to the initial params
    setup: Hook | None = None    # client-side set-up (config, P) -> ctx.extra
    elems: Callable[[int, int], int] | None = None   # (n_params, P) -> the largest allreduce, when more than
    #   the parameters plus the tail

    def rank_groups(self, config: Any, size: int) -> list[list[int]]:
        """Rank groups that each get their own collective (default: all workers in one).

        >>> Needs(collective=True).rank_groups(None, 3)
        [[0, 1, 2]]
        """
        return _load(self.groups)(config, size) if self.groups else [list(range(size))]

    def options(self, config: Any, model: Any = None) -> dict[str, Any]:
        """The server role's options for this config ({} without any); an update rule
        among them (`optimizer`) gets the model's layer layout (`layout`) beside it."""
        options = _load(self.server_options)(config) if self.server_options else {}
        if "optimizer" in options and model is not None:
            options = {**options, "layout": model.layout()}
        return options

    def client_setup(self, config: Any, size: int) -> dict[str, Any]:
        """The algorithm's own client-side set-up, handed to every worker as `ctx.extra` ({} without any)."""
        return _load(self.setup)(config, size) if self.setup else {}


def _no_check(config: Any) -> tuple[str, str, Any] | None:
    return None


def _config_lr(config: Any) -> float:
    return config.lr


def _no_warning(config: Any, steps: int, steps_per_epoch: int | None = None) -> str | None:
    return None


def switch_step(epoch: float, steps_per_epoch: int) -> int:
    """The first step of post-local SGD's local phase: ceil(epoch * steps per epoch).

    >>> switch_step(1.0, 45), switch_step(0.5, 45), switch_step(0.0, 45)
    (45, 23, 0)
    """
    return math.ceil(epoch * steps_per_epoch - 1e-9)


def _post_local_warning(config: Any, steps: int, steps_per_epoch: int | None = None) -> str | None:
    """post_local_sgd that never reaches its local phase: the switch at or after the run's end."""
    if steps_per_epoch and switch_step(config.post_local_epoch, steps_per_epoch) >= steps:
        return (f"post_local_epoch ({config.post_local_epoch:g}) is at or after the run's end ({steps} steps, "
                f"{steps / steps_per_epoch:.3g} epochs): the run never switches to local steps, so it is sync_sgd")
    return None


@dataclass(frozen=True)
class AlgorithmSpec:
    """One algorithm, declared once (the table below)."""

    name: str
    summary: str                 # one line: `wb.ALGORITHMS[name]`, `python -m workbench algorithms`
    impl: Any                    # the worker class (`base.Algorithm`), or "module:Class", loaded on first use
    sync: bool                   # every worker reaches every step: a lost worker fails the run
    evaluates: str = "rank0"     # "rank0"; "all" (every rank a share, same params); "trainers" (LTFB)
    needs: Needs = field(default_factory=Needs)
    knobs: tuple[str, ...] = ()  # RunConfig fields that only matter to this algorithm (and its family)
    pattern: str = "none"        # cost-model communication pattern (PATTERNS)
    spans_hosts: bool = True     # False: shared memory, every worker on one host
    workers: int | None = None   # exactly this many workers whatever cpus / gpus say (sgd: 1); None: cpus + gpus
    in_process: bool = False     # runs on the thread transport in this process whatever `cluster` says: no
    #                              cluster is started, no scheduler asked (sgd)
    # config -> the first rule of this algorithm's own knobs the config breaks, as (field, what is
    # allowed, value), or None; `RunConfig` raises it as a ConfigError (no workbench import here)
    check: Callable[[Any], tuple[str, str, Any] | None] = _no_check
    # config -> the largest base lr any worker starts from, before lr scaling (LTFB: its fastest trainer)
    peak_lr: Callable[[Any], float] = _config_lr
    takes_optimizer: bool = True  # False: its update is its own (config.optimizer must be sgd)
    # (config, n_train) -> (examples, batch) that the run's steps walk, when not the whole
    # training set and the global batch (LTFB: a trainer's training set and batch); the
    # plan of every run comes from it (`problem.run_plan`)
    plan_shape: Callable[[Any, int], tuple[int, int]] | None = None
    # update rule -> (lowest, default, highest) base lr that learns the default dataset, where
    # this algorithm's differ from the rule's own (`config.OPTIMIZER_LR`; diloco's outer
    # Nesterov step amplifies its inner steps' change: the shared defaults reached chance)
    lr_defaults: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    fast_path: str | None = None  # the simulator's fast path for it (FAST_PATHS), if it has one
    # (config, steps per worker, steps per epoch or None) -> one sentence when the settings run
    # but leave this algorithm nothing to do (LTFB: no tournament within the run; post_local_sgd:
    # no local phase), or None; preflight's warnings say it
    warn: Callable[..., str | list[str] | None] = _no_warning   # (a list where several apply)
    uses_momentum: bool = True   # False: `momentum` takes no part in its steps (preflight's stability bound)
    # its runs go on when a worker is lost and take in joiners with `elastic` (its loop re-splits
    # the global batch over whoever is there, `execution.elastic`)
    elastic: bool = False

    def __post_init__(self) -> None:
        if self.pattern not in PATTERNS:
            raise ValueError(f"pattern: one of {list(PATTERNS)}, got {self.pattern!r}")
        if self.evaluates not in EVALUATORS:
            raise ValueError(f"evaluates: one of {list(EVALUATORS)}, got {self.evaluates!r}")
        if self.needs.server is not None and self.needs.server not in SERVER_ROLES:
            raise ValueError(f"needs.server: one of {sorted(SERVER_ROLES)}, got {self.needs.server!r}")
        if self.fast_path is not None and self.fast_path not in FAST_PATHS:
            raise ValueError(f"fast_path: None or one of {list(FAST_PATHS)}, got {self.fast_path!r}")
        if self.workers is not None and self.workers < 1:
            raise ValueError(f"workers: None or at least 1, got {self.workers!r}")

    @property
    def cls(self) -> type:
        """The worker class (imports its module on first use) whose `spec` is this declaration."""
        cls = _load(self.impl)
        if cls.__dict__.get("spec") is not self:
            cls.spec = self
        return cls

    @property
    def loaded(self) -> bool:
        """Whether the worker class's module is imported already (the registry never imports it itself)."""
        if not isinstance(self.impl, str):
            return True
        return f"{ALGORITHMS}.{self.impl.partition(':')[0]}" in __import__("sys").modules

    def comm_elems(self, n_params: int, size: int) -> int:
        """Elements of the largest allreduce buffer: the parameters plus the packed tail
        (`base.SyncTail`), unless the declaration says more (`Needs.elems`)."""
        base = n_params + tail_length(size)
        return max(base, self.needs.elems(n_params, size)) if self.needs.elems else base


def tail_length(size: int) -> int:
    """Scalars a synchronous step packs after its vector (`base.SyncTail`): loss, stop,
    P compute times, P busy times.

    >>> tail_length(2)
    6
    """
    return 2 + 2 * size


_SPECS: dict[str, AlgorithmSpec] = {}
_ORDERED: dict[str, AlgorithmSpec] | None = None
# Modules that declare algorithms themselves, at import (`register`); `specs()` imports them.
MODULES: tuple[str, ...] = ()


def register(spec: AlgorithmSpec) -> AlgorithmSpec:
    """Add `spec` (the table below; a module listed in MODULES, at its import; or your own
    code at any time, with the worker class itself as `impl`). Everything that lists
    algorithms reads the registry when it is asked, so a later one is listed too (the knobs'
    help names it among the algorithms that read each of its `knobs`)."""
    global _ORDERED
    if spec.name in _SPECS and _SPECS[spec.name] is not spec:
        raise ValueError(f"algorithm {spec.name!r} is registered twice")
    _SPECS[spec.name] = spec
    _ORDERED = None
    if not isinstance(spec.impl, str):
        spec.impl.spec = spec
    return spec


def unregister(name: str) -> AlgorithmSpec:
    """Remove the algorithm `name` that `register` added (a test's own, or a plug-in's) and return its spec."""
    global _ORDERED
    spec = _SPECS.pop(name)
    _ORDERED = None
    return spec


def specs() -> dict[str, AlgorithmSpec]:
    """Every declared algorithm, name -> spec, in the order `python -m workbench algorithms` lists them."""
    global _ORDERED
    if _ORDERED is None or len(_ORDERED) != len(_SPECS):
        for module in MODULES:
            importlib.import_module(f"{ALGORITHMS}.{module}")
        _ORDERED = dict(_SPECS)
    return _ORDERED


def spec_of(cls: type) -> AlgorithmSpec:
    """The declaration whose worker class is `cls` (a class built outside the engine asks this)."""
    where = f"{cls.__module__.rpartition('.')[2]}:{cls.__qualname__}"
    for spec in specs().values():
        if spec.impl is cls or spec.impl == where:
            return spec
    raise LookupError(f"{cls.__qualname__}: no algorithm declares it")


def summaries() -> dict[str, str]:
    """name -> one-line summary: `workbench.ALGORITHMS`."""
    return {name: spec.summary for name, spec in specs().items()}


def sync_names() -> tuple[str, ...]:
    """The algorithms whose runs fail when a worker is lost."""
    return tuple(name for name, spec in specs().items() if spec.sync)


def elastic_names() -> tuple[str, ...]:
    """The algorithms whose membership may change (`AlgorithmSpec.elastic`), in the table's order.

    >>> elastic_names()
    ('sync_sgd', 'local_sgd', 'post_local_sgd', 'diloco')
    """
    return tuple(name for name, spec in specs().items() if spec.elastic)


def with_knob(knob: str) -> tuple[str, ...]:
    """The algorithms a knob applies to.

    >>> with_knob("round_size")
    ('ltfb',)
    """
    return tuple(name for name, spec in specs().items() if knob in spec.knobs)


# ------------------------------------------------------------------------------ facts of LTFB's knobs
LR_MAX = 1e38   # float32 parameters: lr * grad past ~3.4e38 is inf at the first step


def trainer_lrs(config: Any) -> list[float]:
    """LTFB: each trainer's base lr: `trainer_lrs`, else lr * lr_spread**(k - (K-1)/2).

    >>> from types import SimpleNamespace as C
    >>> trainer_lrs(C(trainer_lrs=None, trainers=2, lr=0.1, lr_spread=4.0))
    [0.05, 0.2]
    """
    if config.trainer_lrs is not None:
        return list(config.trainer_lrs)
    K = config.trainers
    return [config.lr * config.lr_spread ** (k - (K - 1) / 2) for k in range(K)]


def trainer_plan_shape(config: Any, n_train: int) -> tuple[int, int]:
    """LTFB: (examples, batch) a trainer's steps walk: its training set (`ltfb.trainer_data`:
    the smallest share less the tournament set) and the trainer batch.

    >>> from types import SimpleNamespace as C
    >>> trainer_plan_shape(C(trainers=2, batch_size=64, tournament_size=10), 101)
    (40, 32)
    """
    return n_train // config.trainers - config.tournament_size, config.batch_size // config.trainers


def _ltfb_peak_lr(config: Any) -> float:
    """The fastest trainer's base lr (inf when the spread overflows)."""
    if config.trainer_lrs:
        return max(config.trainer_lrs)
    try:
        return config.lr * config.lr_spread ** ((config.trainers - 1) / 2)
    except OverflowError:
        return math.inf


def _ltfb_check(config: Any) -> tuple[str, str, Any] | None:
    """LTFB's trainers: at most the workers and a divisor of them, each trainer's share of the
    data leaving a batch besides its tournament set, every trainer's lr a float32 number; no
    early stop (each trainer has its own test loss)."""
    if config.early_stop is not None:   # whose test loss? every trainer's is its own (and tournaments swap models)
        return ("early_stop", "unset for ltfb (each trainer is evaluated on its own; its tournaments already keep the "
                "better model)", config.early_stop)
    workers = config.n_workers
    if workers is not None and config.trainers > workers:
        return "trainers", f"at most the number of workers ({workers})", config.trainers
    if workers is not None and workers % config.trainers:
        return ("trainers", f"a divisor of the number of workers ({workers}), so every trainer has as many "
                "workers", config.trainers)
    share = config.data_shape.n_train // config.trainers      # the dataset's entry: nothing loaded
    b = config.batch_size // config.trainers
    if share - b < 1:   # no tournament size fixes this (1024 trainers said "at most 0"): name what can
        n = config.data_shape.n_train
        fits = [t for t in range(config.trainers, 0, -1) if n // t - config.tournament_size >= max(1, config.batch_size // t)]
        return ("trainers", (f"at most {fits[0]} for {n} training examples (each trainer's share must hold a batch "
                f"of batch_size / trainers and its tournament set of {config.tournament_size})") if fits else
                "fewer, or a larger dataset: no trainer count leaves each one a batch and a tournament set",
                config.trainers)
    if share - config.tournament_size < b:
        return ("tournament_size", f"at most {share - b} (each trainer's {share} training examples must leave at "
                f"least one batch of {b})", config.tournament_size)
    peak = _ltfb_peak_lr(config)
    if not math.isfinite(peak) or peak > LR_MAX:
        name = "trainer_lrs" if config.trainer_lrs else "lr_spread"
        return name, f"values that keep every trainer's lr under {LR_MAX:g}", getattr(config, name)
    return None


TOURNAMENT_SIZE = 256   # LTFB's tournament set per trainer when the user sets none (RunConfig's default)


def tournament_fit(config: Any) -> int | None:
    """LTFB with `tournament_size` unset: the tournament set a trainer's share of the data
    allows, min(TOURNAMENT_SIZE, share - batch) (each trainer keeps at least one batch to
    train on), where that is less than the default; else None (it fits, or no tournament set
    does and `_ltfb_check` refuses the trainers). A value the user set is never changed
    (`_ltfb_check` refuses one that does not fit).

    >>> from types import SimpleNamespace as C
    >>> shape = C(n_train=400)
    >>> tournament_fit(C(trainers=2, batch_size=32, data_shape=shape)), tournament_fit(C(trainers=2, batch_size=32, data_shape=C(n_train=4000)))
    (184, None)
    """
    share, b = config.data_shape.n_train // config.trainers, config.batch_size // config.trainers
    return share - b if 1 <= share - b < TOURNAMENT_SIZE else None


def tournament_note(config: Any) -> str | None:
    """What a run says when its unset `tournament_size` took what the data allow
    (`tournament_fit`): the default, the held-out rows it scores on instead, and the knob."""
    if config.algorithm != "ltfb" or "tournament_size" in config.model_fields_set \
            or config.tournament_size >= TOURNAMENT_SIZE:
        return None
    share = config.data_shape.n_train // config.trainers
    b = config.batch_size // config.trainers
    return (f"tournament_size {TOURNAMENT_SIZE} (the default) is more than the {config.tournament_size} rows each "
            f"trainer's {share} training examples can hold out beside a batch of {b}: this run scores its "
            f"tournaments on {config.tournament_size} and trains each trainer on the other "
            f"{share - config.tournament_size} (set tournament_size to choose)")


def _ltfb_warning(config: Any, steps: int, steps_per_epoch: int | None = None) -> list[str]:
    """LTFB without a tournament: rounds at least as long as the run; and its tournament set
    smaller than the default the user left unset (`tournament_note`)."""
    out = []
    if config.round_size >= steps and config.trainers > 1:
        out.append(f"round_size ({config.round_size}) is at least the run's {steps} steps: no tournament will ever "
                   "happen")
    note = tournament_note(config)
    return out + [note] if note else out


def _gossip_elems(n_params: int, size: int) -> int:
    """D-PSGD's agreement allreduce: x_i / P, ||x_i||^2 / P, then the tail (the peer
    exchange itself needs only n: it uses the collective's slots, `comm.base`)."""
    return n_params + 1 + tail_length(size)


# ------------------------------------------------------------------------------ the declarations
EASGD_KNOBS = ("tau", "alpha")
LOCAL_KNOBS = ("tau",)

for _spec in (
    AlgorithmSpec(
        "sgd", "single-process minibatch SGD (momentum/Nesterov): the reference every parallel run is checked "
        "against", "reference:PlainSGD", sync=True, pattern="none", workers=1, in_process=True),
    AlgorithmSpec(
        "sync_sgd", "data-parallel SGD: the global batch is split, gradients are allreduced, every worker applies "
        "the same update", "sync:SyncSGD", sync=True,
        evaluates="all",    # identical parameters everywhere: the ranks share each evaluation
        needs=Needs(collective=True), knobs=("split", "compression", "compression_ratio", "compression_rank",
                                             "compression_levels", "error_feedback"), pattern="allreduce",
        fast_path="replicas", elastic=True),
    AlgorithmSpec(
        "async_sgd", "parameter server (Downpour, push/fetch every step): x -= lr*g applied on arrival, staleness "
        "recorded", "async_ps:AsyncSGD", sync=False, evaluates="rank0",
        needs=Needs(server="parameter_server", server_options="async_ps:plain_options"), pattern="server",
        fast_path="server", uses_momentum=False),   # the server's plain x -= lr g
    AlgorithmSpec(
        "async_msgd", "async_sgd with momentum kept on the server: v = mu*v - lr*g; x += v", "async_ps:AsyncMSGD",
        sync=False, needs=Needs(server="parameter_server", server_options="async_ps:momentum_options"),
        pattern="server", fast_path="server"),
    AlgorithmSpec(
        "hogwild_sgd", "lock-free updates of one shared-memory parameter buffer by all workers on one host "
        "(Recht et al.)", "hogwild:HogwildSGD", sync=False, needs=Needs(shared=("params",)), pattern="shared",
        spans_hosts=False, takes_optimizer=False,    # the lock-free x -= lr g is the algorithm
        fast_path="shared", uses_momentum=False),
    AlgorithmSpec(
        "easgd", "original elastic averaging SGD: the master serves workers in strict rank order (round-robin)",
        "easgd:EASGD", sync=False, needs=Needs(server="elastic_centre"), knobs=EASGD_KNOBS, pattern="round_robin",
        fast_path="server"),
    AlgorithmSpec(
        "async_easgd", "elastic averaging with a parameter server serving whichever worker arrives first, every "
        "tau steps", "easgd:AsyncEASGD", sync=False, needs=Needs(server="elastic_centre"), knobs=EASGD_KNOBS,
        pattern="elastic_server", fast_path="server"),
    AlgorithmSpec(
        "async_measgd", "async_easgd with Nesterov momentum on the workers (EAMSGD)", "easgd:AsyncMEASGD",
        sync=False, needs=Needs(server="elastic_centre"), knobs=EASGD_KNOBS, pattern="elastic_server",
        takes_optimizer=False,    # its worker update is EAMSGD's own
        fast_path="server"),
    AlgorithmSpec(
        "hogwild_easgd", "async_easgd with the lock on the centre update removed (centre in shared memory)",
        "easgd:HogwildEASGD", sync=False, needs=Needs(shared=("centre",)), knobs=EASGD_KNOBS,
        pattern="elastic_shared", spans_hosts=False),
    AlgorithmSpec(
        "sync_easgd", "all workers every tau steps: allreduce of the elastic differences; deterministic",
        "easgd:SyncEASGD", sync=True,
        evaluates="all",    # the centre is the same on every rank: the ranks share each evaluation
        needs=Needs(collective=True), knobs=EASGD_KNOBS + ("elastic_sync",), pattern="elastic_allreduce"),
    AlgorithmSpec(
        "ltfb", "Livermore Tournament Fast Batch: K trainers train apart and swap weights in pairwise tournaments",
        "ltfb:LTFB", sync=True,        # a trainer's workers step together; trainers meet at tournaments
        evaluates="trainers",
        needs=Needs(collective=True, groups="ltfb:trainer_groups", server="tournament", setup="ltfb:ltfb_extra"),
        knobs=("trainers", "round_size", "tournament_size", "trainer_lrs", "lr_spread", "exchange_state"),
        pattern="tournament", check=_ltfb_check, peak_lr=_ltfb_peak_lr, plan_shape=trainer_plan_shape,
        warn=_ltfb_warning),
    AlgorithmSpec(
        "cgdp", "CPU-GPU data parallel: device workers compute gradients, a CPU worker sums and updates chunk by "
        "chunk", "cgdp:CGDP", sync=True, needs=Needs(server="cgdp_master"), knobs=("chunk_layers", "weight_return", "split"),
        pattern="host"),
    AlgorithmSpec(
        "local_sgd", "local SGD (Lin et al.): tau local steps on every worker, then an allreduce averages the "
        "parameters", "local:LocalSGD", sync=True, evaluates="all", needs=Needs(collective=True),
        knobs=LOCAL_KNOBS, pattern="local_allreduce", elastic=True),
    AlgorithmSpec(
        "post_local_sgd", "post-local SGD (Lin et al.): sync_sgd until post_local_epoch, then local SGD averaging "
        "every tau steps", "local:PostLocalSGD", sync=True, evaluates="all", needs=Needs(collective=True),
        knobs=(*LOCAL_KNOBS, "post_local_epoch"), pattern="post_local_allreduce", elastic=True,
        warn=_post_local_warning),
    AlgorithmSpec(
        "diloco", "DiLoCo (Douillard et al.): tau inner steps, then an outer Nesterov step on the averaged "
        "parameter change", "local:DiLoCo", sync=True, evaluates="all", needs=Needs(collective=True),
        knobs=(*LOCAL_KNOBS, "outer_lr", "outer_momentum"), pattern="local_allreduce", elastic=True,
        # digits, MLP 512-256, 40 epochs, 2 workers: sgd 0.03 and lamb 0.003 ended at chance (0.13, 0.10)
        lr_defaults={"sgd": (0.003, 0.01, 0.01), "adamw": (0.0003, 0.001, 0.003), "lamb": (0.0003, 0.001, 0.001),
                     "lars": (0.003, 0.01, 0.03)}),
    AlgorithmSpec(
        "dpsgd", "decentralised D-PSGD (Lian et al.): a local step, then gossip averaging with the neighbours in a "
        "ring, torus, exponential or complete graph", "gossip:DPSGD", sync=True, evaluates="rank0",
        needs=Needs(collective=True, elems=_gossip_elems),
        knobs=("tau", "topology"), pattern="gossip"),
    AlgorithmSpec(
        "adpsgd", "asynchronous decentralised AD-PSGD (Lian et al. 2018): after each local step a worker averages "
        "its model with one random neighbour's, atomically, waiting for nobody", "gossip:ADPSGD", sync=False,
        evaluates="rank0", needs=Needs(server="pairwise"), knobs=("topology",), pattern="pairwise"),
):
    register(_spec)
del _spec
