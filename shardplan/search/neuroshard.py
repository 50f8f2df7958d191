"""NeuroShard's searches (Zha et al., MLSys'23) over the learned cost model.

**Table-wise greedy grid** (``neuroshard-tw``): placement units (whole tables
or column blocks) in descending order of predicted cost; each goes to the rank
whose *whole* predicted compute after taking it (the fused kernel, from the
model, not a sum) is lowest, among ranks with memory left and within a balance
cap on the rank's summed embedding dims (what its all-to-all moves). The cap's
scale is swept over a grid; after the greedy pass, units are moved off the
predicted-slowest rank while that lowers the larger of the two ranks' costs
(local improvement); every candidate plan is scored with the full predicted
plan cost (compute + comm) and the best kept. Scoring "rank r plus
unit u" adds u's code to r's running sums (the model's sum pooling), so a
placement step is one small batched evaluation (:mod:`.placer`). The best plan
is finished by :func:`~.polish.polish` (pairwise moves and swaps), which
frees memory-full light ranks that single moves cannot reach.

**Beam search** (``neuroshard``, the default): a state says how each table is
sharded: whole, in 2/4/8 column blocks, row-wise over all ranks, table-row-wise
over one host, or replicated (data-parallel). Moves split the costliest tables
into more column blocks, turn hot tables row-wise, and replicate small tables;
each candidate state is scored by re-running the table-wise grid search. The
``beam_width`` best states survive each of ``steps`` steps; the last beam's
plans are polished and the one predicted fastest wins. Where some tables are
much wider than a rank's share of the columns, a second beam starts with all
of them cut (:func:`wide_split_state`), and the faster of the two beams' plans wins.
"""
from __future__ import annotations

from typing import Callable, Iterable, Sequence

import numpy as np

from ..cost.estimator import PlanEstimator
from ..domain import Plan, Shard, Table, TableSharding, Task, Topology
from ..errors import InfeasibleError
from ..memory import GB, capacity_bytes, rank_memory_gb, shard_bytes, table_bytes
from .base import Searcher, register
from .placement import goes_whole, replicas, row_wise_shards
from .placer import GRID, Placer, Unit, column_blocks, max_blocks
from .polish import cheapest_first, polish, polished_candidates

def _require_incremental(estimator: PlanEstimator) -> None:
    if not hasattr(estimator.compute, "encode_shards"):
        raise TypeError("the NeuroShard searchers need a compute model with encode_shards/combine "
                        "(the neural cost model, or the roofline)")


# A state: per table, how it is sharded: ("tw"|"cw", blocks) or ("rw",) or ("twrw", host) or ("dp",).
State = tuple[tuple[str, int], ...]


def _materialise(task: Task, state: State) -> tuple[list[Unit], list[TableSharding]]:
    units: list[Unit] = []
    fixed: list[TableSharding] = []
    topo = task.topology
    for t, (kind, k) in zip(task.tables, state):
        if kind in ("tw", "cw"):
            units += [Unit(t, off, cols, k) for off, cols in column_blocks(t, k)]
        elif kind == "rw":
            fixed.append(TableSharding(t.name, "row_wise", row_wise_shards(t, list(range(topo.world_size)))))
        elif kind == "twrw":
            fixed.append(TableSharding(t.name, "table_row_wise", row_wise_shards(t, topo.host_ranks(k))))
        else:  # dp
            fixed.append(replicas(t, topo.world_size))
    return units, fixed


def _widest_block_bytes(task: Task, table: Table, blocks: int) -> float:
    """Bytes of the widest of ``table``'s ``blocks`` column blocks, as a rank holds it."""
    cols = max(c for _, c in column_blocks(table, blocks))
    return shard_bytes(task, table, "column_wise", Shard(0, 0, table.num_embeddings, 0, cols))


def _fitting_blocks(task: Task, table: Table, free: float) -> int | None:
    """The fewest column blocks (2, 4, 8; at most the ranks) of ``table`` that fit in ``free`` bytes, with room
    left for other tables (a block may take at most 60% of it), or None."""
    for k in (2, 4, 8):
        if k > max_blocks(table) or k > task.topology.world_size:
            break
        if _widest_block_bytes(task, table, k) <= 0.6 * free:
            return k
    return None


