"""Collection and MC labelling on a local Ray instance (num_cpus=2): bit-identical to local with 1 and 2
workers, a killed driver resumes with nothing lost or duplicated, a failing state fails the run naming it,
a lost worker is restarted and its task retried."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("gymnasium_robotics")

from prm_critic.cli import main  # noqa: E402
from prm_critic.parallel import Task, TaskError, make_executor  # noqa: E402
from prm_critic.robotics.collection import collect, load_shard  # noqa: E402
from prm_critic.robotics.labels import label  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MAZE = "PointMaze_UMaze-v3"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster():
    # workers import this checkout's prm_critic (and this test module, for the executor-level tasks)
    path = os.pathsep.join([str(REPO), str(REPO / "tests")])
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = path  # inherited by the Ray processes, so drivers started later see it too
    try:
        ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING",
                 runtime_env={"env_vars": {"PYTHONPATH": path, "OMP_NUM_THREADS": "1"}})
    finally:
        if old is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = old
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


def _files(d, sub):
    return sorted((Path(d) / sub).glob("shard_*.npz"))


def _assert_same(a, b, sub):
    fa, fb = _files(a, sub), _files(b, sub)
    assert [f.name for f in fa] == [f.name for f in fb] and fa
    for x, y in zip(fa, fb):
        x, y = load_shard(x, ()), load_shard(y, ())
        assert sorted(x) == sorted(y)
        for k in x:
            assert x[k].dtype == y[k].dtype, k
            assert np.array_equal(x[k], y[k], equal_nan=x[k].dtype.kind == "f"), (sub, k)


@pytest.mark.parametrize("task,episodes,shard_size,steps,stride", [(MAZE, 4, 2, 40, 5), ("FetchPush-v4", 2, 1, 30, 6)])
def test_collect_and_mc_labels_bit_identical_to_local(cluster, tmp_path, task, episodes, shard_size, steps, stride):
    kw = dict(episodes=episodes, shard_size=shard_size, max_episode_steps=steps, seed=3, progress=False)
    ref = collect(task, tmp_path / "local", **kw)
    label(ref, "mc", k=2, stride=stride, seed=1, progress=False)
    for w in (1, 2):
        d = collect(task, tmp_path / f"ray{w}", executor="ray", workers=w, **kw)
        label(d, "mc", k=2, stride=stride, seed=1, progress=False, executor="ray", workers=w)
        _assert_same(ref, d, "shards")
        _assert_same(ref, d, "labels/mc")
    tab = load_shard(_files(ref, "labels/mc")[0], ())
    assert tab["mask"].sum() > 0 and np.isfinite(tab["soft"][tab["mask"]]).all()


def test_failing_state_fails_the_run_naming_it(cluster, tmp_path):
    d = collect(MAZE, tmp_path / "d", episodes=4, shard_size=2, max_episode_steps=30, seed=0, progress=False)
    # tamper with one stored step (episode 3, step 10): its replay check fails on the worker
    f = d / "shards" / "shard_00001.npz"
    sh = load_shard(f, ())
    i = int(np.nonzero((sh["episode"] == 3) & (sh["t"] == 10))[0][0])
    sh["next_x"][i, 0] += 0.5
    with open(f, "wb") as fh:
        np.savez(fh, **sh)
    with pytest.raises(TaskError, match=r"^episode 3, step 10 \(shard_00001\.npz, row \d+\): ReplayMismatchError: "
                                        r"env 'PointMaze_UMaze-v3', episode 3, step 10"):
        label(d, "mc", k=1, stride=5, progress=False, executor="ray", workers=2)
    # nothing half-written: the tampered shard has no label file, no temp file is left
    # (the folder itself may be absent: the failure can arrive before any shard is finished)
    out = d / "labels" / "mc"
    assert not (out / "shard_00001.npz").exists()
    assert not out.exists() or not [p for p in out.iterdir() if p.name.startswith(".")]
    assert main(["label", "--data", str(d), "--family", "mc", "--k", "1", "--stride", "5", "--executor", "ray",
                 "--workers", "2", "--address", cluster, "--no-progress"]) == 2


def _cli(address, *args):
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "prm_critic.cli", *args, "--executor", "ray", "--workers", "2",
                             "--address", address, "--no-progress"],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_killed_driver_resumes_with_nothing_lost_or_duplicated(cluster, tmp_path):
    args = ["--task", MAZE, "--episodes", "12", "--shard-size", "1", "--max-episode-steps", "40", "--seed", "7"]
    killed, ref = tmp_path / "killed", tmp_path / "ref"
    largs = ["--family", "mc", "--k", "2", "--stride", "3"]
    assert main(["collect", "--out", str(ref), *args, "--no-progress"]) == 0
    assert main(["label", "--data", str(ref), *largs, "--no-progress"]) == 0
    for cmd, folder, sub in ((["collect", "--out", str(killed), *args], killed / "shards", "shards"),
                             (["label", "--data", str(killed), *largs], killed / "labels" / "mc", "labels/mc")):
        p = _cli(cluster, *cmd)
        t0 = time.time()
        while not list(folder.glob("shard_*.npz")):
            assert p.poll() is None, f"finished before it could be killed: {p.stderr.read().decode()[-2000:]}"
            assert time.time() - t0 < 300, "no shard appeared"
            time.sleep(0.01)
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        n = len(_files(killed, sub))
        assert 1 <= n < 12, n
        p = _cli(cluster, *cmd)
        assert p.wait(timeout=600) == 0, p.stderr.read().decode()[-2000:]
        _assert_same(ref, killed, sub)
        assert not [q for q in folder.iterdir() if q.name.startswith(".")]
    eps = np.concatenate([load_shard(f, ("episode",))["episode"] for f in _files(killed, "shards")])
    assert np.array_equal(np.unique(eps), np.arange(12))


def _square_or_die_once(marker_dir, x):
    """FAKE fault: the worker process running task 3 exits (as a lost node would) the first time."""
    if x == 3:
        try:
            fd = os.open(os.path.join(marker_dir, "died"), os.O_CREAT | os.O_EXCL)
            os.close(fd)
            os._exit(1)
        except FileExistsError:
            pass
    return x * x


def test_lost_worker_is_restarted_and_its_task_retried(cluster, tmp_path):
    import functools

    tasks = [Task(key=i, desc=f"task {i}", payload=i) for i in range(8)]
    with make_executor("ray", workers=2).start(dict) as pool:
        got = list(pool.map(functools.partial(_ctx_free, str(tmp_path)), tasks))
    assert (tmp_path / "died").exists()  # the worker process died once
    assert sorted(k for k, _ in got) == list(range(8))  # every task once: none lost, none duplicated
    assert dict(got) == {i: i * i for i in range(8)}


def _ctx_free(marker_dir, ctx, x):
    return _square_or_die_once(marker_dir, x)


@pytest.mark.filterwarnings("ignore::UserWarning:jericho.*")
def test_textworld_mc_labels_identical_on_ray(cluster, tmp_path):
    pytest.importorskip("textworld")
    from agents.textworld_agent.labels import build_labels

    kw = dict(episodes=1, k=2, max_steps=10, cache_dir=tmp_path / "games", show_progress=False)
    local = build_labels(tmp_path / "local", [3, 4, 5], **kw)
    ray2 = build_labels(tmp_path / "ray", [3, 4, 5], executor="ray", workers=2, **kw)
    assert [d.to_dict() for d in ray2] == [d.to_dict() for d in local]
    for name in ("labels.jsonl", "labels_hard.jsonl"):
        assert (tmp_path / "ray" / name).read_bytes() == (tmp_path / "local" / name).read_bytes()
    assert sorted(p.name for p in (tmp_path / "ray" / "units").iterdir()) == \
        ["seed3_ep0.json", "seed4_ep0.json", "seed5_ep0.json"]


def _square_or_raise(bad, ctx, x):
    if x == bad:
        raise ValueError(f"bad input {x}")
    return x * x


def test_short_tasks_are_grouped_per_worker_call_with_the_same_results(cluster):
    import functools

    from prm_critic.parallel import RayExecutor

    tasks = [Task(key=i, desc=f"task {i}", payload=i) for i in range(400)]
    fn = functools.partial(_square_or_raise, -1)
    ex = RayExecutor(2, call_s=0.05)
    with ex.start(dict) as pool:
        got = list(pool.map(fn, tasks))
        assert pool.tasks == 400 and pool.calls < 40, (pool.calls, pool.tasks)  # microsecond tasks: large groups
    assert sorted(k for k, _ in got) == list(range(400))
    assert dict(got) == {i: i * i for i in range(400)}
    with RayExecutor(2, call_s=0).start(dict) as pool:  # call_s=0: one task per call
        assert dict(pool.map(fn, tasks[:20])) == {i: i * i for i in range(20)} and pool.calls == 20
    # a task failing in the middle of a group is the one named
    with pytest.raises(TaskError, match=r"^task 237: ValueError: bad input 237$"):
        with RayExecutor(2, call_s=0.05, max_group=64).start(dict) as pool:
            list(pool.map(functools.partial(_square_or_raise, 237), tasks))


@pytest.mark.parametrize("kw,msg", [(dict(call_s=-1), r"call_s: expected a finite number of seconds >= 0"),
                                    (dict(call_s=float("nan")), r"call_s: expected a finite"),
                                    (dict(max_group=0), r"max_group: expected an integer >= 1, got 0")])
def test_grouping_arguments_checked(kw, msg):
    from prm_critic.parallel import RayExecutor

    with pytest.raises(ValueError, match=msg):
        RayExecutor(2, **kw)
