"""The RL benchmark sweep (benchmarks/rl/sweep.py) on a tiny two-run plan (real FetchReach, SAC): the local
and the Ray executor write the same run folders and evaluations, a re-run skips finished runs, a failing run
fails the sweep naming its (task, config, seed)."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("gymnasium_robotics")
pytest.importorskip("stable_baselines3")

REPO = Path(__file__).resolve().parents[1]
FR = "FetchReach-v4"
PLAN = [[FR, "her", [0], 1.0, False], [FR, "prm", [0], 10.0, False]]
RUNS = [("her", "seed0"), ("prm_s10", "seed0")]
TINY = ["--steps", "300", "--eval-freq", "150", "--eval-episodes", "2", "--learning-starts", "100"]
WALL = {"train_wall_s", "eval_wall_s"}  # wall-clock seconds: the only columns allowed to differ


def _sweep(tmp_path, root, plan, *args):
    pf = tmp_path / f"plan_{root.name}.json"
    pf.write_text(json.dumps(plan))
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "benchmarks.rl.sweep", "--plan-file", str(pf), "--root", str(root), *TINY, *args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900)


def _rows(path):
    with open(path, newline="") as f:
        r = csv.DictReader(f)
        return r.fieldnames, list(r)


def _check_runs(root):
    out = {}
    for label, seed in RUNS:
        d = root / FR / label / seed
        done = json.loads((d / "done.json").read_text())
        assert (done["task"], done["label"], done["seed"], done["steps"]) == (FR, label, 0, 300)
        cols, rows = _rows(d / "eval.csv")
        assert [int(r["env_steps"]) for r in rows] == [0, 150, 300], rows
        assert all(int(r["n_episodes"]) == 2 for r in rows)
        out[label] = (cols, rows, done)
    return out


def _same(a, b):
    assert sorted(a) == sorted(b)
    for label in a:
        (ca, ra, da), (cb, rb, db) = a[label], b[label]
        assert ca == cb and len(ra) == len(rb)
        # same seed, one thread: the same evaluations wherever the run ran
        assert [{k: v for k, v in r.items() if k not in WALL} for r in ra] == \
               [{k: v for k, v in r.items() if k not in WALL} for r in rb], label
        for k in ("final_success", "episodes", "train_success_last100", "algo_kwargs", "subgoals"):
            assert da[k] == db[k], (label, k)


def _files(root):
    # TensorBoard names its event files by time and process id: compare where they are, not their names
    return sorted(str(p.relative_to(root).parent / "events.out.tfevents.*") if p.name.startswith("events.out.tfevents")
                  else str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.name != ".lock")


@pytest.fixture(scope="module")
def local_runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sweep")
    root = tmp / "local"
    r = _sweep(tmp, root, PLAN)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    return tmp, root, _check_runs(root)


def test_local_sweep_writes_every_run_and_a_rerun_skips_them(local_runs):
    tmp, root, runs = local_runs
    assert {k: v[2]["config"] for k, v in runs.items()} == {"her": "her", "prm_s10": "prm"}
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and p.name != ".lock"}
    r = _sweep(tmp, root, PLAN)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.count("skip (done, 300 steps)") == 2, r.stdout[-2000:]
    after = {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and p.name != ".lock"}
    assert after == before  # nothing retrained or rewritten


def test_same_seed_gives_the_same_evaluations(local_runs):
    tmp, _, runs = local_runs
    root = tmp / "again"
    r = _sweep(tmp, root, PLAN[1:])
    assert r.returncode == 0, r.stderr[-3000:]
    cols, rows = _rows(root / FR / "prm_s10" / "seed0" / "eval.csv")
    _same({"prm_s10": runs["prm_s10"]}, {"prm_s10": (cols, rows, json.loads(
        (root / FR / "prm_s10" / "seed0" / "done.json").read_text()))})


def test_failing_run_fails_the_sweep_naming_it_and_the_others_finish(tmp_path):
    # a spec of another task: that run exits with an error, the other run still finishes
    bad = [[FR, "her", [0], 1.0, False, "specs/near_object.toml"], [FR, "sparse", [1], 1.0, False]]
    pf_dir = REPO / "benchmarks" / "rl"
    plan = [[t, c, s, sc, pr, *[str(pf_dir / e) for e in extra]] for t, c, s, sc, pr, *extra in bad]
    root = tmp_path / "bad"
    r = _sweep(tmp_path, root, plan)
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-3000:]
    assert "1 of 2 runs failed (task config seed): FetchReach-v4 her_near_object 0 (exit status 1)" in r.stderr
    assert "is a spec for 'FetchPush-v4', expected one for 'FetchReach-v4'" in r.stderr
    assert (root / FR / "sparse" / "seed1" / "done.json").exists()
    assert not (root / FR / "her_near_object" / "seed0" / "done.json").exists()


def test_unknown_task_in_a_plan_file_is_named_before_any_run(tmp_path):
    r = _sweep(tmp_path, tmp_path / "none", [PLAN[0], ["FetchReach-v9", "her", [2], 1.0, False]])
    assert r.returncode != 0
    assert "run 1: task: expected one of" in r.stderr and "got 'FetchReach-v9'" in r.stderr
    assert not (tmp_path / "none").exists()


@pytest.mark.slow
def test_ray_sweep_writes_the_same_runs_as_local(local_runs, tmp_path):
    pytest.importorskip("ray")
    _, lroot, lruns = local_runs
    root = tmp_path / "ray"
    # a local Ray with two workers (num_cpus=2); its processes inherit PYTHONPATH (this checkout)
    r = _sweep(tmp_path, root, PLAN, "--executor", "ray", "--workers", "2")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert _files(root) == _files(lroot)
    _same(lruns, _check_runs(root))
    # a re-run skips both finished runs: no file is written again or added. (The workers' own "skip"
    # lines reach the driver through Ray's log forwarding, which may print them after the driver exits.)
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file() and p.name != ".lock"}
    r = _sweep(tmp_path, root, PLAN, "--executor", "ray", "--workers", "2")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    after = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file() and p.name != ".lock"}
    assert after == before


def _popen_sweep(tmp_path, root, plan, *args):
    pf = tmp_path / f"plan_{root.name}_{len(args)}.json"
    pf.write_text(json.dumps(plan))
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "benchmarks.rl.sweep", "--plan-file", str(pf), "--root", str(root), *TINY, *args],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _holder(root, label, proc, timeout=300.0):
    """The pid of the run.py process that holds ``label``'s run lock (started by the sweep ``proc``)."""
    import time

    lock = root / FR / label / "seed0" / ".lock"
    t_end = time.monotonic() + timeout
    while time.monotonic() < t_end:
        text = lock.read_text().split() if lock.exists() else []
        if text and text[0].isdigit():
            return int(text[0])
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError(f"no process took {lock} within {timeout}s")


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not Path(f"/proc/{pid}/stat").exists() or Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def _trained_once(root, *outputs, all_printed=True):
    # one TensorBoard log (one training process) in each run folder, none restarted; run.py prints its
    # done.json summary once per training: at most one per run over all the sweeps' output (exactly one
    # where every run's output is read here; a Ray worker's output reaches the driver asynchronously)
    summaries = [json.loads(line) for out in outputs for line in out.splitlines() if line.startswith('{"task"')]
    labels = sorted(s["label"] for s in summaries)
    assert len(set(labels)) == len(labels), summaries
    if all_printed:
        assert labels == sorted(label for label, _ in RUNS), summaries
    for label, seed in RUNS:
        d = root / FR / label / seed
        assert len(list(d.rglob("events.out.tfevents*"))) == 1, sorted(str(p.relative_to(d)) for p in d.rglob("*"))
        assert not list(d.glob("eval.killed-*.csv"))


