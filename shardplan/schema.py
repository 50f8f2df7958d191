"""Pydantic models of the ``shardplan/task@1`` and ``shardplan/plan@1`` files.

These models are the one schema: :mod:`shardplan.formats` reads files with
them and the REST service publishes them in its OpenAPI document. Unknown
fields are allowed and kept (DESIGN.md). Numbers are strict: ``"1000"`` is not
a row count.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from .domain import DTYPE_BYTES, OPTIMIZERS, SHARDING_TYPES

TASK_FORMAT = "shardplan/task@1"
PLAN_FORMAT = "shardplan/plan@1"



def _json_integer(value: Any) -> Any:
    """JSON Schema's "integer" includes 1000.0; strings and booleans stay errors (strict below)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


PosInt = Annotated[int, Field(strict=True, gt=0), BeforeValidator(_json_integer)]
NonNegInt = Annotated[int, Field(strict=True, ge=0), BeforeValidator(_json_integer)]
NonNegFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]
PosFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class TableModel(_Open):
    name: Annotated[str, Field(min_length=1)]
    num_embeddings: PosInt
    # multipleOf is published in the schema; the validator below keeps the message that says the fix.
    embedding_dim: Annotated[int, Field(strict=True, gt=0, json_schema_extra={"multipleOf": 4}),
                             BeforeValidator(_json_integer)]
    pooling_factor: NonNegFloat
    zipf_alpha: NonNegFloat = 0.0
    sharding_types: Optional[Annotated[list[Literal[SHARDING_TYPES]],  # type: ignore[valid-type]
                                       Field(min_length=1)]] = Field(
        default=None, description="the only ways a plan may shard this table (default: any)")

    @model_validator(mode="after")
    def _dim_multiple_of_4(self) -> "TableModel":
        if self.embedding_dim % 4:
            raise ValueError(
                f"embedding_dim {self.embedding_dim} is not a multiple of 4, which FBGEMM's "
                "table-batched kernels require; pad it to the next multiple of 4")
        return self


class TopologyModel(_Open):
    world_size: PosInt
    local_world_size: Optional[PosInt] = None
    device: Literal["cpu", "cuda"] = "cpu"
    memory_per_rank_gb: Optional[PosFloat] = None

    @model_validator(mode="after")
    def _hosts(self) -> "TopologyModel":
        lws = self.local_world_size or self.world_size
        if self.world_size % lws:
            raise ValueError(
                f"local_world_size {lws} does not divide world_size {self.world_size}; "
                "every host must hold the same number of ranks")
        return self


class TaskModel(_Open):
    format: Literal["shardplan/task@1"]
    name: str = "task"
    tables: Annotated[list[TableModel], Field(min_length=1)]
    topology: TopologyModel
    batch_size_per_rank: PosInt = 512
    optimizer: Literal[OPTIMIZERS] = "sgd"  # type: ignore[valid-type]
    dtype: Literal[tuple(DTYPE_BYTES)] = "fp32"  # type: ignore[valid-type]

    @field_validator("tables")
    @classmethod
    def _unique_names(cls, tables: list[TableModel]) -> list[TableModel]:
        seen: set[str] = set()
        for t in tables:
            if t.name in seen:
                raise ValueError(f"table name {t.name!r} appears twice; table names must be unique")
            seen.add(t.name)
        return tables


class ShardModel(_Open):
    rank: NonNegInt
    row_offset: NonNegInt
    num_rows: PosInt
    col_offset: NonNegInt
    num_cols: PosInt


class TableShardingModel(_Open):
    name: str
    sharding_type: Literal[SHARDING_TYPES]  # type: ignore[valid-type]
    compute_kernel: str = "fused"
    shards: Annotated[list[ShardModel], Field(min_length=1)]


class RankCostModel(_Open):
    rank: NonNegInt
    fwd_compute_ms: NonNegFloat
    bwd_compute_ms: NonNegFloat
    fwd_comm_ms: NonNegFloat
    bwd_comm_ms: NonNegFloat
    memory_gb: NonNegFloat


class CostModel(_Open):
    kind: Literal["predicted", "measured"]
    profile: str
    max_ms: NonNegFloat
    per_rank: list[RankCostModel]


class PlanModel(_Open):
    format: Literal["shardplan/plan@1"]
    task: TaskModel
    tables: list[TableShardingModel]
    cost: Optional[CostModel] = None
    measured_cost: Optional[CostModel] = None
    search: Optional[dict[str, Any]] = None
