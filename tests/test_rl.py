"""The rl searcher: environment, policy training (seeded, resumable) and planning."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from shardplan.cost.estimator import PlanEstimator, comm_model_for
from shardplan.cost.model import NeuralCostModel
from shardplan.cost.profiles import get_profile
from shardplan.errors import InputError
from shardplan.formats import load_task
from shardplan.search.rl import RLSearcher, load_policy, train_policy
from shardplan.search.rl_env import RANK_FEATURES, PlacementEnv
from shardplan.validate import validate_plan


@pytest.fixture(scope="module")
def estimator(model_path):
    return PlanEstimator(NeuralCostModel.load(model_path), comm_model_for(get_profile("cpu-2c")), "cpu-2c", "test")


@pytest.fixture(scope="module")
def policy(estimator, tmp_path_factory):
    out = tmp_path_factory.mktemp("rl") / "policy.json"
    train_policy(estimator, out, updates=4, tasks_per_update=2, rollouts=2, progress=False, checkpoint_every=2)
    return out


def test_env_masks_full_ranks_and_features_are_scale_free(estimator, task_dict) -> None:
    env = PlacementEnv(load_task(task_dict), estimator)
    feats, mask = env.observe()
    assert feats.shape == (2, len(RANK_FEATURES)) and mask.all()
    env.mem[0] = env.cap  # rank 0 is full
    assert env.observe()[1].tolist() == [False, True]
    bigger = dict(task_dict, batch_size_per_rank=task_dict["batch_size_per_rank"] * 8)
    f2, _ = PlacementEnv(load_task(bigger), estimator).observe()
    assert np.all(np.abs(f2) < 50) and np.all(np.abs(feats) < 50)


def test_rl_plans_are_valid_and_deterministic(estimator, policy, task_dict) -> None:
    task = load_task(task_dict)
    a = RLSearcher(samples=4, policy_path=policy).plan(task, estimator, seed=1)
    b = RLSearcher(samples=4, policy_path=policy).plan(task, estimator, seed=1)
    validate_plan(a)
    assert a.tables == b.tables and a.search["searcher"] == "rl"


def test_training_resumes_to_the_same_policy(estimator, policy, tmp_path) -> None:
    out = tmp_path / "p.json"
    train_policy(estimator, out, updates=2, tasks_per_update=2, rollouts=2, progress=False, checkpoint_every=2)
    train_policy(estimator, out, updates=4, tasks_per_update=2, rollouts=2, progress=False, checkpoint_every=2)
    resumed, _ = load_policy(out)
    straight, meta = load_policy(policy)
    for (k, v), (_, w) in zip(resumed.state_dict().items(), straight.state_dict().items()):
        assert torch.allclose(v, w), k
    assert meta["profile"] == "cpu-2c" and "train-policy" in meta["command"]


def test_a_checkpoint_of_another_run_is_not_resumed(estimator, policy, tmp_path) -> None:
    """A stale checkpoint (another seed, or another cost model) must not leak into a new policy."""
    out = tmp_path / "p.json"
    train_policy(estimator, out, updates=2, tasks_per_update=2, rollouts=2, seed=5, progress=False,
                 checkpoint_every=2)
    train_policy(estimator, out, updates=4, tasks_per_update=2, rollouts=2, progress=False, checkpoint_every=2)
    fresh, _ = load_policy(out)
    straight, _ = load_policy(policy)  # seed 0 from scratch
    for (k, v), (_, w) in zip(fresh.state_dict().items(), straight.state_dict().items()):
        assert torch.allclose(v, w), k


def test_corrupt_or_foreign_policy_is_a_clear_error(policy, tmp_path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InputError, match="not a usable RL policy"):
        load_policy(bad)
    state = json.loads(policy.read_text())
    state["metadata"]["profile"] = "h100"
    (tmp_path / "h100.json").write_text(json.dumps(state))
    with pytest.raises(InputError, match="trained for profile 'h100'"):
        load_policy(tmp_path / "h100.json", "cpu-2c")


def test_split_step_cuts_only_hot_tables(estimator, task_dict) -> None:
    """hot_split_state cuts a table into column blocks only when its predicted cost exceeds the share."""
    from shardplan.search.neuroshard import _initial_state, hot_split_state
    from shardplan.search.placer import Placer

    task = load_task(task_dict)
    placer = Placer(task, estimator)
    start = _initial_state(task)
    assert hot_split_state(task, start, placer, hot_share=100.0) == start  # nothing is that hot
    cut = hot_split_state(task, start, placer, hot_share=1e-6)  # everything is: as many blocks as allowed
    for t, (kind, k) in zip(task.tables, cut):
        most = 1 << (min(t.embedding_dim // 4, task.topology.world_size).bit_length() - 1)  # power of 2
        assert (kind, k) == (("cw", most) if most >= 2 else ("tw", 1))
    env = PlacementEnv(task, estimator, hot_share=1e-6)
    assert len(env.units) > len(PlacementEnv(task, estimator).units)


def test_spread_step_spreads_only_hot_tables_by_rows(estimator, task_dict) -> None:
    """hot_spread_state spreads a hot whole table by rows: row-wise over every rank on one host; over several
    hosts table-row-wise, each table on the host with the least hot cost so far; never a table the task keeps
    off both spreads."""
    from shardplan.search.neuroshard import _initial_state, hot_spread_state
    from shardplan.search.placer import Placer

    task = load_task(task_dict)
    placer = Placer(task, estimator)
    start = _initial_state(task)
    assert hot_spread_state(task, start, placer, hot_share=100.0) == start  # nothing is that hot
    assert hot_spread_state(task, start, placer, hot_share=1e-6) == (("rw", 0),) * 3
    env = PlacementEnv(task, estimator, hot_share=1e-6, spread=True)
    assert env.units == [] and len(env.fixed) == 3  # all spread: nothing left to place

    task_dict["topology"].update(world_size=4, local_world_size=2, memory_per_rank_gb=1.0)
    task_dict["tables"][1]["sharding_types"] = ["table_wise", "column_wise"]
    task = load_task(task_dict)
    placer = Placer(task, estimator)
    costs = placer.table_costs()
    state = hot_spread_state(task, _initial_state(task), placer, hot_share=1e-6)
    assert state[1] == ("tw", 1)  # b may go neither row-wise nor table-row-wise
    # a and c on a host each, the costlier first to host 0
    first, second = (0, 2) if costs[0] >= costs[2] else (2, 0)
    assert state[first] == ("twrw", 0) and state[second] == ("twrw", 1)


def test_env_offers_a_rank_only_where_the_later_units_still_pack(estimator) -> None:
    """A rank with room now is masked if the later units would then fit nowhere; one that breaks the
    packing in hand but allows another is offered, and that packing is the one kept."""
    from shardplan.planning import make_task

    tables = [{"name": f"t{k}", "num_embeddings": 1000, "embedding_dim": 8, "pooling_factor": 1.0} for k in range(4)]
    env = PlacementEnv(make_task(tables, 2), estimator)
    assert len(env.units) == 4
    env.cap, env.need = 1.0, np.array([0.5, 0.5, 0.6, 0.4])
    env.mem, env.packing = np.array([0.5, 0.0]), np.array([0, 0, 1, 1])  # unit 0 is on rank 0
    assert env._safe_ranks(1).tolist() == [True, False]  # on rank 1, 0.6 would fit nowhere
    env.need, env.packing = np.array([0.5, 0.4, 0.5, 0.2]), np.array([0, 1, 1, 0])
    assert env._safe_ranks(1).tolist() == [True, True]  # rank 0 breaks the packing; 0.5 + 0.2 go to rank 1
    env.step_index, env._after = 1, env.rank_ms.copy()
    env.step(0)
    assert env.packing.tolist() == [0, 0, 1, 1]


def test_an_episode_never_strands_a_large_unit_that_comes_late(estimator) -> None:
    """Eight ranks, two cheap tables that each nearly fill a rank, hot small ones placed first: a
    policy that spreads the hot ones over every rank would leave the large ones nowhere (the old
    look-ahead only ran once the units left needed over half the free memory)."""
    from shardplan.planning import make_task

    hot = [{"name": f"hot{k}", "num_embeddings": 20_000, "embedding_dim": 64, "pooling_factor": 40.0}
           for k in range(8)]
    big = [{"name": f"big{k}", "num_embeddings": 2_000_000, "embedding_dim": 16, "pooling_factor": 1.0}
           for k in range(2)]
    env = PlacementEnv(make_task(hot + big, 8, batch_size_per_rank=256), estimator)
    assert {u.table.name for u in env.units[-2:]} == {"big0", "big1"}  # last in cost order
    env.cap = 1.02 * float(env.need.max())
    env.reset()
    while not env.done:  # spread: always the emptiest rank offered
        _, mask = env.observe()
        env.step(int(np.flatnonzero(mask)[np.argmin(env.mem[mask])]))
    assert not env.overflowed and (env.mem <= env.cap).all()


def test_wide_tables_are_a_split_choice_of_their_own_that_never_costs_more(estimator, policy, task_dict,
                                                                             monkeypatch) -> None:
    """Where some table is much wider than a rank's share of the columns, the policy also places units with
    it cut; the two families' best plans are compared polished, so the plan is never dearer than without."""
    from shardplan.search import rl, rl_env
    from shardplan.search.neuroshard import wide_split_state

    task_dict["tables"][2]["embedding_dim"] = 128
    task_dict["topology"].update(world_size=4, local_world_size=4, memory_per_rank_gb=1.0)
    task = load_task(task_dict)
    built = []
    real_init = PlacementEnv.__init__

    def init(self, *a, **kw):
        real_init(self, *a, **kw)
        if not kw.get("spread", False):  # the spread episodes are the next test's
            built.append((kw.get("wide", False), self.state))

    monkeypatch.setattr(PlacementEnv, "__init__", init)
    both = RLSearcher(samples=2, policy_path=policy).plan(task, estimator, seed=0)
    plain, wide = [s for w, s in built if not w], [s for w, s in built if w]
    # one episode a split choice, then, after them, each again with the wide cut where that cuts something
    assert len(plain) == 2 and built[:2] == [(False, p) for p in plain]
    assert wide == [c for c, p in ((wide_split_state(task, p), p) for p in plain) if c != p]
    assert any(w[2] == ("cw", 4) for w in wide)
    for module in (rl_env, rl):  # the episodes' cut and the searcher's test of whether it cuts anything
        monkeypatch.setattr(module, "wide_split_state", lambda task, state: state)
    plain_only = RLSearcher(samples=2, policy_path=policy).plan(task, estimator, seed=0)
    assert both.cost.max_ms <= plain_only.cost.max_ms


