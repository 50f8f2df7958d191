"""A profile's costs belong to the CPU they were measured on: which profile a host is, the warning
when measuring on another CPU, and the refusal to write one CPU's timings into another's data."""
import json

import pytest

from shardplan.cli import main
from shardplan.cost import profiles
from shardplan.cost.profiles import (check_collect_target, foreign_host_note, get_profile, host_profile,
                                     local_profile, runs_here)
from shardplan.errors import InputError
from shardplan.execute.measure import measure_plan, measure_plan_calibrated
from shardplan.formats import load_plan

from conftest import AMD, INTEL


def test_a_profile_runs_on_the_cpu_it_was_measured_on(host):
    host(AMD)
    assert runs_here(get_profile("cpu-2c")) and not runs_here(get_profile("cpu-2c-xeon"))
    assert foreign_host_note(get_profile("cpu-2c")) is None
    host(INTEL)
    assert not runs_here(get_profile("cpu-2c")) and runs_here(get_profile("cpu-2c-xeon"))
    assert runs_here(get_profile("h100"))  # GPU profiles name their device, not the host CPU
    note = foreign_host_note(get_profile("cpu-2c"))
    assert INTEL in note and "'cpu-2c'" in note and AMD in note


def test_the_host_profile_is_the_trained_one_of_its_cpu(host, monkeypatch, tmp_path):
    monkeypatch.setattr(profiles, "PROFILE_DIR", tmp_path)
    host(INTEL)
    assert host_profile() is None and local_profile() == profiles.DEFAULT_PROFILE  # none trained yet
    assert "collect a profile for this CPU" in foreign_host_note(get_profile("cpu-2c"))
    (tmp_path / "cpu-2c-xeon").mkdir()
    (tmp_path / "cpu-2c-xeon" / "compute-model.json").write_text("{}")
    assert host_profile().name == "cpu-2c-xeon" and local_profile() == "cpu-2c-xeon"
    assert "--profile cpu-2c-xeon" in foreign_host_note(get_profile("cpu-2c"))
    host("Some Other CPU")
    assert host_profile() is None and local_profile() == profiles.DEFAULT_PROFILE


def test_of_two_trained_profiles_of_one_cpu_the_host_takes_the_latest_trained(host, profile_dir, capsys):
    """A profile made and trained here after the committed one of the same CPU name is the one its maker
    collected for: ``run`` takes it, and the listing says which it took, the other and how to choose."""
    def trained(name: str, date: str) -> None:
        (profile_dir / name).mkdir(exist_ok=True)
        (profile_dir / name / "compute-model.json").write_text(json.dumps({"metadata": {"date": date}}))

    host(AMD)
    trained("cpu-2c", "2026-11-23")
    assert [p.name for p in profiles.host_profiles()] == ["cpu-2c"]
    assert main(["profiles", "--new", "my-epyc", "--like", "cpu-2c"]) == 0
    assert get_profile("my-epyc").cpu_model == AMD
    trained("my-epyc", "2026-12-01")
    assert [p.name for p in profiles.host_profiles()] == ["my-epyc", "cpu-2c"] and local_profile() == "my-epyc"
    capsys.readouterr()
    assert main(["profiles"]) == 0
    listing = capsys.readouterr().out
    assert "its profile: my-epyc (also measured on this CPU: cpu-2c; shardplan run takes my-epyc" in listing