def _two_sweeps_at_once(local_runs, tmp_path, second_args):
    """Sweep A takes the plan's first run; it is frozen (SIGSTOP) while holding it, so that sweep B
    (``second_args``) meets it held for certain. B trains the second run and reports the first as held
    by another process; A, resumed, finishes the first and skips the second (done)."""
    import signal

    _, _, lruns = local_runs
    root = tmp_path / "shared"
    a = _popen_sweep(tmp_path, root, PLAN)
    pid = _holder(root, "her", a)
    os.kill(pid, signal.SIGSTOP)
    try:
        b = _popen_sweep(tmp_path, root, PLAN, *second_args)
        b_out, b_err = b.communicate(timeout=900)
    finally:
        os.kill(pid, signal.SIGCONT)
    a_out, a_err = a.communicate(timeout=900)
    assert a.returncode == 0, a_out[-2000:] + a_err[-3000:]
    assert b.returncode == 0, b_out[-2000:] + b_err[-3000:]
    assert "sweep: 1 of 2 runs skipped, running in another process (task config seed): FetchReach-v4 her 0" in b_out
    local_b = "--executor" not in second_args  # (a Ray worker's output reaches the driver asynchronously)
    assert not local_b or f"skip (running in another process, pid {pid} on " in b_out
    assert "skip (done, 300 steps)" in a_out and "skipped, running in another process" not in a_out
    _trained_once(root, a_out, b_out, all_printed=local_b)
    _same(lruns, _check_runs(root))  # the rows of a single sweep (wall-clock columns aside)


def test_two_local_sweeps_at_once_train_each_run_once(local_runs, tmp_path):
    _two_sweeps_at_once(local_runs, tmp_path, ())


@pytest.mark.slow
def test_a_local_and_a_ray_sweep_at_once_train_each_run_once(local_runs, tmp_path):
    pytest.importorskip("ray")
    _two_sweeps_at_once(local_runs, tmp_path, ("--executor", "ray", "--workers", "2"))


@pytest.mark.skipif(sys.platform != "linux", reason="a run ends with its sweep through Linux's parent-death signal")
def test_a_killed_sweep_leaves_no_run_locked_and_the_next_sweep_trains_it(local_runs, tmp_path):
    import signal
    import time

    _, _, lruns = local_runs
    root = tmp_path / "killed"
    a = _popen_sweep(tmp_path, root, PLAN)
    pid = _holder(root, "her", a)
    a.send_signal(signal.SIGKILL)  # the sweep only: its run is told by the kernel, not by the sweep
    a.wait(timeout=60)
    t_end = time.monotonic() + 20
    while _alive(pid) and time.monotonic() < t_end:
        time.sleep(0.05)
    assert not _alive(pid), f"run.py (pid {pid}) still running after its sweep was killed"
    a.stdout.close()
    a.stderr.close()
    her = root / FR / "her" / "seed0"
    assert not (her / "done.json").exists()  # it ended unfinished...
    assert (her / ".lock").read_text().split()[0] == str(pid)  # ...and its lock file stays...
    r = _sweep(tmp_path, root, PLAN)  # ...but the lock ended with the run: the next sweep trains it
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "running in another process" not in r.stdout + r.stderr
    _trained_once(root, r.stdout)
    _same(lruns, _check_runs(root))
