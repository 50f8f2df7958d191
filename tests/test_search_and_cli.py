"""Planning, evaluation and the CLI, against a small model trained here on real kernel timings."""
import json

import pandas as pd
import pytest

from shardplan.cli import build_parser, main
from shardplan.cost.estimator import PlanEstimator, comm_model_for
from shardplan.cost.model import NeuralCostModel
from shardplan.cost.profiles import get_profile
from shardplan.cost.specs import specs_from_json
from shardplan.domain import Table
from shardplan.errors import InfeasibleError, InputError
from shardplan.formats import load_plan, load_task, task_to_dict
from shardplan.memory import GB, received_bytes, table_bytes
from shardplan.search import get_searcher
from shardplan.validate import plan_problems




@pytest.fixture
def estimator(model_path):
    return PlanEstimator(NeuralCostModel.load(model_path), comm_model_for(get_profile("cpu-2c")), "cpu-2c", "test")


def test_greedy_plans_are_valid_and_deterministic(task_dict, estimator):
    task = load_task(task_dict)
    a = get_searcher("greedy-cost").plan(task, estimator, seed=0)
    b = get_searcher("greedy-cost").plan(task, estimator, seed=0)
    assert plan_problems(a) == [] and a.tables == b.tables
    assert a.cost.kind == "predicted" and len(a.cost.per_rank) == 2
    assert a.search["searcher"] == "greedy-cost"


def test_greedy_splits_a_table_too_big_for_one_rank(task_dict, estimator):
    task_dict["tables"][2]["num_embeddings"] = 60_000  # 60k x 32 x 4 B = 7.3 MB > 5 MB per rank
    task_dict["topology"]["memory_per_rank_gb"] = 0.005
    plan = get_searcher("greedy-cost").plan(load_task(task_dict), estimator)
    assert plan.sharding("c").sharding_type == "row_wise"
    assert plan_problems(plan) == []


def test_infeasible_task_names_the_table(task_dict, estimator):
    task_dict["tables"][2]["num_embeddings"] = 200_000
    task_dict["topology"]["memory_per_rank_gb"] = 0.005
    with pytest.raises(InfeasibleError) as e:
        get_searcher("greedy-cost").plan(load_task(task_dict), estimator)
    assert e.value.field == "tables[2]" and "'c' needs" in e.value.problem  # where it is, and its name


def test_cli_plan_evaluate_measure(tmp_path, task_dict, model_path, capsys):
    (tmp_path / "task.json").write_text(json.dumps(task_dict))
    plan_path, out = tmp_path / "plan.json", tmp_path / "eval.json"
    assert main(["plan", str(tmp_path / "task.json"), "--model", str(model_path), "-o", str(plan_path)]) == 0
    assert main(["evaluate", str(plan_path), "--model", str(model_path), "-o", str(out), "--measure"]) == 0
    printed = capsys.readouterr().out
    assert "meas/pred" in printed and "fwd_meas" in printed
    plan = load_plan(out)
    assert plan.cost.kind == "predicted" and plan.measured_cost.kind == "measured"
    assert all(r.fwd_compute_ms > 0 and r.bwd_compute_ms > 0 for r in plan.measured_cost.per_rank
               if any(s.rank == r.rank for t in plan.tables for s in t.shards))
    assert "measured: FBGEMM cpu TBE" in plan.measured_cost.extra["compute"]
    assert json.loads(out.read_text())["cost"]["max_ms"] == pytest.approx(plan.cost.max_ms, abs=1e-3)
    # The main job plans and measures in one go; with visits the protocol says so.
    run_out = tmp_path / "run.json"
    assert main(["run", str(tmp_path / "task.json"), "--model", str(model_path), "-o", str(run_out),
                 "--visits", "2"]) == 0
    assert "2 visits" in load_plan(run_out).measured_cost.extra["compute"]


@pytest.mark.parametrize("edit, needle", [
    (lambda d: d["tables"][0].__setitem__("embedding_dim", "16"), "tables[0].embedding_dim"),
    (lambda d: d["tables"][0].__setitem__("num_embeddings", -1), "tables[0].num_embeddings"),
    (lambda d: d["topology"].__setitem__("memory_per_rank_gb", 1e-4), "error: tables["),  # a table too large
    (lambda d: d["topology"].__setitem__("memory_per_rank_gb", 1e-6), "topology.memory_per_rank_gb"),  # any
])
def test_cli_bad_task_exits_2_and_writes_nothing(tmp_path, task_dict, model_path, capsys, edit, needle):
    edit(task_dict)
    (tmp_path / "task.json").write_text(json.dumps(task_dict))
    code = main(["plan", str(tmp_path / "task.json"), "--model", str(model_path), "-o", str(tmp_path / "p.json")])
    assert code == 2
    assert needle in capsys.readouterr().err
    assert not (tmp_path / "p.json").exists()


def test_cli_malformed_json_and_invalid_plan(tmp_path, plan_dict, model_path, capsys):
    (tmp_path / "bad.json").write_text("{not json")
    assert main(["evaluate", str(tmp_path / "bad.json"), "-o", str(tmp_path / "o.json")]) == 2
    assert "malformed JSON" in capsys.readouterr().err
    plan_dict["tables"][1]["shards"][1]["row_offset"] = 100
    (tmp_path / "p.json").write_text(json.dumps(plan_dict))
    assert main(["evaluate", str(tmp_path / "p.json"), "--model", str(model_path), "-o", str(tmp_path / "o.json")]) == 2
    assert "overlap" in capsys.readouterr().err
    assert not (tmp_path / "o.json").exists()
    assert main(["validate", str(tmp_path / "p.json")]) == 1


def test_cli_unknown_searcher_and_profile(tmp_path, task_dict, capsys):
    (tmp_path / "task.json").write_text(json.dumps(task_dict))
    assert main(["plan", str(tmp_path / "task.json"), "--searcher", "magic", "-o", str(tmp_path / "p.json")]) == 2
    assert "unknown searcher 'magic'" in capsys.readouterr().err
    assert main(["plan", str(tmp_path / "task.json"), "--profile", "tpu", "-o", str(tmp_path / "p.json")]) == 2
    assert "unknown hardware profile" in capsys.readouterr().err


def test_cli_train_refuses_a_context_of_the_shard_count_alone_before_reading_data(tmp_path, capsys):
    from shardplan.cost.model import CONTEXT_CODE_MODES

    for mode in ("none", "banded"):
        assert main(["train", "--profile", "cpu-2c", "--context-code", mode, "--out", str(tmp_path / "m")]) == 2
        assert "--context-code" in capsys.readouterr().err and not (tmp_path / "m").exists()
    for mode in CONTEXT_CODE_MODES:  # the CLI spells the modes out; it must offer every one
        assert build_parser().parse_args(["train", "--context-code", mode]).context_code == mode


def test_cli_train_refuses_a_huber_delta_that_is_no_positive_residual(capsys):
    assert build_parser().parse_args(["train", "--huber-delta", "0.1"]).huber_delta == 0.1
    for bad in ("0", "-0.1", "tenth"):
        with pytest.raises(SystemExit) as e:
            build_parser().parse_args(["train", "--huber-delta", bad])
        assert e.value.code == 2 and "--huber-delta" in capsys.readouterr().err


def test_cli_train_refuses_a_component_count_outside_one_to_eight(capsys):
    from shardplan.cost.model import MAX_COMPONENTS

    assert build_parser().parse_args(["train", "--components", "2"]).components == 2
    assert build_parser().parse_args(["train"]).components == 1
    for bad in ("0", str(MAX_COMPONENTS + 1), "two"):
        with pytest.raises(SystemExit) as e:
            build_parser().parse_args(["train", "--components", bad])
        assert e.value.code == 2 and "--components" in capsys.readouterr().err


def test_cli_train_refuses_a_start_of_itself_or_of_another_device_before_reading_data(tmp_path, capsys):
    for init in ("cpu-2c-nested-rowwise-adagrad", "h100"):
        argv = ["train", "--profile", "cpu-2c-nested-rowwise-adagrad", "--init", init, "--out", str(tmp_path / "m")]
        assert main(argv) == 2
        assert "error: --init:" in capsys.readouterr().err and not (tmp_path / "m").exists()


@pytest.mark.parametrize("name", ["greedy-cost", "greedy-size", "greedy-dim", "greedy-lookup",
                                  "greedy-size-lookup", "random", "round-robin", "torchrec"])
def test_every_searcher_gives_a_valid_plan(name, task_dict, estimator):
    plan = get_searcher(name).plan(load_task(task_dict), estimator, seed=1)
    assert plan_problems(plan) == []
    assert plan.search["searcher"] == name and plan.cost.kind == "predicted"


