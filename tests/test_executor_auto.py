"""Where Ray pays: the executor cost model's properties, ``executor="auto"`` choosing local below the
crossover and Ray above it, the line printed before a run, and the library defaults matching the
committed measurement. No timing is asserted: the jobs here are stubs with made-up costs."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

import prm_critic.parallel as executor_mod
from prm_critic._optional import install_hint
from prm_critic.parallel import (
    AUTO_MIN_SPEEDUP,
    DEFAULT_RAY_STARTUP_S,
    DEFAULT_RAY_TASK_OVERHEAD_S,
    JobEstimate,
    LocalExecutor,
    RayCostModel,
    RayExecutor,
    check_executor,
    choose_executor,
    expected_speedup,
    make_executor,
)

REPO = Path(__file__).resolve().parents[1]

#: STUB timing model: made-up costs (10 s start-up, no per-task cost), not a measurement
STUB_MODEL = RayCostModel(startup_s=10.0, task_overhead_s=0.0)


def stub_job(local_s: float, tasks: int = 100) -> JobEstimate:
    """STUB job: ``local_s`` seconds of local work as 1,000 units (made-up costs, nothing is timed)."""
    return JobEstimate(units=1000, unit_s=local_s / 1000, tasks=tasks, what="stub job")


@pytest.fixture
def four_cores(monkeypatch):
    """A machine with 4 cores and Ray installed, whatever this one has."""
    monkeypatch.setattr(executor_mod.os, "cpu_count", lambda: 4)
    monkeypatch.setattr(executor_mod, "ray_installed", lambda: True)


# --- the cost model -----------------------------------------------------------------------------------------------

def test_speedup_is_monotone_in_job_size_and_below_the_worker_count():
    m = RayCostModel(startup_s=8.0, task_overhead_s=0.001)
    for workers in (1, 2, 4, 16):
        prev = 0.0
        for units in (1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7):
            su = m.speedup(units, 1e-3, workers, tasks=units / 100)  # tasks grow with the job
            assert prev < su < workers
            prev = su
    # more workers, more start-up, more per-task cost: each in the direction it should
    assert m.speedup(1e5, 1e-3, 4, 100) > m.speedup(1e5, 1e-3, 2, 100)
    assert RayCostModel(startup_s=20.0).speedup(1e5, 1e-3, 2, 100) < RayCostModel(startup_s=5.0).speedup(1e5, 1e-3, 2, 100)
    assert RayCostModel(2.0, 0.01).speedup(1e5, 1e-3, 2, 1e4) < RayCostModel(2.0, 0.0).speedup(1e5, 1e-3, 2, 1e4)


@pytest.mark.parametrize("startup, overhead, workers, task_s", [(10.0, 0.0, 2, 1.0), (13.0, 0.0007, 2, 0.05),
                                                                 (3.0, 0.001, 8, 0.2)])
def test_crossover_is_where_the_formula_says(startup, overhead, workers, task_s):
    m = RayCostModel(startup_s=startup, task_overhead_s=overhead)
    cross = m.crossover_s(workers, task_s)
    assert cross == pytest.approx(startup / (1 - 1 / workers - overhead / task_s))
    unit_s = 1e-3
    units = cross / unit_s
    tasks = cross / task_s
    assert m.speedup(units, unit_s, workers, tasks) == pytest.approx(1.0)
    assert m.speedup(0.9 * units, unit_s, workers, 0.9 * tasks) < 1 < m.speedup(1.1 * units, unit_s, workers, 1.1 * tasks)
    if overhead == 0:
        assert cross == pytest.approx(startup * workers / (workers - 1))  # 2 workers: twice the start-up


def test_one_worker_never_pays():
    m = RayCostModel(startup_s=1.0, task_overhead_s=0.0)
    assert m.crossover_s(1, 1.0) == math.inf
    assert m.speedup(1e9, 1.0, 1, 1) < 1
    # a per-task cost that eats the parallel gain: never pays either
    assert RayCostModel(1.0, 0.6).crossover_s(2, 1.0) == math.inf


def test_expected_speedup_checks_its_arguments_and_reads_the_environment(monkeypatch):
    assert expected_speedup(1000, 0.01, 2, tasks=10, model=STUB_MODEL) == pytest.approx(10 / (10 + 5))
    with pytest.raises(ValueError, match=r"workers: expected an integer >= 1, got 0"):
        expected_speedup(1000, 0.01, 0)
    with pytest.raises(ValueError, match=r"unit_s: expected a finite number >= 0, got -1"):
        expected_speedup(1000, -1, 2)
    with pytest.raises(ValueError, match=r"startup_s: expected a finite number of seconds >= 0, got nan"):
        RayCostModel(startup_s=float("nan"))
    monkeypatch.delenv("PRM_RAY_STARTUP_S", raising=False)
    monkeypatch.delenv("PRM_RAY_TASK_OVERHEAD_S", raising=False)
    assert RayCostModel.from_env() == RayCostModel(DEFAULT_RAY_STARTUP_S, DEFAULT_RAY_TASK_OVERHEAD_S)
    monkeypatch.setenv("PRM_RAY_STARTUP_S", "3.5")
    monkeypatch.setenv("PRM_RAY_TASK_OVERHEAD_S", "0")
    assert RayCostModel.from_env() == RayCostModel(3.5, 0.0)
    assert expected_speedup(1000, 0.01, 2) == pytest.approx(10 / (3.5 + 5))
    monkeypatch.setenv("PRM_RAY_STARTUP_S", "soon")
    with pytest.raises(ValueError, match=r"PRM_RAY_STARTUP_S: expected a finite number of seconds >= 0, got 'soon'"):
        RayCostModel.from_env()


def test_defaults_are_the_fit_of_the_committed_measurement():
    from benchmarks import mc_throughput as bench

    raw = json.loads((REPO / "benchmarks" / "results" / "mc_throughput.json").read_text())
    fit = bench.fit_crossover(raw["crossover"])
    assert (fit["startup_s"], fit["task_overhead_s"]) == (DEFAULT_RAY_STARTUP_S, DEFAULT_RAY_TASK_OVERHEAD_S)
    assert raw["crossover"]["load_start"] and all(r["load_1min"] >= 0 for r in raw["crossover"]["runs"])


# --- choose_executor with the stub model ----------------------------------------------------------------------------

def test_auto_picks_local_below_the_crossover_and_ray_above(four_cores):
    lines: list[str] = []
    cross = STUB_MODEL.crossover_s(2, 1.0)  # 20 s of local work
    small = choose_executor("auto", workers=2, estimate=stub_job(5.0), model=STUB_MODEL, report=lines.append)
    assert isinstance(small, LocalExecutor)
    assert lines[-1] == ("executor: auto picked local: ray with 2 workers expected 0.40x local (start-up ~10 s, "
                         "~5 s of local work: stub job; Ray pays from ~20 s of local work, auto picks it from 1.2x)")
    # between the crossover and the margin: still local
    mid = choose_executor("auto", workers=2, estimate=stub_job(1.1 * cross), model=STUB_MODEL, report=lines.append)
    assert isinstance(mid, LocalExecutor) and "auto picked local" in lines[-1]
    big = choose_executor("auto", workers=2, estimate=stub_job(100.0), model=STUB_MODEL, report=lines.append)
    assert isinstance(big, RayExecutor) and big.workers == 2
    assert lines[-1] == ("executor: auto picked ray with 2 workers: expected 1.7x local (start-up ~10 s, ~100 s of "
                         "local work: stub job)")
    # the margin is where auto switches
    at = AUTO_MIN_SPEEDUP * 10.0 / (1 - AUTO_MIN_SPEEDUP / 2)  # local seconds with an expected speed-up of exactly the margin
    assert isinstance(choose_executor("auto", workers=2, estimate=stub_job(at * 1.01), model=STUB_MODEL,
                                      report=lines.append), RayExecutor)
    assert isinstance(choose_executor("auto", workers=2, estimate=stub_job(at * 0.99), model=STUB_MODEL,
                                      report=lines.append), LocalExecutor)
    # one worker never pays; no workers given: one per core of the local Ray instance
    assert isinstance(choose_executor("auto", workers=1, estimate=stub_job(1e6), model=STUB_MODEL,
                                      report=lines.append), LocalExecutor)
    assert "Ray never pays with one worker" in lines[-1]
    assert isinstance(choose_executor("auto", estimate=stub_job(100.0), model=STUB_MODEL, report=lines.append),
                      RayExecutor)
    assert lines[-1].startswith("executor: auto picked ray with 4 workers: expected 2.9x local")


def test_explicit_ray_says_the_expected_speedup_and_warns_when_slower(four_cores):
    lines: list[str] = []
    ex = choose_executor("ray", workers=2, estimate=stub_job(100.0), model=STUB_MODEL, report=lines.append)
    assert isinstance(ex, RayExecutor)
    assert lines == ["executor: ray with 2 workers, expected 1.7x local (start-up ~10 s, ~100 s of local work: stub job)"]
    choose_executor("ray", workers=2, estimate=stub_job(5.0), model=STUB_MODEL, report=lines.append)
    assert lines[-1].endswith("(start-up ~10 s, ~5 s of local work: stub job); --executor local would be faster")


def test_local_says_nothing_and_measures_nothing(four_cores):
    def estimate():
        raise AssertionError("a local run needs no estimate")

    lines: list[str] = []
    assert isinstance(choose_executor("local", estimate=estimate, report=lines.append), LocalExecutor)
    ex = LocalExecutor()
    assert choose_executor(ex, estimate=estimate, report=lines.append) is ex
    assert lines == []


def test_auto_without_ray_picks_local_and_says_so(monkeypatch):
    monkeypatch.setattr(executor_mod, "ray_installed", lambda: False)  # Ray not installed

    def estimate():
        raise AssertionError("nothing to weigh without Ray")

    lines: list[str] = []
    assert isinstance(choose_executor("auto", workers=2, estimate=estimate, report=lines.append), LocalExecutor)
    assert lines == [f"executor: auto picked local: Ray is not installed ({install_hint('ray')})"]
    # explicit ray without Ray: no line here, the run's start raises the error naming the extra
    ex = choose_executor("ray", workers=2, estimate=estimate, report=lines.append)
    assert isinstance(ex, RayExecutor) and len(lines) == 1


def test_ray_installed_sees_a_blocked_import(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    assert executor_mod.ray_installed() is False


def test_auto_without_executor_work_and_with_a_cluster(four_cores):
    lines: list[str] = []
    none = JobEstimate(0, 0.0, 0, "subgoal labels need no env (computed in this process)")
    assert isinstance(choose_executor("auto", workers=2, estimate=none, report=lines.append), LocalExecutor)
    assert lines[-1] == "executor: auto picked local: subgoal labels need no env (computed in this process)"
    ex = choose_executor("auto", address="head:6379", estimate=stub_job(1.0), model=STUB_MODEL, report=lines.append)
    assert isinstance(ex, RayExecutor) and ex.address == "head:6379"
    assert "known once connected" in lines[-1]
    # a cluster with the worker count given: weighed like a local instance, without the core cap
    ex = choose_executor("auto", workers=8, address="head:6379", estimate=stub_job(100.0), model=STUB_MODEL,
                         report=lines.append)
    assert isinstance(ex, RayExecutor) and lines[-1].startswith("executor: auto picked ray with 8 workers")


def test_auto_arguments_are_checked_like_ray():
    with pytest.raises(ValueError, match=r"workers: expected an integer >= 1"):
        check_executor("auto", workers=0)
    with pytest.raises(ValueError, match=r"address: expected a Ray cluster address"):
        check_executor("auto", address=" ")
    with pytest.raises(ValueError, match=r"executor: 'auto' chooses from the job's size"):
        make_executor("auto")
    with pytest.raises(ValueError, match=r"executor: expected one of \['local', 'ray'\]"):
        choose_executor("dask", estimate=stub_job(1.0))


# --- the CLI ---------------------------------------------------------------------------------------------------------

def _said(capsys) -> list[str]:
    """The lines the run printed about its executor (stderr; dependencies' notices left out)."""
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith(("executor:", "prm-critic "))]


