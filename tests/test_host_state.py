"""Taking the host's launch jitter out of GPU labels: read on the training split, only where it shows."""
import numpy as np
import pytest

from shardplan.cost.host_state import BAND_EDGES_MS, AtHostState, HostStateAdjustment, at_reference, by_op
from shardplan.cost.model import batch_parts
from shardplan.cost.specs import ShardSpec
from shardplan.errors import InputError


def _jittered(n: int, gain: float, seed: int = 0):
    """Sets whose ops take 0.2-5 ms; an op under 1 ms gains ``gain`` ms per ms the reference runs over its
    median (a launch-bound op), a longer one nothing (its launches hide behind its kernels)."""
    rng = np.random.default_rng(seed)
    sets, base_f, base_b = [], [], []
    for _ in range(n):
        specs = [ShardSpec(f"t{i}", 1000, 0, 1000, int(rng.choice([8, 16, 32, 64, 128])),
                           float(rng.uniform(1, 40)), 0.0, 1024) for i in range(int(rng.integers(1, 6)))]
        work = sum(s.pooling_factor * s.cols for s in specs) / 2000.0
        sets.append(specs)
        base_f.append(0.2 + work)
        base_b.append(0.3 + 1.5 * work)
    base_f, base_b = np.array(base_f), np.array(base_b)
    ref = 0.6 * np.exp(rng.normal(0.15, 0.2, n))  # a reference of 0.6 ms, often slowed
    excess = ref - np.median(ref)
    fwd = base_f + np.where(base_f < 1.0, gain, 0.0) * excess
    bwd = base_b + np.where(base_b < 1.0, gain, 0.0) * excess
    return sets, base_f, base_b, fwd, bwd, ref


def test_gain_is_read_where_ops_are_short_and_taken_out():
    sets, base_f, base_b, fwd, bwd, ref = _jittered(2400, gain=0.5)
    adj = HostStateAdjustment.fit(sets, fwd, bwd, ref)
    short, long_ = 0, len(BAND_EDGES_MS)  # bands: under 0.5 ms ... over 2 ms
    assert adj.fwd_gain[short] == pytest.approx(0.5, abs=0.1)
    assert adj.bwd_gain[long_] == pytest.approx(0.0, abs=0.1)
    assert (adj.fwd_gain >= 0).all() and (adj.bwd_gain >= 0).all()
    f2, b2 = adj.apply(sets, fwd, bwd, ref)
    # the adjusted labels sit closer to the jitter-free times than the measured ones
    for measured, adjusted, base in ((fwd, f2, base_f), (bwd, b2, base_b)):
        assert np.abs(adjusted / base - 1).mean() < 0.6 * np.abs(measured / base - 1).mean()
    summary = adj.summary()
    assert summary["band_edges_ms"] == list(BAND_EDGES_MS) and "launch jitter" in adj.describe()


def test_a_reference_spike_leaves_no_label_under_a_tenth_of_its_time():
    # the fourth H100 read its reference at up to 3.2 ms beside 0.6-ms ops that did not feel it: the linear
    # share of that excess would make a label negative, whose log then stops training
    sets, base_f, base_b, fwd, bwd, ref = _jittered(2400, gain=0.5, seed=2)
    adj = HostStateAdjustment.fit(sets, fwd, bwd, ref)
    spiked = ref.copy()
    spiked[:50] = 5.0
    f2, b2 = adj.apply(sets, fwd, bwd, spiked)
    assert (f2 >= 0.1 * fwd).all() and (b2 >= 0.1 * bwd).all()
    assert np.isclose(f2[:50], 0.1 * fwd[:50]).any()  # the case arises: some short op's label is floored
    f3, b3 = adj.apply(sets, fwd, bwd, ref)  # within the readings it was fitted on, nothing is floored
    assert (f3 > 0.1 * fwd).all() and (b3 > 0.1 * bwd).all()


def test_no_jitter_no_adjustment_and_thin_bands_left_alone():
    sets, base_f, base_b, fwd, bwd, ref = _jittered(2400, gain=0.0, seed=1)
    adj = HostStateAdjustment.fit(sets, fwd, bwd, ref)
    assert np.abs(adj.fwd_gain).max() < 0.05 and np.abs(adj.bwd_gain).max() < 0.05
    few = HostStateAdjustment.fit(sets[:100], fwd[:100] + ref[:100], bwd[:100], ref[:100])
    assert (few.fwd_gain == 0).all()  # under MIN_BAND_SAMPLES a band is not read