@pytest.mark.parametrize("name", ["greedy-size", "greedy-lookup", "random", "round-robin"])
def test_heuristics_split_oversized_tables(name, task_dict, estimator):
    task_dict["tables"][2]["num_embeddings"] = 60_000
    task_dict["topology"]["memory_per_rank_gb"] = 0.005
    plan = get_searcher(name).plan(load_task(task_dict), estimator)
    assert plan.sharding("c").sharding_type == "row_wise" and plan_problems(plan) == []


@pytest.mark.parametrize("name", ["greedy-size", "round-robin", "neuroshard-tw", "neuroshard"])
def test_searchers_leave_room_for_the_received_embeddings(name, estimator):
    """``big`` fits a rank whole only if the rank's received embeddings are forgotten: every searcher
    must cut it (and its plan pass the validator, which counts them)."""
    tables = [{"name": "big", "num_embeddings": 100_000, "embedding_dim": 32, "pooling_factor": 2.0},
              {"name": "small", "num_embeddings": 1_000, "embedding_dim": 64, "pooling_factor": 4.0}]
    task = load_task({"format": "shardplan/task@1", "tables": tables, "batch_size_per_rank": 1024,
                      "topology": {"world_size": 2, "memory_per_rank_gb": 1.0}})
    whole = table_bytes(task, task.table("big"))
    task_dict = task_to_dict(task)
    task_dict["topology"]["memory_per_rank_gb"] = (whole + received_bytes(task) / 2) / GB
    task = load_task(task_dict)
    plan = get_searcher(name).plan(task, estimator)
    assert plan_problems(plan) == []
    assert plan.sharding("big").sharding_type != "table_wise"


def test_a_batch_whose_received_embeddings_fill_a_rank_is_named(task_dict, estimator):
    task_dict["batch_size_per_rank"] = 200_000
    task_dict["topology"]["memory_per_rank_gb"] = 0.01
    for name in ("neuroshard", "greedy-size"):
        with pytest.raises(InfeasibleError,
                           match=r"topology.memory_per_rank_gb: every rank needs .* pooled embeddings"):
            get_searcher(name).plan(load_task(task_dict), estimator)


def test_lpt_balances_lookup_cost(estimator):
    task = load_task({"format": "shardplan/task@1", "topology": {"world_size": 2}, "tables": [
        {"name": n, "num_embeddings": 100, "embedding_dim": d, "pooling_factor": 1.0}
        for n, d in (("a", 64), ("b", 32), ("c", 32), ("d", 8), ("e", 8))]})
    plan = get_searcher("greedy-dim").plan(task, estimator)
    ranks = {t.name: t.shards[0].rank for t in plan.tables}
    # LPT by dim: a=64 alone on one rank, b+c (64) on the other, then d and e split.
    assert ranks["b"] == ranks["c"] != ranks["a"] and ranks["d"] != ranks["e"]


def test_torchrec_plan_round_trip(plan_dict):
    from shardplan.search.torchrec_adapter import from_torchrec_plan, to_torchrec_plan

    plan = load_plan(plan_dict)
    tr = to_torchrec_plan(plan)
    ps = tr.plan[""]
    assert ps["a"].sharding_type == "table_wise" and ps["a"].ranks == [0]
    assert ps["c"].sharding_spec.shards[1].shard_offsets == [0, 16]
    assert tuple(from_torchrec_plan(plan.task, ps)) == plan.tables


def test_torchrecs_planner_runs_without_its_dry_run_noise(caplog, estimator):
    """TorchRec's planner warns on every dry run of ours (a data-parallel table has no sharding spec; the
    dense tensors are not materialised; its default storage reservation): the searcher keeps those out
    of the user's output, and only those."""
    import logging
    import warnings

    from torchrec.distributed.planner import EmbeddingShardingPlanner

    from shardplan.search import torchrec_adapter as ta

    task = load_task("data/tasks/unseen-d/unseen-d-23.json")  # TorchRec replicates some of its tables

    def noise(records) -> list[str]:
        return [m for m in map(str, records) if m.startswith(("Sharding spec not found", "There is a known issue"))]

    with caplog.at_level(logging.WARNING), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        EmbeddingShardingPlanner(topology=ta.torchrec_topology(task), batch_size=task.batch_size_per_rank).plan(
            ta.embedding_bag_collection(task), [ta.sharder(task)])
        assert noise(r.msg for r in caplog.records) and any("HeuristicalStorage" in str(w.message) for w in caught)
    caplog.clear()
    with caplog.at_level(logging.WARNING), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plan = get_searcher("torchrec").plan(task, estimator)
        logging.getLogger().warning("Sharding spec not found, said by someone else")  # after the plan: kept
    assert plan.tables and not any("HeuristicalStorage" in str(w.message) for w in caught)
    assert noise(r.msg for r in caplog.records) == ["Sharding spec not found, said by someone else"]
    assert not logging.getLogger().filters  # the filter went with the plan


def test_torchrecs_planner_runs_one_at_a_time(estimator):
    """The quiet planner's warning filters are process-wide, so a second thread's planner run waits for
    the first (REST threads): held here, the lock keeps a planning thread from finishing; released, the
    plan comes and the process's filters are as before."""
    import threading
    import warnings

    from shardplan.search import torchrec_adapter as ta

    task = load_task("data/tasks/cpu-bench/cpu-bench-00.json")
    before, plans = list(warnings.filters), []
    with ta._PLANNER_LOCK:
        worker = threading.Thread(target=lambda: plans.append(get_searcher("torchrec").plan(task, estimator)))
        worker.start()
        worker.join(timeout=1.0)
        assert worker.is_alive() and not plans
    worker.join(timeout=120)
    assert plans and plans[0].tables and warnings.filters == before


@pytest.mark.parametrize("task_path, types", [("data/tasks/gpu-bench/gpu-bench-00.json", None),
                                              ("data/tasks/cpu-bench/cpu-bench-07.json",
                                               ["column_wise", "table_column_wise", "data_parallel"])])
def test_a_plan_goes_to_torchrec_exactly_as_torchrecs_planner_writes_it(task_path, types):
    """TorchRec's planner's own ShardingPlan, read in and written back, is the same ShardingPlan field by field:
    sharding type, kernel, ranks (every rank for a replica), each shard's offsets, sizes and placement (a GPU
    shard names its local device, ``rank:3/cuda:3``), so a plan of ours is what DistributedModelParallel
    expects from TorchRec."""
    from torchrec.distributed.planner import EmbeddingShardingPlanner
    from torchrec.distributed.planner.types import ParameterConstraints

    import shardplan
    from shardplan.search import torchrec_adapter as ta

    task = shardplan.load_task(task_path)
    constraints = {t.name: ParameterConstraints(pooling_factors=[max(t.pooling_factor, 1e-3)], sharding_types=types)
                   for t in task.tables}
    planner = EmbeddingShardingPlanner(topology=ta.torchrec_topology(task), batch_size=task.batch_size_per_rank,
                                       constraints=constraints)
    theirs = planner.plan(ta.embedding_bag_collection(task), [ta.sharder(task)]).plan[""]
    back = shardplan.to_torchrec_plan(shardplan.from_torchrec_plan(task, theirs)).plan[""]

    def fields(ps) -> tuple:
        shards = [(m.shard_offsets, m.shard_sizes, str(m.placement)) for m in ps.sharding_spec.shards] \
            if ps.sharding_spec else None
        # shardplan has one column-wise kind (blocks placed anywhere): it writes TorchRec's table_column_wise
        # only where blocks share a rank, and reads both names as column_wise
        kind = "column_wise" if ps.sharding_type == "table_column_wise" else ps.sharding_type
        return kind, str(ps.compute_kernel), ps.ranks, shards

    assert {name: fields(ps) for name, ps in back.items()} == {name: fields(ps) for name, ps in theirs.items()}
    assert len({ps.sharding_type for ps in theirs.values()}) >= 2  # more than one kind compared
    # the plan of a job on another device than the task's is refused, naming the device it places shards on
    as_dict = shardplan.formats.task_to_dict(task)
    flipped = "cpu" if task.topology.device == "cuda" else "cuda"
    other = shardplan.load_task({**as_dict, "topology": {**as_dict["topology"], "device": flipped}})
    with pytest.raises(InputError, match=rf"^topology.device: is '{other.topology.device}' but the plan places"):
        shardplan.from_torchrec_plan(other, theirs)
    # a table TorchRec offloads to UVM is not priced as the fused kernel in device memory: refused, named
    name = next(n for n, ps in theirs.items() if ps.sharding_type != "data_parallel")
    theirs[name].compute_kernel = "fused_uvm_caching"
    uvm = shardplan.from_torchrec_plan(task, theirs)
    index = [t.name for t in uvm.tables].index(name)
    with pytest.raises(InputError, match=rf"^tables\[{index}\].compute_kernel: table '{name}' runs 'fused_uvm"):
        shardplan.evaluate(uvm, profile="h100" if task.topology.device == "cuda" else "cpu-2c")


