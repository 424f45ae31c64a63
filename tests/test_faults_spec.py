"""Task-spec expressions: constants and affine offsets in subgoal points, every expression error
loud (spec file, subgoal, field, text, what was expected), and a real Reacher-v5 spec end to end."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from faults import correct, loud
from prm_critic.robotics.make import CriticInputLayout, make_env
from prm_critic.robotics.spec import SpecError, load_spec
from prm_critic.robotics.subgoals import SubgoalCritic, SubgoalEvaluator

pytestmark = pytest.mark.fault

L1, L2 = 0.1, 0.11  # Reacher's link lengths (upper arm, forearm to the fingertip)


def _wrap(a):
    return (a + np.pi) % (2 * np.pi) - np.pi


def reacher_ik_action(obs, kp=2.0, kd=0.1):
    """Joint-space PD towards the inverse-kinematics solution for the target at ``obs[4:6]``
    (the elbow branch closer to the current angles)."""
    q1, q2 = np.arctan2(obs[2], obs[0]), np.arctan2(obs[3], obs[1])
    x, y = obs[4], obs[5]
    c2 = np.clip((x * x + y * y - L1 * L1 - L2 * L2) / (2 * L1 * L2), -1.0, 1.0)
    best = None
    for sign in (1.0, -1.0):
        d2 = sign * np.arccos(c2)
        d1 = np.arctan2(y, x) - np.arctan2(L2 * np.sin(d2), L1 + L2 * np.cos(d2))
        cost = abs(_wrap(d1 - q1)) + abs(_wrap(d2 - q2))
        if best is None or cost < best[0]:
            best = (cost, d1, d2)
    _, d1, d2 = best
    return np.clip(kp * np.array([_wrap(d1 - q1), _wrap(d2 - q2)]) - kd * obs[6:8], -1.0, 1.0).astype(np.float32)


def _reacher_spec(tmp_path, a, b, *, name="reach.toml", extra=""):
    def val(v):
        return str(v).lower() if isinstance(v, bool) else json.dumps(v)

    text = f"""[task]
name = "MyReacher"
env_id = "Reacher-v5"
critic_input = ["obs"]
success = {{ source = "subgoals" }}

[[subgoals]]
name = "fingertip_at_target"
a = {val(a)}
b = {val(b)}
threshold = 0.02
scale = 0.4
{extra}"""
    p = tmp_path / name
    p.write_text(text)
    return p


def test_reacher_spec_scores_progress_when_the_fingertip_reaches_the_target():
    """Real Reacher-v5 (plain Box observation, no re-registration), ``b = 0`` on the difference vector:
    progress = 1 - ||fingertip - target|| / 0.4 on the way, 1 when the fingertip is on the target,
    checked against MuJoCo's own body positions."""
    env = make_env("Reacher-v5")
    critic = SubgoalCritic("Reacher-v5", env)
    assert str(critic.spec.subgoals[0].b) == "0"
    for seed in range(3):
        obs, _ = env.reset(seed=seed)
        progress, gaps = [], []
        for _ in range(50):
            u = env.unwrapped
            gap = np.linalg.norm((u.get_body_com("fingertip") - u.get_body_com("target"))[:2])
            x = critic.layout.flatten(obs)[None]
            progress.append(float(critic.score(x).progress[0]))
            gaps.append(gap)
            obs, *_ = env.step(reacher_ik_action(obs))
        progress, gaps = np.array(progress), np.array(gaps)
        far = gaps >= 0.02
        np.testing.assert_allclose(progress[far], np.clip(1 - gaps[far] / 0.4, 0, 1), atol=1e-5)
        assert progress[0] < 0.9 and gaps[0] > 0.04, (seed, progress[0], gaps[0])
        assert progress[-1] == 1.0 and gaps[-1] < 0.02, (seed, progress[-1], gaps[-1])
        assert critic.score(critic.layout.flatten(obs)[None]).success[0] == 1.0
    env.close()
    correct(3, "Reacher-v5 spec with b = 0 on the fingertip-target vector (plain Box env)",
            "loads without re-registration; spec progress follows 1 - ||fingertip - target|| / scale and "
            "reaches 1 when the fingertip is on the target")


