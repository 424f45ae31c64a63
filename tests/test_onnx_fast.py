"""NumpyMLPCritic: the exported MLP critic run with numpy gives onnxruntime's scores (within ``ATOL``)
on random MLPs (sizes, depths, activations, normalisers, batch variants) and inputs, refuses any
other graph and any file OnnxCritic refuses, with OnnxCritic's input checks and errors, and drops in
for OnnxCritic in the reward shaper and the pruner. Real torch exporter, real onnx, real onnxruntime."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from prm_critic.models.state_critic import StateCriticNet  # noqa: E402
from prm_critic.onnx import (  # noqa: E402
    NumpyMLPCritic,
    OnnxCritic,
    OnnxModelError,
    UnsupportedGraphError,
    export_state_critic,
    seal_onnx,
)
from prm_critic.onnx.fast import ATOL  # noqa: E402

D = 31


def _net(obs_dim, hidden, activation, *, seed=0, head_scale=1.0, clip=10.0):
    torch.manual_seed(seed)
    net = StateCriticNet(obs_dim, hidden=hidden, activation=activation)
    rng = np.random.default_rng(seed)
    net.set_normalization(rng.normal(0, 2, obs_dim), rng.uniform(0.2, 3.0, obs_dim), obs_clip=clip)
    with torch.no_grad():
        net.head.weight.mul_(head_scale)
    return net


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("fast")
    net = _net(D, (32, 32), "relu", seed=3, head_scale=5.0)
    return {"dir": d, "net": net,
            "push": export_state_critic(net, d / "push.onnx", task="FetchPush-v4", layout=_push_layout()),
            "push_b1": export_state_critic(net, d / "push.b1.onnx", batch=1, task="FetchPush-v4",
                                           layout=_push_layout())}


def _push_layout():
    return {"keys": ["observation", "achieved_goal", "desired_goal"],
            "sizes": {"observation": 25, "achieved_goal": 3, "desired_goal": 3}}


def _assert_same_scores(fast, ref, x):
    """fast == onnxruntime within ATOL on every path, and fast's paths agree with each other."""
    got, want = fast.score_rows(x), ref.score_rows(x)
    assert got.dtype == np.float32 and got.shape == want.shape == (len(x), 2)
    np.testing.assert_allclose(got, want, rtol=0, atol=ATOL)
    s = fast.score(x)
    assert s.progress.tobytes() == got[:, 0].tobytes() and s.success.tobytes() == got[:, 1].tobytes()
    for i, row in enumerate(x):
        one = fast.score_one(row)
        assert type(one) is tuple and all(type(v) is float for v in one)
        assert one == fast.score_one(row, check=False)
        np.testing.assert_allclose(one, ref.score_one(row), rtol=0, atol=ATOL)
        np.testing.assert_allclose(one, got[i], rtol=0, atol=ATOL)  # the batch, row by row
        single = fast.score(row[None])
        assert one == (float(single.progress[0]), float(single.success[0]))  # score(x[None]) exactly


