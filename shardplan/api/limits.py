"""What one request to the planning service may ask for.

The file formats accept any positive size; a shared service also has to bound
the work one request can cause. Every limit is a field of :class:`Limits`
(``shardplan serve`` sets them), and a request over one gets a 4xx naming the
field, the limit and the fix.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..domain import Task
from ..errors import InputError


@dataclass(frozen=True)
class Limits:
    """``max_tables`` / ``max_world_size``: per task. ``max_body_bytes``: per request body.
    ``max_budget_s``: the longest a planning request may run (a request may ask for less).
    ``workers``: planning threads; further requests wait their turn. The remaining
    bounds keep sizes inside what the cost models were built for."""

    max_tables: int = 2000
    max_world_size: int = 1024
    max_body_bytes: int = 16 * 2**20
    max_budget_s: float = 120.0
    workers: int = 2
    max_num_embeddings: int = 2**40
    max_embedding_dim: int = 4096
    max_pooling_factor: float = 10_000.0
    max_zipf_alpha: float = 10.0
    max_batch_size_per_rank: int = 2**20

    def check_task(self, task: Task, where: str = "") -> None:
        """Raise :class:`InputError` (field named) if the task is over a limit."""
        def over(field: str, value: object, limit: object, unit: str) -> InputError:
            return InputError(where + field, f"{value} {unit} is over this service's limit of {limit}",
                              "split the task, or start the service with a higher limit")

        if len(task.tables) > self.max_tables:
            raise over("tables", len(task.tables), self.max_tables, "tables")
        if task.topology.world_size > self.max_world_size:
            raise over("topology.world_size", task.topology.world_size, self.max_world_size, "ranks")
        if task.batch_size_per_rank > self.max_batch_size_per_rank:
            raise over("batch_size_per_rank", task.batch_size_per_rank, self.max_batch_size_per_rank, "samples")
        for i, t in enumerate(task.tables):
            for field, value, limit, unit in (
                    ("num_embeddings", t.num_embeddings, self.max_num_embeddings, "rows"),
                    ("embedding_dim", t.embedding_dim, self.max_embedding_dim, "columns"),
                    ("pooling_factor", t.pooling_factor, self.max_pooling_factor, "ids per sample"),
                    ("zipf_alpha", t.zipf_alpha, self.max_zipf_alpha, "(Zipf exponent)")):
                if value > limit:
                    raise over(f"tables[{i}].{field}", value, limit, unit)