def _initial_state(task: Task) -> State:
    """Whole tables, except those too big for one rank: in column blocks where a few fit, else row-wise.

    Largest first, each judged against what the row-wise tables before it
    leave free on every rank (their slices take memory on all ranks; a
    table-row-wise one's are counted so too, to be safe). A table the task
    allows neither whole nor in column blocks goes before all others, sliced
    row-wise, else table-row-wise, else replicated.
    """
    cap = capacity_bytes(task)
    ranks = list(range(task.topology.world_size))
    taken = 0.0  # per-rank bytes of the row-wise slices so far (the largest slice, to be safe)
    kinds: dict[str, tuple[str, int]] = {}
    index = {t.name: i for i, t in enumerate(task.tables)}
    # Tables the task keeps spread come first: their slices are on the ranks whatever else happens.
    for t in sorted(task.tables, key=lambda t: (goes_whole(t), -t.num_embeddings * t.embedding_dim, t.name)):
        ok = t.allows
        whole = table_bytes(task, t)
        if whole <= cap - taken and (ok("table_wise") or ok("column_wise")):
            # one block where the task allows column blocks but not the whole table (the moves split it)
            kinds[t.name] = ("tw", 1) if ok("table_wise") else ("cw", 1)
            continue
        # Column blocks first: they cost one batch-sized buffer each, on a few ranks, where
        # row-wise slices put a full-batch buffer on every rank.
        blocks = _fitting_blocks(task, t, cap - taken) if ok("column_wise") else None
        if blocks is not None:
            kinds[t.name] = ("cw", blocks)
            continue
        if whole <= cap - taken and ok("data_parallel") and not (ok("row_wise") or ok("table_row_wise")):
            kinds[t.name] = ("dp", 0)  # a replica, the only spread the task allows
            taken += whole
            continue
        if ok("row_wise"):
            kinds[t.name], kind, over = ("rw", 0), "row_wise", ranks
        elif ok("table_row_wise"):  # slices over one host's ranks, the host the beam's moves would pick
            host = index[t.name] % task.topology.num_hosts
            kinds[t.name], kind = ("twrw", host), "table_row_wise"
            over = task.topology.host_ranks(host)
        else:
            raise InfeasibleError(
                task.table_field(t.name), f"{t.name!r} needs {whole / GB:.3f} GB, more than one rank has free, and "
                "neither row_wise nor table_row_wise is allowed",
                "allow row_wise, or raise topology.memory_per_rank_gb")
        slice_bytes = max(shard_bytes(task, t, kind, s) for s in row_wise_shards(t, over))
        if slice_bytes > cap - taken:
            raise InfeasibleError(
                task.table_field(t.name), f"{t.name!r} needs {whole / GB:.3f} GB and does not fit even split "
                f"{kind} over {len(over)} ranks beside the larger tables",
                "raise topology.memory_per_rank_gb or add ranks")
        taken += slice_bytes
    return tuple(kinds[t.name] for t in task.tables)


def _room_variants(task: Task, state: State) -> list[State]:
    """``state`` as it can be placed: where its row-wise, table-row-wise and data-parallel pieces leave no
    rank room for some whole table or column block, that table is cut into more column blocks, the
    fewest that fit (and, as a second variant, twice as many). ``[state]`` when every piece fits
    somewhere; ``[]`` when no cut makes room.

    A move that turns a hot table row-wise puts a slice of it on every rank; on a memory-tight task
    the largest table left whole may then fit nowhere. The cut that frees the room is not itself a
    move the beam would take (that table is cheap, so not a split candidate, and splitting it alone
    only adds work), so the row-wise move and its room are taken together.
    """
    _, fixed = _materialise(task, state)
    # On the emptiest rank: a piece that fits there is not crowded out.
    free = (task.topology.memory_per_rank_gb - min(rank_memory_gb(Plan(task=task, tables=tuple(fixed))))) * GB

    cuts: dict[int, int] = {}
    for i, (t, (kind, k)) in enumerate(zip(task.tables, state)):
        if kind not in ("tw", "cw") or _widest_block_bytes(task, t, k) <= free:
            continue
        if not t.allows("column_wise"):  # the task keeps this table whole: no cut makes the room
            return []
        k2 = 2 * k
        while k2 <= max_blocks(t) and _widest_block_bytes(task, t, k2) > free:
            k2 *= 2
        if k2 > max_blocks(t):
            return []
        cuts[i] = k2
    if not cuts:
        return [state]
    out = []
    for factor in (1, 2):
        if factor > 1 and any(k * factor > max_blocks(task.tables[i]) for i, k in cuts.items()):
            break
        out.append(tuple(("cw", cuts[i] * factor) if i in cuts else kind for i, kind in enumerate(state)))
    return out


