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


def column_sharding(table: Table, shards: list[Shard]) -> TableSharding:
    """``table`` as the full-height blocks ``shards``, in column order: table-wise where one block holds all
    its columns and the task allows that, else column-wise (one block included, where the task asks)."""
    whole = len(shards) == 1 and shards[0].num_cols == table.embedding_dim and table.allows("table_wise")
    return TableSharding(table.name, "table_wise" if whole else "column_wise",
                         tuple(sorted(shards, key=lambda s: s.col_offset)))


def replicas(table: Table, world_size: int) -> TableSharding:
    """``table`` data-parallel: a full copy on every rank."""
    return TableSharding(table.name, "data_parallel", tuple(
        Shard(r, 0, table.num_embeddings, 0, table.embedding_dim) for r in range(world_size)))


def goes_whole(table: Table) -> bool:
    """Whether the task lets one rank hold ``table`` whole: table-wise, or as one column block."""
    return table.allows("table_wise") or table.allows("column_wise")


def whole_on(table: Table, rank: int) -> TableSharding:
    """``table`` whole on ``rank``: table-wise, or one column block where the task allows column_wise but
    not table_wise (the same shard and memory; the type is the task's word)."""
    return column_sharding(table, [Shard(rank, 0, table.num_embeddings, 0, table.embedding_dim)])


# The order in which a table that no rank takes whole is spread: row slices over every rank (TorchRec's
# fallback for a table too big for one), slices over one host's ranks, then a replica on every rank.
SPREAD_TYPES = ("row_wise", "table_row_wise", "data_parallel")


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
        out.append(column_sharding(table, shards))
    return out


class MemoryLedger:
    """Per-rank bytes used, with the placement helpers every simple searcher needs."""

    def __init__(self, task: Task) -> None:
        self.task = task
        self.cap = capacity_bytes(task)
        self.used = [0.0] * task.topology.world_size

    def fits(self, rank: int, nbytes: float) -> bool:
        return self.used[rank] + nbytes <= self.cap

    def whole_ranks(self, table: Table) -> list[int]:
        """The ranks with room for ``table`` whole; none where the task lets no rank hold it whole."""
        if not goes_whole(table):
            return []
        need = table_bytes(self.task, table)
        return [r for r in range(len(self.used)) if self.fits(r, need)]

    def place_whole(self, table: Table, rank: int) -> TableSharding:
        self.used[rank] += table_bytes(self.task, table)
        return whole_on(table, rank)

    def place_spread(self, table: Table) -> TableSharding:
        """``table`` spread over ranks, the first of :data:`SPREAD_TYPES` the task allows it and memory
        holds, or raise why it cannot fit. Table-row-wise goes to the host whose fullest rank has the most room."""
        tried = []
        for kind in SPREAD_TYPES:
            if not table.allows(kind):
                continue
            ts = self._spread(table, kind)
            need = [shard_bytes(self.task, table, kind, s) for s in ts.shards]
            if all(self.fits(s.rank, b) for s, b in zip(ts.shards, need)):
                for s, b in zip(ts.shards, need):
                    self.used[s.rank] += b
                return ts
            tried.append(kind)
        size = f"{table.name!r} needs {table_bytes(self.task, table) / GB:.3f} GB"
        field = self.task.table_field(table.name)
        if not tried:
            raise InfeasibleError(
                f"{field}.sharding_types", f"{size}, fits no rank's remaining memory whole, and no "
                f"split of it is allowed ({list(table.sharding_types or ())})",
                "allow row_wise for it (the task's sharding_types, or the plan's), or raise "
                "topology.memory_per_rank_gb")
        raise InfeasibleError(
            field, f"{size} and fits no rank's remaining memory whole, nor spread "
            f"{', '.join(tried)}", "raise topology.memory_per_rank_gb or add ranks")

    def place_fixed(self, tables: list[Table]) -> list[TableSharding]:
        """The tables that no rank may hold whole, spread before any choice is made: they leave the
        searcher nothing to choose, and their pieces take memory on every rank they touch."""
        return [self.place_spread(t) for t in tables if not goes_whole(t)]

    def _spread(self, table: Table, kind: str) -> TableSharding:
        topo = self.task.topology
        if kind == "data_parallel":
            return replicas(table, topo.world_size)
        ranks = list(range(topo.world_size))
        if kind == "table_row_wise":  # on one host, the same slices as row-wise
            host = min(range(topo.num_hosts), key=lambda h: (max(self.used[r] for r in topo.host_ranks(h)), h))
            ranks = topo.host_ranks(host)
        return TableSharding(table.name, kind, row_wise_shards(table, ranks))