def test_a_torchrec_plan_a_trainer_runs_is_read_back_to_be_priced(plan_dict):
    """The public way in: a TorchRec ``ShardingPlan`` (whole, or one module's) of the task's tables becomes a
    validated Plan that evaluate prices; a plan of other tables, or of several modules unnamed, is refused
    naming what differs."""
    from torchrec.distributed.types import ShardingPlan

    import shardplan

    plan = load_plan(plan_dict)
    back = shardplan.from_torchrec_plan(plan.task, shardplan.to_torchrec_plan(plan))
    assert back.tables == plan.tables and back.cost is None
    assert shardplan.evaluate(back).cost.max_ms == pytest.approx(shardplan.evaluate(plan).cost.max_ms)
    module = shardplan.to_torchrec_plan(plan).plan[""]
    assert shardplan.from_torchrec_plan(plan.task, module).tables == plan.tables
    nested = shardplan.to_torchrec_plan(plan, "sparse_arch.embedding_bag_collection")  # a trainer's model path
    assert list(nested.plan) == ["sparse_arch.embedding_bag_collection"]
    assert shardplan.from_torchrec_plan(plan.task, nested).tables == plan.tables
    two = ShardingPlan(plan={"sparse.ebc": module, "other.ebc": module})
    with pytest.raises(InputError, match="module_path"):
        shardplan.from_torchrec_plan(plan.task, two)
    assert shardplan.from_torchrec_plan(plan.task, two, "sparse.ebc").tables == plan.tables
    with pytest.raises(InputError, match="module_path"):
        shardplan.from_torchrec_plan(plan.task, two, "nope")
    fewer = {name: ps for name, ps in module.items() if name != "a"}
    with pytest.raises(InputError, match=r"not in the plan: \['a'\]"):
        shardplan.from_torchrec_plan(plan.task, fewer)
    # a plan that does not tile its table is caught by the validator, as a plan file would be
    module["c"].sharding_spec.shards[1].shard_sizes[1] -= 4
    with pytest.raises(InputError):
        shardplan.from_torchrec_plan(plan.task, module)


def _bigger_task(task_dict):
    task_dict["tables"] += [{"name": f"x{i}", "num_embeddings": 400 * (i + 1), "embedding_dim": 8 * (1 + i % 4),
                             "pooling_factor": 1.0 + 3 * i, "zipf_alpha": 0.1 * i} for i in range(9)]
    task_dict["topology"] = {"world_size": 4, "local_world_size": 2, "memory_per_rank_gb": 0.01}
    return load_task(task_dict)


def test_neuroshard_beam_never_predicts_worse_than_its_table_wise_start(task_dict, estimator):
    task = _bigger_task(task_dict)
    tw = get_searcher("neuroshard-tw").plan(task, estimator)
    beam = get_searcher("neuroshard").plan(task, estimator)
    for p in (tw, beam):
        assert plan_problems(p) == []
        assert all(s.num_cols % 4 == 0 for t in p.tables for s in t.shards)
    assert beam.cost.max_ms <= tw.cost.max_ms + 1e-9
    assert get_searcher("neuroshard").plan(task, estimator).tables == beam.tables  # deterministic


def test_column_blocks_tile_the_dim():
    from shardplan.search.placer import column_blocks

    t = Table("t", 10, 36, 1.0)
    blocks = column_blocks(t, 4)
    assert [c for _, c in blocks] == [12, 8, 8, 8]
    assert [o for o, _ in blocks] == [0, 12, 20, 28]
    with pytest.raises(ValueError, match="at most 2"):
        column_blocks(Table("n", 10, 8, 1.0), 4)  # would leave 0-wide blocks


def test_optuna_tuning_is_no_worse_than_defaults(task_dict, estimator):
    from shardplan.search.tuned import NeuroShardOptuna

    task = _bigger_task(task_dict)
    default = get_searcher("neuroshard").plan(task, estimator)
    tuned = NeuroShardOptuna(time_budget_s=5, n_trials=4).plan(task, estimator)
    assert plan_problems(tuned) == []
    assert tuned.cost.max_ms <= default.cost.max_ms + 1e-9


def test_bench_measures_and_compares_to_torchrec(tmp_path, task_dict, estimator):
    from shardplan.execute.bench import run_bench

    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "a.json").write_text(json.dumps(task_dict))
    task_dict["name"] = "b"
    task_dict["topology"]["memory_per_rank_gb"] = 1e-6  # nobody can plan this one
    (suite / "b.json").write_text(json.dumps(task_dict))
    df = run_bench(suite, ["torchrec", "greedy-dim", "neuroshard-tw"], estimator, "cpu-2c", rounds=2,
                   out_dir=tmp_path / "out", name="t")
    a = df[df.task == "tiny"]
    assert a.valid.all() and (a.measured_ms > 0).all() and (a.imbalance >= 1.0).all()
    for _, row in a.iterrows():  # every rank's compute, measured and predicted; the slowest is the max
        measured, predicted = json.loads(row.measured_rank_compute_ms), json.loads(row.predicted_rank_compute_ms)
        assert len(measured) == len(predicted) == task_dict["topology"]["world_size"]
        assert max(measured) == pytest.approx(row.measured_compute_ms, abs=1e-3)
        comm = json.loads(row.rank_comm_ms)  # the plan's cost rebuilt from the file: slowest compute + comm
        assert max(m + c for m, c in zip(measured, comm)) == pytest.approx(row.measured_ms, abs=1e-2)
    assert not df[df.task == "b"].valid.any()
    md = (tmp_path / "out" / "t.md").read_text()
    assert "geomean_vs_torchrec" in md and "predicted_geomean_vs_torchrec" in md
    assert (tmp_path / "out" / "t.csv").exists()
    assert "Machine state: the reference workload ran" in md  # every results file says how slow the machine ran


def test_bench_on_an_unfit_machine_exits_3_and_writes_no_results(tmp_path, task_dict, model_path, monkeypatch,
                                                                 capsys):
    """A wait for a fit machine that runs out is not bad input (exit 2) but 'try later' (exit 3)."""
    from shardplan.cost import fit_gate
    from shardplan.errors import MachineUnfitError

    def never_fit(profile, max_wait_s, streak=1, carried=0):
        raise MachineUnfitError("machine not fit to measure after waiting 1 min; run the same command again later")

    monkeypatch.setattr(fit_gate.fitness, "wait_until_fit", never_fit)
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "t.json").write_text(json.dumps(task_dict))
    rc = main(["bench", "--suite", str(tmp_path / "suite"), "--searchers", "greedy-size", "--wait-fit", "1",
               "--out", str(tmp_path / "out"), "--model", str(model_path)])
    assert rc == 3 and "run the same command again later" in capsys.readouterr().err
    assert not (tmp_path / "out" / "bench-cpu-2c-suite.md").exists()


def test_bench_drops_a_task_the_machine_was_not_fit_through_and_keeps_the_drop_across_a_resume(
        tmp_path, task_dict, model_path, monkeypatch, capsys):
    """``--fit-after``: a task measured while the machine left its fit state is measured again; a run that
    stops on it (exit 3) keeps the drop for the start that finishes it, and the results name it."""
    from shardplan.cost import fit_gate
    from shardplan.cost.fitness import Fitness

    fit, unfit = Fitness(1.01, 1.2, 1.0), Fitness(0.6, 3.0, 0.8)
    streaks: list[int] = []

    def wait_until_fit(profile, max_wait_s, streak=1, carried=0):
        streaks.append(streak)
        return fit

    afters = iter([unfit, unfit, fit])  # the first start's only measurement, then the second start's two
    monkeypatch.setattr(fit_gate.fitness, "wait_until_fit", wait_until_fit)
    monkeypatch.setattr(fit_gate.fitness, "probe", lambda profile: next(afters))
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "t.json").write_text(json.dumps(task_dict))
    argv = ["bench", "--suite", str(tmp_path / "suite"), "--searchers", "greedy-size", "--wait-fit", "1",
            "--fit-streak", "2", "--fit-after", "--out", str(tmp_path / "out"), "--name", "g", "--model",
            str(model_path)]
    assert main([*argv, "--retakes", "0"]) == 3 and "unfit 1 time(s) in a row" in capsys.readouterr().err
    assert len(json.loads((tmp_path / "out" / "g.dropped.json").read_text())["dropped"]) == 1
    assert main(argv) == 0 and streaks == [2, 2, 2]  # every measurement waited for a spell of two
    md = (tmp_path / "out" / "g.md").read_text()
    assert "Gate: each task started after 2 fit probe(s) in a row, and a probe after it found the host still fit" in md
    assert "2 measurement(s) of 1 task(s) were dropped" in md  # the first start's drop and the second's
    df = pd.read_csv(tmp_path / "out" / "g.csv")
    assert (df.fit_after_label_ratio == 1.01).all() and (df.fit_label_ratio == 1.01).all()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["g.csv", "g.md"]  # nothing left to resume