@settings(max_examples=14, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(obs_dim=st.integers(1, 40), hidden=st.lists(st.integers(1, 80), min_size=1, max_size=3),
       activation=st.sampled_from(["relu", "tanh", "elu", "silu"]), batch=st.sampled_from(["dynamic", 1]),
       clip=st.sampled_from([10.0, 2.5, None]), head_scale=st.sampled_from([1.0, 8.0]),
       scale=st.sampled_from([0.1, 3.0, 1e3]), seed=st.integers(0, 2**16))
def test_scores_equal_onnxruntime_on_random_mlps(tmp_path, obs_dim, hidden, activation, batch, clip, head_scale,
                                                 scale, seed):
    """Every input for a critic whose normaliser clips (every critic this version trains); inputs
    within its normaliser's range for one that does not (test_unclipped_critic_far_outside_its_range)."""
    if clip is None:
        scale = min(scale, 3.0)
    net = _net(obs_dim, tuple(hidden), activation, seed=seed, head_scale=head_scale, clip=clip)
    path = export_state_critic(net, tmp_path / f"c{seed}.onnx", batch=batch)
    fast, ref = NumpyMLPCritic(path), OnnxCritic(path, provider="cpu")
    assert fast.sizes == (obs_dim, *hidden, 2) and fast.activations == (activation,) * len(hidden)
    assert fast.batch == ref.batch and fast.meta == ref.meta
    x = (np.random.default_rng(seed).standard_normal((9, obs_dim)) * scale).astype(np.float32)
    _assert_same_scores(fast, ref, x)
    assert fast.score_rows(x[:0]).shape == (0, 2) and len(fast.score(x[:0])) == 0


def _float64_scores(net, x):
    """The exact MLP on float32 inputs: the normaliser in float32 (as both runtimes compute it, one
    IEEE operation each), the layers and the sigmoid in float64."""
    m = {k: v.detach().numpy() for k, v in net.state_dict().items()}
    h = np.clip((x - m["obs_mean"]) / m["obs_std"], -m["obs_clip"], m["obs_clip"]).astype(np.float64)
    acts = {"relu": lambda v: np.maximum(v, 0), "tanh": np.tanh, "elu": lambda v: np.where(v > 0, v, np.expm1(v)),
            "silu": lambda v: v / (1 + np.exp(-v))}
    with np.errstate(over="ignore"):  # exp(-v) = inf for v < -709: the limits 0 and -0.0
        for k in range(len(net.hidden)):
            h = acts[net.activation](h @ m[f"body.{2 * k}.weight"].T.astype(np.float64) + m[f"body.{2 * k}.bias"])
        logits = h @ m["head.weight"].T.astype(np.float64) + m["head.bias"]
        return 1 / (1 + np.exp(-logits))


@pytest.mark.parametrize("activation", ["relu", "silu"])
def test_unclipped_critic_far_outside_its_range(tmp_path, activation):
    """A critic saved before input clipping existed (obs_clip = inf) on inputs a thousand times its
    normaliser's range: hidden values of 1e4 and more, where float32 rounding in either runtime moves the
    scores by up to about 1e-5; the numpy critic stays as close to the exact MLP as onnxruntime does."""
    net = _net(28, (78, 19, 48), activation, seed=5, head_scale=8.0, clip=None)
    path = export_state_critic(net, tmp_path / "unclipped.onnx")
    x = (np.random.default_rng(5).standard_normal((64, 28)) * 1e3).astype(np.float32)
    exact = _float64_scores(net, x)
    fast, ref = NumpyMLPCritic(path), OnnxCritic(path, provider="cpu")
    err_ort = np.abs(ref.score_rows(x) - exact).max()
    for got in (fast.score_rows(x), np.array([fast.score_one(v) for v in x])):
        assert np.abs(got - exact).max() <= 4 * err_ort + 1e-6


def test_the_committed_critic_and_its_student(tmp_path):
    """The FetchPush critics the benchmarks use (256x256 and its distilled 32x32 student)."""
    from pathlib import Path

    from prm_critic.models import load_state_critic

    crit = Path(__file__).resolve().parents[1] / "benchmarks" / "rl" / "critics"
    x = np.random.default_rng(0).standard_normal((32, D)).astype(np.float32)
    for stem, sizes in (("push_mc", (D, 256, 256, 2)), ("push_mc_small", (D, 32, 32, 2))):
        path = export_state_critic(load_state_critic(crit / stem), tmp_path / f"{stem}.b1.onnx", batch=1)
        fast = NumpyMLPCritic(path)
        assert fast.sizes == sizes
        _assert_same_scores(fast, OnnxCritic(path, provider="cpu"), x)


def test_inputs_are_checked_exactly_as_onnx_critic_checks_them(files):
    fast, ref = NumpyMLPCritic(files["push"]), OnnxCritic(files["push"], provider="cpu")

    def outcome(fn, *a, **k):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # numpy's overflow notes on extreme inputs
                return "ok", np.asarray(fn(*a, **k), np.float64)
        except Exception as exc:  # noqa: BLE001 - the type and message are what is compared
            return type(exc).__name__, str(exc)

    nan_at = np.zeros((2, D), np.float32)
    nan_at[1, 4] = np.nan
    big = np.full(D, 1e30, np.float32)
    big[::2] *= -1
    one_rows = [np.zeros((1, D)), np.zeros(D - 1), np.array(["a"] * D), np.zeros(D, dtype=complex), [0.0] * D,
                np.arange(D, dtype=np.int64), np.arange(D, dtype=np.float64) * 1e3, np.ones(D, bool), big,
                np.full(D, np.finfo(np.float32).max), np.full(D, -np.finfo(np.float32).max),
                np.zeros(D, np.float32)[::-1], np.zeros(D).astype(">f4")]
    for i in (0, 7, D - 1):
        for bad in (np.nan, np.inf, -np.inf):
            v = np.ones(D)
            v[i] = bad
            one_rows.append(v)
    for x in one_rows:
        a, b = outcome(fast.score_one, x), outcome(ref.score_one, x)
        assert a[0] == b[0], (x, a, b)
        if a[0] == "ok":
            np.testing.assert_allclose(a[1], b[1], rtol=0, atol=ATOL)
        else:
            assert a[1] == b[1]
    batches = [nan_at, np.zeros((2, D - 1)), np.zeros(D), np.zeros((2, D), dtype=object), [[0.0] * D] * 3,
               np.zeros((0, D)), np.stack([big, -big]), np.arange(3 * D).reshape(3, D)]
    for x in batches:
        for fa, fb in ((fast.score, ref.score), (fast.score_rows, ref.score_rows)):
            a, b = outcome(fa, x), outcome(fb, x)
            assert a[0] == b[0], (x, a, b)
            if a[0] == "ok":
                np.testing.assert_allclose(a[1], b[1], rtol=0, atol=ATOL)
            else:
                assert a[1] == b[1]
    # unchecked (the wrappers validated the row): nan gives nan, inf is clipped by the normaliser, as in onnxruntime
    for bad in (np.nan, np.inf, -np.inf):
        v = np.zeros(D, np.float32)
        v[3] = bad
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            a, b = np.array(fast.score_one(v, check=False)), np.array(ref.score_one(v, check=False))
        assert np.array_equal(np.isnan(a), np.isnan(b))
        np.testing.assert_allclose(a[~np.isnan(a)], b[~np.isnan(b)], rtol=0, atol=ATOL)
    # the failed calls left the buffers usable
    x = np.random.default_rng(2).standard_normal((4, D)).astype(np.float32)
    _assert_same_scores(fast, ref, x)


def _edited(src, dst, edit):
    """``src`` with its graph changed by ``edit(model)`` and sealed again (an export changed on
    purpose, as a graph tool would): OnnxCritic loads it."""
    model = onnx.load(str(src))
    edit(model)
    onnx.checker.check_model(model)
    onnx.save(model, str(dst))
    return seal_onnx(dst)


def _gemm_to_matmul_add(bias_first: bool, drop_clip: bool):
    def edit(model):
        g = model.graph
        nodes = []
        for node in g.node:
            if node.op_type == "Clip" and drop_clip:
                nxt = [n for n in g.node if node.output[0] in n.input]
                for n in nxt:
                    n.input[list(n.input).index(node.output[0])] = node.input[0]
                continue
            if node.op_type != "Gemm":
                nodes.append(node)
                continue
            w = next(t for t in g.initializer if t.name == node.input[1])
            wt = onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(w).T.copy(), w.name + "_t")
            g.initializer.append(wt)
            mm = onnx.helper.make_node("MatMul", [node.input[0], wt.name], [node.output[0] + "_mm"],
                                       name=node.name + "_matmul")
            add_in = [node.input[2], mm.output[0]] if bias_first else [mm.output[0], node.input[2]]
            nodes += [mm, onnx.helper.make_node("Add", add_in, [node.output[0]], name=node.name + "_add")]
        del g.node[:]
        g.node.extend(nodes)
        for name in [t.name for t in g.initializer if not any(t.name in n.input for n in g.node)]:
            g.initializer.remove(next(t for t in g.initializer if t.name == name))

    return edit


