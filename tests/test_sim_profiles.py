"""The simulator's profiles: roofline maths, published devices and networks, our models' FLOPs,
this machine's calibration, links and names."""
from __future__ import annotations

import math
import subprocess
import sys
import time

import numpy as np
import pytest

from workbench import config
from workbench.analysis.costmodel import NETWORKS, Network
from workbench.config import ConfigError
from workbench.maths.models import make_model
from workbench.sim import calibration as CAL
from workbench.sim import profiles as P
from workbench.sim import timing_models as TM


# ------------------------------------------------------------------ roofline
def test_compute_s_is_the_roofline_of_peak_times_efficiency_and_memory():
    d = P.Device("toy", "gpu", peak_flops=8e12, mem_bw=500e9, efficiency=0.25, step_overhead_s=1e-4, source="x")
    assert d.rate == 2e12
    assert d.compute_s(4e12) == pytest.approx(2.0)                 # compute bound
    assert d.compute_s(4e12, bytes_moved=1e12) == pytest.approx(2.0)
    assert d.compute_s(4e12, bytes_moved=2e12) == pytest.approx(4.0)   # memory bound: 2e12 B / 500 GB/s
    assert d.compute_s(0.0) == 0.0                                 # the overhead is the caller's
    # ridge point: FLOPs per byte where both bounds meet
    ridge = d.rate / d.mem_bw
    assert d.compute_s(ridge * 1e9, 1e9) == pytest.approx(d.compute_s(ridge * 1e9)) == pytest.approx(1e9 / d.mem_bw)


@pytest.mark.parametrize("name", P.DEVICE_NAMES)
def test_every_device_is_complete_and_consistent(name):
    d = P.DEVICES[name]
    assert d.name == name and d.kind == ("gpu" if name in config.SIM_GPU_DEVICES else "cpu")
    assert 0 < d.efficiency <= 1 and d.peak_flops > 0 and d.mem_bw > 0 and 0 <= d.step_overhead_s < 1e-2
    assert any(doc in d.source for doc in ("datasheet", "Intel", "IBM", "measured"))   # the vendor's numbers ...
    assert "assumed" in d.source or "images/s" in d.source or "measured" in d.source                    # ... and where efficiency comes from
    assert d.compute_s(d.rate) == pytest.approx(1.0)


def test_vendor_peaks():
    # vendor datasheets: FP32 FLOP/s and memory bandwidth
    expected = {"k80": (8.73e12 / 2, 480e9 / 2), "p100": (10.6e12, 732e9), "v100": (15.7e12, 900e9),
                "a100": (19.5e12, 1555e9), "h100": (67e12, 3.35e12)}
    for name, (flops, bw) in expected.items():
        assert P.DEVICES[name].peak_flops == pytest.approx(flops, rel=0.01), name
        assert P.DEVICES[name].mem_bw == pytest.approx(bw, rel=0.01), name
    assert P.DEVICES["knl"].peak_flops == pytest.approx(68 * 1.4e9 * 64, rel=0.01)
    assert P.DEVICES["power8"].peak_flops == pytest.approx(20 * 2.86e9 * 16, rel=0.01)


@pytest.mark.parametrize("name, images_per_s", [("k80", 51.9), ("p100", 219), ("v100", 367)])
def test_devices_train_resnet50_at_their_published_speed(name, images_per_s):
    # The oracle: published FP32 ResNet-50 training throughputs (TensorFlow benchmarks 2017 for
    # K80 and P100, NVIDIA DeepLearningExamples for V100); the efficiency is derived from them.
    d, rn50 = P.DEVICES[name], TM.TIMING_MODELS["resnet50"]
    batch = 64
    step = d.step_overhead_s + d.compute_s(batch * rn50.train_flops)
    assert batch / step == pytest.approx(images_per_s, rel=0.02)


