"""The SBX (JAX) backend of ``train_policy``: SAC, TQC and CrossQ train a few hundred steps on real
MuJoCo envs through the library's own env chain (shaper inside, HER relabelling through it), save
safetensors + JSON, load, and predict the same deterministic actions; corrupt or mismatched
checkpoints and the combinations the backend cannot do are refused with one clear error."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import sys

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")
pytest.importorskip("gymnasium_robotics")

from prm_critic.robotics.make import make_env  # noqa: E402
from prm_critic._optional import install_hint  # noqa: E402
from prm_critic.sb3 import PolicyCheckpointError, load_policy, predict, save_policy, train_policy  # noqa: E402

BaseCallback = pytest.importorskip("stable_baselines3.common.callbacks").BaseCallback

needs_sbx = pytest.mark.skipif(importlib.util.find_spec("sbx") is None,
                               reason='sbx is not installed (pip install "prm-critic[sbx]")')

TINY = dict(learning_starts=60, batch_size=16, policy_kwargs=dict(net_arch=[16, 16]))
#: algo -> (task, her, normalize_obs): HER on the goal-conditioned Fetch task, a plain run on the maze
CASES = {"sac": ("FetchPush-v4", True, True), "tqc": ("PointMaze_UMaze-v3", False, False),
         "crossq": ("FetchPush-v4", True, False)}
STEPS = 120
SCALE = 5.0


class RecordRewards(BaseCallback):
    """The reward the vec env returned at each step (what the learner must store)."""

    def __init__(self):
        super().__init__()
        self.rewards, self.original = [], []

    def _on_step(self) -> bool:
        self.rewards.append(float(self.locals["rewards"][0]))
        self.original.append(float(self.locals["infos"][0]["prm_original_reward"]))
        return True


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """``runs(algo)``: the trained sbx model of ``algo`` (trained once per module), its log folder and
    the rewards the env returned during training."""
    done: dict[str, dict] = {}

    def get(algo: str) -> dict:
        if algo not in done:
            task, her, norm = CASES[algo]
            d = tmp_path_factory.mktemp(f"sbx_{algo}")
            rec = RecordRewards()
            model = train_policy(task, algo=algo, backend="sbx", critic="subgoal", shaping="potential", scale=SCALE,
                                 her=her, total_steps=STEPS, seed=0, log_dir=d, normalize_obs=norm, eval_freq=STEPS,
                                 eval_episodes=1, algo_kwargs=TINY, callbacks=[rec], progress=False)
            done[algo] = {"model": model, "dir": d, "task": task, "her": her, "rec": rec}
        return done[algo]

    return get


def _observations(task: str, n: int = 6) -> list:
    env = make_env(task)
    out = [env.reset(seed=100 + i)[0] for i in range(n)]
    env.close()
    return out


def _weights(path):
    from safetensors import safe_open
    from safetensors.numpy import load_file

    with safe_open(str(path), framework="np") as f:
        return load_file(str(path)), f.metadata()


@needs_sbx
@pytest.mark.parametrize("algo", ["sac", "tqc", "crossq"])
def test_sbx_algorithms_train_save_load_predict(runs, algo):
    run = runs(algo)
    model, d = run["model"], run["dir"]
    assert type(model).__module__.startswith("sbx.") and model.num_timesteps == STEPS
    assert model.prm_config["backend"] == "sbx" and model.prm_config["trained_steps"] == STEPS
    # the learner stored the shaped reward (the shaper sits inside the vec env), not the env's own
    rec = run["rec"]
    n = model.replay_buffer.pos
    stored = model.replay_buffer.rewards[:n, 0]
    np.testing.assert_allclose(stored, np.asarray(rec.rewards)[:n], rtol=1e-5, atol=1e-5)
    assert not np.allclose(stored, np.asarray(rec.original)[:n])
    # the unshaped evaluation ran before training and at the end
    assert [r["env_steps"] for r in model.prm_eval.rows] == [0, STEPS]
    # checkpoint: safetensors + JSON (no pickle), backend recorded in both files
    meta = json.loads((d / "policy.json").read_text())
    assert (meta["backend"], meta["format_version"], meta["algo"], meta["her"]) == ("sbx", 2, algo, run["her"])
    assert not list(d.glob("*.zip")) and not list(d.glob("*.pkl"))
    arrays, header = _weights(d / "policy.safetensors")
    assert header == {"format": "prm-critic/sb3-policy", "backend": "sbx"}
    states = {k.split("/", 1)[0] for k in arrays if not k.startswith("vec_normalize.")}
    from prm_critic.sb3.backends import SBX_TRAIN_STATES

    assert states == set(SBX_TRAIN_STATES[algo])
    loaded = load_policy(d / "policy")
    assert type(loaded) is type(model) and loaded.prm_checkpoint["backend"] == "sbx"
    assert (loaded.get_vec_normalize_env() is not None) is CASES[algo][2]
    for obs in _observations(run["task"]):
        a, _ = predict(model, obs, deterministic=True)
        b, _ = predict(loaded, obs, deterministic=True)
        np.testing.assert_array_equal(a, b)
    if algo == "crossq":  # trained BatchRenorm counters: int32, 0-d in the actor, one per critic in the critic
        steps = "actor_state/batch_stats/BatchRenorm_0/steps"
        assert arrays[steps].shape == () and arrays[steps].dtype == np.int32 and int(arrays[steps]) > 0
        assert arrays["qf_state/batch_stats/VmapCritic_0/BatchRenorm_0/steps"].shape == (2,)


@needs_sbx
def test_sbx_her_relabels_through_the_shaper(runs):
    rb = runs("sac")["model"].replay_buffer
    assert type(rb).__name__ == "PRMHerReplayBuffer"  # the same relabelling rows as on the sb3 backend
    r = rb.sample(256, env=None).rewards.numpy().reshape(-1)
    # FetchPush's own reward is 0 or -1; relabelled rewards carry the potential term for the new goal
    assert np.mean(np.isclose(r, 0.0) | np.isclose(r, -1.0)) < 0.5


@needs_sbx
def test_fresh_crossq_counters_round_trip(tmp_path):
    """An untrained CrossQ holds its BatchRenorm counters as Python ints: they are written as JAX's
    int32, keep their shapes (0-d stays 0-d) and load back into a fresh model."""
    from stable_baselines3.common.vec_env import DummyVecEnv

    from prm_critic.sb3.train import build_model

    env = DummyVecEnv([lambda: make_env("FetchPush-v4")])
    kw = dict(buffer_size=200, policy_kwargs=dict(net_arch=[8]))
    model = build_model("crossq", env, algo_kwargs=kw, seed=0, backend="sbx")
    fresh = model.policy.actor_state.batch_stats["BatchRenorm_0"]["steps"]
    assert isinstance(fresh, int)  # the trap this test is about
    save_policy(tmp_path / "policy", model, spec="FetchPush-v4", algo="crossq", algo_kwargs=kw)
    arrays, _ = _weights(tmp_path / "policy.safetensors")
    assert arrays["actor_state/batch_stats/BatchRenorm_0/steps"].shape == ()
    assert arrays["actor_state/batch_stats/BatchRenorm_0/steps"].dtype == np.int32
    loaded = load_policy(tmp_path / "policy")
    for obs in _observations("FetchPush-v4", 3):
        np.testing.assert_array_equal(loaded.predict(obs, deterministic=True)[0],
                                      model.predict(obs, deterministic=True)[0])


def _edited_weights(src, dst, edit):
    """Copy the checkpoint ``src`` (a folder) to ``dst`` with ``edit(arrays)`` applied to its weights."""
    from safetensors.numpy import save_file

    dst.mkdir()
    shutil.copy(src / "policy.json", dst / "policy.json")
    arrays, header = _weights(src / "policy.safetensors")
    edit(arrays)
    save_file(arrays, str(dst / "policy.safetensors"), metadata=header)
    return dst / "policy"


ACTOR_BIAS = "actor_state/params/Dense_0/bias"
STEPS_KEY = "actor_state/batch_stats/BatchRenorm_0/steps"


@needs_sbx
@pytest.mark.parametrize("case, edit, match", [
    ("missing key", lambda a: a.pop(ACTOR_BIAS),
     rf"key '{ACTOR_BIAS}': expected an array of shape \(16,\) and dtype float32 \(the rebuilt CrossQ has it\), "
     r"got no such key"),
    ("extra key", lambda a: a.__setitem__("actor_state/params/Extra/kernel", np.zeros(3, np.float32)),
     r"key 'actor_state/params/Extra/kernel': expected only the rebuilt CrossQ's \d+ keys \(under \['actor_state', "
     r"'ent_coef_state', 'qf_state'\]\), got an extra key holding an array of shape \(3,\) and dtype float32"),
    ("wrong shape", lambda a: a.__setitem__(ACTOR_BIAS, np.zeros(8, np.float32)),
     rf"key '{ACTOR_BIAS}': expected shape \(16,\) \(the rebuilt CrossQ\), got shape \(8,\)"),
    ("0-d counter as (1,)", lambda a: a.__setitem__(STEPS_KEY, np.ascontiguousarray(a[STEPS_KEY])),
     rf"key '{STEPS_KEY}': expected shape \(\) \(the rebuilt CrossQ\), got shape \(1,\)"),
    ("wrong dtype", lambda a: a.__setitem__(STEPS_KEY, a[STEPS_KEY].astype(np.int64)),
     rf"key '{STEPS_KEY}': expected dtype int32 \(the rebuilt CrossQ\), got dtype int64"),
])
def test_corrupt_sbx_weights_are_refused(runs, tmp_path, case, edit, match):
    path = _edited_weights(runs("crossq")["dir"], tmp_path / "bad", edit)
    with pytest.raises(PolicyCheckpointError, match=r"path: weights in '.*bad/policy\.safetensors' do not fit the "
                                                    r"rebuilt CrossQPolicy: " + match):
        load_policy(path)


@pytest.fixture(scope="module")
def sb3_files(tmp_path_factory):
    """An untrained SB3 (torch) SAC on FetchPush saved as a policy checkpoint."""
    from stable_baselines3.common.vec_env import DummyVecEnv

    from prm_critic.sb3.train import build_model

    d = tmp_path_factory.mktemp("sb3_policy")
    kw = dict(buffer_size=200, policy_kwargs=dict(net_arch=[8]))
    model = build_model("sac", DummyVecEnv([lambda: make_env("FetchPush-v4")]), algo_kwargs=kw, seed=0)
    save_policy(d / "policy", model, spec="FetchPush-v4", algo="sac", algo_kwargs=kw)
    return {"dir": d, "model": model}


def _edited_json(src, dst, edit, weights_from=None):
    dst.mkdir()
    doc = json.loads((src / "policy.json").read_text())
    edit(doc)
    (dst / "policy.json").write_text(json.dumps(doc))
    shutil.copy((weights_from or src) / "policy.safetensors", dst / "policy.safetensors")
    return dst / "policy"


@needs_sbx
def test_checkpoints_of_the_other_backend_are_refused(runs, sb3_files, tmp_path):
    sbx_dir, sb3_dir = runs("sac")["dir"], sb3_files["dir"]
    with pytest.raises(PolicyCheckpointError, match=r"backend: '.*policy\.json' is a policy of backend='sbx', "
                                                    r"expected backend='sb3'"):
        load_policy(sbx_dir / "policy", backend="sb3")
    with pytest.raises(PolicyCheckpointError, match=r"backend: '.*policy\.json' is a policy of backend='sb3', "
                                                    r"expected backend='sbx'"):
        load_policy(sb3_dir / "policy", backend="sbx")
    # an sbx JSON next to sb3 weights (and the other way round): the weights' header names their backend
    mixed = _edited_json(sbx_dir, tmp_path / "mixed", lambda doc: None, weights_from=sb3_dir)
    with pytest.raises(PolicyCheckpointError, match=r"weights '.*mixed/policy\.safetensors' were written by "
                                                    r"backend='sb3', but '.*mixed/policy\.json' describes a "
                                                    r"backend='sbx' policy"):
        load_policy(mixed)
    mixed2 = _edited_json(sb3_dir, tmp_path / "mixed2", lambda doc: None, weights_from=sbx_dir)
    with pytest.raises(PolicyCheckpointError, match=r"were written by backend='sbx', but .* describes a "
                                                    r"backend='sb3' policy"):
        load_policy(mixed2)


@needs_sbx
@pytest.mark.parametrize("field, value, match", [
    ("backend", "jax", r"field 'backend' is 'jax'; expected one of \['sb3', 'sbx'\]"),
    ("format_version", 1, r"field 'format_version' is 1 for backend='sbx'; expected 2"),
    ("algo", "ppo", r"field 'algo': algo='ppo' is not available with backend='sbx'"),
])
def test_sbx_json_fields_are_checked(runs, tmp_path, field, value, match):
    path = _edited_json(runs("sac")["dir"], tmp_path / "bad", lambda doc: doc.__setitem__(field, value))
    with pytest.raises(PolicyCheckpointError, match=r"policy\.json' " + match):
        load_policy(path)


def test_sb3_checkpoints_without_a_backend_still_load(sb3_files, tmp_path):
    """Checkpoints written before there was a backend (no key in the JSON, none in the weights'
    header) are sb3's, and a crossq one cannot claim sb3."""
    from safetensors.torch import load_file, save_file

    d = tmp_path / "old"
    path = _edited_json(sb3_files["dir"], d, lambda doc: doc.pop("backend"))
    save_file(load_file(str(d / "policy.safetensors")), str(d / "policy.safetensors"),
              metadata={"format": "prm-critic/sb3-policy"})
    loaded = load_policy(path, backend="sb3")
    obs = _observations("FetchPush-v4", 1)[0]
    np.testing.assert_array_equal(loaded.predict(obs, deterministic=True)[0],
                                  sb3_files["model"].predict(obs, deterministic=True)[0])
    bad = _edited_json(sb3_files["dir"], tmp_path / "crossq", lambda doc: doc.__setitem__("algo", "crossq"))
    with pytest.raises(PolicyCheckpointError, match=r"field 'algo': algo='crossq' is not available with "
                                                    r"backend='sb3'.*pass backend='sbx'"):
        load_policy(bad)