def test_shaper_runs_on_the_reacher_spec():
    """PRMRewardShaper with the spec critic on the real Reacher env: r' = r + gamma * Phi(s') - Phi(s)."""
    from prm_critic.wrappers import PRMRewardShaper

    env = make_env("Reacher-v5")
    critic = SubgoalCritic("Reacher-v5", env)
    shaped = PRMRewardShaper(env, critic, gamma=0.99, info_subgoals=True)
    obs, _ = shaped.reset(seed=0)
    held, phis = [], []
    for _ in range(50):
        phi = float(critic.score(critic.layout.flatten(obs)[None]).progress[0])
        obs, r, term, trunc, info = shaped.step(reacher_ik_action(obs))
        phi_next = float(critic.score(critic.layout.flatten(obs)[None]).progress[0])
        assert r == pytest.approx(info["prm_original_reward"] + 0.99 * phi_next - phi, abs=1e-6)
        assert info["prm_shaping"] == pytest.approx(0.99 * phi_next - phi, abs=1e-6)
        phis.append((info["prm_phi"], info["prm_next_phi"]))
        held.append(info["prm_subgoals"]["fingertip_at_target"])
    shaped.close()
    assert held[-1] and not held[0]
    assert phis[0][0] < 0.9 and phis[-1][1] == 1.0  # the potential rose to 1 along the reach
    correct(3, "reward shaper on the Reacher-v5 spec with a constant subgoal point",
            "shaped reward = r + gamma * Phi(s') - Phi(s) on every step; the subgoal flag turns on at the target")


def test_offset_expressions_compute_the_same_subgoal(tmp_path):
    """``a = fingertip = obs[8:10] + obs[4:6]``, ``b = target``, ``b = [0, 0]`` and a scaled form give
    the same distances as ``b = 0`` on real Reacher states."""
    env = make_env("Reacher-v5")
    ref = SubgoalCritic("Reacher-v5", env)
    forms = [("obs[8:10] + obs[4:6]", "obs[4:6]"), ("obs[8:10]", [0, 0]),
             ("2 * obs[8:10] - [0.1, -0.2]", "-(obs[4:6] - obs[4:6]) - [0.1, -0.2]"),
             ("(obs[8:10] + [0.05, 0.05]) / 0.5", "[0.1, 0.1]")]
    obs, _ = env.reset(seed=4)
    xs = []
    for _ in range(30):
        xs.append(ref.layout.flatten(obs))
        obs, *_ = env.step(reacher_ik_action(obs))
    x = np.stack(xs).astype(np.float64)
    d_ref = ref.evaluator.distances(x)[:, 0]
    for i, (a, b) in enumerate(forms):
        spec = load_spec(_reacher_spec(tmp_path, a, b, name=f"r{i}.toml"))
        c = SubgoalCritic(spec, env)
        factor = 2.0 if i in (2, 3) else 1.0
        np.testing.assert_allclose(c.evaluator.distances(x)[:, 0], factor * d_ref, rtol=1e-9, atol=1e-12,
                                   err_msg=f"a={a!r} b={b!r}")
        assert load_spec(spec.to_dict()) == spec  # the canonical text reads back to the same expression
    env.close()
    correct(3, "constants and offsets in a/b (obs[8:10] + obs[4:6], [0, 0], 2 * x - c, (x + c) / 0.5)",
            "the same subgoal distances as b = 0 on real Reacher states; to_dict round-trips")


def test_width_mismatch_between_a_and_b_names_file_subgoal_and_texts(tmp_path):
    p = _reacher_spec(tmp_path, "obs[8:10]", [0.1, 0, 0])
    with loud(3, "a = obs[8:10] (width 2), b = [0.1, 0, 0] (width 3)", SpecError,
              match=r"reach\.toml\.subgoals\[0\]\.b \(subgoal 'fingertip_at_target'\): '\[0\.1, 0, 0\]' has width 3 "
                    r"but a = 'obs\[8:10\]' has width 2; expected the same width"):
        load_spec(p)
    # a width that is only known once the env's observation size is: reported when the critic is built
    env = make_env("Reacher-v5")
    spec = load_spec(_reacher_spec(tmp_path, "obs", [0, 0], name="late.toml"))
    with loud(3, "a = obs (width 10 on Reacher), b = [0, 0]", SpecError,
              match=r"late\.toml\.subgoals\[0\]\.b \(subgoal 'fingertip_at_target'\): '\[0, 0\]' has width 2 "
                    r"but a = 'obs' has width 10"):
        SubgoalCritic(spec, env)
    env.close()