# A whole table predicted to cost more than this share of the ideal per-rank compute (all
# tables' predicted cost over the ranks) is too coarse a unit to balance by placement alone.
HOT_SHARE = 0.5


def _cut_whole_tables(task: Task, state: State, sizes: Sequence[float], limit: float) -> State:
    """``state`` with each whole table (that the task lets go column-wise) whose ``sizes[i]`` is over
    ``limit`` cut into the fewest column blocks (2, 4, 8, ...; at most its dim / 4 and the ranks) whose
    share of it is not."""
    out = list(state)
    for i, t in enumerate(task.tables):
        if state[i] not in (("tw", 1), ("cw", 1)) or not t.allows("column_wise"):
            continue
        k = 1
        while sizes[i] / k > limit and 2 * k <= min(max_blocks(t), task.topology.world_size):
            k *= 2
        if k > 1:
            out[i] = ("cw", k)
    return tuple(out)


def hot_limit(task: Task, solo: np.ndarray, hot_share: float) -> float:
    """The predicted cost above which a whole table is hot: ``hot_share`` of the ideal per-rank compute
    (every table's cost alone, ``solo``, over the ranks). One rule for the split and the spread steps."""
    return hot_share * float(solo.sum()) / task.topology.world_size


def hot_split_state(task: Task, state: State, placer: Placer, hot_share: float = HOT_SHARE) -> State:
    """``state`` with each hot whole table cut into the fewest column blocks (2, 4, 8, ...; at most its
    dim / 4 and the ranks) whose predicted share is within ``hot_share`` of the ideal per-rank compute.

    This is the split step of AutoShard/DreamShard-style placement: a cost-driven rule, not a search,
    for searchers that only place units (``rl``).
    """
    solo = placer.table_costs()
    return _cut_whole_tables(task, state, solo, hot_limit(task, solo, hot_share))


def hot_spread_state(task: Task, state: State, placer: Placer, hot_share: float = HOT_SHARE) -> State:
    """``state`` with each hot whole table (as :func:`hot_split_state` judges it) spread over ranks by rows
    instead of cut into column blocks: row-wise over every rank on one host; over several hosts
    table-row-wise over one host's ranks, so its pooled output is reduced inside that host, each table on
    the host with the least hot cost so far (costliest first). Row-wise where the task forbids
    table-row-wise; left whole where it forbids both, or where its slices would leave no room
    (:func:`_room_variants`: the first variant, which may cut a large table into column blocks).

    Column blocks split a hot table's columns but every block still looks up every id: a small table
    looked up many times a sample (``gpu-multihost-00``'s 200-row, pooling-150 table) stays one rank's
    work whatever the cut. Rows split the lookups themselves. Like :func:`hot_split_state`, a rule for
    searchers that only place units (``rl``), not a search.
    """
    solo = placer.table_costs()
    limit = hot_limit(task, solo, hot_share)
    topo = task.topology
    load = [0.0] * topo.num_hosts
    out = state
    for i in sorted(range(len(task.tables)), key=lambda i: (-solo[i], task.tables[i].name)):
        t = task.tables[i]
        if solo[i] <= limit or out[i] not in (("tw", 1), ("cw", 1)):
            continue
        if topo.num_hosts > 1 and t.allows("table_row_wise"):
            host = min(range(topo.num_hosts), key=lambda h: (load[h], h))
            spread: tuple[str, int] = ("twrw", host)
        elif t.allows("row_wise") and topo.world_size > 1:
            spread = ("rw", 0)
        else:
            continue
        room = _room_variants(task, out[:i] + (spread,) + out[i + 1:])
        if room:
            out = room[0]
            if spread[0] == "twrw":
                load[spread[1]] += float(solo[i])
    return out


# A whole table wider than this many times a rank's share of all tables' columns is cut in the second
# beam's start (wide_split_state).
WIDE_SLACK = 1.25


