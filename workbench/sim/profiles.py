"""What the simulated cluster charges: named devices, a chip split into partitions, links.

Pure data and pure functions (NumPy and the standard library only at import):

* `DEVICES`: roofline profiles of GPUs and CPU nodes with their vendor peaks and the
  fraction of peak that dense FP32 training reaches on them (`Device.efficiency`,
  derived from published training throughputs where one exists, else stated as
  assumed); this machine's core is timed on the model by `sim/calibration.py`.
  `check_fits` refuses a language model whose worker exceeds its GPU's memory.
* `ChipPartition`: one of equal partitions of a many-core chip (Knights Landing), each
  a replica on its own cores, charged by a per-layer roofline.
* `LINKS`: host-device and GPU-GPU links as `costmodel.Network`s; `network_named`
  finds a name among them and `costmodel.NETWORKS`.

The networks a run is charged as (`TIMING_MODELS`: AlexNet ... LLaMA 7B, and our own
models' FLOPs) are `sim/timing_models.py`'s, with the conventions of counting FLOPs.
Throughputs per device are FP32 (no tensor cores, no mixed precision), as our workers
compute in float32.

The names are also listed in `workbench.config` (SIM_DEVICES, SIM_NETWORKS,
SIM_TIMING_MODELS), where validating a config reads them without importing this
module; this module checks on import that both agree.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

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
from .timing_models import BYTES_PER_PARAM, RESNET50_FWD_FLOPS, TIMING_MODELS, TimingModel, lm_memory

DEVICE_NAMES: tuple[str, ...] = SIM_DEVICES
NETWORK_NAMES: tuple[str, ...] = SIM_NETWORKS


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
    return images_per_s * TRAIN_FLOPS_FACTOR * RESNET50_FWD_FLOPS / peak_flops


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


def check_fits(timing: TimingModel, device: Device, samples: int, state: int = 0,
               field: str = "timing_model", accumulate: int = 1) -> None:
    """Refuse (ConfigError naming `field`) a language model whose worker does not fit its
    GPU's memory (`lm_memory` against `device.mem_bytes`) with the activations of one pass:
    its slice of `samples` sequences, or the largest of `accumulate` micro-batches of it.
    Image networks, CPU devices and devices without a stated memory are not checked."""
    if not timing.tokens or device.kind != "gpu" or not device.mem_bytes:
        return
    per_pass = -(-samples // max(1, accumulate))
    need = lm_memory(timing, per_pass, state)
    if need["total"] <= device.mem_bytes:
        return
    gib = 2**30
    parts = ", ".join(f"{k} {need[k] / gib:.1f}" for k in ("weights", "gradients", "optimiser", "activations"))
    fits = int((device.mem_bytes - need["total"] + need["activations"]) // timing.activation_bytes)
    room = (f"at most {fits} sequence(s) a pass fit: a smaller batch_size, more workers or accumulate "
            f"{-(-samples // fits)} (micro-batches of {fits})" if fits >= 1 else
            "not even one sequence per worker fits (the simulated workers hold whole replicas, unsharded)")
    where = "per worker" if per_pass == samples else f"a pass (a micro-batch of a worker's {samples})"
    raise ConfigError(field, f"a model that fits one {device.name} ({device.mem_bytes / gib:.0f} GiB): "
                      f"{timing.name} needs {need['total'] / gib:.1f} GiB for {per_pass} sequence(s) of "
                      f"{timing.tokens} tokens {where} ({parts} GiB); {room}", timing.name)


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
