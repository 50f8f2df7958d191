"""Training the compute-cost model from committed data, and reporting its accuracy.

``shardplan train`` = :func:`train_and_report`: load the profile's
``compute.parquet``, divide each sample's times by the machine's slowdown while
it was taken (read off the reference workload timed beside it), split it deterministically (a sample is held out when a
hash of its seed and index falls in the last 15%), fit the neural model and the
two baselines on the training part, score all three on the held-out part and
on ``compute-large.parquet`` (sets larger than any in training), save the
model with its metadata and write the report (JSON + markdown).
"""
from __future__ import annotations

import datetime as _dt
import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from ..formats import write_json_atomic
from .baselines import GBMCostModel, RooflineCostModel
from .kernel import REFERENCE_SPECS, slowdown
from .model import NeuralCostModel
from .profiles import Profile
from .specs import ShardSpec, specs_from_json

HOLDOUT_FRACTION = 0.15


REFERENCE_PERCENTILE = 5


def reference_nominal(df: pd.DataFrame) -> float:
    """The quiet machine's reference time: a low percentile of every reference timing in the data."""
    return float(np.percentile(np.concatenate([df["ref_before_ms"], df["ref_after_ms"]]), REFERENCE_PERCENTILE))


def load_sets(path: Path, nominal: float | None = None
              ) -> tuple[list[list[ShardSpec]], np.ndarray, np.ndarray, pd.DataFrame]:
    """Shard sets and their fwd/bwd ms; with ``nominal``, divided by each sample's slowdown."""
    df = pd.read_parquet(path)
    sets = [specs_from_json(s) for s in df["shards"]]
    fwd, bwd = df["fwd_ms"].to_numpy(), df["bwd_ms"].to_numpy()
    if nominal is not None:
        factor = slowdown(df["ref_before_ms"].to_numpy(), df["ref_after_ms"].to_numpy(), nominal)
        fwd, bwd = fwd / factor, bwd / factor
    return sets, fwd, bwd, df


def is_holdout(seed: int, sample: int) -> bool:
    h = hashlib.sha256(f"{seed}:{sample}".encode()).digest()
    return int.from_bytes(h[:4], "little") / 2**32 >= 1.0 - HOLDOUT_FRACTION


def metrics(pred_f: np.ndarray, pred_b: np.ndarray, fwd: np.ndarray, bwd: np.ndarray) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, p, y in (("fwd", pred_f, fwd), ("bwd", pred_b, bwd),
                       ("fwd+bwd", pred_f + pred_b, fwd + bwd)):
        out[name] = {"mape": float(np.mean(np.abs(p - y) / y)),
                     "spearman": float(spearmanr(p, y).statistic)}
    return out


def train_and_report(profile: Profile, epochs: int = 300, seed: int = 0, data_dir: Path | None = None,
                     out_dir: Path | None = None, progress: bool = True) -> dict[str, Any]:
    """Train on ``data_dir`` (default: the profile's folder), write model and report to ``out_dir``."""
    data_dir = data_dir or profile.dir
    out_dir = out_dir or data_dir
    nominal = reference_nominal(pd.read_parquet(data_dir / "compute.parquet", columns=["ref_before_ms", "ref_after_ms"]))
    sets, fwd, bwd, df = load_sets(data_dir / "compute.parquet", nominal)
    raw_f, raw_b = df["fwd_ms"].to_numpy(), df["bwd_ms"].to_numpy()
    hold = np.array([is_holdout(s, i) for s, i in zip(df["seed"], df["sample"])])
    tr = np.flatnonzero(~hold)
    te = np.flatnonzero(hold)
    pick = lambda idx: [sets[i] for i in idx]  # noqa: E731

    models = {
        "neural": NeuralCostModel(profile=profile.name, epochs=epochs, seed=seed),
        "roofline (TorchRec form)": RooflineCostModel(),
        "gbm (hand features)": GBMCostModel(seed=seed),
    }
    for name, m in models.items():
        if isinstance(m, NeuralCostModel):
            m.fit(pick(tr), fwd[tr], bwd[tr], progress=progress)
        else:
            m.fit(pick(tr), fwd[tr], bwd[tr])

    evals: dict[str, dict[str, Any]] = {}
    splits = {"holdout": (pick(te), fwd[te], bwd[te]),
              "holdout, raw labels (machine drift left in)": (pick(te), raw_f[te], raw_b[te])}
    large_path = data_dir / "compute-large.parquet"
    if large_path.exists():
        lsets, lf, lb, _ = load_sets(large_path, nominal)
        splits["larger_sets"] = (lsets, lf, lb)
    for split, (s, f, b) in splits.items():
        evals[split] = {"n": len(s), "num_shards": [min(map(len, s)), max(map(len, s))],
                        "models": {name: metrics(*m.predict(s), f, b) for name, m in models.items()}}

    neural = models["neural"]
    meta = {
        "profile": profile.name,
        "trained_on": f"data/profiles/{profile.name}/compute.parquet" if data_dir == profile.dir
                      else str(data_dir / "compute.parquet"),
        "train_samples": int(len(tr)), "holdout_samples": int(len(te)),
        "train_num_shards": [int(df["num_shards"].min()), int(df["num_shards"].max())],
        "data_stamp": {k: sorted(map(str, df[k].unique()))[:3] for k in
                       ("cpu_model", "cpu_cores", "torch", "fbgemm_gpu", "threads", "optimizer")},
        "optimizers": sorted(df["optimizer"].unique()),
        "reference_ms": nominal,
        "labels": ("measured ms divided by the machine's slowdown during the sample: the mean of the "
                   "reference workload's times just before and after it, over the quiet reference "
                   f"(the {REFERENCE_PERCENTILE}th percentile of all reference times, {nominal:.4f} ms)"),
        "evaluation": evals,
        "command": f"shardplan train --profile {profile.name} --epochs {epochs} --seed {seed}",
        "date": _dt.date.today().isoformat(),
    }
    neural.save(out_dir / "compute-model.json", meta)
    write_json_atomic(out_dir / "reference.json", {
        "reference_ms": nominal, "specs": [vars(s) for s in REFERENCE_SPECS],
        "how": f"{REFERENCE_PERCENTILE}th percentile of the reference timings in compute.parquet",
        "command": meta["command"]})
    write_json_atomic(out_dir / "compute-model-report.json", meta)
    (out_dir / "compute-model-report.md").write_text(report_markdown(meta))
    return meta


def report_markdown(meta: dict[str, Any]) -> str:
    lines = [f"# Compute-cost model report: profile `{meta['profile']}`", "",
             f"Trained by `{meta['command']}` on {meta['train_samples']} real FBGEMM samples of "
             f"`{meta['trained_on']}` (sets of {meta['train_num_shards'][0]} to "
             f"{meta['train_num_shards'][1]} shards); date {meta['date']}.",
             "All targets are measured kernel times; every figure below compares a model's "
             "prediction with them. Labels: " + meta["labels"] + ". The raw-label split shows the same "
             "held-out sets against the undivided times.", ""]
    for split, ev in meta["evaluation"].items():
        lines += [f"## {split}: {ev['n']} sets of {ev['num_shards'][0]} to {ev['num_shards'][1]} shards", "",
                  "| model | fwd MAPE | fwd Spearman | bwd MAPE | bwd Spearman | fwd+bwd MAPE | fwd+bwd Spearman |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for name, m in ev["models"].items():
            cells = [f"{m[k]['mape'] * 100:.1f}% | {m[k]['spearman']:.3f}" for k in ("fwd", "bwd", "fwd+bwd")]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)