@pytest.mark.parametrize("name", ["alexnet", "vgg16", "resnet152", "resnet50"])
@pytest.mark.parametrize("gpu", ["k80", "p100"])
def test_speed_factors_bring_other_networks_to_their_published_speed(name, gpu):
    # TensorFlow benchmarks (2017) on one GPU: charged at the device's ResNet-50 efficiency
    # and the network's speed factor, each comes within 10% (without it VGG-16 is 2.6x slow)
    d, tm = P.DEVICES[gpu], TM.TIMING_MODELS[name]
    published = TM.TF_BENCH_IMAGES_PER_S[name][("k80", "p100").index(gpu)]
    assert 1 / d.compute_s(tm.charged_train_flops) == pytest.approx(published, rel=0.10)
    assert tm.charged_train_flops == tm.train_flops / tm.speed_factor
    if name == "vgg16":
        assert 1 / d.compute_s(tm.train_flops) < published / 2


def test_device_named_ignores_case_and_lists_the_known_ones():
    assert P.device_named("V100") is P.DEVICES["v100"]
    with pytest.raises(ConfigError, match=r"^device: one of k80, p100, v100, a100, h100, h200, core, knl, power8, xeon, got 'tpu'$"):
        P.device_named("tpu")


# ------------------------------------------------------------------ timing models
@pytest.mark.parametrize("name", [n for n in TM.TIMING_MODEL_NAMES if not TM.TIMING_MODELS[n].tokens])   # image nets
def test_layers_add_up_to_the_published_totals(name):
    m = TM.TIMING_MODELS[name]
    assert m.name == name and len(m.layers) >= 6
    assert sum(p for _, p, _ in m.layers) == pytest.approx(m.n_params, rel=0.01)
    assert sum(f for _, _, f in m.layers) == pytest.approx(m.fwd_flops, rel=0.01)
    assert all(p > 0 and f > 0 for _, p, f in m.layers)
    assert m.train_flops == 3 * m.fwd_flops and m.n_bytes == 4 * m.n_params
    assert m.layers[-1][0].startswith("fc")                       # forward order: the classifier last


def test_published_sizes_multiply_adds_counted_twice():
    tm = TM.TIMING_MODELS
    # (params, G multiply-adds per image) as the literature quotes them
    for name, params, gmacs in (("alexnet", 61e6, 0.72), ("vgg16", 138e6, 15.5), ("googlenet", 6.8e6, 1.5),
                                ("resnet50", 25.6e6, 4.1), ("resnet152", 60.2e6, 11.5)):
        assert tm[name].n_params == pytest.approx(params, rel=0.01), name
        assert tm[name].fwd_flops == pytest.approx(2 * gmacs * 1e9, rel=0.02), name


def test_layer_hand_counts():
    alex = dict((n, (p, f)) for n, p, f in TM.TIMING_MODELS["alexnet"].layers)
    assert alex["conv1"] == (11 * 11 * 3 * 96 + 96, 2.0 * 55 * 55 * 96 * 11 * 11 * 3)
    assert alex["conv2"] == (5 * 5 * 48 * 256 + 256, 2.0 * 27 * 27 * 256 * 5 * 5 * 48)     # two groups
    assert alex["fc6"] == (9216 * 4096 + 4096, 2.0 * 9216 * 4096)
    vgg = dict((n, (p, f)) for n, p, f in TM.TIMING_MODELS["vgg16"].layers)
    assert vgg["conv1_1"] == (3 * 3 * 3 * 64 + 64, 2.0 * 224 * 224 * 64 * 27)
    assert vgg["conv5_3"] == (3 * 3 * 512 * 512 + 512, 2.0 * 14 * 14 * 512 * 9 * 512)
    rn = dict((n, (p, f)) for n, p, f in TM.TIMING_MODELS["resnet50"].layers)
    assert rn["stem"] == (7 * 7 * 3 * 64 + 2 * 64, 2.0 * 112 * 112 * 64 * 147)
    assert rn["fc"] == (2048 * 1000 + 1000, 2.0 * 2048 * 1000)
    assert [n for n, _, _ in TM.TIMING_MODELS["resnet152"].layers] == ["stem", "layer1", "layer2", "layer3", "layer4", "fc"]


def test_timing_model_named():
    assert TM.timing_model_named("ResNet-50") is TM.TIMING_MODELS["resnet50"]
    with pytest.raises(ConfigError, match="^timing_model: one of alexnet, vgg16, googlenet, resnet50, resnet152, "
                                          "gpt2-124m, gpt2-355m, tinyllama-1.1b, llama-7b, got"):
        TM.timing_model_named("gpt3")


