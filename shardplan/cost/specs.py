"""Shard specs: what the cost models and the kernel timer know about one shard.

A :class:`ShardSpec` is the meeting point of the collector (random specs), the
cost models (features of specs) and plan measurement (specs of a plan's ranks):
a plan's rank is predicted and measured from exactly the specs built here.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from ..domain import Plan, Shard, Table, Task
from ..memory import shard_batch


@dataclass(frozen=True)
class ShardSpec:
    """One shard as the kernel sees it: a ``rows x cols`` piece of a table and its lookups.

    ``table_rows`` is the whole table's row count and ``row_offset`` where the
    shard starts (a whole table: ``row_offset=0, rows=table_rows``); a
    column block is simply a shard of ``cols`` columns, since it sees every id.
    ``batch_size`` is the batch the shard is fed: the global batch, or the
    local one for a data-parallel replica.
    """

    table: str
    table_rows: int
    row_offset: int
    rows: int
    cols: int
    pooling_factor: float
    zipf_alpha: float
    batch_size: int


def shard_spec(task: Task, table: Table, sharding_type: str, shard: Shard) -> ShardSpec:
    """The spec of one shard of ``table`` placed with ``sharding_type`` in ``task``."""
    return ShardSpec(table=table.name, table_rows=table.num_embeddings, row_offset=shard.row_offset,
                     rows=shard.num_rows, cols=shard.num_cols, pooling_factor=table.pooling_factor,
                     zipf_alpha=table.zipf_alpha, batch_size=shard_batch(task, sharding_type))


def rank_specs(plan: Plan) -> list[list[ShardSpec]]:
    """Per rank, the specs of the shards it holds."""
    return [[shard_spec(plan.task, t, st, sh) for t, st, sh in items] for items in plan.rank_shards()]


def canonical(specs: list[ShardSpec]) -> tuple[ShardSpec, ...]:
    """A rank's specs in one fixed order: a rank is a set, and caches and fingerprints must see it so."""
    return tuple(sorted(specs, key=lambda x: (x.table, x.row_offset, x.rows, x.cols, x.batch_size)))


def specs_to_json(specs: list[ShardSpec]) -> str:
    return json.dumps([asdict(s) for s in specs])


def specs_from_json(text: str) -> list[ShardSpec]:
    return [ShardSpec(**d) for d in json.loads(text)]