def _collect(main, d, *extra):
    return main(["collect", "--task", "PointMaze_UMaze-v3", "--out", str(d), "--episodes", "2", "--shard-size", "1",
                 "--max-episode-steps", "12", "--no-progress", *extra])


@pytest.fixture
def stub_ray(monkeypatch, four_cores):
    """STUB Ray: ``RayExecutor.start`` runs the tasks in this process instead of starting Ray (the choice
    and its printed line are under test, not Ray)."""
    monkeypatch.setattr(RayExecutor, "start", lambda self, setup: LocalExecutor().start(setup))


def test_cli_prints_the_expected_speedup_before_the_run(tmp_path, capsys, stub_ray, monkeypatch):
    pytest.importorskip("gymnasium_robotics")
    from prm_critic.cli import main

    monkeypatch.setenv("PRM_RAY_STARTUP_S", "1000")  # STUB start-up: Ray cannot pay for these tiny jobs
    assert _collect(main, tmp_path / "d", "--executor", "ray", "--workers", "2") == 0
    err = _said(capsys)
    assert len(err) == 1, err
    assert err[0].startswith("executor: ray with 2 workers, expected 0.00x local (start-up ~1,000 s, ")
    assert err[0].endswith(": 2 episodes, up to 24 env steps); --executor local would be faster")
    assert main(["label", "--data", str(tmp_path / "d"), "--family", "mc", "--k", "2", "--stride", "4",
                 "--executor", "auto", "--workers", "2", "--no-progress"]) == 0
    err = _said(capsys)
    assert len(err) == 1 and err[0].startswith("executor: auto picked local: ray with 2 workers expected 0.00x local")
    assert "states x 2 rollouts, ~" in err[0] and "auto picks it from 1.2x" in err[0]


