"""Faults met by the state critic's input normaliser (a feature constant in training, inputs near the
float32 maximum, old checkpoints) and by the policy loaders (a policy checkpoint naming arbitrary
code, a pickled stable-baselines3 ``.zip``)."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from faults import correct, loud
from prm_critic.models.checkpoint import load_state_critic, save_state_critic
from prm_critic.models.state_critic import StateCriticNet, TorchStateCritic
from prm_critic.models.train import TrainConfig, train_state_critic

pytestmark = pytest.mark.fault

# ------------------------------------------------------------------------------------------------
# item 7: the input normaliser

FLOOR = 1e-2  # the documented default std floor (prm_critic.models.state_critic.STD_FLOOR)
CLIP = 10.0  # the documented default clip of the normalised input
CONST = 2  # feature that never changes in the training data (a table height, a fixed goal, ...)
F32_MAX = float(np.finfo(np.float32).max)


@pytest.fixture(scope="module")
def trained():
    """A small real critic trained on episodes whose outcome shows in feature 0; feature CONST is
    the same value (0.42) in every training step."""
    rng = np.random.default_rng(0)
    n_ep, length = 80, 10
    ep = np.repeat(np.arange(n_ep), length)
    t = np.tile(np.arange(length), n_ep)
    ys = rng.random(n_ep) < 0.5
    x = rng.normal(size=(n_ep * length, 4)).astype(np.float32)
    x[:, 0] += np.where(ys[ep], 1.5, -1.5)
    x[:, CONST] = 0.42
    cfg = TrainConfig(hidden=(32, 32), batch_size=128, epochs=6, lr=3e-3, seed=0)
    net, _ = train_state_critic(x, t / (length - 1), ys[ep].astype(float), episode=ep, t=t, ep_success=ys[ep],
                                config=cfg, progress_bar=False)
    return TorchStateCritic(net), x


def _scores(critic, x) -> np.ndarray:
    s = critic.score(np.asarray(x, np.float32))
    return np.stack([s.progress, s.success], axis=1)


def _noise_bound(net: StateCriticNet, delta: float) -> float:
    """Bound on |score change| when feature CONST moves by ``delta``, if the normaliser divides it by at
    least FLOOR: sigmoid' <= 1/4, ReLU is 1-Lipschitz, so the change is at most
    ``1/4 * ||head||_2 * prod ||W_k||_2 (k >= 2) * ||W_1[:, CONST]|| * delta / FLOOR``."""
    linears = [m for m in net.body if isinstance(m, torch.nn.Linear)]
    with torch.no_grad():
        lip = float(torch.linalg.vector_norm(linears[0].weight[:, CONST]))
        for lin in linears[1:] + [net.head]:
            lip *= float(torch.linalg.matrix_norm(lin.weight, ord=2))
    return 0.25 * lip * abs(delta) / FLOOR


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(row=st.integers(0, 799), delta=st.floats(-1e-3, 1e-3, allow_nan=False))
@example(row=0, delta=1e-3)
def test_sensor_noise_on_a_feature_constant_in_training_moves_scores_a_bounded_amount(trained, row, delta):
    critic, x = trained
    base = x[row : row + 1]
    noisy = base.copy()
    noisy[0, CONST] += np.float32(delta)
    change = float(np.abs(_scores(critic, noisy) - _scores(critic, base)).max())
    assert change <= _noise_bound(critic.net, float(noisy[0, CONST] - base[0, CONST])) + 1e-6
    assert change <= 0.05, f"1e-3 of noise on a feature constant in training moved a score by {change}"
    correct(7, "sensor noise (|delta| <= 1e-3) on a feature that was constant in training",
            f"std floored at {FLOOR}: scores move by at most 0.05 (here {change:.2g})")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(x=st.lists(st.one_of(st.sampled_from([F32_MAX, -F32_MAX, F32_MAX / 2, -3e38]),
                            st.floats(-F32_MAX, F32_MAX, width=32)), min_size=4, max_size=4))
@example(x=[F32_MAX, F32_MAX, F32_MAX, F32_MAX])
@example(x=[-F32_MAX, F32_MAX, -F32_MAX, F32_MAX])
def test_finite_inputs_up_to_float32_max_give_finite_scores(trained, x):
    critic, _ = trained
    s = _scores(critic, np.array([x], np.float32))
    assert np.all(np.isfinite(s)) and np.all((s >= 0) & (s <= 1)), s
    correct(7, "finite critic inputs near the float32 maximum",
            f"normalised inputs clipped to +-{CLIP}: finite scores in [0, 1]")


def test_normalised_input_is_clipped_and_the_std_floored(trained):
    critic, x = trained
    net = critic.net
    assert float(net.obs_std[CONST]) == pytest.approx(FLOOR)
    assert float(net.obs_clip) == CLIP
    z = net.normalize(torch.from_numpy(np.array([[F32_MAX, -F32_MAX, 0.43, 1e30]], np.float32)))
    np.testing.assert_array_equal(z[0, [0, 1, 3]].numpy(), [CLIP, -CLIP, CLIP])
    assert float(z[0, CONST]) == pytest.approx(0.01 / FLOOR, rel=1e-3)
    correct(7, "a feature with zero standard deviation in the training data",
            f"obs_std = max(std, {FLOOR}), normalised input clipped to +-{CLIP}")


def test_onnx_export_clips_like_torch_on_huge_finite_inputs(trained, tmp_path):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    import onnxruntime as ort

    from prm_critic.onnx.export import export_state_critic, read_onnx_metadata

    critic, x = trained
    path = export_state_critic(critic, tmp_path / "critic.onnx")
    rng = np.random.default_rng(1)
    noisy = x[:50].copy()
    noisy[:, CONST] += rng.uniform(-1e-3, 1e-3, 50).astype(np.float32)
    huge = np.array([[F32_MAX] * 4, [-F32_MAX] * 4, [F32_MAX, -F32_MAX, 3e38, -1e38], [1e30, 0.0, 0.42, -1e30]],
                    np.float32)
    wide = rng.uniform(-1.0, 1.0, (50, 4)).astype(np.float32) * np.float32(F32_MAX)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    for name, inp in (("data", x[:50]), ("noisy", noisy), ("huge", huge), ("wide", wide)):
        got = sess.run(None, {"obs": inp})[0]
        ref = _scores(critic, inp)
        assert np.all(np.isfinite(got)), (name, got)
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5, err_msg=name)
    meta = read_onnx_metadata(path)
    assert meta["normalization"]["clip"] == CLIP and "clip(" in meta["normalization"]["formula"]
    correct(7, "ONNX twin of the critic fed inputs near the float32 maximum",
            "onnxruntime clips like torch: same finite scores (rtol 1e-4)")


def test_checkpoint_saved_before_clipping_loads_with_the_same_scores(trained, tmp_path):
    """A checkpoint written before ``obs_clip`` existed (no such tensor, std floored at 1e-6) loads
    unchanged: its scores are the unclipped formula's, as they always were."""
    from safetensors.torch import load_file, save_file

    critic, x = trained
    old = StateCriticNet(4, (32, 32))
    old.load_state_dict(critic.net.state_dict())
    w = save_state_critic(tmp_path / "old", old, {"task": "demo"})
    tensors = load_file(str(w))
    del tensors["obs_clip"]
    tensors["obs_std"][CONST] = 1e-6  # what the old 1e-6 floor stored
    save_file(tensors, str(w), metadata={"format": "prm-critic/state-critic"})
    j = w.with_suffix(".json")
    doc = json.loads(j.read_text())
    del doc["weights_sha256"]  # that version wrote no hash either
    doc["format_version"] = 1
    j.write_text(json.dumps(doc))
    loaded = load_state_critic(tmp_path / "old", allow_unverified=True)
    assert float(loaded.net.obs_clip) == float("inf")
    probe = x[:20].copy()
    probe[:, CONST] += np.float32(1e-3)
    with torch.no_grad():
        n = loaded.net
        z = (torch.from_numpy(probe) - n.obs_mean) / n.obs_std
        expected = torch.sigmoid(n.head(n.body(z))).numpy()
    np.testing.assert_array_equal(_scores(loaded, probe), expected)
    # saved again, it keeps behaving the same (no clipping) rather than picking up the new default
    save_state_critic(tmp_path / "again", loaded.net)
    np.testing.assert_array_equal(_scores(load_state_critic(tmp_path / "again"), probe), expected)
    correct(7, "a critic checkpoint saved before input clipping existed",
            "loads with its saved normaliser and no clipping: identical scores")


