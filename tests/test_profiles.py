"""A profile's costs belong to the CPU they were measured on: which profile a host is, the warning
when measuring on another CPU, and the refusal to write one CPU's timings into another's data."""
import pytest

from shardplan.cli import main
from shardplan.cost import profiles
from shardplan.cost.profiles import (check_collect_target, foreign_host_note, get_profile, host_profile,
                                     local_profile, runs_here)
from shardplan.errors import InputError
from shardplan.execute.measure import measure_plan
from shardplan.formats import load_plan

AMD, INTEL = "AMD EPYC", "Intel(R) Xeon(R) Processor"


@pytest.fixture
def host(monkeypatch):
    """Set the CPU this process believes it runs on."""
    def set_host(cpu: str) -> None:
        monkeypatch.setattr(profiles, "host_cpu", lambda: cpu)
    return set_host


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


def test_the_probe_tells_a_machine_that_only_shares_the_cpus_name(host, monkeypatch, capsys):
    from shardplan.cost import fitness
    from shardplan.cost.fitness import Fitness

    host(AMD)
    readings = {"cpu-2c": Fitness(0.60, 4.43, 0.65)}  # session 39's AMD guest: ranks 2.7x their labels undivided
    monkeypatch.setattr(fitness, "probe", lambda profile: readings.get(profile.name))
    assert main(["profiles", "--probe"]) == 0
    out = capsys.readouterr().out
    assert "probe (cpu-2c)" in out and "2.66x their labels" in out and "does not run like the one" in out
    readings["cpu-2c"] = Fitness(1.02, 1.10, 1.0)  # the labels' own host
    assert main(["profiles", "--probe"]) == 0
    out = capsys.readouterr().out
    assert "1.12x their labels" in out and "does not run like" not in out
    host("Some Other CPU")  # no profile of its own: nothing to probe, and the flag is named
    assert main(["profiles", "--probe"]) == 2
    assert "--probe" in capsys.readouterr().err
