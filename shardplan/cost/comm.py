"""Communication cost: what each rank sends and receives, and what that costs.

:func:`rank_volumes` turns a plan into per-rank byte counts (forward; the
backward moves the gradients of the same tensors the other way, plus the
gradient all-reduce of data-parallel tables). A :class:`CommModel` prices those
volumes in ms. Two models:

* :class:`FittedCommModel`: a linear fit to real all-to-all timings measured on
  the profile's machine (``shardplan collect comm``: torch.distributed over
  gloo, several processes, uneven splits); used where the hardware can be
  measured (``cpu-2c``).
* :class:`AlphaBetaCommModel`: latency + bytes / bandwidth with published
  bandwidths, for hardware that cannot be measured here (NVLink inside a host,
  InfiniBand between hosts). Its figures are modelled, never measured.

Volume rules (B_l = batch per rank, B_g = global batch, c = a shard's columns,
4-byte floats, W ranks, L ranks per host):

* table-wise / column-wise shard on rank r: r computes the pooled B_g x c block
  and sends each other rank its B_l x c slice; every other rank receives one.
* row-wise shard: every rank holds partial sums of the B_g x c block; the
  reduce-scatter sends and receives B_l x c to and from each other rank.
* table-row-wise shard (rows over host h): partial sums are reduce-scattered
  inside h, then each of h's ranks sends its reduced part to the other hosts'
  ranks (modelled as sending B_l x c to each of them, spread over h's ranks).
* data-parallel: no forward traffic; the backward all-reduces the table's
  gradient (ring: 2 (W-1)/W of its bytes sent and received per rank).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from ..domain import Plan, Topology
from ..errors import InputError
from ..formats import write_text_atomic

FLOAT_BYTES = 4


@dataclass
class RankVolume:
    """Bytes one rank moves in the forward all-to-all (intra-host and inter-host), and all-reduce bytes."""

    send_intra: float = 0.0
    send_inter: float = 0.0
    recv_intra: float = 0.0
    recv_inter: float = 0.0
    allreduce: float = 0.0

    @property
    def send(self) -> float:
        return self.send_intra + self.send_inter

    @property
    def recv(self) -> float:
        return self.recv_intra + self.recv_inter


def rank_volumes(plan: Plan) -> list[RankVolume]:
    """Per-rank forward volumes of ``plan`` (see the module docstring for the rules).

    Every destination of a shard's output gets the same slice, so it suffices
    to total, per source rank, the bytes it sends to each same-host peer
    (``to_local``) and to each other-host rank (``to_remote``); what a rank
    receives is then its host's and the world's totals minus its own.
    """
    task, topo = plan.task, plan.task.topology
    world, local = topo.world_size, topo.local_world_size
    b_l = task.batch_size_per_rank
    to_local = np.zeros(world)
    to_remote = np.zeros(world)
    allreduce = 0.0
    for ts in plan.tables:
        if ts.sharding_type == "data_parallel":
            t = task.table(ts.name)
            allreduce += 2 * (world - 1) / world * t.num_embeddings * t.embedding_dim * FLOAT_BYTES
            continue
        for sh in ts.shards:
            slice_bytes = b_l * sh.num_cols * FLOAT_BYTES
            to_local[sh.rank] += slice_bytes
            # A table-row-wise group's reduced output leaves the host spread over its members.
            to_remote[sh.rank] += slice_bytes / len(ts.shards) if ts.sharding_type == "table_row_wise" else slice_bytes
    host_local = to_local.reshape(-1, local).sum(axis=1)
    host_remote = to_remote.reshape(-1, local).sum(axis=1)
    vols = []
    for r in range(world):
        h = topo.host_of(r)
        vols.append(RankVolume(send_intra=float(to_local[r] * (local - 1)),
                               send_inter=float(to_remote[r] * (world - local)),
                               recv_intra=float(host_local[h] - to_local[r]),
                               recv_inter=float(host_remote.sum() - host_remote[h]),
                               allreduce=allreduce))
    return vols


class CommModel(Protocol):
    """Prices a plan's per-rank volumes: ``rank_comm_ms`` gives (fwd_ms, bwd_ms) per rank."""

    name: str
    kind: str

    def rank_comm_ms(self, vols: list[RankVolume], topo: Topology) -> list[tuple[float, float]]: ...


def _needs_a2a(vols: list[RankVolume]) -> bool:
    return any(v.send or v.recv for v in vols)


