"""Several neural cost models, trained alike but for their seed, priced as one.

Each member's within-plan error is partly its own (where a seed's fit happens
to land between the labels); averaging members trained on the same data with
different seeds cancels that part and keeps what they share. The ensemble's
time is the geometric mean of its members' (their mean log time), since each
was fitted on log time.

It offers what a searcher uses of :class:`~shardplan.cost.model.NeuralCostModel`:
``predict`` for whole sets, and ``encode_shards``/``combine`` for the
incremental sums, where a shard's code is its members' codes side by side (sums
of codes stay each member's sums) and ``combine`` prices each member's slice.

A saved ensemble is a small JSON file naming its member model files, relative
to itself::

    {"format": "shardplan/compute-ensemble@1", "profile": "cpu-2c",
     "members": ["compute-model.json", "ensemble/seed-1.json", ...]}
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from ..formats import write_text_atomic
from .model import NeuralCostModel
from .specs import ShardSpec

ENSEMBLE_FORMAT = "shardplan/compute-ensemble@1"


class EnsembleCostModel:
    """The geometric mean of ``members``' predicted forward and backward ms (one profile)."""

    def __init__(self, members: list[NeuralCostModel], metadata: dict[str, Any] | None = None) -> None:
        if not members:
            raise InputError("members", "an ensemble needs at least one model", "give one or more model files")
        profiles = {m.profile for m in members}
        if len(profiles) != 1:
            raise InputError("members", f"models of several profiles {sorted(profiles)}",
                             "ensemble models of one profile only")
        self.members = members
        self.profile = members[0].profile
        self.split_batches = members[0].split_batches
        if any(m.split_batches != self.split_batches for m in members):
            raise InputError("members", "members disagree on split_batches", "train them with one recipe")
        self._codes = np.cumsum([0] + [m.code for m in members])
        self.code = int(self._codes[-1])
        self.times_width = 2 * len(members)
        self.metadata = {**members[0].metadata, **(metadata or {}),
                         "ensemble_of": [m.metadata.get("command", "?") for m in members]}

    def predict(self, sets: list[list[ShardSpec]], random_level: bool = False) -> tuple[np.ndarray, np.ndarray]:
        preds = [m.predict(sets, random_level=random_level) for m in self.members]
        f = np.stack([p[0] for p in preds])
        b = np.stack([p[1] for p in preds])
        return _geomean(f), _geomean(b)

    def encode_shards(self, specs: list[ShardSpec]) -> tuple[np.ndarray, np.ndarray]:
        parts = [m.encode_shards(specs) for m in self.members]
        return np.concatenate([c for c, _ in parts], axis=1), np.concatenate([t for _, t in parts], axis=1)

    def combine(self, code_sum: np.ndarray, time_sum: np.ndarray, count: np.ndarray) -> np.ndarray:
        code_sum, time_sum = np.asarray(code_sum), np.asarray(time_sum)
        each = np.stack([m.combine(code_sum[:, self._codes[k]:self._codes[k + 1]], time_sum[:, 2 * k:2 * k + 2], count)
                         for k, m in enumerate(self.members)])
        return _geomean(each)

    def save(self, path: str | Path, member_paths: list[str | Path]) -> None:
        """Write the manifest naming ``member_paths`` (saved already), relative to ``path``'s folder."""
        path = Path(path)
        rel = [str(Path(p).resolve().relative_to(path.parent.resolve())) for p in member_paths]
        write_text_atomic(path, json.dumps({"format": ENSEMBLE_FORMAT, "profile": self.profile, "members": rel,
                                            "metadata": self.metadata}, indent=1))

    @classmethod
    def load(cls, path: str | Path, profile: str | None = None) -> "EnsembleCostModel":
        path = Path(path)
        try:
            state = json.loads(path.read_text())
            members = [NeuralCostModel.load(path.parent / p, profile=profile) for p in state["members"]]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise InputError(str(path), f"not a usable compute-model ensemble: {e}",
                             "rebuild it with `shardplan train --ensemble`") from None
        return cls(members, state.get("metadata"))


def _geomean(x: np.ndarray) -> np.ndarray:
    """Geometric mean over the first axis; 0 where any member says 0 (an empty set)."""
    out = np.exp(np.log(np.maximum(x, 1e-12)).mean(axis=0))
    return np.where((x > 0).all(axis=0), out, 0.0)


def load_compute_model(path: str | Path, profile: str | None = None) -> NeuralCostModel | EnsembleCostModel:
    """A model file or an ensemble manifest, whichever ``path`` holds."""
    path = Path(path)
    try:
        fmt = json.loads(path.read_text()).get("format")
    except (OSError, ValueError, AttributeError):
        fmt = None  # NeuralCostModel.load names what is wrong
    if fmt == ENSEMBLE_FORMAT:
        return EnsembleCostModel.load(path, profile)
    return NeuralCostModel.load(path, profile)
