"""Measured refinement, against a stand-in "hardware" whose error from the model is known by construction."""
from dataclasses import replace

import numpy as np
import pytest

from shardplan.cost.estimator import PlanEstimator
from shardplan.domain import Plan, Table, Task, Topology
from shardplan.errors import InputError
from shardplan.search.placer import Placer, Unit
from shardplan.search.refine import measuring_timer, refine
from shardplan.validate import plan_problems
from test_polish import AdditiveModel, NoComm

# The model prices a rank at sum(pooling * cols / 32); the "hardware" runs table HOT this much slower.
HOT, SLOW = "t0", 2.0


def _task() -> Task:
    tables = tuple(Table(f"t{i}", 1000, 32, float(p)) for i, p in enumerate([8, 7, 6, 5, 4, 3, 3, 2, 2, 1, 1, 1]))
    return Task("refine", tables, Topology(2, 2, memory_per_rank_gb=1.0), batch_size_per_rank=1)


def _true_ms(plan: Plan) -> np.ndarray:
    out = np.zeros(plan.task.topology.world_size)
    for ts in plan.tables:
        t = plan.task.table(ts.name)
        for sh in ts.shards:
            out[sh.rank] += t.pooling_factor * sh.num_cols / 32 * (SLOW if ts.name == HOT else 1.0)
    return out


def _balanced_plan(task: Task, est: PlanEstimator) -> Plan:
    placer = Placer(task, est)
    tables = placer.place([Unit(t, 0, t.embedding_dim, 1) for t in task.tables], [], float("inf"))
    return Plan(task=task, tables=tuple(tables), cost=est.estimate(Plan(task=task, tables=tuple(tables))))


def test_refine_moves_work_off_the_rank_the_model_underestimates() -> None:
    task = _task()
    est = PlanEstimator(AdditiveModel(), NoComm(), "cpu-2c", "additive")
    plan = _balanced_plan(task, est)
    predicted = np.array([r.compute_ms for r in plan.cost.per_rank])
    assert predicted.max() / predicted.mean() < 1.05  # balanced by the model ...
    before = _true_ms(plan)
    assert before.max() / before.mean() > 1.10  # ... and not on the hardware
    calls: list[int] = []

    def timer(plans: list[Plan]) -> list[np.ndarray]:
        calls.append(len(plans))
        return [_true_ms(p) for p in plans]

    out = refine(plan, est, timer, iterations=3)
    assert plan_problems(out) == []
    after = _true_ms(out)
    assert after.max() < before.max() * 0.95
    assert after.max() / after.mean() < 1.06
    rec = out.search["refine"]
    assert rec["chosen"] > 0 and rec["candidates"] == len(rec["final_measured_ms"])
    assert calls[-1] == rec["candidates"]  # every plan visited is timed together at the end
    # The factor of the rank holding HOT is above 1 (relative to the plan's geometric mean).
    first = rec["iterations"][0]
    hot_rank = next(ts.shards[0].rank for ts in plan.tables if ts.name == HOT)
    assert first["factor"][hot_rank] > 1.1 and first["factor"][1 - hot_rank] < 0.9
    assert out.cost is not None and out.measured_cost is None


def test_refine_keeps_a_plan_the_hardware_agrees_with() -> None:
    """Timings equal to the model's figures: no factor differs from 1, the polish finds nothing, one timing."""
    task = _task()
    est = PlanEstimator(AdditiveModel(), NoComm(), "cpu-2c", "additive")
    plan = _balanced_plan(task, est)
    calls: list[int] = []

    def timer(plans: list[Plan]) -> list[np.ndarray]:
        calls.append(len(plans))
        return [np.array([r.compute_ms for r in est.estimate(p).per_rank]) for p in plans]

    out = refine(plan, est, timer, iterations=3)
    assert out.tables == plan.tables
    assert calls == [1] and out.search["refine"]["final_measured_ms"] is None


