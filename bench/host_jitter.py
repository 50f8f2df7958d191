"""How much of a GPU model's held-out error is the host's launch jitter in its labels.

Reads ``data/profiles/<profile>/compute.parquet`` (measured: FBGEMM CUDA kernels, CUDA events) and,
for each model file named (predicted), prints and writes two tables: how the model's held-out log
error moves with the reference workload timed beside each sample (correlation and slope, by band of
the measured fwd+bwd ms), and its held-out MAPE and Spearman against the labels as timed and against
the labels less the jitter (:class:`shardplan.cost.host_state.HostStateAdjustment`, read on the
training split only, as ``shardplan train`` reads it). Writes ``bench/results/host-jitter-<profile>.md``.

    .venv/bin/python bench/host_jitter.py --profile h200 \\
        --models data/profiles/h200/candidates/session-41-raw-labels/compute-model.json \\
                 data/profiles/h200/compute-model.json
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from shardplan.cost.host_state import HostStateAdjustment, sample_reference_ms
from shardplan.cost.model import NeuralCostModel
from shardplan.cost.profiles import get_profile
from shardplan.cost.split import holdout_mask
from shardplan.cost.train import load_sets, metric_cells, metrics
from shardplan.errors import exit_status
from shardplan.formats import write_text_atomic

BANDS_MS = ((0.0, 1.0), (1.0, 2.0), (2.0, 4.0), (4.0, np.inf))


def length_bands(ms: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """Every row ("all"), then each band of ``BANDS_MS``: a label and the rows whose ms fall in it."""
    return [("all", np.ones(len(ms), dtype=bool))] + [(f"{lo:g}-{hi:g}", (ms >= lo) & (ms < hi))
                                                       for lo, hi in BANDS_MS]


def jitter_report(profile: str, models: list[Path], out: Path = Path("bench/results"), seed: int = 0) -> str:
    path = get_profile(profile).dir / "compute.parquet"
    sets, fwd, bwd, df = load_sets(path, None)
    hold = holdout_mask(df)
    tr, te = np.flatnonzero(~hold), np.flatnonzero(hold)
    ref = sample_reference_ms(df)
    adj = HostStateAdjustment.fit([sets[i] for i in tr], fwd[tr], bwd[tr], ref[tr], seed=seed)
    adj_f, adj_b = adj.apply(sets, fwd, bwd, ref)
    held = [sets[i] for i in te]
    log_ref = np.log(ref[te] / adj.median_reference_ms)
    measured = fwd[te] + bwd[te]
    argv = " ".join(str(m) for m in models)
    lines = [f"# Host jitter in `{profile}`'s labels ({len(te)} held-out sets of {len(df)})", "",
             f"Command: `.venv/bin/python bench/host_jitter.py --profile {profile} --models {argv}`", "",
             "Measured: each held-out set's fwd and bwd ms (CUDA events), and the reference workload's ms "
             "timed just before and after it (geometric mean). Predicted: each model file's fwd and bwd ms. "
             "Adjusted labels, as `shardplan train` makes them: " + adj.describe() + ".", "",
             "## The model's held-out log error against the reference's log excess over its median", "",
             "| model | band (measured fwd+bwd ms) | sets | correlation | slope |", "| --- | --- | --- | --- | --- |"]
    scores = []
    for model_path in models:
        model = NeuralCostModel.load(model_path, profile=profile)
        pf, pb = model.predict(held, random_level=True)
        err = np.log((pf + pb) / measured)
        for band, rows in length_bands(measured):
            corr = np.corrcoef(err[rows], log_ref[rows])[0, 1]
            slope = np.polyfit(log_ref[rows], -err[rows], 1)[0]
            lines.append(f"| `{model_path}` | {band} | {int(rows.sum())} | {corr:.3f} | {slope:.3f} |")
        scores.append((model_path, metrics(pf, pb, fwd[te], bwd[te]), metrics(pf, pb, adj_f[te], adj_b[te])))
    lines += ["", "## Held-out MAPE and Spearman, against the labels as timed and less the jitter", "",
              "| model | labels | fwd MAPE | fwd Spearman | bwd MAPE | bwd Spearman | fwd+bwd MAPE "
              "| fwd+bwd Spearman |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for model_path, raw, adjusted in scores:
        for name, m in (("as timed", raw), ("less the jitter", adjusted)):
            lines.append(f"| `{model_path}` | {name} | {metric_cells(m)} |")
    text = "\n".join(lines) + "\n"
    write_text_atomic(out / f"host-jitter-{profile}.md", text)
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="h200")
    ap.add_argument("--models", nargs="+", type=Path, required=True, help="compute model files to score")
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    args = ap.parse_args(argv)
    print(jitter_report(args.profile, args.models, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(exit_status(main))
