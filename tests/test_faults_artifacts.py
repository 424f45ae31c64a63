"""Faults in saved artifacts: flipped bytes in checkpoints and exported ONNX files, files from an
older version without a hash, external-data ONNX models, file names in JSON that leave their folder,
and strict GPU sessions whose provider cannot load. Real safetensors, real torch exporter, real
onnxruntime; the only fake (labelled FAKE) is a CUDA provider listed by a CPU-only onnxruntime."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from faults import correct, loud
from prm_critic._io import UnsafePathError, resolve_inside
from prm_critic.models.checkpoint import CheckpointError, load_state_critic, save_state_critic
from prm_critic.models.state_critic import StateCriticNet

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from prm_critic.onnx import OnnxCritic, OnnxModelError, export_state_critic  # noqa: E402
from prm_critic.onnx._meta import HASH_KEY  # noqa: E402

pytestmark = pytest.mark.fault

FLIPS = 50


@pytest.fixture(scope="module")
def net():
    torch.manual_seed(7)
    n = StateCriticNet(31, hidden=(32, 32))
    with torch.no_grad():
        n.head.weight.mul_(5.0)  # scores spread over (0, 1), so a changed weight changes them visibly
        n.obs_mean.copy_(torch.linspace(-1, 1, 31))
        n.obs_std.copy_(torch.linspace(0.5, 2, 31))
    return n


@pytest.fixture(scope="module")
def x():
    return np.random.default_rng(0).standard_normal((16, 31)).astype(np.float32)


@pytest.fixture(scope="module")
def exported(net, tmp_path_factory):
    d = tmp_path_factory.mktemp("artifacts")
    return export_state_critic(net, d / "critic.onnx", task="FetchPush-v4")


def _flip(data: bytes, pos: int, bit: int) -> bytes:
    b = bytearray(data)
    b[pos] ^= 1 << bit
    return bytes(b)


def _weight_regions(model_bytes: bytes) -> list[tuple[int, int]]:
    """Byte ranges of the initializers' raw data inside a serialized model (those found exactly once)."""
    model = onnx.load_from_string(model_bytes)
    out = []
    for t in model.graph.initializer:
        raw = t.raw_data
        if len(raw) >= 16:
            at = model_bytes.find(raw)
            assert at >= 0
            if model_bytes.find(raw, at + 1) < 0:  # e.g. two all-zero biases: ambiguous, skipped
                out.append((at, at + len(raw)))
    assert out, "no inline weights found"
    return out


def _positions(regions, n, seed):
    rng = np.random.default_rng(seed)
    sizes = np.array([b - a for a, b in regions])
    picks = []
    for _ in range(n):
        k = int(rng.choice(len(regions), p=sizes / sizes.sum()))
        picks.append((int(rng.integers(*regions[k])), int(rng.integers(8))))
    return picks


# ------------------------------------------------------------------ item 5: state-critic checkpoints
def test_checkpoint_flipped_weight_bytes_are_refused(net, x, tmp_path):
    """50 seeded single-bit flips inside the safetensors data region: every one is an error naming the file."""
    save_state_critic(tmp_path / "c", net, {"task": "FetchPush-v4"})
    w = tmp_path / "c.safetensors"
    good = w.read_bytes()
    ref = load_state_critic(tmp_path / "c").score(x)
    header = 8 + int.from_bytes(good[:8], "little")  # safetensors: u64 header size, JSON header, data
    positions = _positions([(header, len(good))], FLIPS, seed=1)
    silent = changed_if_loaded = 0
    for i, (pos, bit) in enumerate(positions):
        w.write_bytes(_flip(good, pos, bit))
        if i == 0:
            with loud(5, "one flipped bit inside the weights of a state-critic .safetensors checkpoint", CheckpointError,
                      match=r"c\.safetensors' is corrupt or was modified after saving: its SHA-256 is [0-9a-f]{64}, "
                            r"but c\.json field 'weights_sha256' records [0-9a-f]{64}"):
                load_state_critic(tmp_path / "c")
            continue
        try:
            got = load_state_critic(tmp_path / "c").score(x)
        except CheckpointError as exc:
            assert "c.safetensors" in str(exc)
            continue
        silent += 1
        changed_if_loaded += not (np.array_equal(got.progress, ref.progress) and np.array_equal(got.success, ref.success))
    assert silent == 0, f"{silent} of {FLIPS} flipped weight bytes loaded silently ({changed_if_loaded} changed the scores)"
    w.write_bytes(good)
    back = load_state_critic(tmp_path / "c").score(x)
    assert np.array_equal(back.progress, ref.progress)


