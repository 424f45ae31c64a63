"""OnnxCritic: real onnxruntime sessions on exported critics; clear errors for bad files, envs, inputs
and providers; GPU tests skip cleanly without CUDA."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("gymnasium_robotics")

import onnx  # noqa: E402
import torch  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

import prm_critic.onnx.runtime as rt  # noqa: E402
from prm_critic.critic import check_critic  # noqa: E402
from prm_critic.models.state_critic import StateCriticNet  # noqa: E402
from prm_critic.onnx import OnnxCritic, OnnxModelError, export_state_critic, installed_runtimes  # noqa: E402
from prm_critic.robotics.make import CriticInputLayout, make_env  # noqa: E402
from prm_critic.robotics.spec import load_spec  # noqa: E402

HAS_CUDA = "CUDAExecutionProvider" in ort.get_available_providers()
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="CUDAExecutionProvider not available in this onnxruntime")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("rt")
    spec = load_spec("FetchPush-v4")
    env = make_env(spec)
    layout = CriticInputLayout.from_space(spec, env.observation_space)
    env.close()
    torch.manual_seed(3)
    net = StateCriticNet(31, hidden=(32, 32))
    with torch.no_grad():
        net.head.weight.mul_(5.0)
    out = {
        "net": net,
        "layout": layout,
        "push": export_state_critic(net, d / "push.onnx", task="FetchPush-v4", layout=layout),
        "push_b1": export_state_critic(net, d / "push.b1.onnx", batch=1, task="FetchPush-v4", layout=layout),
        # no task: only the observation layout is checked
        "anon": export_state_critic(net, d / "anon.onnx", layout=layout),
        "box20": export_state_critic(StateCriticNet(20, hidden=(8,)), d / "box20.onnx"),
        "dir": d,
    }
    return out


def _ref(net, x):
    with torch.no_grad():
        return net(torch.from_numpy(np.asarray(x, np.float32))).numpy()


def test_scores_match_torch_all_paths(models):
    net = models["net"]
    rng = np.random.default_rng(0)
    for key in ("push", "push_b1"):
        for io_binding in (True, False):
            c = OnnxCritic(models[key], provider="cpu", io_binding=io_binding, allow_spinning=False)
            assert c.provider == "CPUExecutionProvider" and c.providers[-1] == "CPUExecutionProvider"
            for b in (1, 16, 16, 64):  # the repeated size reuses the cached binding with new data
                x = rng.standard_normal((b, 31)).astype(np.float32)
                s = c.score(x)
                ref = _ref(net, x)
                np.testing.assert_allclose(s.progress, ref[:, 0], rtol=1e-4, atol=1e-5)
                np.testing.assert_allclose(s.success, ref[:, 1], rtol=1e-4, atol=1e-5)
                assert c.score_one(x[0]) == pytest.approx(tuple(ref[0]), rel=1e-4, abs=1e-5)
            assert len(c.score(np.zeros((0, 31)))) == 0
    c = OnnxCritic(models["push"], provider="auto", intra_op_threads=0, inter_op_threads=0)
    check_critic(c, rng.standard_normal((6, 31)).astype(np.float32))
    # float64 and int inputs are accepted and converted
    assert c.score_one(np.arange(31, dtype=np.int64)) == pytest.approx(tuple(_ref(net, np.arange(31)[None])[0]), rel=1e-4)


def test_corrupt_files_name_the_path(models, tmp_path):
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x00not an onnx model\xff" * 10)
    with pytest.raises(OnnxModelError, match=r"path: '.*garbage.onnx' is corrupt or not an ONNX model"):
        OnnxCritic(garbage)
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(models["push"].read_bytes()[:3000])
    with pytest.raises(OnnxModelError, match=r"path: '.*truncated.onnx' is corrupt or not an ONNX model"):
        OnnxCritic(truncated)
    with pytest.raises(FileNotFoundError, match=r"path: '.*absent.onnx' does not exist"):
        OnnxCritic(tmp_path / "absent.onnx")


def test_foreign_onnx_model_is_rejected(tmp_path):
    """A valid ONNX file that was not exported by prm-critic (no metadata) is refused clearly."""
    inp = helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["B", 31])
    out = helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["B", 31])
    graph = helper.make_graph([helper.make_node("Sigmoid", ["obs"], ["scores"])], "g", [inp], [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    p = tmp_path / "foreign.onnx"
    onnx.save(model, str(p))
    with pytest.raises(OnnxModelError, match=r"is an ONNX model but not an exported prm-critic critic .*'prm_critic.format' is None"):
        OnnxCritic(p)


def test_env_checks(models):
    push = make_env("FetchPush-v4")
    reach = make_env("FetchReach-v4")
    pusher = make_env("Pusher-v5")
    try:
        OnnxCritic(models["push"], env=push)  # the right env passes
        OnnxCritic(models["anon"]).check_env(push)
        # a model for another task
        with pytest.raises(OnnxModelError, match=r"env: the critic '.*push.onnx' was exported for task 'FetchPush-v4' \(env id 'FetchPush-v4'\), but the env is 'FetchReach-v4'"):
            OnnxCritic(models["push"], env=reach)
        # a wrong observation size (no task stored, the layout catches it)
        with pytest.raises(OnnxModelError, match=r"env: observation 'observation' has size 10, but the critic '.*anon.onnx' expects 25"):
            OnnxCritic(models["anon"]).check_env(reach)
        with pytest.raises(OnnxModelError, match=r"env: observation size 23 \(shape \(23,\)\) does not match the critic's obs_dim 20"):
            OnnxCritic(models["box20"], env=pusher)
        with pytest.raises(OnnxModelError, match=r"exported without a layout"):
            OnnxCritic(models["box20"]).check_env(push)
    finally:
        for e in (push, reach, pusher):
            e.close()


def test_input_validation(models):
    c = OnnxCritic(models["push"], provider="cpu")
    x = np.zeros((2, 31), np.float32)
    x[1, 4] = np.nan
    with pytest.raises(ValueError, match=r"steps: expected finite values, got nan at index \(1, 4\)"):
        c.score(x)
    with pytest.raises(ValueError, match=r"steps: expected shape \(B, 31\), got shape \(2, 30\)"):
        c.score(np.zeros((2, 30)))
    with pytest.raises(ValueError, match=r"x: expected shape \(31,\), got shape \(1, 31\)"):
        c.score_one(np.zeros((1, 31)))
    v = np.zeros(31)
    v[7] = np.inf
    with pytest.raises(ValueError, match=r"x: expected finite values, got inf at index 7"):
        c.score_one(v)
    with pytest.raises(TypeError, match=r"x: expected a real-valued numeric array of shape \(31,\), got dtype <U1"):
        c.score_one(np.array(["a"] * 31))
    # extreme but finite inputs are accepted; a lone -inf or nan anywhere is not
    big = np.full(31, 1e30, np.float32)
    big[::2] *= -1
    assert all(np.isfinite(c.score_one(big)))
    for i in (0, 30):
        for bad in (-np.inf, np.nan):
            v = np.ones(31)
            v[i] = bad
            with pytest.raises(ValueError, match=rf"x: expected finite values, got {bad} at index {i}"):
                c.score_one(v)
    # the failing calls left the buffers usable
    assert c.score_one(np.zeros(31)) == pytest.approx(tuple(_ref(models["net"], np.zeros((1, 31)))[0]), rel=1e-4)


def test_constructor_arguments(models):
    p = models["push"]
    with pytest.raises(ValueError, match=r"provider: expected one of 'auto', 'cpu', 'cuda', 'tensorrt', got 'gpu'"):
        OnnxCritic(p, provider="gpu")
    with pytest.raises(ValueError, match=r"intra_op_threads: expected an int >= 0 .*got -1"):
        OnnxCritic(p, intra_op_threads=-1)
    with pytest.raises(TypeError, match=r"strict: expected True or False, got 'yes'$"):
        OnnxCritic(p, strict="yes")
    with pytest.raises(ValueError, match=r"cuda_graph: needs provider='cuda'"):
        OnnxCritic(p, provider="cpu", cuda_graph=True)
    with pytest.raises(ValueError, match=r"cuda_graph: needs io_binding=True"):
        OnnxCritic(p, provider="cuda", cuda_graph=True, io_binding=False)


@pytest.mark.skipif(HAS_CUDA, reason="checks the CPU-only behaviour")
@pytest.mark.parametrize("provider", ["cuda", "tensorrt"])
def test_strict_gpu_request_on_cpu_machine_errors(models, provider):
    with pytest.raises(OnnxModelError, match=rf"provider='{provider}': \w+ExecutionProvider is not available .*strict=True: not falling back to CPU"):
        OnnxCritic(models["push"], provider=provider, strict=True)
    # non-strict: warns and runs on CPU, and says so
    with pytest.warns(RuntimeWarning, match=r"falling back to CPUExecutionProvider"):
        c = OnnxCritic(models["push"], provider=provider)
    assert c.provider == "CPUExecutionProvider"
    assert OnnxCritic(models["push"], provider="auto").provider == "CPUExecutionProvider"


def test_preload_dlls_called_for_cuda_requests(models, monkeypatch):
    calls = []
    monkeypatch.setattr(ort, "preload_dlls", lambda *a, **k: calls.append(1), raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        OnnxCritic(models["push"], provider="cpu")
        assert calls == []
        OnnxCritic(models["push"], provider="cuda")
    assert calls == [1]


def test_double_install_warning(models, monkeypatch):
    assert "onnxruntime" in installed_runtimes() or "onnxruntime-gpu" in installed_runtimes()
    monkeypatch.setattr(rt, "_WARNED_DISTS", False)
    monkeypatch.setattr(rt, "installed_runtimes", lambda: ["onnxruntime", "onnxruntime-gpu"])
    with pytest.warns(RuntimeWarning, match=r"both 'onnxruntime' and 'onnxruntime-gpu' are installed"):
        OnnxCritic(models["push"], provider="cpu")
    monkeypatch.setattr(rt, "_WARNED_DISTS", False)
    monkeypatch.setattr(rt, "installed_runtimes", lambda: ["onnxruntime"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        OnnxCritic(models["push"], provider="cpu")


@pytest.mark.gpu
@needs_cuda
def test_cuda_strict_parity(models):
    c = OnnxCritic(models["push"], provider="cuda", strict=True)
    assert c.provider == "CUDAExecutionProvider"
    x = np.random.default_rng(0).standard_normal((64, 31)).astype(np.float32)
    np.testing.assert_allclose(c.score(x).progress, _ref(models["net"], x)[:, 0], rtol=1e-3, atol=1e-4)


@pytest.mark.gpu
@needs_cuda
def test_cuda_graph_batch1_parity(models):
    c = OnnxCritic(models["push_b1"], provider="cuda", strict=True, cuda_graph=True)
    rng = np.random.default_rng(1)
    for _ in range(5):  # the captured graph is replayed with new inputs each time
        v = rng.standard_normal(31).astype(np.float32)
        assert c.score_one(v) == pytest.approx(tuple(_ref(models["net"], v[None])[0]), rel=1e-3, abs=1e-4)


def test_batch1_fast_path_still_validates(models):
    c = OnnxCritic(models["push_b1"], provider="cpu")
    x = np.zeros((1, 31))
    x[0, 2] = np.nan
    with pytest.raises(ValueError, match=r"steps: expected finite values, got nan at index \(0, 2\)"):
        c.score(x)
    ok = np.zeros((1, 31))
    assert c.score(ok).progress[0] == pytest.approx(float(_ref(models["net"], ok)[0, 0]), rel=1e-4)


def test_score_rows_is_score_as_one_array(models):
    """score_rows (the vector shapers' path) gives score()'s exact values as a (B, 2) float32 array;
    with check=True it validates like score(), check=False leaves validation to the caller."""
    rng = np.random.default_rng(5)
    for key in ("push", "push_b1"):
        for io_binding in (True, False):
            c = OnnxCritic(models[key], provider="cpu", io_binding=io_binding, allow_spinning=False)
            for b in (0, 1, 3, 16, 16):
                x = rng.standard_normal((b, 31)).astype(np.float32)
                s = c.score(x)
                for check in (True, False):
                    out = c.score_rows(x, check=check)
                    assert out.dtype == np.float32 and out.shape == (b, 2)
                    assert out[:, 0].tobytes() == s.progress.tobytes() and out[:, 1].tobytes() == s.success.tobytes()
                if b:  # a fresh array each call: the caller may keep it
                    first = c.score_rows(x)
                    c.score_rows(x + 1)
                    assert first.tobytes() == c.score_rows(x).tobytes()
    c = OnnxCritic(models["push"], provider="cpu")
    x = np.zeros((2, 31), np.float32)
    x[1, 4] = np.inf
    with pytest.raises(ValueError, match=r"x: expected finite values, got inf at index \(1, 4\)"):
        c.score_rows(x)
    with pytest.raises(ValueError, match=r"x: expected shape \(B, 31\), got shape \(2, 30\)"):
        c.score_rows(np.zeros((2, 30)))
    assert c.score_rows(x, check=False).shape == (2, 2)  # unchecked: no error, the caller validated its rows


def test_runtime_does_not_import_torch(models):
    """A deploy box needs onnxruntime and numpy, not torch."""
    import subprocess
    import sys

    code = ("import sys; import numpy as np; from prm_critic.onnx import OnnxCritic; "
            f"c = OnnxCritic({str(models['push'])!r}, provider='cpu'); c.score_one(np.zeros(31)); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
