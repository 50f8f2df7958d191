"""Checking that a plan is a plan of its task, and feasible.

:func:`plan_problems` lists every problem (empty list: valid);
:func:`validate_plan` raises :class:`~shardplan.errors.InputError` on the first.
Checked: every table present once and no unknown table; ranks in range; shards
inside the table; shards tile the table exactly (no gap, no overlap), except
``data_parallel`` which lists one full copy per rank; the sharding type agrees
with the shard layout and is one the task allows the table; per-rank memory within capacity.
"""
from __future__ import annotations

from .domain import Plan, TableSharding, Table
from .errors import InputError
from .memory import rank_memory_gb


def _tiling_problems(prefix: str, table: Table, ts: TableSharding) -> list[str]:
    problems = []
    rects = [(s.row_offset, s.row_offset + s.num_rows, s.col_offset, s.col_offset + s.num_cols)
             for s in ts.shards]
    for i, (r0, r1, c0, c1) in enumerate(rects):
        if r1 > table.num_embeddings or c1 > table.embedding_dim:
            problems.append(f"{prefix}.shards[{i}]: rows [{r0},{r1}) x cols [{c0},{c1}) fall outside the "
                            f"{table.num_embeddings} x {table.embedding_dim} table")
    if problems:
        return problems
    # Exact tiling: areas add up to the table's and no two rectangles intersect.
    area = sum((r1 - r0) * (c1 - c0) for r0, r1, c0, c1 in rects)
    for i in range(len(rects)):
        for j in range(i + 1, len(rects)):
            a, b = rects[i], rects[j]
            if a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]:
                problems.append(f"{prefix}.shards[{i}] and shards[{j}] overlap")
    full = table.num_embeddings * table.embedding_dim
    if not problems and area != full:
        problems.append(f"{prefix}: shards cover {area} of the table's {full} cells, leaving a gap")
    return problems


def _type_problems(prefix: str, table: Table, ts: TableSharding, plan: Plan) -> list[str]:
    topo = plan.task.topology
    st, shards = ts.sharding_type, ts.shards
    if not table.allows(st):
        return [f"{prefix}: {st}, which the task's sharding_types for the table do not allow "
                f"({list(table.sharding_types or ())})"]
    full_rows = all(s.num_rows == table.num_embeddings for s in shards)
    full_cols = all(s.num_cols == table.embedding_dim for s in shards)
    if st == "table_wise" and len(shards) != 1:
        return [f"{prefix}: table_wise puts the whole table on one rank, but lists {len(shards)} shards"]
    if st == "column_wise" and not full_rows:
        return [f"{prefix}: column_wise shards must each hold all {table.num_embeddings} rows"]
    if st in ("row_wise", "table_row_wise") and not full_cols:
        return [f"{prefix}: {st} shards must each hold all {table.embedding_dim} columns"]
    if st == "table_row_wise" and len({topo.host_of(s.rank) for s in shards}) != 1:
        return [f"{prefix}: table_row_wise shards must all be on the ranks of one host"]
    return []


def plan_problems(plan: Plan, check_memory: bool = True) -> list[str]:
    task = plan.task
    world = task.topology.world_size
    tables = {t.name: t for t in task.tables}
    problems: list[str] = []
    seen: set[str] = set()
    for i, ts in enumerate(plan.tables):
        prefix = f"tables[{i}] ({ts.name})"
        if ts.name not in tables:
            problems.append(f"{prefix}: no table of that name in the task")
            continue
        if ts.name in seen:
            problems.append(f"{prefix}: the table appears more than once")
            continue
        seen.add(ts.name)
        table = tables[ts.name]
        bad_rank = [s.rank for s in ts.shards if s.rank >= world]
        if bad_rank:
            problems.append(f"{prefix}: rank {bad_rank[0]} is out of range for world_size {world}")
            continue
        problems += _type_problems(prefix, table, ts, plan)
        if ts.sharding_type == "data_parallel":
            full = all(s.row_offset == 0 and s.col_offset == 0 and s.num_rows == table.num_embeddings
                       and s.num_cols == table.embedding_dim for s in ts.shards)
            if not full or sorted(s.rank for s in ts.shards) != list(range(world)):
                problems.append(f"{prefix}: data_parallel lists one full copy on every rank 0..{world - 1}")
        else:
            problems += _tiling_problems(prefix, table, ts)
    missing = [n for n in tables if n not in seen]
    if missing:
        problems.append(f"tables: {len(missing)} task table(s) have no sharding, e.g. {missing[0]!r}")
    if check_memory and not problems:
        cap = task.topology.memory_per_rank_gb
        for rank, gb in enumerate(rank_memory_gb(plan)):
            if gb > cap:
                problems.append(f"rank {rank}: needs {gb:.3f} GB, over memory_per_rank_gb {cap:g}")
    return problems


def validate_plan(plan: Plan, check_memory: bool = True) -> None:
    problems = plan_problems(plan, check_memory)
    if problems:
        field, _, what = problems[0].partition(": ")
        more = f" (+{len(problems) - 1} more problems)" if len(problems) > 1 else ""
        raise InputError(field, what + more)
