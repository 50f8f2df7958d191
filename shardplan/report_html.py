"""Offline plan evaluation: one self-contained HTML page for one or more plans.

For each plan: per-rank stacked bars of forward and backward compute and
communication, predicted and (where the plan carries a ``measured_cost``)
measured side by side; memory per rank against the rank's capacity. Above
them, a table comparing the plans. Charts are matplotlib SVG embedded in the
page, so it opens anywhere without network access.
"""
from __future__ import annotations

import datetime as dt
import html
import io
from collections import Counter
from typing import Sequence

from .domain import Plan, PlanCost

PARTS = (("fwd_compute_ms", "fwd compute", "#4878d0"), ("bwd_compute_ms", "bwd compute", "#ee854a"),
         ("fwd_comm_ms", "fwd comm", "#6acc64"), ("bwd_comm_ms", "bwd comm", "#d65f5f"))
CSS = """body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1200px}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}.note{color:#666;font-size:90%}
section{margin-top:2.5em}"""


def _label(plan: Plan, i: int) -> str:
    searcher = (plan.search or {}).get("searcher", "plan")
    return f"{i + 1}. {searcher} — {plan.task.name}"


def _figure(plan: Plan, title: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    costs: list[PlanCost] = [c for c in (plan.cost, plan.measured_cost) if c is not None]
    world = plan.task.topology.world_size
    x = np.arange(world)
    width = 0.8 / len(costs)
    fig, (ax, mem_ax) = plt.subplots(1, 2, figsize=(min(max(9.0, 4 + 0.55 * world * len(costs)), 16), 4.2),
                                     gridspec_kw={"width_ratios": [3, 2]})
    for k, cost in enumerate(costs):
        pos = x - 0.4 + width * (k + 0.5)
        bottom = np.zeros(world)
        hatch = "//" if cost.kind == "measured" else None
        for attr, name, color in PARTS:
            vals = np.array([getattr(r, attr) for r in cost.per_rank])
            ax.bar(pos, vals, width * 0.92, bottom=bottom, color=color, hatch=hatch, edgecolor="white",
                   label=name if k == 0 else None)
            bottom += vals
        ax.axhline(cost.max_ms, color="#333" if k == 0 else "#999", lw=0.8, ls="--")
    ax.set_xticks(x, [str(r) for r in range(world)])
    ax.set_xlabel("rank" + ("   (plain: predicted, hatched: measured)" if len(costs) > 1 else
                            f"   ({costs[0].kind})" if costs else ""))
    ax.set_ylabel("ms per iteration")
    ax.set_title("per-rank cost (dashed: slowest rank)", fontsize=10)
    top = max((c.max_ms for c in costs), default=1.0)
    ax.set_ylim(0, top * 1.35)  # headroom for the legend row
    ax.legend(fontsize=8, loc="upper center", ncol=2, framealpha=0.9)
    mem = np.array([r.memory_gb for r in (plan.cost or plan.measured_cost).per_rank]) if costs else np.zeros(world)
    cap = plan.task.topology.memory_per_rank_gb
    mem_ax.bar(x, mem, 0.7, color=["#d65f5f" if m > cap else "#8c8c8c" for m in mem])
    mem_ax.axhline(cap, color="#d65f5f", lw=1.2, label=f"capacity {cap:g} GB")
    mem_ax.set_xticks(x, [str(r) for r in range(world)])
    mem_ax.set_xlabel("rank")
    mem_ax.set_ylabel("GB (weights + optimizer + buffers)")
    mem_ax.set_title("memory per rank", fontsize=10)
    mem_ax.set_ylim(0, max(cap, float(mem.max()) if len(mem) else 0) * 1.25)
    mem_ax.legend(fontsize=8, loc="upper center", framealpha=0.9)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    plt.close(fig)
    svg = buf.getvalue()
    return svg[svg.index("<svg"):]  # drop the XML prologue: the SVG is inline in the page


def _cell(v: float | None, fmt: str = "{:.2f}") -> str:
    return "–" if v is None else fmt.format(v)


def _comparison(plans: Sequence[Plan]) -> str:
    head = ["plan", "ranks", "tables", "predicted max ms", "predicted max/mean", "measured max ms",
            "measured max/mean", "vs task's first plan (predicted)", "vs task's first plan (measured)",
            "max memory GB / cap",
            "sharding types", "planning s"]
    rows = []
    first: dict[str, Plan] = {}
    for p in plans:  # ratios only between plans of the same task
        first.setdefault(p.task.name, p)
    for i, p in enumerate(plans):
        c, m = p.cost, p.measured_cost
        base = first[p.task.name]
        base_p = base.cost.max_ms if base.cost else None
        base_m = base.measured_cost.max_ms if base.measured_cost else None
        types = Counter(t.sharding_type for t in p.tables)
        mem = max(r.memory_gb for r in (c or m).per_rank) if (c or m) else None
        rows.append([
            _label(p, i), str(p.task.topology.world_size), str(len(p.tables)),
            _cell(c.max_ms if c else None), _cell(c.imbalance if c else None, "{:.3f}"),
            _cell(m.max_ms if m else None), _cell(m.imbalance if m else None, "{:.3f}"),
            _cell(c.max_ms / base_p if c and base_p else None, "{:.3f}"),
            _cell(m.max_ms / base_m if m and base_m else None, "{:.3f}"),
            f"{_cell(mem, '{:.3f}')} / {p.task.topology.memory_per_rank_gb:g}",
            ", ".join(f"{k} {v}" for k, v in sorted(types.items())),
            _cell((p.search or {}).get("seconds"), "{:.2f}")])
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in r) + "</tr>" for r in rows)
    return f"<table><tr>{th}</tr>{body}</table>"


def _cost_source(cost: PlanCost | None) -> str:
    if cost is None:
        return "none"
    extra = ", ".join(f"{k}: {v}" for k, v in cost.extra.items() if isinstance(v, (str, int, float)))
    return f"{cost.kind} on profile {cost.profile}" + (f" ({extra})" if extra else "")


def render(plans: Sequence[Plan]) -> str:
    """The HTML page for ``plans`` (each with a predicted ``cost``; ``measured_cost`` optional)."""
    sections = []
    for i, p in enumerate(plans):
        title = _label(p, i)
        sections.append(
            f"<section><h2>{html.escape(title)}</h2>"
            f"<p class='note'>predicted: {html.escape(_cost_source(p.cost))}<br>"
            f"measured: {html.escape(_cost_source(p.measured_cost))}</p>{_figure(p, title)}</section>")
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>shardplan report</title>"
            f"<style>{CSS}</style></head><body><h1>shardplan plan report</h1>"
            f"<p class='note'>{len(plans)} plan(s), written {stamp}. Plan cost = slowest rank's forward + "
            f"backward compute + communication (DESIGN.md). Ratios are against the first plan of the same task.</p>"
            f"{_comparison(plans)}{''.join(sections)}</body></html>\n")