def test_checkpoint_flipped_bytes_anywhere_never_change_scores_silently(net, x, tmp_path):
    """Property over the whole weights file (header included): an error, or bit-identical scores."""
    save_state_critic(tmp_path / "c", net)
    w = tmp_path / "c.safetensors"
    good = w.read_bytes()
    ref = load_state_critic(tmp_path / "c").score(x)
    silent = 0
    for pos, bit in _positions([(0, len(good))], FLIPS, seed=2):
        w.write_bytes(_flip(good, pos, bit))
        try:
            got = load_state_critic(tmp_path / "c").score(x)
        except CheckpointError:
            continue
        silent += not (np.array_equal(got.progress, ref.progress) and np.array_equal(got.success, ref.success))
    assert silent == 0
    correct(5, f"{FLIPS} single-bit flips anywhere in a state-critic .safetensors file",
            "every flip is refused (CheckpointError naming the file); silent score changes: 0")


def test_checkpoint_without_hash_is_refused_unless_allowed(net, x, tmp_path):
    """A checkpoint written before hashes existed (format_version 1) is never accepted silently."""
    save_state_critic(tmp_path / "old", net)
    j = tmp_path / "old.json"
    doc = json.loads(j.read_text())
    del doc["weights_sha256"]
    doc["format_version"] = 1
    j.write_text(json.dumps(doc))
    with loud(5, "state-critic checkpoint from an older version (no weights hash in the JSON)", CheckpointError,
              match=r"old\.json' records no 'weights_sha256' for old\.safetensors .*allow_unverified=True"):
        load_state_critic(tmp_path / "old")
    crit = load_state_critic(tmp_path / "old", allow_unverified=True)
    assert np.array_equal(crit.score(x).progress, net.eval()(torch.from_numpy(x)).detach().numpy()[:, 0])
    doc["format_version"] = 99
    j.write_text(json.dumps(doc))
    with pytest.raises(CheckpointError, match=r"format_version 99; this prm-critic reads 1 to 3"):
        load_state_critic(tmp_path / "old", allow_unverified=True)
    with pytest.raises(TypeError, match=r"allow_unverified: expected True or False, got 'yes'$"):
        load_state_critic(tmp_path / "old", allow_unverified="yes")


# ------------------------------------------------------------------ item 5: exported ONNX files
def test_onnx_flipped_weight_bytes_are_refused_before_a_session(exported, net, x, tmp_path):
    """50 seeded flips inside the initializers' raw data of a real export: all refused, none loads."""
    good = exported.read_bytes()
    ref = OnnxCritic(exported, provider="cpu").score(x)
    np.testing.assert_allclose(ref.progress, net.eval()(torch.from_numpy(x)).detach().numpy()[:, 0], rtol=1e-4, atol=1e-5)
    bad = tmp_path / "bad.onnx"
    silent = changed = 0
    for i, (pos, bit) in enumerate(_positions(_weight_regions(good), FLIPS, seed=3)):
        bad.write_bytes(_flip(good, pos, bit))
        if i == 0:
            with loud(5, "one flipped bit inside the weights of an exported state-critic .onnx", OnnxModelError,
                      match=r"bad\.onnx' is corrupt or was modified after export: its content hash is [0-9a-f]{64}, "
                            r"but its metadata 'prm_critic\.sha256' records"):
                OnnxCritic(bad, provider="cpu")
            continue
        try:
            got = OnnxCritic(bad, provider="cpu").score(x)
        except OnnxModelError as exc:
            assert "bad.onnx" in str(exc)
            continue
        silent += 1
        changed += not np.array_equal(got.progress, ref.progress)
    assert silent == 0, f"{silent} of {FLIPS} flipped weight bytes loaded ({changed} changed the scores)"


def test_onnx_flipped_bytes_anywhere_never_change_scores_silently(exported, x, tmp_path):
    good = exported.read_bytes()
    ref = OnnxCritic(exported, provider="cpu").score(x)
    bad = tmp_path / "bad.onnx"
    silent = 0
    for pos, bit in _positions([(0, len(good))], FLIPS, seed=4):
        bad.write_bytes(_flip(good, pos, bit))
        try:
            got = OnnxCritic(bad, provider="cpu").score(x)
        except OnnxModelError:
            continue
        silent += not (np.array_equal(got.progress, ref.progress) and np.array_equal(got.success, ref.success))
    assert silent == 0
    correct(5, f"{FLIPS} single-bit flips anywhere in an exported state-critic .onnx (graph, weights, metadata)",
            "every flip is refused (OnnxModelError naming the file) before a session is built; silent score changes: 0")