def test_geomean_against_the_per_task_best_of_a_family():
    """Each task's reference is the lowest of the family there; tasks the searcher skipped drop out."""
    from shardplan.execute.bench import geomean_vs

    df = pd.DataFrame({"task": ["a", "a", "a", "b", "b", "b"],
                       "searcher": ["ours", "g1", "g2", "ours", "g1", "g2"],
                       "measured_ms": [8.0, 10.0, 16.0, 9.0, 12.0, 3.0]})
    out = geomean_vs(df, ("g1", "g2"), label="best").set_index("searcher")
    assert out.loc["ours", "geomean_vs_best"] == pytest.approx((0.8 * 3.0) ** 0.5)
    assert out.loc["g1", "geomean_vs_best"] == pytest.approx((1.0 * 4.0) ** 0.5)
    single = geomean_vs(df.drop(index=3), "g1").set_index("searcher")
    assert single.loc["ours", "tasks_compared"] == 1 and single.loc["ours", "geomean_vs_g1"] == pytest.approx(0.8)


def test_bench_resumes_an_interrupted_run_and_only_with_the_same_settings(tmp_path, task_dict, estimator):
    """Tasks found in the partial file of a run with the same settings are not planned or timed again."""
    from shardplan.execute.bench import run_bench

    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "a.json").write_text(json.dumps(task_dict))
    out = tmp_path / "out"
    out.mkdir()
    done = {"task": task_dict["name"], "tables": 1, "ranks": 2, "searcher": "greedy-dim", "valid": True,
            "error": "", "predicted_ms": 1.0, "plan_seconds": 0.0, "measured_ms": 123.0, "imbalance": 1.0}
    pd.DataFrame([done]).to_csv(out / "t.partial.csv", index=False)
    settings = {"suite": str(suite), "searchers": ["greedy-dim"], "profile": "cpu-2c", "rounds": 1, "seed": 0,
                "model": estimator.compute_name}
    (out / "t.partial.json").write_text(json.dumps(settings))
    df = run_bench(suite, ["greedy-dim"], estimator, "cpu-2c", 1, out, "t")
    assert df.measured_ms.tolist() == [123.0]  # taken from the partial file, not timed
    assert not (out / "t.partial.csv").exists() and not (out / "t.partial.json").exists()
    pd.DataFrame([done]).to_csv(out / "t.partial.csv", index=False)
    (out / "t.partial.json").write_text(json.dumps({**settings, "rounds": 3}))
    df = run_bench(suite, ["greedy-dim"], estimator, "cpu-2c", 1, out, "t")  # other settings: timed afresh
    assert df.measured_ms.tolist() != [123.0] and df.measured_ms.iloc[0] > 0
    # a task the profile cannot price stops the bench at the door, naming its file, before any timing
    (suite / "b.json").write_text(json.dumps({**task_dict, "name": "half", "dtype": "fp16"}))
    with pytest.raises(InputError, match=r"b\.json: dtype: 'fp16' has no cost data"):
        run_bench(suite, ["greedy-dim"], estimator, "cpu-2c", 1, out, "u")
    assert not list(out.glob("u.*"))


def test_neuroshard_packs_tight_tasks_that_the_cost_order_strands(estimator):
    """Room for {big} and {hot1, hot2} only: the cost order spreads the hot tables and strands big."""
    tables = [{"name": "big", "num_embeddings": 20_000, "embedding_dim": 32, "pooling_factor": 0.5},
              {"name": "hot1", "num_embeddings": 10_000, "embedding_dim": 32, "pooling_factor": 30.0},
              {"name": "hot2", "num_embeddings": 10_000, "embedding_dim": 32, "pooling_factor": 30.0}]
    task = load_task({"format": "shardplan/task@1", "tables": tables, "batch_size_per_rank": 64,
                      "topology": {"world_size": 2, "memory_per_rank_gb": 0.0027}})
    for name in ("neuroshard-tw", "neuroshard"):
        plan = get_searcher(name).plan(task, estimator)
        assert plan_problems(plan) == []
        rank = {t.name: t.shards[0].rank for t in plan.tables if t.sharding_type == "table_wise"}
        if {"big", "hot1", "hot2"} <= set(rank):
            assert rank["hot1"] == rank["hot2"] != rank["big"]


def test_rank_collector_gates_on_the_fitness_probe_when_asked(monkeypatch, tmp_path, task_dict, estimator):
    """With a wait for a fit machine, every rank is timed under the plan measurements' slow limit and
    its row records the probe; without one, under the quiet gate. Rounds resume independently."""
    from shardplan.cost import collect_ranks
    from shardplan.cost.fitness import Fitness
    from shardplan.cost.kernel import MEASURE_SLOW_LIMIT, QUIET_TOLERANCE

    path = tmp_path / "t.json"
    path.write_text(json.dumps(task_dict))
    limits, waits = [], []
    monkeypatch.setattr(collect_ranks, "timed_row",
                        lambda specs, *a, wait_quiet_s: limits.append(a[-1]) or waits.append(wait_quiet_s)
                        or {"fwd_ms": 1.0, "bwd_ms": 1.0})
    monkeypatch.setattr(collect_ranks, "wait_until_fit", lambda profile, wait_s: Fitness(1.02, 1.7))
    out = tmp_path / "ranks.parquet"
    df = collect_ranks.collect_plan_ranks(get_profile("cpu-2c"), [path], ["greedy-dim"], estimator, out,
                                          round_=2, wait_fit_s=60)
    assert limits and set(limits) == {MEASURE_SLOW_LIMIT} and set(waits) == {0.0}
    assert (df.fit_label_ratio == 1.02).all() and (df.fit_reference == 1.7).all() and (df["round"] == 2).all()
    limits.clear()
    df = collect_ranks.collect_plan_ranks(get_profile("cpu-2c"), [path], ["greedy-dim"], estimator, out, round_=3,
                                          wait_quiet_s=90)
    assert limits and set(limits) == {QUIET_TOLERANCE} and waits[-1] == 90  # --wait-quiet reaches every rank
    assert df[df["round"] == 3].fit_label_ratio.isna().all()


def test_rank_collectors_time_a_suite_as_the_profile_runs_and_refuse_unknown_searchers(monkeypatch, tmp_path,
                                                                                        task_dict, estimator):
    """A training suite gives shapes: its ranks are timed, and stamped, with the optimizer and weight type
    of the profile's data, whatever the task file says. A misspelt searcher is bad input before any
    timing, not a task recorded as infeasible."""
    from shardplan.cost import collect_ranks

    path = tmp_path / "t.json"
    path.write_text(json.dumps({**task_dict, "optimizer": "rowwise_adagrad", "dtype": "fp16"}))
    kinds = []
    monkeypatch.setattr(collect_ranks, "timed_row",
                        lambda specs, optimizer, dtype, *a, **kw: kinds.append((optimizer, dtype))
                        or {"fwd_ms": 1.0, "bwd_ms": 1.0})
    out = tmp_path / "ranks.parquet"
    df = collect_ranks.collect_plan_ranks(get_profile("cpu-2c"), [path], ["greedy-dim"], estimator, out)
    assert set(kinds) == {("sgd", "fp32")} and set(zip(df.optimizer, df.dtype)) == {("sgd", "fp32")}
    for collect in (collect_ranks.collect_plan_ranks, collect_ranks.collect_plan_groups):
        with pytest.raises(InputError, match=r"^searcher: unknown searcher 'greedy-dimm'"):
            collect(get_profile("cpu-2c"), [path], ["greedy-dimm"], estimator, tmp_path / "other.parquet")
    assert not (tmp_path / "other.parquet").exists()


def test_carried_plans_ranks_are_timed_on_real_kernels_and_resume(tmp_path, task_dict, estimator, capsys):
    """`collect ranks --plans`: plans made elsewhere (as the GPU suite's are) timed rank by rank, the
    searcher each plan records kept, the rows the shape the trainer reads; a second run adds nothing."""
    from shardplan.formats import save_plan

    task = load_task(task_dict)
    plans = tmp_path / "plans"
    plans.mkdir()
    for searcher in ("greedy-dim", "round-robin"):
        save_plan(get_searcher(searcher).plan(task, estimator, seed=0), plans / f"t--{searcher}.json")
    out = tmp_path / "ranks.parquet"
    argv = ["collect", "ranks", "--profile", "cpu-2c", "--plans", str(plans), "--out", str(out)]
    assert main(argv) == 0
    df = pd.read_parquet(out)
    assert set(df.searcher) == {"greedy-dim", "round-robin"} and (df.source == "plan-rank").all()
    assert (df.fwd_ms > 0).all() and (df.bwd_ms > 0).all() and df.shards.notna().all()
    assert main(argv) == 0 and len(pd.read_parquet(out)) == len(df)  # resumed: nothing timed twice
    assert main(["collect", "ranks", "--profile", "cpu-2c", "--plans", str(tmp_path / "none"), "--out",
                 str(out)]) == 2 and "--plans" in capsys.readouterr().err