@pytest.mark.parametrize("bias_first,drop_clip", [(False, False), (True, True)])
def test_matmul_add_layers_and_a_graph_without_clip_run(files, tmp_path, bias_first, drop_clip):
    path = _edited(files["push"], tmp_path / "mm.onnx", _gemm_to_matmul_add(bias_first, drop_clip))
    ops = [n.op_type for n in onnx.load(str(path)).graph.node]
    assert "Gemm" not in ops and ops.count("MatMul") == 3 and ("Clip" in ops) != drop_clip
    fast = NumpyMLPCritic(path)
    assert fast.sizes == (D, 32, 32, 2)
    x = (np.random.default_rng(4).standard_normal((6, D)) * 20).astype(np.float32)
    _assert_same_scores(fast, OnnxCritic(path, provider="cpu"), x)


def _swap_op(op_from, op_to, **attrs):
    def edit(model):
        node = next(n for n in model.graph.node if n.op_type == op_from)
        node.op_type = op_to
        del node.attribute[:]
        node.attribute.extend(onnx.helper.make_attribute(k, v) for k, v in attrs.items())

    return edit


def _scale_gemm(model):
    node = [n for n in model.graph.node if n.op_type == "Gemm"][1]
    next(a for a in node.attribute if a.name == "alpha").f = 0.5