@pytest.mark.parametrize("make, match", [
    (lambda: TrainConfig(std_floor=0.0), r"std_floor: expected a finite number > 0, got 0.0"),
    (lambda: TrainConfig(std_floor=float("nan")), r"std_floor: expected a finite number > 0, got nan"),
    (lambda: TrainConfig(obs_clip=-1), r"obs_clip: expected a number > 0 or None \(no clipping\), got -1"),
    (lambda: TrainConfig(obs_clip=float("inf")), r"obs_clip: expected a finite number > 0 or None"),
    (lambda: StateCriticNet(3).set_normalization([0, 0, 0], [1, -1, 1]),
     r"std: expected standard deviations >= 0, got -1.0 for feature 1"),
    (lambda: StateCriticNet(3).set_normalization([0, np.nan, 0], [1, 1, 1]),
     r"mean: expected finite float32 statistics, got nan for feature 1"),
    (lambda: StateCriticNet(3).set_normalization([0, 0, 0], [1, 1e300, 1]),
     r"std: expected finite float32 statistics, got 1e\+300 for feature 1"),
])
def test_bad_normaliser_settings_name_the_value(make, match):
    with loud(7, "bad normaliser setting (std floor, clip or statistics)", ValueError, match=match):
        make()


@pytest.mark.fault_outcome(7, 'normaliser settings saved in a training config',
                           'std floor 1e-2 and clip 10 by default; settings round-trip through JSON')