def wide_split_state(task: Task, state: State, slack: float = WIDE_SLACK) -> State:
    """``state`` with each whole table wider than ``slack`` times a rank's share of the columns (all
    tables' dims over the ranks) cut into the fewest column blocks (2, 4, ...) that are not.

    A whole table's rank sends its pooled output for the global batch, so where comm is dear (between
    GPU hosts) each rank holding a wide table sets the plan's cost by its all-to-all alone. Balancing
    that needs every wide table cut at once: the beam's one-table moves improve nothing until the last
    one is cut, and its few steps do not get there (``gpu-multihost``: five whole 128-wide tables on
    32 ranks whose share is 59 columns).
    """
    dims = [t.embedding_dim for t in task.tables]
    return _cut_whole_tables(task, state, dims, slack * sum(dims) / task.topology.world_size)


def _spreads(t: Table, topo: Topology) -> list[tuple[str, int]]:
    """The states of ``t`` spread over ranks that the task allows."""
    out = [("rw", 0)] if t.allows("row_wise") else []
    if t.allows("table_row_wise"):
        out += [("twrw", h) for h in range(topo.num_hosts)]
    return out + ([("dp", 0)] if t.allows("data_parallel") else [])


@register
class NeuroShardTableWise(Searcher):
    name = "neuroshard-tw"
    description = "NeuroShard table-wise greedy grid search over the learned cost model"

    def __init__(self, sharding_types: Iterable[str] | None = None, pairwise_polish: bool = True) -> None:
        super().__init__(sharding_types)
        self.pairwise_polish = pairwise_polish

    def search(self, task: Task, estimator: PlanEstimator, seed: int) -> list[TableSharding]:
        _require_incremental(estimator)
        placer = Placer(task, estimator)
        units, fixed = _materialise(task, _initial_state(task))
        best = placer.best_over_grid(units, fixed)
        if best is None:
            raise InfeasibleError("task", "no table-wise placement fits every rank's memory, even with "
                                  "oversized tables split row-wise", "raise topology.memory_per_rank_gb or add ranks")
        return polish(task, estimator, best[1], placer) if self.pairwise_polish else best[1]


