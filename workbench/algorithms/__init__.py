"""The parallel algorithms: one small module per family, all on the loop in `base`.

`REGISTRY` maps each name of `workbench.ALGORITHMS` (except the single-process `sgd`) to
an `AlgorithmSpec`: the worker class and what the engine must set up for it before the
loops start (a collective, a parameter server, shared-memory arrays).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..config import RunConfig
from .async_ps import AsyncMSGD, AsyncSGD
from .base import Algorithm, StepOut, WorkerContext, run_loop
from .cgdp import CGDP
from .cgdp import host_spec as cgdp_host
from .easgd import EASGD, AsyncEASGD, AsyncMEASGD, HogwildEASGD, SyncEASGD
from .hogwild import HogwildSGD
from .ltfb import LTFB, ltfb_extra, trainer_groups
from .sync import SyncSGD


@dataclass(frozen=True)
class AlgorithmSpec:
    name: str
    cls: type[Algorithm]
    needs_comm: bool = False                      # an allreduce among the workers
    server: Callable[[RunConfig], dict[str, Any]] | None = None  # ServerCore options, if a server is needed
    shared: tuple[str, ...] = ()                  # shared arrays, initialised to the initial params
    same_host: bool = False                       # every worker must be on one host
    extra: Callable[[RunConfig, int], dict[str, Any]] | None = None  # client-side set-up handed to every worker

    groups: Callable[[RunConfig, int], list[list[int]]] | None = None  # collectives within these rank groups
    host: Callable[..., dict[str, Any]] | None = None  # (config, size, model, params0) -> a custom server (cgdp's master)

    def comm_groups(self, config: RunConfig, size: int) -> list[list[int]]:
        """Rank groups that each get their own collective (default: all workers in one)."""
        return self.groups(config, size) if self.groups else [list(range(size))]

    def comm_elems(self, n_params: int, size: int) -> int:
        """Elements of one allreduce buffer: the gradient plus the scalars sync.py packs."""
        return n_params + 2 + 2 * size


def _plain_server(config: RunConfig) -> dict[str, Any]:
    return {"momentum": 0.0, "nesterov": False, "weight_decay": config.weight_decay}


def _momentum_server(config: RunConfig) -> dict[str, Any]:
    return {"momentum": config.momentum, "nesterov": config.nesterov, "weight_decay": config.weight_decay}


REGISTRY: dict[str, AlgorithmSpec] = {}


def register(spec: AlgorithmSpec) -> AlgorithmSpec:
    REGISTRY[spec.name] = spec
    return spec


register(AlgorithmSpec("sync_sgd", SyncSGD, needs_comm=True))
register(AlgorithmSpec("async_sgd", AsyncSGD, server=_plain_server))
register(AlgorithmSpec("async_msgd", AsyncMSGD, server=_momentum_server))
register(AlgorithmSpec("hogwild_sgd", HogwildSGD, shared=("params",), same_host=True))
register(AlgorithmSpec("easgd", EASGD, server=_plain_server))
register(AlgorithmSpec("async_easgd", AsyncEASGD, server=_plain_server))
register(AlgorithmSpec("async_measgd", AsyncMEASGD, server=_plain_server))
register(AlgorithmSpec("hogwild_easgd", HogwildEASGD, shared=("centre",), same_host=True))
register(AlgorithmSpec("sync_easgd", SyncEASGD, needs_comm=True))
register(AlgorithmSpec("ltfb", LTFB, needs_comm=True, server=_plain_server, extra=ltfb_extra, groups=trainer_groups))

register(AlgorithmSpec("cgdp", CGDP, host=cgdp_host))

__all__ = ["REGISTRY", "AlgorithmSpec", "Algorithm", "StepOut", "WorkerContext", "run_loop", "register"]