def test_onnx_metadata_edit_breaks_the_hash(exported, tmp_path):
    """Re-saving an export with other metadata (here: another task) is a modified file."""
    m = onnx.load(str(exported))
    for p in m.metadata_props:
        if p.key == "task":
            p.value = "FetchReach-v4"
    edited = tmp_path / "edited.onnx"
    onnx.save(m, str(edited))
    with loud(5, "exported .onnx whose metadata (task) was edited after export", OnnxModelError,
              match=r"edited\.onnx' is corrupt or was modified after export"):
        OnnxCritic(edited, provider="cpu")


def test_onnx_without_hash_is_refused_unless_allowed(exported, x, tmp_path):
    """An export from an older version (no content hash) is refused; allow_unverified=True loads it."""
    m = onnx.load(str(exported))
    keep = [p for p in m.metadata_props if p.key != HASH_KEY]
    del m.metadata_props[:]
    m.metadata_props.extend(keep)
    old = tmp_path / "old.onnx"
    onnx.save(m, str(old))
    with loud(5, "exported .onnx from an older version (no content hash in the metadata)", OnnxModelError,
              match=r"old\.onnx' has no content hash \(metadata 'prm_critic\.sha256'\).*Re-export it.*allow_unverified=True"):
        OnnxCritic(old, provider="cpu")
    c = OnnxCritic(old, provider="cpu", allow_unverified=True)
    assert np.array_equal(c.score(x).progress, OnnxCritic(exported, provider="cpu").score(x).progress)


def test_subgoal_export_is_hashed_and_checked(tmp_path):
    pytest.importorskip("gymnasium_robotics")
    from prm_critic.onnx.export import export_subgoal_critic
    from prm_critic.robotics.make import make_env
    from prm_critic.robotics.subgoals import SubgoalCritic

    env = make_env("FetchPush-v4")
    critic = SubgoalCritic("FetchPush-v4", env)
    env.close()
    path = export_subgoal_critic(critic, tmp_path / "sub.onnx")
    good = path.read_bytes()
    OnnxCritic(path, provider="cpu")
    regions = _weight_regions(good) if any(len(t.raw_data) >= 16 for t in onnx.load(str(path)).graph.initializer) \
        else [(len(good) // 4, len(good) // 2)]
    (pos, bit), = _positions(regions, 1, seed=5)
    path.write_bytes(_flip(good, pos, bit))
    with loud(5, "one flipped bit inside an exported subgoal-critic .onnx", OnnxModelError,
              match=r"sub\.onnx' is corrupt or was modified after export"):
        OnnxCritic(path, provider="cpu")


# ------------------------------------------------------------------ item 8: ONNX checked before any session
def test_onnx_external_data_model_is_refused_before_a_session(exported, tmp_path, monkeypatch):
    m = onnx.load(str(exported))
    ext = tmp_path / "ext.onnx"
    onnx.save_model(m, str(ext), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="ext.onnx.data", size_threshold=0)
    assert (tmp_path / "ext.onnx.data").is_file()
    # a model whose external data points outside its folder must not even be opened by onnxruntime
    m = onnx.load(str(exported))
    for t in m.graph.initializer:
        onnx.external_data_helper.set_external_data(t, location="../../outside.bin")
        t.data_location = onnx.TensorProto.EXTERNAL
        t.ClearField("raw_data")
    evil = tmp_path / "evil.onnx"
    evil.write_bytes(m.SerializeToString())

    def no_session(*a, **k):  # FAKE: a session must not be built for these files
        raise AssertionError("an inference session was built for a refused file")

    monkeypatch.setattr(ort, "InferenceSession", no_session)
    with loud(8, "ONNX model with its weights in an external data file (ext.onnx.data)", OnnxModelError,
              match=r"ext\.onnx' keeps tensors \[.*\] in external data files; expected one self-contained file"):
        OnnxCritic(ext, provider="cpu")
    with loud(8, "ONNX model whose external data location is '../../outside.bin'", OnnxModelError,
              match=r"evil\.onnx' keeps tensors .* in external data files"):
        OnnxCritic(evil, provider="cpu")


def test_onnx_metadata_is_checked_before_a_session(tmp_path, monkeypatch):
    from onnx import TensorProto, helper

    inp = helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["B", 31])
    out = helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["B", 31])
    graph = helper.make_graph([helper.make_node("Sigmoid", ["obs"], ["scores"])], "g", [inp], [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    helper.set_model_props(model, {"prm_critic.format": "something-else"})
    p = tmp_path / "foreign.onnx"
    onnx.save(model, str(p))

    def no_session(*a, **k):  # FAKE: a session must not be built for a refused file
        raise AssertionError("an inference session was built before the metadata was checked")

    monkeypatch.setattr(ort, "InferenceSession", no_session)
    with loud(8, "ONNX model of another format (metadata 'prm_critic.format' = 'something-else')", OnnxModelError,
              match=r"foreign\.onnx' is an ONNX model but not an exported prm-critic critic "
                    r"\(metadata 'prm_critic\.format' is 'something-else', expected 'prm-critic/state-critic-onnx'\)"):
        OnnxCritic(p, provider="cpu")


# ------------------------------------------------------------------ item 8: file names read from JSON
@pytest.mark.parametrize("name", ["../../etc/passwd", "/etc/passwd", "sub/../../x", "C:\\x", ""])
def test_resolve_inside_refuses_names_leaving_the_folder(tmp_path, name):
    with loud(8, f"file name {name!r} read from a JSON file", UnsafePathError,
              match=r"'weights' in m\.json: .*expected a relative file name inside"):
        resolve_inside(tmp_path, name, what="'weights' in m.json")


_SEG = st.text(alphabet=st.characters(blacklist_characters="/\\\x00", blacklist_categories=("Cs",)),
               min_size=1, max_size=8).filter(lambda s: s not in (".", ".."))


@pytest.mark.fault_outcome(8, "any file name read from JSON, absolute or with '..' parts (property)",
                           'refused, or a path that stays inside its folder')
@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(_SEG, st.just(".."), st.just(".")), min_size=1, max_size=5), st.booleans())
def test_resolve_inside_property(parts, absolute):
    """Either an error, or a path that stays lexically inside the folder."""
    import os

    name = ("/" if absolute else "") + "/".join(parts)
    folder = "/srv/models"
    try:
        p = resolve_inside(folder, name, what="'x' in doc.json")
    except UnsafePathError:
        assert absolute or ".." in parts or (len(parts[0]) >= 2 and parts[0][1] == ":") or not name.strip()
        return
    norm = os.path.normpath(str(p))
    assert norm == folder or norm.startswith(folder + "/")


