"""A re-saved ONNX export (a graph optimiser such as onnxsim or onnxslim rewrites the file): loaded
unverified with a warning when asked, re-sealed on purpose with ``seal_onnx`` / ``prm-critic export
--reseal``. Real torch exporter, real ``onnx`` and onnxruntime.

STAND-IN (labelled): onnxsim / onnxslim are not dependencies; the re-save here goes through the
``onnx`` package (nodes renamed, shape annotations dropped, the file serialized again), which
changes the bytes but keeps the computation and the metadata, as those tools do."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from faults import correct, loud
from prm_critic.cli import main as cli_main
from prm_critic.models.state_critic import StateCriticNet

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from prm_critic.onnx import OnnxCritic, OnnxExportError, OnnxModelError, export_state_critic, seal_onnx  # noqa: E402
from prm_critic.onnx._meta import HASH_KEY  # noqa: E402

pytestmark = pytest.mark.fault


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    torch.manual_seed(3)
    net = StateCriticNet(12, hidden=(16, 16))
    return export_state_critic(net, tmp_path_factory.mktemp("reseal") / "critic.onnx", task="FetchPush-v4")


@pytest.fixture(scope="module")
def x():
    return np.random.default_rng(1).standard_normal((8, 12)).astype(np.float32)


def resave(src, dst):
    """STAND-IN for onnxsim / onnxslim: the same computation and metadata, nodes renamed, saved again."""
    model = onnx.load(str(src))
    for i, node in enumerate(model.graph.node):
        node.name = f"{node.op_type.lower()}_{i}"
    del model.graph.value_info[:]
    onnx.checker.check_model(model)
    onnx.save(model, str(dst))
    assert dst.read_bytes() != src.read_bytes()
    return dst


def _stored_hash(path):
    return {p.key: p.value for p in onnx.load(str(path)).metadata_props}[HASH_KEY]


def test_allow_unverified_loads_a_resaved_export_with_a_warning(exported, x, tmp_path):
    resaved = resave(exported, tmp_path / "resaved.onnx")
    with loud(28, "an export re-saved by a graph tool (stand-in: onnx shape inference), loaded without allow_unverified",
              OnnxModelError, match=r"resaved\.onnx' is corrupt or was modified after export.*re-seal it with "
                                    r"`prm-critic export --reseal FILE` \(seal_onnx\) or load it with allow_unverified=True"):
        OnnxCritic(resaved, provider="cpu")
    with pytest.warns(RuntimeWarning, match=r"resaved\.onnx' was modified after export \(content hash [0-9a-f]{64}, "
                                            r"metadata 'prm_critic\.sha256' records [0-9a-f]{64}\); loading it "
                                            r"unverified \(allow_unverified=True\)"):
        c = OnnxCritic(resaved, provider="cpu", allow_unverified=True)
    ref = OnnxCritic(exported, provider="cpu").score(x)
    np.testing.assert_array_equal(c.score(x).progress, ref.progress)
    correct(28, "OnnxCritic(allow_unverified=True) on an export re-saved by a graph tool (stand-in: onnx shape "
                "inference; same graph, other bytes)", "loads with a RuntimeWarning naming both hashes; same scores")


def test_seal_onnx_and_the_cli_reseal_a_resaved_export(exported, x, tmp_path, capsys):
    resaved = resave(exported, tmp_path / "resaved.onnx")
    sealed = seal_onnx(resaved, out=tmp_path / "sealed.onnx")
    assert _stored_hash(sealed) != _stored_hash(exported)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c = OnnxCritic(sealed, provider="cpu")  # verified: no warning, no allow_unverified
    np.testing.assert_array_equal(c.score(x).progress, OnnxCritic(exported, provider="cpu").score(x).progress)
    before = _stored_hash(resaved)
    assert cli_main(["export", "--reseal", str(resaved)]) == 0
    out = capsys.readouterr().out
    assert f"resealed {resaved}: content hash {before} -> {_stored_hash(resaved)}" in out
    OnnxCritic(resaved, provider="cpu")
    correct(28, "seal_onnx(FILE) / `prm-critic export --reseal FILE` on a re-saved export",
            "the content hash is rewritten; the file then loads verified, without a warning, with the same scores")


def test_seal_onnx_refuses_what_it_cannot_reseal(exported, tmp_path):
    plain = tmp_path / "plain.onnx"
    model = onnx.load(str(exported))
    del model.metadata_props[:]
    onnx.save(model, str(plain))
    with loud(28, "seal_onnx on an ONNX model that is not a prm-critic export", OnnxExportError,
              match=r"plain\.onnx' is an ONNX model but not an exported prm-critic critic"):
        seal_onnx(plain)
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\xff" * 64)
    with loud(28, "seal_onnx on a file that is not a well-formed ONNX model", OnnxExportError,
              match=r"junk\.onnx' is corrupt or not an ONNX model"):
        seal_onnx(junk)