def test_slice_past_the_end_of_the_observation_is_an_error(tmp_path):
    """``obs[8:12]`` on a 10-wide observation used to be clipped to ``obs[8:10]`` without a word."""
    env = make_env("Reacher-v5")
    spec = load_spec(_reacher_spec(tmp_path, "obs[8:12]", "obs[4:8]"))
    with loud(3, "a = obs[8:12] on Reacher's 10-wide observation", SpecError,
              match=r"reach\.toml\.subgoals\[0\]\.a \(subgoal 'fingertip_at_target'\): in 'obs\[8:12\]': obs\[8:12\] "
                    r"reaches outside 'obs', which has size 10; expected indices in \[-10, 10\]"):
        SubgoalCritic(spec, env)
    env.close()


@pytest.mark.parametrize("a, b, fault, match", [
    ("obs[8:10] +", 0, "a expression cut short", r"\.a \(subgoal 'fingertip_at_target'\): cannot read 'obs\[8:10\] \+': "
     r"expected a key such as 'obs\[0:3\]', a number, a list of numbers or '\(' at position 11, found the end"),
    ("obs[8:10] * obs[4:6]", 0, "product of two observation terms",
     r"\.a \(subgoal 'fingertip_at_target'\): cannot read 'obs\[8:10\] \* obs\[4:6\]': '\*' at position 10 multiplies "
     r"two observation terms; expected a constant on one side"),
    ("obs[8:10] / 0", 0, "division by zero", r"cannot read 'obs\[8:10\] / 0': '/' at position 10 divides by zero"),
    ("obs[8:10] ** 2", 0, "unsupported operator **", r"cannot read 'obs\[8:10\] \*\* 2': expected a key such as"),
    ("__import__('os')", 0, "code instead of an expression",
     r"cannot read \"__import__\('os'\)\": unexpected character \"'\" at position 11"),
    ("obs[8:10]", "obs[4:6] + [1, 2, 3]", "offset of another width inside b",
     r"\.b \(subgoal 'fingertip_at_target'\): in 'obs\[4:6\] \+ \[1, 2, 3\]': 'obs\[4:6\]' \(width 2\) \+ '\[1, 2, 3\]' "
     r"\(width 3\): expected operands of the same width"),
    ("obs[8:10]", True, "a boolean as b", r"\.b \(subgoal 'fingertip_at_target'\): expected an expression such as "
     r"'observation\[0:3\]', a number or a list of numbers, got True"),
    ("obs[8:10]", "[]", "an empty list as b", r"cannot read '\[\]': expected a number at position 1, found '\]'"),
    (0, [0, 0], "a and b both constants", r"a = '0', b = '\[0, 0\]' are all constants; expected a or b to read the observation"),
    ("ob[8:10]", 0, "misspelled key", r"\.a \(subgoal 'fingertip_at_target'\): in 'ob\[8:10\]': key 'ob' is not in "
     r"critic_input \['obs'\]; did you mean 'obs'\?"),
    ("obs[10:8]", 0, "empty slice", r"in 'obs\[10:8\]': obs\[10:8\] selects nothing; expected start < stop"),
])
def test_expression_errors_name_file_subgoal_field_and_text(tmp_path, a, b, fault, match):
    p = _reacher_spec(tmp_path, a, b)
    with loud(3, fault, SpecError, match=r"reach\.toml\.subgoals\[0\].*" + match):
        load_spec(p)


def _leaf(width):
    key = st.integers(0, 10 - width).map(lambda i: (f"obs[{i}:{i + width}]", lambda x, i=i: x[:, i:i + width]))
    vec = st.lists(st.floats(-3, 3, allow_nan=False).map(lambda v: round(v, 3)), min_size=width, max_size=width).map(
        lambda vs: ("[" + ", ".join(repr(v) for v in vs) + "]", lambda x, vs=vs: np.asarray(vs)))
    scal = st.floats(-3, 3, allow_nan=False).map(lambda v: round(v, 3)).map(lambda v: (repr(v), lambda x, v=v: v))
    return st.one_of(key, key, vec, scal)