# ------------------------------------------------------------------ our models
def test_model_flops_mlp_hand_count():
    model = make_model("mlp", 64, 10, hidden=(128,))
    tm = TM.model_flops(model)
    assert tm.name == "mlp 64-128-10"
    assert tm.n_params == 64 * 128 + 128 + 128 * 10 + 10 == model.n_params
    assert tm.fwd_flops == 2 * (64 * 128 + 128 * 10)
    assert tm.layers == (("fc1", 64 * 128 + 128, 2.0 * 64 * 128), ("fc2", 128 * 10 + 10, 2.0 * 128 * 10))
    deep = TM.model_flops(make_model("mlp", 784, 10, hidden=(512, 256)))
    assert deep.n_params == 535_818 and deep.fwd_flops == 2 * (784 * 512 + 512 * 256 + 256 * 10)
    assert len(deep.layers) == 3


def test_model_flops_softmax_and_cnn_hand_counts():
    soft = TM.model_flops(make_model("softmax", 64, 10))
    assert (soft.name, soft.n_params, soft.fwd_flops) == ("softmax 64-10", 650, 1280.0)
    cnn = make_model("cnn", 64, 10, hidden=(16, 32), image_shape=(1, 8, 8))
    tm = TM.model_flops(cnn)
    # conv3x3 pad 1 keeps 8x8, pool -> 4x4, conv2 at 4x4, pool -> 2x2 -> fc from 2*2*32
    assert tm.layers == (("conv1", 9 * 1 * 16 + 16, 2.0 * 9 * 1 * 16 * 8 * 8),
                         ("conv2", 9 * 16 * 32 + 32, 2.0 * 9 * 16 * 32 * 4 * 4),
                         ("fc", 2 * 2 * 32 * 10 + 10, 2.0 * 2 * 2 * 32 * 10))
    assert tm.n_params == cnn.n_params
    odd = make_model("cnn", 3 * 9 * 11, 10, hidden=(4,), image_shape=(3, 9, 11))    # odd sizes round down
    assert TM.model_flops(odd).layers[1][2] == 2.0 * 9 * 4 * 8 * 4 * 5
    assert TM.model_flops(odd).n_params == odd.n_params
    with pytest.raises(TypeError, match="model: a built-in model or one stating flops_per_sample"):
        TM.model_flops(object())


# ------------------------------------------------------------------ this machine
@pytest.fixture(scope="module")
def mlp_batch():
    rng = np.random.default_rng(0)
    model = make_model("mlp", 64, 10, hidden=(256,))
    X = rng.standard_normal((2048, 64)).astype(np.float32)
    y = rng.integers(0, 10, 2048)
    return model, X, y, model.init(0)


def test_local_device_is_calibrated_quickly_and_cached(mlp_batch):
    model, X, y, params = mlp_batch
    CAL._LOCAL.clear()
    t0 = time.perf_counter()
    d = CAL.local_device(model, X, y, params)
    took = time.perf_counter() - t0
    assert took < 30                                     # a hang guard (~0.1-0.5 s on an idle core)
    assert d.name == "local" and d.kind == "cpu" and d.efficiency == 1.0
    assert math.isfinite(d.peak_flops) and 1e8 < d.peak_flops < 1e13          # 0.1 GFLOP/s .. 10 TFLOP/s
    assert math.isfinite(d.mem_bw) and 1e8 < d.mem_bw < 1e13
    assert 0 <= d.step_overhead_s < 0.01
    assert len(d.calibration) >= 2 and "loss_and_grad of mlp 64-256-10" in d.source
    assert CAL.local_device(model, X, y, params) is d      # cached per architecture
    assert model._work == {}                             # the caller's model was not used to time


class _Law:
    """A core whose calls take overhead + FLOPs / rate seconds, with seeded +-3% noise: the
    calibration's timing functions read it instead of the clock, so the fit is checked
    against a known answer on a machine of any load (this machine's own fit is measured
    by `bench --sim-vs-real`, a benchmark, not a test)."""

    def __init__(self, per_sample: float, overhead: float = 150e-6, rate: float = 4e9):
        self.per_sample, self.overhead, self.rate = per_sample, overhead, rate
        self.rng = np.random.default_rng(1)

    def seconds(self, b: int) -> float:
        return self.overhead + b * self.per_sample / self.rate

    def step(self, model, params, X, y, b):
        call = lambda: None
        call.b = b
        return call

    def best(self, fn, repeats):
        return self.seconds(fn.b)

    def timed(self, fn, repeats):
        return self.seconds(fn.b) * (1 + 0.03 * self.rng.uniform(-1, 1, int(repeats)))