def test_config_defaults_and_round_trip():
    from prm_critic.models.state_critic import OBS_CLIP, STD_FLOOR

    assert (STD_FLOOR, OBS_CLIP) == (FLOOR, CLIP)
    cfg = TrainConfig(std_floor=0.05, obs_clip=None)
    assert TrainConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    net = StateCriticNet(2)
    net.set_normalization([0.0, 1.0], [0.0, 2.0], std_floor=0.05, obs_clip=None)
    assert net.obs_std.tolist() == pytest.approx([0.05, 2.0]) and float(net.obs_clip) == float("inf")


# ------------------------------------------------------------------------------------------------
# item 8: policy loaders


TASK = "FetchReach-v4"


@pytest.fixture(scope="module")
def sac_files(tmp_path_factory):
    """A real (untrained) SAC on FetchReach saved both ways: a prm-critic policy checkpoint (with
    allowed classes in its kwargs) and SB3's own pickled ``.zip``."""
    pytest.importorskip("stable_baselines3")
    pytest.importorskip("gymnasium_robotics")
    from stable_baselines3.common.vec_env import DummyVecEnv

    from prm_critic.robotics.make import make_env
    from prm_critic.sb3 import save_policy
    from prm_critic.sb3.train import build_model

    d = tmp_path_factory.mktemp("policies")
    kw = dict(buffer_size=200, learning_starts=0, batch_size=16,
              policy_kwargs=dict(net_arch=[16, 16], activation_fn=torch.nn.Tanh, optimizer_class=torch.optim.AdamW))
    env = DummyVecEnv([lambda: make_env(TASK)])
    model = build_model("sac", env, algo_kwargs=kw, seed=0)
    save_policy(d / "policy", model, spec=TASK, algo="sac", algo_kwargs=kw)
    model.save(d / "sac.zip")
    obs = make_env(TASK).reset(seed=3)[0]
    return {"dir": d, "json": d / "policy.json", "zip": d / "sac.zip", "model": model, "obs": obs}


