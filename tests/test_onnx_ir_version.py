"""The IR version of exported critics: ``export_state_critic(..., ir_version=9)`` / ``--ir-version 9``.

Torch's exporter writes IR 10, which onnxruntime before 1.18 refuses; opset 18 is valid from IR 8, so
an export may ask for an older IR version (IR 9: onnxruntime 1.16 and 1.17). The file then has that IR
version, passes the onnx checker, is sealed with it (the content hash verifies), records it in the
metadata and scores exactly as the default export in the installed onnxruntime. A version below what
the opset needs is one clear error, and no file is written.

Real parts only: a real StateCriticNet, the real torch exporter, the onnx checker, onnxruntime.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("torch")

import onnx  # noqa: E402
import torch  # noqa: E402

from faults import loud  # noqa: E402
from prm_critic.cli import main as cli_main  # noqa: E402
from prm_critic.models.checkpoint import save_state_critic  # noqa: E402
from prm_critic.models.state_critic import StateCriticNet  # noqa: E402
from prm_critic.onnx import OnnxCritic, OnnxExportError, export_state_critic, read_onnx_metadata  # noqa: E402
from prm_critic.onnx.export import min_ir_version  # noqa: E402

OBS_DIM = 9


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """One small critic with a fitted normaliser, exported with the exporter's IR version and with IR 9."""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((64, OBS_DIM)) * 3 + 1).astype(np.float32)
    torch.manual_seed(0)
    net = StateCriticNet(OBS_DIM, hidden=(16, 16))
    net.set_normalization(x.mean(0), x.std(0))
    with torch.no_grad():
        net.head.weight.mul_(4.0)
    d = tmp_path_factory.mktemp("ir")
    ckpt = save_state_critic(d / "critic", net, {"task": None, "label_family": "mc"})
    return {
        "net": net, "x": x, "ckpt": ckpt, "dir": d,
        "default": export_state_critic(ckpt, d / "default.onnx"),
        "ir9": export_state_critic(ckpt, d / "ir9.onnx", ir_version=9),
        "ir8_b1": export_state_critic(net, d / "ir8.b1.onnx", batch=1, ir_version=8),
    }


def test_the_file_has_the_asked_ir_version_and_records_it(exported):
    assert min_ir_version(18) == 8 and min_ir_version(17) == 8
    default = onnx.load(str(exported["default"]))
    assert read_onnx_metadata(exported["default"])["ir_version"] == default.ir_version >= 8
    for key, ir in (("ir9", 9), ("ir8_b1", 8)):
        m = onnx.load(str(exported[key]))
        assert m.ir_version == ir and read_onnx_metadata(exported[key])["ir_version"] == ir
        onnx.checker.check_model(m, full_check=True)
        assert {o.domain: o.version for o in m.opset_import}[""] == 18
        # IR 9 has no metadata on nodes or graphs: the exporter's name scopes are gone, the model's stay
        assert not any(n.metadata_props for n in m.graph.node) and not m.graph.metadata_props
        assert {p.key for p in m.metadata_props} >= {"prm_critic.format", "prm_critic.sha256", "ir_version"}
        # the same graph: nodes and weights as the default export
        assert [n.op_type for n in m.graph.node] == [n.op_type for n in default.graph.node]
        assert [onnx.numpy_helper.to_array(t).tolist() for t in m.graph.initializer] == \
               [onnx.numpy_helper.to_array(t).tolist() for t in default.graph.initializer]


def test_it_scores_the_same_in_the_installed_onnxruntime(exported):
    x = np.concatenate([exported["x"], np.random.default_rng(1).standard_normal((16, OBS_DIM)).astype(np.float32)])
    ref = OnnxCritic(exported["default"], provider="cpu").score(x)  # loads verified: the content hash holds
    got = OnnxCritic(exported["ir9"], provider="cpu").score(x)
    np.testing.assert_array_equal(got.progress, ref.progress)
    np.testing.assert_array_equal(got.success, ref.success)
    with torch.no_grad():
        t = exported["net"](torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got.progress, t[:, 0], rtol=1e-4, atol=1e-5)
    assert ref.progress.std() > 1e-3  # the comparison compares something
    b1 = OnnxCritic(exported["ir8_b1"], provider="cpu")
    for row in x[:5]:
        p, s = b1.score_one(row)
        i = int(np.flatnonzero((x == row).all(1))[0])
        assert (p, s) == (pytest.approx(float(ref.progress[i]), rel=1e-6), pytest.approx(float(ref.success[i]), rel=1e-6))


@pytest.mark.fault
def test_an_ir_version_below_the_opsets_is_refused(exported, tmp_path):
    net = exported["net"]
    with loud(39, "an ONNX export asks for an IR version below what its opset needs", OnnxExportError,
              match=r"^ir_version: opset 18 needs IR version >= 8; expected an int in \[8, \d+\] or None "
                    r"\(the exporter's\), got 7$"):
        export_state_critic(net, tmp_path / "a.onnx", ir_version=7)
    with pytest.raises(OnnxExportError, match=r"ir_version: opset 18 needs IR version >= 8; .* got True"):
        export_state_critic(net, tmp_path / "a.onnx", ir_version=True)
    with pytest.raises(OnnxExportError, match=r"ir_version: .* got 99$"):
        export_state_critic(net, tmp_path / "a.onnx", ir_version=99)
    assert not list(tmp_path.glob("*.onnx"))


def test_cli_ir_version(exported, tmp_path, capsys):
    out = tmp_path / "cli.onnx"
    rc = cli_main(["export", "--checkpoint", str(exported["ckpt"]), "--out", str(out), "--ir-version", "9", "--quiet"])
    assert rc == 0 and onnx.load(str(out)).ir_version == 9
    assert "ir_version=9" in capsys.readouterr().out
    rc = cli_main(["export", "--checkpoint", str(exported["ckpt"]), "--out", str(tmp_path / "x.onnx"),
                   "--ir-version", "7"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "ir_version: opset 18 needs IR version >= 8" in err[0]
    assert not (tmp_path / "x.onnx").exists()
    rc = cli_main(["export", "--reseal", str(out), "--ir-version", "9"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err == [err[0]] and "--ir-version: not used with --reseal" in err[0]