def test_a_host_of_the_same_cpu_name_but_another_l3_is_told_apart(host, profile_dir, capsys):
    """A guest that names its CPU as cpu-2c-xeon's host did, with a quarter of its L3 (session 73's): a profile
    made on it is its own even where an older one trained later, and the listing and the probe say why."""
    def trained(name: str, date: str) -> None:
        (profile_dir / name).mkdir(exist_ok=True)
        (profile_dir / name / "compute-model.json").write_text(json.dumps({"metadata": {"date": date}}))

    xeon = get_profile("cpu-2c-xeon")
    assert xeon.l3_mib == 480 and get_profile("cpu-2c").l3_mib == 32
    host(INTEL, 105.0)
    chip = profiles.HostChip
    assert profiles.chip_differs(xeon, chip(105.0)) and not profiles.chip_differs(xeon, chip(420.0))
    assert not profiles.chip_differs(xeon, chip())  # an unknown cache tells nothing apart
    assert not profiles.chip_differs(get_profile("h100"), chip(105.0))  # a GPU profile has no CPU cache of its labels
    assert main(["profiles", "--new", "xeon-guest", "--like", "cpu-2c-xeon"]) == 0
    assert get_profile("xeon-guest").l3_mib == 105.0
    trained("xeon-guest", "2026-12-01")
    trained("cpu-2c-xeon", "2026-12-02")  # trained later, but on the other cache
    assert [p.name for p in profiles.host_profiles()] == ["xeon-guest", "cpu-2c-xeon"]
    with pytest.raises(InputError, match="L3 is 105 MiB where cpu-2c-xeon's"):  # its timings stay out of the data
        check_collect_target(xeon, xeon.dir / "compute.parquet")
    check_collect_target(xeon, profile_dir / "elsewhere.parquet")
    host(INTEL, 480.0)  # the profile's own host: the later trained one, its cache
    assert [p.name for p in profiles.host_profiles()] == ["cpu-2c-xeon", "xeon-guest"]
    assert profiles.chip_note(xeon, profiles.host_chip()) is None
    host(INTEL)  # a host whose L3 is not known: no profile is passed over for it
    assert [p.name for p in profiles.host_profiles()] == ["cpu-2c-xeon", "xeon-guest"]
    host(INTEL, 105.0)
    (profile_dir / "xeon-guest" / "compute-model.json").unlink()
    capsys.readouterr()
    assert main(["profiles"]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert listing[0].startswith(f"this host: {INTEL!r} (L3 105 MiB); its profile: cpu-2c-xeon")
    assert listing[1].startswith("this host's L3 is 105 MiB where cpu-2c-xeon's labels were taken with 480 MiB")


def test_a_host_of_the_same_cpu_name_and_l3_but_another_cpu_model_is_told_apart(host, plan_dict):
    """The guest of 2026-12-06: 'AMD EPYC' with 32 MiB of L3, as cpu-2c-nested's, but a Zen 4 (family 25 model
    17, AVX-512) where that one is a Zen 3 (model 1). Its timings stay out of the nested guest's data, the
    nested profile goes after any that may be this host's, and a measurement with it says why it does not hold."""
    nested = get_profile("cpu-2c-nested")
    assert nested.cpu_signature == "family 25 model 1" and get_profile("cpu-2c").cpu_signature is None
    zen4 = profiles.HostChip(32.0, "family 25 model 17")
    assert profiles.chip_differences(nested, zen4) == [
        "CPU is family 25 model 17 where cpu-2c-nested's labels were taken on family 25 model 1"]
    assert not profiles.chip_differs(nested, profiles.HostChip(32.0))  # an unknown model tells nothing apart
    assert not profiles.chip_differs(get_profile("cpu-2c"), zen4)  # nor a profile that never recorded one
    host(AMD, 32.0)  # a host whose model is not known: no profile is passed over for it
    assert [p.name for p in profiles.host_profiles()].index("cpu-2c-nested") < [
        p.name for p in profiles.host_profiles()].index("cpu-2c")  # the later trained first
    host(AMD, 32.0, "family 25 model 17")
    assert [p.name for p in profiles.host_profiles()][-1] == "cpu-2c-nested"
    with pytest.raises(InputError, match="CPU is family 25 model 17 where cpu-2c-nested's"):
        check_collect_target(nested, nested.dir / "compute.parquet")
    with pytest.warns(UserWarning, match="family 25 model 17"):
        cost = measure_plan(load_plan(plan_dict), "cpu-2c-nested")
    assert "model 1" in cost.extra["foreign_host"]
    host(AMD, 32.0, "family 25 model 1")
    check_collect_target(nested, nested.dir / "compute.parquet")  # its own host: allowed
    assert profiles.host_profile().name == "cpu-2c-nested"


def test_the_cpu_signature_is_read_from_cpuinfo_and_checked_in_a_profile_file(host, profile_dir, tmp_path):
    host(AMD, 32.0, "family 25 model 17")
    assert main(["profiles", "--new", "zen4-guest", "--like", "cpu-2c-nested"]) == 0
    assert (get_profile("zen4-guest").l3_mib, get_profile("zen4-guest").cpu_signature) == (32.0, "family 25 model 17")
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
                       "model name\t: AMD EPYC\n\nprocessor\t: 1\ncpu family\t: 26\nmodel\t\t: 2\n")
    assert profiles.host_cpu_signature(cpuinfo) == "family 25 model 17"  # the first processor's
    cpuinfo.write_text("processor\t: 0\nCPU implementer\t: 0x41\n")  # an ARM host lists neither
    assert profiles.host_cpu_signature(cpuinfo) is None and profiles.host_cpu_signature(tmp_path / "no") is None
    doc = get_profile("cpu-2c-nested").to_json()
    assert doc["cpu_signature"] == "family 25 model 1" and "cpu_signature" not in get_profile("cpu-2c").to_json()
    (profile_dir / "bad-sig").mkdir()
    bad = {**doc, "name": "bad-sig", "cpu_signature": "zen3"}
    (profile_dir / "bad-sig" / "profile.json").write_text(json.dumps(bad))
    assert "cpu_signature" in profiles.load_profiles(profile_dir)[1]["bad-sig"]


