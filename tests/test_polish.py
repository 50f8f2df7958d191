"""The pairwise polish, against an additive stand-in cost model whose optimum is known by hand."""
import numpy as np

from shardplan.cost.estimator import PlanEstimator
from shardplan.cost.specs import ShardSpec
from shardplan.domain import Plan, Shard, Table, TableSharding, Task, Topology
from shardplan.memory import GB, table_bytes
from shardplan.search.placer import Placer
from shardplan.search.polish import _lex_smaller, _units, polish
from shardplan.validate import plan_problems


class AdditiveModel:
    """A rank costs the sum of its shards' ``pooling_factor * cols / 32`` ms (all forward)."""

    profile = "cpu-2c"
    code_width = 1
    time_width = 2
    metadata = {"optimizers": ["sgd"]}

    @staticmethod
    def _ms(s: ShardSpec) -> float:
        return s.pooling_factor * s.cols / 32

    def predict(self, sets: list[list[ShardSpec]]) -> tuple[np.ndarray, np.ndarray]:
        return np.array([sum(self._ms(s) for s in ss) for ss in sets]), np.zeros(len(sets))

    def encode_shards(self, specs: list[ShardSpec]) -> tuple[np.ndarray, np.ndarray]:
        return np.zeros((len(specs), 1), np.float32), np.array([[self._ms(s), 0.0] for s in specs], np.float32)

    def combine(self, code_sum: np.ndarray, time_sum: np.ndarray, count: np.ndarray) -> np.ndarray:
        return np.asarray(time_sum, np.float64)


class NoComm:
    name, kind = "none", "none"

    def rank_comm_ms(self, vols, topo) -> list[tuple[float, float]]:
        return [(0.0, 0.0)] * topo.world_size


def _task() -> Task:
    # Memory in units of 10,000 rows x 32 fp32 columns: C 7 (cheap), H 3 (hot), S 0.5, M 6; a rank holds 10.2.
    def table(name: str, units: float, pooling: float) -> Table:
        return Table(name, int(units * 10_000), 32, pooling)

    tables = (table("C", 7, 1.0), table("S1", 0.5, 1.0), table("S2", 0.5, 1.0), table("H1", 3, 10.0),
              table("H2", 3, 10.0), table("H3", 3, 10.0), table("M", 6, 5.0))
    probe = Task("p", tables, Topology(3, 3, memory_per_rank_gb=1.0), batch_size_per_rank=1)
    unit = table_bytes(probe, tables[3]) / 3
    return Task("swap", tables, Topology(3, 3, memory_per_rank_gb=10.2 * unit / GB), batch_size_per_rank=1)


def _whole(task: Task, name: str, rank: int) -> TableSharding:
    t = task.table(name)
    return TableSharding(name, "table_wise", (Shard(rank, 0, t.num_embeddings, 0, t.embedding_dim),))


def test_polish_swaps_a_cheap_large_table_off_a_memory_full_light_rank() -> None:
    """Rank 0 holds C and is full; moving a hot table off rank 1 needs a swap with C, which single moves miss."""
    task = _task()
    est = PlanEstimator(AdditiveModel(), NoComm(), "cpu-2c", "additive")
    start = [_whole(task, n, r) for n, r in
             (("C", 0), ("S1", 0), ("H1", 1), ("H2", 1), ("S2", 1), ("H3", 2), ("M", 2))]
    assert plan_problems(Plan(task, tuple(start))) == []
    assert est.estimate(Plan(task, tuple(start))).max_ms == 21.0

    # Single moves off the slowest rank (the greedy's refinement) stop at 20: no hot table fits beside C.
    placer = Placer(task, est)
    units, where, fixed = _units(task, start)
    codes, times, need = placer.unit_inputs(units)
    sums = placer.fixed_sums(fixed)
    code_sum, time_sum, count, mem = (x.copy() for x in sums[:4])
    for i, r in enumerate(where):
        code_sum[r] += codes[i]; time_sum[r] += times[i]; count[r] += 1; mem[r] += need[i]  # noqa: E702
    placer.refine(units, where, codes, times, need, (code_sum, time_sum, count, sums[5]), mem)
    moved_only = est.estimate(Plan(task, tuple(placer.shardings(units, where, fixed)))).max_ms
    assert moved_only == 20.0

    out = polish(task, est, start, placer)
    plan = Plan(task, tuple(out))
    assert plan_problems(plan) == []
    assert est.estimate(plan).max_ms <= 15.0  # H with C and S, H and S beside the freed room, H3 with M
    assert polish(task, est, out, placer) == out  # a local optimum stays put


