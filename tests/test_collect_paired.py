"""shardplan collect paired: another kind's labels are the base labels times the ratio timed in turns."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from shardplan.cli import main
from shardplan.cost import collect_paired as paired
from shardplan.cost import profiles
from shardplan.cost.collect import collect_compute
from shardplan.cost.kernel import KernelTiming
from shardplan.cost.profiles import get_profile
from shardplan.errors import InputError

from conftest import AMD, INTEL, POOL

SLOWER = {"fwd": 1.25, "bwd": 2.0}  # row-wise adagrad over sgd in the fake kernel, whatever the host's level


@pytest.fixture
def base_file(tmp_path):
    """Six tiny sets really timed as sgd (the base labels)."""
    path = tmp_path / "compute.parquet"
    collect_compute(get_profile("cpu-2c-nested"), POOL, path, 6, repeats=2, warmup=1, max_shards=3)
    return path


@pytest.fixture
def fake_kernel(monkeypatch):
    """Each op runs at a host level that changes visit by visit, a kind's ratio to sgd fixed; records the order."""
    calls = []

    class FakeOp:
        def __init__(self, specs, optimizer, dtype, device, id_seed):
            self.optimizer = optimizer

        def run(self, warmup, repeats):
            calls.append(self.optimizer)
            level = 1.0 + (len(calls) - 1) // 2  # the host slows down visit by visit, alike for the pair
            f, b = (level * (SLOWER[h] if self.optimizer == "rowwise_adagrad" else 1.0) for h in ("fwd", "bwd"))
            return KernelTiming(f, b, (f,) * repeats, (b,) * repeats)

    monkeypatch.setattr(paired, "RankOp", FakeOp)
    monkeypatch.setattr(paired, "time_reference", lambda device="cpu": 1.5)
    return calls


def test_labels_are_the_base_labels_times_the_ratio_and_a_rerun_resumes(host, profile_dir, base_file, fake_kernel):
    host(AMD)
    made = profiles.new_profile("nested-rwa", "cpu-2c-nested")
    out = made.dir / "compute.parquet"
    base = get_profile("cpu-2c-nested")
    df = paired.collect_paired(made, base, base_file, out, "rowwise_adagrad", "fp32", visits=2, sets=4)
    src = pd.read_parquet(base_file)
    assert len(df) == 4 and sorted(df.src_row) == sorted(paired.paired_sources(src).index[:4])
    assert fake_kernel[:2] == ["sgd", "rowwise_adagrad"] and fake_kernel[2:6] == ["sgd", "rowwise_adagrad"] * 2
    for r in df.itertuples():
        s = src.loc[r.src_row]
        assert r.ratio_fwd == pytest.approx(SLOWER["fwd"]) and r.ratio_bwd == pytest.approx(SLOWER["bwd"])
        assert r.fwd_ms == pytest.approx(s.fwd_ms * 1.25) and r.bwd_ms == pytest.approx(s.bwd_ms * 2.0)
        assert list(r.bwd_samples_ms) == pytest.approx([x * 2.0 for x in s.bwd_samples_ms])
        # the base row's identity and references stay, so training divides and splits the new label alike
        assert (r.seed, r.sample, r.shards, r.ref_before_ms) == (s.seed, s["sample"], s.shards, s.ref_before_ms)
        assert (r.optimizer, r.dtype, r.profile, r.base_profile, r.label_recipe) == (
            "rowwise_adagrad", "fp32", "nested-rwa", "cpu-2c-nested", "paired-ratio")
    n = len(fake_kernel)
    again = paired.collect_paired(made, base, base_file, out, "rowwise_adagrad", "fp32", visits=2, sets=4)
    assert len(again) == 4 and len(fake_kernel) == n  # nothing timed twice
    assert len(paired.collect_paired(made, base, base_file, out, "rowwise_adagrad", "fp32", visits=2)) == 6


def test_held_out_pairs_only_the_rows_training_holds_out_of_those_wanted(host, profile_dir, base_file, fake_kernel,
                                                                          monkeypatch):
    """``--held-out`` re-pairs the rows a model is scored on (of the first ``sets`` in the seeded order)."""
    host(AMD)
    made = profiles.new_profile("nested-rwa", "cpu-2c-nested")
    src = pd.read_parquet(base_file)
    first = paired.paired_sources(src).index[:4]
    held = set(first[1::2])  # which rows are held out is train's call; here every other one of the first four
    monkeypatch.setattr(paired, "holdout_mask", lambda df: df.index.isin(list(held)))
    out = made.dir / "repeatability" / "compute-held-out.parquet"
    df = paired.collect_paired(made, get_profile("cpu-2c-nested"), base_file, out, "rowwise_adagrad", "fp32",
                               visits=3, sets=4, held_out=True)
    assert set(df.src_row) == held and set(df.paired_visits) == {3}
    assert len(fake_kernel) == 2 * 2 * (1 + 3)  # two rows, two kinds: a warm-up, then three visits each


