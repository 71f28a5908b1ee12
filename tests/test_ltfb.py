"""LTFB: data sets, pairing, the adoption rule, trainers spanning several workers, the
tournament record, stop and divergence, and a run on a real Dask cluster."""
import threading
import time

import numpy as np
import pytest

from workbench.algorithms.ltfb import round_pairs, trainer_data, trainer_lrs
from workbench.comm.roles import TournamentMailbox
from workbench.comm.threads import ThreadServer
from workbench.config import RunConfig
from workbench.data import global_batch
from workbench.execution.engine import run, run_threads
from workbench.maths.optim import SGD, make_plan
from workbench.problem import Problem


def check_adoption_rule(tournaments):
    for row in tournaments.itertuples():
        if row.partner is None or row.partner != row.partner:   # sat out, or the partner had ended
            assert not row.adopted
        else:
            assert row.adopted == (row.partner_score > row.own_score), row


# ------------------------------------------------------------------------------ pure parts
@pytest.mark.parametrize("trainers", [1, 2, 3, 4])
def test_trainer_sets_are_disjoint_and_sized(trainers):
    n, size = 1437, 100
    sets = trainer_data(n, trainers, size, seed=5)
    everything = np.concatenate([np.concatenate(s) for s in sets])
    assert len(np.unique(everything)) == len(everything)          # 2K pairwise disjoint sets
    assert everything.min() >= 0 and everything.max() < n
    assert {len(train) for train, _ in sets} == {n // trainers - size}
    assert all(len(tour) == size for _, tour in sets)
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(sets, trainer_data(n, trainers, size, seed=5)))


def test_round_pairs_cover_every_trainer_once_but_the_odd_one():
    for K in (2, 3, 4, 7):
        for rnd in range(1, 20):
            ids = [i for pair in round_pairs(0, rnd, K) for i in pair]
            assert len(ids) == len(set(ids)) == K - K % 2
    # the shuffle changes from round to round
    assert len({tuple(round_pairs(0, r, 4)) for r in range(1, 20)}) > 1


def test_trainer_lrs_spread_geometrically_around_lr():
    lrs = trainer_lrs(RunConfig(algorithm="ltfb", cpus=3, trainers=3, lr=0.1, lr_spread=2.0))
    np.testing.assert_allclose(lrs, [0.05, 0.1, 0.2])
    assert trainer_lrs(RunConfig(algorithm="ltfb", cpus=2, trainer_lrs=[0.3, 0.01])) == [0.3, 0.01]


def test_server_collect_waits_for_the_partner_or_its_departure():
    server = ThreadServer(TournamentMailbox())
    got = []
    waiter = threading.Thread(target=lambda: got.append(server.collect(1, 0)))
    waiter.start()
    time.sleep(0.05)
    assert got == []
    weights = np.ones(2, np.float32)
    server.deposit(1, 0, weights, None, {"lineage": "t0@r0"})
    waiter.join(timeout=2)
    assert got == [(weights, None, {"lineage": "t0@r0"})]
    server.depart(1)
    assert server.collect(1, 1) is None                            # ended: nothing to wait for


# ------------------------------------------------------------------------------ runs
def test_reaches_90_percent_on_digits_with_two_trainers(tiny):
    got = run_threads(tiny(algorithm="ltfb", cpus=2, trainers=2, epochs=10, lr=0.1, round_size=10))
    assert got.status == "completed"
    assert got.summary["best_trainer_accuracy"] >= 0.90
    assert got.summary["final_test_accuracy"] == got.summary["best_trainer_accuracy"]
    assert set(got.evals["worker"]) == {"trainer-0", "trainer-1"}
    assert got.summary["total_steps_planned"] == got.summary["steps"]     # in the trainers' steps
    check_adoption_rule(got.tournaments)