def _tampered(sac_files, tmp_path, edit):
    import shutil

    doc = json.loads(sac_files["json"].read_text())
    edit(doc)
    (tmp_path / "policy.json").write_text(json.dumps(doc))
    shutil.copy(sac_files["dir"] / "policy.safetensors", tmp_path / "policy.safetensors")
    return tmp_path / "policy.json"


def test_policy_checkpoint_with_allowed_classes_round_trips(sac_files):
    from prm_critic.sb3 import load_policy

    loaded = load_policy(sac_files["json"], device="cpu")
    assert loaded.policy_kwargs["activation_fn"] is torch.nn.Tanh
    assert loaded.policy_kwargs["optimizer_class"] is torch.optim.AdamW
    obs = sac_files["obs"]
    np.testing.assert_array_equal(loaded.predict(obs, deterministic=True)[0],
                                  sac_files["model"].predict(obs, deterministic=True)[0])
    correct(8, "policy checkpoint naming torch / SB3 classes on the allowlist",
            "loads; same deterministic actions as the saved model")


@pytest.mark.parametrize("name", ["os:system", "builtins:eval", "subprocess:Popen", "this:s",
                                  "torch.nn.modules.activation:ReLU.__init__"])
def test_policy_checkpoint_naming_arbitrary_code_is_refused(sac_files, tmp_path, name):
    from prm_critic.sb3 import PolicyCheckpointError, load_policy

    def edit(doc):
        doc["policy_kwargs"]["activation_fn"] = {"__object__": name}

    path = _tampered(sac_files, tmp_path, edit)
    before = set(sys.modules)
    with loud(8, f"policy.json whose policy_kwargs.activation_fn names {name!r}", PolicyCheckpointError,
              match=r"policy\.json' field 'policy_kwargs\.activation_fn' names " + repr(name).replace(".", r"\.")
              + r", which a policy checkpoint may not load; expected one of \[.*'torch\.nn\.modules\.activation:Tanh'"):
        load_policy(path, device="cpu")
    assert set(sys.modules) - before == set(), "loading imported a module the file named"


@pytest.mark.parametrize("field, value, match", [
    ("algo", "os", r"field 'algo' is 'os'; expected one of \['sac', 'tqc', 'ppo', 'crossq'\]"),
    ("policy_alias", "os:system", r"field 'policy_alias' is 'os:system'; expected one of \['MlpPolicy', 'MultiInputPolicy'\]"),
    ("algo_kwargs", [1], r"field 'algo_kwargs' is \[1\]; expected an object of constructor arguments"),
])
def test_policy_checkpoint_fields_outside_the_allowlist_are_refused(sac_files, tmp_path, field, value, match):
    from prm_critic.sb3 import PolicyCheckpointError, load_policy

    path = _tampered(sac_files, tmp_path, lambda doc: doc.__setitem__(field, value))
    with loud(8, f"policy.json with {field}={value!r}", PolicyCheckpointError, match=r"policy\.json' " + match):
        load_policy(path, device="cpu")


def test_collect_refuses_a_policy_checkpoint_naming_arbitrary_code(sac_files, tmp_path):
    from prm_critic.robotics.collection import collect
    from prm_critic.sb3 import PolicyCheckpointError, load_policy

    def edit(doc):
        doc["algo_kwargs"]["learning_rate"] = {"__object__": "os:system"}

    (tmp_path / "pol").mkdir()
    path = _tampered(sac_files, tmp_path / "pol", edit)
    with loud(8, "collect with a behaviour policy.json naming 'os:system'", PolicyCheckpointError,
              match=r"field 'algo_kwargs\.learning_rate' names 'os:system'"):
        collect(TASK, tmp_path / "data", episodes=1, policy=str(path), max_episode_steps=3, progress=False,
                policy_loader=load_policy)