def test_a_profile_file_records_its_hosts_l3(profile_dir, tmp_path):
    doc = get_profile("cpu-2c").to_json()
    assert doc["l3_mib"] == 32 and "l3_mib" not in get_profile("h100").to_json()  # unset is left unwritten
    (profile_dir / "bad-l3").mkdir()
    (profile_dir / "bad-l3" / "profile.json").write_text(json.dumps({**doc, "name": "bad-l3", "l3_mib": -1}))
    assert "bad-l3" in profiles.load_profiles(profile_dir)[1]
    sysfs = tmp_path / "cache"
    for index, (level, size) in enumerate((("1", "48K"), ("2", "2048K"), ("3", "107520K"))):
        (sysfs / f"index{index}").mkdir(parents=True)
        (sysfs / f"index{index}" / "level").write_text(level + "\n")
        (sysfs / f"index{index}" / "size").write_text(size + "\n")
    assert profiles.host_l3_mib(sysfs) == 105.0
    (sysfs / "index2" / "level").write_text("2\n")
    assert profiles.host_l3_mib(sysfs) is None and profiles.host_l3_mib(tmp_path / "nowhere") is None


def test_the_listing_keeps_its_columns_when_a_state_names_a_kind(host, capsys):
    """The committed row-wise adagrad profile's state names its kind; every description still starts in
    one column, after at least one space (it once ran on straight from the kind)."""
    host(AMD)
    assert main(["profiles"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert "(rowwise_adagrad, fp32) 2-core" in rows["cpu-2c-nested-rowwise-adagrad"]
    starts = {rows[name].index(p.description) for name, p in profiles.PROFILES.items()}
    assert len(starts) == 1


def test_another_cpus_timings_never_land_in_a_profiles_data(host, tmp_path, capsys):
    host("Some Other CPU")
    cpu2c = get_profile("cpu-2c")
    with pytest.raises(InputError, match="profile"):
        check_collect_target(cpu2c, cpu2c.dir / "compute.parquet")
    check_collect_target(cpu2c, tmp_path / "elsewhere.parquet")  # scratch data may go anywhere else
    target = cpu2c.dir / "never-written-by-tests.parquet"
    try:
        assert main(["collect", "compute", "--profile", "cpu-2c", "--samples", "1", "--out", str(target)]) == 2
        assert not target.exists()
    finally:
        target.unlink(missing_ok=True)
    assert "Some Other CPU" in capsys.readouterr().err
    host(AMD)
    check_collect_target(cpu2c, cpu2c.dir / "compute.parquet")  # its own CPU: allowed


def test_measuring_on_another_cpu_warns_and_says_so_in_the_cost_block(host, plan_dict):
    host("Some Other CPU")
    with pytest.warns(UserWarning, match="measured on 'AMD EPYC'"):
        cost = measure_plan(load_plan(plan_dict), "cpu-2c")
    assert cost.extra["host_cpu"] == "Some Other CPU" and "Some Other CPU" in cost.extra["foreign_host"]
    host(AMD)
    cost = measure_plan(load_plan(plan_dict), "cpu-2c")
    assert cost.extra["host_cpu"] == AMD and "foreign_host" not in cost.extra
    # a GPU plan's ranks are not timed on CPU kernels and reported as its measured cost
    gpu = {**plan_dict, "task": {**plan_dict["task"], "topology": {**plan_dict["task"]["topology"], "device": "cuda"}}}
    for measure in (measure_plan, measure_plan_calibrated):
        with pytest.raises(InputError, match=r"^task.topology.device: .* cuda ranks but profile 'cpu-2c' times cpu"):
            measure(load_plan(gpu), "cpu-2c")


def test_the_probe_tells_a_machine_that_only_shares_the_cpus_name(host, monkeypatch, capsys):
    from shardplan.cost import fitness
    from shardplan.cost.fitness import Fitness

    host(AMD, 32.0, "family 25 model 1")  # the nested guest of sessions 39-72
    # committed profiles call their CPU AMD EPYC; the probe re-times the one run takes: of this family and model
    own = profiles.host_profile().name
    assert own == "cpu-2c-nested" and [p.name for p in profiles.host_profiles()][:2] == [own, "cpu-2c"]
    readings = {own: Fitness(0.60, 4.43, 0.65)}  # session 39's guest on cpu-2c: ranks 2.7x their labels undivided
    monkeypatch.setattr(fitness, "probe", lambda profile: readings.get(profile.name))
    assert main(["profiles", "--probe"]) == 0
    out = capsys.readouterr().out
    assert f"probe ({own})" in out and "2.66x their labels" in out and "does not run like the one" in out
    readings[own] = Fitness(1.02, 1.10, 1.0)  # the labels' own host
    assert main(["profiles", "--probe"]) == 0
    out = capsys.readouterr().out
    assert "1.12x their labels" in out and "does not run like" not in out
    host(INTEL, 105.0)  # session 73's guest: the same CPU name as cpu-2c-xeon's host, a quarter of its L3
    readings["cpu-2c-xeon"] = Fitness(1.52, 2.74, 0.64)
    assert main(["profiles", "--probe"]) == 0
    assert ("though its CPU has the same name: this host's L3 is 105 MiB where cpu-2c-xeon's labels were taken "
            "with 480 MiB)" in capsys.readouterr().out)
    host("Some Other CPU")  # no profile of its own: nothing to probe, and the flag is named
    assert main(["profiles", "--probe"]) == 2
    assert "--probe" in capsys.readouterr().err


def test_the_committed_profiles_are_read_from_their_folders():
    """Each profile's protocol lives in its folder's profile.json (the files other tools read), and the
    registry holds exactly those: the CPU VMs' protocol (3 warm-up, median of 10) and the GPUs' (2, 5)."""
    found, broken = profiles.load_profiles(profiles.PROFILE_DIR)
    names = ["cpu-2c", "cpu-2c-nested", "cpu-2c-nested-rowwise-adagrad", "cpu-2c-xeon", "cpu-2c-zen4", "h100", "h200"]
    assert broken == {} and list(found) == names == list(profiles.PROFILES)
    assert (found["cpu-2c"].cpu_model, found["cpu-2c"].repeats, found["cpu-2c"].threads) == (AMD, 10, 1)
    assert (found["h100"].device, found["h100"].warmup, found["h100"].repeats) == ("cuda", 2, 5)
    assert found["cpu-2c-nested"].retry_pause_s == 0.1  # the nested guest's reference jitters op to op
    for p in found.values():
        assert profiles.Profile.from_json(p.to_json()) == p


def test_a_new_profile_of_this_host_is_written_whole_and_registered(host, profile_dir, capsys):
    host(INTEL)
    assert main(["profiles", "--new", "xeon-16c", "--like", "cpu-2c", "--description", "a 16-core Xeon"]) == 0
    made = get_profile("xeon-16c")
    assert (made.cpu_model, made.description, made.repeats) == (INTEL, "a 16-core Xeon", 10)
    assert profiles.load_profiles(profile_dir)[0]["xeon-16c"] == made  # what a later process reads
    readme = (profile_dir / "xeon-16c" / "README.md").read_text()
    assert "collect compute --profile xeon-16c" in readme and "train --profile xeon-16c" in readme
    check_collect_target(made, made.dir / "compute.parquet")  # its data may be collected here
    # a GPU profile records its device, not the host's CPU
    assert main(["profiles", "--new", "a100", "--like", "h100"]) == 0
    assert get_profile("a100").cpu_model == "" and get_profile("a100").device == "cuda"
    # refused, exit 2, nothing written: a taken name, a bad name, an unknown base, --like missing or alone
    for argv, field in ((["--new", "xeon-16c", "--like", "cpu-2c"], "name"), (["--new", "Bad/x", "--like", "cpu-2c"],
                        "name"), (["--new", "x1", "--like", "nope"], "profile"), (["--new", "x2"], "--like"),
                        (["--like", "cpu-2c"], "--like")):
        assert main(["profiles", *argv]) == 2
        assert f"error: {field}:" in capsys.readouterr().err
    assert sorted(p.name for p in profile_dir.iterdir()) == ["a100", "xeon-16c"]
    assert (profile_dir / "xeon-16c" / "profile.json").read_text().count('"name"') == 1


def test_a_broken_profile_file_names_its_field_and_spares_the_others(profile_dir, capsys):
    good = get_profile("cpu-2c").to_json()
    cases = {"typo": {**good, "name": "typo", "repeat": 5},  # a misspelt field never falls back to a default
             "neg": {**good, "name": "neg", "threads": -1},
             "moved": {**good, "name": "elsewhere"},
             "Odd Name": {**good, "name": "Odd Name"}}  # the whole name obeys the rule --new checks
    for folder, doc in cases.items():
        (profile_dir / folder).mkdir()
        (profile_dir / folder / "profile.json").write_text(json.dumps(doc))
    (profile_dir / "bad-json").mkdir()
    (profile_dir / "bad-json" / "profile.json").write_text("{")
    (profile_dir / "ok").mkdir()
    (profile_dir / "ok" / "profile.json").write_text(json.dumps({**good, "name": "ok"}))
    gpu = get_profile("h100").to_json()
    for folder, doc in (("gpu-bare", {k: v for k, v in gpu.items() if k != "published"}),
                        ("cpu-links", {**good, "published": gpu["published"]})):
        (profile_dir / folder).mkdir()
        (profile_dir / folder / "profile.json").write_text(json.dumps({**doc, "name": folder}))
    found, broken = profiles.load_profiles(profile_dir)
    assert list(found) == ["ok"]
    assert sorted(broken) == ["Odd Name", "bad-json", "cpu-links", "gpu-bare", "moved", "neg", "typo"]
    assert "name" in broken["Odd Name"]
    assert "published figures" in broken["gpu-bare"] and "collect comm" in broken["cpu-links"]
    assert "repeat" in broken["typo"] and "threads" in broken["neg"] and "malformed JSON" in broken["bad-json"]
    assert "rename" in broken["moved"]
    profiles.BROKEN_PROFILES.update(broken)  # the fixture's registry, as an import would have read it
    with pytest.raises(InputError, match="threads"):
        get_profile("neg")
    assert main(["profiles"]) == 0
    assert "unusable" in capsys.readouterr().out


def test_a_new_profile_collects_and_trains_on_its_own_data(host, profile_dir, capsys):
    """The whole way a user brings a machine: a profile of it, real FBGEMM timings in its folder, a model
    trained from them; planning then asks for the one piece still missing (its comm data)."""
    from shardplan.cost.collect import collect_compute
    from shardplan.cost.estimator import load_estimator
    from shardplan.cost.train import train_and_report
    from shardplan.domain import Table

    from shardplan.cost.profile_steps import progress

    host(AMD)
    made = profiles.new_profile("amd-guest", "cpu-2c")
    assert [detail for _, detail in progress(made)] == [None] * 6  # nothing collected yet
    pool = [Table(f"p{i}", 400 * (i + 1), 16, 2.0 + i) for i in range(6)]
    collect_compute(made, pool, made.dir / "compute.parquet", 16, seed=0, repeats=2, warmup=1, max_shards=3)
    meta = train_and_report(made, epochs=2, progress=False)
    assert meta["profile"] == "amd-guest" and (made.dir / "compute-model.json").exists()
    with pytest.raises(InputError, match="collect comm"):
        load_estimator("amd-guest")
    # `profiles --show` reads the folder back: what each file holds, and the command planning still needs
    held = {s.file: detail for s, detail in progress(made)}
    assert held["compute.parquet"].startswith("16 rows, ") and "held out fwd+bwd MAPE" in held["compute-model.json"]
    assert held["comm-model.json"] is None
    (made.dir / "rl-policy.json").write_text("{")  # a file it cannot read is reported, not fatal
    held = {s.file: detail for s, detail in progress(made)}
    assert held["rl-policy.json"].startswith("unreadable")
    assert main(["profiles", "--show", "amd-guest"]) == 0
    assert "next (communication): .venv/bin/shardplan collect comm --profile amd-guest" in capsys.readouterr().out


def test_a_task_of_another_device_than_the_profiles_is_refused_before_searching(plan_dict, tmp_path):
    import shardplan
    from shardplan.cost.profiles import profile_for

    cpu_task = shardplan.load_task("data/tasks/default.json")
    with pytest.raises(InputError, match="topology.device") as e:
        shardplan.plan(cpu_task, searcher="greedy-size", profile="h100")
    assert "cuda" in str(e.value) and "cpu-2c" in str(e.value)
    # tables planned for a GPU profile are GPU ranks, with the GPU's memory default
    tables = [{"name": f"t{i}", "num_embeddings": 50_000, "embedding_dim": 64, "pooling_factor": 10.0}
              for i in range(4)]
    gpu = shardplan.plan(tables, 2, searcher="greedy-size", profile="h100", batch_size_per_rank=16384)
    assert gpu.task.topology.device == "cuda" and gpu.cost.profile == "h100"
    # evaluating prices with the profile that priced the plan, not the default
    again = shardplan.evaluate(gpu)
    assert again.cost.profile == "h100" and again.cost.max_ms == pytest.approx(gpu.cost.max_ms)
    from dataclasses import replace

    with pytest.raises(InputError, match="names no profile"):
        profile_for(replace(gpu, cost=None))
    assert profile_for(replace(load_plan(plan_dict), cost=None)) == profiles.DEFAULT_PROFILE
    # the CLI alike: evaluate and report price a GPU plan file with its own profile, unasked
    plan_file, out = tmp_path / "gpu.json", tmp_path / "gpu-eval.json"
    shardplan.save_plan(gpu, plan_file)
    assert main(["evaluate", str(plan_file), "-o", str(out)]) == 0
    priced = load_plan(out).cost
    assert priced.profile == "h100" and priced.max_ms == pytest.approx(gpu.cost.max_ms, abs=1e-4)  # 4 places kept
    shardplan.save_plan(replace(gpu, cost=None), plan_file)
    assert main(["report", str(plan_file), "-o", str(tmp_path / "r.html")]) == 2  # a GPU plan naming no profile
    assert main(["report", str(plan_file), "--profile", "h100", "-o", str(tmp_path / "r.html")]) == 0


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="refusals of a machine without CUDA")
def test_timing_a_gpu_profile_without_a_gpu_is_refused_and_writes_nothing(tmp_path, capsys):
    """Measuring, calibrating or collecting for a GPU profile on a CPU host says so (exit 2), where a
    traceback from deep in CUDA's generator (or nvidia-smi) used to come out; pricing the plan needs no GPU."""
    plan = tmp_path / "plan.json"
    assert main(["plan", "data/tasks/gpu-bench/gpu-bench-00.json", "--profile", "h100", "--searcher", "greedy-size",
                 "-o", str(plan)]) == 0
    for argv in (["evaluate", str(plan), "--measure", "-o", str(tmp_path / "m.json")],
                 ["collect", "compute", "--profile", "h100", "--samples", "1", "--out", str(tmp_path / "c.parquet")]):
        assert main(argv) == 2
        assert "no CUDA device" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]