class _Model:
    """A compute model with the host-state gains a GPU model's training saves, whose op of batch size ``b``
    (1, 2, ...) costs ``fwd[b - 1]``, ``bwd[b - 1]``; a set of several ops costs their sum, as the neural
    model prices a rank holding data-parallel replicas."""

    profile = "h100"

    def __init__(self, fwd, bwd, host_state=True):
        self.fwd, self.bwd = np.array(fwd, float), np.array(bwd, float)
        self.metadata = {"host_state": {"median_reference_ms": 0.6, "band_edges_ms": list(BAND_EDGES_MS),
                                        "fwd_ms_per_reference_ms": [0.4, 0.2, 0.05, 0.0],
                                        "bwd_ms_per_reference_ms": [0.5, 0.3, 0.02, 0.0]}} if host_state else {}

    def ops(self, sets):
        return batch_parts(sets)

    def predict(self, sets):
        batches = [sorted({x.batch_size for x in s}) for s in sets]
        return (np.array([sum(self.fwd[b - 1] for b in bs) for bs in batches]),
                np.array([sum(self.bwd[b - 1] for b in bs) for bs in batches]))


def _op(batch: int) -> list[ShardSpec]:
    return [ShardSpec(f"t{batch}", 100, 0, 100, 8, 1.0, 1.0, batch)]


def test_priced_at_another_host_state_by_the_gains_of_each_ops_band():
    model = _Model([0.3, 0.8, 1.5, 3.0], [0.4, 0.9, 1.8, 4.0])
    sets = [_op(1), _op(2), _op(3), _op(4), []]
    same_f, same_b = AtHostState(model, 0.6).predict(sets)  # at the collection's median: as trained
    assert np.allclose(same_f, [*model.fwd, 0.0]) and np.allclose(same_b, [*model.bwd, 0.0])
    slow_f, slow_b = AtHostState(model, 1.0).predict(sets)  # 0.4 ms of reference excess
    assert np.allclose(slow_f, [0.3 + 0.16, 0.8 + 0.08, 1.5 + 0.02, 3.0, 0.0])
    assert np.allclose(slow_b, [0.4 + 0.2, 0.9 + 0.12, 1.8 + 0.008, 4.0, 0.0])
    quick_f, _ = AtHostState(model, 0.1).predict(sets)  # a host far quicker than any seen: never below a tenth
    assert quick_f[0] == pytest.approx(0.3 - 0.2) and (quick_f[:4] >= 0.1 * model.fwd).all()
    assert quick_f[4] == 0.0  # an empty set stays free
    refs = np.array([0.6, 1.0, 0.1, 1.0])  # one reading per op moves each as its own reading alone would
    each_f, each_b = at_reference(model.metadata["host_state"], model.fwd, model.bwd, refs)
    for i, ref in enumerate(refs):
        alone_f, alone_b = AtHostState(model, ref).predict(sets)
        assert each_f[i] == pytest.approx(alone_f[i]) and each_b[i] == pytest.approx(alone_b[i])


def test_a_rank_of_two_ops_moves_each_by_its_own_band():
    # replicas at the local batch beside sharded tables: two 0.6-0.8 ms ops, each waiting on its own launches,
    # gain as 0.5-1 ms ops do (0.2 / 0.3 ms per ms), not as one 1.4 ms op (0.05 / 0.02)
    model = _Model([0.6, 0.8], [0.7, 0.9])
    rank = _op(1) + _op(2)
    f, b = AtHostState(model, 1.0).predict([rank, _op(1)])
    assert f[0] == pytest.approx(0.6 + 0.8 + 2 * 0.2 * 0.4) and b[0] == pytest.approx(0.7 + 0.9 + 2 * 0.3 * 0.4)
    assert f[1] == pytest.approx(0.6 + 0.2 * 0.4)
    per_set = by_op(model, [rank, rank], np.array([0.6, 1.0]))  # one reading per set
    assert per_set[0][0] == pytest.approx(1.4) and per_set[0][1] == pytest.approx(f[0])


def test_a_model_without_host_state_gains_or_a_bad_reference_is_refused():
    with pytest.raises(InputError, match="host_reference_ms.*no host-state gains"):
        AtHostState(_Model([1.0], [1.0], host_state=False), 0.8)
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(InputError, match="positive number of ms"):
            AtHostState(_Model([1.0], [1.0]), bad)


def test_cli_prices_a_gpu_plan_at_the_host_reference_given(tmp_path, capsys):
    """The committed h100 model at its collection's median reference prices as without one; at a slower host
    every rank costs more, and the plan file names the state it was priced at. A CPU profile refuses."""
    import json

    from shardplan.cli import main
    from shardplan.cost.estimator import load_estimator

    task = "data/tasks/gpu-bench/gpu-bench-00.json"
    plain = tmp_path / "plain.json"
    assert main(["plan", task, "--profile", "h100", "--searcher", "greedy-size", "-o", str(plain)]) == 0
    median = load_estimator("h100").compute.metadata["host_state"]["median_reference_ms"]
    costs = {}
    for name, ref in (("median", median), ("slow", median + 0.4)):
        out = tmp_path / f"{name}.json"
        assert main(["evaluate", str(plain), "--profile", "h100", "--host-reference-ms", str(ref), "-o", str(out)]) == 0
        costs[name] = json.loads(out.read_text())["cost"]
    base = json.loads(plain.read_text())["cost"]
    compute = {k: [r["fwd_compute_ms"] + r["bwd_compute_ms"] for r in c["per_rank"]]
               for k, c in (("plain", base), *costs.items())}
    assert compute["median"] == pytest.approx(compute["plain"])
    assert all(s > p for s, p in zip(compute["slow"], compute["plain"]))
    assert f"host reference of {median + 0.4:.3f} ms" in costs["slow"]["compute_model"]
    capsys.readouterr()
    bad = tmp_path / "bad.json"
    assert main(["evaluate", str(plain), "--profile", "cpu-2c", "--host-reference-ms", "0.8", "-o", str(bad)]) == 2
    assert "host_reference_ms" in capsys.readouterr().err and not bad.exists()


