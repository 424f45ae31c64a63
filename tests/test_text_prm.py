"""MiniLMStepPRM (real all-MiniLM-L6-v2 encoder): one-pass scoring, grouping, persistence, training."""

import copy
import json
import random

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from prm_critic.critic import check_critic  # noqa: E402
from prm_critic.models.checkpoint import CheckpointError  # noqa: E402
from prm_critic.text import TextStep  # noqa: E402
from prm_critic.text.contract import StepContract  # noqa: E402
from prm_critic.text.prm import MiniLMStepPRM  # noqa: E402
from prm_critic.text.train import TextTrainConfig, train_text_prm  # noqa: E402
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
    cfg.write_text(json.dumps({**doc, "encoder_config": {**doc["encoder_config"], "hidden_size": 48}}))
    with pytest.raises(CheckpointError, match=r"do not match prm.json"):
        MiniLMStepPRM.load(d)
    cfg.unlink()
    with pytest.raises(FileNotFoundError, match=r"prm.json' does not exist"):
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
