"""What the simulated cluster charges: named devices, published networks' FLOPs, links.

Pure data and pure functions (NumPy and the standard library only at import):

* `DEVICES`: roofline profiles of GPUs and CPU nodes with their vendor peaks and the
  fraction of peak that dense FP32 training reaches on them (`Device.efficiency`,
  derived from published training throughputs where one exists, else stated as
  assumed); `local_device` calibrates this machine's core by timing the model.
* `TIMING_MODELS`: AlexNet, VGG-16, GoogLeNet, ResNet-50/152 as parameter counts and
  forward FLOPs per layer (or stage), so a run can be charged as if it trained one of
  them (`--timing-model`) while its maths trains the configured model; `model_flops`
  describes our own models the same way. The language models (GPT-2 124M and 355M,
  TinyLlama 1.1B, LLaMA 7B: `LM_SHAPES`) are built from their published layer shapes:
  a sample is one sequence of the model's published context, its FLOPs counted from the
  shapes (`maths.gpt.gpt_forward_flops`), its activations as our GPT keeps them
  (`gpt_activation_floats`), and `lm_memory` / `check_fits` refuse a worker whose
  weights, gradients, optimiser state and activations exceed its GPU's memory. One efficiency per device is ResNet-50's; a
  network that cuDNN trains faster than its FLOPs say (Winograd/FFT convolutions: VGG-16
  2.6x, AlexNet 2.3x, from the same published benchmarks) carries a `speed_factor`, and
  `charged_train_flops` is what to charge at the device's rate.
* `LINKS`: host-device and GPU-GPU links as `costmodel.Network`s; `network_named`
  finds a name among them and `costmodel.NETWORKS`.

Conventions: a multiply-add counts as 2 FLOPs (the literature usually quotes
multiply-adds and calls them FLOPs: ResNet-50's "4.1 GFLOPs" are 8.2 GFLOP here).
Only convolutions and fully connected layers are counted (bias adds, activations,
pooling, normalisation and the loss are a few percent and memory bound). Training
costs 3x the forward pass per sample: the backward pass computes the gradients with
respect to the activations and to the weights, each as costly as the forward pass.
Throughputs per device are FP32 (no tensor cores, no mixed precision), as our workers
compute in float32.

The names are also listed in `workbench.config` (SIM_DEVICES, SIM_NETWORKS,
SIM_TIMING_MODELS), where validating a config reads them without importing this
module; this module checks on import that both agree.
"""
from __future__ import annotations

import copy
import math
import pickle
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..config import (
    SIM_CHIP_CORES,
    SIM_CPU_DEVICES,
    SIM_DEVICES,
    SIM_GPU_DEVICES,
    SIM_NETWORKS,
    SIM_TIMING_MODELS,
    ConfigError,
    match_name,
)
from ..maths.models import TRAIN_FLOPS_FACTOR  # forward + backward (activations) + backward (weights)
from ..usercode import dumps
from ..util.blas import blas_limit

DEVICE_NAMES: tuple[str, ...] = SIM_DEVICES
NETWORK_NAMES: tuple[str, ...] = SIM_NETWORKS
TIMING_MODEL_NAMES: tuple[str, ...] = SIM_TIMING_MODELS
BYTES_PER_PARAM = 4      # float32


# ------------------------------------------------------------------------------ devices
@dataclass(frozen=True)
class Device:
    """A roofline model of one worker's device.

    >>> d = Device("toy", "gpu", peak_flops=10e12, mem_bw=1e12, efficiency=0.5, step_overhead_s=1e-4, source="")
    >>> d.compute_s(5e12)              # compute bound: 5e12 / (10e12 * 0.5)
    1.0
    >>> d.compute_s(1e9, 4e12)         # memory bound: 4e12 bytes / 1e12 bytes/s
    4.0
    """

    name: str
    kind: str                 # "gpu" or "cpu"
    peak_flops: float         # FP32 FLOP/s, vendor peak (boost clock where the vendor quotes it)
    mem_bw: float             # bytes/s of the device's own memory
    efficiency: float         # fraction of peak_flops that dense FP32 training sustains
    step_overhead_s: float    # per loss_and_grad call: kernel launches, Python, framework
    source: str               # where the numbers come from
    calibration: tuple[tuple[int, float], ...] = ()   # local_device: (batch, seconds) it measured
    spread: float = 0.0       # local_device: the largest batch's calls' spread (`_spread`: IQR / 1.349 / median)
    cores: int = 1            # cores the peak is summed over (a chip a run may split: `ChipPartition`)
    mem_bytes: float = 0.0    # capacity of the device's own fast memory, bytes (0: not modelled)

    @property
    def rate(self) -> float:
        """Sustained FLOP/s of dense training: peak_flops * efficiency."""
        return self.peak_flops * self.efficiency

    def compute_s(self, flops: float, bytes_moved: float = 0.0) -> float:
        """Seconds for `flops` FLOPs touching `bytes_moved` bytes: the roofline
        max(flops / (peak * efficiency), bytes / mem_bw). The per-call
        `step_overhead_s` is the caller's to add (once per loss_and_grad)."""
        return max(flops / self.rate, bytes_moved / self.mem_bw)


def _resnet50_efficiency(images_per_s: float, peak_flops: float) -> float:
    """Fraction of peak that a published ResNet-50 training throughput implies."""
    return images_per_s * TRAIN_FLOPS_FACTOR * _RESNET50_FWD_FLOPS / peak_flops


_RESNET50_FWD_FLOPS = 2 * 4.09e9   # torchvision resnet50: 4.09 G multiply-adds per 224x224 image
_TF_BENCH = ("TensorFlow benchmarks (tensorflow.org/performance/benchmarks, May 2017, tf_cnn_benchmarks, "
             "synthetic ImageNet, batch 64)")
_DLE = "NVIDIA DeepLearningExamples, PyTorch ResNet-50 v1.5 README (pytorch-21.03 container)"

