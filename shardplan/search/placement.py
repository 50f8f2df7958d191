"""Placement helpers shared by the searchers: shard layouts and a per-rank memory ledger."""
from __future__ import annotations

from ..domain import Shard, Table, TableSharding, Task
from ..errors import InfeasibleError
from ..memory import GB, capacity_bytes, shard_bytes, table_bytes


def row_wise_shards(table: Table, ranks: list[int]) -> tuple[Shard, ...]:
    """Even row blocks over ``ranks`` (TorchRec's row-wise block size: ceil(rows / n))."""
    block = -(-table.num_embeddings // len(ranks))
    shards = []
    for i, r in enumerate(ranks):
        start = i * block
        rows = min(block, table.num_embeddings - start)
        if rows > 0:
            shards.append(Shard(rank=r, row_offset=start, num_rows=rows, col_offset=0,
                                num_cols=table.embedding_dim))
    return tuple(shards)


def table_wise(table: Table, rank: int) -> TableSharding:
    return TableSharding(table.name, "table_wise",
                         (Shard(rank, 0, table.num_embeddings, 0, table.embedding_dim),))


def merge_colocated_blocks(task: Task, tables: list[TableSharding]) -> list[TableSharding]:
    """``tables`` with each rank's column blocks of one table joined into one block (a table all of
    whose blocks sit on one rank becomes table-wise again).

    Every column block is its own table in the rank's fused op and reads all of its table's ids, so
    two blocks on one rank do the id work twice for nothing: on the 13 such ranks of the default's
    plans of the bench suites, the joined block ran 0.81-1.00x the blocks (median 0.90) and never
    slower (``bench/colocated_blocks.py``, 2026-11-23).
    Blocks are re-tiled in column order of their first block; memory is unchanged (the same columns
    stay on the same rank).
    """
    out = []
    for ts in tables:
        ranks = [sh.rank for sh in ts.shards]
        if ts.sharding_type != "column_wise" or len(set(ranks)) == len(ranks):
            out.append(ts)
            continue
        table = task.table(ts.name)
        width: dict[int, int] = {}
        for sh in sorted(ts.shards, key=lambda sh: sh.col_offset):
            width[sh.rank] = width.get(sh.rank, 0) + sh.num_cols  # dict order: first block's column order
        shards, offset = [], 0
        for rank, cols in width.items():
            shards.append(Shard(rank, 0, table.num_embeddings, offset, cols))
            offset += cols
        whole = len(shards) == 1 and table.allows("table_wise")  # else one block, column-wise as the task asks
        out.append(TableSharding(ts.name, "table_wise" if whole else "column_wise", tuple(shards)))
    return out


class MemoryLedger:
    """Per-rank bytes used, with the placement helpers every simple searcher needs."""

    def __init__(self, task: Task) -> None:
        self.task = task
        self.cap = capacity_bytes(task)
        self.used = [0.0] * task.topology.world_size

    def fits(self, rank: int, nbytes: float) -> bool:
        return self.used[rank] + nbytes <= self.cap

    def place_whole(self, table: Table, rank: int) -> TableSharding:
        self.used[rank] += table_bytes(self.task, table)
        return table_wise(table, rank)

    def place_row_wise(self, table: Table) -> TableSharding:
        """Split ``table`` by rows over all ranks, or raise why it cannot fit."""
        ts = TableSharding(table.name, "row_wise", row_wise_shards(table, list(range(len(self.used)))))
        need = [shard_bytes(self.task, table, "row_wise", s) for s in ts.shards]
        if any(not self.fits(s.rank, b) for s, b in zip(ts.shards, need)):
            raise InfeasibleError(
                f"tables.{table.name}", f"needs {table_bytes(self.task, table) / GB:.3f} GB and fits no rank's "
                f"remaining memory, even split row-wise over all {len(self.used)} ranks",
                "raise topology.memory_per_rank_gb or add ranks")
        for s, b in zip(ts.shards, need):
            self.used[s.rank] += b
        return ts
