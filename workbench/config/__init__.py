"""One validated `RunConfig` holding every knob of a run.

YAML files, CLI flags (underscores become dashes), notebook parameters and dashboard
widgets all map onto the field names below. Validation happens here, once, before any
worker starts; every error names the field, what is allowed and the value it got:

    batch_size: at least the number of workers (2), got 1
"""
from __future__ import annotations

import math
import numbers
import os
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from .. import usercode
from ..data.dataset import DATASETS, NAMED_BY_PATH, DataError, Dataset, dataset_info, is_text_path
from ..data.files import is_data_path, save_arrays
from .registry import LR_MAX, TOURNAMENT_SIZE, tournament_fit, with_knob
from .rules import (
    GPT_KNOBS,
    OPTIMIZER_KNOBS,
    OPTIMIZER_LR,
    algorithm_spec,
    check_elastic,
    check_language_model,
    check_optimizer,
    check_owned_knobs,
    check_scaled_lr,
    default_lr,
    is_text_dataset,
    lr_range,
)
from .simulation import (
    JITTER_ALLOWED,
    JITTER_MIN,
    MAX_VIRTUAL_WORKERS,
    SIM_CHIP_CORES,
    SIM_CPU_DEVICES,
    SIM_DEFAULT_CPU_DEVICE,
    SIM_DEFAULT_DEVICE,
    SIM_DEVICES,
    SIM_FIELDS,
    SIM_GPU_DEVICES,
    SIM_NETWORKS,
    SIM_TIMING_MODELS,
    check_simulation,
    no_vanishing_jitter,
)
from .values import (
    DEFAULT_GPT,
    DEFAULT_HIDDEN,
    MAX_WHOLE,
    NUMBER,
    WHOLE,
    Allowed,
    ConfigError,
    ConfigTypeError,
    FiniteFrom0,
    FinitePositive,
    Flag,
    FractionBelow1,
    TooLarge,
    WholeFrom0,
    WholeFrom1,
    WholeFrom1OrUnset,
    check_scheduler_address,
    match_name,
    parse_failures,
    parse_interval,
    parse_model_args,
    short_repr,
    strict_float,
    strict_int,
    to_config_error,
)
from .yamlio import read_yaml

__all__ = [  # the public names, with those of the modules beside this one that callers import from here
    "DATASET_NAMES", "IMAGE_DATASETS", "MODEL_NAMES", "MAX_EPOCHS", "GROUP_TITLES", "RunConfig", "FIELDS",
    "FIELD_GROUPS", "field_group", "field_help", "config_schema", "ConfigError", "ConfigTypeError", "DEFAULT_GPT",
    "DEFAULT_HIDDEN", "GPT_KNOBS", "JITTER_MIN", "MAX_VIRTUAL_WORKERS", "MAX_WHOLE",
    "OPTIMIZER_KNOBS", "OPTIMIZER_LR", "SIM_CHIP_CORES", "SIM_CPU_DEVICES", "SIM_DEFAULT_CPU_DEVICE",
    "SIM_DEFAULT_DEVICE", "SIM_DEVICES", "SIM_FIELDS", "SIM_GPU_DEVICES", "SIM_NETWORKS", "SIM_TIMING_MODELS",
    "check_scheduler_address", "default_lr", "is_text_dataset", "lr_range", "match_name", "parse_failures",
    "parse_interval", "read_yaml", "short_repr",
]

# The algorithms are declared in `workbench.config.registry` (reading it imports no
# algorithm module); `ALGORITHMS` (name -> one-line summary) and `SYNC_ALGORITHMS` are read
# from there on first use (module `__getattr__` below). The datasets are `data.DATASETS`'s
# entries (sizes, image shape, downloaded or not), read without loading any data.

DATASET_NAMES = tuple(DATASETS)
IMAGE_DATASETS = tuple(name for name, info in DATASETS.items() if info.image_shape is not None)
MODEL_NAMES = ("softmax", "mlp", "cnn", "gpt")