def test_with_wait_fit_rows_are_paired_only_after_a_fit_probe_and_record_it(host, profile_dir, base_file,
                                                                          fake_kernel, monkeypatch):
    """The base profile is probed before the first row and every FIT_EVERY rows; a wait that runs out stops the
    call with every row paired so far written, and a rerun resumes."""
    from shardplan.cost.fitness import Fitness
    from shardplan.errors import MachineUnfitError

    host(AMD)
    made = profiles.new_profile("nested-rwa", "cpu-2c-nested")
    out = made.dir / "compute.parquet"
    probes = []

    def probe(profile, max_wait_s):
        probes.append((profile.name, max_wait_s, len(pd.read_parquet(out)) if out.exists() else 0))
        if len(probes) == 3:
            raise MachineUnfitError("unfit")
        return Fitness(1.05, 1.2, 1.01)

    monkeypatch.setattr(paired, "wait_until_fit", probe)
    monkeypatch.setattr(paired, "FIT_EVERY", 2)
    base = get_profile("cpu-2c-nested")
    with pytest.raises(MachineUnfitError):
        paired.collect_paired(made, base, base_file, out, "rowwise_adagrad", "fp32", wait_fit_s=600, flush_every=10)
    assert probes == [("cpu-2c-nested", 600, n) for n in (0, 2, 4)]  # each probe after the rows before it are written
    df = pd.read_parquet(out)  # the four rows paired before the third probe, though fewer than flush_every
    assert len(df) == 4 and list(df.fit_label_ratio) == [1.05] * 4 and list(df.fit_tilt) == [1.01] * 4
    assert len(paired.collect_paired(made, base, base_file, out, "rowwise_adagrad", "fp32", wait_fit_s=600)) == 6


def test_what_cannot_be_paired_is_refused_before_timing(host, profile_dir, base_file, fake_kernel, capsys):
    host(AMD)
    made = profiles.new_profile("nested-rwa", "cpu-2c-nested")
    base = get_profile("cpu-2c-nested")
    out = made.dir / "compute.parquet"
    cases = [((made, base, base_file, out, "sgd", "fp32"), "--optimizer/--dtype"),  # the base's own kind
             ((made, made, base_file, out, "rowwise_adagrad", "fp32"), "--base"),
             ((made, get_profile("h100"), base_file, out, "rowwise_adagrad", "fp32"), "--base"),
             ((made, base, base_file, out, "adam", "fp32"), "--optimizer")]  # the CPU kernel asserts on Adam
    for args, field in cases:
        with pytest.raises(InputError) as e:
            paired.collect_paired(*args)
        assert e.value.field == field
    host(INTEL)  # the base's labels were taken on another CPU than this one
    with pytest.raises(InputError, match="--base"):
        paired.collect_paired(made, base, base_file, out, "rowwise_adagrad", "fp32")
    assert fake_kernel == [] and not out.exists()
    host(AMD)  # the CLI: exit 2 naming the field, nothing written
    argv = ["collect", "paired", "--profile", "nested-rwa", "--base", "cpu-2c-nested", "--optimizer", "adagrad",
            "--src", str(base_file), "--out", str(base_file)]
    assert main(argv) == 2 and "error: --out:" in capsys.readouterr().err
    assert main(argv[:-4] + ["--src", str(out.with_name("none.parquet"))]) == 2
    assert "error: --src: no cost-data file" in capsys.readouterr().err
    for retime_argv, field in ((["collect", "retime", str(base_file), "--out", str(base_file)], "--out"),
                               (["collect", "retime", str(out), "--out", str(base_file)], "SRC")):
        assert main(retime_argv + ["--profile", "nested-rwa"]) == 2  # collect retime checks the same way
        assert f"error: {field}:" in capsys.readouterr().err
    assert not out.exists()


def test_the_host_takes_the_profile_that_prices_the_tasks_optimizer(host, profile_dir):
    def trained(name: str, date: str, optimizer: str) -> None:  # a model file's metadata is all this reads
        (profile_dir / name).mkdir(exist_ok=True)
        (profile_dir / name / "compute-model.json").write_text(json.dumps(
            {"metadata": {"date": date, "optimizers": [optimizer], "dtypes": ["fp32"]}}))

    host(AMD)
    profiles.new_profile("nested-rwa", "cpu-2c-nested")
    trained("cpu-2c-nested", "2026-11-28", "sgd")
    trained("nested-rwa", "2026-12-31", "rowwise_adagrad")
    assert profiles.local_profile() == "cpu-2c-nested"  # the later trained, but of another optimizer
    assert profiles.local_profile(("rowwise_adagrad", "fp32")) == "nested-rwa"  # the latest trained of that kind
    assert profiles.local_profile(("adagrad", "fp32")) == profiles.DEFAULT_PROFILE  # none: the default refuses it
    assert profiles.profiles_pricing("cpu", ("rowwise_adagrad", "fp32")) == ["nested-rwa"]