def _tree(width):
    def extend(children):
        def binary(op):
            f = {"+": np.add, "-": np.subtract}[op]
            return st.tuples(children, children).map(
                lambda p: (f"({p[0][0]} {op} {p[1][0]})", lambda x, p=p: f(p[0][1](x), p[1][1](x))))

        const = st.sampled_from([0.5, -2.0, 3.0])
        mul = st.tuples(const, children).map(lambda p: (f"{p[0]} * ({p[1][0]})", lambda x, p=p: p[0] * p[1][1](x)))
        div = st.tuples(children, const).map(lambda p: (f"({p[0][0]}) / {p[1]}", lambda x, p=p: p[0][1](x) / p[1]))
        neg = children.map(lambda c: (f"-({c[0]})", lambda x, c=c: -c[1](x)))
        return st.one_of(binary("+"), binary("-"), mul, div, neg)

    return st.recursive(_leaf(width), extend, max_leaves=6)


@pytest.mark.fault_outcome(3, 'any spec expression of keys, constants, +, -, * and / (property)',
                           'evaluates like numpy; constant-only subgoals refused')
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(width=st.integers(1, 3), data=st.data())
def test_property_parsed_expressions_evaluate_like_numpy(width, data):
    """Random affine expressions over a 10-wide observation: the parsed expression evaluates to what the
    same formula gives in numpy, and its canonical text reads back to the same expression."""
    from prm_critic.robotics.spec import Expr

    text_a, f_a = data.draw(_tree(width))
    text_b, f_b = data.draw(_tree(width))
    spec_dict = {"task": {"name": "t", "env_id": "Reacher-v5", "critic_input": ["obs"], "success": {"source": "subgoals"}},
                 "subgoals": [{"name": "s", "a": text_a, "b": text_b, "threshold": 0.1}]}
    ea, eb = Expr.parse(text_a, "a"), Expr.parse(text_b, "b")
    assert Expr.parse(str(ea), "a") == ea and Expr.parse(str(eb), "b") == eb
    if not (ea.refs or eb.refs):
        with pytest.raises(SpecError, match="are all constants"):
            load_spec(spec_dict)
        return
    spec = load_spec(spec_dict)
    ev = SubgoalEvaluator(spec, CriticInputLayout(["obs"], {"obs": 10}))
    x = np.random.default_rng(0).uniform(-1, 1, (7, 10))
    want_a = np.broadcast_to(f_a(x), (7, width))
    want_b = np.broadcast_to(f_b(x), (7, width))
    np.testing.assert_allclose(ev.point(x, 0, "a"), want_a, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ev.distances(x)[:, 0], np.linalg.norm(want_a - want_b, axis=1), rtol=1e-12, atol=1e-12)


# --- training budgets (train_policy / train-policy) ---------------------------------------------

PPO_SMALL = dict(n_epochs=1, policy_kwargs=dict(net_arch=[8]))


def test_ppo_trains_the_budget_it_was_given(tmp_path):
    """``total_steps=256`` with PPO (default n_steps 2048) used to train 2048 steps: n_steps is now
    fitted to the budget, and the run's saved metadata records the steps trained."""
    import warnings

    from prm_critic.sb3 import train_policy

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no rounding to state
        model = train_policy("Reacher-v5", algo="ppo", total_steps=256, seed=0, log_dir=tmp_path,
                             algo_kwargs=PPO_SMALL)
    assert model.num_timesteps == 256 and model.n_steps == 256 and model.batch_size == 64
    meta = json.loads((tmp_path / "policy.json").read_text())
    assert meta["extra"]["trained_steps"] == 256 and meta["extra"]["total_steps"] == 256
    assert "budget_note" not in meta["extra"]
    # n_envs > 1: rollouts of 2 * 150 = 300 steps
    model = train_policy("Reacher-v5", algo="ppo", total_steps=300, n_envs=2, seed=0, algo_kwargs=PPO_SMALL)
    assert model.num_timesteps == 300 and model.n_steps == 150
    correct(18, "PPO with total_steps=256 below its default rollout of 2048",
            "n_steps fitted to 256: 256 env steps trained, recorded as trained_steps in the saved metadata")