def test_plan_group_collector_times_a_tasks_plans_together_and_resumes(tmp_path, task_dict, estimator):
    """Every rank of every searcher's plan of a task, on real kernels, in one measurement call: one
    divisor for the whole group, ranks that match the plan, and a second run skips the task."""
    from shardplan.cost import collect_ranks
    from shardplan.formats import load_task
    from shardplan.search import get_searcher

    path = tmp_path / "t.json"
    path.write_text(json.dumps(task_dict))
    out = tmp_path / "groups.parquet"
    searchers = ["greedy-dim", "round-robin"]
    df = collect_ranks.collect_plan_groups(get_profile("cpu-2c"), [path], searchers, estimator, out,
                                           rounds=1, visits=2)
    task = load_task(path)
    expected = sum(1 for s in searchers for r in get_searcher(s).plan(task, estimator, seed=0).rank_shards() if r)
    assert len(df) == expected and set(df.searcher) == set(searchers)
    assert (df.source == "plan-group").all() and (df.group == "tiny").all() and df.slowdown.nunique() == 1
    assert (df.fwd_ms > 0).all() and (df.bwd_ms > 0).all() and (df.visits == 2).all()
    again = collect_ranks.collect_plan_groups(get_profile("cpu-2c"), [path], searchers, estimator, out,
                                              rounds=1, visits=2)
    assert len(again) == len(df)
    # A later round times the task again as a group of its own, with its own divisor.
    later = collect_ranks.collect_plan_groups(get_profile("cpu-2c"), [path], ["greedy-dim"], estimator, out,
                                              rounds=1, visits=2, round_=1)
    assert len(later) > len(df) and set(later.group) == {"tiny", "tiny@1"}
    assert set(later[later.group == "tiny@1"].searcher) == {"greedy-dim"} and (later["round"] >= 0).all()


def test_cli_evaluate_calibrate_uses_neighbour_calibration(tmp_path, task_dict, model_path, monkeypatch):
    """`evaluate --calibrate` fills the measured cost rank by rank from neighbour calibration (faked here:
    the real one times stored ranks of up to 50 ms), with comm from the comm model and the method said."""
    from shardplan.cost.calibration import CalibratedTiming
    from shardplan.execute import measure

    calls = []

    def fake(specs, optimizer, dtype, id_seed, profile, *a, **k):
        calls.append(tuple(specs))
        ms = float(calls.count(tuple(specs)))  # a rank's first round 1, its second 2
        return CalibratedTiming(2.0 * ms, 4.0 * ms, 1.5, 2.0, (1, 2, 3), 1)

    monkeypatch.setattr(measure, "calibrated_timing", fake)
    (tmp_path / "task.json").write_text(json.dumps(task_dict))
    plan_path, out = tmp_path / "plan.json", tmp_path / "eval.json"
    assert main(["plan", str(tmp_path / "task.json"), "--model", str(model_path), "-o", str(plan_path)]) == 0
    assert main(["evaluate", str(plan_path), "--model", str(model_path), "-o", str(out), "--calibrate",
                 "--rounds", "2"]) == 0
    plan = load_plan(out)
    used = [r for r in range(2) if any(s.rank == r for t in plan.tables for s in t.shards)]
    assert len(calls) == 2 * len(used)
    for r in used:  # raw / factor, geometric mean of the rounds: fwd (1 * 2.0 and 2 * 2.0) / 2.0
        rc = plan.measured_cost.per_rank[r]
        assert rc.fwd_compute_ms == pytest.approx(2 ** 0.5, rel=1e-3)
        assert rc.bwd_compute_ms == pytest.approx(2 * 2 ** 0.5, rel=1e-3)
        assert rc.fwd_comm_ms == pytest.approx(plan.cost.per_rank[r].fwd_comm_ms)
    assert "neighbour calibration" in plan.measured_cost.extra["compute"]
    assert plan.measured_cost.extra["calibration_factor_per_rank"][used[0]] == pytest.approx(2.0)
    assert plan.measured_cost.extra["calibration_neighbours_by"] == "ms,held,touched_per_ms"  # the choice, recorded
    assert plan.measured_cost.extra["calibration_labels"] == "passed the quiet gate"  # and the pool, recorded


def test_placer_sums_price_data_parallel_replicas_as_the_model_does(plan_dict, estimator):
    """The searchers' running sums must give every rank the model's whole-rank figure. A rank with
    data-parallel replicas (the local batch) beside sharded tables (the global batch) runs two ops,
    which the model prices apart and adds; the sums keep the replicas out and add them back."""
    from shardplan.cost.specs import rank_specs
    from shardplan.domain import Plan
    from shardplan.search.placer import Placer

    assert estimator.compute.split_batches
    plan_dict["tables"][0] = {"name": "a", "sharding_type": "data_parallel", "compute_kernel": "fused", "shards": [
        {"rank": r, "row_offset": 0, "num_rows": 1000, "col_offset": 0, "num_cols": 16} for r in (0, 1)]}
    plan = load_plan(plan_dict)
    placer = Placer(plan.task, estimator)
    code_sum, time_sum, count, _, _, apart = placer.fixed_sums(list(plan.tables))
    assert (apart > 0).all() and count.tolist() == [2, 2]  # b's and c's shards summed, a's apart
    whole = [f + b for f, b in estimator.rank_compute(rank_specs(Plan(plan.task, plan.tables)))]
    assert placer.ms(code_sum, time_sum, count, apart) == pytest.approx(whole, rel=1e-4)


def test_row_wise_move_cuts_the_table_it_crowds_out():
    """A hot table turned row-wise puts a slice on every rank; a whole table that filled a rank then fits
    nowhere, so the move comes with that table cut into the fewest column blocks that fit (and twice as
    many), never as a state no placement can hold."""
    from shardplan.domain import Shard
    from shardplan.memory import GB, shard_bytes
    from shardplan.search.neuroshard import _room_variants

    tables = [{"name": "big", "num_embeddings": 100_000, "embedding_dim": 32, "pooling_factor": 1.0},
              {"name": "hot", "num_embeddings": 50_000, "embedding_dim": 32, "pooling_factor": 40.0},
              {"name": "narrow", "num_embeddings": 100_000, "embedding_dim": 4, "pooling_factor": 1.0}]
    spec = {"format": "shardplan/task@1", "tables": tables[:2], "batch_size_per_rank": 64,
            "topology": {"world_size": 2, "memory_per_rank_gb": 1.0}}
    probe = load_task(spec)
    big = probe.table("big")
    whole = shard_bytes(probe, big, "table_wise", Shard(0, 0, big.num_embeddings, 0, big.embedding_dim))
    spec["topology"]["memory_per_rank_gb"] = 1.05 * whole / GB  # big fits a rank alone, not beside a slice
    task = load_task(spec)
    assert _room_variants(task, (("tw", 1), ("tw", 1))) == [(("tw", 1), ("tw", 1))]
    assert _room_variants(task, (("tw", 1), ("rw", 0))) == [(("cw", 2), ("rw", 0)), (("cw", 4), ("rw", 0))]
    # A 4-wide table cannot be cut: no variant, rather than a state that cannot be placed.
    spec["tables"] = [tables[2], tables[1]]
    narrow = load_task(spec).table("narrow")
    spec["topology"]["memory_per_rank_gb"] = 1.05 * shard_bytes(
        load_task(spec), narrow, "table_wise", Shard(0, 0, narrow.num_embeddings, 0, 4)) / GB
    assert _room_variants(load_task(spec), (("tw", 1), ("rw", 0))) == []


