"""What each simulated operation costs, in virtual seconds.

One `SimCosts` per run, from the config and the model:

* compute (`compute`): a `loss_and_grad` over `samples` rows charges the device's time
  for 3x the forward FLOPs (forward, and a backward of twice the forward) of the
  *timing* model (a named published network, or the configured model itself; a
  published network's `speed_factor` calibrates it to measured throughputs), the
  weights' traffic through memory (roofline), the device's per-step overhead, and the
  optimiser update (`update_passes` over the parameters: 3 for sgd, 7 for adamw and lars,
  11 for lamb, `maths.optim.UPDATE_PASSES`), and a compressed exchange's own work on the
  worker (PowerSGD's products, QR and error feedback on the timing model's tensors,
  `compression_work`, at the device's roofline); a partition of a chip (`partitions`,
  `profiles.ChipPartition`) charges its own per-layer model of the chip's cores and memory
  instead of the roofline of the whole step; with `jitter` the charge is
  scaled by a seeded Gamma factor of mean 1 and that coefficient of variation (stragglers);
* bytes (`nbytes`): a message of `m` floats of the configured model stands for the
  timing model's parameter vector (scaled by `m / n_params`), plus any tail beyond it
  (loss, flags, timings); small messages (evaluation partials) are their own size;
* communication: one message is alpha + n beta on the run's network; an allreduce is
  the cost model's ring (or tree) formula, so simulator and cost model agree by
  construction where both apply; on this host's shared memory (`shm`, what a real run
  here uses: `comm.shm.ShmComm`) an allreduce, allgather or neighbour exchange is what
  that transport does (`network.shm_terms`: a latency per barrier meeting,
  `shm.allreduce_meetings`, 1 for a pair with a small segment, else 2, and the bytes each
  worker moves; sync_easgd's exchange too, whatever its `elastic_sync`: `comm.shm` has no
  SC'17 chain, which a named cluster network keeps, `elastic_s`), and a group of one copies
  its buffer once (`shm.solo_copies`; the formula says 0); the partitions of one
  chip sum by a tree through its memory (`shared_tree`, over the `mcdram` link); a server's update is its rule's passes over the
  parameters through host memory (`Optimizer.passes`; an elastic exchange three;
  `comm.network.HOST_MEMORY_BYTES_PER_S`: one server
  process streams through one core); cgdp's master sums and updates with the host's
  threads at `master_bw`, the `cpu_device` profile's memory bandwidth when the run names
  one (Le et al.'s master runs on every core of the S822LC: `power8`), else that one core;
* cgdp's backward pass (`backward_done`): which share of the backward time has passed
  once the layers holding a given share of the parameters (counted from the output
  layer) have their gradients, interpolated over the timing model's layers, so a
  parameter-heavy top (AlexNet's, VGG's fully connected layers) is ready early.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..comm.network import (
    HOST_MEMORY_BYTES_PER_S,
    MEASURED,
    Network,
    ring_allreduce_time,
    shared_tree_allreduce_time,
    shm_allreduce_time,
    shm_compressed_terms,
    shm_terms,
    tree_allreduce_time,
)
from ..comm.shm import solo_copies
from ..config import SIM_DEFAULT_CPU_DEVICE, SIM_DEFAULT_DEVICE
from ..config.registry import specs, tail_length
from ..maths import compress as C
from ..maths.accumulate import micro_batches
from ..maths.optim import update_passes
from .profiles import ChipPartition

BYTES = 4           # float32


def default_network(config: Any) -> str:
    """The network when the config names none: this host's shared memory between CPU
    workers calibrated on this machine (what a real run here uses), else InfiniBand HDR.

    >>> from workbench.config import RunConfig
    >>> default_network(RunConfig(algorithm="sync_sgd", cpus=2))
    'shm'
    """
    if getattr(config, "network", None):
        return config.network
    if getattr(config, "partitions", None):
        return "mcdram"          # the partitions of one chip meet in its memory
    one_core_each = getattr(config, "cpu_device", SIM_DEFAULT_CPU_DEVICE) in ("local", SIM_DEFAULT_CPU_DEVICE)
    local_only = (config.gpus in (0, "auto")) and one_core_each
    return "shm" if local_only else "InfiniBand HDR"


@dataclass
class SimCosts:
    devices: list[Any]          # per rank: a sim.profiles.Device
    timing: Any                 # sim.timing_models.TimingModel charged for compute and bytes
    n_params: int               # the configured model's (the maths')
    network: Network
    jitter: float = 0.0
    seed: int = 0
    allreduce: str = "ring"      # ring, tree, shared_tree (the partitions of one chip) or shm (this host)
    master_bw: float = HOST_MEMORY_BYTES_PER_S   # bytes/s of cgdp's host-side master (see make_costs)
    # passes over the parameters of a worker's optimiser update (maths.optim.update_passes of the
    # config's rule and momentum; a server's or cgdp master's update is charged by its own rule)
    update_passes: float = 3.0
    rngs: list[np.random.Generator] = field(default_factory=list)
    calibration: dict | None = None             # the local profile's record (cpu_device local), for the summary
    charged_by: str = ""                        # how compute is charged, in a sentence (`check_charge`)
    # this host's shared memory (network shm, a real run's `comm.shm.ShmComm`): a group of one meets
    # nobody but still copies its slot into the shared total (`shm.solo_copies`), one pass through host
    # memory; measured 0.12-0.13 ms for 2.1 MB against 0.14-0.16 ms for np.copyto, and a real one-worker
    # sync_sgd run's comm_s 4 us a step at 9,616 floats (2026-12-07, load 7.9-8.7), which the link's
    # formula (0 for one worker) leaves out
    solo_copy: bool = False
    accumulate: int = 1          # micro-batches a loss_and_grad is computed in (config.accumulate)
    # allreduce "shm": the elements the run's segment holds (`AlgorithmSpec.comm_elems` of the timing
    # model's vector), which decide its path and so its meetings (`shm.pair_path`); 0: the vector + tail
    shm_capacity: int = 0
    # a compressed exchange's bytes on the timing model over those on the trained model (0: in
    # proportion to the vectors, as top-k's, sign's and qsgd's are). PowerSGD's payload is its
    # matrices' rows and columns times the rank: GPT-2 124M's at rank 4 is 135x smaller than its
    # vector, the small GPT's 9.7x, and scaling the small one's share charged GPT-2 14x its bytes
    payload_scale: float = 0.0
    # a compressed exchange's own work on the worker each step, on the timing model's tensors
    # (`maths.compress.powersgd_work`: PowerSGD's products, its QR and error feedback), charged
    # with the step's compute at the device's roofline (`compress_s`); 0: none (until 2026-12-07
    # PowerSGD's was free: 8.9 ms a step of GPT-2 124M at rank 4 on a V100, 8.05 GB of passes)
    compress_flops: float = 0.0
    compress_bytes: float = 0.0

    def __post_init__(self) -> None:
        self.rngs = [np.random.default_rng([self.seed, rank, 17]) for rank in range(len(self.devices))]
        tm = self.timing
        self.train_flops = tm.charged_train_flops                  # per sample: 3x forward, over the network's
        #   speed factor (cuDNN's fast convolutions do fewer multiplications than the direct count)
        self.weight_bytes = 3.0 * tm.n_params * BYTES              # weights read twice, gradient written once
        self.vector_bytes = tm.n_params * BYTES
        # cumulative (params, backward flops) over the timing model's layers, output layer first
        params = np.array([p for _, p, _ in reversed(tm.layers)], dtype=float)
        flops = np.array([f for _, _, f in reversed(tm.layers)], dtype=float)
        self._cum_params = np.concatenate([[0.0], np.cumsum(params) / params.sum()])
        self._cum_flops = np.concatenate([[0.0], np.cumsum(flops) / flops.sum()])
        if not self.shm_capacity:
            self.shm_capacity = tm.n_params + tail_length(len(self.devices))

    # ---------------------------------------------------------------- compute
    def compute(self, rank: int, samples: int) -> float:
        """Virtual seconds of one loss_and_grad over `samples` rows plus the update, on `rank`.
        In micro-batches (`accumulate`) each is a pass of its own: its rows' FLOPs, the
        weights read again and the call's overhead (launches, Python) again."""
        dev = self.devices[rank]
        pieces = micro_batches(samples, self.accumulate) if self.accumulate > 1 else [(0, samples)]
        busy = sum(self._pass(dev, hi - lo) for lo, hi in pieces)
        t = busy + self.update(rank) + self.compress_s(rank)
        if self.jitter:
            k = 1.0 / self.jitter ** 2
            t *= float(self.rngs[rank].gamma(k, 1.0 / k))
        return t

    def _pass(self, dev: Any, samples: int) -> float:
        """One forward and backward pass over `samples` rows, its call's overhead included."""
        if isinstance(dev, ChipPartition):       # its cores and the chip's memory, layer by layer
            return dev.train_s(self.timing, samples) + dev.step_overhead_s
        return dev.compute_s(self.train_flops * samples, self.weight_bytes) + dev.step_overhead_s

    def last_pass_share(self, rank: int, samples: int) -> float:
        """The last micro-batch's share of a loss_and_grad's passes (1 without accumulation):
        the layers' gradients are complete only in its backward pass (cgdp's chunks)."""
        if self.accumulate <= 1 or samples <= 1:
            return 1.0
        dev = self.devices[rank]
        pieces = micro_batches(samples, self.accumulate)
        times = [self._pass(dev, hi - lo) for lo, hi in pieces]
        return times[-1] / sum(times)

    def compress_s(self, rank: int) -> float:
        """A step's compression work on `rank` (`compress_flops`, `compress_bytes`): the
        device's roofline, max(FLOPs / rate, bytes / memory bandwidth); a chip's partition
        at its chip's."""
        if not self.compress_flops and not self.compress_bytes:
            return 0.0
        dev = self.devices[rank]
        return getattr(dev, "chip", dev).compute_s(self.compress_flops, self.compress_bytes)

    def update(self, rank: int) -> float:
        """The optimiser's update on the worker: `update_passes` over the parameters."""
        return self.update_passes * self.vector_bytes / self.devices[rank].mem_bw

    def score(self, rank: int, samples: int) -> float:
        """Virtual seconds of scoring a model on `samples` rows (LTFB's tournament score,
        `Evaluator.accuracy`): a forward pass, the forward's share (`forward_share`) of a
        training pass over as many rows, its call's overhead included (the cost model's
        `costmodel.tournament_scoring_s` charges the same third of its calibrated pass)."""
        return self._pass(self.devices[rank], samples) * self.forward_share()

    def forward_share(self) -> float:
        """Share of compute before the backward pass starts (forward = 1/3 of the FLOPs)."""
        return 1.0 / 3.0

    def backward_done(self, param_share: float) -> float:
        """Share of the backward pass done when the layers holding `param_share` of the
        parameters (from the output layer down) have their gradients.

        >>> from types import SimpleNamespace as N
        >>> c = SimCosts([], N(n_params=100, fwd_flops=10.0, charged_train_flops=30.0, layers=(("conv", 10, 9.0), ("fc", 90, 1.0))), 100,
        ...              Network("x", 0.0, 0.0))
        >>> round(c.backward_done(0.9), 6), round(c.backward_done(1.0), 6)   # fc: 90% of params, 10% of flops
        (0.1, 1.0)
        """
        return float(np.interp(param_share, self._cum_params, self._cum_flops))

    # ---------------------------------------------------------------- bytes and messages
    def nbytes(self, m: int) -> float:
        """Bytes on the wire for a message of `m` floats of the configured model."""
        if m >= self.n_params:
            return self.vector_bytes + (m - self.n_params) * BYTES
        return m * BYTES

    def share_bytes(self, lo: int, hi: int) -> float:
        """Bytes of the slice [lo, hi) of the parameter vector, as the timing model's."""
        return self.vector_bytes * (hi - lo) / self.n_params

    def message(self, n_bytes: float) -> float:
        return self.network.alpha + n_bytes * self.network.beta

    def allreduce_s(self, workers: int, m: int) -> float:
        if workers <= 1:
            return solo_copies(1) * self.nbytes(m) / HOST_MEMORY_BYTES_PER_S if self.solo_copy else 0.0
        return self._allreduce(workers, self.nbytes(m))

    def _allreduce(self, workers: int, n_bytes: float) -> float:
        a, b = self.network.alpha, self.network.beta
        if self.allreduce == "shm":
            return shm_allreduce_time(workers, n_bytes, a, b, self.shm_capacity)
        fn = {"ring": ring_allreduce_time, "shared_tree": shared_tree_allreduce_time}.get(
            self.allreduce, tree_allreduce_time)
        return fn(workers, n_bytes, a, b)

    def _shm_read(self, workers: int, n_bytes: float) -> float:
        """An allgather or neighbour exchange through this host's shared memory reading
        `n_bytes` of others' slots (`network.shm_terms`: its meetings are the allreduce's)."""
        a, b = shm_terms(workers, n_bytes, self.shm_capacity)
        return a * self.network.alpha + b * self.network.beta

    def neighbour_s(self, workers: int, peers: int, m: int) -> float:
        """Gossip's exchange of `m` floats with `peers` neighbours: a message to each on a
        network, or (shm) the transport's meetings and the peers' slots read."""
        if workers <= 1:
            return 0.0
        if self.allreduce == "shm":
            return self._shm_read(workers, peers * self.nbytes(m))
        return peers * self.message(self.nbytes(m))

    def compressed_s(self, workers: int, payload_bytes: float, gather: bool) -> float:
        """A compressed exchange: `payload_bytes` stand for a share of the configured model's
        vector, scaled as the timing model's (b); a ring allgather of one payload per worker,
        (P - 1) (alpha + b beta), or an allreduce of b (the ring or tree formula); on this
        host's shared memory its meetings, which the run's segment decides (`shm_capacity`,
        not the payload's size: `network.shm_compressed_terms`), and the P - 1 payloads
        read, or b once."""
        if workers <= 1:
            return 0.0
        b = payload_bytes * (self.payload_scale or self.vector_bytes / (self.n_params * BYTES))
        if self.allreduce == "shm":   # through the run's segment: its capacity decides the path, not b
            a, bb = shm_compressed_terms(workers, b, gather, self.shm_capacity)
            return a * self.network.alpha + bb * self.network.beta
        if gather:
            return (workers - 1) * (self.network.alpha + b * self.network.beta)
        return self._allreduce(workers, b)

    def elastic_s(self, workers: int, m: int, host: bool) -> float:
        """Sync EASGD's exchange of `m` floats as SC'17's chain charges it: a binary-tree
        reduction and broadcast, 2 ceil(log2 P) (alpha + n beta) (You et al.: log P
        (alpha + |W| beta) in place of the round-robin master's P (alpha + |W| beta)); with
        the centre on the host (`host`, their first step) also the copy of the vector to
        the host and of the centre back (two messages) and the host's update of the centre
        (three passes through host memory), which keeping the weights on the devices removes.
        On this host's shared memory (`allreduce` "shm") what a real run does there: `comm.shm`
        has no chain, so every path is one allreduce of the buffer through the segment
        (`network.shm_terms`, as `allreduce_s`; the centre is in the workers' own memory,
        no copies), and the simulated comm offers no chain either (`transport.SimComm`);
        a named cluster network keeps the paper's tree.

        >>> from types import SimpleNamespace as N
        >>> c = SimCosts([], N(n_params=100, fwd_flops=1.0, charged_train_flops=3.0, layers=(("fc", 100, 1.0),)), 100,
        ...              Network("x", 1e-6, 1e-9))
        >>> round(c.elastic_s(8, 100, host=False), 9)     # 6 (1 us + 400 ns)
        8.4e-06
        >>> c.allreduce = "shm"; round(c.elastic_s(8, 100, host=True), 9)   # 2 meetings and 400 ns
        2.4e-06
        """
        if workers <= 1:
            return 0.0
        n_bytes = self.nbytes(m)
        if self.allreduce == "shm":
            return self._allreduce(workers, n_bytes)
        t = tree_allreduce_time(workers, n_bytes, self.network.alpha, self.network.beta)
        if host:
            t += 2 * self.message(n_bytes) + self.host_update(m)
        return t

    def host_copy(self) -> float:
        """A server copying out its parameter vector (a pull): one pass through host memory."""
        return self.vector_bytes / HOST_MEMORY_BYTES_PER_S

    def host_update(self, m: int | None = None, passes: float = 3.0) -> float:
        """A server applying an elastic exchange (three passes) or `passes` over `m` floats
        (default all)."""
        n_bytes = self.vector_bytes if m is None else self.nbytes(m)
        return passes * n_bytes / HOST_MEMORY_BYTES_PER_S