@pytest.fixture(scope="module")
def tiny_prm():
    transformers = pytest.importorskip("transformers")
    from prm_critic.text.contract import StepContract
    from prm_critic.text.prm import MiniLMStepPRM, StepPRMNet, minilm_model_dir

    d = minilm_model_dir()
    tok = transformers.AutoTokenizer.from_pretrained(str(d), local_files_only=True)
    cfg = transformers.BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                  intermediate_size=64, max_position_embeddings=128)
    torch.manual_seed(0)
    enc = transformers.AutoModel.from_config(cfg, add_pooling_layer=False)
    net = StepPRMNet(enc, dropout=0.0)
    with torch.no_grad():
        net.head.weight.normal_(0, 2.0)
    return MiniLMStepPRM(net, tok, StepContract(max_length=64, max_prompt_tokens=16))


def test_text_prm_folder_hashes_and_names(tiny_prm, tmp_path):
    from prm_critic.text.prm import MiniLMStepPRM

    d = tiny_prm.save(tmp_path / "prm")
    steps = ["search(q='x') -> 3 results", "open(result=1) -> page", "answer: 42"]
    ref = tiny_prm.score_trajectory("find x", steps)
    back = MiniLMStepPRM.load(d).score_trajectory("find x", steps)
    assert np.array_equal(ref.success, back.success)
    doc = json.loads((d / "prm.json").read_text())
    assert "model.safetensors" in doc["files_sha256"] and "tokenizer_config.json" in doc["files_sha256"]

    w = d / "model.safetensors"
    good = w.read_bytes()
    header = 8 + int.from_bytes(good[:8], "little")
    (pos, bit), = _positions([(header, len(good))], 1, seed=6)
    w.write_bytes(_flip(good, pos, bit))
    with loud(5, "one flipped bit inside the weights of a MiniLM step-PRM folder (model.safetensors)", CheckpointError,
              match=r"model\.safetensors' is corrupt or was modified after saving.*prm\.json field "
                    r"\"files_sha256\['model\.safetensors'\]\""):
        MiniLMStepPRM.load(d)
    w.write_bytes(good)

    vocab = d / "tokenizer.json"
    text = vocab.read_bytes()
    assert b'"the":' in text
    vocab.write_bytes(text.replace(b'"the":', b'"thf":', 1))
    with loud(5, "one changed token in the tokenizer vocabulary of a MiniLM step-PRM folder", CheckpointError,
              match=r"tokenizer\.json' is corrupt or was modified after saving"):
        MiniLMStepPRM.load(d)
    vocab.write_bytes(text)

    cfg = d / "prm.json"
    for bad in ("../../etc/passwd", "/etc/passwd"):
        cfg.write_text(json.dumps({**doc, "files_sha256": {**doc["files_sha256"], bad: "0" * 64}}))
        with loud(8, f"MiniLM step-PRM prm.json naming a file outside its folder ({bad!r})", CheckpointError,
                  match=r"prm\.json' field 'files_sha256': .* expected a relative file name inside"):
            MiniLMStepPRM.load(d)

    old = {k: v for k, v in doc.items() if k != "files_sha256"}
    cfg.write_text(json.dumps({**old, "format_version": 1}))
    with loud(5, "MiniLM step-PRM folder from an older version (no hashes in prm.json)", CheckpointError,
              match=r"prm\.json' records no 'files_sha256' .*allow_unverified=True"):
        MiniLMStepPRM.load(d)
    again = MiniLMStepPRM.load(d, allow_unverified=True).score_trajectory("find x", steps)
    assert np.array_equal(ref.success, again.success)