def _extra_node(model):
    g = model.graph
    i = next(k for k, n in enumerate(g.node) if n.op_type == "Relu")
    relu = g.node[i]
    neg = onnx.helper.make_node("Neg", [relu.output[0]], ["negated"], name="extra_neg")
    for n in g.node:
        if relu.output[0] in n.input:
            n.input[list(n.input).index(relu.output[0])] = "negated"
    g.node.insert(i + 1, neg)


@pytest.mark.parametrize("edit,match", [
    (_swap_op("Relu", "LeakyRelu", alpha=0.01),
     r"node 4 'node_relu' \(LeakyRelu: inputs \['linear'\], outputs \['relu'\]\) is not what NumpyMLPCritic runs: "
     r"expected an activation on 'linear' \(Relu, Tanh, Elu, Sigmoid \+ Mul\) or the final Sigmoid"),
    (_scale_gemm, r"node 5 'node_linear_1' \(Gemm: .*\) is not what NumpyMLPCritic runs: expected a Gemm with "
                  r"alpha = 1, beta = 1 and transA = 0"),
    (_extra_node, r"node 5 'extra_neg' \(Neg: inputs \['relu'\], outputs \['negated'\]\) is not what NumpyMLPCritic "
                  r"runs: expected a linear layer on 'relu' of width 32: Gemm or MatMul \(\+ Add\)"),
    (_swap_op("Sigmoid", "Softmax", axis=1),
     r"node 8 'node_sigmoid' \(Softmax: .*\) is not what NumpyMLPCritic runs: expected an activation on 'linear_2'"),
])
def test_another_graph_is_refused_naming_the_file_and_the_node(files, tmp_path, edit, match):
    path = _edited(files["push"], tmp_path / "other.onnx", edit)
    OnnxCritic(path, provider="cpu").score_one(np.zeros(D))  # a valid critic file: onnxruntime runs it
    with pytest.raises(UnsupportedGraphError, match=r"path: '.*other\.onnx': " + match) as err:
        NumpyMLPCritic(path)
    assert str(err.value).endswith("run this file with OnnxCritic")
    assert isinstance(err.value, OnnxModelError)


def test_an_exported_subgoal_critic_is_refused(tmp_path):
    pytest.importorskip("gymnasium_robotics")
    from prm_critic.onnx import export_subgoal_critic
    from prm_critic.robotics.make import make_env
    from prm_critic.robotics.subgoals import SubgoalCritic

    env = make_env("FetchPush-v4")
    try:
        path = export_subgoal_critic(SubgoalCritic("FetchPush-v4", env), tmp_path / "subgoal.onnx")
    finally:
        env.close()
    with pytest.raises(UnsupportedGraphError, match=r"subgoal\.onnx': node 0 .* is not what NumpyMLPCritic runs: "
                                                    r"expected a linear layer on 'obs' of width 31"):
        NumpyMLPCritic(path)


def test_a_corrupt_or_modified_file_is_refused_as_onnx_critic_refuses_it(files, tmp_path):
    data = files["push"].read_bytes()
    cases = {"garbage.onnx": b"\x00not an onnx model\xff" * 10, "truncated.onnx": data[:3000]}
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0x01  # one bit of the weights
    cases["flipped.onnx"] = bytes(flipped)
    for name, blob in cases.items():
        p = tmp_path / name
        p.write_bytes(blob)
        with pytest.raises(OnnxModelError) as want:
            OnnxCritic(p, provider="cpu")
        with pytest.raises(OnnxModelError) as got:
            NumpyMLPCritic(p)
        assert str(got.value) == str(want.value), name
        assert "corrupt" in str(got.value)
    with pytest.raises(FileNotFoundError, match=r"path: '.*absent.onnx' does not exist"):
        NumpyMLPCritic(tmp_path / "absent.onnx")
    with pytest.raises(TypeError, match=r"allow_unverified: expected True or False"):
        NumpyMLPCritic(files["push"], allow_unverified="yes")


def test_allow_unverified_loads_a_resaved_file_with_the_warning_at_the_caller(files, tmp_path):
    model = onnx.load(str(files["push"]))
    for i, node in enumerate(model.graph.node):
        node.name = f"{node.op_type.lower()}_{i}"
    p = tmp_path / "resaved.onnx"
    onnx.save(model, str(p))
    with pytest.raises(OnnxModelError, match=r"resaved\.onnx' is corrupt or was modified after export"):
        NumpyMLPCritic(p)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fast = NumpyMLPCritic(p, allow_unverified=True)
    [w] = [w for w in caught if "modified after export" in str(w.message)]
    assert w.category is RuntimeWarning and w.filename == __file__  # points at the code that built it
    x = np.random.default_rng(1).standard_normal((5, D)).astype(np.float32)
    np.testing.assert_array_equal(fast.score_rows(x), NumpyMLPCritic(files["push"]).score_rows(x))