@pytest.mark.parametrize("kwargs, match", [
    (dict(algo="crossq"), r"algo='crossq' is not available with backend='sb3': CrossQ is trained with SBX \(JAX\) "
                          r"here; pass backend='sbx' \(CLI: --backend sbx; install it with "
                          + re.escape(install_hint("sbx")) + r"\); backend='sb3' provides algo in \['sac', 'tqc', 'ppo'\]"),
    (dict(algo="ppo", backend="sbx"), r"algo='ppo' is not available with backend='sbx': SBX's PPO has no policy for "
                                      r"Dict observations .*pass backend='sb3' for PPO; backend='sbx' provides algo "
                                      r"in \['sac', 'tqc', 'crossq'\]"),
    (dict(backend="jax"), r"backend: expected one of \['sb3', 'sbx'\], got 'jax'"),
    (dict(backend="SBX"), r"backend: expected one of \['sb3', 'sbx'\], got 'SBX'"),
])
def test_refused_backend_combinations(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        train_policy("FetchPush-v4", total_steps=10, log_dir=tmp_path, progress=False, **kwargs)


def test_a_missing_sbx_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "sbx", None)  # as if sbx were not installed
    with pytest.raises(ImportError, match=r"optional dependency 'sbx' .*" + re.escape(install_hint("sbx"))):
        train_policy("FetchPush-v4", algo="crossq", backend="sbx", total_steps=10, progress=False)


