"""The algorithm registry: what each algorithm is and what a run of it needs.

Every algorithm declares itself once, in its own module, as an `AlgorithmSpec` passed to
`register(...)`: its name and one-line summary, whether its workers step together
(`sync`), who evaluates, what the transport must set up before the loops start
(`Needs`: a collective, rank groups, a server role, shared arrays, extra client-side
set-up), its knobs (`RunConfig` field names), its communication pattern for the cost
model and whether it can span hosts.

Everything that used to keep its own list reads this one: config validation
(`config.ALGORITHMS`, `config.SYNC_ALGORITHMS`, read lazily), the engine and its
transports, the cost model (`costmodel.PATTERNS`), the dashboard (which knobs apply),
`bench` and `python -m workbench algorithms`.

This module imports nothing of the workbench (config reads it lazily without a cycle);
`specs()` imports the algorithm modules (which register themselves) on first use.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# The server roles a transport knows how to provide (cores in `workbench.comm.roles`).
SERVER_ROLES = {
    "parameter_server": "parameters (+ momentum / Nesterov / weight decay) updated by pushed gradients, FCFS",
    "elastic_centre": "the EASGD centre variable: elastic exchanges FCFS, or in round-robin turns with retirement",
    "tournament": "LTFB's mailbox: trainers deposit their model, partners collect it (or learn it departed)",
    "cgdp_master": "CGDP's host-side master: per-chunk sums and updates, chunk size tuned at run time",
}
# The cost model's communication patterns (see `workbench.analysis.costmodel`).
PATTERNS = ("none", "allreduce", "server", "shared", "round_robin", "elastic_server", "elastic_shared",
            "elastic_allreduce", "tournament", "host", "local_allreduce", "post_local_allreduce")
EVALUATORS = ("rank0", "all", "trainers")


@dataclass(frozen=True)
class Needs:
    """What a transport must provide before an algorithm's loops start."""

    collective: bool = False     # an allreduce (`ctx.comm`) among the workers of each rank group
    groups: Callable[[Any, int], list[list[int]]] | None = None   # (config, P) -> rank groups; default one group
    server: str | None = None    # a server role (SERVER_ROLES), reached as `ctx.server`
    server_options: Callable[[Any], dict[str, Any]] | None = None  # config -> the role's options
    shared: tuple[str, ...] = ()  # shared arrays (`ctx.shared[name]`), initialised to the initial params
    setup: Callable[[Any, int], dict[str, Any]] | None = None   # client-side set-up (config, P) -> ctx.extra

    def rank_groups(self, config: Any, size: int) -> list[list[int]]:
        """Rank groups that each get their own collective (default: all workers in one).

        >>> Needs(collective=True).rank_groups(None, 3)
        [[0, 1, 2]]
        """
        return self.groups(config, size) if self.groups else [list(range(size))]

    def options(self, config: Any) -> dict[str, Any]:
        """The server role's options for this config ({} without any)."""
        return self.server_options(config) if self.server_options else {}


@dataclass(frozen=True)
class AlgorithmSpec:
    """One algorithm, declared in its own module."""

    name: str
    summary: str                 # one line: `wb.ALGORITHMS[name]`, `python -m workbench algorithms`
    cls: type                    # the worker class (`base.Algorithm`), one instance per worker
    sync: bool                   # every worker reaches every step: a lost worker fails the run
    evaluates: str = "rank0"     # "rank0"; "all" (every rank a share, same params); "trainers" (LTFB)
    needs: Needs = field(default_factory=Needs)
    knobs: tuple[str, ...] = ()  # RunConfig fields that only matter to this algorithm (and its family)
    pattern: str = "none"        # cost-model communication pattern (PATTERNS)
    spans_hosts: bool = True     # False: shared memory, every worker on one host
    workers: int | None = None   # exactly this many workers whatever cpus / gpus say (sgd: 1); None: cpus + gpus
    in_process: bool = False     # runs on the thread transport in this process whatever `cluster` says: no
    #                              cluster is started, no scheduler asked (sgd)

    def __post_init__(self) -> None:
        if self.pattern not in PATTERNS:
            raise ValueError(f"pattern: one of {list(PATTERNS)}, got {self.pattern!r}")
        if self.evaluates not in EVALUATORS:
            raise ValueError(f"evaluates: one of {list(EVALUATORS)}, got {self.evaluates!r}")
        if self.needs.server is not None and self.needs.server not in SERVER_ROLES:
            raise ValueError(f"needs.server: one of {sorted(SERVER_ROLES)}, got {self.needs.server!r}")
        if self.workers is not None and self.workers < 1:
            raise ValueError(f"workers: None or at least 1, got {self.workers!r}")

    def comm_elems(self, n_params: int, size: int) -> int:
        """Elements of one allreduce buffer: the parameters plus the packed tail (`base.SyncTail`)."""
        return n_params + tail_length(size)


def tail_length(size: int) -> int:
    """Scalars a synchronous step packs after its vector (`base.SyncTail`): loss, stop,
    P compute times, P busy times.

    >>> tail_length(2)
    6
    """
    return 2 + 2 * size


_SPECS: dict[str, AlgorithmSpec] = {}
_ORDERED: dict[str, AlgorithmSpec] | None = None
# The modules that declare algorithms, in the order `python -m workbench algorithms` lists them.
MODULES = ("reference", "sync", "async_ps", "hogwild", "easgd", "ltfb", "cgdp", "local")


def register(spec: AlgorithmSpec) -> AlgorithmSpec:
    """Add `spec` (called once, by the algorithm's own module, at import); binds the
    worker class to it, so `Algorithm.sync` / `.evaluates` read the declaration."""
    if spec.name in _SPECS and _SPECS[spec.name] is not spec:
        raise ValueError(f"algorithm {spec.name!r} is registered twice")
    _SPECS[spec.name] = spec
    spec.cls.spec = spec
    return spec


def specs() -> dict[str, AlgorithmSpec]:
    """Every registered algorithm, name -> spec (imports the algorithm modules once)."""
    global _ORDERED
    if _ORDERED is None or len(_ORDERED) != len(_SPECS):
        import importlib
        for module in MODULES:
            importlib.import_module(f"{__package__}.{module}")

        def where(item: tuple[int, AlgorithmSpec]) -> tuple[int, int]:
            module = item[1].cls.__module__.rsplit(".", 1)[-1]
            return (MODULES.index(module) if module in MODULES else len(MODULES), item[0])
        _ORDERED = {s.name: s for _, s in sorted(enumerate(_SPECS.values()), key=where)}
    return _ORDERED


def summaries() -> dict[str, str]:
    """name -> one-line summary: `workbench.ALGORITHMS`."""
    return {name: spec.summary for name, spec in specs().items()}


def sync_names() -> tuple[str, ...]:
    """The algorithms whose runs fail when a worker is lost."""
    return tuple(name for name, spec in specs().items() if spec.sync)


def with_knob(knob: str) -> tuple[str, ...]:
    """The algorithms a knob applies to.

    >>> with_knob("round_size")
    ('ltfb',)
    """
    return tuple(name for name, spec in specs().items() if knob in spec.knobs)
