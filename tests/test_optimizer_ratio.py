"""bench/optimizer_ratio.py (and collect_paired.time_in_turns): kinds timed in turns on the same set, and refusals."""
from __future__ import annotations

import pandas as pd
import pytest

from shardplan.cost import collect_paired
from shardplan.cost.kernel import KernelTiming
from shardplan.cost.profiles import get_profile
from shardplan.errors import InputError


def test_kinds_are_timed_in_turns_and_each_keeps_its_own_medians(load_script, monkeypatch):
    ratio = load_script("bench/optimizer_ratio.py")
    order = []

    class FakeOp:  # backward costs 2x under rowwise adagrad, forward the same
        def __init__(self, specs, optimizer, dtype, device, id_seed):
            self.kind = (optimizer, dtype)

        def run(self, warmup, repeats):
            order.append(self.kind)
            bwd = 4.0 if self.kind[0] == "rowwise_adagrad" else 2.0
            return KernelTiming(1.0, bwd, (1.0,) * repeats, (bwd,) * repeats)

    monkeypatch.setattr(collect_paired, "RankOp", FakeOp)
    kinds = [("sgd", "fp32"), ("rowwise_adagrad", "fp32")]
    out = ratio.time_in_turns([], 0, kinds, get_profile("cpu-2c-nested"), visits=3)
    assert out == {kinds[0]: (1.0, 2.0), kinds[1]: (1.0, 4.0)}
    assert order[2:] == kinds * 3  # after each build's warm-up, the kinds alternate visit by visit

    df = pd.DataFrame({"label_ms": [5.0, 20.0], "sgd:fp32 fwd": [1.0, 1.0], "sgd:fp32 bwd": [2.0, 2.0],
                       "sgd:fp32 total": [3.0, 3.0], "rowwise_adagrad:fp32 fwd": [1.0, 1.0],
                       "rowwise_adagrad:fp32 bwd": [4.0, 3.0], "rowwise_adagrad:fp32 total": [5.0, 4.0]})
    rows = ratio.ratio_rows(df, kinds, short_ms=10.0)
    assert rows[1] == "| rowwise_adagrad:fp32 | under 10 ms | 1 | 1.00 / 1.00 / 1.00 | 2.00 / 2.00 / 2.00 | " \
                      "1.67 / 1.67 / 1.67 |"
    assert rows[2].startswith("| rowwise_adagrad:fp32 | 10 ms or more | 1 | 1.00 / 1.00 / 1.00 | 1.50 / 1.50")


@pytest.mark.parametrize("text", ["sgd", "adam:fp32", "sgd:bf16", ":fp32"])
def test_a_kind_the_cpu_cannot_train_is_refused_naming_the_flag(load_script, text):
    ratio = load_script("bench/optimizer_ratio.py")
    with pytest.raises(InputError) as e:
        ratio.parse_kind(text, "cpu")
    assert e.value.field == "--kinds"