def test_ppo_budget_it_cannot_meet_is_stated(tmp_path):
    from prm_critic.sb3 import train_policy

    msg = (r"total_steps=300: PPO trains in whole rollouts of n_steps \* n_envs = 64 \* 1 = 64 env steps, so this "
           r"run trains 320 env steps \(20 more than asked\); make total_steps a multiple of 64 or set algo_kwargs n_steps")
    with pytest.warns(UserWarning, match=msg):
        model = train_policy("Reacher-v5", algo="ppo", total_steps=300, seed=0, log_dir=tmp_path,
                             algo_kwargs=dict(PPO_SMALL, n_steps=64))
    assert model.num_timesteps == 320
    extra = json.loads((tmp_path / "policy.json").read_text())["extra"]
    assert extra["trained_steps"] == 320 and extra["total_steps"] == 300
    assert re.search(msg, extra["budget_note"])
    correct(18, "PPO with n_steps=64 set and total_steps=300 (not a multiple)",
            "a UserWarning and the saved metadata state that 320 env steps are trained (20 more than asked)")


def test_cli_ppo_steps_256_trains_256(tmp_path, capsys):
    from prm_critic.cli import main

    out = tmp_path / "run"
    rc = main(["train-policy", "--task", "Reacher-v5", "--algo", "ppo", "--steps", "256", "--seed", "0",
               "--out", str(out), "--algo-kwargs", json.dumps(PPO_SMALL)])
    text = capsys.readouterr().out
    assert rc == 0 and "for 256 steps;" in text, text
    assert json.loads((out / "policy.json").read_text())["extra"]["trained_steps"] == 256
    correct(18, "prm-critic train-policy --algo ppo --steps 256", "trains and reports 256 env steps")


def test_off_policy_budget_below_learning_starts_is_refused():
    from prm_critic.sb3 import train_policy

    with loud(18, "SAC with total_steps=50 and the default learning_starts=100", ValueError,
              match=r"total_steps: 50 env steps do not get past learning_starts=100 of SAC: no gradient step would "
                    r"run and the saved policy would be the untrained one; expected total_steps > 100"):
        train_policy("Reacher-v5", algo="sac", total_steps=50, seed=0)


def test_off_policy_rounding_with_several_envs_is_stated(tmp_path):
    from prm_critic.sb3 import train_policy

    with pytest.warns(UserWarning, match=r"total_steps=100: SAC trains in steps of train_freq \* n_envs = 3 env steps, "
                                         r"so this run trains 102 env steps \(2 more than asked\)"):
        model = train_policy("Reacher-v5", algo="sac", total_steps=100, n_envs=3, seed=0, log_dir=tmp_path,
                             algo_kwargs=dict(learning_starts=60, batch_size=16, policy_kwargs=dict(net_arch=[8])))
    assert model.num_timesteps == 102
    assert json.loads((tmp_path / "policy.json").read_text())["extra"]["trained_steps"] == 102
    correct(18, "SAC with n_envs=3 and total_steps=100", "a UserWarning and the saved metadata state 102 env steps")


@pytest.mark.fault_outcome(18, 'any PPO budget and number of envs without n_steps (property)',
                           'rollouts add up to the budget exactly, or nothing is fitted and the rounding is stated')
@settings(max_examples=200, deadline=None)
@given(total=st.integers(2, 200_000), n_envs=st.integers(1, 16))
def test_property_fitted_rollouts_add_up_to_the_budget(total, n_envs):
    """Without n_steps, PPO's rollouts add up to the budget exactly, or nothing is fitted (and the run
    states the rounding, see above); the fitted rollout stays within [512, 2048] per env when it is
    more than one rollout."""
    from prm_critic.sb3.train import fit_rollout

    kw: dict = {}
    fitted = fit_rollout(kw, "ppo", total, n_envs)
    if fitted:
        rollout = kw["n_steps"] * n_envs
        assert total % rollout == 0 and rollout >= 2
        assert kw["n_steps"] <= 2048 and (total // rollout == 1 or kw["n_steps"] >= 512)
        assert kw.get("batch_size", 64) <= max(rollout, 2)
    else:
        assert kw == {}
        assert total % n_envs or all((total // n_envs) % d for d in range(512, 2049)) or total // n_envs < 2