def test_lex_smaller_compares_sorted_costs_from_the_slowest_rank_down() -> None:
    assert _lex_smaller(np.array([5.0, 9.0, 3.0]), np.array([10.0, 1.0, 1.0]))
    assert _lex_smaller(np.array([10.0, 5.0, 1.0]), np.array([1.0, 10.0, 6.0]))  # second slowest relieved
    assert not _lex_smaller(np.array([10.0, 6.0, 1.0]), np.array([6.0, 10.0, 1.0]))  # same sorted costs
    assert not _lex_smaller(np.array([11.0, 1.0]), np.array([10.0, 5.0]))
    assert not _lex_smaller(np.array([10.001, 1.0]), np.array([10.0, 5.0]))  # the plan cost may not rise at all


def test_polished_candidates_polishes_only_the_best_candidate_past_the_unit_limit(monkeypatch) -> None:
    import shardplan.search.polish as polish_mod

    task = _task()
    est = PlanEstimator(AdditiveModel(), NoComm(), "cpu-2c", "additive")
    good = [_whole(task, n, r) for n, r in
            (("C", 0), ("S1", 0), ("H1", 1), ("H2", 1), ("S2", 1), ("H3", 2), ("M", 2))]  # 21 ms
    worse = [_whole(task, n, r) for n, r in
             (("C", 0), ("S1", 0), ("H1", 1), ("H2", 1), ("H3", 1), ("S2", 2), ("M", 2))]  # 30 ms
    assert est.estimate(Plan(task, tuple(worse))).max_ms > est.estimate(Plan(task, tuple(good))).max_ms
    seen: list[list[TableSharding]] = []
    real = polish_mod.polish
    monkeypatch.setattr(polish_mod, "polish", lambda t, e, tables, p=None: seen.append(tables) or real(t, e, tables, p))

    polish_mod.polished_candidates(task, est, [worse, good])
    assert seen == [worse, good]  # 7 units: every candidate polished
    seen.clear()
    monkeypatch.setattr(polish_mod, "POLISH_ALL_MAX_UNITS", 6)
    out = polish_mod.polished_candidates(task, est, [worse, good])[0]
    assert seen == [good] and est.estimate(Plan(task, tuple(out))).max_ms <= 15.0


def test_blocks_of_one_table_on_one_rank_are_joined() -> None:
    """Two column blocks of a table on one rank become one block (all of them on one rank: table-wise
    again), the columns tiled afresh; the polish hands back no plan with such a pair."""
    from shardplan.search.placement import merge_colocated_blocks

    task = _task()
    m = task.table("M")
    blocks = TableSharding("M", "column_wise", (Shard(1, 0, m.num_embeddings, 0, 8),
                                                Shard(2, 0, m.num_embeddings, 8, 8),
                                                Shard(1, 0, m.num_embeddings, 16, 16)))
    joined = merge_colocated_blocks(task, [blocks, _whole(task, "C", 0)])
    assert joined[1] == _whole(task, "C", 0)
    assert joined[0] == TableSharding("M", "column_wise", (Shard(1, 0, m.num_embeddings, 0, 24),
                                                           Shard(2, 0, m.num_embeddings, 24, 8)))
    one_rank = TableSharding("M", "column_wise", (Shard(2, 0, m.num_embeddings, 0, 16),
                                                  Shard(2, 0, m.num_embeddings, 16, 16)))
    assert merge_colocated_blocks(task, [one_rank]) == [_whole(task, "M", 2)]

    est = PlanEstimator(AdditiveModel(), NoComm(), "cpu-2c", "additive")
    placed = (("C", 0), ("S1", 0), ("H1", 1), ("S2", 1), ("H2", 2), ("H3", 2))
    start = [_whole(task, n, r) for n, r in placed] + [blocks]
    out = polish(task, est, start)
    assert plan_problems(Plan(task, tuple(out))) == []
    for ts in out:
        ranks = [sh.rank for sh in ts.shards]
        assert len(ranks) == len(set(ranks)), ts