DEVICES: dict[str, Device] = {d.name: d for d in (
    Device("k80", "gpu", 4.37e12, 240e9, round(_resnet50_efficiency(51.9, 4.37e12), 2), 100e-6,
           "NVIDIA Tesla K80 datasheet: 8.73 TFLOP/s FP32 with GPU Boost and 480 GB/s for the board of two "
           "GK210 dies; one die (one 'GPU' to CUDA, as You et al. SC'17 count them) is 2496 cores x 2 x 875 MHz "
           f"= 4.37 TFLOP/s and 240 GB/s, 12 GB of its 24 GB GDDR5. Efficiency: ResNet-50 at 51.9 images/s on one "
           f"K80 GPU, {_TF_BENCH}.", mem_bytes=12 * 2**30),
    Device("p100", "gpu", 10.6e12, 732e9, round(_resnet50_efficiency(219, 10.6e12), 2), 100e-6,
           "NVIDIA Tesla P100 for NVLink-optimised servers (SXM2) datasheet: 10.6 TFLOP/s FP32, 732 GB/s HBM2 "
           f"(the GPUs of the S822LC 'Minsky'), 16 GB. Efficiency: ResNet-50 at 219 images/s on one DGX-1 P100, "
           f"{_TF_BENCH}.", mem_bytes=16 * 2**30),
    Device("v100", "gpu", 15.7e12, 900e9, round(_resnet50_efficiency(367, 15.7e12), 2), 100e-6,
           "NVIDIA Tesla V100 SXM2 datasheet: 15.7 TFLOP/s FP32, 900 GB/s HBM2, 16 GB (the 16 GB board; a 32 GB one "
           f"exists). Efficiency: ResNet-50 v1.5 FP32 training at 367 images/s on one V100 16GB, {_DLE}.",
           mem_bytes=16 * 2**30),
    Device("a100", "gpu", 19.5e12, 1555e9, round(_resnet50_efficiency(367, 15.7e12), 2), 100e-6,
           "NVIDIA A100 SXM4 40GB datasheet: 19.5 TFLOP/s FP32 (without TF32 tensor cores), 1555 GB/s HBM2. "
           "Efficiency assumed as the V100's (no published plain-FP32 training throughput: NVIDIA's A100 "
           "numbers use TF32, 938 images/s on ResNet-50 v1.5).", mem_bytes=40 * 2**30),
    Device("h100", "gpu", 67e12, 3.35e12, 0.5, 100e-6,
           "NVIDIA H100 SXM5 datasheet: 67 TFLOP/s FP32 (without tensor cores), 3.35 TB/s HBM3, 80 GB. Efficiency "
           "assumed 0.5 (no published plain-FP32 training throughput; a little under the V100's).",
           mem_bytes=80 * 2**30),
    Device("h200", "gpu", 67e12, 4.8e12, 0.5, 100e-6,
           "NVIDIA H200 SXM datasheet: 67 TFLOP/s FP32 (the H100's GPU), 4.8 TB/s HBM3e, 141 GB. Efficiency "
           "assumed 0.5, as the H100's.", mem_bytes=141 * 2**30),
    Device("core", "cpu", 65e9, 23e9, 1.0, 120e-6,
           "One core running our NumPy models (OpenBLAS, float32, one BLAS thread), as `local_device` measured "
           "an AMD EPYC core of a 2-vCPU cloud VM on 2026-12-01: loss_and_grad of the MLPs 64-128-10 and "
           "64-512-256-10 on digits at batches 32-1024 fitted as 117-131 us + FLOPs / 60-77 GFLOP/s; 23 GB/s "
           "copying 32 MB. Rounded to 120 us + FLOPs / 65 GFLOP/s (the measured rate is the sustained one: "
           "efficiency 1). The default for CPU workers: fixed, so a run never depends on the machine that "
           "simulates it (cpu_device local times this machine instead)."),
    Device("knl", "cpu", 6.09e12, 450e9, 0.3, 50e-6,
           "Intel Xeon Phi 7250 (Knights Landing) node: 68 cores x 1.4 GHz x 64 FP32 FLOP/cycle (two AVX-512 "
           "FMA units) = 6.09 TFLOP/s; 16 GB of MCDRAM, in flat mode ~450 GB/s (STREAM triad; Intel quotes > "
           "400 GB/s). Efficiency assumed 0.3 (Intel-optimised Caffe sustained ~2 TFLOP/s on convolutions; plain "
           "frameworks far less). One worker is the whole node, as in You et al. SC'17; with `partitions` the "
           "chip is split into replicas on its own cores (ChipPartition), as their Fig 12 splits it.",
           cores=68, mem_bytes=16 * 2**30),
    Device("power8", "cpu", 915e9, 230e9, 0.5, 20e-6,
           "IBM Power System S822LC for HPC ('Minsky', 8335-GTB; IBM Redpaper REDP-5405), the host of Le et al. "
           "ICPE'18 (CGDP): two 10-core POWER8 at 2.86 GHz, 16 FP32 FLOP/cycle per core (two VSX units, 4-wide "
           "FMA) = 915 GFLOP/s; ~115 GB/s sustained per socket through 4 Centaur buffers, 230 GB/s both. One "
           "worker is the whole 2-socket host (CGDP's CPU master). Efficiency assumed 0.5 (ESSL SGEMM)."),
    Device("xeon", "cpu", 147e9, 5.1e9, 0.5, 20e-6,
           "One core of an Intel Xeon Platinum 8380 (Ice Lake SP, 40 cores): 2.3 GHz x 64 FP32 FLOP/cycle (two "
           "AVX-512 FMA units) = 147 GFLOP/s; its share of 8 channels of DDR4-3200 (204.8 GB/s / 40 cores = "
           "5.1 GB/s). Efficiency assumed 0.5 (oneDNN on large layers reaches more, small layers less)."),
)}


def device_named(name: str, field: str = "device") -> Device:
    """The DEVICES entry for `name` (case and dashes ignored); ConfigError listing them otherwise.

    >>> device_named("V100").peak_flops
    15700000000000.0
    """
    return DEVICES[match_name(field, name, DEVICE_NAMES)]


