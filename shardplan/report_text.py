"""Plain-text tables of plans and their costs, for the terminal."""
from __future__ import annotations

import statistics

from .domain import Plan, PlanCost

# Neighbour factors (raw over label) past this, either way, mean the host is far from the state, or not the
# machine, its profile's labels were taken on: a 2-core AMD EPYC guest of 2026-11-25 shares `cpu-2c`'s CPU name
# and ran its stored ranks at 2.0-2.4x their labels, its reference at 4.3x (docs/benchmark.md, session 39).
FAR_FACTOR = 1.5


def far_from_labels(ratio: float) -> bool:
    """Whether stored ranks timed at ``ratio`` times their labels (undivided) say another machine or state."""
    return not 1 / FAR_FACTOR <= ratio <= FAR_FACTOR


def cost_table(predicted: PlanCost | None, measured: PlanCost | None = None) -> str:
    """Per-rank fwd/bwd compute, comm, total and memory; predicted and measured side by side."""
    base = predicted or measured
    assert base is not None
    cols = ["rank"]
    blocks = [c for c in (predicted, measured) if c is not None]
    for c in blocks:
        tag = "pred" if c.kind == "predicted" else "meas"
        cols += [f"fwd_{tag}", f"bwd_{tag}", f"comm_{tag}", f"total_{tag}"]
    if predicted is not None and measured is not None:
        cols.append("meas/pred")
    cols.append("mem_gb")
    rows = []
    for r in range(len(base.per_rank)):
        row = [str(r)]
        for c in blocks:
            rc = c.per_rank[r]
            row += [f"{rc.fwd_compute_ms:.2f}", f"{rc.bwd_compute_ms:.2f}", f"{rc.comm_ms:.2f}",
                    f"{rc.total_ms:.2f}"]
        if predicted is not None and measured is not None:
            p, m = predicted.per_rank[r].compute_ms, measured.per_rank[r].compute_ms
            row.append(f"{m / p:.2f}" if p > 0 else "-")
        row.append(f"{base.per_rank[r].memory_gb:.3f}")
        rows.append(row)
    summary = []
    for c in blocks:
        summary.append(f"{c.kind} ({c.profile}): plan cost {c.max_ms:.2f} ms (slowest rank), "
                       f"imbalance max/mean {c.imbalance:.3f}")
    widths = [max(len(x) for x in col) for col in zip(cols, *rows)]
    line = lambda cells: "  ".join(x.rjust(w) for x, w in zip(cells, widths))  # noqa: E731
    return "\n".join([line(cols), *map(line, rows), *summary])


def plan_table(plan: Plan) -> str:
    """One line per table: its sharding type and where its shards are."""
    out = []
    for ts in plan.tables:
        t = plan.task.table(ts.name)
        where = ", ".join(
            f"r{s.rank}" + (f"[rows {s.row_offset}+{s.num_rows}]" if s.num_rows != t.num_embeddings else "")
            + (f"[cols {s.col_offset}+{s.num_cols}]" if s.num_cols != t.embedding_dim else "")
            for s in ts.shards)
        out.append(f"  {ts.name:<24} {t.num_embeddings:>9} x {t.embedding_dim:<3} pf {t.pooling_factor:6.2f}  "
                   f"{ts.sharding_type:<14} {where}")
    return "\n".join(out)


def measured_note(measured: PlanCost) -> str:
    """How the measured block was taken, and, when its calibration factors say the host ran the profile's
    stored ranks far from their labels (:func:`far_from_labels`), a line that says so: the calibrated
    figures are on the labels' host, not as timed here."""
    extra = measured.extra
    lines = [f"compute: {extra['compute']}; comm: {extra['comm_model']}"]
    factors = [f for f in extra.get("calibration_factor_per_rank") or [] if f]
    if factors:
        mid = statistics.median(factors)
        if far_from_labels(mid):
            slowdown = extra.get("reference_slowdown")
            ref = f" (the reference at {slowdown:.2f}x quiet)" if slowdown else ""
            lines.append(f"host: ran the {measured.profile} profile's stored ranks at {min(factors):.2f}-"
                         f"{max(factors):.2f}x their labels{ref}, far from the host they were taken on; the "
                         f"measured figures above are put on that host by neighbour calibration (as timed here, a "
                         f"rank took about {mid:.1f}x its figure), which on a host this far off scatters about twice "
                         f"as much as on a fit one (docs/cost-model.md, session 65): for figures to rely on, measure "
                         f"again when `shardplan profiles --probe` calls the host fit")
    return "\n".join(lines)