@needs_sbx
def test_controller_seeds_the_jax_key_on_reset(runs):
    """Sampled actions of an sbx policy repeat under the same reset seed and differ under another."""
    from prm_critic.robotics.controllers import SB3Controller

    model = runs("sac")["model"]
    obs = _observations("FetchPush-v4", 4)

    def actions(seed, deterministic=False):
        ctrl = SB3Controller(model, deterministic=deterministic)
        ctrl.reset(obs[0], np.random.default_rng(seed))
        return np.stack([ctrl.act(o) for o in obs])

    np.testing.assert_array_equal(actions(5), actions(5))
    assert not np.allclose(actions(5), actions(6))
    # the deterministic controller is predict() on raw observations (normalised with the saved statistics)
    np.testing.assert_array_equal(actions(5, True), np.stack([predict(model, o)[0] for o in obs]))


def test_cli_passes_the_backend_and_otherwise_leaves_the_library_default(monkeypatch, tmp_path, capsys):
    import types

    import prm_critic.sb3 as sb3
    from prm_critic.cli import main

    seen = []

    def fake_train_policy(task, **kwargs):
        seen.append(kwargs)
        return types.SimpleNamespace(prm_eval=None, num_timesteps=kwargs["total_steps"], prm_config={})

    monkeypatch.setattr(sb3, "train_policy", fake_train_policy)
    base = ["train-policy", "--task", "FetchPush-v4", "--steps", "10", "--out", str(tmp_path)]
    assert main(base + ["--backend", "sbx", "--algo", "crossq"]) == 0
    assert main(base) == 0
    assert seen[0]["backend"] == "sbx" and seen[0]["algo"] == "crossq"
    assert "backend" not in seen[1]  # train_policy's own default applies
    monkeypatch.undo()
    assert main(base + ["--algo", "crossq"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "algo='crossq' is not available with backend='sb3'" in err