def test_different_lrs_make_the_tournament_adopt_and_the_record_holds(tiny):
    cfg = tiny(algorithm="ltfb", cpus=3, trainers=3, epochs=6, momentum=0.0, round_size=8, trainer_lrs=[0.005, 0.1, 0.4])
    got = run_threads(cfg)
    t = got.tournaments
    rounds = got.summary["steps"] // cfg.round_size
    assert len(t) == 3 * rounds                                    # one row per trainer per round
    check_adoption_rule(t)
    assert t["adopted"].any()
    # the weak lr loses: at the end no trainer holds the model that started with 0.005
    assert 0.005 not in set(t[t["round"] == rounds]["lr"])
    # pairing is the shared RNG's, the same on every trainer: partners name each other
    for rnd, rows in t.groupby("round"):
        partner = dict(zip(rows.trainer, rows.partner))
        expected = {a: b for x, y in round_pairs(cfg.seed, rnd, 3) for a, b in ((x, y), (y, x))}
        assert {k: int(p) for k, p in partner.items() if p == p and p is not None} == expected
    # the winner's lineage ends in the winner, and every hop is a recorded adoption
    lineage = got.summary["winner_lineage"]
    assert lineage[-1].startswith(f"t{got.summary['winner']}@")
    for hop in lineage[1:]:
        trainer, rnd = (int(v) for v in hop[1:].split("@r"))
        row = t[(t.trainer == trainer) & (t["round"] == rnd)]
        assert row["adopted"].item()


def test_one_trainer_over_two_workers_is_sync_sgd_on_its_share(tiny):
    # K = 1: no partner ever; the trainer is sync SGD over its training set (D_0 minus T_0)
    cfg = tiny(algorithm="ltfb", cpus=2, trainers=1, steps=30, lr=0.05, momentum=0.9, round_size=10, tournament_size=200)
    got = run_threads(cfg)
    data, model = Problem.from_config(cfg).data, Problem.from_config(cfg).new_model()
    train, _ = trainer_data(data.n_train, 1, cfg.tournament_size, cfg.seed)[0]
    plan = make_plan(cfg, len(train))
    x = model.init(cfg.seed)
    opt = SGD(model.n_params, np, x.dtype, momentum=0.9)
    for t in range(30):
        idx = train[global_batch(len(train), cfg.batch_size, cfg.seed, t)]
        _, g = model.loss_and_grad(x, data.X_train[idx], data.y_train[idx])
        opt.step(x, g, plan.schedule(t))
    np.testing.assert_allclose(got.params, x, rtol=0, atol=1e-5)
    assert got.tournaments["partner"].isna().all() and not got.tournaments["adopted"].any()


def test_trainers_of_two_workers_follow_trainers_of_one(tiny):
    # the same maths whatever a trainer's worker count: adopted weights and (with
    # exchange_state) momentum reach every worker of the trainer
    kw = dict(trainers=2, steps=40, lr=0.05, momentum=0.9, round_size=10, exchange_state=True,
              trainer_lrs=[0.01, 0.1])
    one, two = run_threads(tiny(algorithm="ltfb", cpus=2, **kw)), run_threads(tiny(algorithm="ltfb", cpus=4, **kw))
    key = ["round", "trainer"]
    a, b = one.tournaments.sort_values(key), two.tournaments.sort_values(key)
    assert a["adopted"].any()
    assert a["adopted"].tolist() == b["adopted"].tolist()
    np.testing.assert_allclose(one.params, two.params, rtol=0, atol=1e-4)


def test_stop_request_ends_every_trainer(tiny):
    t0 = time.time()
    got = run_threads(tiny(algorithm="ltfb", cpus=3, trainers=3, epochs=400, round_size=5), should_stop=lambda: time.time() - t0 > 0.4)
    assert got.status == "stopped"
    assert time.time() - t0 < 60          # a hang guard, not a timing claim
    assert got.summary["winner_lineage"]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_a_diverging_trainer_ends_the_run_as_diverged(tiny):
    got = run_threads(tiny(algorithm="ltfb", cpus=2, trainers=2, epochs=20, momentum=0.0, round_size=5, trainer_lrs=[0.1, 1e6]))
    assert got.status == "diverged"
    assert any(e["event"] == "diverged" and "trainer 1" in e["message"] for e in got.events)


@pytest.mark.cluster
def test_on_a_dask_cluster(client, tiny):
    got = run(tiny(algorithm="ltfb", cpus=2, trainers=2, epochs=10, lr=0.1, round_size=10, trainer_lrs=[0.02, 0.2]), client)
    assert got.status == "completed"
    assert got.summary["best_trainer_accuracy"] >= 0.90
    assert got.summary["server"] == "actor"                       # the mailbox lives in the actor
    assert len(got.tournaments) == 2 * (got.summary["steps"] // 10)
    check_adoption_rule(got.tournaments)