def test_cli_auto_picks_ray_when_it_pays(tmp_path, capsys, stub_ray, monkeypatch):
    pytest.importorskip("gymnasium_robotics")
    from prm_critic.cli import main

    monkeypatch.setenv("PRM_RAY_STARTUP_S", "0")  # STUB costs: Ray starts for free, so 2 workers pay 2x
    monkeypatch.setenv("PRM_RAY_TASK_OVERHEAD_S", "0")
    assert _collect(main, tmp_path / "d", "--executor", "auto", "--workers", "2") == 0
    err = _said(capsys)
    assert len(err) == 1 and err[0].startswith("executor: auto picked ray with 2 workers: expected 2.0x local")
    for fam, opts, line in (("subgoal", [], "executor: auto picked local: subgoal labels need no env (computed in "
                                            "this process)"),
                            ("mc_bisect", ["--k", "2"], "executor: auto picked local: mc_bisect runs its binary "
                                                        "searches in this process")):
        assert main(["label", "--data", str(tmp_path / "d"), "--family", fam, *opts, "--executor", "auto",
                     "--no-progress"]) == 0
        assert _said(capsys) == [line]


def test_cli_auto_without_ray_runs_locally(tmp_path, capsys, monkeypatch):
    pytest.importorskip("gymnasium_robotics")
    from prm_critic.cli import main

    monkeypatch.setattr(executor_mod, "ray_installed", lambda: False)  # Ray not installed

    def no_ray(self, setup):
        raise AssertionError("auto without Ray must not start it")

    monkeypatch.setattr(RayExecutor, "start", no_ray)
    assert _collect(main, tmp_path / "d", "--executor", "auto", "--workers", "2") == 0
    err = _said(capsys)
    assert err == [f"executor: auto picked local: Ray is not installed ({install_hint('ray')})"]
    assert len(list((tmp_path / "d" / "shards").glob("shard_*.npz"))) == 2


def test_cli_explicit_ray_without_ray_keeps_the_install_error(tmp_path, capsys, monkeypatch):
    pytest.importorskip("gymnasium_robotics")
    from prm_critic.cli import main

    monkeypatch.setitem(sys.modules, "ray", None)  # Ray not installed
    assert _collect(main, tmp_path / "d", "--executor", "ray", "--workers", "2") == 2
    err = _said(capsys)
    assert len(err) == 1 and err[0].startswith("prm-critic collect: error: ") and install_hint("ray") in err[0]