def test_the_committed_paired_profile_beats_its_base_priced_as_is_or_scaled(load_script, monkeypatch, tmp_path):
    """bench/kind_transfer.py on the committed row-wise adagrad profile: its own model against sgd's model as it
    is and times one factor, on the rows its data holds out."""
    transfer = load_script("bench/kind_transfer.py")
    monkeypatch.setattr("sys.argv", ["kind_transfer.py", "--profile", "cpu-2c-nested-rowwise-adagrad", "--name", "t",
                                     "--out", str(tmp_path)])
    transfer.main()
    table = pd.read_csv(tmp_path / "kind-transfer-cpu-2c-nested-rowwise-adagrad-t.csv")
    mape = {(r["split"], r["model"].split(" ")[1]): float(r["fwd+bwd MAPE"].rstrip("%")) for _, r in table.iterrows()}
    for split in ("held-out random sets", "held-out plan ranks"):
        own, as_is, scaled = mape[(split, "(own")], mape[(split, "as")], mape[(split, "x")]
        assert own < scaled < as_is, (split, own, scaled, as_is)
    with pytest.raises(InputError, match="--profile"):  # a profile not labelled by collect paired
        monkeypatch.setattr("sys.argv", ["kind_transfer.py", "--profile", "cpu-2c-nested"])
        transfer.main()


def test_kind_transfer_scores_labels_paired_again_and_pools_them_by_visits(load_script):
    """A repeat's labels are the training labels times its ratio over the trained one; the pool weighs the two
    ratios (in log) by their visits; rows the repeat did not pair again are left out of both."""
    transfer = load_script("bench/kind_transfer.py")
    df = pd.DataFrame({"src_row": [10, 11, 12], "paired_visits": 2, "ratio_fwd": [1.0, 1.0, 1.0],
                       "ratio_bwd": [2.0, 2.0, 2.0]})
    repeat = pd.DataFrame({"src_row": [12, 10], "paired_visits": 6, "ratio_fwd": [1.0, 1.0],
                           "ratio_bwd": [4.0, 1.0]})
    fwd, bwd = np.array([1.0, 2.0, 3.0]), np.array([10.0, 20.0, 30.0])
    labels = transfer.repaired_labels(df, np.array([0, 2]), fwd, bwd, repeat)
    (at0, f0, b0), (at1, f1, b1), (at2, f2, b2) = labels.values()
    assert list(labels) == ["as trained (2 visits)", "re-paired (6 visits)", "pooled (8 visits)"]
    assert list(at0) == list(at1) == list(at2) == [0, 2] and list(f1) == list(f0) == [1.0, 3.0]
    assert list(b1) == pytest.approx([5.0, 60.0])  # row 10's ratio halved, row 12's doubled
    assert list(b2) == pytest.approx([10.0 * 0.5 ** 0.75, 30.0 * 2 ** 0.75])  # 2 visits against 6


def test_kind_transfer_level_slope_holds_each_row_fixed(load_script):
    """The slope of the log ratio on the log reference is read within rows (a row's composition cancels), rows
    paired once are left out, and it is carried from the first pairing's median reference to the quiet one."""
    transfer = load_script("bench/kind_transfer.py")
    rng = np.random.default_rng(0)
    base = np.exp(rng.normal(0.0, 0.5, 40))  # each row's own ratio, far noisier than the host's effect

    def pairing(ref: np.ndarray, rows: slice = slice(None)) -> pd.DataFrame:
        return pd.DataFrame({"src_row": np.arange(40)[rows], "paired_ref_ms": ref[rows],
                             "ratio_fwd": base[rows], "ratio_bwd": base[rows] * ref[rows] ** -0.2})

    first = pairing(np.full(40, 4.0))
    again = pairing(rng.uniform(1.5, 8.0, 40), slice(0, 30))  # ten rows not paired again
    out = transfer.level_slope([first, again], quiet_ms=1.0)
    assert out["rows paired twice or more"] == "30" and out["pairings"] == "60"
    assert out["fwd slope"] == "+0.000 ± 0.000" and out["fwd quiet / labels"] == "1.000"
    assert out["bwd slope"] == "-0.200 ± 0.000"
    assert float(out["bwd quiet / labels"]) == pytest.approx(4.0 ** 0.2, abs=1e-3)