def test_host_reference_is_timed_only_for_a_gpu_profile_on_a_gpu(capsys):
    import torch

    from shardplan.cli import main

    assert main(["profiles", "--host-reference"]) == 2  # which GPU profile is it for?
    assert main(["profiles", "--host-reference", "--profile", "cpu-2c"]) == 2
    assert "CPU profile" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert main(["profiles", "--host-reference", "--profile", "h100"]) == 2
        assert "no CUDA device" in capsys.readouterr().err
    # the listing says which host state each GPU model prices at unless told another
    from shardplan.cost.estimator import load_estimator

    assert main(["profiles"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    median = load_estimator("h100").compute.metadata["host_state"]["median_reference_ms"]
    assert f"host reference, {median:.3f} ms" in lines["h100"] and "host reference" not in lines["cpu-2c"]


def test_python_api_prices_at_the_host_reference_as_the_cli_does():
    import shardplan
    from shardplan.cost.estimator import load_estimator

    task = shardplan.load_task("data/tasks/gpu-bench/gpu-bench-00.json")
    median = load_estimator("h100").compute.metadata["host_state"]["median_reference_ms"]
    plain = shardplan.plan(task, searcher="greedy-size", profile="h100")
    slow = shardplan.evaluate(plain, profile="h100", host_reference_ms=median + 0.4)
    assert all(s.fwd_compute_ms + s.bwd_compute_ms > p.fwd_compute_ms + p.bwd_compute_ms
               for s, p in zip(slow.cost.per_rank, plain.cost.per_rank))
    assert f"host reference of {median + 0.4:.3f} ms" in slow.cost.extra["compute_model"]
    at = shardplan.plan(task, searcher="greedy-size", profile="h100", host_reference_ms=median + 0.4)
    assert at.cost.extra["compute_model"] == slow.cost.extra["compute_model"]
    with pytest.raises(InputError, match="host_reference_ms"):
        shardplan.plan(task, searcher="greedy-size", profile="cpu-2c", host_reference_ms=0.8)


def test_host_reference_auto_is_timed_on_this_machines_gpu_or_refused(tmp_path, capsys):
    # auto times the reference on the GPU of the machine that plans; here (no CUDA) that is a named refusal
    import torch

    from shardplan.cli import main

    out = tmp_path / "p.json"
    task = "data/tasks/gpu-bench/gpu-bench-00.json"
    if torch.cuda.is_available():
        pytest.skip("a CUDA machine would time it")
    assert main(["plan", task, "--profile", "h100", "--host-reference-ms", "auto", "-o", str(out)]) == 2
    assert "no CUDA device" in capsys.readouterr().err and not out.exists()
    assert main(["plan", task, "--profile", "cpu-2c", "--host-reference-ms", "auto", "-o", str(out)]) == 2
    assert "CPU profile" in capsys.readouterr().err and not out.exists()
    with pytest.raises(SystemExit) as e:
        main(["plan", task, "--profile", "h100", "--host-reference-ms", "fast", "-o", str(out)])
    assert e.value.code == 2 and "number of ms or auto" in capsys.readouterr().err


def test_the_default_searcher_plans_at_a_host_state_and_its_sums_agree_with_the_estimate(tmp_path, capsys):
    # the NeuroShard searchers price ranks incrementally (encode_shards/combine); at a host state they crashed
    # with a TypeError, and the placer's price of each rank must be what the estimate then says
    import json

    from shardplan.cli import main
    from shardplan.cost.estimator import load_estimator
    from shardplan.formats import load_task
    from shardplan.search import get_searcher
    from shardplan.search.placer import Placer

    out = tmp_path / "p.json"
    task = "data/tasks/gpu-bench/gpu-bench-11.json"  # TorchRec replicates two of its tables
    assert main(["plan", task, "--profile", "h100", "--host-reference-ms", "0.8", "-o", str(out)]) == 0
    assert "host reference of 0.800 ms" in json.loads(out.read_text())["cost"]["compute_model"]
    est = load_estimator("h100", host_reference_ms=0.8)
    for searcher in ("neuroshard", "torchrec"):
        plan = get_searcher(searcher).plan(load_task(task), est, seed=0)
        placer = Placer(plan.task, est)
        code_sum, time_sum, count, _, _, apart = placer.fixed_sums(list(plan.tables))
        incremental = placer.ms(code_sum, time_sum, count, apart)
        estimated = [r.fwd_compute_ms + r.bwd_compute_ms for r in est.estimate(plan).per_rank]
        assert incremental == pytest.approx(estimated, rel=1e-4)