def test_refine_starts_from_the_alternative_measured_fastest() -> None:
    """A runner-up that the hardware likes better than the pick is where the loop starts; both are timed first."""
    task = _task()
    est = PlanEstimator(AdditiveModel(), NoComm(), "cpu-2c", "additive")
    pick = _balanced_plan(task, est)
    # The runner-up: the pick with HOT moved to the other rank, a plan the hardware times differently.
    tables = [replace(ts, shards=tuple(replace(sh, rank=1 - sh.rank) for sh in ts.shards)) if ts.name == HOT else ts
              for ts in pick.tables]
    runner_up = Plan(task=task, tables=tuple(tables), cost=est.estimate(Plan(task=task, tables=tuple(tables))))
    assert plan_problems(runner_up) == [] and _true_ms(runner_up).max() != _true_ms(pick).max()
    timer = lambda plans: [_true_ms(p) for p in plans]  # noqa: E731
    out = refine(pick, est, timer, iterations=1, alternatives=[runner_up, pick])
    rec = out.search["refine"]
    assert rec["alternatives"] == 1 and len(rec["first_measured_ms"]) == 2  # the duplicate pick is dropped
    start = int(np.argmin(rec["first_measured_ms"]))
    first_pick = [pick, runner_up][start]
    assert rec["iterations"][0]["measured_compute_ms"] == [round(float(x), 3) for x in _true_ms(first_pick)]
    assert _true_ms(out).max() <= min(rec["first_measured_ms"]) + 1e-9
    other = Task("other", task.tables[:-1], task.topology, batch_size_per_rank=1)
    with pytest.raises(InputError, match="alternatives"):
        refine(pick, est, timer, alternatives=[Plan(task=other, tables=pick.tables[:-1])])


def test_neuroshard_shortlist_starts_with_its_plan(task_dict, model_path) -> None:
    from shardplan.cost.estimator import load_estimator
    from shardplan.formats import load_task
    from shardplan.search import get_searcher

    task, est = load_task(task_dict), load_estimator("cpu-2c", model_path)
    searcher = get_searcher("neuroshard")
    plans = searcher.plan_shortlist(task, est)
    assert plans[0].tables == searcher.plan(task, est).tables
    assert all(plan_problems(p) == [] for p in plans)
    costs = [p.cost.max_ms for p in plans]
    assert costs == sorted(costs) and len({p.tables for p in plans}) == len(plans)


def test_refine_refuses_bad_settings() -> None:
    task = _task()
    est = PlanEstimator(AdditiveModel(), NoComm(), "cpu-2c", "additive")
    with pytest.raises(InputError, match="iterations"):
        refine(_balanced_plan(task, est), est, lambda ps: [], iterations=0)
    with pytest.raises(InputError, match="GPU"):
        measuring_timer("h100")
    import shardplan

    with pytest.raises(InputError, match="refine"):  # the API's door, before any planning or timing
        shardplan.plan([{"name": "a", "num_embeddings": 100, "embedding_dim": 8, "pooling_factor": 1.0}], 2,
                       refine=-1)


def test_cli_plan_refine_times_real_kernels_and_records_it(tmp_path, task_dict, model_path, capsys) -> None:
    import json

    from shardplan.cli import main
    from shardplan.formats import load_plan

    (tmp_path / "task.json").write_text(json.dumps(task_dict))
    out = tmp_path / "plan.json"
    assert main(["plan", str(tmp_path / "task.json"), "--model", str(model_path), "-o", str(out),
                 "--refine", "1"]) == 0
    assert "refined in" in capsys.readouterr().out
    plan = load_plan(out)
    assert plan_problems(plan) == []
    step = plan.search["refine"]["iterations"][0]
    assert len(step["measured_compute_ms"]) == 2 and all(x > 0 for x in step["measured_compute_ms"])
    with pytest.raises(SystemExit) as e:  # argparse refuses it at the door
        main(["plan", str(tmp_path / "task.json"), "-o", str(tmp_path / "p.json"), "--refine", "-1"])
    assert e.value.code == 2
    assert not (tmp_path / "p.json").exists()
