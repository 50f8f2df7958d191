"""Measured refinement, against a stand-in "hardware" whose error from the model is known by construction."""
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


def test_refine_refuses_bad_settings() -> None:
    task = _task()
    est = PlanEstimator(AdditiveModel(), NoComm(), "cpu-2c", "additive")
    with pytest.raises(InputError, match="iterations"):
        refine(_balanced_plan(task, est), est, lambda ps: [], iterations=0)
    with pytest.raises(InputError, match="GPU"):
        measuring_timer("h100")


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