def test_targeted_collection_draws_only_the_tables_asked_for(tmp_path, capsys):
    out = tmp_path / "big.parquet"
    assert main(["collect", "compute", "--samples", "1", "--min-table-rows", "10000000000", "--out", str(out)]) == 2
    assert "--min-table-rows" in capsys.readouterr().err and not out.exists()
    assert main(["collect", "compute", "--samples", "1", "--min-pooling", "-1", "--out", str(out)]) == 2
    assert "--min-pooling: must be >= 0" in capsys.readouterr().err and not out.exists()
    assert main(["collect", "compute", "--samples", "1", "--min-zipf", "-0.5", "--out", str(out)]) == 2
    assert "--min-zipf: must be >= 0" in capsys.readouterr().err and not out.exists()
    assert main(["collect", "compute", "--samples", "1", "--min-zipf", "9", "--out", str(out)]) == 2
    assert "--min-zipf" in capsys.readouterr().err and not out.exists()
    assert main(["collect", "compute", "--samples", "1", "--min-cols", "129", "--out", str(out)]) == 2
    assert "--min-cols: must be within 0..128" in capsys.readouterr().err and not out.exists()
    # the large hot tables exist in the default pools, and a set drawn from them holds nothing else
    assert main(["collect", "compute", "--samples", "2", "--max-shards", "1", "--min-table-rows", "500000",
                 "--min-pooling", "20", "--min-cols", "64", "--repeats", "1", "--out", str(out)]) == 0
    for shards in pd.read_parquet(out)["shards"]:
        assert all(s.table_rows >= 500_000 and s.pooling_factor >= 20 and s.cols >= 64
                   for s in specs_from_json(shards))


def test_a_zipf_floor_draws_only_the_skewed_large_tables():
    import numpy as np

    from shardplan.cli import COLLECT_POOLS
    from shardplan.cost.draws import SetShape, random_sample
    from shardplan.pools import load_pool

    pool = [t for name in COLLECT_POOLS for t in load_pool(name)]
    shape = SetShape(min_table_rows=500_000, min_pooling=10, min_zipf=1.1)
    eligible = shape.sharded_tables(pool)
    assert 0 < len(eligible) < 60 and all(t.zipf_alpha >= 1.1 for t in eligible)
    prof = get_profile("cpu-2c-zen4")
    drawn = [s for i in range(30) for s in random_sample(np.random.default_rng([6, i]), pool, prof, 1, 3, shape)]
    assert drawn and all(s.zipf_alpha >= 1.1 and s.pooling_factor >= 10 and s.table_rows >= 500_000 for s in drawn)
    # at the default floor of 0 the draws are the default collection's, table for table
    assert SetShape(min_zipf=0.0).sharded_tables(pool) == SetShape().sharded_tables(pool)


def test_a_batch_list_draws_every_set_at_those_batches_and_none_keeps_the_profiles():
    import numpy as np

    from shardplan.cli import COLLECT_POOLS
    from shardplan.cost.draws import SetShape, random_sample
    from shardplan.pools import load_pool

    pool = [t for name in COLLECT_POOLS for t in load_pool(name)]
    prof = get_profile("cpu-2c-zen4")
    small = [random_sample(np.random.default_rng([11, i]), pool, prof, 20, 45, SetShape(batch_sizes=(512, 1024)))
             for i in range(40)]
    assert {s.batch_size for specs in small for s in specs} == {512, 1024}
    assert all(len({s.batch_size for s in specs}) == 1 for specs in small)  # one op a set, as drawn before
    assert np.median([len(specs) for specs in small]) >= 25  # small batches leave the budgets room for many
    # left out, the draws are the default collection's, set for set
    for i in range(20):
        rng = lambda: np.random.default_rng([0, i])  # noqa: E731
        assert random_sample(rng(), pool, prof, shape=SetShape(batch_sizes=None)) == random_sample(rng(), pool, prof)


def test_generated_tasks_sit_in_the_batch_range_their_profiles_cost_data_covers():
    import numpy as np

    from shardplan.pools import load_pool
    from shardplan.taskgen import generate_task

    pool = load_pool("meta_synthetic")
    for name in ("h200", "h100"):
        gpu = get_profile(name)
        for k in range(6):
            task = generate_task(np.random.default_rng(k), pool, f"g{k}", gpu)
            assert task.batch_size_per_rank * task.topology.world_size in gpu.collect_batch_sizes
            assert task.topology.device == "cuda"
    # a CPU profile's tasks keep the batch that makes one rank's measurement about a second
    cpu = generate_task(np.random.default_rng(0), pool, "c0", get_profile("cpu-2c"))
    assert 64 <= cpu.batch_size_per_rank <= 2048 and cpu.topology.device == "cpu"


@pytest.mark.parametrize("argv, flag", [
    (["serve", "--port", "-1"], "--port"), (["serve", "--port", "70000"], "--port"),
    (["bench", "--limit", "0"], "--limit"), (["make-tasks", "--count", "0"], "--count"),
    (["make-tasks", "--batch-size-per-rank", "0"], "--batch-size-per-rank"),
    (["make-tasks", "--seed", "-1"], "--seed"), (["collect", "compute", "--samples", "-1"], "--samples"),
    (["collect", "compute", "--repeats", "0"], "--repeats"),
    (["collect", "compute", "--max-seconds", "-1"], "--max-seconds"),
    (["collect", "ranks", "--visits", "0"], "--visits"),
    (["collect", "ranks", "--visits", "2", "--rounds", "0"], "--rounds"),
    (["collect", "ranks", "--wait-quiet", "-1"], "--wait-quiet"),
    (["collect", "comm", "--configs", "0"], "--configs"),
    (["train-dmp", "plan.json", "--rounds", "0"], "--rounds"), (["plan", "task.json", "--seed", "x"], "--seed"),
    (["run", "--rounds", "0"], "--rounds"), (["evaluate", "p.json", "-o", "q.json", "--rounds", "0"], "--rounds"),
    (["train", "--epochs", "0"], "--epochs"), (["collect", "compute", "--min-shards", "0"], "--min-shards"),
    (["train-dmp", "plan.json", "--warmup", "-1"], "--warmup"),
])
def test_cli_refuses_numbers_out_of_range_before_anything_runs(argv, flag, tmp_path, monkeypatch, capsys):
    # every one of these ran (or crashed) before: --updates 0 saved an untrained policy over the committed one
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main([*argv, "--out", "x.out"] if argv[0] in ("make-tasks", "collect") and argv[1:2] != ["comm"] else argv)
    assert e.value.code == 2 and f"argument {flag}: must be" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_plan_groups_refuse_a_wait_for_quiet_they_have_no_gate_for(tmp_path, capsys):
    """``collect ranks --visits 2`` divides a task's plans by one slowdown: there is no per-rank quiet gate
    for ``--wait-quiet`` to wait on, so asking for it is bad input, refused before anything is timed."""
    out = tmp_path / "groups.parquet"
    assert main(["collect", "ranks", "--suite", "data/tasks/cpu-bench", "--visits", "2", "--wait-quiet", "30",
                 "--out", str(out)]) == 2
    assert "--wait-quiet" in capsys.readouterr().err and not out.exists()


def test_policy_training_refuses_no_updates_and_writes_nothing(tmp_path, estimator):
    from shardplan.search.rl import train_policy

    out = tmp_path / "policy.json"
    with pytest.raises(InputError, match="updates"):
        train_policy(estimator, out, updates=0, progress=False)
    with pytest.raises(InputError, match="rollouts"):
        train_policy(estimator, out, updates=2, rollouts=0, progress=False)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(SystemExit) as e:
        main(["train-policy", "--updates", "0", "--out", str(out)])
    assert e.value.code == 2 and not out.exists()


def test_collect_comm_run_again_keeps_the_committed_model(monkeypatch, capsys):
    # a finished collection run again adds no row: the model and its date stay as committed
    import shardplan.cost.comm_collect as comm_collect
    import shardplan.cost.profiles as profiles

    model = get_profile("cpu-2c").dir / "comm-model.json"
    before = model.read_bytes()
    monkeypatch.setattr(profiles, "check_collect_target", lambda profile, out: None)
    monkeypatch.setattr(comm_collect, "collect_comm", lambda profile, out, world_sizes, configs: pd.read_parquet(out))
    assert main(["collect", "comm", "--profile", "cpu-2c"]) == 0
    assert "nothing new" in capsys.readouterr().out and model.read_bytes() == before