# ------------------------------------------------------------------ item 9: strict GPU providers
@pytest.mark.skipif("CUDAExecutionProvider" in ort.get_available_providers(), reason="simulates a CPU-only machine")
@pytest.mark.parametrize("provider", ["cuda", "tensorrt"])
def test_strict_gpu_provider_that_cannot_load_names_the_real_cause(exported, monkeypatch, provider):
    """FAKE: the CPU onnxruntime is made to list the GPU providers (as onnxruntime-gpu does on a machine
    whose CUDA libraries are missing); the session cannot create them. The error must say that the
    provider failed to load and what onnxruntime reported, not a conflicting-configuration error."""
    real = ort.get_available_providers
    monkeypatch.setattr(ort, "get_available_providers",
                        lambda: ["TensorrtExecutionProvider", "CUDAExecutionProvider", *real()])
    requested = {"cuda": "CUDAExecutionProvider", "tensorrt": "TensorrtExecutionProvider"}[provider]
    with loud(9, f"OnnxCritic(provider={provider!r}, strict=True) where {requested} is listed but cannot load",
              OnnxModelError, match=rf"provider='{provider}': {requested} is listed by onnxruntime\.get_available_providers"
                                    r"\(\) but failed to load.*onnxruntime reported: .*ExecutionProvider"):
        try:
            OnnxCritic(exported, provider=provider, strict=True)
        except OnnxModelError as exc:
            assert "Conflicting session configuration" not in str(exc)
            raise


@pytest.mark.skipif("CUDAExecutionProvider" in ort.get_available_providers(), reason="simulates a CPU-only machine")
def test_strict_chain_has_no_cpu_provider_and_non_strict_fallback_warns(exported, x, monkeypatch):
    real = ort.get_available_providers
    fake = ["CUDAExecutionProvider", *real()]  # FAKE: CUDA listed by a CPU-only onnxruntime
    chain, requested = OnnxCritic._provider_chain(type("Ort", (), {"get_available_providers": staticmethod(lambda: fake)}),
                                                  "cuda", True, False, 0)
    assert requested == "CUDAExecutionProvider" and "CPUExecutionProvider" not in chain
    assert chain[0][1]["use_tf32"] == "0"  # full float32: a row scores the same in any batch
    chain, _ = OnnxCritic._provider_chain(type("Ort", (), {"get_available_providers": staticmethod(lambda: fake)}),
                                          "cuda", False, False, 0)
    assert chain[-1] == "CPUExecutionProvider"
    monkeypatch.setattr(ort, "get_available_providers", lambda: fake)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        c = OnnxCritic(exported, provider="cuda")
    msgs = [str(w.message) for w in got if issubclass(w.category, RuntimeWarning)]
    assert any("CUDAExecutionProvider failed to load, the session runs on CPUExecutionProvider" in m for m in msgs), msgs
    assert c.provider == "CPUExecutionProvider"
    monkeypatch.setattr(ort, "get_available_providers", real)
    assert np.array_equal(c.score(x).progress, OnnxCritic(exported, provider="cpu").score(x).progress)
    correct(9, "OnnxCritic(provider='cuda') without strict where the CUDA provider cannot load",
            "runs on CPU with correct scores and a RuntimeWarning carrying onnxruntime's reason")


