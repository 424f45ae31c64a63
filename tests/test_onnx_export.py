"""ONNX export of the state critic: single file, opset 18, metadata round-trip, parity with torch.

Real parts only: a real StateCriticNet, the real torch exporter, real onnx checker, real onnxruntime
sessions, and critic inputs from a real FetchPush-v4 MuJoCo env.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("gymnasium_robotics")

import onnx  # noqa: E402
import torch  # noqa: E402

from prm_critic.cli import main as cli_main  # noqa: E402
from prm_critic.critic import check_critic  # noqa: E402
from prm_critic.models.checkpoint import save_state_critic  # noqa: E402
from prm_critic.models.state_critic import StateCriticNet, TorchStateCritic  # noqa: E402
from prm_critic.onnx import OnnxCritic, OnnxExportError, export_state_critic, read_onnx_metadata  # noqa: E402
from prm_critic.onnx.export import parity_check  # noqa: E402
from prm_critic.robotics.make import CriticInputLayout, make_env  # noqa: E402
from prm_critic.robotics.spec import load_spec  # noqa: E402

TASK = "FetchPush-v4"


def _fetch_push_inputs(n_steps: int = 60, seed: int = 0):
    """Critic inputs (N, 31) of a real FetchPush-v4 rollout with random actions, and the layout."""
    spec = load_spec(TASK)
    env = make_env(spec)
    layout = CriticInputLayout.from_space(spec, env.observation_space)
    obs, _ = env.reset(seed=seed)
    env.action_space.seed(seed)
    xs = [layout.flatten(obs)]
    for _ in range(n_steps - 1):
        obs, *_ = env.step(env.action_space.sample())
        xs.append(layout.flatten(obs))
    env.close()
    return np.stack(xs).astype(np.float32), layout


@pytest.fixture(scope="module")
def trained_like(tmp_path_factory):
    """A FetchPush-sized critic with a data-fitted normaliser and non-trivial weights, saved as a checkpoint."""
    x, layout = _fetch_push_inputs()
    torch.manual_seed(0)
    net = StateCriticNet(layout.obs_dim, hidden=(64, 64), activation="tanh")
    net.set_normalization(x.mean(0), x.std(0))
    with torch.no_grad():  # make the heads spread over (0, 1) on real data, like a trained critic
        net.head.weight.mul_(4.0)
    spec = load_spec(TASK)
    meta = {"task": TASK, "spec": spec.to_dict(), "layout": layout.to_dict(), "label_family": "mc"}
    d = tmp_path_factory.mktemp("ckpt")
    ckpt = save_state_critic(d / "critic", net, meta)
    out = tmp_path_factory.mktemp("onnx")
    dyn = export_state_critic(ckpt, out / "critic.onnx", parity_inputs=x)
    b1 = export_state_critic(ckpt, out / "critic.b1.onnx", batch=1, parity_inputs=x)
    return {"net": net, "x": x, "layout": layout, "ckpt": ckpt, "dyn": dyn, "b1": b1, "meta": meta, "dir": out}


def _torch_scores(net, x):
    with torch.no_grad():
        return net(torch.from_numpy(x)).numpy()


@pytest.mark.parametrize("variant", ["dyn", "b1"])
def test_parity_real_and_random_inputs(trained_like, variant):
    net = trained_like["net"]
    critic = OnnxCritic(trained_like[variant], provider="cpu")
    rng = np.random.default_rng(1)
    for x in (trained_like["x"], rng.standard_normal((40, net.obs_dim)).astype(np.float32)):
        ref = _torch_scores(net, x)
        got = critic.score(x)
        np.testing.assert_allclose(got.progress, ref[:, 0], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(got.success, ref[:, 1], rtol=1e-4, atol=1e-5)
        # the scores are not constant: the parity check compares something
        assert ref[:, 0].std() > 1e-3
        p, s = critic.score_one(x[3])
        assert p == pytest.approx(float(ref[3, 0]), rel=1e-4, abs=1e-5)
        assert s == pytest.approx(float(ref[3, 1]), rel=1e-4, abs=1e-5)
    check_critic(critic, trained_like["x"][:8])


def test_single_self_contained_file_opset_and_signature(trained_like):
    files = sorted(p.name for p in trained_like["dir"].iterdir())
    assert files == ["critic.b1.onnx", "critic.onnx"]  # no .data sidecar, no temp files left
    for key, batch_dim in (("dyn", None), ("b1", 1)):
        m = onnx.load(str(trained_like[key]))
        onnx.checker.check_model(m, full_check=True)
        assert {o.domain: o.version for o in m.opset_import}[""] == 18
        assert not any(t.data_location == onnx.TensorProto.EXTERNAL for t in m.graph.initializer)
        (inp,), (out,) = m.graph.input, m.graph.output
        assert (inp.name, out.name) == ("obs", "scores")
        assert inp.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
        d0, d1 = inp.type.tensor_type.shape.dim
        assert d1.dim_value == 31
        if batch_dim is None:
            assert d0.dim_param and not d0.dim_value
        else:
            assert d0.dim_value == 1
        # no Python stack traces (file paths of the exporting machine) in the deploy artifact
        assert b'File "' not in trained_like[key].read_bytes()
        # normalisation is inside the graph: the buffers are initializers with the fitted values
        inits = {t.name: onnx.numpy_helper.to_array(t) for t in m.graph.initializer}
        mean = next(v for k, v in inits.items() if "obs_mean" in k)
        np.testing.assert_allclose(mean, trained_like["net"].obs_mean.numpy())


def test_metadata_round_trip(trained_like):
    layout = trained_like["layout"]
    for key, batch in (("dyn", "dynamic"), ("b1", 1)):
        meta = read_onnx_metadata(trained_like[key])
        assert meta["prm_critic.format"] == "prm-critic/state-critic-onnx"
        assert meta["task"] == TASK and meta["env_id"] == TASK
        assert meta["layout"] == layout.to_dict()
        assert CriticInputLayout.from_dict(meta["layout"]).slices == layout.slices
        assert meta["obs_dim"] == 31 and meta["batch"] == batch and meta["opset"] == 18
        assert meta["heads"] == ["progress", "success"]
        assert meta["label_family"] == "mc"
        assert meta["input_name"] == "obs" and meta["output_name"] == "scores"
        assert meta["net"] == trained_like["net"].config()
        assert meta["normalization"]["inside_graph"] is True and meta["normalization"]["identity"] is False
        assert meta["normalization"]["std_min"] == pytest.approx(float(trained_like["net"].obs_std.min()))
        assert meta["exporter"] in ("dynamo", "legacy")
        assert meta["spec"]["task"]["name"] == TASK
        critic = OnnxCritic(trained_like[key], provider="cpu")
        assert critic.meta == meta and critic.task == TASK and critic.batch == batch
        assert critic.layout.to_dict() == layout.to_dict()


def test_export_from_net_and_torch_critic_with_overrides(tmp_path, trained_like):
    net = StateCriticNet(5, hidden=(8,))
    p = export_state_critic(net, tmp_path / "sub" / "tiny.onnx", task="Pusher-v5", extra_meta={"run": 7})
    meta = read_onnx_metadata(p)
    assert meta["task"] == "Pusher-v5" and meta["layout"] is None and meta["extra"] == {"run": 7}
    assert meta["normalization"]["identity"] is True and meta["label_family"] == "unknown"
    tc = TorchStateCritic(trained_like["net"], trained_like["meta"])
    p2 = export_state_critic(tc, tmp_path / "tc.onnx", batch="1", task="MyFetch")
    assert read_onnx_metadata(p2)["task"] == "MyFetch" and read_onnx_metadata(p2)["batch"] == 1


def test_bad_arguments_give_one_clear_error(tmp_path, trained_like):
    net = trained_like["net"]
    with pytest.raises(OnnxExportError, match=r"batch: expected 'dynamic' or 1, got 2"):
        export_state_critic(net, tmp_path / "a.onnx", batch=2)
    with pytest.raises(OnnxExportError, match=r"opset: expected an int in \[17, \d+\] \(default 18\), got 12"):
        export_state_critic(net, tmp_path / "a.onnx", opset=12)
    with pytest.raises(OnnxExportError, match=r"out_path: expected a file name ending in .onnx, got .*a.txt"):
        export_state_critic(net, tmp_path / "a.txt")
    with pytest.raises(OnnxExportError, match=r"layout: its keys \['obs'\] with sizes \{'obs': 23\} add up to 23, but the critic's obs_dim is 31"):
        export_state_critic(net, tmp_path / "a.onnx", layout={"keys": ["obs"], "sizes": {"obs": 23}})
    with pytest.raises(TypeError, match=r"critic_or_checkpoint_path: expected a StateCriticNet.*got int"):
        export_state_critic(3, tmp_path / "a.onnx")
    with pytest.raises(FileNotFoundError, match=r"checkpoint: .*nope.json' does not exist"):
        export_state_critic(tmp_path / "nope", tmp_path / "a.onnx")
    with pytest.raises(ValueError, match=r"parity_inputs: expected shape \(B, 31\)"):
        export_state_critic(net, tmp_path / "a.onnx", parity_inputs=np.zeros((3, 30)))
    assert not list(tmp_path.glob("*.onnx"))


def test_parity_failure_raises(trained_like):
    """The parity check can fail: compare the exported graph with a different net."""
    other = StateCriticNet(31, hidden=(64, 64), activation="tanh")
    other.load_state_dict(trained_like["net"].state_dict())
    with torch.no_grad():
        other.head.bias.add_(1e-3)
    data = trained_like["dyn"].read_bytes()
    x = {"real": trained_like["x"]}
    assert max(parity_check(data, trained_like["net"], x, batch="dynamic").values()) < 1e-5
    with pytest.raises(OnnxExportError, match=r"parity \(real\): onnxruntime and torch disagree at"):
        parity_check(data, other, x, batch="dynamic")


def test_cli_export(tmp_path, trained_like, capsys, monkeypatch):
    out = tmp_path / "cli.b1.onnx"
    rc = cli_main(["export", "--checkpoint", str(trained_like["ckpt"]), "--out", str(out), "--batch", "1"])
    assert rc == 0 and out.is_file()
    text = capsys.readouterr().out
    assert "task='FetchPush-v4'" in text and "batch=1" in text and "parity with torch OK" in text
    assert OnnxCritic(out, provider="cpu").batch == 1
    # default output: beside the checkpoint (<checkpoint stem>.onnx, .b1.onnx for --batch 1), wherever the
    # command runs from; nothing is written into the working directory
    monkeypatch.chdir(tmp_path)
    ckpt = Path(trained_like["ckpt"])
    beside = ckpt.with_suffix("").with_name(ckpt.with_suffix("").name + ".b1.onnx")
    beside.unlink(missing_ok=True)
    assert cli_main(["export", "--checkpoint", str(ckpt), "--batch", "1"]) == 0
    assert beside.is_file() and OnnxCritic(beside, provider="cpu").batch == 1
    assert not (tmp_path / "export").exists() and sorted(p.name for p in tmp_path.glob("*.onnx")) == [out.name]
    beside.unlink()
    capsys.readouterr()
    rc = cli_main(["export", "--checkpoint", str(tmp_path / "missing"), "--out", str(tmp_path / "x.onnx")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "missing.json' does not exist" in err[0]
    rc = cli_main(["export", "--checkpoint", str(trained_like["ckpt"]), "--out", str(tmp_path / "x.onnx"),
                   "--opset", "9"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "opset: expected an int in [17" in err[0]


def test_json_metadata_is_plain_strings(trained_like):
    """Other runtimes read the metadata map directly: every value is a string, JSON ones parse."""
    m = onnx.load(str(trained_like["dyn"]))
    props = {p.key: p.value for p in m.metadata_props}
    assert all(isinstance(v, str) for v in props.values())
    assert json.loads(props["layout"])["obs_dim"] == 31
    assert props["batch"] == "dynamic" and props["obs_dim"] == "31"


def test_legacy_exporter_fallback_when_dynamo_fails(tmp_path, monkeypatch):
    """If the dynamo exporter raises, the legacy exporter is used, a warning says so, and the result
    is still parity-checked and labelled ``exporter=legacy``."""
    real_export = torch.onnx.export

    def dynamo_broken(*args, **kwargs):
        if kwargs.get("dynamo"):
            raise RuntimeError("simulated dynamo failure")
        return real_export(*args, **kwargs)

    monkeypatch.setattr(torch.onnx, "export", dynamo_broken)
    net = StateCriticNet(7, hidden=(16,))
    with pytest.warns(RuntimeWarning, match=r"dynamo ONNX exporter failed \(RuntimeError: simulated dynamo failure\); falling back"):
        p = export_state_critic(net, tmp_path / "legacy.onnx")
    meta = read_onnx_metadata(p)
    assert meta["exporter"] == "legacy" and meta["opset"] == 18
    x = np.random.default_rng(0).standard_normal((9, 7)).astype(np.float32)
    np.testing.assert_allclose(OnnxCritic(p, provider="cpu").score(x).progress, _torch_scores(net, x)[:, 0],
                               rtol=1e-4, atol=1e-5)


def test_export_leaves_the_callers_module_alone(tmp_path):
    net = StateCriticNet(5, hidden=(8,)).train()
    export_state_critic(net, tmp_path / "t.onnx", batch=1)
    assert net.training  # still in training mode, not silently switched to eval