def test_sb3_zip_needs_trust_pickle(sac_files):
    from prm_critic.robotics.controllers import UntrustedPickleError, load_sb3_model

    with loud(8, "stable-baselines3 .zip loaded without trust_pickle=True", UntrustedPickleError,
              match=r"sac\.zip' is a stable-baselines3 model \.zip; loading it unpickles objects stored in the file, "
                    r"which runs arbitrary code from that file\. Load only files you trust, with trust_pickle=True "
                    r"\(CLI: --trust-pickle\)"):
        load_sb3_model(sac_files["zip"])
    with pytest.raises(TypeError, match=r"trust_pickle: expected True or False, got 'yes'"):
        load_sb3_model(sac_files["zip"], trust_pickle="yes")
    model = load_sb3_model(sac_files["zip"], trust_pickle=True)
    obs = sac_files["obs"]
    np.testing.assert_array_equal(model.predict(obs, deterministic=True)[0],
                                  sac_files["model"].predict(obs, deterministic=True)[0])


def test_collect_and_label_refuse_an_sb3_zip_without_trust(sac_files, tmp_path):
    from prm_critic.robotics.collection import collect
    from prm_critic.robotics.controllers import UntrustedPickleError
    from prm_critic.robotics.labels import label

    zip_path = str(sac_files["zip"])
    with loud(8, "collect with a stable-baselines3 .zip behaviour policy, no trust flag", UntrustedPickleError,
              match=r"policy: .*sac\.zip' is a stable-baselines3 model \.zip; loading it unpickles"):
        collect(TASK, tmp_path / "data", episodes=1, policy=zip_path, max_episode_steps=3, progress=False)
    assert not (tmp_path / "data").exists()  # refused before anything was written
    out = collect(TASK, tmp_path / "data", episodes=1, policy=zip_path, max_episode_steps=3, progress=False,
                  trust_pickle=True)
    assert json.loads((out / "meta.json").read_text())["policy"] == str(sac_files["zip"].resolve())
    with loud(8, "mc labels with a stable-baselines3 .zip rollout policy, no trust flag", UntrustedPickleError,
              match=r"rollout_policy: .*sac\.zip' is a stable-baselines3 model \.zip"):
        label(out, "mc", k=1, stride=2, rollout_policy=zip_path, progress=False)
    lab = label(out, "mc", k=1, stride=2, rollout_policy=zip_path, progress=False, trust_pickle=True)
    assert list(lab.glob("shard_*.npz"))
    # the trust flag is not a label parameter: the stored record is the same as before
    assert "trust_pickle" not in json.loads((out / "labels" / "mc.json").read_text())


def test_cli_refuses_an_sb3_zip_without_trust_pickle(sac_files, tmp_path, capsys):
    from prm_critic.cli import main

    zip_path = str(sac_files["zip"])
    base = ["collect", "--task", TASK, "--out", str(tmp_path / "d"), "--episodes", "1", "--policy", zip_path,
            "--max-episode-steps", "3", "--no-progress"]
    assert main(base) == 2
    err = capsys.readouterr().err
    assert "runs arbitrary code" in err and "--trust-pickle" in err and err.count("\n") == 1
    correct(8, "prm-critic collect --policy model.zip without --trust-pickle",
            "exit 2 with one line naming the file, the risk and --trust-pickle")
    assert main(base + ["--trust-pickle"]) == 0
    lab = ["label", "--data", str(tmp_path / "d"), "--family", "mc", "--k", "1", "--stride", "2",
           "--rollout-policy", zip_path, "--no-progress"]
    assert main(lab) == 2
    assert "--trust-pickle" in capsys.readouterr().err
    assert main(lab + ["--trust-pickle"]) == 0