def test_a_gpu_profiles_published_figures_price_it_before_any_gpu_data(profile_dir):
    """A GPU not measured yet plans with the roofline of the HBM bandwidth its profile.json publishes and the
    alpha-beta comm of its links: edit them, and both follow."""
    from dataclasses import replace

    from shardplan.cost.baselines import RooflineCostModel
    from shardplan.cost.estimator import comm_model_for

    made = profiles.new_profile("a100", "h100")
    a100 = replace(made, published=replace(made.published, hbm_bytes_per_s=2.039e12, nvlink_gbps=300.0,
                                           network_gbps=25.0, hbm_source="NVIDIA A100 80GB SXM datasheet"))
    (made.dir / "profile.json").write_text(json.dumps(a100.to_json()))
    profiles.PROFILES["a100"] = profiles.load_profile_file(made.dir / "profile.json")
    ratio = RooflineCostModel.published("h100").bytes_per_ms / RooflineCostModel.published("a100").bytes_per_ms
    assert ratio == pytest.approx(3.35e12 / 2.039e12)
    assert "A100" in RooflineCostModel.published("a100").metadata["source"]
    comm = comm_model_for(get_profile("a100"))
    assert (comm.intra_gbps, comm.inter_gbps, comm.alpha_intra_us) == (300.0, 25.0, 10.0)


