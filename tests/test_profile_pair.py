"""bench/profile_pair.py: only the very same sets pair up across two profiles' hosts, and each keeps its
row in the first file (which the models price)."""
from __future__ import annotations

import pandas as pd


def test_only_identical_sets_pair_and_keep_their_row(load_script) -> None:
    pp = load_script("bench/profile_pair.py")
    a = pd.DataFrame({"pos": [0, 1, 2, 3], "seed": 0, "sample": [0, 1, 2, 3], "ms": [1.0, 2.0, 4.0, 8.0],
                      "fwd": 0.5, "holdout": True, "shards": ["s0", "s1", "s2", "s3"], "mib": 1.0})
    # The second host lacks sample 0 and drew another set for sample 2: samples 1 and 3 pair up.
    b = pd.DataFrame({"pos": [0, 1, 2], "seed": 0, "sample": [1, 2, 3], "ms": [3.0, 4.0, 4.0], "fwd": 0.5,
                      "holdout": True, "shards": ["s1", "other", "s3"], "mib": 1.0})
    pair = pp.paired(a, b)
    assert pair["sample"].tolist() == [1, 3] and pair["pos_a"].tolist() == [1, 3]
    assert pair["ratio"].tolist() == [1.5, 0.5]
