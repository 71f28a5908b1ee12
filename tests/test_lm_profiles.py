"""Language models in the simulator: published shapes give published parameter counts,
FLOPs and activations agree with our own GPT, memory is checked against the device."""
from __future__ import annotations

import re

import numpy as np
import pytest

from workbench.config import ConfigError, RunConfig
from workbench.maths.gpt import GPT
from workbench.sim import profiles as P
from workbench.sim import timing_models as TM

# Parameter counts of the released checkpoints (tied GPT-2 heads, untied Llama heads)
PUBLISHED = {"gpt2-124m": 124_439_808, "gpt2-355m": 354_823_168, "tinyllama-1.1b": 1_100_048_384,
             "llama-7b": 6_738_415_616}


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_published_shapes_give_published_counts(name):
    tm = TM.TIMING_MODELS[name]
    assert tm.n_params == PUBLISHED[name] == sum(p for _, p, _ in tm.layers)
    assert tm.tokens == TM.LM_SHAPES[name][0].context and tm.activation_bytes > 0 and tm.source
    # training FLOPs per token: 6 x the weights every token multiplies (all but the lookup tables:
    # GPT-2's position table, whose token table is also its head; Llama's token table) plus the attention
    s = TM.LM_SHAPES[name][0]
    matmul_weights = tm.n_params - (s.vocab if s.llama else s.context) * s.d_model
    per_token = tm.train_flops / tm.tokens
    attention = 3 * 2 * 2 * s.n_layers * s.context * s.d_model
    assert abs(per_token - (6 * matmul_weights + attention)) < 0.002 * per_token   # norms' and biases' few params


def test_gpt2_timing_is_our_gpt_at_that_size():
    ours = GPT(context=1024, vocab=50257, n_layers=12, d_model=768, n_heads=12)
    tm = TM.TIMING_MODELS["gpt2-124m"]
    assert ours.n_params == tm.n_params
    assert ours.flops_per_sample == tm.train_flops
    assert ours.activation_bytes(1) == tm.activation_bytes
    mine = TM.model_flops(GPT(context=16, vocab=7, n_layers=2, d_model=8, n_heads=2))
    assert mine.name == "gpt L2-d8-h2-T16-V7" and mine.n_params == GPT(16, 7, 2, 8, 2).n_params


def test_activation_count_is_what_the_forward_pass_keeps():
    model = GPT(context=6, vocab=5, n_layers=2, d_model=8, n_heads=2)
    X = np.zeros((3, 6), np.int64)
    model.loss_and_grad(model.init(0), X, X)
    ws = model._work[("numpy", (3, 6), "<f4")].arrays
    kept = [k for k in ws if k.startswith(("ln1_", "ln2_", "lnf_")) or k == "logits"
            or re.fullmatch(r"(qkv|att|yatt|u|tanh|g)[0-9]+", k)]
    assert sum(ws[k].size for k in kept) * 4 == model.activation_bytes(3)


def test_memory_check_one_line():
    tm, v100 = TM.TIMING_MODELS["gpt2-355m"], P.DEVICES["v100"]
    P.check_fits(tm, v100, 2, state=2)                      # 2 sequences with Adam: fits 16 GiB
    with pytest.raises(ConfigError, match=r"^timing_model: a model that fits one v100 \(16 GiB\): gpt2-355m needs "
                                          r"[0-9.]+ GiB for 8 sequence\(s\) of 1024 tokens per worker \(weights 1\.3, "
                                          r"gradients 1\.3, optimiser 2\.6, activations [0-9.]+ GiB\); at most 2 "
                                          r"sequence\(s\) a pass fit: a smaller batch_size, more workers or "
                                          r"accumulate 4 \(micro-batches of 2\), got 'gpt2-355m'$"):
        P.check_fits(tm, v100, 8, state=2)
    P.check_fits(tm, v100, 8, state=2, accumulate=4)        # the same 8 sequences in passes of 2 fit
    with pytest.raises(ConfigError, match=r"for 4 sequence\(s\) of 1024 tokens a pass \(a micro-batch of a "
                                          r"worker's 8\) .*; at most 2 sequence\(s\) a pass fit"):
        P.check_fits(tm, v100, 8, state=2, accumulate=2)
    with pytest.raises(ConfigError, match="not even one sequence per worker fits"):
        P.check_fits(TM.TIMING_MODELS["llama-7b"], P.DEVICES["h100"], 1, state=0)
    P.check_fits(TM.TIMING_MODELS["llama-7b"], P.DEVICES["h200"], 1, state=2)      # one sequence, Adam: 136 GiB
    P.check_fits(TM.TIMING_MODELS["resnet50"], v100, 10_000)     # image networks are not checked
    P.check_fits(TM.TIMING_MODELS["llama-7b"], P.DEVICES["core"], 64)   # nor CPU devices


def test_lm_memory_parts():
    tm = TM.TIMING_MODELS["tinyllama-1.1b"]
    m = TM.lm_memory(tm, 3, state=1)
    assert m["weights"] == m["gradients"] == m["optimiser"] == 4 * tm.n_params
    assert m["activations"] == 3 * tm.activation_bytes and m["total"] == sum(v for k, v in m.items() if k != "total")
    assert [TM.state_floats(*a) for a in (("sgd", 0.9), ("sgd", 0.0), ("adamw",), ("lamb",), ("lars",))] == [1, 0, 2, 2, 1]