def __getattr__(name: str) -> Any:
    if name == "ALGORITHMS":        # name -> one-line summary, in the registry's order
        from .registry import summaries
        return summaries()
    if name == "SYNC_ALGORITHMS":   # a lost worker fails these runs
        from .registry import sync_names
        return sync_names()
    if name in ("GROUP_TITLES", "FIELD_GROUPS", "field_group", "field_help", "config_schema"):
        from . import fields  # the fields' groups and help: read from RunConfig, once it is defined
        return getattr(fields, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


MAX_EPOCHS = 1_000_000   # a run's length in epochs: beyond this the step count is no number a run reaches


# An algorithm knob's own text (what it is), by field name: `read_by` records it when RunConfig
# is defined, and `knob_help` puts the algorithms that read the knob before it each time it is
# shown (`field_help`: --help, the schema, the dashboard's tooltips), so an algorithm
# registered later (`registry.register`, a plug-in) is named there too.
KNOB_TEXTS: dict[str, str] = {}


def read_by(knob: str, text: str) -> str:
    """An algorithm knob's description: the algorithms whose declaration reads it
    (`AlgorithmSpec.knobs`, the one home of that list), then what it is. Records `text` in
    `KNOB_TEXTS`; the description returned names the algorithms registered now (the
    field's static `description`), `knob_help` those registered when it is shown.

    >>> read_by("topology", "the graph.")
    'dpsgd and adpsgd: the graph.'
    """
    if not with_knob(knob):
        raise ValueError(f"{knob}: no algorithm declares it (AlgorithmSpec.knobs)")
    KNOB_TEXTS.setdefault(knob, text)
    return knob_help(knob, text)


def knob_help(knob: str, text: str | None = None) -> str:
    """`text` (default: the knob's recorded `KNOB_TEXTS` entry) after the algorithms the
    registry says read `knob` now, in the registry's order."""
    text = KNOB_TEXTS[knob] if text is None else text
    names = with_knob(knob)
    if not names:   # (every knob of RunConfig is read by a built-in algorithm: read_by checks it)
        return text
    return f"{', '.join(names[:-1])} and {names[-1]}: {text}" if len(names) > 1 else f"{names[0]}: {text}"


class RunConfig(BaseModel):
    """Every knob of a run, with its default and its range.

    Construct with keywords (`RunConfig(algorithm="sync_sgd", cpus=2)`), from YAML
    (`RunConfig.from_yaml(path)`) or from a dict (`RunConfig.from_dict(d)`); unknown keys
    are rejected. `lr` is the base rate for `base_batch` samples; the schedule scales it
    to `batch_size` by `lr_scaling` and warms up to it over `warmup_epochs`.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)

    # --- what to train
    algorithm: str = Field("sgd", json_schema_extra={"group": "what"}, description=(
        "Parallel training algorithm, one of the names `python -m workbench algorithms` lists; "
        "sgd is the single-process reference."))
    dataset: str = Field("digits", json_schema_extra={"group": "what"}, description=(
        "Training data: digits (bundled 8x8 images), mnist1d or synthetic (generated, sized by "
        "n_samples / n_features / n_classes), or mnist, fashion_mnist, cifar10 (downloaded once "
        "with download=true, then cached); for a language model (model gpt) markov_text (generated text "
        "with a known entropy) or a path/to/text.txt (its characters, the end held out); or your own arrays: a "
        "path to an .npz (X_train, y_train, X_test, y_test, or X, y), a pair features.npy,labels.npy, a folder "
        "of such .npy files or a .csv with a label column (docs/models.md); in Python also a "
        "Dataset.from_arrays(...)."))
    model: str = Field("mlp", json_schema_extra={"group": "what"}, description=(
        "Model: softmax (softmax regression), mlp (fully connected, widths from hidden) or cnn "
        "(small convolutional net; image datasets only), or your own as package.module:Name, a class or "
        "factory called with n_features, n_classes and model_args (a model of the protocol or a torch "
        "module; docs/models.md). In Python also the class, factory or instance itself."))
    model_args: dict[str, Any] | None = Field(None, json_schema_extra={"group": "what"}, description=(
        "Keyword arguments of your model's class or factory (model package.module:Name), as a YAML "
        "mapping, JSON ({\"width\": 64}) or key=value pairs separated by commas (width=64,act=tanh)."))
    hidden: list[int] | None = Field(None, json_schema_extra={"group": "what"}, description=(
        "Layer widths as comma-separated positive integers, e.g. 512,256: the MLP's hidden "
        "layers (unset: 128) or the CNN's channels per conv layer (unset: 16,32)."))
    n_samples: Annotated[int, Field(ge=10), WHOLE, Allowed("a whole number >= 10")] = Field(
        10000, json_schema_extra={"group": "what"}, description=(
        "Number of examples generated for the synthetic and mnist1d datasets (>= 10; 20% are "
        "held out for testing). Ignored by the other datasets."))
    n_features: WholeFrom1 = Field(64, json_schema_extra={"group": "what"}, description=(
        "Input width of the synthetic dataset (>= 1). Ignored by the other datasets."))
    n_classes: Annotated[int, Field(ge=2), WHOLE, Allowed("a whole number >= 2")] = Field(
        10, json_schema_extra={"group": "what"}, description=(
        "Number of classes of the synthetic dataset (>= 2). Ignored by the other datasets."))
    test_fraction: Annotated[float, Field(gt=0, lt=1), NUMBER, Allowed("a number in (0, 1)")] = Field(
        0.2, json_schema_extra={"group": "what"}, description=(
        "Share of the examples held out for testing where the data is split here: the generated sets "
        "(mnist1d, synthetic, markov_text), digits, a text file's windows (its end) and a file of yours "
        "holding only X, y (in (0, 1); 0.2). Ignored by datasets with a fixed test set."))
    val_fraction: FractionBelow1 = Field(
        0.0, json_schema_extra={"group": "what"}, description=(
        "Share of the training rows held out as a validation set (in [0, 1); 0 = none): the last rows "
        "of the training split (a text's last training windows), never trained on, scored at every "
        "evaluation (val_loss, val_accuracy). With one, the parameters kept as the best and early_stop "
        "go by the validation loss, so the test set stays out of every choice and its numbers stay an "
        "honest estimate."))
    label_column: str | None = Field(None, json_schema_extra={"group": "what"}, description=(
        "A .csv dataset's label column, by its name (case and spaces ignored when no column has it "
        "exactly); unset: the one column named label, y, target or class, else the last column. Set it "
        "when two columns have such names (x, y, class): such a file is refused until it is. Only for a "
        ".csv dataset."))
    # --- the GPT (model gpt, maths/gpt.py) and text datasets: one block
    n_layers: WholeFrom1 = Field(DEFAULT_GPT["n_layers"], json_schema_extra={"group": "what"}, description=(
        "gpt: transformer blocks (whole number >= 1), each causal self-attention then a GELU MLP."))
    d_model: WholeFrom1 = Field(DEFAULT_GPT["d_model"], json_schema_extra={"group": "what"}, description=(
        "gpt: width of the residual stream (whole number >= 1, a multiple of n_heads); the MLP is 4 d_model wide."))
    n_heads: WholeFrom1 = Field(DEFAULT_GPT["n_heads"], json_schema_extra={"group": "what"}, description=(
        "gpt: attention heads (whole number >= 1 dividing d_model), each of d_model / n_heads dimensions."))
    context: WholeFrom1 = Field(DEFAULT_GPT["context"], json_schema_extra={"group": "what"}, description=(
        "Text datasets (markov_text, a .txt file) and gpt: tokens per sequence (whole number >= 1); each "
        "sequence's next tokens are its labels."))
    data_dir: str | None = Field(None, json_schema_extra={"group": "what"}, description=(
        "Folder where downloaded datasets are cached; unset: $WORKBENCH_DATA if set, else "
        "~/.cache/workbench."))
    standardize: Flag = Field(False, json_schema_extra={"group": "what"}, description=(
        "Shift and scale every feature to mean 0 and standard deviation 1 by the training set's "
        "statistics (the test set by the same ones): for a file of yours whose columns are raw "
        "measurements. The built-in datasets are scaled already. Not for text (token ids)."))
    download: Flag = Field(False, json_schema_extra={"group": "what"}, description=(
        "Allow fetching MNIST, Fashion-MNIST or CIFAR-10 (about 11-163 MB, checksum verified) when "
        "they are not in the cache; without it a missing file is an error."))

    # --- where to train
    cpus: WholeFrom0 = Field(2, json_schema_extra={"group": "where"}, description=(
        "Number of CPU workers (whole number >= 0); each is one Dask worker process. cpus + gpus "
        "is the number of workers P."))
    gpus: Union[int, Literal["auto"]] = Field(0, json_schema_extra={"group": "where"}, description=(
        "Number of GPU workers (whole number >= 0), or auto for one per visible GPU; needs the "
        "gpu extra (CuPy and dask-cuda)."))
    scheduler: str | None = Field(None, json_schema_extra={"group": "where"}, description=(
        "Address tcp://HOST:PORT of an existing Dask scheduler to run on (tls://HOST:PORT with Dask's TLS "
        "settings, distributed.comm.tls.*, in your Dask config); unset: start (or reuse) a local cluster on "
        "127.0.0.1."))
    comm: Literal["auto", "shm", "dask", "nccl"] = Field("auto", json_schema_extra={"group": "where"}, description=(
        "How workers exchange arrays: shm (shared memory, one host), dask (through Dask, any "
        "hosts), nccl (GPU workers only), or auto (nccl between GPU-only workers when "
        "available, else shm on one host, else dask)."))
    latency_ms: FiniteFrom0 = Field(0.0, json_schema_extra={"group": "where"}, description=(
        "Network emulator: milliseconds of latency added to every message (>= 0; 0 = off), to "
        "see what a slow network does to each algorithm."))
    bandwidth_gbps: FiniteFrom0 = Field(0.0, json_schema_extra={"group": "where"}, description=(
        "Network emulator: bandwidth cap in gigabits per second (>= 0; 0 = no cap)."))
    elastic: Flag = Field(False, json_schema_extra={"group": "where"}, description=(
        "Synchronous family (sync_sgd and its compressed form, local_sgd, post_local_sgd, diloco): go on when a "
        "worker is lost, and take in workers that join the cluster, at the next step or round (the global batch "
        "re-split over who is there); false: a lost worker fails the run."))
    min_workers: WholeFrom1OrUnset = Field(None, json_schema_extra={"group": "where"}, description=(
        "With elastic: the run fails when fewer workers than this remain (whole number >= 1); unset: 1."))
    blas_threads: WholeFrom1 = Field(1, json_schema_extra={"group": "where"}, description=(
        "BLAS threads each worker computes with (whole number >= 1): 1, one core per worker, makes "
        "1 worker against N a fair comparison whichever way the run starts; more only when every "
        "worker has cores of its own to spare."))

    # --- simulation
    simulate: Flag = Field(False, json_schema_extra={"group": "simulation"}, description=(
        "Run on the simulated cluster: cpus and gpus become counts of virtual workers (1 to 1024 in "
        "total, mixed allowed) that run the real algorithm in this process on a virtual clock; "
        "compute and messages are charged by the device and network models, so times are "
        "virtual seconds and the run is deterministic."))
    device: str | None = Field(None, json_schema_extra={"group": "simulation"}, description=(
        "Simulation: profile of the virtual GPU workers, one of " + ", ".join(SIM_DEVICES) +
        " (k80 is one GK210 die; knl, power8 and xeon make them CPU nodes); unset: v100 when "
        "gpus >= 1."))
    cpu_device: str = Field(SIM_DEFAULT_CPU_DEVICE, json_schema_extra={"group": "simulation"}, description=(
        "Simulation: profile of the virtual CPU workers, one of " + ", ".join(SIM_CPU_DEVICES) +
        " (fixed, named profiles: core is one measured NumPy core, the default), or local: this "
        "machine's core, timed once per machine and model and cached, its numbers written into "
        "the run's summary (the only way wall clock time enters a simulation)."))
    partitions: WholeFrom1OrUnset = Field(None, json_schema_extra={"group": "simulation"}, description=(
        "Simulation: split one many-core chip (cpu_device " + ", ".join(SIM_CHIP_CORES) + ") into this many "
        "partitions, each a virtual CPU worker holding its own replica on its share of the cores, "
        "exchanging through the chip's memory (You et al. SC'17 split one KNL into 1, 4, 8 and 16); "
        "cpus must equal it. Unset: each CPU worker is a whole node."))
    calibration: str | None = Field(None, json_schema_extra={"group": "simulation"}, description=(
        "Simulation with cpu_device local: a calibration file to use instead of timing this "
        "machine (the JSON a local run caches, or that run's summary.json), so a run replays "
        "bitwise; it must be of this machine and this model. Unset: this machine's cached one."))
    network: str | None = Field(None, json_schema_extra={"group": "simulation"}, description=(
        "Simulation: network model between the virtual workers, one of " + ", ".join(SIM_NETWORKS) +
        " (case, spaces and dashes ignored); unset: shm between CPU workers of this host, else "
        "InfiniBand HDR."))
    timing_model: str | None = Field(None, json_schema_extra={"group": "simulation"}, description=(
        "Simulation: charge compute time as if the model were this published network (" +
        ", ".join(SIM_TIMING_MODELS) + ") while the maths trains the configured model; unset: the "
        "configured model's own FLOPs."))
    jitter: Annotated[float, Field(ge=0, lt=1), NUMBER,
                      AfterValidator(no_vanishing_jitter), Allowed(JITTER_ALLOWED)] = Field(
        0.0, json_schema_extra={"group": "simulation"}, description=(
        "Simulation: seeded stragglers, the coefficient of variation of every compute charge "
        "(0, or >= 1e-06 and < 1; 0 = every step of a device costs the same)."))
    fail_worker: str | None = Field(None, json_schema_extra={"group": "simulation"}, description=(
        "Simulation: kill virtual workers at virtual times, RANK@SECONDS, separated by commas for "
        "several (e.g. 3@12.5,7@40); ranks run from 0 to cpus + gpus - 1."))
    join_worker: str | None = Field(None, json_schema_extra={"group": "simulation"}, description=(
        "Simulation with elastic: virtual workers that join late, RANK@SECONDS, separated by commas (e.g. "
        "3@10); the rank is absent until that virtual second, then joins at the next step or round. Ranks "
        "run from 1 to cpus + gpus - 1 (rank 0 starts the run)."))

    # --- optimisation
    batch_size: WholeFrom1 = Field(32, json_schema_extra={"group": "optimisation"}, description=(
        "GLOBAL minibatch size in examples, summed over all workers (whole number >= 1 and at "
        "least the number of workers); each worker computes its slice."))
    accumulate: WholeFrom1 = Field(1, json_schema_extra={"group": "optimisation"}, description=(
        "Gradient accumulation: each worker computes its slice of a batch in this many micro-batches and "
        "adds up their gradients, weighed by rows (whole number >= 1, at most a worker's rows of a batch; "
        "1 = off). The step is the same as without, to float32 rounding (batch_size, lr scaling and the "
        "trajectory do not change); a pass holds only a micro-batch's activations, so a batch too large "
        "for memory fits (the memory check names the accumulate a run needs). Each micro-batch is a pass "
        "of its own: slower where passes are small (the simulator charges each its launch and weight "
        "reads)."))
    lr: FinitePositive = Field(0.1, json_schema_extra={"group": "optimisation"}, description=(
        "Base learning rate (finite, > 0), tuned for base_batch examples; lr_scaling scales it "
        "to batch_size and warmup ramps up to that scaled rate. Unset: the default of the algorithm "
        "and the optimizer, one that learns the default dataset (sgd 0.1, adamw 0.003, lamb 0.003, "
        "lars 3; diloco's inner steps 0.01, 0.001, 0.001 and 0.01)."))
    lr_scaling: Literal["none", "linear", "sqrt"] = Field(
        "none", json_schema_extra={"group": "optimisation"}, description=(
        "How the learning rate grows with the batch: none (lr as given), linear "
        "(lr * batch_size / base_batch, Goyal et al.) or sqrt (lr * sqrt(batch_size / base_batch))."))
    base_batch: WholeFrom1 = Field(32, json_schema_extra={"group": "optimisation"}, description=(
        "Batch size (whole number >= 1) that lr was tuned for; the reference of lr_scaling."))
    warmup: Literal["none", "gradual", "constant"] = Field(
        "none", json_schema_extra={"group": "optimisation"}, description=(
        "Learning-rate warmup: none, gradual (rise linearly from lr to the scaled rate over "
        "warmup_epochs) or constant (lr for warmup_epochs, then jump to the scaled rate)."))
    warmup_epochs: FiniteFrom0 = Field(0.0, json_schema_extra={"group": "optimisation"}, description=(
        "Length of the warmup in epochs (>= 0, may be fractional; > 0 when warmup is not none, "
        "at most epochs)."))
    decay: Literal["none", "step", "cosine"] = Field("none", json_schema_extra={"group": "optimisation"}, description=(
        "Learning-rate decay after warmup: none (constant), step (x0.1 at a third and two thirds "
        "of the steps after warmup) or cosine (half a cosine down to 0, reached one step after the "
        "last: the last step's lr is just above 0)."))
    momentum: FractionBelow1 = Field(0.9, json_schema_extra={"group": "optimisation"}, description=(
        "Heavy-ball momentum coefficient in [0, 1) (0.9 as in Goyal et al.; 0 = plain SGD). "
        "async_msgd keeps it on the server, async_measgd uses it as the workers' delta; "
        "async_sgd and hogwild_sgd apply plain updates and ignore it."))
    nesterov: Flag = Field(False, json_schema_extra={"group": "optimisation"}, description=(
        "Use Nesterov momentum instead of heavy ball."))
    weight_decay: FiniteFrom0 = Field(0.0, json_schema_extra={"group": "optimisation"}, description=(
        "Weight decay coefficient (>= 0; 0 = off): sgd adds weight_decay * params to the gradient "
        "(every parameter); adamw and lamb decay the weights decoupled from the gradient, lars adds it "
        "inside its layer-wise rate; those three leave biases undecayed (papers: lars 5e-4, lamb 0.01)."))
    # --- the optimiser (maths/optim.py): which update rule, and the knobs of each
    optimizer: Literal["sgd", "adamw", "lars", "lamb"] = Field(
        "sgd", json_schema_extra={"group": "optimisation"}, description=(
        "Update rule: sgd (momentum / Nesterov), adamw (Adam with decoupled weight decay), lars "
        "(layer-wise rate trust_coefficient * ||w|| / ||g||, with momentum; You et al. 2017) or lamb "
        "(Adam with the layer-wise ratio ||w|| / ||update||; You et al. 2019). hogwild_sgd and "
        "async_measgd have their own update and take sgd only."))
    beta1: FractionBelow1 = Field(0.9, json_schema_extra={"group": "optimisation"}, description=(
        "adamw, lamb: decay of the first moment (mean of gradients), in [0, 1) (papers: 0.9)."))
    beta2: FractionBelow1 = Field(0.999, json_schema_extra={"group": "optimisation"}, description=(
        "adamw, lamb: decay of the second moment (mean of squared gradients), in [0, 1) (0.999; "
        "LAMB's BERT runs also 0.999)."))
    eps: FinitePositive = Field(1e-8, json_schema_extra={"group": "optimisation"}, description=(
        "adamw, lamb: added to sqrt of the second moment; lars: added to the layer-wise rate's "
        "denominator (finite, > 0; 1e-8; LAMB's BERT runs use 1e-6)."))
    trust_coefficient: FinitePositive = Field(0.001, json_schema_extra={"group": "optimisation"}, description=(
        "lars: trust coefficient eta of the layer-wise rate eta * ||w|| / (||g|| + weight_decay * ||w||), "
        "finite and > 0 (0.001 in You et al.; the global lr is then large, e.g. 2 to 30)."))
    grad_clip: FiniteFrom0 = Field(0.0, json_schema_extra={"group": "optimisation"}, description=(
        "Clip the gradient to this L2 norm before each update (>= 0; 0 = off): g *= c / (||g|| + 1e-6) "
        "when ||g|| > c, as torch.nn.utils.clip_grad_norm_ before optimizer.step(), under any rule. The "
        "norm is that of the gradient the rule applies: sync_sgd's and LTFB's averaged one (as DDP, then "
        "clipping), each worker's own in local steps (local_sgd, diloco's inner steps, the EASGD family, "
        "gossip), each pushed one on async_sgd's server. Not with hogwild_sgd or async_measgd (their "
        "update is their own) or cgdp (it updates chunk by chunk). 1.0 is common for transformers; the "
        "summary counts the clipped updates and gives the gradients' mean and largest norm."))

    # --- algorithm knobs
    tau: WholeFrom1 = Field(1, json_schema_extra={"group": "algorithm"}, description=(
        read_by("tau", "local steps between exchanges (whole number >= 1), for the EASGD family's elastic exchanges "
        "with the centre (1 = every step, as You et al.), local_sgd's and post_local_sgd's parameter averages (H in "
        "Lin et al.), diloco's outer steps (H in Douillard et al.) and dpsgd's gossip with its neighbours.")))
    alpha: Annotated[float | None, Field(gt=0, lt=1), NUMBER,
                     Allowed("a number in (0, 1), or unset for 0.9 / workers")] = Field(
        None, json_schema_extra={"group": "algorithm"}, description=(
        read_by("alpha", "elastic coefficient in (0, 1), how far worker and centre move toward each "
        "other at an exchange; unset: 0.9 / number of workers (the EASGD authors' default).")))
    elastic_sync: Literal["ring", "tree_host", "tree_device", "tree_device_overlap"] = Field(
        "ring", json_schema_extra={"group": "algorithm"}, description=(
        read_by("elastic_sync", "how the elastic exchange travels, SC'17's chain (You et al., Table 3): ring (the "
        "transport's allreduce, the centre on each worker's device), tree_host (a binary-tree reduction with "
        "the centre on the host: every exchange copies the vector to the host and back and the host "
        "updates the centre), tree_device (the tree, the centre kept on the devices), tree_device_overlap "
        "(also the exchange's vector overlapping the next local step). The maths is the same for all four; "
        "the simulator charges each on a cluster network; real transports, and the simulator on this host's "
        "shared memory, run their own collective and overlap nothing.")))
    trainers: WholeFrom1 = Field(2, json_schema_extra={"group": "algorithm"}, description=(
        read_by("trainers", "number of trainers K (whole number >= 1, a divisor of the number of workers); "
        "each trainer spans workers / K workers.")))
    round_size: WholeFrom1 = Field(50, json_schema_extra={"group": "algorithm"}, description=(
        read_by("round_size", "local steps each trainer takes between tournaments (whole number >= 1).")))
    tournament_size: WholeFrom1 = Field(TOURNAMENT_SIZE, json_schema_extra={"group": "algorithm"}, description=(
        read_by("tournament_size", "examples in each trainer's own held-out tournament set (whole number >= 1); "
        "unset: 256, or fewer where a trainer's share of a small dataset holds fewer beside a batch.")))
    trainer_lrs: list[float] | None = Field(None, json_schema_extra={"group": "algorithm"}, description=(
        read_by("trainer_lrs", "one base lr per trainer as comma-separated numbers > 0 (exactly trainers values); "
        "unset: derived from lr and lr_spread.")))
    lr_spread: Annotated[float, Field(ge=1, allow_inf_nan=False), NUMBER,
                         Allowed("a finite number >= 1 (1 means every trainer uses lr)")] = Field(
        1.0, json_schema_extra={"group": "algorithm"}, description=(
        read_by("lr_spread", "spread of the trainers' learning rates (>= 1): trainer k gets "
        "lr * lr_spread**(k - (K-1)/2); 1 = every trainer uses lr.")))
    exchange_state: Flag = Field(False, json_schema_extra={"group": "algorithm"}, description=(
        read_by("exchange_state", "whether the optimiser state (momentum) travels with the weights a trainer adopts.")))
    chunk_layers: Union[int, Literal["auto"]] = Field("auto", json_schema_extra={"group": "algorithm"}, description=(
        read_by("chunk_layers", "layers per update chunk, a whole number >= 1, or auto to choose it by timing "
        "iterations at the start of the run.")))
    weight_return: Literal["chunks", "whole"] = Field("chunks", json_schema_extra={"group": "algorithm"}, description=(
        read_by("weight_return", "how fresh weights go back to the devices: chunks (each chunk's as soon as the host has "
        "updated it, while the devices finish the backward pass; the next forward pass waits only for "
        "the chunk updated last, as Le et al.; on threads, shared memory, the Dask actor and the "
        "simulator) or whole (the whole vector once every chunk is updated: the earlier implementation, "
        "kept for comparison).")))
    split: Literal["equal", "speed"] = Field("equal", json_schema_extra={"group": "algorithm"}, description=(
        read_by("split", "how each global batch is shared out: equal slices, or speed "
        "(slices sized by each worker's measured speed, for mixed CPU/GPU workers).")))
    # communication-efficient training (algorithms/local.py, maths/compress.py): one block
    post_local_epoch: Annotated[float, Field(ge=0, allow_inf_nan=False), NUMBER,
                                Allowed("a finite number >= 0", says_type=True)] = Field(
        1.0, json_schema_extra={"group": "algorithm"}, description=(
        read_by("post_local_epoch", "the epoch (>= 0, may be fractional) from which workers average their "
        "parameters every tau steps; before it they average after every step, as sync_sgd (Lin et al. "
        "switch at the first learning-rate decay).")))
    outer_lr: Annotated[float, Field(gt=0, le=LR_MAX, allow_inf_nan=False), NUMBER,
                        Allowed("a finite number > 0", says_type=True)] = Field(
        0.7, json_schema_extra={"group": "algorithm"}, description=(
        read_by("outer_lr", "learning rate of the outer Nesterov step on the averaged parameter change (finite, > 0; "
        "0.7 as Douillard et al.; 1 with outer_momentum 0 is plain parameter averaging).")))
    outer_momentum: Annotated[float, Field(ge=0, lt=1), NUMBER,
                              Allowed("a number >= 0 and < 1", says_type=True)] = Field(
        0.9, json_schema_extra={"group": "algorithm"}, description=(
        read_by("outer_momentum", "Nesterov momentum of the outer step, in [0, 1) (0.9 as Douillard et al.).")))
    compression: Literal["none", "topk", "randomk", "sign", "qsgd", "powersgd"] = Field(
        "none", json_schema_extra={"group": "algorithm"}, description=(
        read_by("compression", "how each worker compresses its gradient before the exchange: none, topk (the "
        "compression_ratio largest entries, with Deep Gradient Compression's momentum correction), randomk "
        "(compression_ratio of the entries, the same random ones on every worker), sign (scaled signs, "
        "one bit each), qsgd (stochastic quantisation to compression_levels levels) or powersgd (rank "
        "compression_rank approximation of each layer's matrix).")))
    compression_ratio: Annotated[float, Field(gt=0, le=1), NUMBER,
                                 Allowed("a number > 0 and <= 1", says_type=True)] = Field(
        0.01, json_schema_extra={"group": "algorithm"}, description=(
        read_by("compression_ratio", "with compression topk or randomk, the share of the gradient's entries each worker sends, "
        "in (0, 1] (0.01 = 1%; 1 sends everything, exact sync_sgd).")))
    compression_rank: WholeFrom1 = Field(4, json_schema_extra={"group": "algorithm"}, description=(
        read_by("compression_rank", "with compression powersgd, the rank of each layer's approximation (whole number >= 1; at "
        "the layer's smaller dimension or above the approximation is exact).")))
    compression_levels: WholeFrom1 = Field(16, json_schema_extra={"group": "algorithm"}, description=(
        read_by("compression_levels", "with compression qsgd, the quantisation levels s per sign (whole number >= 1; QSGD's "
        "s; 1 keeps only signs and the norm).")))
    topology: Literal["ring", "torus", "exponential", "complete"] = Field(
        "ring", json_schema_extra={"group": "algorithm"}, description=(
        read_by("topology", "the graph workers gossip over: ring (two neighbours), torus (four, on the most square "
        "grid), exponential (ranks 2^k apart, about 2 log2 P) or complete (everyone: synchronous "
        "averaging).")))
    error_feedback: Flag = Field(True, json_schema_extra={"group": "algorithm"}, description=(
        read_by("error_feedback", "with compression, keep what compression dropped in a per-worker memory and add it "
        "to the next gradient (error feedback), or drop it for good (false).")))

    @model_validator(mode="after")
    def _commeff_combinations(self) -> RunConfig:
        check_owned_knobs(self)     # compression, weight_return, elastic_sync: their algorithms' only
        if self.compression == "topk" and self.error_feedback and self.momentum > 0 and self.nesterov \
                and self.optimizer == "sgd":
            raise ConfigError("nesterov", "false with compression topk and error feedback (Deep Gradient "
                              "Compression's momentum correction is heavy ball)", self.nesterov)
        return self

    # --- how long, how often, reproducibility
    epochs: Annotated[float, Field(gt=0, le=MAX_EPOCHS, allow_inf_nan=False), NUMBER,
                      Allowed(f"a finite number > 0 and at most {MAX_EPOCHS:,.0f}")] = Field(
        5.0, json_schema_extra={"group": "length"}, description=(
        "Length of training in passes over the training set (finite, > 0; may be fractional)."))
    steps: WholeFrom1OrUnset = Field(None, json_schema_extra={"group": "length"}, description=(
        "Length of training in global optimiser steps (whole number >= 1); if set, overrides "
        "epochs."))
    eval_every: WholeFrom1OrUnset = Field(None, json_schema_extra={"group": "length"}, description=(
        "Global steps between evaluations on the test set (whole number >= 1); unset: once per "
        "epoch."))
    early_stop: WholeFrom1OrUnset = Field(None, json_schema_extra={"group": "length"}, description=(
        "Stop once this many evaluations in a row have not lowered the validation loss (the test loss "
        "without a validation set: val_fraction) below its best "
        "(whole number >= 1; unset: the whole plan). Rank 0 decides at the evaluation; the workers stop "
        "after their next step (a synchronous run all at the same step, so the run reproduces); the run "
        "completes, its parameters at the best are kept (params_best.npy) and summary['early_stopped'] "
        "says where. Not with ltfb (each trainer is evaluated on its own)."))
    seed: WholeFrom0 = Field(0, json_schema_extra={"group": "length"}, description=(
        "Random seed (whole number >= 0) for initial weights and the minibatch order; the same "
        "seed gives the same data order whatever the number of workers."))
    out: str | None = Field(None, json_schema_extra={"group": "length"}, description=(
        "Run directory to write (summary.json, steps.csv, evals.csv, config.yaml, report.html); "
        "unset: not saved (the CLI picks runs/<algorithm>-<dataset>-<time>)."))
    checkpoint_every: Union[int, str, None] = Field("60s", json_schema_extra={"group": "length"}, description=(
        "With a run directory (out): write a checkpoint (parameters, optimiser and algorithm state, data position, "
        "generator states, records) every this many steps (e.g. 500), or every this much wall-clock time (30s, "
        "5m, 1h), and when the run stops; none: never. `run --resume DIR` continues from the last one."))
    checkpoint_keep: WholeFrom1 = Field(2, json_schema_extra={"group": "length"}, description=(
        "Checkpoints kept in the run directory (whole number >= 1: the newest; older ones are removed)."))
    out_private: Flag = Field(True, json_schema_extra={"group": "length"}, description=(
        "Make the run directory and its files private to you (folder mode 0700, files 0600) whatever "
        "the umask; false: as the umask allows (e.g. to share runs with a group)."))

    # ---------------------------------------------------------------- validation
    def __init__(self, **data: Any):
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise to_config_error(exc, data, type(self).model_fields) from None

    def __setattr__(self, name: str, value: Any) -> None:
        try:
            super().__setattr__(name, value)
        except ValidationError as exc:
            raise to_config_error(exc, {name: value}, type(self).model_fields) from None

    def __getstate__(self) -> dict[Any, Any]:
        # A model given in Python travels with the config wherever it is pickled (the
        # dashboard's simulation process): its code by value unless installed (`usercode`).
        state = super().__getstate__()
        shipped = usercode.shipment(self.model)
        return state if shipped is None else {**state, "_workbench_model": shipped}

    def __setstate__(self, state: dict[Any, Any]) -> None:
        usercode.receive(state.pop("_workbench_model", None))
        super().__setstate__(state)

    @field_validator("algorithm")
    @classmethod
    def _algorithm(cls, v: str) -> str:
        if algorithm_spec(v) is None:
            from .registry import specs
            raise ValueError(f"one of {sorted(specs())}")
        return v

    @field_validator("dataset", mode="before")
    @classmethod
    def _dataset(cls, v: Any) -> str:
        if isinstance(v, Dataset):     # arrays given in Python: saved once by their hash, named by the folder
            return save_arrays(v)
        if isinstance(v, os.PathLike):
            v = os.fspath(v)
        if isinstance(v, str) and v in DATASET_NAMES:
            return v
        if is_text_path(v) or is_data_path(v):   # a file: kept as an absolute path, so every worker reads the same
            parts = [str(Path(p.strip()).expanduser().absolute()) for p in v.split(",")] if is_data_path(v) \
                else [str(Path(v.strip()).expanduser().absolute())]
            return ",".join(parts)
        raise ValueError(f"one of {list(DATASET_NAMES)}, or {NAMED_BY_PATH} (or a Dataset in Python)")

    @field_validator("label_column", mode="before")
    @classmethod
    def _label_column(cls, v: Any) -> Any:
        if v is None:
            return None
        if not isinstance(v, str) or not v.strip() or "\n" in v or "\r" in v or len(v) > 1000:
            raise ConfigError("label_column", "the name of a column of the dataset's .csv file (one line of text), "
                              "or unset", v)
        return v

    @field_validator("model", mode="before")
    @classmethod
    def _model(cls, v: Any) -> str:
        if isinstance(v, str):
            if v in MODEL_NAMES or usercode.is_spec(v):
                return v
            raise ValueError(f"one of {list(MODEL_NAMES)}, or package.module:Name of your own")
        if v is None or isinstance(v, (bool, numbers.Number, list, dict, tuple)):
            raise ValueError(f"one of {list(MODEL_NAMES)}, package.module:Name, or a model class, factory "
                             "or instance")
        try:
            return usercode.spec_of(v)    # a class, a factory or an instance: kept in this process
        except usercode.UserCodeError as exc:
            raise ValueError(exc.allowed) from None

    @field_validator("model_args", mode="before")
    @classmethod
    def _model_args(cls, v: Any) -> Any:
        return parse_model_args(v)

    @field_validator("hidden", mode="before")
    @classmethod
    def _hidden(cls, v: Any) -> Any:
        if v is None or v == "":
            return None
        if isinstance(v, str):  # "512,256" from the CLI or a widget
            v = [p for p in v.replace(" ", "").split(",") if p]
        if isinstance(v, (numbers.Integral, float)) and not isinstance(v, bool):
            v = [v]
        if not isinstance(v, (list, tuple)):
            raise ValueError("comma-separated positive integers")
        widths = [strict_int(w, "comma-separated positive integers") for w in v]
        if not widths or any(w < 1 for w in widths):
            raise ValueError("comma-separated positive integers")
        return widths

    @field_validator("trainer_lrs", mode="before")
    @classmethod
    def _trainer_lrs(cls, v: Any) -> Any:
        if isinstance(v, str):
            v = [p for p in v.replace(" ", "").split(",") if p]
        if v is None:
            return v
        if not isinstance(v, (list, tuple)):
            raise ValueError("comma-separated finite numbers > 0")
        lrs = [strict_float(x, "comma-separated finite numbers > 0") for x in v]
        if not lrs or not all(math.isfinite(x) and x > 0 for x in lrs):
            raise ValueError("comma-separated finite numbers > 0")
        return lrs

    @field_validator("gpus", mode="before")
    @classmethod
    def _gpus(cls, v: Any) -> Any:
        if isinstance(v, str) and v != "auto":
            try:
                v = strict_int(v)
            except TooLarge:
                raise ValueError('a whole number >= 0 (at most 10^15) or "auto"') from None
            except ValueError:
                raise ValueError('a whole number >= 0 or "auto"') from None
        if isinstance(v, (bool, float)) or (isinstance(v, int) and v < 0):
            raise ValueError('a whole number >= 0 or "auto"')
        if isinstance(v, int) and v > MAX_WHOLE:
            raise ValueError('a whole number >= 0 (at most 10^15) or "auto"')
        return v

    @field_validator("scheduler")
    @classmethod
    def _scheduler(cls, v: str | None) -> str | None:
        if v is not None:
            check_scheduler_address(v)
        return v

    @field_validator("device", mode="before")
    @classmethod
    def _device(cls, v: Any) -> str | None:
        return None if v is None else match_name("device", v, SIM_DEVICES)

    @field_validator("cpu_device", mode="before")
    @classmethod
    def _cpu_device(cls, v: Any) -> str:
        allowed = (*SIM_CPU_DEVICES, "local")
        if isinstance(v, str) and v.strip().lower() in SIM_GPU_DEVICES:
            raise ConfigError("cpu_device", "a CPU profile, one of " + ", ".join(allowed) + f" ({v} is a GPU "
                              "profile: ask for GPU workers with gpus and device)", v)
        return match_name("cpu_device", v, allowed)

    @field_validator("network", mode="before")
    @classmethod
    def _network(cls, v: Any) -> str | None:
        return None if v is None else match_name("network", v, SIM_NETWORKS)

    @field_validator("timing_model", mode="before")
    @classmethod
    def _timing_model(cls, v: Any) -> str | None:
        return None if v is None else match_name("timing_model", v, SIM_TIMING_MODELS)

    @field_validator("fail_worker", mode="before")
    @classmethod
    def _fail_worker(cls, v: Any) -> Any:
        if v is None or (isinstance(v, str) and not v.strip()):
            return None
        # one spelling, exact: repr round-trips a float
        return ",".join(f"{rank}@{repr(t).removesuffix('.0')}" for rank, t in parse_failures(v).items())

    @field_validator("join_worker", mode="before")
    @classmethod
    def _join_worker(cls, v: Any) -> Any:
        if v is None or (isinstance(v, str) and not v.strip()):
            return None
        return ",".join(f"{rank}@{repr(t).removesuffix('.0')}" for rank, t in parse_failures(v, "join_worker").items())

    @field_validator("checkpoint_every", mode="before")
    @classmethod
    def _checkpoint_every(cls, v: Any) -> Any:
        every = parse_interval(v)
        if every is None or isinstance(every, int):
            return every
        return f"{every:g}s"   # one spelling: seconds

    @field_validator("chunk_layers", mode="before")
    @classmethod
    def _chunk_layers(cls, v: Any) -> Any:
        if isinstance(v, str) and v != "auto":
            try:
                v = strict_int(v)
            except TooLarge:
                raise ValueError('a whole number >= 1 (at most 10^15) or "auto"') from None
            except ValueError:
                raise ValueError('a whole number >= 1 or "auto"') from None
        if isinstance(v, (bool, float)):
            raise ValueError('a whole number >= 1 or "auto"')
        if isinstance(v, int) and v < 1:
            raise ValueError('a whole number >= 1 or "auto"')
        if isinstance(v, int) and v > MAX_WHOLE:
            raise ValueError('a whole number >= 1 (at most 10^15) or "auto"')
        return v

    @model_validator(mode="before")
    @classmethod
    def _simulated_gpus_alone(cls, data: Any) -> Any:
        # In a simulation `gpus=N` alone means N GPU workers: the CPU workers' default (2,
        # this machine's cores in a real run) would add two compute workers nobody asked for.
        if isinstance(data, dict) and "cpus" not in data and str(data.get("simulate")).lower() == "true" \
                and str(data.get("gpus", 0)).strip() not in ("0", "auto", "None", ""):
            data = {**data, "cpus": 0}
        return data

    @model_validator(mode="after")
    def _combinations(self) -> RunConfig:
        if "lr" not in self.model_fields_set:   # unset: the algorithm's and the rule's own (stays unset)
            self.__dict__["lr"] = default_lr(self.algorithm, self.optimizer)
        check_simulation(self)   # first: the virtual cluster's size frames the checks below
        workers = self.n_workers
        spec = algorithm_spec(self.algorithm)
        fixed = spec.workers is not None   # its worker count is its own (sgd: 1)
        if not fixed and workers is not None and workers < 1:
            raise ConfigError("cpus", f"at least 1 worker in total for {self.algorithm} (cpus + gpus)", self.cpus)
        if workers is not None and not fixed and self.batch_size < workers:
            raise ConfigError("batch_size", f"at least the number of workers ({workers})", self.batch_size)
        most = self.most_accumulate
        if most is not None and self.accumulate > most:
            raise ConfigError("accumulate", f"at most a worker's rows of a batch ({most}: batch_size "
                              f"{self.batch_size} over {workers} worker(s)), each micro-batch a row at least",
                              self.accumulate)
        if "tournament_size" not in self.model_fields_set and "tournament_size" in spec.knobs:
            fit = tournament_fit(self)   # unset: LTFB's default, or what a small dataset's trainers can hold out
            self.__dict__["tournament_size"] = TOURNAMENT_SIZE if fit is None else fit   # (stays unset)
        broken = spec.check(self)    # the algorithm's own rules for its knobs (LTFB: its trainers)
        if broken is not None:
            raise ConfigError(*broken)
        if self.trainer_lrs is not None and len(self.trainer_lrs) != self.trainers:
            raise ConfigError("trainer_lrs", f"one lr per trainer ({self.trainers} values)", self.trainer_lrs)
        if self.label_column is not None and not self.dataset.strip().lower().endswith(".csv"):
            raise ConfigError("label_column", f"unset unless the dataset is a .csv file (the label column is a "
                              f"table's; {self.dataset} has none)", self.label_column)
        builtin = self.model in MODEL_NAMES
        if self.hidden is not None and not builtin:
            raise ConfigError("hidden", "unset with a model of your own (its sizes go in model_args)", self.hidden)
        if self.model_args is not None and builtin:
            raise ConfigError("model_args", f"unset with the built-in {self.model} (its sizes are hidden), or a "
                              "model package.module:Name", self.model_args)
        if self.model == "cnn" and self.data_shape.image_shape is None:
            raise ConfigError("model", f"cnn only with an image dataset ({', '.join(IMAGE_DATASETS)})", self.model)
        check_language_model(self)
        if self.warmup != "none" and self.warmup_epochs <= 0:
            raise ConfigError("warmup_epochs", f"> 0 when warmup is {self.warmup!r}", self.warmup_epochs)
        if self.steps is None and self.warmup_epochs > self.epochs:
            raise ConfigError("warmup_epochs", f"at most epochs ({self.epochs:g})", self.warmup_epochs)
        if self.comm == "nccl" and not fixed and (self.cpus > 0 or self.gpus == 0):
            raise ConfigError("comm", "nccl only when every worker is a GPU (gpus >= 1 or auto, cpus 0); "
                              "auto, shm or dask for CPU workers", self.comm)
        check_optimizer(self)
        if self.val_fraction:   # a validation set of whole rows, leaving training rows
            shape = self.data_shape
            n = shape.n_train + shape.n_val
            if shape.n_val < 1:   # (a share below 1 always leaves a training row)
                raise ConfigError("val_fraction", f"0, or at least 1/{n:,} = {1 / n:.3g}, so that at least one of the "
                                  f"{n:,} training rows is held out", self.val_fraction)
        check_scaled_lr(self, spec.peak_lr(self))
        check_elastic(self, spec)
        return self

    # ---------------------------------------------------------------- helpers
    @property
    def data_shape(self) -> Any:
        """The dataset's `data.Shape` (sizes, width, classes, image shape) from its entry, or a
        file's (a text's, or a data file's from its arrays' headers and labels), with the
        validation rows held out of the training ones (`val_fraction`): the features are not
        loaded."""
        try:
            return dataset_info(self.dataset).shape(self.n_samples, self.n_features, self.n_classes,
                                                    self.test_fraction, context=self.context,
                                                    label_column=self.label_column).held_out(self.val_fraction)
        except DataError as exc:     # what the file holds, in the words the loader uses (its field first)
            err = ConfigError("dataset", "", self.dataset)
            err.field, err.args = str(exc).partition(":")[0], (str(exc),)
            raise err from None

    @property
    def model_hidden(self) -> tuple[int, ...]:
        """`hidden`, or the model's default widths."""
        if self.hidden is not None:
            return tuple(self.hidden)
        return DEFAULT_HIDDEN.get(self.model, DEFAULT_HIDDEN["mlp"])

    @property
    def n_workers(self) -> int | None:
        """Workers the run asks for; None while `gpus="auto"` is unresolved."""
        fixed = algorithm_spec(self.algorithm).workers
        if fixed is not None:
            return fixed
        if self.gpus == "auto":
            return None
        return self.cpus + self.gpus

    @property
    def most_accumulate(self) -> int | None:
        """The largest `accumulate` this config allows: a worker's smallest equal share of a
        batch, so every micro-batch has a row (None while the workers are unknown)."""
        workers = self.n_workers
        return None if workers is None else max(1, self.batch_size // workers)

    @property
    def is_sync(self) -> bool:
        """Whether every worker must reach every step (a lost worker fails the run)."""
        return algorithm_spec(self.algorithm).sync

    @property
    def resolved_device(self) -> str | None:
        """The virtual GPU workers' profile: `device`, or v100 when simulating GPU workers."""
        if self.device is not None or not self.simulate or not self.gpus:
            return self.device
        return SIM_DEFAULT_DEVICE

    @property
    def failures(self) -> dict[int, float]:
        """`fail_worker` as {rank: virtual seconds at which that worker dies}; {} when unset."""
        return {} if self.fail_worker is None else parse_failures(self.fail_worker)

    @property
    def joins(self) -> dict[int, float]:
        """`join_worker` as {rank: virtual seconds at which that worker joins}; {} when unset."""
        return {} if self.join_worker is None else parse_failures(self.join_worker, "join_worker")

    @property
    def checkpoint_interval(self) -> int | float | None:
        """`checkpoint_every` as steps (int), wall-clock seconds (float) or None (off)."""
        return parse_interval(self.checkpoint_every)

    def resolved_alpha(self, workers: int) -> float:
        """The elastic coefficient: `alpha`, or 0.9 / workers (the EASGD authors' default)."""
        return self.alpha if self.alpha is not None else 0.9 / workers

    def replace(self, **changes: Any) -> RunConfig:
        """A validated copy with some fields changed (the original is untouched). An lr left
        unset stays unset: the copy's is its own algorithm's and rule's default (a copy with
        `algorithm="diloco"` or `optimizer="lamb"` takes theirs, not the original's). The copy's
        set fields (`model_fields_set`) are the original's and the changed ones.

        >>> sorted(RunConfig(epochs=2).replace(out="runs/x").model_fields_set)
        ['epochs', 'out']
        """
        fields = self.to_dict()
        for unset in ("lr", "tournament_size"):   # (each the copy's own default, `_combinations`)
            if unset not in self.model_fields_set:
                fields.pop(unset)
        copy = RunConfig(**{**fields, **changes})
        # what was set stays set, and only that: a field left at its default is not "given"
        # because it was copied (`cli.fixed_workers_note` reads which fields a user gave)
        object.__setattr__(copy, "__pydantic_fields_set__", set(self.model_fields_set) | set(changes))
        return copy

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of every field (JSON/YAML safe)."""
        return self.model_dump(mode="json")

    def to_yaml(self, path: str | Path | None = None) -> str:
        """YAML text of every field; also written to `path` if given."""
        text = yaml.safe_dump(self.to_dict(), sort_keys=False)
        if path is not None:
            Path(path).write_text(text)
        return text

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        """Validate a dict (keys may use dashes, as CLI flags do)."""
        if not isinstance(data, dict):
            raise ConfigTypeError("config", "a RunConfig or a mapping of field names to values", data)
        return cls(**{str(k).replace("-", "_"): v for k, v in data.items()})

    @classmethod
    def from_yaml(cls, path: str | Path) -> RunConfig:
        """Read and validate a YAML file of field names."""
        data = read_yaml(path, "config")
        return cls.from_dict({} if data is None else data)


FIELDS: tuple[str, ...] = tuple(RunConfig.model_fields)