def timing_of(config: Any, model: Any) -> Any:
    """The timing model a simulated run of `config` charges: the named published network
    (`timing_model`), else the model's own FLOPs (`timing_models.model_flops`: its layers, its
    `flops_per_sample`, or, with neither, timed on this machine)."""
    from . import timing_models
    return timing_models.TIMING_MODELS[config.timing_model] if config.timing_model else timing_models.model_flops(model)


def check_charge(config: Any, model: Any) -> str:
    """How a simulated run of `config` charges `model`'s compute, in a sentence (the
    summary's `compute_charged_by`); ConfigError where it cannot: a model with no FLOPs
    (no `flops_per_sample`) is timed on this machine's core, so it runs on CPU workers of
    the `core` or `local` profile only."""
    from ..config import ConfigError
    timing = timing_of(config, model)
    if config.timing_model:
        return (f"timing_model {config.timing_model}: the published network's FLOPs ({timing.train_flops:,.0f} per "
                "training example) while the maths trains the configured model")
    if not getattr(timing, "timed", False):
        how = "counted from its layer shapes" if hasattr(model, "layer_flops") else "its own flops_per_sample"
        return f"the model's FLOPs, {how} ({timing.train_flops:,.0f} per training example)"
    why = "gives no flops_per_sample, so it is timed on this machine's core (cpu_device local)"
    if config.gpus:
        raise ConfigError("gpus", f"0 for {model.describe().split(' (')[0]}: it {why}; give the model "
                          "flops_per_sample, or name a timing_model, to charge GPU profiles", config.gpus)
    if config.cpu_device not in (SIM_DEFAULT_CPU_DEVICE, "local") or config.partitions:
        raise ConfigError("cpu_device", f"{SIM_DEFAULT_CPU_DEVICE} or local for {model.describe().split(' (')[0]}: it "
                          f"{why}; give the model flops_per_sample, or name a timing_model, to charge other profiles",
                          config.cpu_device)
    return f"this machine's core timing the model's loss_and_grad: it {why.split(', so')[0]}"