def test_a_trainers_torchrec_configs_are_planned_and_their_plan_fits_its_model_path():
    """The on-ramp from a TorchRec trainer: its EmbeddingBagConfigs as they are, pooling factors by table name,
    planned; the ShardingPlan comes back under the model path the trainer's collection sits at."""
    from torchrec.modules.embedding_configs import EmbeddingBagConfig

    import shardplan

    configs = [EmbeddingBagConfig(name=f"t{i}", num_embeddings=1000 * (i + 1), embedding_dim=16,
                                  feature_names=[f"f{i}"]) for i in range(4)]
    p = shardplan.plan(configs, 2, searcher="greedy-size", pooling_factors={f"t{i}": 2.0 + i for i in range(4)},
                       zipf_alphas={"t0": 1.1}, batch_size_per_rank=64)
    assert [t.pooling_factor for t in p.task.tables] == [2.0, 3.0, 4.0, 5.0] and p.task.tables[0].zipf_alpha == 1.1
    sharding = shardplan.to_torchrec_plan(p, "sparse_arch.ebc")
    assert set(sharding.plan["sparse_arch.ebc"]) == {"t0", "t1", "t2", "t3"}
    with pytest.raises(InputError, match=r"pooling_factors\['t3'\]"):
        shardplan.plan(configs, 2, pooling_factors={"t0": 1.0, "t1": 1.0, "t2": 1.0})
    with pytest.raises(InputError, match="EmbeddingBagConfig"):
        shardplan.make_task([42], 2)
    from torchrec.modules.embedding_configs import EmbeddingConfig

    with pytest.raises(InputError, match="unpooled"):  # an EmbeddingCollection's table costs another way
        shardplan.make_task([EmbeddingConfig(name="seq", num_embeddings=100, embedding_dim=16, feature_names=["s"])],
                            2, pooling_factors={"seq": 3.0})
    from torchrec.modules.embedding_configs import PoolingType

    unpooled = EmbeddingBagConfig(name="u", num_embeddings=100, embedding_dim=8, feature_names=["u"],
                                  pooling=PoolingType.NONE)
    with pytest.raises(InputError, match="unpooled"):
        shardplan.make_task([unpooled], 2, pooling_factors={"u": 3.0})
    shared = EmbeddingBagConfig(name="s", num_embeddings=100, embedding_dim=8, feature_names=["query", "title"])
    with pytest.raises(InputError, match=r"tables\['s'\].feature_names: .* 2 features \(query, title\)"):
        shardplan.make_task([shared], 2, pooling_factors={"s": 3.0})  # two bags a sample: not what was timed
    with pytest.raises(InputError, match=r"zipf_alphas\['t9'\]: names no TorchRec table config"):  # a typo
        shardplan.make_task(configs, 2, pooling_factors={f"t{i}": 1.0 for i in range(4)}, zipf_alphas={"t9": 1.1})


def test_a_trainers_torchrec_constraints_give_pooling_and_sharding_types():
    """The trainer's ParameterConstraints, as its TorchRec planner takes them: their pooling factors (the mean
    of a table's list; TorchRec's default 1.0 where none is set; ``pooling_factors`` wins) and sharding types
    (TorchRec's table_column_wise is our column_wise) reach the task, and the plan honours the types; a
    constraint to kernels shardplan never timed, a type it has no name for and a stray key are refused."""
    from torchrec.distributed.planner.types import ParameterConstraints
    from torchrec.modules.embedding_configs import EmbeddingBagConfig

    import shardplan

    configs = [EmbeddingBagConfig(name=f"t{i}", num_embeddings=2000 * (i + 1), embedding_dim=16,
                                  feature_names=[f"f{i}"]) for i in range(4)]
    constraints = {"t0": ParameterConstraints(pooling_factors=[2.0, 4.0], sharding_types=["data_parallel"]),
                   "t1": ParameterConstraints(sharding_types=["table_column_wise", "column_wise"]),
                   "t2": ParameterConstraints(pooling_factors=[9.0])}
    task = shardplan.make_task(configs, 2, constraints=constraints, pooling_factors={"t2": 5.0, "t3": 3.0})
    got = {t.name: (t.pooling_factor, t.sharding_types) for t in task.tables}
    assert got == {"t0": (3.0, ("data_parallel",)), "t1": (1.0, ("column_wise",)), "t2": (5.0, None),
                   "t3": (3.0, None)}
    plan = shardplan.plan(task, searcher="neuroshard")
    assert {t.name: t.sharding_type for t in plan.tables if t.name in ("t0", "t1")} == {
        "t0": "data_parallel", "t1": "column_wise"}
    for bad, field in ((ParameterConstraints(compute_kernels=["fused_uvm_caching"]), "compute_kernels"),
                       (ParameterConstraints(sharding_types=["grid_shard"]), "sharding_types")):
        with pytest.raises(InputError, match=rf"^constraints\['t0'\].{field}"):
            shardplan.make_task(configs, 2, constraints={"t0": bad}, pooling_factors={f"t{i}": 1.0 for i in range(4)})
    with pytest.raises(InputError, match=r"^constraints\['t9'\]: names no TorchRec table config"):
        shardplan.make_task(configs, 2, constraints={"t9": ParameterConstraints()},
                            pooling_factors={f"t{i}": 1.0 for i in range(4)})


def test_a_torchrec_configs_weight_type_is_the_tasks():
    """FP16 configs make an fp16 task (its memory at 2 bytes a weight), which a profile timed with fp32
    weights refuses to price; a dtype that contradicts the configs, mixed types and a type shardplan has
    no name for are errors that name the table."""
    from torchrec.modules.embedding_configs import DataType, EmbeddingBagConfig

    import shardplan

    def configs(*types: DataType) -> list:
        return [EmbeddingBagConfig(name=f"t{i}", num_embeddings=1000, embedding_dim=16, feature_names=[f"f{i}"],
                                   data_type=t) for i, t in enumerate(types)]

    pooling = {"t0": 2.0, "t1": 2.0}
    half = shardplan.make_task(configs(DataType.FP16, DataType.FP16), 2, pooling_factors=pooling)
    full = shardplan.make_task(configs(DataType.FP32, DataType.FP32), 2, pooling_factors=pooling)
    assert (half.dtype, full.dtype) == ("fp16", "fp32")
    assert shardplan.make_task(configs(DataType.BF16, DataType.BF16), 2, pooling_factors=pooling,
                               dtype="bf16").dtype == "bf16"
    with pytest.raises(InputError, match=r"^dtype: is 'fp32', but .* fp16 \(table 't0'\)"):
        shardplan.make_task(configs(DataType.FP16, DataType.FP16), 2, pooling_factors=pooling, dtype="fp32")
    with pytest.raises(InputError, match=r"mix weight types: fp32 \('t0'\), fp16 \('t1'\)"):
        shardplan.make_task(configs(DataType.FP32, DataType.FP16), 2, pooling_factors=pooling)
    with pytest.raises(InputError, match=r"tables\['t1'\].data_type: TorchRec's INT4"):
        shardplan.make_task(configs(DataType.FP32, DataType.INT4), 2, pooling_factors=pooling)
    with pytest.raises(InputError, match=r"^dtype: 'fp16' has no cost data.*--dtype fp16"):
        shardplan.plan(configs(DataType.FP16, DataType.FP16), 2, pooling_factors=pooling, searcher="greedy-size")


def _constrained(base: dict, wanted: dict[str, list[str]]) -> dict:
    """``base`` (a task dict) with ``wanted``'s tables given those sharding types."""
    return {**base, "tables": [{**t, "sharding_types": wanted[t["name"]]} if t["name"] in wanted else t
                               for t in base["tables"]]}


# Every searcher but TorchRec's (its own test below) and the Optuna-tuned beam (the beam's, in seconds more).
OUR_SEARCHERS = ("neuroshard", "neuroshard-tw", "rl", "greedy-cost", "greedy-size", "greedy-dim", "greedy-lookup",
                 "greedy-size-lookup", "random", "round-robin")


