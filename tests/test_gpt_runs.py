"""The GPT on markov_text through every algorithm: on threads, on a real Dask cluster and on the
simulated cluster (its lockstep path bitwise the per-worker one); sync_sgd on several workers
is single-process sgd on the same batch; each bad input of issue 46 in one line, before any
worker starts."""
from __future__ import annotations

import json
import math
import re

import pytest

import workbench as wb
from workbench.config import ConfigError, RunConfig
from workbench.execution.engine import execute
from workbench.sim.transport import SimTransport

TINY = dict(dataset="markov_text", model="gpt", n_samples=300, context=16, d_model=16, n_heads=2, n_layers=1,
            batch_size=16, lr=0.003, optimizer="adamw", cpus=2, steps=6, eval_every=3, seed=1)
OWN_UPDATE = {"hogwild_sgd", "async_measgd"}          # their update is their own: plain sgd
ALGORITHMS = list(wb.ALGORITHMS)


def tiny(algorithm: str, **changes) -> RunConfig:
    extra: dict = {"tournament_size": 16, "round_size": 3} if algorithm == "ltfb" else {}
    if algorithm in OWN_UPDATE:
        extra.update(optimizer="sgd", lr=0.05)
    return RunConfig(**{**TINY, "algorithm": algorithm, **extra, **changes})


def finished(r) -> None:
    s = r.summary
    assert s["status"] == "completed", s.get("events")
    assert math.isfinite(s["final_test_loss"]) and 0 <= s["final_test_accuracy"] <= 1


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_algorithm_on_threads(algorithm):
    r = wb.run(tiny(algorithm), cluster="threads")
    finished(r)
    assert r.summary["final_test_loss"] < math.log(16) + 0.3      # near uniform or better after 6 steps


SIM_CASES = {a: {} for a in ALGORITHMS}
SIM_CASES.update({"local_sgd": dict(tau=2), "post_local_sgd": dict(tau=2), "diloco": dict(tau=2),
                  "sync_sgd+powersgd": dict(algorithm="sync_sgd", compression="powersgd", optimizer="sgd", lr=0.05),
                  "sync_sgd+topk": dict(algorithm="sync_sgd", compression="topk", optimizer="sgd", lr=0.05,
                                        momentum=0.0)})
LOCKSTEP = {"sync_sgd", "async_sgd", "async_msgd", "hogwild_sgd", "easgd", "async_easgd", "async_measgd"}


@pytest.mark.parametrize("case", list(SIM_CASES))
def test_every_algorithm_simulated_lockstep_is_the_per_worker_run(case):
    changes = dict(SIM_CASES[case])
    config = tiny(changes.pop("algorithm", case), simulate=True, cpus=4, **changes)
    fast, oracle = SimTransport(), SimTransport(lockstep=False)
    a, b = execute(config, fast), execute(config, oracle)
    finished(a)
    assert oracle.path == "per worker"
    assert fast.path == ("lockstep" if case in LOCKSTEP else "per worker")
    assert a.steps.to_csv() == b.steps.to_csv()
    assert a.evals.equals(b.evals)
    assert (a.params is None) == (b.params is None) and (a.params is None or a.params.tobytes() == b.params.tobytes())


@pytest.mark.parametrize("algorithm", ["sync_sgd", "diloco", "async_easgd", "cgdp"])
def test_on_a_real_dask_cluster(client, algorithm):
    r = wb.run(tiny(algorithm), cluster=client)
    finished(r)
    assert len({w["name"] for w in r.summary["workers"]}) == 2


def test_sync_sgd_on_workers_is_sgd_on_the_global_batch():
    # the design's invariant, on the transformer: 1, 2 and 4 workers follow one trajectory
    ref = wb.run(tiny("sgd", steps=8), cluster="threads")
    for cpus in (2, 4):
        r = wb.run(tiny("sync_sgd", steps=8, cpus=cpus), cluster="threads")
        assert r.summary["final_train_loss"] == pytest.approx(ref.summary["final_train_loss"], rel=1e-5)
        assert r.params is not None and abs(r.params - ref.params).max() < 1e-5