def test_metadata_env_checks_and_repr_are_onnx_critics(files):
    pytest.importorskip("gymnasium_robotics")
    from prm_critic.robotics.make import make_env

    fast, ref = NumpyMLPCritic(files["push"]), OnnxCritic(files["push"], provider="cpu")
    a, b = fast.critic_info(), ref.critic_info()
    assert (a.task, a.env_id, a.labels, a.layout.to_dict()) == (b.task, b.env_id, b.labels, b.layout.to_dict())
    assert fast.layout.to_dict() == ref.layout.to_dict() and fast.obs_dim == D and fast.task == "FetchPush-v4"
    push, reach = make_env("FetchPush-v4"), make_env("FetchReach-v4")
    try:
        NumpyMLPCritic(files["push"], env=push)
        with pytest.raises(OnnxModelError) as want:
            OnnxCritic(files["push"], provider="cpu", env=reach)
        with pytest.raises(OnnxModelError) as got:
            NumpyMLPCritic(files["push"], env=reach)
        assert str(got.value) == str(want.value)
    finally:
        push.close()
        reach.close()
    assert repr(fast).startswith("NumpyMLPCritic('") and "sizes=(31, 32, 32, 2)" in repr(fast)


@pytest.mark.parametrize("key", ["push", "push_b1"])
def test_drop_in_for_onnx_critic_in_the_shaper_and_the_pruner(files, key):
    pytest.importorskip("gymnasium_robotics")
    from prm_critic.robotics.make import make_env
    from prm_critic.wrappers import DeadEndPruner, PRMRewardShaper

    def run(critic):
        env = make_env("FetchPush-v4")
        shaped = DeadEndPruner(PRMRewardShaper(env, critic, gamma=0.98), critic, threshold=0.05, patience=3)
        rows = []
        try:
            shaped.reset(seed=0)
            shaped.action_space.seed(0)
            for _ in range(25):
                _, reward, term, trunc, info = shaped.step(shaped.action_space.sample())
                rows.append((reward, info["prm_phi"], info["prm_next_phi"], term, trunc))
                if term or trunc:
                    shaped.reset()
        finally:
            shaped.close()
        return rows

    got = run(NumpyMLPCritic(files[key]))
    want = run(OnnxCritic(files[key], provider="cpu"))
    assert [r[3:] for r in got] == [r[3:] for r in want]  # the pruner decides alike
    np.testing.assert_allclose([r[:3] for r in got], [r[:3] for r in want], rtol=0, atol=3 * ATOL)


def test_drop_in_for_onnx_critic_in_the_vector_shaper(files):
    """One batched call per vector step through score_rows (check=False), terminal rows included."""
    pytest.importorskip("gymnasium_robotics")
    pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.vec_env import DummyVecEnv

    from prm_critic.robotics.make import make_env
    from prm_critic.sb3 import SB3VecPRMRewardShaper

    def run(critic):
        venv = SB3VecPRMRewardShaper(DummyVecEnv([lambda: make_env("FetchPush-v4")] * 3), critic, gamma=0.98)
        rows = []
        try:
            venv.seed(0)
            venv.reset()
            rng = np.random.default_rng(0)
            for _ in range(52):  # crosses the 50-step time limit: terminal observations join the batch
                _, rewards, dones, infos = venv.step(rng.uniform(-1, 1, (3, 4)).astype(np.float32))
                rows += [(r, i["prm_phi"], i["prm_next_phi"]) for r, i in zip(rewards, infos)]
        finally:
            venv.close()
        return np.array(rows)

    np.testing.assert_allclose(run(NumpyMLPCritic(files["push"])), run(OnnxCritic(files["push"], provider="cpu")),
                               rtol=0, atol=3 * ATOL)


def test_needs_neither_onnxruntime_nor_torch(files):
    """The numpy critic imports numpy and onnx (to read the file), not onnxruntime, not torch."""
    code = ("import sys; import numpy as np; from prm_critic.onnx import NumpyMLPCritic; "
            f"c = NumpyMLPCritic({str(files['push'])!r}); c.score_one(np.zeros({D})); c.score(np.zeros((3, {D}))); "
            "print('onnxruntime' in sys.modules, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False False"
