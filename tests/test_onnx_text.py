"""ONNX export of the text PRM (real all-MiniLM-L6-v2 encoder, real torch exporter, real onnxruntime):
per-token parity with torch, same step scores through OnnxTextCritic, one self-contained file."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

from prm_critic.critic import check_critic  # noqa: E402
from prm_critic.onnx import OnnxExportError, OnnxModelError  # noqa: E402
from prm_critic.onnx import OnnxTextCritic, export_text_prm  # noqa: E402
from prm_critic.text import TextStep  # noqa: E402
from prm_critic.text.contract import StepContract  # noqa: E402
from prm_critic.text.prm import MiniLMStepPRM  # noqa: E402

PROMPT = "You are hungry. Cook a meal and eat it."
STEPS = [f'call go({{"direction": "north"}})\nresult: You are in room {i}. There is a {w} here.'
         for i, w in enumerate("table lamp knife apple door box".split())]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    prm = MiniLMStepPRM.from_pretrained_encoder(seed=0, contract=StepContract(max_length=96, max_prompt_tokens=16))
    with torch.no_grad():  # spread the head so scores differ visibly between steps
        prm.net.head.weight.mul_(50.0)
    d = tmp_path_factory.mktemp("text")
    folder = prm.save(d / "prm")
    path = export_text_prm(folder, d / "out" / "prm.onnx", extra_meta={"run": "test"})
    yield prm, folder, path
    torch.set_num_threads(n)


@pytest.mark.slow
def test_text_prm_export_parity_and_metadata(exported, tmp_path):
    prm, folder, path = exported
    assert sorted(p.name for p in path.parent.iterdir()) == ["prm.onnx"]  # no .data sidecar
    assert b'File "' not in path.read_bytes()  # no stack traces with the exporting machine's paths
    m = onnx.load(str(path))
    assert {o.domain: o.version for o in m.opset_import}[""] == 18
    assert [i.name for i in m.graph.input] == ["input_ids", "attention_mask", "segment_ids"]
    assert [o.name for o in m.graph.output] == ["scores"]

    critic = OnnxTextCritic(path, folder, intra_op_threads=1)
    assert critic.contract == prm.contract and critic.meta["extra"] == {"run": "test"}
    assert critic.meta["heads"] == ["progress", "success"]
    # the trajectory exceeds max_length=96: several windows, truncation flags must agree too
    one_t, one_o = prm.score_trajectory(PROMPT, STEPS), critic.score_trajectory(PROMPT, STEPS)
    np.testing.assert_allclose(one_o.progress, one_t.progress, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(one_o.success, one_t.success, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(one_o.extra["truncated"], one_t.extra["truncated"])
    assert one_t.extra["truncated"].any() and np.ptp(one_t.success) > 1e-3
    steps = [TextStep(PROMPT, tuple(STEPS[:t]), STEPS[t]) for t in (0, 2, 3)] + [TextStep("Other task.", (), "look")]
    a, b = critic.score(steps), prm.score(steps)
    np.testing.assert_allclose(a.progress, b.progress, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(a.success, b.success, rtol=1e-4, atol=1e-5)
    check_critic(critic, steps)

    bad = tmp_path / "bad.onnx"
    bad.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(OnnxModelError, match=r"path: '.*bad.onnx' is corrupt or not an ONNX model"):
        OnnxTextCritic(bad, folder)
    with pytest.raises(OnnxExportError, match=r"out_path: expected a file name ending in .onnx"):
        export_text_prm(prm, tmp_path / "prm.bin")
    with pytest.raises(TypeError, match=r"prm_or_path: expected a MiniLMStepPRM or its saved folder, got int"):
        export_text_prm(3, tmp_path / "x.onnx")
