"""Greedy placement of units (whole tables, column blocks) over ranks with the learned model's incremental sums.

:class:`Placer` is the engine under the NeuroShard searchers, the RL
environment and :func:`~shardplan.search.polish.polish`: it encodes each unit
once, scores "rank r plus unit u" by adding u's code to r's running sums (the
model's sum pooling), and turns unit positions back into table shardings.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..cost.estimator import PlanEstimator
from ..cost.specs import ShardSpec, shard_spec
from ..domain import Plan, Shard, Table, TableSharding, Task
from ..memory import capacity_bytes, shard_batch, shard_bytes
from .placement import column_sharding

GRID = (1.0, 1.1, 1.25, 1.5, 2.0, float("inf"))


@dataclass(frozen=True)
class Unit:
    """A movable piece: a whole table (``blocks == 1``) or one of its column blocks."""

    table: Table
    col_offset: int
    num_cols: int
    blocks: int


def column_blocks(table: Table, blocks: int) -> list[tuple[int, int]]:
    """(offset, cols) of ``blocks`` column blocks, each a multiple of 4 wide (FBGEMM's constraint)."""
    quads = table.embedding_dim // 4
    if not 1 <= blocks <= quads:  # a 0-wide block would reach the cost model as log2(0)
        raise ValueError(f"{table.name}: {blocks} column blocks of a {table.embedding_dim}-wide table; "
                         f"at most {quads} (4 columns each)")
    sizes = [(quads // blocks + (1 if i < quads % blocks else 0)) * 4 for i in range(blocks)]
    out, off = [], 0
    for s in sizes:
        out.append((off, s))
        off += s
    return out


def max_blocks(table: Table) -> int:
    return table.embedding_dim // 4


class Placer:
    """Greedy placement of units under one balance cap, with the model's incremental sums."""

    def __init__(self, task: Task, estimator: PlanEstimator) -> None:
        self.task = task
        self.est = estimator
        self.model = estimator.compute
        self.world = task.topology.world_size
        self.cap = capacity_bytes(task)
        self._enc: dict[ShardSpec, tuple[np.ndarray, np.ndarray]] = {}
        self._units: dict[Unit, tuple[np.ndarray, np.ndarray, float]] = {}  # every placement asks again
        # Units are fed the global batch. A model that prices each batch size's shards as an op of their
        # own (data-parallel replicas: the local batch) must not have those summed in with the units.
        self.main_batch = shard_batch(task, "table_wise")
        self.split_batches = bool(getattr(self.model, "split_batches", False))

    def encode(self, specs: list[ShardSpec]) -> tuple[np.ndarray, np.ndarray]:
        missing = [s for s in dict.fromkeys(specs) if s not in self._enc]
        if missing:
            codes, times = self.model.encode_shards(missing)
            for s, c, t in zip(missing, codes, times):
                self._enc[s] = (c, t)
        return (np.stack([self._enc[s][0] for s in specs]), np.stack([self._enc[s][1] for s in specs]))

    def place(self, units: list[Unit], fixed: list[TableSharding], balance: float,
              by_size: bool = False) -> list[TableSharding] | None:
        """Place ``units`` greedily beside ``fixed``; None when memory cannot hold them.

        Units go in descending order of predicted cost, or with ``by_size`` of
        memory (first-fit-decreasing packs tight tasks that the cost order
        strands), each to the feasible rank whose predicted cost stays lowest.
        """
        world = self.world
        code_sum, time_sum, count, mem, dims, apart = self.fixed_sums(fixed)
        if (mem > self.cap).any():
            return None
        codes, times, need = self.unit_inputs(units)
        solo = times.sum(axis=1)
        dim_cap = balance * (dims.sum() + sum(u.num_cols for u in units)) / world
        where = np.full(len(units), -1)
        weight = need if by_size else solo
        for i in sorted(range(len(units)), key=lambda i: (-weight[i], units[i].table.name, units[i].col_offset)):
            ok = mem + need[i] <= self.cap
            if not ok.any():
                return None
            balanced = ok & (dims + units[i].num_cols <= dim_cap)
            cand = np.flatnonzero(balanced if balanced.any() else ok)
            ms = self.ms(code_sum[cand] + codes[i], time_sum[cand] + times[i], count[cand] + 1, apart[cand])
            r = int(cand[int(np.argmin(ms))])
            where[i] = r
            code_sum[r] += codes[i]
            time_sum[r] += times[i]
            count[r] += 1
            mem[r] += need[i]
            dims[r] += units[i].num_cols
        if units:
            self.refine(units, where, codes, times, need, (code_sum, time_sum, count, apart), mem)
        return self.shardings(units, where, fixed)

    def ms(self, code_sum: np.ndarray, time_sum: np.ndarray, count: np.ndarray, apart: np.ndarray) -> np.ndarray:
        """Predicted fwd+bwd ms ``[m]`` of ``m`` ranks from their running sums: the fused op over the
        summed shards, plus ``apart``, the ms of what those ranks run as other ops (:meth:`fixed_sums`)."""
        return self.model.combine(code_sum, time_sum, count).sum(axis=1) + apart

    def fixed_sums(self, fixed: list[TableSharding]) -> tuple[np.ndarray, ...]:
        """Per rank, what the already-placed shards put there: summed codes, summed own times,
        shard count, bytes, summed dims (the starting point of every placement), and the predicted
        fwd+bwd ms of the shards fed another batch than the units, where the model prices those as an
        op of their own (data-parallel replicas; 0 otherwise), which no placement changes."""
        task, world = self.task, self.world
        code_sum = np.zeros((world, self.model.code_width), np.float32)
        time_sum = np.zeros((world, self.model.time_width), np.float32)
        count = np.zeros(world, np.float32)
        mem = np.zeros(world)
        dims = np.zeros(world)
        apart_specs: list[list[ShardSpec]] = [[] for _ in range(world)]
        for ts in fixed:
            t = task.table(ts.name)
            for sh in ts.shards:
                mem[sh.rank] += shard_bytes(task, t, ts.sharding_type, sh)
                dims[sh.rank] += sh.num_cols
                spec = shard_spec(task, t, ts.sharding_type, sh)
                if self.split_batches and spec.batch_size != self.main_batch:
                    apart_specs[sh.rank].append(spec)
                    continue
                c, tm = self.encode([spec])
                code_sum[sh.rank] += c[0]
                time_sum[sh.rank] += tm[0]
                count[sh.rank] += 1
        apart = np.array([f + b for f, b in self.est.rank_compute(apart_specs)])
        return code_sum, time_sum, count, mem, dims, apart

    def table_costs(self) -> np.ndarray:
        """Each table's predicted fwd+bwd ms alone on a rank, whole (in task order)."""
        specs = [shard_spec(self.task, t, "table_wise", Shard(0, 0, t.num_embeddings, 0, t.embedding_dim))
                 for t in self.task.tables]
        return self.encode(specs)[1].sum(axis=1)

    def unit_inputs(self, units: list[Unit]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each unit's code, own times (the model's ``time_width`` parts: fwd, then bwd) and bytes, as it would
        sit on a rank."""
        if not units:
            return (np.zeros((0, self.model.code_width), np.float32), np.zeros((0, self.model.time_width), np.float32),
                    np.zeros(0))
        missing = [u for u in dict.fromkeys(units) if u not in self._units]
        if missing:
            shards = [Shard(0, 0, u.table.num_embeddings, u.col_offset, u.num_cols) for u in missing]
            codes, times = self.encode([shard_spec(self.task, u.table, "table_wise", s)
                                        for u, s in zip(missing, shards)])
            for u, s, c, t in zip(missing, shards, codes, times):
                self._units[u] = (c, t, float(shard_bytes(self.task, u.table, "column_wise", s)))
        rows = [self._units[u] for u in units]
        return (np.stack([r[0] for r in rows]), np.stack([r[1] for r in rows]),
                np.array([r[2] for r in rows], float))

    def shardings(self, units: list[Unit], where: np.ndarray, fixed: list[TableSharding]) -> list[TableSharding]:
        """``fixed`` plus the units placed on ranks ``where``: whole tables table-wise (one column block where
        the task allows column-wise but not table-wise), blocks column-wise."""
        placed: dict[str, list[Shard]] = {}
        for u, r in zip(units, where):
            shard = Shard(int(r), 0, u.table.num_embeddings, u.col_offset, u.num_cols)
            placed.setdefault(u.table.name, []).append(shard)
        return list(fixed) + [column_sharding(self.task.table(name), shs) for name, shs in placed.items()]

    def move_costs(self, sums: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], codes: np.ndarray,
                   times: np.ndarray, src: int, dsts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each unit (its ``codes`` and ``times`` rows) now on rank ``src``: the predicted fwd+bwd ms of
        ``src`` without it ``[n]``, and of each rank in ``dsts`` with it ``[n, len(dsts)]``.

        ``sums`` are the per-rank running sums (codes, own times, shard counts) the placement keeps,
        and the ms priced apart (:meth:`fixed_sums`).
        """
        code_sum, time_sum, count, apart = sums
        n, m = len(codes), len(dsts)
        without = self.ms(code_sum[src] - codes, time_sum[src] - times, np.full(n, count[src] - 1), apart[src])
        with_unit = self.ms((code_sum[dsts][None] + codes[:, None]).reshape(n * m, -1),
                            (time_sum[dsts][None] + times[:, None]).reshape(n * m, -1),
                            np.tile(count[dsts] + 1, n), np.tile(apart[dsts], n)).reshape(n, m)
        return without, with_unit

    def refine(self, units: list[Unit], where: np.ndarray, codes: np.ndarray, times: np.ndarray,
               need: np.ndarray, sums: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
               mem: np.ndarray) -> None:
        """Move units off the predicted-slowest rank while that lowers the pair's larger cost (in place;
        ``sums``: codes, own times, counts and the ms priced apart, as :meth:`move_costs` takes them)."""
        world = self.world
        code_sum, time_sum, count, _ = sums
        for _ in range(2 * len(units)):
            rank_ms = self.ms(*sums)
            src = int(np.argmax(rank_ms))
            mine = np.flatnonzero(where == src)
            if len(mine) == 0:
                return
            src_after, dst_after = self.move_costs(sums, codes[mine], times[mine], src, np.arange(world))
            new_max = np.maximum(src_after[:, None], dst_after)
            fits = mem[None, :] + need[mine][:, None] <= self.cap
            new_max[~fits] = np.inf
            new_max[:, src] = np.inf
            k, dst = np.unravel_index(int(np.argmin(new_max)), new_max.shape)
            if not new_max[k, dst] < rank_ms[src] * 0.999:
                return
            i = int(mine[k])
            for arr, val in ((code_sum, codes[i]), (time_sum, times[i])):
                arr[src] -= val
                arr[dst] += val
            count[src] -= 1
            count[dst] += 1
            mem[src] -= need[i]
            mem[dst] += need[i]
            where[i] = dst

    def best_over_grid(self, units: list[Unit], fixed: list[TableSharding],
                       grid: tuple[float, ...] = GRID) -> tuple[float, list[TableSharding]] | None:
        best = None
        for by_size in (False, True):  # size order only when the cost order cannot pack the task
            for balance in grid:
                tables = self.place(units, fixed, balance, by_size)
                if tables is None:
                    continue
                cost = self.est.estimate(Plan(task=self.task, tables=tuple(tables))).max_ms
                if best is None or cost < best[0]:
                    best = (cost, tables)
            if best is not None:
                return best
        return best
