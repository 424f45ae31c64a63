"""The executor choice without Ray: the local path imports nothing of Ray, bad choices are one clear error,
and a missing Ray names the extra to install."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from prm_critic.parallel import LocalExecutor, RayExecutor, Task, make_executor
from prm_critic._optional import install_hint

REPO = Path(__file__).resolve().parents[1]


def _py(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def test_local_collect_and_label_do_not_import_ray(tmp_path):
    pytest.importorskip("gymnasium_robotics")
    proc = _py(f"""
import sys
from prm_critic.cli import main
d = {str(tmp_path / 'd')!r}
assert main(["collect", "--task", "PointMaze_UMaze-v3", "--out", d, "--episodes", "2", "--shard-size", "1",
             "--max-episode-steps", "12", "--no-progress"]) == 0
for fam, opts in (("mc", ["--k", "1", "--stride", "4"]), ("subgoal", []), ("outcome", [])):
    assert main(["label", "--data", d, "--family", fam, *opts, "--no-progress"]) == 0
print(sorted(m for m in sys.modules if m == "ray" or m.startswith("ray.")))
""")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]"
    assert len(list((tmp_path / "d" / "labels" / "mc").glob("shard_*.npz"))) == 2


def test_missing_ray_names_the_extra():
    proc = _py("""
import sys
sys.modules["ray"] = None  # Ray not installed
from prm_critic.parallel import make_executor
try:
    make_executor("ray", workers=1).start(int)
except ImportError as exc:
    print(exc)
""")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert install_hint("ray") in proc.stdout and "'ray'" in proc.stdout


def test_executor_choices_are_checked():
    assert isinstance(make_executor(), LocalExecutor)
    assert isinstance(make_executor("local", workers=1), LocalExecutor)
    ex = LocalExecutor()
    assert make_executor(ex) is ex
    with pytest.raises(ValueError, match=r"executor: expected one of \['local', 'ray'\] or an Executor, got 'dask'"):
        make_executor("dask")
    with pytest.raises(ValueError, match=r"workers: the local executor runs tasks in this process \(1 worker\), got 2; "
                                         r"pass executor='ray'"):
        make_executor("local", workers=2)
    with pytest.raises(ValueError, match=r"address: only the Ray executor connects to a cluster, got address='auto'"):
        make_executor("local", address="auto")
    with pytest.raises(ValueError, match=r"workers: expected an integer >= 1 .*got 0"):
        make_executor("ray", workers=0)
    with pytest.raises(ValueError, match=r"workers/address/runtime_env: set them on the executor object"):
        make_executor(ex, workers=2)
    assert "ray" not in sys.modules or isinstance(RayExecutor(2), RayExecutor)


def test_local_pool_runs_in_order_and_closes_its_context():
    closed = []

    class Ctx:
        def close(self):
            closed.append(True)

    with LocalExecutor().start(Ctx) as pool:
        got = list(pool.map(lambda ctx, x: x * x, [Task(key=i, desc=f"task {i}", payload=i) for i in range(5)]))
    assert got == [(i, i * i) for i in range(5)] and closed == [True]


def test_cli_rejects_workers_without_ray(tmp_path, capsys):
    pytest.importorskip("gymnasium_robotics")
    from prm_critic.cli import main

    rc = main(["collect", "--task", "PointMaze_UMaze-v3", "--out", str(tmp_path / "d"), "--episodes", "1",
               "--workers", "2", "--no-progress"])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "workers: the local executor runs tasks in this process" in err[0]
    assert not (tmp_path / "d").exists()