@register
class NeuroShardBeam(Searcher):
    """Column-wise beam search (plus row-wise and data-parallel moves) around the greedy grid."""

    name = "neuroshard"
    description = ("NeuroShard beam search over column splits, row-wise and data-parallel choices, "
                   "each scored by the table-wise greedy grid")

    def __init__(self, beam_width: int = 3, steps: int = 4, candidates: int = 6, max_work: float = 5e6,
                 grid: tuple[float, ...] = GRID, on_step: Callable[[int, float], None] | None = None,
                 sharding_types: Iterable[str] | None = None, pairwise_polish: bool = True) -> None:
        """``max_work`` bounds the search in placement evaluations (units x ranks x grid points per
        scored state), not seconds, so that a plan does not depend on how busy the machine is.
        ``on_step(step, best_predicted_ms)`` is called after each beam step (Optuna prunes there).
        ``pairwise_polish=False`` returns the best state's grid plan as it is (for ablations)."""
        super().__init__(sharding_types)
        self.beam_width, self.steps, self.candidates = beam_width, steps, candidates
        self.max_work, self.grid, self.on_step = max_work, grid, on_step
        self.pairwise_polish = pairwise_polish

    def _moves(self, task: Task, state: State, placer: Placer) -> list[State]:
        """Neighbouring states: split a costly table further, make it row-wise, or replicate a small one."""
        tables = task.tables
        solo = placer.table_costs()
        per_block = [solo[i] / (state[i][1] if state[i][0] in ("tw", "cw") else 1e9) for i in range(len(tables))]
        order = sorted(range(len(tables)), key=lambda i: -per_block[i])[: self.candidates]
        out: list[State] = []
        topo = task.topology
        for i in order:
            kind, k = state[i]
            t = tables[i]
            if kind in ("tw", "cw"):
                for nk in (2 * k, 4 * k):
                    if nk <= max_blocks(t) and nk <= 2 * topo.world_size and t.allows("column_wise"):
                        out.append(state[:i] + (("cw", nk),) + state[i + 1:])
                if topo.world_size > 1:
                    if t.allows("row_wise"):
                        out += _room_variants(task, state[:i] + (("rw", 0),) + state[i + 1:])
                    if topo.num_hosts > 1 and t.allows("table_row_wise"):
                        out += _room_variants(task, state[:i] + (("twrw", i % topo.num_hosts),) + state[i + 1:])
        # A spread table (one the task keeps spread, or, over several hosts, any): the other spreads it
        # allows. Over hosts, a table too big for one rank starts row-wise over every rank; table-row-wise
        # over one host's ranks keeps its pooled output's reduction inside that host.
        for i, t in enumerate(tables):
            if state[i][0] not in ("tw", "cw") and (not goes_whole(t) or topo.num_hosts > 1):
                for alt in _spreads(t, topo):
                    if alt != state[i]:
                        out += _room_variants(task, state[:i] + (alt,) + state[i + 1:])
        # Replicating a table costs its gradient all-reduce; only small tables can win.
        small = sorted((i for i, t in enumerate(tables) if state[i] == ("tw", 1)),
                       key=lambda i: tables[i].num_embeddings * tables[i].embedding_dim)[:2]
        for i in small:
            if tables[i].allows("data_parallel"):
                out += _room_variants(task, state[:i] + (("dp", 0),) + state[i + 1:])
        return out

    def search(self, task: Task, estimator: PlanEstimator, seed: int) -> list[TableSharding]:
        return self.shortlist(task, estimator, seed)[0]

    def shortlist(self, task: Task, estimator: PlanEstimator, seed: int) -> list[list[TableSharding]]:
        """The last beam's plans, polished, predicted fastest first (the first is :meth:`search`'s).

        Where :func:`wide_split_state` cuts some table, a second beam runs from that start, with a work
        bound of its own, and the two beams' plans are merged by predicted cost (the first beam's on a
        tie), so the second can only lower the plan's predicted cost.
        """
        _require_incremental(estimator)
        placer = Placer(task, estimator)
        scored: dict[State, tuple[float, list[TableSharding]] | None] = {}
        start = _initial_state(task)
        work = self._score(task, placer, scored, start)
        if scored[start] is None:
            raise InfeasibleError("task", "no placement fits every rank's memory, even with oversized tables "
                                  "split row-wise", "raise topology.memory_per_rank_gb or add ranks")
        beams = [self._beam(task, placer, scored, start, work)]
        wide = wide_split_state(task, start)  # scored after the first beam, which runs as if alone
        if wide != start:
            work = self._score(task, placer, scored, wide)
            if scored[wide] is not None:  # on_step sees its steps numbered on, and the best so far
                beams.append(self._beam(task, placer, scored, wide, work, self.steps, scored[beams[0][0]][0]))
        if not self.pairwise_polish:  # the grid plans by their grid score, the first beam's on a tie
            ranked = sorted((scored[s][0], k, j) for k, beam in enumerate(beams) for j, s in enumerate(beam))
            return [scored[beams[k][j]][1] for _, k, j in ranked]
        # The surviving states are close in predicted cost; the pairwise polish can reorder them.
        shortlists = [polished_candidates(task, estimator, [scored[s][1] for s in beam], placer) for beam in beams]
        if len(shortlists) == 1:
            return shortlists[0]
        return cheapest_first(task, estimator, [plan for plans in shortlists for plan in plans])

    def _score(self, task: Task, placer: Placer, scored: dict[State, tuple | None], state: State) -> float:
        """Put ``state``'s best grid placement ((predicted ms, shardings), or None) in ``scored``; return
        the work that took (placement evaluations; 0 when it was there already)."""
        if state in scored:
            return 0.0
        units, fixed = _materialise(task, state)
        scored[state] = placer.best_over_grid(units, fixed, self.grid)
        return max(1, len(units)) * task.topology.world_size * len(self.grid)

    def _beam(self, task: Task, placer: Placer, scored: dict[State, tuple | None], start: State, work: float,
              first_step: int = 0, best_before: float = float("inf")) -> list[State]:
        """One beam search from ``start`` (scored, at ``work`` so far): the last beam's states, predicted
        fastest first. ``on_step`` gets steps from ``first_step`` and the best of this beam and ``best_before``."""
        beam = [start]
        for step in range(self.steps):
            children = {c for s in beam for c in self._moves(task, s, placer)}
            for c in sorted(children):
                if work > self.max_work:
                    break
                work += self._score(task, placer, scored, c)
            ranked = sorted((s for s in set(beam) | children if scored.get(s)), key=lambda s: (scored[s][0], s))
            new_beam = ranked[: self.beam_width]
            done = new_beam == beam or work > self.max_work
            beam = new_beam
            if self.on_step is not None:
                self.on_step(first_step + step, min(best_before, scored[beam[0]][0]))
            if done:
                break
        return beam