def test_a_user_names_their_default_profile_once(tmp_path):
    """SHARDPLAN_PROFILE sets the profile every command uses unless told another (here h100, so a GPU task
    plans without --profile); a name that is no profile is refused naming the variable."""
    import os
    import subprocess
    import sys

    def cli(*argv: str, profile: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "shardplan.cli", *argv], capture_output=True, text=True,
                              env={**os.environ, "SHARDPLAN_PROFILE": profile}, timeout=300)

    out = tmp_path / "p.json"
    done = cli("plan", "data/tasks/gpu-bench/gpu-bench-00.json", "--searcher", "greedy-size", "-o", str(out),
               profile="h100")
    assert done.returncode == 0, done.stderr
    assert load_plan(out).cost.profile == "h100"
    refused = cli("plan", "data/tasks/default.json", "-o", str(tmp_path / "q.json"), profile="nope")
    assert refused.returncode == 2 and "SHARDPLAN_PROFILE: unknown hardware profile 'nope'" in refused.stderr
    assert not (tmp_path / "q.json").exists()


def test_a_weight_type_without_cost_data_is_refused_rather_than_priced_as_fp32():
    import shardplan

    tables = [{"name": "t", "num_embeddings": 1000, "embedding_dim": 16, "pooling_factor": 2.0}]
    with pytest.raises(InputError, match="^dtype: ") as e:
        shardplan.plan(shardplan.load_task({**shardplan.formats.task_to_dict(shardplan.make_task(tables, 2)),
                                            "dtype": "fp16"}), searcher="greedy-size")
    assert "fp32" in str(e.value)