@dataclass
class FittedCommModel:
    """``t = a + b (W-1) + c MB_sent + d MB_received + e MB_peak`` (all >= 0), fitted to measured all-to-alls.

    ``MB_peak`` is the largest volume any rank of the collective sends or
    receives: an all-to-all synchronises its ranks, so each one waits for the
    busiest. The fit minimises relative error (weights 1/t^2), because plan
    volumes span three orders of magnitude. All-reduce volume is priced as the
    same number of bytes sent and received by every rank.
    """

    coef: tuple[float, ...]
    profile: str
    fit_report: dict = field(default_factory=dict)
    name: str = "fitted-gloo-all-to-all"
    kind: str = "predicted from measured all-to-all"

    def _ms(self, world: int, send: float, recv: float, peak: float) -> float:
        a, b, c, d, e = self.coef
        return a + b * (world - 1) + (c * send + d * recv + e * peak) / 1e6

    def rank_comm_ms(self, vols: list[RankVolume], topo: Topology) -> list[tuple[float, float]]:
        if topo.world_size == 1:
            return [(0.0, 0.0)]
        w = topo.world_size
        peak = max(max(v.send, v.recv) for v in vols)
        ar_peak = max(v.allreduce for v in vols)
        out = []
        for v in vols:
            fwd = self._ms(w, v.send, v.recv, peak) if peak else 0.0
            bwd = self._ms(w, v.recv, v.send, peak) if peak else 0.0
            if v.allreduce:
                bwd += self._ms(w, v.allreduce, v.allreduce, ar_peak)
            out.append((fwd, bwd))
        return out

    @staticmethod
    def _features(rows: list[dict]) -> np.ndarray:
        peak: dict[tuple, float] = {}
        for r in rows:
            key = (r["world_size"], r["config"])
            peak[key] = max(peak.get(key, 0.0), r["send_bytes"], r["recv_bytes"])
        return np.array([[r["world_size"] - 1, r["send_bytes"] / 1e6, r["recv_bytes"] / 1e6,
                          peak[(r["world_size"], r["config"])] / 1e6] for r in rows])

    @classmethod
    def fit(cls, rows: list[dict], profile: str) -> "FittedCommModel":
        from sklearn.linear_model import LinearRegression

        x = cls._features(rows)
        y = np.array([r["ms"] for r in rows])
        reg = LinearRegression(positive=True).fit(x, y, sample_weight=1.0 / y**2)
        pred = reg.predict(x)
        report = {"n": len(rows), "mape": float(np.mean(np.abs(pred - y) / y)),
                  "r2": float(reg.score(x, y))}
        return cls(coef=(max(0.0, float(reg.intercept_)), *map(float, reg.coef_)), profile=profile,
                   fit_report=report)

    def save(self, path: Path, metadata: dict) -> None:
        write_text_atomic(path, json.dumps({"format": "shardplan/comm-model@1", "model": self.name,
                                    "profile": self.profile, "coef_ms": list(self.coef),
                                    "coef_meaning": "ms = a + b*(W-1) + c*MB_sent + d*MB_received + e*MB_peak",
                                    "fit": self.fit_report, "metadata": metadata}, indent=2) + "\n")

    @classmethod
    def load(cls, path: Path, profile: str) -> "FittedCommModel":
        try:
            d = json.loads(Path(path).read_text())
            model = cls(coef=tuple(d["coef_ms"]), profile=d["profile"], fit_report=d.get("fit", {}))
            if len(model.coef) != 5:
                raise ValueError(f"expected 5 coefficients, got {len(model.coef)}")
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise InputError(str(path), f"not a usable comm model: {e}",
                             "re-run `shardplan collect comm`") from None
        if model.profile != profile:
            raise InputError(str(path), f"was fitted for profile {model.profile!r}, not {profile!r}")
        return model


@dataclass
class AlphaBetaCommModel:
    """``t = alpha + max(intra bytes / NVLink bw, inter bytes / network bw)`` per rank and direction.

    The figures, per GPU and per direction, are the profile's published ones (its ``profile.json``'s
    ``published`` block, with their sources; :func:`.estimator.comm_model_for`). The defaults are
    ``h100``'s and ``h200``'s: NVLink 4 at 450 GB/s each way, one 400 Gb/s NDR InfiniBand port per GPU
    (50 GB/s), 10 us inside a host and 20 us across. Modelled, not measured.
    """

    profile: str
    intra_gbps: float = 450.0
    inter_gbps: float = 50.0
    alpha_intra_us: float = 10.0
    alpha_inter_us: float = 20.0
    name: str = "alpha-beta"
    kind: str = "modelled (alpha-beta, published bandwidths)"

    def _ms(self, intra: float, inter: float, crosses_hosts: bool) -> float:
        alpha = self.alpha_inter_us if crosses_hosts else self.alpha_intra_us
        return alpha / 1e3 + max(intra / (self.intra_gbps * 1e9), inter / (self.inter_gbps * 1e9)) * 1e3

    def rank_comm_ms(self, vols: list[RankVolume], topo: Topology) -> list[tuple[float, float]]:
        if topo.world_size == 1:
            return [(0.0, 0.0)]
        multi = topo.num_hosts > 1
        a2a = _needs_a2a(vols)
        out = []
        for v in vols:
            fwd = self._ms(max(v.send_intra, v.recv_intra), max(v.send_inter, v.recv_inter), multi) if a2a else 0.0
            bwd = fwd
            if v.allreduce:
                # Ring all-reduce runs at the slowest link it crosses.
                bw_inter = v.allreduce if multi else 0.0
                bwd += self._ms(0.0 if multi else v.allreduce, bw_inter, multi)
            out.append((fwd, bwd))
        return out
