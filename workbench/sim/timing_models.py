"""The networks the simulated cluster charges a run as: published networks and our own models.

Pure data and pure functions (NumPy and the standard library only at import):

* `TIMING_MODELS`: AlexNet, VGG-16, GoogLeNet, ResNet-50/152 as parameter counts and
  forward FLOPs per layer (or stage), so a run can be charged as if it trained one of
  them (`--timing-model`) while its maths trains the configured model; `model_flops`
  describes our own models the same way. The language models (GPT-2 124M and 355M,
  TinyLlama 1.1B, LLaMA 7B: `LM_SHAPES`) are built from their published layer shapes:
  a sample is one sequence of the model's published context, its FLOPs counted from the
  shapes (`maths.gpt.gpt_forward_flops`), its activations as our GPT keeps them
  (`gpt_activation_floats`), and `lm_memory` counts what a worker holds (a device's
  `profiles.check_fits` refuses a worker that exceeds its GPU's memory). One efficiency
  per device is ResNet-50's; a network that cuDNN trains faster than its FLOPs say
  (Winograd/FFT convolutions: VGG-16 2.6x, AlexNet 2.3x, from the same published
  benchmarks) carries a `speed_factor`, and `charged_train_flops` is what to charge at
  the device's rate.

Conventions: a multiply-add counts as 2 FLOPs (the literature usually quotes
multiply-adds and calls them FLOPs: ResNet-50's "4.1 GFLOPs" are 8.2 GFLOP here).
Only convolutions and fully connected layers are counted (bias adds, activations,
pooling, normalisation and the loss are a few percent and memory bound). Training
costs 3x the forward pass per sample: the backward pass computes the gradients with
respect to the activations and to the weights, each as costly as the forward pass.

The names are also config's (SIM_TIMING_MODELS); `sim.profiles` checks on import that
both agree.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..config import (
    SIM_TIMING_MODELS,
    match_name,
)
from ..maths.models import TRAIN_FLOPS_FACTOR  # forward + backward (activations) + backward (weights)

TIMING_MODEL_NAMES: tuple[str, ...] = SIM_TIMING_MODELS
BYTES_PER_PARAM = 4      # float32
RESNET50_FWD_FLOPS = 2 * 4.09e9   # torchvision resnet50: 4.09 G multiply-adds per 224x224 image


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
    # The shapes of its tensors (a language model's, from its published shape; () for the
    # image networks): what PowerSGD's payload is counted on (`sim.costs.make_costs`).
    tensor_shapes: tuple[tuple[int, ...], ...] = ()

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
    ratios = [images * fwd_flops / (ref * RESNET50_FWD_FLOPS)
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

    def tensor_shapes(self) -> tuple[tuple[int, ...], ...]:
        """Each tensor's shape, as the released checkpoints store them (GPT-2's attention one
        fused d x 3d matrix, as our GPT's; Llama's q, k, v apart), in forward order.

        >>> import math
        >>> sum(math.prod(t) for t in LMShape(50257, 1024, 12, 768, 12, 3072).tensor_shapes())
        124439808
        """
        d, kv, f = self.d_model, self.kv, self.ffn
        if self.llama:
            block = [(d,), (d, d), (d, kv), (d, kv), (d, d), (d,), (d, f), (d, f), (f, d)]
            return ((self.vocab, d), *block * self.n_layers, (d,), (self.vocab, d))
        block = [(d,), (d,), (d, d + 2 * kv), (d + 2 * kv,), (d, d), (d,), (d,), (d,), (d, f), (f,), (f, d), (d,)]
        return ((self.vocab, d), (self.context, d), *block * self.n_layers, (d,), (d,))

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
                       tokens=s.context, activation_bytes=float(activations), tensor_shapes=s.tensor_shapes())


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
    TimingModel("resnet50", 25_557_032, RESNET50_FWD_FLOPS, _resnet((3, 4, 6, 3)),
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
