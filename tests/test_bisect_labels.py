"""Binary-search Monte-Carlo labels (``mc_bisect``): the search itself, and labels on real MuJoCo data
compared with dense ``mc`` labels of the same seed (same estimates, fewer rollout steps)."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gymnasium_robotics")

from faults import correct, loud  # noqa: E402
from prm_critic.cli import main  # noqa: E402
from prm_critic.robotics.bisect_labels import bisect_episode, grid_states, read_stats  # noqa: E402
from prm_critic.robotics.collection import ShardError, atomic_savez, collect, load_shard  # noqa: E402
from prm_critic.robotics.dataset import load_steps  # noqa: E402
from prm_critic.robotics.labels import label  # noqa: E402
from prm_critic.robotics.snapshot import ReplayMismatchError  # noqa: E402

MAZE = "PointMaze_UMaze-v3"


# --- the search on known success curves ---------------------------------------------------------

def _curve(drop: int, before: float = 0.6):
    calls = []

    def estimate(i):
        calls.append(i)
        return before * (1 - i / 400) if i < drop else 0.0

    return estimate, calls


@pytest.mark.parametrize("T,drop,resolution", [(150, 37, 1), (150, 1, 1), (150, 149, 1), (50, 20, 5), (2, 1, 1),
                                               (97, 60, 3)])
def test_search_locates_the_drop_with_log_many_estimates(T, drop, resolution):
    estimate, calls = _curve(drop)
    lab, est = bisect_episode(T, estimate, resolution=resolution)
    assert len(calls) == len(set(calls)), "a state is estimated at most once"
    assert sorted(calls) == np.nonzero(est)[0].tolist()
    assert 0 in calls and T - 1 in calls
    assert len(calls) <= 2 + math.ceil(math.log2(max(T / resolution, 1))) + 1
    # the located bracket: last estimated state before the drop, first one at or after it
    left = max(i for i in calls if i < drop)
    right = min(i for i in calls if i >= drop)
    assert right - left <= resolution
    # estimated states keep their estimate; the others are interpolated between their neighbours
    for i in list(calls):
        assert lab[i] == np.float32(estimate(i))
    assert np.all(lab[right:] == 0) and np.all(lab[: left + 1] > 0)
    xs = sorted(calls)
    for a, b in zip(xs[:-1], xs[1:]):
        for t in range(a + 1, b):
            expect = lab[a] + (lab[b] - lab[a]) * (t - a) / (b - a)
            assert lab[t] == pytest.approx(expect, abs=1e-6)


def test_search_without_a_drop_estimates_only_the_ends():
    rising = lambda i: min(1.0, 0.2 + i / 100)  # noqa: E731  (a successful episode)
    lab, est = bisect_episode(60, rising)
    assert est.sum() == 2 and est[0] and est[-1]
    assert np.allclose(lab, np.linspace(0.2, rising(59), 60), atol=1e-6)
    lab, est = bisect_episode(60, lambda i: 0.0)  # hopeless from the start
    assert est.sum() == 2 and not lab.any()
    lab, est = bisect_episode(1, lambda i: 0.5)
    assert est.tolist() == [True] and lab.tolist() == [0.5]
    # a threshold above 0: a drop to <= threshold is a drop
    lab, est = bisect_episode(64, lambda i: 0.5 if i < 40 else 0.2, threshold=0.25)
    assert est.sum() > 2 and lab[39] == np.float32(0.5) and lab[40] == np.float32(0.2)


# --- min_estimates: a grid of estimates spread over the episode before the search ------------------

def _old_bisect_episode(T, estimate, threshold=0.0, resolution=1):
    """The search as it was before min_estimates (both ends, then one bisection between them)."""
    est = {}

    def ev(i):
        if i not in est:
            est[i] = float(estimate(i))
        return est[i]

    lo, hi = 0, T - 1
    v_lo, v_hi = ev(lo), ev(hi)
    if v_lo > threshold >= v_hi:
        while hi - lo > resolution:
            mid = (lo + hi) // 2
            if ev(mid) > threshold:
                lo = mid
            else:
                hi = mid
    xs = np.asarray(sorted(est), dtype=np.float64)
    lab = np.interp(np.arange(T, dtype=np.float64), xs, [est[int(i)] for i in xs]).astype(np.float32)
    return lab, xs.astype(np.int64)


def _random_episode(rng):
    """A success-estimate curve of a random length and outcome: values in multiples of 1/k, with zeros
    at the start (the case min_estimates is for), drops, rises and plateaus."""
    T = int(rng.integers(1, 200))
    k = int(rng.choice([1, 2, 4, 8]))
    kind = rng.integers(0, 4)
    p = rng.uniform(0, 1, size=T)
    if kind == 1:  # a drop somewhere: positive before, 0 after
        p[int(rng.integers(0, T)):] = 0.0
    elif kind == 2:  # 0 at both ends, positive in the middle
        p[: max(1, T // 5)] = 0.0
        p[-max(1, T // 5):] = 0.0
    elif kind == 3:  # successful: climbing to 1
        p = np.linspace(rng.uniform(0, 1), 1.0, T)
    v = np.floor(p * k + rng.uniform(0, 1, size=T)) / k  # a noisy k-rollout estimate per state
    return T, np.clip(v, 0.0, 1.0), float(rng.choice([0.0, 0.0, 0.25, 0.5]))


@pytest.mark.parametrize("case", range(300))
def test_min_estimates_property(case):
    """Over random episode lengths and outcomes: with min_estimates = m, at least min(m, T) states are
    estimated (each once, spread over the episode, the ends included) and estimated states keep their
    estimate; with the default (2, the ends only) labels and estimated states are those of the search
    before the option existed."""
    rng = np.random.default_rng(case)
    T, v, threshold = _random_episode(rng)
    resolution = int(rng.choice([1, 1, 2, 5]))
    calls = []

    def estimate(i):
        calls.append(i)
        return v[i]

    old_lab, old_xs = _old_bisect_episode(T, lambda i: v[i], threshold=threshold, resolution=resolution)
    for m in (None, 2):
        calls.clear()
        kw = {} if m is None else {"min_estimates": m}
        lab, est = bisect_episode(T, estimate, threshold=threshold, resolution=resolution, **kw)
        assert np.array_equal(lab, old_lab) and np.nonzero(est)[0].tolist() == old_xs.tolist()
        assert calls[:2] == ([0, T - 1] if T > 1 else [0])  # the ends first, as before
    for m in (3, 4, 8, 16, int(rng.integers(2, 40))):
        calls.clear()
        lab, est = bisect_episode(T, estimate, threshold=threshold, resolution=resolution, min_estimates=m)
        assert len(calls) == len(set(calls)) == int(est.sum()), "a state is estimated at most once"
        assert est.sum() >= min(m, T)
        grid = grid_states(T, m)
        assert len(grid) == min(m, T) and np.all(np.diff(grid) >= 1) and grid[0] == 0 and grid[-1] == T - 1
        assert est[grid].all()
        if T > 1:  # evenly spread: no gap between grid states wider than ceil((T - 1) / (m - 1))
            assert np.diff(grid).max() <= math.ceil((T - 1) / (m - 1))
        assert np.array_equal(lab[est], v[est].astype(np.float32))
        assert np.all((lab >= 0) & (lab <= 1))
        # every drop between estimated neighbours is located within `resolution` steps
        xs = np.nonzero(est)[0]
        for a, b in zip(xs[:-1], xs[1:]):
            if v[a] > threshold >= v[b]:
                assert b - a <= resolution


def test_min_estimates_keeps_a_zero_start_from_labelling_the_episode_zero():
    """0 at both ends, positive in the middle: the ends alone label the episode 0 throughout; a grid
    of 8 finds the positive middle and locates its drop."""
    v = np.zeros(120)
    v[30:80] = 0.5
    lab, est = bisect_episode(120, lambda i: v[i])
    assert est.sum() == 2 and not lab.any()
    lab, est = bisect_episode(120, lambda i: v[i], min_estimates=8)
    assert lab[30:80].min() >= 0.0 and lab[40:70].min() == np.float32(0.5)
    xs = np.nonzero(est)[0]
    assert xs[(v[xs] > 0)].max() == 79 and 80 in xs  # the drop at 80 is located to the step
    for bad in (1, 0, 2.0, True):
        with pytest.raises(ValueError, match=r"min_estimates: expected an integer >= 2"):
            bisect_episode(10, lambda i: 0.5, min_estimates=bad)


# --- real labels --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def maze_data(tmp_path_factory):
    d = tmp_path_factory.mktemp("maze_bisect")
    collect(MAZE, d, episodes=6, shard_size=3, max_episode_steps=60, seed=0, progress=False)
    label(d, "mc", k=4, stride=1, seed=0, progress=False)
    label(d, "mc_bisect", k=4, seed=0, progress=False)
    return d


def _estimated(d):
    return np.concatenate([load_shard(f, ("estimated",))["estimated"]
                           for f in sorted((Path(d) / "labels" / "mc_bisect").glob("shard_*.npz"))])


def test_bisect_labels_agree_with_dense_mc_where_estimated_at_fewer_rollout_steps(maze_data):
    dense, bis = load_steps(maze_data, "mc"), load_steps(maze_data, "mc_bisect")
    est = _estimated(maze_data)
    assert bis.mask.all(), "inferred states are labelled too"
    assert np.all((bis.success >= 0) & (bis.success <= 1))
    assert np.array_equal(bis.extra["hard"], (bis.success > 0).astype(np.float32))
    # same RNG per (seed, episode, t, j): an estimated state's label IS its dense MC label
    assert np.array_equal(bis.success[est], dense.success[est])
    assert 2 * len(np.unique(bis.episode)) <= est.sum() < len(bis) / 3
    for e in np.unique(bis.episode):
        m = bis.episode == e
        assert est[m][0] and est[m][-1], f"episode {e}: both ends are estimated"
        # where the estimate drops to 0 between the ends, the drop is bracketed to adjacent steps
        v, ts = bis.success[m][est[m]], bis.t[m][est[m]]
        if v[0] > 0 and v[-1] == 0:
            first_zero = int(np.argmax(v == 0))
            assert ts[first_zero] - ts[first_zero - 1] == 1 and np.all(v[first_zero:] == 0)
    # cost: recorded per shard and in total, far below dense labelling of every step
    sd, sb = read_stats(maze_data, "mc")["total"], read_stats(maze_data, "mc_bisect")["total"]
    assert sb["estimated_states"] == int(est.sum()) and sb["rollouts"] == 4 * int(est.sum())
    assert sb["replay_steps"] == int(est.sum()) and sb["states"] == len(bis)
    assert sd["estimated_states"] == len(dense) and sd["rollouts"] == 4 * len(dense)
    assert 0 < sb["rollout_steps"] < sd["rollout_steps"] / 3
    params = json.loads((maze_data / "labels" / "mc_bisect.json").read_text())
    assert params == {"family": "mc_bisect", "k": 4, "seed": 0, "threshold": 0.0, "resolution": 1,
                      "rollout_policy": "scripted"}


def test_bisect_labels_resume_identically(maze_data, tmp_path):
    import shutil

    d = tmp_path / "copy"
    shutil.copytree(maze_data, d)
    first = sorted((d / "labels" / "mc_bisect").glob("shard_*.npz"))
    before = {f.name: load_shard(f, ("label", "estimated")) for f in first}
    stats = read_stats(d, "mc_bisect")
    first[0].unlink()
    label(d, "mc_bisect", k=4, seed=0, progress=False)  # relabels only the missing shard
    for f in first:
        now = load_shard(f, ("label", "estimated"))
        assert np.array_equal(now["label"], before[f.name]["label"]) and np.array_equal(now["estimated"],
                                                                                         before[f.name]["estimated"])
    assert read_stats(d, "mc_bisect") == stats


@pytest.mark.fault
def test_bisect_bad_parameters_are_refused(maze_data, tmp_path):
    with loud(1, "mc_bisect labels resumed with another resolution", ValueError,
              match=r"holds 'mc_bisect' labels made with other parameters .*'resolution': \(1, 4\)"):
        label(maze_data, "mc_bisect", k=4, seed=0, resolution=4, progress=False)
    with loud(1, "mc_bisect with a stride", ValueError, match=r"stride: family 'mc_bisect' .*no stride \(got 2\)"):
        label(maze_data, "mc_bisect", k=4, stride=2, progress=False)
    with loud(1, "mc_bisect threshold 1.0", ValueError, match=r"threshold: expected a number in \[0, 1\).*got 1\.0"):
        label(maze_data, "mc_bisect", threshold=1.0, progress=False)
    with loud(1, "mc_bisect resolution 0", ValueError, match=r"resolution: expected an integer >= 1, got 0"):
        label(maze_data, "mc_bisect", resolution=0, progress=False)
    bad = tmp_path / "stats"
    import shutil

    shutil.copytree(maze_data, bad)
    (bad / "labels" / "mc_bisect.stats.json").write_text("{not json")
    with loud(1, "corrupt mc_bisect stats file", ShardError, match=r"label stats file .*mc_bisect\.stats\.json"):
        label(bad, "mc_bisect", k=4, seed=0, progress=False)


@pytest.mark.fault
def test_every_estimated_state_is_replay_checked(tmp_path):
    """A stored step whose recorded reward does not replay stops bisect labelling at that step."""
    collect(MAZE, tmp_path, episodes=2, shard_size=2, max_episode_steps=30, seed=3, progress=False)
    f = tmp_path / "shards" / "shard_00000.npz"
    d = load_shard(f, ())
    T0 = int(np.sum(d["episode"] == d["episode"][0]))
    i = T0 - 1  # the last step of the first episode: estimated by every search
    d["reward"] = d["reward"].copy()
    d["reward"][i] += 1.0
    atomic_savez(f, **d)
    with loud(1, "mc_bisect on a shard whose last step's reward does not replay", ReplayMismatchError,
              match=rf"episode {int(d['episode'][i])}, step {T0 - 1}"):
        label(tmp_path, "mc_bisect", k=1, progress=False)


def test_min_estimates_on_real_labels_and_the_cli(maze_data, tmp_path, capsys):
    """--min-estimates 8: every episode has at least 8 estimated states (spread over it), each with exactly
    its dense mc label; the option is recorded, refused by families that do not take it, and a folder
    labelled with the default resumes unchanged (its record carries no min_estimates)."""
    import shutil

    d = tmp_path / "min8"
    shutil.copytree(maze_data, d)
    shutil.rmtree(d / "labels" / "mc_bisect")
    (d / "labels" / "mc_bisect.json").unlink()
    (d / "labels" / "mc_bisect.stats.json").unlink()
    assert main(["label", "--data", str(d), "--family", "mc_bisect", "--k", "4", "--min-estimates", "8",
                 "--no-progress"]) == 0
    assert "rollout steps" in capsys.readouterr().out
    params = json.loads((d / "labels" / "mc_bisect.json").read_text())
    assert params["min_estimates"] == 8
    dense, bis = load_steps(d, "mc"), load_steps(d, "mc_bisect")
    est = _estimated(d)
    assert np.array_equal(bis.success[est], dense.success[est])
    for e in np.unique(bis.episode):
        m = bis.episode == e
        T = int(m.sum())
        assert est[m].sum() >= min(8, T) and est[m][grid_states(T, 8)].all()
    ends_only = read_stats(maze_data, "mc_bisect")["total"]
    assert read_stats(d, "mc_bisect")["total"]["estimated_states"] > ends_only["estimated_states"]
    # another min_estimates on the same folder is refused, the default is not recorded
    with pytest.raises(ValueError, match=r"'min_estimates': \(8, None\)"):
        label(d, "mc_bisect", k=4, seed=0, progress=False)
    assert "min_estimates" not in json.loads((maze_data / "labels" / "mc_bisect.json").read_text())
    label(maze_data, "mc_bisect", k=4, seed=0, min_estimates=2, progress=False)  # the default: resumes as is
    assert read_stats(maze_data, "mc_bisect")["total"] == ends_only
    assert main(["label", "--data", str(d), "--family", "mc", "--min-estimates", "4", "--no-progress"]) == 2
    assert "min_estimates: family 'mc' takes no min_estimates (got 4); it is an option of 'mc_bisect'" in \
        capsys.readouterr().err
    with pytest.raises(ValueError, match=r"min_estimates: expected an integer >= 2"):
        label(tmp_path / "min8", "mc_bisect", k=4, min_estimates=1, progress=False)


def test_cli_label_and_train_with_bisect_labels(maze_data, tmp_path, capsys):
    assert main(["label", "--data", str(maze_data), "--family", "mc_bisect", "--k", "4", "--no-progress"]) == 0
    out = capsys.readouterr().out
    total = read_stats(maze_data, "mc_bisect")["total"]
    n = len(load_steps(maze_data, "mc_bisect"))
    assert f"{n} of {n} steps labelled" in out
    assert f"{total['estimated_states']} states estimated with {total['rollouts']} rollouts, " \
           f"{total['rollout_steps']} rollout steps" in out
    ck = tmp_path / "critic"
    assert main(["train-critic", "--data", str(maze_data), "--label", "mc_bisect", "--out", str(ck), "--epochs", "2",
                 "--no-progress"]) == 0
    metrics = json.loads(ck.with_name("critic.metrics.json").read_text())
    assert metrics["label_family"] == "mc_bisect" and metrics["metrics"]["n_train_steps"] > 0
    correct(1, "train-critic --label mc_bisect", "trained on every step (inferred labels included)")
