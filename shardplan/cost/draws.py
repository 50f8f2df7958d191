"""How the collector draws its random shard sets (NeuroShard's augmentation).

Tables come from a pool, their dims re-drawn (a column block of any table is a
table of that many columns, since a column-wise shard sees every id), some cut
to row ranges (a row-wise shard sees only its rows' ids), and, when asked,
beside them a data-parallel op of small whole tables fed the local batch. The
draws stay within the profile's per-set budgets of weight bytes and lookup
floats. Nothing here times or imports torch, so the command line can name the
defaults.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..domain import Table
from ..errors import InputError
from .profiles import Profile
from .specs import ShardSpec

COLLECT_DIMS = (4, 8, 12, 16, 24, 32, 48, 64, 96, 128)
COLLECT_DIM_WEIGHTS = (2, 3, 1, 3, 1, 3, 1, 3, 1, 3)
ROW_SPLITS = (2, 4, 8)
ROW_SHARE = 0.3  # of a random set's shards cut to a row range
REPLICA_WORLDS = (4, 8, 16)
REPLICA_MAX_ROWS = 20_000  # TorchRec's GPU-suite plans replicate tables of 3 to 17,005 rows
REPLICA_MAX_TABLES = 5  # and 1 to 5 of them a task


@dataclass(frozen=True)
class SetShape:
    """How a random set's shards are drawn, beyond the pool and the profile's budgets.

    At the defaults the draws are exactly the default collection's (sample ``i`` of a seed is one set,
    whatever the code around it), so a collection that changes any field takes a seed of its own.

    ``min_table_rows``, ``min_pooling``, ``min_zipf``: draw the sharded tables only among the pool's of at
    least that many rows, that mean pooling factor and that Zipf exponent (a targeted collection of the large,
    hot tables, which the random sets' budgets rarely admit; of the four pools' 330 tables of 500,000 rows or
    more, 15 have pooling 20 or more at an exponent of 1.1 or more, so uniform draws among the large hot
    tables seldom reach the skewed ones, whose ids hit few rows). ``min_cols``: draw only the dims of at least
    that many columns (with the two above, sets whose rows touched leave the cache).

    ``row_share`` of the shards are cut to one of ``row_splits`` row ranges: row-wise plans put a
    1/world slice of many tables on every rank (TorchRec's plans of the 16-rank GPU suite: a median of
    16 slices of 1/16 in a rank of 24 shards, where fewer than 1% of the default collection's sets hold 8).
    ``replica_share`` of the sets also get a data-parallel op: 1 to ``REPLICA_MAX_TABLES`` whole tables
    of at most ``replica_max_rows`` rows fed the local batch (the set's global batch over a world drawn
    from ``replica_worlds``), as every rank of a plan with data-parallel tables runs them beside its
    sharded ones. The default collections never drew a batch under their profile's smallest; every
    TorchRec rank of the GPU suite runs such an op (docs/gpu.md, "The next lease").

    ``batch_sizes``: the global batches a set is drawn at (default the profile's ``collect_batch_sizes``).
    Small batches with many shards are where the per-table work is least and the op's fixed costs most: on
    ``cpu-2c-zen4`` 53 of the default collections' 5,800 sets were of batch 512 and 20 shards or more, and
    the model trained on them priced 180 such sets drawn with this flag a median 15% low, as it priced
    TorchRec's 42-shard rank of ``unseen-c-10`` 21% low (docs/cost-model.md, "Many-shard sets at batch 512").
    """

    min_table_rows: int = 0
    min_pooling: float = 0.0
    min_zipf: float = 0.0
    min_cols: int = 0
    row_share: float = ROW_SHARE
    row_splits: tuple[int, ...] = ROW_SPLITS
    replica_share: float = 0.0
    replica_worlds: tuple[int, ...] = REPLICA_WORLDS
    replica_max_rows: int = REPLICA_MAX_ROWS
    batch_sizes: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        for flag, v in (("--min-table-rows", self.min_table_rows), ("--min-pooling", self.min_pooling),
                        ("--min-zipf", self.min_zipf)):
            if v < 0:
                raise InputError(flag, f"must be >= 0, got {v}", "give a lower bound on the tables to draw, "
                                 "or leave it out")
        if not 0 <= self.min_cols <= max(COLLECT_DIMS):
            raise InputError("--min-cols", f"must be within 0..{max(COLLECT_DIMS)}, got {self.min_cols}",
                             f"give a lower bound on the dims to draw (they come from {list(COLLECT_DIMS)}), "
                             "or leave it out")
        for flag, share in (("--row-share", self.row_share), ("--replica-share", self.replica_share)):
            if not 0 <= share <= 1:
                raise InputError(flag, f"must be within 0..1, got {share}", "give a share, or leave it out")
        if not self.row_splits or min(self.row_splits) < 2:
            raise InputError("--row-splits", f"must be integers of at least 2, got {list(self.row_splits)}",
                             "give the parts a table's rows are cut into, e.g. 2,4,8,16")
        if not self.replica_worlds or min(self.replica_worlds) < 2:
            raise InputError("--replica-worlds", f"must be integers of at least 2, got {list(self.replica_worlds)}",
                             "give the world sizes the global batch is divided by, e.g. 4,8,16")
        if self.batch_sizes is not None and (not self.batch_sizes or min(self.batch_sizes) < 1):
            raise InputError("--batch-sizes", f"must be positive integers, got {list(self.batch_sizes)}",
                             "give the global batches to draw at, e.g. 512,1024, or leave it out")
        if self.replica_max_rows < 1:
            raise InputError("--replica-max-rows", f"must be at least 1, got {self.replica_max_rows}",
                             "give the most rows a replicated table may have")

    def sharded_tables(self, pool: list[Table]) -> list[Table]:
        """The pool's tables the sharded shards are drawn from; an error if there are none."""
        tables = [t for t in pool if t.num_embeddings >= self.min_table_rows and t.pooling_factor >= self.min_pooling
                  and t.zipf_alpha >= self.min_zipf]
        if not tables:
            raise InputError("--min-table-rows/--min-pooling/--min-zipf", f"no table of the pool has "
                             f"{self.min_table_rows} rows or more, pooling {self.min_pooling} or more and a Zipf "
                             f"exponent of {self.min_zipf} or more", "lower them or add a pool with such tables")
        return tables

    def replica_tables(self, pool: list[Table]) -> list[Table]:
        """The pool's tables a data-parallel op draws from; an error if it draws and there are none."""
        small = [t for t in pool if t.num_embeddings <= self.replica_max_rows]
        if self.replica_share > 0 and not small:
            raise InputError("--replica-max-rows", f"no table of the pool has {self.replica_max_rows} rows or "
                             "fewer", "raise it or add a pool with small tables (criteo_kaggle has some)")
        return small


def _fits(budget: list[float], nbytes: float, floats: float, profile: Profile, scale: float) -> bool:
    """Add a shard's weight bytes and lookup floats to ``budget`` if the set stays within the profile's."""
    if (budget[0] + nbytes > scale * profile.max_sample_weight_bytes
            or budget[1] + floats > scale * profile.max_sample_lookup_floats):
        return False
    budget[0] += nbytes
    budget[1] += floats
    return True


def random_sample(rng: np.random.Generator, pool: list[Table], profile: Profile,
                  min_shards: int = 1, max_shards: int = 15, shape: SetShape = SetShape()) -> list[ShardSpec]:
    """A random shard set within the profile's per-sample weight and lookup budgets, drawn as ``shape``
    says (:class:`SetShape`).

    The budgets grow with ``max_shards`` beyond 15 so that larger sets are not
    just more of the smallest shards. A draw that spends them first stops short, under ``min_shards``
    too (one set in 200 drawn for 41-80 shards on ``cpu-2c-zen4`` came out at 26). A data-parallel op's
    replicas count toward them too, beyond ``max_shards`` (the model prices each batch's op on its own).
    """
    tables = shape.sharded_tables(pool)
    batch = int(rng.choice(shape.batch_sizes or profile.collect_batch_sizes))
    n = int(rng.integers(min_shards, max_shards + 1))
    scale = max(1.0, max_shards / 15)
    dims, weights = zip(*[(d, wt) for d, wt in zip(COLLECT_DIMS, COLLECT_DIM_WEIGHTS) if d >= shape.min_cols])
    w = np.array(weights, dtype=float)
    p = w / w.sum()
    specs: list[ShardSpec] = []
    budget = [0.0, 0.0]  # weight bytes, lookup floats
    attempts = 0
    while len(specs) < n and attempts < 20 * n:
        attempts += 1
        t = tables[int(rng.integers(len(tables)))]
        cols = int(rng.choice(dims, p=p))
        table_rows = min(t.num_embeddings, profile.max_rows)
        row_offset, rows = 0, table_rows
        if table_rows >= 64 and rng.random() < shape.row_share:
            parts = int(rng.choice(shape.row_splits))
            block = -(-table_rows // parts)
            # the parts that hold rows: fewer than ``parts`` where the table is short for them (65 rows in
            # 16 parts of 5 fill 13); with the default splits and 64 rows or more, always all of them
            i = int(rng.integers(-(-table_rows // block)))
            row_offset, rows = i * block, min(block, table_rows - i * block)
        frac = rows / table_rows
        if not _fits(budget, rows * cols * 4, batch * t.pooling_factor * frac * cols, profile, scale):
            continue
        specs.append(ShardSpec(table=t.name, table_rows=table_rows, row_offset=row_offset, rows=rows,
                               cols=cols, pooling_factor=t.pooling_factor, zipf_alpha=t.zipf_alpha,
                               batch_size=batch))
    if shape.replica_share > 0 and rng.random() < shape.replica_share:  # no draw at all at the default 0
        small = shape.replica_tables(pool)
        local = max(1, batch // int(rng.choice(shape.replica_worlds)))
        names = {s.table for s in specs}
        for _ in range(int(rng.integers(1, REPLICA_MAX_TABLES + 1))):
            t = small[int(rng.integers(len(small)))]
            cols = int(rng.choice(dims, p=p))
            rows = min(t.num_embeddings, profile.max_rows)
            if t.name in names or not _fits(budget, rows * cols * 4, local * t.pooling_factor * cols, profile, scale):
                continue  # a table is sharded or replicated in a plan, not both
            names.add(t.name)
            specs.append(ShardSpec(table=t.name, table_rows=rows, row_offset=0, rows=rows,
                                   cols=cols, pooling_factor=t.pooling_factor, zipf_alpha=t.zipf_alpha,
                                   batch_size=local))
    return specs