def test_the_probe_retimes_the_profile_named_else_the_one_run_measures_with(host, monkeypatch, capsys):
    """Two profiles share this CPU's name (``cpu-2c``, ``cpu-2c-nested``): ``profiles --probe`` asks of the one
    ``--profile`` names, else of ``$SHARDPLAN_PROFILE``'s, else of this host's own; ``--profile`` without
    ``--probe`` or ``--host-reference`` is refused rather than ignored."""
    from shardplan import cli
    from shardplan.cost import fitness
    from shardplan.cost.fitness import Fitness

    probed = []
    monkeypatch.setattr(fitness, "probe", lambda p: probed.append(p.name) or Fitness(1.0, 1.0, 1.0))
    host(AMD)
    here = profiles.host_profile().name
    monkeypatch.delenv(profiles.PROFILE_ENV, raising=False)
    assert main(["profiles", "--probe"]) == 0 and probed == [here]
    assert main(["profiles", "--probe", "--profile", "cpu-2c-xeon"]) == 0 and probed[-1] == "cpu-2c-xeon"
    assert "probe (cpu-2c-xeon): stored ranks re-timed at 1.00x" in capsys.readouterr().out
    monkeypatch.setenv(profiles.PROFILE_ENV, "cpu-2c")
    monkeypatch.setattr(cli, "DEFAULT_PROFILE", "cpu-2c")  # as read at import under that environment
    assert main(["profiles", "--probe"]) == 0 and probed[-1] == "cpu-2c"
    assert main(["profiles", "--probe", "--profile", "no-such"]) == 2
    assert main(["profiles", "--profile", "cpu-2c"]) == 2
    assert "--profile" in capsys.readouterr().err and len(probed) == 3
    import torch

    if not torch.cuda.is_available():
        assert main(["profiles", "--probe", "--profile", "h100"]) == 2
        assert "no CUDA device" in capsys.readouterr().err and len(probed) == 3
