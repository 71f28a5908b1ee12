"""PROVISIONAL device, timing-model and link profiles (replaced by the documented ones on branch `prof`)."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ..analysis.costmodel import NETWORKS, Network
from ..config import ConfigError


@dataclass(frozen=True)
class Device:
    name: str
    kind: str
    peak_flops: float
    mem_bw: float
    efficiency: float
    step_overhead_s: float
    source: str = ""

    def compute_s(self, flops: float, bytes_moved: float = 0.0) -> float:
        return max(flops / (self.peak_flops * self.efficiency), bytes_moved / self.mem_bw)


DEVICES = {"k80": Device("k80", "gpu", 4.37e12, 240e9, 0.5, 3e-4), "p100": Device("p100", "gpu", 10.6e12, 732e9, 0.5, 2e-4),
           "v100": Device("v100", "gpu", 15.7e12, 900e9, 0.5, 1e-4),
           "power8": Device("power8", "cpu", 0.5e12, 230e9, 0.5, 1e-4)}


@dataclass(frozen=True)
class TimingModel:
    name: str
    n_params: int
    fwd_flops: float
    layers: tuple
    source: str = ""


TIMING_MODELS = {"alexnet": TimingModel("alexnet", 61_000_000, 1.45e9,
                                        (("conv", 2_300_000, 1.3e9), ("fc", 58_700_000, 0.15e9)))}
LINKS = {"pcie3": Network("pcie3", 10e-6, 1 / 12e9)}
_LOCAL: dict = {}


def network_named(name: str) -> Network:
    if name in NETWORKS:
        return NETWORKS[name]
    if name in LINKS:
        return LINKS[name]
    raise ConfigError("network", f"one of {[*NETWORKS, *LINKS]}", name)


def model_flops(model: Any) -> TimingModel:
    layers = tuple((f"g{s}", e - s, 2.0 * (e - s)) for s, e in model.layer_groups())
    return TimingModel(model.name, model.n_params, sum(f for _, _, f in layers), layers)


def local_device(model: Any, X: Any, y: Any, params: Any) -> Device:
    key = (model.name, model.n_params)
    if key not in _LOCAL:
        fl = model_flops(model).fwd_flops * 3
        ts = {}
        for b in (16, 128):
            xs, ys = X[:b], y[:b]
            model.loss_and_grad(params, xs, ys)
            t0 = time.perf_counter()
            for _ in range(20):
                model.loss_and_grad(params, xs, ys)
            ts[b] = (time.perf_counter() - t0) / 20
        rate = fl * (128 - 16) / max(ts[128] - ts[16], 1e-9)
        _LOCAL[key] = Device("local", "cpu", rate, 10e9, 1.0, max(ts[16] - fl * 16 / rate, 1e-6))
    return _LOCAL[key]