def make_costs(config: Any, model: Any, kinds: list[str], data: Any = None, link: Network | None = None) -> SimCosts:
    """The run's costs: per-rank devices, the timing model, the network (`link`, when
    given, replaces the named one: e.g. alpha / beta calibrated on this machine's real runs,
    `costmodel.calibrate(...).link("measured")`). A model with no FLOPs is charged as this
    machine's core times it (`check_charge`)."""
    from . import calibration, profiles
    charged_by = check_charge(config, model)
    timing = timing_of(config, model)
    timed = getattr(timing, "timed", False)
    devices, record = [], None
    if config.partitions:           # one chip split (config checked: CPU workers only, one per partition)
        part = profiles.ChipPartition(profiles.DEVICES[config.cpu_device], config.partitions)
        if data is not None:
            part.fits(timing, float(data.X_train.nbytes + data.y_train.nbytes))
        return SimCosts([part] * len(kinds), timing, model.n_params,
                        link if link is not None else profiles.network_named(default_network(config)),
                        jitter=config.jitter, seed=config.seed, allreduce="shared_tree",
                        update_passes=update_passes(config.optimizer, config.momentum, config.grad_clip),
                        accumulate=config.accumulate)
    for kind in kinds:
        name = (config.device or SIM_DEFAULT_DEVICE) if kind == "gpu" else "local" if timed else config.cpu_device
        if name == "local":       # the one place wall-clock time enters: timed once per machine, cached, recorded
            if record is None:
                if data is None:
                    raise ValueError("the local profile is calibrated on the run's data")
                # the host's local CPU workers compute at once (a synchronous step): the core
                # timed with as many others computing beside it (calibration.co_run_device)
                lo, hi = micro_batches(-(-config.batch_size // max(1, len(kinds))), config.accumulate)[0]
                local, record = calibration.local_profile(model, data.X_train, data.y_train, model.init(config.seed),
                                                       config.calibration, cpu_workers=kinds.count("cpu"),
                                                       rows=hi - lo)   # a worker's pass: its slice's (micro-)batch
            devices.append(local)
        else:
            devices.append(profiles.DEVICES[name])
    # cgdp's master: the named host's memory; this machine's (local) or the default core: one core streaming
    one_core = config.cpu_device in ("local", SIM_DEFAULT_CPU_DEVICE)
    master = HOST_MEMORY_BYTES_PER_S if one_core else profiles.DEVICES[config.cpu_device].mem_bw
    network = link if link is not None else profiles.network_named(default_network(config))
    # this host's shared memory: its own charge, also with a link calibrated on it; a link given
    # by name (a "wan" of 1 ms a message, say) is charged the ring, as any network
    shm = default_network(config) == "shm" and (link is None or link.name in ("shm", MEASURED))
    spec = specs().get(config.algorithm)
    costs = SimCosts(devices, timing, model.n_params, network,
                     jitter=config.jitter, seed=config.seed, master_bw=master, calibration=record,
                     update_passes=update_passes(config.optimizer, config.momentum, config.grad_clip),
                     solo_copy=shm, accumulate=config.accumulate, allreduce="shm" if shm else "ring",
                     shm_capacity=spec.comm_elems(timing.n_params, len(kinds)) if spec else 0)
    costs.charged_by = charged_by
    costs.payload_scale = powersgd_scale(config, model, timing)
    costs.compress_flops, costs.compress_bytes = compression_work(config, model, timing)
    return costs


def compression_work(config: Any, model: Any, timing: Any) -> tuple[float, float]:
    """(FLOPs, bytes) of a worker's compression work a step (`maths.compress.powersgd_work`):
    PowerSGD's on the timing model's own tensors where they are listed (the language
    models), else on the trained model's, scaled as its vector to the timing model's (as the
    payload is, `powersgd_scale`); (0, 0) for another compression (their work is a pass or two
    over the vector, not charged) or a model without a `layout()`.

    >>> from types import SimpleNamespace as N
    >>> from workbench.sim.timing_models import TIMING_MODELS
    >>> cfg = N(compression="powersgd", compression_rank=4, error_feedback=True, timing_model="gpt2-124m")
    >>> f, b = compression_work(cfg, None, TIMING_MODELS["gpt2-124m"])
    >>> round(f / 1e9, 2), round(b / 1e9, 2)    # GFLOP, GB
    (4.1, 8.05)
    """
    if config.compression != "powersgd":
        return 0.0, 0.0
    rank, feedback = config.compression_rank, bool(getattr(config, "error_feedback", True))
    if config.timing_model and timing.tensor_shapes:
        return C.powersgd_work(list(timing.tensor_shapes), rank, feedback)
    layout = getattr(model, "layout", None)
    if not callable(layout):
        return 0.0, 0.0
    flops, nbytes = C.powersgd_work([tuple(s) for _, s in layout()], rank, feedback)
    scale = timing.n_params / model.n_params if model.n_params else 1.0
    return flops * scale, nbytes * scale


def powersgd_scale(config: Any, model: Any, timing: Any) -> float:
    """PowerSGD's payload on the timing model's own tensors over that on the trained model's
    (`maths.compress.powersgd_bytes` of each at the run's rank); 0 (scale as the vectors) for
    another compression, no timing model, or one whose tensors are not known (the image
    networks: their share is the trained model's).

    >>> from types import SimpleNamespace as N
    >>> from workbench.maths.gpt import GPT
    >>> from workbench.sim.timing_models import TIMING_MODELS
    >>> cfg = N(compression="powersgd", compression_rank=4, timing_model="gpt2-124m")
    >>> small, big = GPT(context=64, vocab=16), TIMING_MODELS["gpt2-124m"]
    >>> round(small.n_params * 4 / sum(C.powersgd_bytes([s for _, s in small.layout()], 4)), 1)   # its share
    9.7
    >>> round(big.n_params * 4 / (sum(C.powersgd_bytes([s for _, s in small.layout()], 4)) * powersgd_scale(cfg, small, big)), 1)
    134.9
    """
    layout = getattr(model, "layout", None)
    if (config.compression != "powersgd" or not config.timing_model or not timing.tensor_shapes
            or not callable(layout)):
        return 0.0
    own = sum(C.powersgd_bytes([tuple(s) for _, s in layout()], config.compression_rank))
    theirs = sum(C.powersgd_bytes(list(timing.tensor_shapes), config.compression_rank))
    return theirs / own if own else 0.0


def comm_against_sync(summary: dict[str, Any]) -> dict[str, float] | None:
    """A simulated run's communication against sync_sgd's on the same virtual cluster: per
    worker, the seconds this run spent moving bytes (`time_breakdown` comm_s over the
    workers) and what sync_sgd's gradient allreduce would have cost over as many steps
    (`sync_allreduce_s`, the formula the simulator charges sync_sgd per step), each also as
    a share of a step's time with this run's compute; None for a run that is not simulated
    (or has no steps). `share` is of all the run's steps' booked time and counts the
    communication alone (the run line's `comm_fraction` is comm + wait over the steady
    window: another number). `saving` (sync_sgd's time over this run's) is None where either
    is 0 s: a run that exchanges nothing, or a cluster whose allreduce costs nothing, has no ratio.
    `workers`: the cluster's; at 1 sync_sgd's "allreduce" meets nobody, and what it costs is a
    copy of its buffer (`shm.solo_copies`, on this host's shared memory), or nothing.

    >>> s = {"sync_allreduce_s": 0.5, "steps": 10, "workers": [{}, {}],
    ...      "time_breakdown": {"compute_s": 4.0, "comm_s": 1.0, "wait_s": 0.0}}
    >>> c = comm_against_sync(s)
    >>> c["comm_s"], c["sync_sgd_comm_s"], c["saving"], round(c["share"], 3), round(c["sync_sgd_share"], 3)
    (0.5, 5.0, 10.0, 0.2, 0.714)
    """
    per_step, steps = summary.get("sync_allreduce_s"), summary.get("steps") or 0
    workers = len(summary.get("workers") or ()) or 1
    tb = summary.get("time_breakdown") or {}
    if per_step is None or not steps or "comm_s" not in tb:
        return None
    comm, compute, wait = tb["comm_s"] / workers, tb["compute_s"] / workers, tb.get("wait_s", 0.0) / workers
    sync = per_step * steps
    return {"workers": workers, "comm_s": comm, "sync_sgd_comm_s": sync, "saving": sync / comm if comm > 0 and sync > 0 else None,
            "share": comm / (compute + comm + wait) if compute + comm + wait > 0 else 0.0,
            "sync_sgd_share": sync / (compute + sync) if compute + sync > 0 else 0.0}


def comm_text(name: str, c: dict[str, Any]) -> str:
    """The CLI's "communication:" line of a simulated run, from `comm_against_sync`'s `c`:
    this run's communication beside sync_sgd's allreduce on the same cluster. A run that
    exchanges nothing says so; a ratio only where both sides took time. On one worker
    sync_sgd's exchange meets nobody: the line says what it costs there (a copy of its
    buffer, `shm.solo_copies`), not an allreduce to set beside it.

    >>> c = {"comm_s": 0.5, "sync_sgd_comm_s": 5.0, "saving": 10.0, "share": 0.2, "sync_sgd_share": 0.714}
    >>> comm_text("diloco", c)
    "communication: diloco 0.5 s per worker (20% of all its steps' booked time); sync_sgd's allreduce on this cluster would take 5 s (71%): 10x less"
    >>> comm_text("sgd", {**c, "comm_s": 0.0, "saving": None, "share": 0.0, "sync_sgd_comm_s": 1.69e-4,
    ...                   "sync_sgd_share": 0.02})
    "communication: sgd exchanges nothing; sync_sgd's allreduce on this cluster would take 0.000169 s (2%)"
    >>> comm_text("sgd", {**c, "workers": 1, "comm_s": 0.0, "saving": None, "share": 0.0, "sync_sgd_comm_s": 1.69e-4,
    ...                   "sync_sgd_share": 0.02})
    'communication: sgd exchanges nothing; sync_sgd on this one worker would meet nobody, only copy its buffer: 0.000169 s (2%)'
    >>> comm_text("sgd", {**c, "comm_s": 0.0, "saving": None, "share": 0.0, "sync_sgd_comm_s": 0.0})
    'communication: sgd exchanges nothing'
    """
    sync = (f"sync_sgd's allreduce on this cluster would take {c['sync_sgd_comm_s']:.3g} s "
            f"({c['sync_sgd_share']:.0%})")
    if c.get("workers") == 1:   # nobody to meet: what sync_sgd's exchange does alone (`shm.solo_copies`)
        sync = (f"sync_sgd on this one worker would meet nobody, only copy its buffer: {c['sync_sgd_comm_s']:.3g} s "
                f"({c['sync_sgd_share']:.0%})")
    if c["comm_s"] <= 0:   # nothing to set beside sync_sgd's but what sync_sgd's would cost
        return f"communication: {name} exchanges nothing" + (f"; {sync}" if c["sync_sgd_comm_s"] > 0 else "")
    own = f"communication: {name} {c['comm_s']:.3g} s per worker ({c['share']:.0%} of all its steps' booked time)"
    r = c.get("saving")
    if not r:   # sync_sgd's allreduce costs nothing here (one worker): nothing to compare with
        return f"{own}; sync_sgd's allreduce on this cluster would take 0 s"
    than = "about the same" if 0.95 <= r <= 1.05 else f"{r:.3g}x less" if r > 1 else f"{1 / r:.3g}x more"
    return f"{own}; {sync}: {than}"