# ------------------------------------------------------------------------------ a chip split into partitions
@dataclass(frozen=True)
class ChipPartition:
    """One of `partitions` equal partitions of a many-core chip, each a replica of the model
    (its own weights and its own copy of the data) on its own cores, all computing at once:
    what You, Buluç & Demmel (SC'17, Fig 12) do to one Knights Landing, split into 1, 4, 8 and
    16 parts whose gradients a tree sums through MCDRAM and which each update their own weights.

    The facts are the chip's (a DEVICES entry with `cores` and `mem_bytes`); what is assumed:

    * a partition gets `chip.cores // partitions` cores (68 / 16: 4 each, 4 left idle);
    * within a partition the images of its slice are divided among its cores, each core
      computing the forward and backward passes of its own images (OpenMP over the batch),
      so a step lasts as long as the busiest core's `ceil(samples / cores)` images;
    * every busy core streams the weights of each layer through the chip's memory for its
      images: read forward, read backward, its partial gradient written (3 passes, as
      `sim.costs` counts them), every partition at the same time; a layer costs the longer
      of its compute (its direct FLOPs at the core's sustained `rate / cores`) and that
      traffic at the chip's `mem_bw` (a roofline per layer: convolutions are compute bound,
      AlexNet's fully connected layers, 95% of its weights, memory bound when a core has
      few images);
    * the busy cores' partial gradients are then summed into the partition's (each read
      once, the sum written once);
    * the network's direct FLOP count, without `TimingModel.speed_factor` (that describes
      cuDNN's FFT and Winograd convolutions on GPUs; MKL-DNN on KNL computes them directly);
    * not modelled: the fork/join barrier of each layer across a partition's cores (about a
      microsecond each on the mesh, 24 a step for AlexNet: under 1e-4 of a step here), cache
      and NUMA (quadrant or SNC-4) placement, the cores' 4 hardware threads.

    >>> part = ChipPartition(DEVICES["knl"], 16)
    >>> part.name, part.cores, part.images_per_core(64), part.busy_cores(64)
    ('knl/16', 4, 16, 4)
    >>> ChipPartition(DEVICES["knl"], 1).busy_cores(64)      # 64 images on 68 cores: 4 idle
    64
    """

    chip: Device
    partitions: int

    def __post_init__(self) -> None:
        if not 1 <= self.partitions <= self.chip.cores:
            raise ConfigError("partitions", f"1 to {self.chip.cores} (the cores of one {self.chip.name} chip)",
                              self.partitions)

    @property
    def name(self) -> str:
        return f"{self.chip.name}/{self.partitions}"

    @property
    def kind(self) -> str:
        return self.chip.kind

    @property
    def cores(self) -> int:
        """Cores of one partition: the chip's, divided evenly (the remainder idle)."""
        return self.chip.cores // self.partitions

    @property
    def core_rate(self) -> float:
        """Sustained FLOP/s of one core: the chip's `rate` over its cores."""
        return self.chip.rate / self.chip.cores

    @property
    def mem_bw(self) -> float:
        """The partition's share of the chip's memory bandwidth while every partition
        streams at once (its optimiser update)."""
        return self.chip.mem_bw / self.partitions

    @property
    def step_overhead_s(self) -> float:
        return self.chip.step_overhead_s

    def images_per_core(self, samples: int) -> int:
        """Images of a slice of `samples` on the partition's busiest core: ceil(samples / cores)."""
        return -(-int(samples) // self.cores)

    def busy_cores(self, samples: int) -> int:
        """Cores of the partition that get images: ceil(samples / images_per_core)."""
        return -(-int(samples) // self.images_per_core(samples)) if samples > 0 else 0

    def train_s(self, timing: TimingModel, samples: int) -> float:
        """Seconds of one partition's forward and backward pass over `samples` images of
        `timing`'s network, with every partition doing the same at once (see the class):
        per layer max(3 f n / core_rate, 3 w busy P / mem_bw) for forward FLOPs f per image,
        w bytes of weights, n images per core, busy cores per partition, P partitions; then
        (busy + 1) W P / mem_bw for summing the busy cores' gradients (W: all weights)."""
        if samples <= 0:
            return 0.0
        n, streams = self.images_per_core(samples), self.busy_cores(samples) * self.partitions
        bw = self.chip.mem_bw
        t = sum(max(TRAIN_FLOPS_FACTOR * fwd * n / self.core_rate, 3 * BYTES_PER_PARAM * params * streams / bw)
                for _, params, fwd in timing.layers)
        return t + (streams + self.partitions) * timing.n_bytes / bw

    def fits(self, timing: TimingModel, data_bytes: float) -> None:
        """Refuse (ConfigError) a split whose replicas do not fit the chip's fast memory: each
        partition holds its own weights and its own copy of the data (You et al.: the limit
        of the method; AlexNet's 249 MB and CIFAR's 687 MB fit 16 times in 16 GB)."""
        need = self.partitions * (timing.n_bytes + data_bytes)
        if self.chip.mem_bytes and need > self.chip.mem_bytes:
            most = int(self.chip.mem_bytes // (timing.n_bytes + data_bytes))
            raise ConfigError("partitions", f"at most {most}: each partition holds {timing.name}'s weights "
                              f"({timing.n_bytes / 1e6:.0f} MB) and a copy of the data ({data_bytes / 1e6:.0f} MB), "
                              f"and {self.partitions} copies need {need / 1e9:.1f} GB of the {self.chip.name}'s "
                              f"{self.chip.mem_bytes / 2**30:.0f} GiB", self.partitions)


# ------------------------------------------------------------------------------ timing models
@dataclass(frozen=True)
class TimingModel:
    """A network as the simulator charges it: parameters (the bytes every exchange
    moves) and forward FLOPs per sample, in total and per layer in forward order."""

    name: str
    n_params: int
    fwd_flops: float                                   # per sample, multiply-add = 2 FLOPs
    layers: tuple[tuple[str, int, float], ...]         # (name, params, forward FLOPs per sample)
    source: str = ""
    # Measured training speed over what its FLOPs predict at a device's efficiency (which
    # is ResNet-50's): cuDNN trains VGG's 3x3 convolutions by Winograd and AlexNet's large
    # kernels by FFT, with fewer multiplications than the direct count (SPEED_FACTORS).
    speed_factor: float = 1.0
    # A language model's: tokens of one sample (a sequence of its published context), and
    # the bytes one sample keeps for the backward pass (float32, as our GPT keeps them);
    # 0 for the image networks (their memory is not checked).
    tokens: int = 0
    activation_bytes: float = 0.0
    # No FLOPs known (a model of the user's without flops_per_sample): one training example
    # counts as one unit of work, and only a device timed on this machine charges it (`local`,
    # whose fitted rate is then examples per second).
    timed: bool = False

    @property
    def train_flops(self) -> float:
        """FLOPs of one training sample: 3x the forward pass."""
        return TRAIN_FLOPS_FACTOR * self.fwd_flops

    @property
    def charged_train_flops(self) -> float:
        """Direct-count FLOPs per training sample to charge at a device's rate so that the
        published throughputs come out: train_flops / speed_factor."""
        return self.train_flops / self.speed_factor

    @property
    def n_bytes(self) -> int:
        """Bytes of the float32 parameter (and gradient) vector."""
        return BYTES_PER_PARAM * self.n_params


Layer = tuple[str, int, float]


def _conv(name: str, c_in: int, c_out: int, k: int, out_hw: int, groups: int = 1, bias: bool = True,
          bn: bool = False) -> Layer:
    """A k x k convolution producing out_hw x out_hw x c_out (batch norm: 2 params per channel)."""
    weights = k * k * (c_in // groups) * c_out
    return name, weights + c_out * bias + 2 * c_out * bn, 2.0 * weights * out_hw * out_hw


def _fc(name: str, n_in: int, n_out: int) -> Layer:
    return name, n_in * n_out + n_out, 2.0 * n_in * n_out


def _stage(name: str, parts: list[Layer]) -> Layer:
    return name, sum(p for _, p, _ in parts), sum(f for _, _, f in parts)


def _alexnet() -> tuple[Layer, ...]:
    # Krizhevsky et al. 2012 (two towers: conv2, conv4, conv5 in 2 groups), 227x227 input
    return (_conv("conv1", 3, 96, 11, 55), _conv("conv2", 96, 256, 5, 27, groups=2),
            _conv("conv3", 256, 384, 3, 13), _conv("conv4", 384, 384, 3, 13, groups=2),
            _conv("conv5", 384, 256, 3, 13, groups=2),
            _fc("fc6", 256 * 6 * 6, 4096), _fc("fc7", 4096, 4096), _fc("fc8", 4096, 1000))


def _vgg16() -> tuple[Layer, ...]:
    # Simonyan & Zisserman 2015, configuration D: 3x3 convolutions, padding 1, 224x224 input
    layers, c_in, hw = [], 3, 224
    for block, (width, n) in enumerate(((64, 2), (128, 2), (256, 3), (512, 3), (512, 3)), start=1):
        for i in range(1, n + 1):
            layers.append(_conv(f"conv{block}_{i}", c_in, width, 3, hw))
            c_in = width
        hw //= 2
    return (*layers, _fc("fc6", 512 * 7 * 7, 4096), _fc("fc7", 4096, 4096), _fc("fc8", 4096, 1000))


def _googlenet() -> tuple[Layer, ...]:
    # Szegedy et al. 2015, Table 1 as printed (params in K, multiply-adds in M), per row
    rows = (("conv1", 2.7, 34), ("conv2", 112, 360), ("inception3a", 159, 128), ("inception3b", 380, 304),
            ("inception4a", 364, 73), ("inception4b", 437, 88), ("inception4c", 463, 100),
            ("inception4d", 580, 119), ("inception4e", 840, 170), ("inception5a", 1072, 54),
            ("inception5b", 1388, 71), ("fc", 1000, 1))
    return tuple((name, round(k * 1e3), 2.0 * m * 1e6) for name, k, m in rows)


def _resnet(blocks: tuple[int, int, int, int]) -> tuple[Layer, ...]:
    # He et al. 2016 bottleneck ResNet as torchvision builds it (v1.5: the stride sits on the
    # 3x3 convolution), 224x224 input; convolutions without bias, each followed by batch norm
    stages = [_stage("stem", [_conv("conv1", 3, 64, 7, 112, bias=False, bn=True)])]
    c_in, hw_in = 64, 56
    for s, (n, width) in enumerate(zip(blocks, (64, 128, 256, 512)), start=1):
        parts = []
        for b in range(n):
            stride = 2 if (b == 0 and s > 1) else 1
            hw = hw_in // stride
            parts += [_conv("a", c_in, width, 1, hw_in, bias=False, bn=True),
                      _conv("b", width, width, 3, hw, bias=False, bn=True),
                      _conv("c", width, 4 * width, 1, hw, bias=False, bn=True)]
            if b == 0:
                parts.append(_conv("down", c_in, 4 * width, 1, hw, bias=False, bn=True))
            c_in, hw_in = 4 * width, hw
        stages.append(_stage(f"layer{s}", parts))
    return (*stages, _fc("fc", 2048, 1000))


# Published training throughputs, images/s on one GPU (TensorFlow benchmarks, May 2017,
# synthetic data; batch 64, AlexNet 512): (K80 die, P100). A network's speed factor is
# the efficiency its throughput implies over the one ResNet-50's implies on the same
# GPU, averaged over both: where one number per device would misjudge it.
TF_BENCH_IMAGES_PER_S = {"resnet50": (51.9, 219), "resnet152": (20.0, 91.8), "alexnet": (656, 2987),
                         "vgg16": (35.4, 154)}


def _speed_factor(name: str, fwd_flops: float) -> float:
    # efficiency ratio on one GPU: (images * flops / peak) / (ref * resnet50 flops / peak)
    ratios = [images * fwd_flops / (ref * _RESNET50_FWD_FLOPS)
              for images, ref in zip(TF_BENCH_IMAGES_PER_S[name], TF_BENCH_IMAGES_PER_S["resnet50"])]
    return round(sum(ratios) / len(ratios), 2)


@dataclass(frozen=True)
class LMShape:
    """A decoder-only language model's published shape: what `lm_timing` counts.

    GPT-2: learned positions, LayerNorm (gain and bias), biased matmuls, a GELU MLP of 4 d,
    the head tied to the embedding. Llama: rotary positions (no parameters), RMSNorm (a
    gain), no biases, a SwiGLU MLP (three matrices of d x ffn), an untied head, and
    grouped-query attention where `n_kv_heads` < `n_heads`.
    """

    vocab: int
    context: int
    n_layers: int
    d_model: int
    n_heads: int
    ffn: int
    llama: bool = False
    n_kv_heads: int | None = None

    @property
    def kv(self) -> int:
        """Width of k and v: kv heads x head size."""
        return (self.n_kv_heads or self.n_heads) * (self.d_model // self.n_heads)

    def layer_params(self) -> int:
        """Parameters of one block."""
        d, kv, f = self.d_model, self.kv, self.ffn
        if self.llama:
            return 2 * d + (2 * d * d + 2 * d * kv) + 3 * d * f                  # 2 RMSNorm, attention, SwiGLU
        return 4 * d + (d * (d + 2 * kv) + d + 2 * kv) + (d * d + d) + (2 * d * f + f + d)

    def n_params(self) -> int:
        """Every parameter: embeddings, blocks, final norm, head (untied for Llama)."""
        d = self.d_model
        embed = self.vocab * d + (0 if self.llama else self.context * d)
        head = self.vocab * d if self.llama else 0
        return embed + self.n_layers * self.layer_params() + (d if self.llama else 2 * d) + head


def lm_timing(name: str, shape: LMShape, source: str) -> TimingModel:
    """A language model as the simulator charges it: one sample is one sequence of
    `shape.context` tokens; FLOPs per layer from the shapes (`maths.gpt.gpt_forward_flops`:
    every matmul, the attention's full T x T products, the head); activation bytes as our
    GPT keeps them for backward in float32 (`gpt_activation_floats`)."""
    from ..maths.gpt import gpt_activation_floats, gpt_forward_flops
    s = shape
    args = dict(context=s.context, vocab=s.vocab, d_model=s.d_model, ffn=s.ffn, n_kv=s.kv, gated=s.llama)
    one_layer = gpt_forward_flops(n_layers=1, **args) - gpt_forward_flops(n_layers=0, **args)
    head_flops = gpt_forward_flops(n_layers=0, **args)
    d = s.d_model
    embed = s.vocab * d + (0 if s.llama else s.context * d)
    layers = (("embed", embed, 0.0),
              *((f"block{i}", s.layer_params(), one_layer) for i in range(s.n_layers)),
              ("head", (s.vocab * d if s.llama else 0) + (d if s.llama else 2 * d), head_flops))
    activations = BYTES_PER_PARAM * gpt_activation_floats(n_layers=s.n_layers, n_heads=s.n_heads, **args)
    return TimingModel(name, s.n_params(), sum(f for _, _, f in layers), layers, source,
                       tokens=s.context, activation_bytes=float(activations))


_HF = "the released checkpoint's configuration on the Hugging Face hub"
LM_SHAPES: dict[str, tuple[LMShape, str]] = {
    "gpt2-124m": (LMShape(50257, 1024, 12, 768, 12, 3072),
                  "Radford et al. 2019 (GPT-2, the smallest model: 12 layers, d 768, 12 heads, context 1024, vocabulary "
                  f"50257; '117M' in their Table 2, 124,439,808 parameters counted with the tied head, as {_HF} 'gpt2')"),
    "gpt2-355m": (LMShape(50257, 1024, 24, 1024, 16, 4096),
                  "Radford et al. 2019 (GPT-2 medium: 24 layers, d 1024, 16 heads, context 1024; '345M' in their "
                  f"Table 2, 354,823,168 parameters counted with the tied head, as {_HF} 'gpt2-medium')"),
    "tinyllama-1.1b": (LMShape(32000, 2048, 22, 2048, 32, 5632, llama=True, n_kv_heads=4),
                       "Zhang et al. 2024 (TinyLlama, arXiv 2401.02385, Table 1: the Llama 2 architecture with 22 "
                       "layers, d 2048, 32 heads in 4 key-value groups, SwiGLU width 5632, context 2048, vocabulary "
                       "32000): 1,100,048,384 parameters counted, untied head"),
    "llama-7b": (LMShape(32000, 2048, 32, 4096, 32, 11008, llama=True),
                 "Touvron et al. 2023 (LLaMA, arXiv 2302.13971, Table 2: 32 layers, d 4096, 32 heads, context 2048, "
                 "vocabulary 32000; SwiGLU width 2/3 4d rounded to 11008 as in the released weights): "
                 "6,738,415,616 parameters counted, untied head"),
}


TIMING_MODELS: dict[str, TimingModel] = {m.name: m for m in (
    TimingModel("alexnet", 61_000_000, 2 * 0.72e9, _alexnet(),
                "Krizhevsky et al. 2012 (two-tower AlexNet, 227x227): ~61 M parameters (60,965,224 in Caffe's "
                "bvlc_alexnet), ~0.72 G multiply-adds per image; layers computed from the architecture. Speed "
                "factor from TF_BENCH_IMAGES_PER_S (their AlexNet is the one-tower variant, batch 512).",
                _speed_factor("alexnet", 2 * 0.72e9)),
    TimingModel("vgg16", 138_357_544, 2 * 15.47e9, _vgg16(),
                "Simonyan & Zisserman 2015, configuration D: 138 M parameters; 15.47 G multiply-adds per "
                "224x224 image (torchvision model docs); per layer from the architecture. Speed factor from "
                "TF_BENCH_IMAGES_PER_S.", _speed_factor("vgg16", 2 * 15.47e9)),
    TimingModel("googlenet", 6_800_000, 2 * 1.5e9, _googlenet(),
                "Szegedy et al. 2015 (Inception v1): ~6.8 M parameters and 1.5 G multiply-adds per image; per "
                "row of the paper's Table 1 (auxiliary classifiers excluded, as in inference). No published "
                "throughput to derive a speed factor from: 1."),
    TimingModel("resnet50", 25_557_032, _RESNET50_FWD_FLOPS, _resnet((3, 4, 6, 3)),
                "He et al. 2016 as torchvision builds it (v1.5): 25,557,032 parameters, 4.09 G multiply-adds "
                "per 224x224 image (torchvision model docs; the paper's v1 quotes 3.8 G); per stage."),
    TimingModel("resnet152", 60_192_808, 2 * 11.51e9, _resnet((3, 8, 36, 3)),
                "He et al. 2016 as torchvision builds it (v1.5): 60,192,808 parameters, 11.51 G multiply-adds "
                "per 224x224 image (torchvision model docs; the paper's v1 quotes 11.3 G); per stage. Speed factor "
                "from TF_BENCH_IMAGES_PER_S.", _speed_factor("resnet152", 2 * 11.51e9)),
    *(lm_timing(name, shape, source) for name, (shape, source) in LM_SHAPES.items()),
)}


def state_floats(optimizer: str, momentum: float = 0.0) -> int:
    """Floats per parameter a worker's optimiser keeps beside the weights: sgd's momentum
    buffer (none without momentum), lars' one, adamw's and lamb's two moments.

    >>> state_floats("sgd", 0.9), state_floats("sgd", 0.0), state_floats("lamb")
    (1, 0, 2)
    """
    if optimizer in ("adamw", "lamb"):
        return 2
    if optimizer == "lars":
        return 1
    return 1 if momentum > 0 else 0


def lm_memory(timing: TimingModel, samples: int, state: int = 0) -> dict[str, float]:
    """Bytes one worker holds to train `timing` on `samples` sequences: float32 weights and
    gradients, `state` floats per parameter of optimiser state, and the samples' activations.

    >>> m = lm_memory(TIMING_MODELS["gpt2-124m"], 1)
    >>> round(m["weights"] / 1e6, 1), round(m["activations"] / 1e9, 2)
    (497.8, 1.57)
    """
    n = timing.n_bytes
    parts = {"weights": float(n), "gradients": float(n), "optimiser": float(state * n),
             "activations": float(samples) * timing.activation_bytes}
    return {**parts, "total": sum(parts.values())}


def check_fits(timing: TimingModel, device: Device, samples: int, state: int = 0,
               field: str = "timing_model") -> None:
    """Refuse (ConfigError naming `field`) a language model whose worker does not fit its
    GPU's memory (`lm_memory` against `device.mem_bytes`); image networks, CPU devices and
    devices without a stated memory are not checked."""
    if not timing.tokens or device.kind != "gpu" or not device.mem_bytes:
        return
    need = lm_memory(timing, samples, state)
    if need["total"] <= device.mem_bytes:
        return
    gib = 2**30
    parts = ", ".join(f"{k} {need[k] / gib:.1f}" for k in ("weights", "gradients", "optimiser", "activations"))
    fits = int((device.mem_bytes - need["total"] + need["activations"]) // timing.activation_bytes)
    room = (f"at most {fits} sequence(s) per worker fit: a smaller batch_size or more workers" if fits >= 1 else
            "not even one sequence per worker fits (the simulated workers hold whole replicas, unsharded)")
    raise ConfigError(field, f"a model that fits one {device.name} ({device.mem_bytes / gib:.0f} GiB): "
                      f"{timing.name} needs {need['total'] / gib:.1f} GiB for {samples} sequence(s) of "
                      f"{timing.tokens} tokens per worker ({parts} GiB); {room}", timing.name)


def timing_model_named(name: str) -> TimingModel:
    """The TIMING_MODELS entry for `name` (case and dashes ignored); ConfigError otherwise."""
    return TIMING_MODELS[match_name("timing_model", name, TIMING_MODEL_NAMES)]


def model_flops(model: Any) -> TimingModel:
    """A model of the run as a TimingModel: parameters and forward FLOPs per sample of each
    layer, in forward order.

    A built-in model counts its own layers (`layer_flops`; the GPT its published-shape
    count, `lm_timing`), exact for what `loss_and_grad` multiplies. Another model that
    states `flops_per_sample` (the model protocol's training FLOPs of one example, forward
    and backward) gets a third of it as its forward pass, spread over its layer groups in
    proportion to their parameters (where the backward pass's layers finish: cgdp's
    chunks). With neither, one training example is one unit of work (`timed`): only this
    machine's core, timed on the model, charges it (`sim.costs.check_charge`).

    >>> from workbench.maths.models import make_model
    >>> tm = model_flops(make_model("mlp", 64, 10, hidden=(128,)))
    >>> tm.name, tm.n_params, tm.fwd_flops
    ('mlp 64-128-10', 9610, 18944.0)
    """
    from ..maths.gpt import GPT
    if isinstance(model, GPT):
        shape = LMShape(model.vocab, model.context, model.n_layers, model.d_model, model.n_heads, 4 * model.d_model)
        return lm_timing(model.describe().split(" (")[0], shape, "counted from the model's layer shapes")
    layers_of, flops = getattr(model, "layer_flops", None), getattr(model, "flops_per_sample", None)
    if layers_of is None and flops is None:
        if not hasattr(model, "layer_groups"):
            raise TypeError(f"model: a built-in model or one stating flops_per_sample, got {type(model).__name__}")
        return replace(_over_groups(model.describe().split(" (")[0], model, 1.0 / TRAIN_FLOPS_FACTOR,
                                    "no FLOPs given (no flops_per_sample): timed on this machine's core, one "
                                    "training example a unit"), timed=True)
    name = model.describe().split(" (")[0]
    if layers_of is not None:
        layers = tuple(layers_of())
        return TimingModel(name, sum(p for _, p, _ in layers), sum(f for _, _, f in layers), layers,
                           "counted from the model's layer shapes")
    return _over_groups(name, model, float(flops) / TRAIN_FLOPS_FACTOR, "the model's own flops_per_sample")


def _over_groups(name: str, model: Any, fwd: float, source: str) -> TimingModel:
    """A TimingModel of `fwd` forward FLOPs per sample over `model`'s layer groups, in
    proportion to their parameters (one group without a layout)."""
    groups = model.layer_groups()
    n = max(1, model.n_params)
    layers = tuple((f"group{i}", hi - lo, fwd * (hi - lo) / n) for i, (lo, hi) in enumerate(groups))
    return TimingModel(name, model.n_params, fwd, layers, source)


# ------------------------------------------------------------------------------ this machine
CALIBRATION_TARGET_S = 0.005  # the largest batch timed takes about this long per call (see local_device)
CALIBRATION_REPEATS = 15      # timings per batch size (their mean is used) ...
CALIBRATION_MIN_REPEATS = 5   # ... fewer, down to this, where the sizes' timings would take longer
CALIBRATION_BUDGET_S = 0.5    # ... than this in all
_LOCAL: dict[tuple, Device] = {}      # (architecture, dtype) -> calibrated Device
_LOCAL_MEM_BW: list[float] = []       # measured once per process


@contextmanager
def _one_blas_thread():
    """One BLAS thread while timing (and one torch thread, for a torch model): a virtual
    CPU worker is one core."""
    with blas_limit(1):
        yield


def _best_s(fn, repeats: int) -> float:
    """The fastest of `repeats` timed calls: for a hardware limit (the copy bandwidth) and
    for choosing the batch sizes to time, where other processes only ever add time. What a
    step takes is `_typical_s`'s."""
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _timed_calls(fn, repeats: int) -> np.ndarray:
    """Seconds of each of `repeats` calls of `fn`."""
    times = np.empty(repeats)
    for i in range(repeats):
        t0 = time.perf_counter()
        fn()
        times[i] = time.perf_counter() - t0
    return times


def _typical_s(times: np.ndarray) -> float:
    """What a call takes over a run: the mean of the timed calls.

    A run's throughput is its mean step, occasional slow calls (another thread took the
    core a moment) included, and a calibration predicts throughputs. Until the evening of
    2026-12-04 the median was used, and before that the fastest call: on a quiet 2-vCPU VM here the fastest
    of 9 calls was 10-20% under their median, and simulated runs calibrated by the fastest
    came out 12-57% faster than the real ones beside them; the median still left out the
    slow calls every real step pays for (real 2-worker compute: mean 4.30 ms against a
    median of 4.10 ms). On a busy machine the mean is slowed by the others' work too: the
    record keeps the load it was timed at (`calibration_record`), and `bench --sim-vs-real`
    says when a machine was too busy."""
    return float(np.mean(times))


def _spread(times: np.ndarray) -> float:
    """How much typical calls vary: the interquartile range over 1.349 (a normal's standard
    deviation), over the median; 0 for fewer than four calls.

    Robust on purpose: the mean (`_typical_s`) already holds the occasional preempted call,
    and one such call among 15 once made the standard deviation 30% of the mean where the
    quartiles said 2-7% (2026-12-04), which as the simulated run's jitter charged a
    synchronous step a straggler it did not have.

    >>> round(_spread(np.array([1.0, 1.0, 1.1, 1.2, 1.2, 9.0])), 4)   # the 9.0 call barely moves it
    0.1128
    """
    if len(times) < 4:
        return 0.0
    q25, q50, q75 = np.percentile(times, [25, 50, 75])
    return float((q75 - q25) / 1.349 / q50) if q50 > 0 else 0.0


def _copy_bandwidth() -> float:
    """Bytes/s of one core copying 32 MB (read + write counted), the fastest of 5."""
    if not _LOCAL_MEM_BW:
        src = np.ones(1 << 23, np.float32)       # 32 MB: more than most caches hold
        dst = np.empty_like(src)
        np.copyto(dst, src)
        _LOCAL_MEM_BW.append(2 * src.nbytes / _best_s(lambda: np.copyto(dst, src), 5))
    return _LOCAL_MEM_BW[0]


def _repeats(first_s: float, sizes: int) -> int:
    """Timings of one batch size: CALIBRATION_REPEATS, fewer (at least CALIBRATION_MIN_REPEATS)
    where they would take more than the size's share of CALIBRATION_BUDGET_S."""
    fit = int(CALIBRATION_BUDGET_S / sizes / max(first_s, 1e-9))
    return max(CALIBRATION_MIN_REPEATS, min(CALIBRATION_REPEATS, fit))


def fit_overhead_rate(flops: list[float], seconds: list[float]) -> tuple[float, float]:
    """Least squares seconds = overhead + flops / rate: (overhead >= 0, rate > 0).

    Errors count relative to each time (weights 1/seconds), so a batch of 64 is fitted
    as well as one of 1024 rather than lost in its milliseconds. A negative intercept
    (noise) refits through the origin; one point, or a slope that is not positive,
    gives overhead 0 and the largest point's rate.

    >>> overhead, rate = fit_overhead_rate([1e6, 2e6, 4e6], [0.0011, 0.0021, 0.0041])
    >>> round(overhead * 1e6, 6), round(rate / 1e9, 6)       # 100 us + FLOPs / 1 GFLOP/s
    (100.0, 1.0)
    """
    f, t = np.asarray(flops, float), np.asarray(seconds, float)
    if len(f) >= 2 and np.ptp(f) > 0 and np.all(t > 0):
        slope, intercept = np.polyfit(f, t, 1, w=1 / t)     # polyfit weighs residuals by w
        if slope > 0 and intercept >= 0:
            return float(intercept), float(1 / slope)
        slope = float(np.sum(f / t) / np.sum((f / t) ** 2))  # min sum((slope f - t) / t)^2
        if slope > 0:
            return 0.0, 1 / slope
    i = int(np.argmax(f))
    return 0.0, float(f[i] / max(t[i], 1e-12))


def _worker_step(model: Any, params: Any, X: Any, y: Any, b: int) -> Any:
    """A call that does what a worker's step computes on `b` rows: the next `b` rows of a
    fixed shuffle of the set gathered into a batch, then `loss_and_grad` (the same rows
    every call, a view, ran 2-3% faster here: their input stays in the caches)."""
    n = int(X.shape[0])
    order = np.random.default_rng(0).permutation(n)
    at = [0]

    def call() -> Any:
        lo = at[0]
        at[0] = lo + b if lo + 2 * b <= n else 0
        idx = order[lo:lo + b]
        return model.loss_and_grad(params, X[idx], y[idx])
    return call


def local_device(model: Any, X: Any, y: Any, params: Any, rows: int | None = None,
                 repeats: int = CALIBRATION_REPEATS) -> Device:
    """This machine's core as a Device, calibrated by timing `model.loss_and_grad`.

    A call gathers its batch from the set as a worker's step does (`_worker_step`).
    Batches of a geometric range up to one that takes about CALIBRATION_TARGET_S are
    tried (short calls: on a busy machine a call of a few ms often runs undisturbed, one
    of 20 ms almost never), then three of them (largest, a quarter, a sixteenth) are
    timed CALIBRATION_REPEATS times each, with one BLAS thread; their mean times fit seconds =
    overhead + training FLOPs (3x `model_flops`' forward) / rate. Memory bandwidth is
    a 32 MB copy. Cached per architecture: later calls are free. Takes well under a
    second (a copy of the model is timed, so the caller's buffers are untouched).

    `rows`: time that one batch size instead, `repeats` times (not cached): a run whose
    workers only ever compute slices of `rows` rows is charged what that size took, not a
    line fitted through others (`bench --sim-vs-real`: on this 2-vCPU VM the co-run timings
    of 16- and 64-row batches once came out 1.9x their usual while 256 rows did not, and
    the fitted line charged 128-row steps 7.5 ms where they took 4.3 ms, 2026-12-04).
    """
    if not isinstance(params, np.ndarray):   # a GPU array would need synchronising to time; CPU workers only
        raise TypeError(f"params: a NumPy vector (local_device times this machine's CPU), got {type(params).__name__}")
    key = (model.describe(), str(params.dtype))
    if key in _LOCAL and rows is None:
        return _LOCAL[key]
    tm = model_flops(model)
    m = copy.deepcopy(model)       # fresh workspaces (Model.__getstate__ drops them); a user model too
    n = int(X.shape[0])

    def step(b: int):
        return _worker_step(m, params, X, y, b)

    with _one_blas_thread():
        if rows is not None:
            if not 1 <= int(rows) <= n:
                raise ValueError(f"rows: a batch size from 1 to the {n} rows given, got {rows}")
            sizes = [int(rows)]
        else:
            b, limit = 1, min(n, 1024)
            while 2 * b <= limit:
                step(b)()                            # first call: allocates the workspace
                if b >= 4 and _best_s(step(b), 2) >= CALIBRATION_TARGET_S:
                    break
                b *= 2
            sizes = sorted({max(1, b // 16), max(1, b // 4), b})
        calls = []
        for size in sizes:
            t = _best_s(step(size), 1)           # warm (workspace) and a first estimate
            calls.append(_timed_calls(step(size), int(repeats) if rows is not None else _repeats(t, len(sizes))))
    best = [_typical_s(c) for c in calls]
    overhead, rate = fit_overhead_rate([tm.train_flops * s for s in sizes], best)
    measured = ", ".join(f"{s}: {t * 1e3:.3g} ms" for s, t in zip(sizes, best))
    counts = f"{len(calls[0])}" if rows is not None else f"{CALIBRATION_MIN_REPEATS}-{CALIBRATION_REPEATS}"
    device = Device("local", "cpu", rate, _copy_bandwidth(), 1.0, overhead,
                    f"this machine, one core: loss_and_grad of {tm.name} timed at batch {measured} (mean of "
                    f"{counts}; spread {_spread(calls[-1]):.1%} at the largest), "
                    f"fitted as {overhead * 1e6:.3g} us + FLOPs / {rate / 1e9:.3g} GFLOP/s",
                    tuple(zip(sizes, best)), spread=_spread(calls[-1]))
    if rows is None:
        _LOCAL[key] = device
    return device


# ------------------------------------------------------------------------------ cores computing together
CO_RUN_LIMIT_S = 120.0   # a helper process computes at most this long (it ends itself if never stopped)


def _co_run_helper(path: str) -> None:
    """In a helper process: what another worker process of this host does while the core is
    timed. It loads the pickled (model, X, y, params), says "ready", then for each line it
    reads (a batch size, sent as a timed call starts) computes one worker step of that many
    rows (`_worker_step`) on one BLAS thread and says "done": the two start each call
    together, as a synchronous step's workers do. It ends when its input closes (or after
    CO_RUN_LIMIT_S)."""
    import sys
    with open(path, "rb") as f:
        model, X, y, params = pickle.load(f)
    steps: dict[int, Any] = {}
    end = time.perf_counter() + CO_RUN_LIMIT_S
    with _one_blas_thread():
        model.loss_and_grad(params, X[:1], y[:1])
        print("ready", flush=True)
        for line in sys.stdin:
            if time.perf_counter() > end:
                break
            b = int(line)
            if b not in steps:
                steps[b] = _worker_step(model, params, X, y, b)
            steps[b]()
            print("done", flush=True)
    sys.stdout.close()


def co_run_device(model: Any, X: Any, y: Any, params: Any, cores: int, alone: Device,
                  repeats: int | None = None) -> Device:
    """This machine's core timed as `local_device` times it, while `cores - 1` other
    processes compute the same model's `loss_and_grad` at once, each on its own core:
    what each of `cores` worker processes of one host takes when they share its caches
    and memory bandwidth (a synchronous step's workers compute at the same time: each
    helper starts a step of the same size as each timed call starts). The
    batch sizes are `alone`'s (the same fit, seconds = overhead + FLOPs / rate), each timed
    `repeats` times (default: as `local_device` chooses). A helper that cannot start (no
    `sys.executable`) raises RuntimeError."""
    import os
    import subprocess
    import sys
    import tempfile
    tm = model_flops(model)
    sizes = [b for b, _ in alone.calibration] or [min(int(X.shape[0]), 64)]
    m = copy.deepcopy(model)
    big = max(sizes)
    fd, path = tempfile.mkstemp(prefix="workbench-corun-", suffix=".pkl")
    helpers: list[subprocess.Popen] = []
    try:
        rows = min(int(X.shape[0]), 16 * big)            # fresh rows for its calls, as a worker reads
        with open(fd, "wb") as f:   # a model of the user's with its code by value: the helper has no files of theirs
            f.write(dumps((model, np.ascontiguousarray(X[:rows]), np.ascontiguousarray(y[:rows]), params),
                          code=getattr(model, "code", model)))
        code = f"from workbench.sim.profiles import _co_run_helper; _co_run_helper({path!r})"
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
                   PYTHONPATH=os.pathsep.join(p for p in sys.path if p))   # this process's workbench
        for _ in range(cores - 1):
            helpers.append(subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True))
        for h in helpers:
            if h.stdout is None or h.stdout.readline().strip() != "ready":
                raise RuntimeError("a co-run helper process did not start")

        def together(step: Any, b: int, count: int) -> np.ndarray:
            # every helper starts a step of b rows as the timed one starts (a synchronous step's
            # workers compute at once, their weights' reads at the same moments), and the next
            # call waits for all of them, untimed
            times = np.empty(count)
            for i in range(count):
                for h in helpers:
                    h.stdin.write(f"{b}\n")
                    h.stdin.flush()
                t0 = time.perf_counter()
                step()
                times[i] = time.perf_counter() - t0
                for h in helpers:
                    if h.stdout.readline().strip() != "done":
                        raise RuntimeError("a co-run helper process stopped")
            return times

        calls = []
        with _one_blas_thread():
            for size in sizes:
                step = _worker_step(m, params, X, y, size)
                t = float(together(step, size, 1)[0])    # warm (workspaces) and a first estimate
                calls.append(together(step, size, int(repeats) if repeats else _repeats(t, len(sizes))))
    finally:
        for h in helpers:
            h.kill()
            h.wait()
        os.unlink(path)
    best = [_typical_s(c) for c in calls]
    overhead, rate = fit_overhead_rate([tm.train_flops * s for s in sizes], best)
    measured = ", ".join(f"{s}: {t * 1e3:.3g} ms" for s, t in zip(sizes, best))
    return Device("local", "cpu", rate, alone.mem_bw, 1.0, overhead,
                  f"this machine, one of {cores} cores computing at once: loss_and_grad of {tm.name} timed at batch "
                  f"{measured} while {cores - 1} other process(es) computed the same (spread {_spread(calls[-1]):.1%} "
                  f"at the largest), fitted as {overhead * 1e6:.3g} us + FLOPs / {rate / 1e9:.3g} GFLOP/s",
                  tuple(zip(sizes, best)), spread=_spread(calls[-1]))


def co_run_cores(record: dict[str, Any], cpu_workers: int) -> int:
    """How many of this host's cores compute at once for `cpu_workers` local CPU workers:
    one per worker, up to the calibrated machine's cores (more workers than cores share
    cores in a real run; the simulation gives each its own, as a cluster of such hosts would).

    >>> co_run_cores({"machine": {"cores": 2}}, 1), co_run_cores({"machine": {"cores": 2}}, 8)
    (1, 2)
    """
    cores = int(record.get("machine", {}).get("cores") or 1)
    return max(1, min(cpu_workers, cores))


# ------------------------------------------------------------------------------ calibration files
CALIBRATION_KIND = "workbench simulated-cluster calibration"
# how a record's times were taken; a cached record taken another way is timed again (a given
# file still replays as it ran): the fastest of up to 9 calls, then (2026-12-04) the median
CALIBRATION_METHOD = "mean"


def machine_identity() -> dict[str, Any]:
    """What a calibration is of: this machine's CPU model, architecture and core count."""
    import os
    import platform
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return {"cpu": cpu or "unknown", "arch": platform.machine(), "cores": os.cpu_count()}


def calibration_record(device: Device, model: Any, dtype: str) -> dict[str, Any]:
    """A calibrated `local` Device as plain JSON data, with what it is of (machine, model,
    dtype): what the cache file holds and the run's summary records (`calibration`)."""
    import datetime
    return {"kind": CALIBRATION_KIND, "machine": machine_identity(), "model": model.describe(), "dtype": dtype,
            "rate_flops": device.peak_flops * device.efficiency, "mem_bw": device.mem_bw,
            "step_overhead_s": device.step_overhead_s, "timed": [list(t) for t in device.calibration],
            "cv": device.spread, "source": device.source, "method": CALIBRATION_METHOD, "load_average": _load_now(),
            "measured_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}


def _load_now() -> float | None:
    """The 1-minute load average as the calibration was timed (None where the platform has none)."""
    import os
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


def device_from_record(record: dict[str, Any], origin: str) -> Device:
    """The `local` Device a calibration record describes (bitwise its numbers: JSON keeps floats exact)."""
    return Device("local", "cpu", float(record["rate_flops"]), float(record["mem_bw"]), 1.0,
                  float(record["step_overhead_s"]), f"{record.get('source', '')} [{origin}]",
                  tuple((int(b), float(t)) for b, t in record.get("timed", ())), spread=float(record.get("cv", 0.0)))


def read_calibration(path: str, model: Any, dtype: str) -> tuple[Device, dict[str, Any]]:
    """The `local` Device and record of a calibration file (or of a run's summary.json, its
    `calibration`), refused with one ConfigError naming what differs when it is of another
    machine, model or dtype."""
    import json
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        raise ConfigError("calibration", f"a readable calibration JSON file ({type(exc).__name__})", path) from None
    if isinstance(data, dict) and data.get("kind") != CALIBRATION_KIND and isinstance(data.get("calibration"), dict):
        data = data["calibration"]                      # a run's summary.json
    needed = ("machine", "model", "dtype", "rate_flops", "mem_bw", "step_overhead_s")
    if not isinstance(data, dict) or data.get("kind") != CALIBRATION_KIND or any(k not in data for k in needed):
        raise ConfigError("calibration", "a calibration file written by a cpu_device=local run (or its "
                          "summary.json)", path)
    demand = data.get("host_demand_cores", 0.0)
    cores = (data.get("machine") or {}).get("cores") or 1
    if not isinstance(demand, (int, float)) or isinstance(demand, bool) or not 0 <= demand < cores:
        raise ConfigError("calibration", f"a file whose host_demand_cores is a number of cores in [0, {cores}) "
                          f"(got {demand!r})", path)
    here = {"machine": machine_identity(), "model": model.describe(), "dtype": dtype}
    differ = [f"{k} {data[k]!r} (this run: {here[k]!r})" for k in ("machine", "model", "dtype") if data[k] != here[k]]
    if differ:
        raise ConfigError("calibration", "a calibration of this machine and model; the file's " + "; ".join(differ),
                          path)
    return device_from_record(data, f"from {path}"), data


def calibration_cache_path(model: Any, dtype: str) -> Any:
    """This machine's cached calibration for `model`: a file under the cache folder
    (`$WORKBENCH_DATA`, else ~/.cache/workbench), sim-calibration/<hash>.json."""
    import hashlib
    import json

    from ..data.dataset import cache_dir
    key = json.dumps([machine_identity(), model.describe(), dtype], sort_keys=True)
    return cache_dir() / "sim-calibration" / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


def local_profile(model: Any, X: Any, y: Any, params: Any, calibration: str | None = None,
                  cpu_workers: int = 1) -> tuple[Device, dict]:
    """The `local` Device and its record: from `calibration` (a file) when given, else this
    machine's cached calibration, timed (`local_device`) and cached on first use. A cached
    file that cannot be read, or was timed another way (`CALIBRATION_METHOD`), is timed
    again and rewritten.

    With `cpu_workers` > 1 the Device is the core timed while the others compute too
    (`co_run_device`, for `co_run_cores` cores: the record's `co_run[k]`), timed once and
    added to the cached record when it has none; a given file without it keeps its
    one-core numbers (a run from before co-run timing replays as it ran)."""
    import json

    from ..util.fileio import atomic_write
    dtype = str(params.dtype)
    if calibration is not None:
        device, record = read_calibration(calibration, model, dtype)
        return charged_device(record, cpu_workers, device), record
    path = calibration_cache_path(model, dtype)
    device = record = None
    if path.exists():
        try:
            device, record = read_calibration(str(path), model, dtype)
        except ConfigError:
            pass                                           # unreadable: time again
        if record is not None and record.get("method") != CALIBRATION_METHOD:
            device = record = None                         # timed the old way: time again
    changed = record is None
    if record is None:
        alone = local_device(model, X, y, params)
        record = calibration_record(alone, model, dtype)
        device = device_from_record(record, f"cached in {path}")
    k = co_run_cores(record, cpu_workers)
    if k > 1 and _co_run_of(record, cpu_workers) is None:
        together = co_run_device(model, X, y, params, k, device)
        record = {**record, "co_run": {**record.get("co_run", {}), str(k): co_run_entry(together)}}
        changed = True
    if changed:
        try:
            atomic_write(path, json.dumps(record, indent=1))
        except OSError:                                    # a read-only home: the summary still has it
            pass
    return charged_device(record, cpu_workers, device_from_record(record, f"cached in {path}")), record


def co_run_entry(together: Device) -> dict[str, Any]:
    """A `co_run_device` timing as the calibration record's `co_run[k]` entry."""
    return {"rate_flops": together.peak_flops, "step_overhead_s": together.step_overhead_s,
            "timed": [list(t) for t in together.calibration], "cv": together.spread, "source": together.source}


def host_share(record: dict[str, Any], cpu_workers: int) -> float:
    """The share of a core each of `cpu_workers` local CPU workers gets on the calibrated host
    when the host's other demands take their part: `host_demand_cores` (the run's own machinery
    beside the workers' compute: the client's monitor and the local scheduler, measured by
    `bench --sim-vs-real` on its real runs; 0 when the record has none) of its `cores`. With
    k = `co_run_cores` workers computing at once, each gets (cores - demand) / k of a core
    where k + demand is more than the cores, else a whole one.

    >>> rec = {"machine": {"cores": 2}, "host_demand_cores": 0.1}
    >>> host_share(rec, 1), round(host_share(rec, 2), 6), host_share({"machine": {"cores": 2}}, 2)
    (1.0, 0.95, 1.0)
    """
    cores = int(record.get("machine", {}).get("cores") or 1)
    demand = float(record.get("host_demand_cores") or 0.0)
    k = co_run_cores(record, cpu_workers)
    if demand <= 0 or k + demand <= cores:
        return 1.0
    return max(cores - demand, 1e-3) / k


def charged_device(record: dict[str, Any], cpu_workers: int, alone: Device) -> Device:
    """What each of `cpu_workers` local CPU workers is charged: the record's co-run timing
    for that many (`_co_run_of`; else `alone`), slowed by the host's other demands
    (`host_share`: its rate, memory bandwidth and per-call overhead all scale)."""
    device = _co_run_of(record, cpu_workers) or alone
    share = host_share(record, cpu_workers)
    if share == 1.0:
        return device
    import dataclasses
    return dataclasses.replace(
        device, peak_flops=device.peak_flops * share, mem_bw=device.mem_bw * share,
        step_overhead_s=device.step_overhead_s / share,
        source=f"{device.source}; a {share:.1%} share of a core: the host's other demands take "
               f"{float(record['host_demand_cores']):.3g} of its {record['machine']['cores']} cores")


def _co_run_of(record: dict[str, Any], cpu_workers: int) -> Device | None:
    """The record's Device for `cpu_workers` computing at once (None: one core, or not timed)."""
    k = co_run_cores(record, cpu_workers)
    entry = record.get("co_run", {}).get(str(k)) if k > 1 else None
    if entry is None:
        return None
    return Device("local", "cpu", float(entry["rate_flops"]), float(record["mem_bw"]), 1.0,
                  float(entry["step_overhead_s"]), str(entry.get("source", "")),
                  tuple((int(b), float(t)) for b, t in entry.get("timed", ())), spread=float(entry.get("cv", 0.0)))


# ------------------------------------------------------------------------------ links
# name -> (alpha s, bandwidth bytes/s, note); built into comm.network.Network on first use.
_LINK_DATA: dict[str, tuple[float, float, str]] = {
    "pcie3": (10e-6, 12e9, "PCIe 3.0 x16 host <-> device: 15.75 GB/s per direction on paper, ~12 GB/s achieved "
                           "by pinned cudaMemcpy; ~10 us per copy (launch and DMA set-up)"),
    "pcie4": (10e-6, 24e9, "PCIe 4.0 x16 host <-> device: 31.5 GB/s per direction on paper, ~24 GB/s achieved "
                           "pinned; ~10 us per copy"),
    "nvlink1": (10e-6, 35e9, "NVLink 1.0 as the S822LC 'Minsky' wires its P100s (REDP-5405): 2 links of 20 GB/s "
                             "per direction between each GPU and its POWER8 and between the GPU pair, 40 GB/s per "
                             "direction on paper; assumed ~35 GB/s achieved (~87%, as NVLink copies typically "
                             "reach) and ~10 us per transfer"),
    "nvlink2": (10e-6, 130e9, "NVLink 2.0 among 8 V100s (DGX-1V hybrid cube mesh, 6 links x 25 GB/s per direction "
                              "per GPU): NCCL allreduce bus bandwidth ~130 GB/s (nccl-tests on DGX-1V); ~10 us "
                              "per call (kernel launch)"),
    # the partitions of one chip meet in its memory (`costs.SimCosts`' shared_tree allreduce charges the
    # sums' traffic at this bandwidth): the knl device's MCDRAM, one number in one place
    "mcdram": (1e-6, DEVICES["knl"].mem_bw, "the MCDRAM of one Knights Landing between its partitions (flat "
                                            "mode, the knl device's bandwidth); ~1 us per synchronisation "
                                            "(assumed: a flag written and polled across the mesh, a few "
                                            "~100-200 ns memory latencies)"),
}


def _links() -> dict[str, Any]:
    from ..comm.network import Network
    return {name: Network(name, alpha, 1 / bandwidth, note) for name, (alpha, bandwidth, note) in _LINK_DATA.items()}


def __getattr__(name: str) -> Any:
    if name == "LINKS":     # name -> costmodel.Network, built on first use (see _LINK_DATA)
        links = globals()["LINKS"] = _links()
        return links
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def network_named(name: str) -> Any:
    """The costmodel.Network called `name`, from costmodel.NETWORKS or LINKS (case,
    spaces and dashes ignored); ConfigError("network", ...) listing them otherwise.

    >>> network_named("nvlink1").beta == 1 / 35e9
    True
    """
    from ..comm.network import NETWORKS
    canonical = match_name("network", name, NETWORK_NAMES)
    return NETWORKS[canonical] if canonical in NETWORKS else __getattr__("LINKS")[canonical]


def _check_names() -> None:
    """This module's data and config's name lists must agree (config validates with those)."""
    problems = []
    if tuple(DEVICES) != SIM_DEVICES:
        problems.append(f"DEVICES {tuple(DEVICES)} != config.SIM_DEVICES {SIM_DEVICES}")
    kinds = {d.name: d.kind for d in DEVICES.values()}
    if any(kinds.get(n) != "gpu" for n in SIM_GPU_DEVICES) or any(kinds.get(n) != "cpu" for n in SIM_CPU_DEVICES):
        problems.append("device kinds disagree with config.SIM_GPU_DEVICES / SIM_CPU_DEVICES")
    if tuple(TIMING_MODELS) != SIM_TIMING_MODELS:
        problems.append(f"TIMING_MODELS {tuple(TIMING_MODELS)} != config.SIM_TIMING_MODELS")
    if tuple(_LINK_DATA) != SIM_NETWORKS[-len(_LINK_DATA):]:
        problems.append(f"LINKS {tuple(_LINK_DATA)} are not the last of config.SIM_NETWORKS")
    chips = {d.name: d.cores for d in DEVICES.values() if d.cores > 1}
    if chips != SIM_CHIP_CORES:
        problems.append(f"devices with cores {chips} != config.SIM_CHIP_CORES {SIM_CHIP_CORES}")
    if any(not (math.isfinite(d.rate) and d.rate > 0 and 0 < d.efficiency <= 1) for d in DEVICES.values()):
        problems.append("every device needs a finite rate and an efficiency in (0, 1]")
    if problems:
        raise RuntimeError("workbench.sim.profiles: " + "; ".join(problems))


_check_names()
