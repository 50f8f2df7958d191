"""Response bodies of the planning service that are not task or plan files.

Tasks and plans travel as :class:`shardplan.schema.TaskModel` and
:class:`shardplan.schema.PlanModel`, the same pydantic models that read the
files, so the OpenAPI document and DESIGN.md's formats cannot drift apart.
"""
from __future__ import annotations

from typing import Union

from pydantic import BaseModel


class SearcherInfo(BaseModel):
    name: str
    description: str
    default: bool


class ProfileInfo(BaseModel):
    name: str
    device: str
    description: str
    loaded: bool  # whether this service holds the profile's cost models (only loaded ones plan)
    default: bool = False  # the profile a request that names none gets (cpu-2c, or $SHARDPLAN_PROFILE's)
    compute_model: str | None = None
    comm_model: str | None = None
    optimizers: list[str] = []  # what its compute model's timings ran with: a task of another kind is refused
    dtypes: list[str] = []


class Health(BaseModel):
    status: str
    profiles: list[str]
    searchers: int


class ErrorItem(BaseModel):
    loc: list[Union[str, int]]
    msg: str
    type: str


class ErrorBody(BaseModel):
    """Every 4xx this service raises itself has this shape (FastAPI's request
    validation errors have the same fields)."""

    detail: list[ErrorItem]