def test_local_fit_recovers_a_known_core_and_predicts_an_untimed_batch(mlp_batch, monkeypatch):
    model, X, y, params = mlp_batch
    per_sample = TM.model_flops(model).train_flops
    law = _Law(per_sample)
    monkeypatch.setattr(CAL, "_worker_step", law.step)
    monkeypatch.setattr(CAL, "_best_s", law.best)
    monkeypatch.setattr(CAL, "_timed_calls", law.timed)
    CAL._LOCAL.clear()
    try:
        d = CAL.local_device(model, X, y, params)
    finally:
        CAL._LOCAL.clear()
    sizes = [b for b, _ in d.calibration]
    assert len(sizes) == 3 and sizes[-1] == 4 * sizes[-2] == 16 * sizes[0]   # largest, a quarter, a sixteenth
    assert law.seconds(sizes[-1]) >= CAL.CALIBRATION_TARGET_S > law.seconds(sizes[-1] // 2)
    # the mean of +-3% noise: the fitted line within a few percent of the law it was timed on
    assert d.step_overhead_s == pytest.approx(law.overhead, rel=0.15)
    assert d.peak_flops == pytest.approx(law.rate, rel=0.03)
    untimed = (sizes[-2] + sizes[-1]) // 2
    predicted = d.step_overhead_s + d.compute_s(untimed * per_sample)
    assert predicted == pytest.approx(law.seconds(untimed), rel=0.03)


def test_local_device_at_one_slice_size_charges_what_that_size_took(mlp_batch, monkeypatch):
    # bench --sim-vs-real times the one slice size its runs compute: the device is charged
    # exactly the mean of those calls (one point: no overhead, the rate through it), its
    # spread is theirs, and it is not cached as the machine's calibration
    model, X, y, params = mlp_batch
    CAL._LOCAL.clear()
    cached = CAL.local_device(model, X, y, params)
    seen = []
    real_timed = CAL._timed_calls
    monkeypatch.setattr(CAL, "_timed_calls", lambda fn, repeats: seen.append(real_timed(fn, repeats)) or seen[-1])
    d = CAL.local_device(model, X, y, params, rows=48, repeats=12)
    assert [len(c) for c in seen] == [12] and [b for b, _ in d.calibration] == [48]
    per_sample = TM.model_flops(model).train_flops
    assert d.step_overhead_s == 0.0
    assert d.compute_s(48 * per_sample) == pytest.approx(float(np.mean(seen[0])), rel=1e-12)
    assert d.spread == CAL._spread(seen[0]) and "timed at batch 48:" in d.source and "mean of 12" in d.source
    assert CAL.local_device(model, X, y, params) is cached
    with pytest.raises(ValueError, match="rows: a batch size from 1 to the 2048 rows given, got 0"):
        CAL.local_device(model, X, y, params, rows=0)


def test_the_co_run_helper_computes_one_step_per_call_and_ends_with_its_input(mlp_batch, tmp_path):
    # co_run_device starts each helper's step as its own timed call starts (a synchronous
    # step's workers compute at once): one "done" per batch size sent, and the helper ends
    # when its input closes, not at its time limit
    import os
    import pickle
    model, X, y, params = mlp_batch
    path = tmp_path / "helper.pkl"
    path.write_bytes(pickle.dumps((model, X[:256], y[:256], params)))
    code = f"from workbench.sim.calibration import _co_run_helper; _co_run_helper({str(path)!r})"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    helper = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              env=env, text=True)
    try:
        assert helper.stdout.readline().strip() == "ready"
        for b in (16, 64, 16):
            helper.stdin.write(f"{b}\n")
            helper.stdin.flush()
            assert helper.stdout.readline().strip() == "done"
        helper.stdin.close()
        assert helper.wait(timeout=30) == 0
    finally:
        helper.kill()


def test_local_device_refuses_a_non_numpy_vector(mlp_batch):
    model, X, y, params = mlp_batch
    with pytest.raises(TypeError, match="params: a NumPy vector"):
        CAL.local_device(model, X, y, list(params))