def test_a_tasks_per_table_sharding_types_are_honoured_by_every_searcher():
    """TorchRec's per-table ``ParameterConstraints.sharding_types``, in the task file: every searcher gives
    each constrained table one of its types (a replica, row-wise slices, a column block even where it could
    sit whole); a plan that breaks one is refused naming the table; the file keeps the field and refuses
    an unknown type."""
    import shardplan
    from shardplan.formats import task_to_dict

    base = task_to_dict(shardplan.load_task("data/tasks/cpu-bench/cpu-bench-00.json"))
    by_size = sorted(base["tables"], key=lambda t: t["num_embeddings"] * t["embedding_dim"])
    wanted = {by_size[0]["name"]: ["data_parallel"], by_size[-1]["name"]: ["row_wise"],
              by_size[len(by_size) // 2]["name"]: ["column_wise"]}
    narrow = next(t["name"] for t in base["tables"] if t["embedding_dim"] == 4 and t["name"] not in wanted)
    wanted[narrow] = ["column_wise"]  # 4 wide: one block, FBGEMM's narrowest, is the only column-wise layout
    task = shardplan.load_task(_constrained(base, wanted))
    assert shardplan.load_task(task_to_dict(task)) == task  # the field round-trips
    for searcher in OUR_SEARCHERS:
        plan = shardplan.plan(task, searcher=searcher)
        got = {t.name: t.sharding_type for t in plan.tables if t.name in wanted}
        assert got == {name: types[0] for name, types in wanted.items()}, searcher
        assert len(plan.sharding(narrow).shards) == 1, searcher
    # a plan made elsewhere that breaks its task's constraint is not a valid plan of that task
    as_file = shardplan.formats.plan_to_dict(plan)
    small = by_size[0]["name"]
    as_file["task"] = _constrained(as_file["task"], {small: ["table_wise"]})
    broken = shardplan.load_plan(as_file)
    problems = shardplan.plan_problems(broken)
    assert any(f"({small}): data_parallel, which the task's sharding_types" in p for p in problems)
    with pytest.raises(InputError, match="sharding_types for the table do not allow"):
        shardplan.evaluate(broken)
    # TorchRec gets them as its own constraints; its CPU sharder has no row-wise, which it says
    with pytest.raises(InfeasibleError, match=r"TorchRec's planner found no plan: No available sharding type"):
        shardplan.plan(task, searcher="torchrec")
    gloo = shardplan.load_task(_constrained(base, {**wanted, by_size[-1]["name"]: ["table_wise"]}))
    plan = shardplan.plan(gloo, searcher="torchrec")
    assert {t.name: t.sharding_type for t in plan.tables if t.name in wanted} == {
        name: "table_wise" if types == ["row_wise"] else types[0] for name, types in wanted.items()}
    with pytest.raises(InputError, match=r"tables\[0\].sharding_types\[0\]"):
        shardplan.load_task({**base, "tables": [{**base["tables"][0], "sharding_types": ["diagonal"]}]})


def test_the_beam_counts_a_table_kept_row_wise_before_judging_the_others():
    """cpu-bench-24's largest table (0.482 GB of a rank's 0.487) fits a rank whole only until the
    next largest, kept row-wise by the task, puts a slice on every rank; the beam's start must see the
    slices first and cut the largest into column blocks (it declared the task infeasible)."""
    import shardplan
    from shardplan.formats import task_to_dict

    base = task_to_dict(shardplan.load_task("data/tasks/cpu-bench/cpu-bench-24.json"))
    task = shardplan.load_task(_constrained(base, {"t37_meta779": ["row_wise"]}))
    for searcher in ("neuroshard", "neuroshard-tw"):
        plan = shardplan.plan(task, searcher=searcher)
        assert plan.sharding("t37_meta779").sharding_type == "row_wise", searcher
        assert plan.sharding("t06_meta139").sharding_type == "column_wise", searcher


def test_a_searchers_plan_that_breaks_a_tables_sharding_types_is_refused_by_name(estimator):
    """The guard every plan passes: a searcher that ignored the task's constraint is named with the table."""
    from shardplan.domain import Shard, TableSharding
    from shardplan.search.base import Searcher

    class Careless(Searcher):
        name = "careless"

        def search(self, task, estimator, seed):
            return [TableSharding(t.name, "table_wise", (Shard(i % task.topology.world_size, 0, t.num_embeddings, 0,
                                                               t.embedding_dim),)) for i, t in enumerate(task.tables)]

    base = json.loads(open("data/tasks/cpu-bench/cpu-bench-00.json").read())
    task = load_task(_constrained(base, {base["tables"][0]["name"]: ["data_parallel"]}))
    with pytest.raises(InfeasibleError, match=r"^tables\[0\]\.sharding_types: searcher careless sharded"):
        Careless().plan(task, estimator)


def test_over_hosts_a_table_too_big_for_a_rank_may_go_table_row_wise(task_dict, estimator):
    """A table no rank holds whole, and too narrow for column blocks, starts row-wise over every rank. Over
    two hosts the beam may move it onto either host's ranks (table-row-wise); over one host it has no other
    spread to try."""
    from shardplan.search.neuroshard import NeuroShardBeam, _initial_state
    from shardplan.search.placer import Placer

    task_dict["tables"][2].update(num_embeddings=300_000, embedding_dim=4)  # 4.8 MB, one column block
    task_dict["topology"].update(world_size=4, memory_per_rank_gb=0.003)
    for hosts in (1, 2):
        task_dict["topology"]["local_world_size"] = 4 // hosts
        task = load_task(task_dict)
        start = _initial_state(task)
        assert start[2] == ("rw", 0) and task.tables[2].sharding_types is None
        moves = NeuroShardBeam()._moves(task, start, Placer(task, estimator))
        assert {m[2] for m in moves if m[2][0] == "twrw"} == {("twrw", h) for h in range(hosts) if hosts > 1}


def test_tables_much_wider_than_a_ranks_share_are_cut_in_the_second_beams_start(task_dict):
    from shardplan.search.neuroshard import _initial_state, wide_split_state

    task_dict["tables"][2]["embedding_dim"] = 128  # 128 of 152 columns over 4 ranks: a share of 38
    task_dict["topology"].update(world_size=4, local_world_size=4, memory_per_rank_gb=1.0)
    task = load_task(task_dict)
    start = _initial_state(task)
    assert start == (("tw", 1),) * 3
    assert wide_split_state(task, start) == (("tw", 1), ("tw", 1), ("cw", 4))  # 32 <= 1.25 x 38 < 64
    assert wide_split_state(task, start, slack=2.0) == (("tw", 1), ("tw", 1), ("cw", 2))
    task_dict["tables"][2]["sharding_types"] = ["table_wise"]  # a table the task keeps whole stays whole
    assert wide_split_state(load_task(task_dict), start) == start


def test_the_second_beam_only_ever_lowers_the_predicted_cost(task_dict, estimator, monkeypatch):
    """Where wide tables give the beam a second start, both beams run and the plan is the better one's:
    never predicted dearer than the first beam's plan alone."""
    from shardplan.search import neuroshard

    task_dict["tables"][2]["embedding_dim"] = 128
    task_dict["topology"].update(world_size=4, local_world_size=2, memory_per_rank_gb=1.0)
    task = load_task(task_dict)
    beams = []
    real_beam = neuroshard.NeuroShardBeam._beam
    monkeypatch.setattr(neuroshard.NeuroShardBeam, "_beam",
                        lambda self, task, placer, scored, start, *a: beams.append(start) or real_beam(
                            self, task, placer, scored, start, *a))
    both = neuroshard.NeuroShardBeam().plan(task, estimator)
    assert len(beams) == 2 and beams[1] == neuroshard.wide_split_state(task, beams[0])
    monkeypatch.setattr(neuroshard, "wide_split_state", lambda task, state: state)
    first_only = neuroshard.NeuroShardBeam().plan(task, estimator)
    assert len(beams) == 3 and both.cost.max_ms <= first_only.cost.max_ms


def test_make_tasks_splits_ranks_into_hosts(tmp_path, capsys):
    import numpy as np

    from shardplan.pools import load_pool
    from shardplan.taskgen import generate_task

    pool, h100 = load_pool("meta_synthetic"), get_profile("h100")
    for k in range(4):  # an oversize task draws from the sizes over 8 asked for, not 8 ranks
        task = generate_task(np.random.default_rng(k), pool, f"m{k}", h100, world_sizes=(16, 32),
                             oversize=k % 2 == 1, ranks_per_host=8)
        assert task.topology.world_size in (16, 32) and task.topology.local_world_size == 8
    out = tmp_path / "suite"
    assert main(["make-tasks", "--profile", "h100", "--count", "2", "--world-sizes", "16,12",
                 "--ranks-per-host", "8", "--out", str(out)]) == 2
    assert "--world-sizes" in capsys.readouterr().err and not out.exists()


def test_tables_kept_spread_go_table_row_wise_over_one_host_or_replicated():
    """On two hosts: a table allowed only table-row-wise lies on one host's ranks under every searcher; one
    allowed table-row-wise or a replica gets one of the two; a table allowed only whole that fits no rank
    whole is refused naming its sharding_types."""
    import shardplan
    from shardplan.formats import task_to_dict

    base = task_to_dict(shardplan.load_task("data/tasks/cpu-bench/cpu-bench-00.json"))
    base["topology"]["local_world_size"] = base["topology"]["world_size"] // 2
    by_size = sorted(base["tables"], key=lambda t: t["num_embeddings"] * t["embedding_dim"])
    big, second = by_size[-1]["name"], by_size[-2]["name"]
    task = shardplan.load_task(_constrained(base, {big: ["table_row_wise"],
                                                   second: ["table_row_wise", "data_parallel"]}))
    hosts = task.topology.num_hosts
    for searcher in OUR_SEARCHERS:
        plan = shardplan.plan(task, searcher=searcher)
        got = {t.name: t for t in plan.tables}
        assert got[big].sharding_type == "table_row_wise", searcher
        assert len({task.topology.host_of(s.rank) for s in got[big].shards}) == 1 < hosts, searcher
        assert got[second].sharding_type in ("table_row_wise", "data_parallel"), searcher
    tight = {**base, "topology": {**base["topology"], "memory_per_rank_gb": 0.4}}
    whole_only = shardplan.load_task(_constrained(tight, {big: ["table_wise", "column_wise"]}))
    assert table_bytes(whole_only, whole_only.table(big)) > 0.4 * GB
    with pytest.raises(InfeasibleError, match=rf"^tables\[\d+\]\.sharding_types: '{big}' needs .*no split of it"):
        shardplan.plan(whole_only, searcher="greedy-size")