def test_names_validate_in_config():
    cfg = RunConfig(algorithm="sync_sgd", simulate=True, gpus=4, timing_model="GPT2-124M", device="H200")
    assert cfg.timing_model == "gpt2-124m" and cfg.device == "h200"
    assert RunConfig(simulate=True, gpus=2, algorithm="sync_sgd", timing_model="tinyllama 1.1b").timing_model == \
        "tinyllama-1.1b"


def test_powersgd_on_a_timing_model_is_charged_its_own_matrices():
    """PowerSGD sends each matrix's rows and columns times the rank, so its share of the
    vector depends on the shapes: GPT-2 124M's rank-4 payload (its published tensors:
    1,099,776 bytes of P and the vector layers, 2,589,968 of Q) is 135x smaller than its
    vector, the small GPT's only 9.7x. A run charged as GPT-2 pays GPT-2's two ring
    allreduces, 2 (P-1) (alpha + b / P beta) each (it was charged the small GPT's share of
    GPT-2's vector: 14x the bytes). Within 1%: the packed tail (a few floats) rides along."""
    import workbench as wb
    from workbench.comm.network import NETWORKS
    from workbench.maths.compress import powersgd_bytes
    from workbench.sim.costs import comm_against_sync
    shapes = TM.LM_SHAPES["gpt2-124m"][0].tensor_shapes()
    assert sum(int(np.prod(s)) for s in shapes) == PUBLISHED["gpt2-124m"]
    first, second = powersgd_bytes(list(shapes), 4)
    assert (first, second) == (1_099_776, 2_589_968)
    P_, steps, net = 4, 3, NETWORKS["10GbE"]
    cfg = RunConfig(algorithm="sync_sgd", compression="powersgd", compression_rank=4, model="gpt",
                    dataset="markov_text", n_samples=100, context=16, n_layers=1, d_model=16, n_heads=2,
                    simulate=True, cpus=0, gpus=P_, device="v100", timing_model="gpt2-124m", network="10GbE",
                    batch_size=4, steps=steps, optimizer="adamw", lr=0.003, eval_every=steps)
    result = wb.run(cfg, progress=False)
    ring = sum(2 * (P_ - 1) * (net.alpha + b / P_ * net.beta) for b in (first, second))
    comm = comm_against_sync(result.summary)["comm_s"] / steps
    assert abs(comm - ring) < 0.01 * ring, (comm, ring)


def test_powersgd_own_work_on_gpt2_is_charged_as_counted_by_hand():
    """PowerSGD's products, QR and error feedback (rank 4) on GPT-2 124M's tensors, counted by
    hand: every matrix's smaller side is d = 768. Stored d x k (not transposed): the blocks'
    attention (768 x 2304), its projection (768 x 768) and MLP input (768 x 3072); stored
    transposed (k x 768): the token and position embeddings and the MLP output (3072 x 768).
    Per matrix entry: P = M Q, Q = M^T P, P Q_sum^T and the error's P Q_i^T, 2 r FLOPs each, and
    M - P Q_i^T one: 33 FLOPs; per matrix a reduced QR of 768 x 4, 4 a r^2 - 4/3 r^3. Passes of
    4 bytes per entry: 14 (M read twice, the approximation written and copied into the sum, the
    memory's accumulation, P Q_i^T written, M minus it, the copy into the memory), 18 stored
    transposed (two transposed copies), and 8 per vector entry. On a V100 that is memory-bound:
    8.05 GB at 900 GB/s, 8.9 ms a step, which the simulator did not charge at all."""
    import workbench as wb
    from workbench.maths.compress import powersgd_work
    d, r = 768, 4
    plain = 12 * d * (2304 + 768 + 3072)
    transposed = 50257 * d + 1024 * d + 12 * 3072 * d
    vectors = PUBLISHED["gpt2-124m"] - plain - transposed
    assert vectors == 121_344                              # 25 LayerNorms' gain and bias, the biases
    flops = 33 * (plain + transposed) + (2 + 4 * 12) * (4 * d * r * r - 4 / 3 * r ** 3)
    nbytes = 4 * (14 * plain + 18 * transposed + 8 * vectors)
    got = powersgd_work(list(TM.LM_SHAPES["gpt2-124m"][0].tensor_shapes()), r)
    assert got[0] == pytest.approx(flops, rel=1e-12) and got[1] == pytest.approx(nbytes, rel=1e-12)
    v100 = P.DEVICES["v100"]
    bill = max(flops / (v100.peak_flops * v100.efficiency), nbytes / v100.mem_bw)
    assert bill == pytest.approx(nbytes / 900e9) and bill == pytest.approx(8.94e-3, rel=1e-3)

    def compute_per_step(**changes):
        cfg = RunConfig(algorithm="sync_sgd", model="gpt", dataset="markov_text", n_samples=100, context=16,
                        n_layers=1, d_model=16, n_heads=2, simulate=True, cpus=0, gpus=2, device="v100",
                        timing_model="gpt2-124m", network="10GbE", batch_size=4, steps=3, optimizer="adamw",
                        lr=0.003, eval_every=3, **changes)
        steps = wb.run(cfg, progress=False).steps
        return steps.groupby("step")["compute_s"].max().to_numpy()

    extra = compute_per_step(compression="powersgd", compression_rank=r) - compute_per_step()
    np.testing.assert_allclose(extra, bill, rtol=1e-9)