@pytest.mark.parametrize("changes, message", [
    (dict(n_heads=5), r"^n_heads: a divisor of d_model \(16\), so every head gets d_model / n_heads dimensions, got 5$"),
    (dict(dataset="digits"), r"^model: gpt only with a text dataset \(markov_text"),
    (dict(model="mlp"), r"^model: gpt \(or a model of your own\) for the text dataset markov_text"),
    (dict(model="mlp", dataset="digits", n_layers=3), r"^n_layers: only with model gpt \(leave it at 2\), got 3$"),
])
def test_bad_config_one_line(changes, message):
    with pytest.raises(ConfigError, match=message):
        RunConfig(**{**TINY, "algorithm": "sync_sgd", **changes})


# --- a text file as the dataset, and every bad input of the issue, as the CLI says it -------

BAD_FILES = {"empty": (b"", r"dataset: a non-empty text file \(this one has 0 bytes\)"),
             "binary": (b"ab\x00cd" * 10, r"dataset: a text file, not binary \(a NUL byte at offset 2\)"),
             "latin1": (b"caf\xe9 au lait " * 10, r"dataset: UTF-8 text \(byte 3 is not\)"),
             "one_char": (b"z" * 100, r"dataset: a text with at least 2 distinct characters \(a vocabulary of one, 'z', "
                                         r"predicts nothing\)")}


def _cli(capsys, *args: str) -> tuple[int, list[str]]:
    from workbench.apps.cli import main
    code = main(["run", *args])
    err = capsys.readouterr().err.strip().splitlines()
    return code, err


@pytest.mark.parametrize("kind", list(BAD_FILES))
def test_a_bad_text_file_exits_2_in_one_line(tmp_path, capsys, kind):
    data, message = BAD_FILES[kind]
    path = tmp_path / f"{kind}.txt"
    path.write_bytes(data)
    code, err = _cli(capsys, "--algorithm", "sync_sgd", "--model", "gpt", "--dataset", str(path), "--steps", "2",
                     "--out", str(tmp_path / "never"))
    assert code == 2 and len(err) == 1 and re.match(f"^error: {message}, got '.*{kind}.txt'$", err[0]), err
    assert not (tmp_path / "never").exists()


@pytest.mark.parametrize("args, message", [
    (["--dataset", "{text}", "--context", "600"], r"^error: context: at most 499 for '.*corpus.txt' \(its 999 "
                                                   r"characters make one training and one test sequence"),
    (["--dataset", "markov_text", "--n-heads", "5"], r"^error: n_heads: a divisor of d_model \(64\)"),
    (["--dataset", "markov_text", "--simulate", "--gpus", "8", "--timing-model", "llama-7b"],
     r"^error: timing_model: a model that fits one v100 \(16 GiB\): llama-7b needs .* not even one sequence per "
     r"worker fits"),
])
def test_bad_shapes_exit_2_in_one_line(tmp_path, capsys, args, message):
    text = tmp_path / "corpus.txt"
    text.write_text(("abcdefghij" * 100)[:999])
    args = [a.replace("{text}", str(text)) for a in args]
    code, err = _cli(capsys, "--algorithm", "sync_sgd", "--model", "gpt", "--steps", "2", *args,
                     "--out", str(tmp_path / "never"))
    assert code == 2 and len(err) == 1 and re.match(message, err[0]), err


def test_a_text_file_trains_and_says_its_perplexity(tmp_path, capsys):
    text = tmp_path / "corpus.txt"
    text.write_text("the cat sat on the mat. " * 200)
    from workbench.apps.cli import main
    code = main(["run", "--algorithm", "sync_sgd", "--model", "gpt", "--dataset", str(text), "--context", "16",
                 "--d-model", "16", "--n-heads", "2", "--n-layers", "1", "--batch-size", "8", "--steps", "4",
                 "--optimizer", "adamw", "--lr", "0.003", "--cpus", "2", "--no-progress", "--out",
                 str(tmp_path / "run")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert re.search(r"language model: test loss [0-9.]+ nats/token \(perplexity [0-9.]+\), next-token accuracy", out)
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert s["config"]["dataset"] == str(text) and s["language"]["best_loss"] is None
    assert s["language"]["perplexity"] == pytest.approx(math.exp(s["final_test_loss"]))
    assert s["model"]["builtin"] and s["model"]["model_args"] == {"n_layers": 1, "d_model": 16, "n_heads": 2}
