"""Plain-text tables of plans and their costs, for the terminal."""
from __future__ import annotations

from .domain import Plan, PlanCost


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