class _DeviceCopyBinding:
    """FAKE device-provider binding: a host input is copied when it is bound, as onnxruntime's CUDA
    provider does (measured on a real CUDA machine: a buffer bound once and refilled was scored with
    the zeros it held at bind time, every row alike)."""

    def __init__(self, real):
        self._real, self._keep = real, []

    def bind_cpu_input(self, name, arr):
        snap = np.array(arr, dtype=np.float32, copy=True)
        self._keep.append(snap)
        self._real.bind_cpu_input(name, snap)

    def __getattr__(self, name):
        return getattr(self._real, name)


class _DeviceSession:
    """FAKE CUDA session: a CPU session that reports the CUDA provider and binds host inputs by copy."""

    def __init__(self, real):
        self._real = real

    def get_providers(self):
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]

    def io_binding(self):
        return _DeviceCopyBinding(self._real.io_binding())

    def run_with_iobinding(self, io, run_options=None):
        return self._real.run_with_iobinding(io._real, run_options)

    def __getattr__(self, name):
        return getattr(self._real, name)


@pytest.mark.skipif("CUDAExecutionProvider" in ort.get_available_providers(), reason="simulates a CUDA session")
def test_device_provider_scores_refilled_inputs_not_the_bound_snapshot(net, exported, tmp_path, monkeypatch):
    real_session, real_avail = ort.InferenceSession, ort.get_available_providers

    def session(data, so=None, providers=None):
        cpu = real_session(data, so, providers=["CPUExecutionProvider"])
        named = [p if isinstance(p, str) else p[0] for p in providers or []]
        return _DeviceSession(cpu) if "CUDAExecutionProvider" in named else cpu

    b1 = export_state_critic(net, tmp_path / "critic.b1.onnx", batch=1, task="FetchPush-v4")
    ref_dyn, ref_b1 = OnnxCritic(exported, provider="cpu"), OnnxCritic(b1, provider="cpu")
    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CUDAExecutionProvider", *real_avail()])
    monkeypatch.setattr(ort, "InferenceSession", session)
    dyn, one = OnnxCritic(exported, provider="cuda"), OnnxCritic(b1, provider="cuda")
    assert dyn.provider == one.provider == "CUDAExecutionProvider"
    rng = np.random.default_rng(7)
    for b in (16, 16, 3):  # the repeated size reuses the cached binding with new data
        xb = rng.standard_normal((b, 31)).astype(np.float32)
        np.testing.assert_array_equal(dyn.score_rows(xb), ref_dyn.score_rows(xb))
        np.testing.assert_array_equal(one.score_rows(xb), ref_b1.score_rows(xb))
        for row in xb[:2]:
            assert one.score_one(row) == ref_b1.score_one(row)
            assert dyn.score_one(row) == ref_dyn.score_one(row)
    correct(32, "OnnxCritic on a device provider (CUDA) scoring refilled IOBinding buffers, batch 1 and batched",
            "every call scores its own input (the host input is bound again before each run)")


@pytest.mark.slow
def test_text_prm_onnx_is_hashed_and_checked(tiny_prm, tmp_path):
    from prm_critic.onnx import OnnxTextCritic, export_text_prm

    folder = tiny_prm.save(tmp_path / "prm")
    path = export_text_prm(folder, tmp_path / "prm.onnx")
    steps = ["search(q='x') -> 3 results", "answer: 42"]
    ref = OnnxTextCritic(path, folder, intra_op_threads=1).score_trajectory("find x", steps)
    good = path.read_bytes()
    (pos, bit), = _positions(_weight_regions(good), 1, seed=7)
    path.write_bytes(_flip(good, pos, bit))
    with loud(5, "one flipped bit inside the weights of an exported text-PRM .onnx", OnnxModelError,
              match=r"prm\.onnx' is corrupt or was modified after export"):
        OnnxTextCritic(path, folder, intra_op_threads=1)
    path.write_bytes(good)
    assert np.array_equal(OnnxTextCritic(path, folder, intra_op_threads=1).score_trajectory("find x", steps).success,
                          ref.success)