def test_fit_overhead_rate_recovers_a_known_line_and_survives_noise():
    overhead, rate = CAL.fit_overhead_rate([1e6, 4e6, 16e6], [2e-4 + f / 5e9 for f in (1e6, 4e6, 16e6)])
    assert overhead == pytest.approx(2e-4) and rate == pytest.approx(5e9)
    overhead, rate = CAL.fit_overhead_rate([1e6, 2e6, 4e6], [0.9e-3, 2.1e-3, 4.0e-3])   # intercept < 0: through 0
    assert overhead == 0.0 and rate == pytest.approx(1e9, rel=0.05)
    assert CAL.fit_overhead_rate([2e6], [1e-3]) == (0.0, 2e9)
    # slower for less work (noise): no negative rate; of the fits within the bounds, flat (the
    # relative mean sum(1/t) / sum(1/t^2) = 1.2 ms; relative error 0.2) beats the line through
    # the origin (slope sum(f/t) / sum((f/t)^2): relative error 0.53)
    overhead, rate = CAL.fit_overhead_rate([1e6, 2e6], [2e-3, 1e-3])
    assert overhead == pytest.approx(1.2e-3) and 2e6 / rate == pytest.approx(CAL.FLAT_SHARE * 1.2e-3)
    # a small model's timings, flat in the batch (an audit's torch MLP, 2026-12-06): through the
    # origin they were charged 33 us for a batch of 16, 6x under the least time measured; the
    # charge at every batch timed now lies within the timings' range
    flops, times = [8e3, 32e3, 128e3], [0.214e-3, 0.578e-3, 0.232e-3]
    overhead, rate = CAL.fit_overhead_rate(flops, times)
    assert all(min(times) <= overhead + f / rate <= max(times) for f in flops + [16e3])
    # relative errors: a small batch counts as much as a big one
    overhead, rate = CAL.fit_overhead_rate([1e6, 1e7, 1e8], [1.1e-3, 1e-2, 1e-1])
    assert overhead == pytest.approx(1e-4, rel=0.2)


# ------------------------------------------------------------------ links and names
def test_links_are_costmodel_networks_with_their_bandwidths():
    links = P.LINKS
    assert set(links) == {"pcie3", "pcie4", "nvlink1", "nvlink2", "mcdram"}
    assert all(isinstance(n, Network) and n.name == k and n.note for k, n in links.items())
    for name, gbytes in (("pcie3", 12), ("pcie4", 24), ("nvlink1", 35), ("nvlink2", 130), ("mcdram", 450)):
        assert 1 / links[name].beta == pytest.approx(gbytes * 1e9), name
        assert 1e-6 <= links[name].alpha <= 50e-6
    assert 1 / links["pcie3"].beta < 1 / links["pcie4"].beta < 1 / links["nvlink1"].beta < 1 / links["nvlink2"].beta


def test_network_named_covers_costmodel_and_links():
    assert set(P.NETWORK_NAMES) == set(NETWORKS) | set(P.LINKS)
    assert len(P.NETWORK_NAMES) == len(set(P.NETWORK_NAMES))
    for name in P.NETWORK_NAMES:
        assert P.network_named(name).name == name
    assert P.network_named("infiniband-hdr") is NETWORKS["InfiniBand HDR"]
    assert P.network_named("nvlink") is NETWORKS["NVLink"]
    assert P.network_named("PCIe3") is P.LINKS["pcie3"]
    with pytest.raises(ConfigError, match=r"^network: one of shm, 10GbE, .*nvlink2, mcdram, got 'token ring'$"):
        P.network_named("token ring")


def test_config_and_profiles_list_the_same_names():
    assert P.DEVICE_NAMES == tuple(P.DEVICES) == config.SIM_DEVICES
    assert TM.TIMING_MODEL_NAMES == tuple(TM.TIMING_MODELS) == config.SIM_TIMING_MODELS
    assert P.NETWORK_NAMES == config.SIM_NETWORKS
    assert config.SIM_DEFAULT_DEVICE in P.DEVICES


def test_importing_profiles_stays_light():
    code = ("import sys, workbench.sim.profiles as p; "
            "print(sorted(m for m in ('pandas', 'dask', 'distributed', 'plotly', 'cupy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"