def test_hot_tables_spread_by_rows_are_an_episode_kind_that_never_costs_more(estimator, policy, task_dict,
                                                                             monkeypatch) -> None:
    """Where a hot table can go by rows, the policy also places units with the hot tables so spread. Every
    episode kind's best plan is polished before they are compared, so the plan is never dearer than without."""
    from shardplan.search import rl, rl_env

    task_dict["topology"]["memory_per_rank_gb"] = 1.0
    task = load_task(task_dict)
    polished = []
    real_polish = rl.polish

    def counted(*a, **kw):
        polished.append(a[2])
        return real_polish(*a, **kw)

    monkeypatch.setattr(rl, "polish", counted)
    spread = RLSearcher(samples=2, policy_path=policy).plan(task, estimator, seed=0)
    # whole tables, hot tables cut, hot tables spread (no table here is wide)
    assert len(polished) == 3
    assert any(ts.sharding_type == "row_wise" for ts in polished[2])
    monkeypatch.setattr(rl_env, "hot_spread_state", lambda task, state, placer, hot_share: state)
    polished.clear()
    cut_only = RLSearcher(samples=2, policy_path=policy).plan(task, estimator, seed=0)
    assert len(polished) == 2
    assert spread.cost.max_ms <= cut_only.cost.max_ms


def test_a_policy_trains_on_tasks_of_the_kind_its_estimator_prices(tmp_path, monkeypatch) -> None:
    """A row-wise adagrad profile refuses sgd tasks, so its policy's training tasks train with row-wise adagrad
    (and their memory caps are drawn over that optimizer's state as well as the weights)."""
    from shardplan.cost.estimator import load_estimator
    from shardplan.search import rl

    drawn = []
    real = rl.PlacementEnv

    def env(task, estimator, split):
        drawn.append((task.optimizer, task.dtype))
        return real(task, estimator, split)

    monkeypatch.setattr(rl, "PlacementEnv", env)
    est = load_estimator("cpu-2c-nested-rowwise-adagrad")
    train_policy(est, tmp_path / "p.json", updates=1, tasks_per_update=2, rollouts=1, progress=False)
    assert drawn == [("rowwise_adagrad", "fp32")] * 2 and (tmp_path / "p.json").exists()
