"""StepTagLMPRM (Math-Shepherd-style LM PRMs) on a tiny GPT-2 causal LM and a tiny BERT masked LM,
both built and saved locally (real transformers models and tokenizers, random weights, no hub)."""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from prm_critic.critic import check_critic  # noqa: E402
from prm_critic.integrity import CheckpointError  # noqa: E402
from prm_critic.text import StepTagLMPRM, TextStep, write_lm_prm_manifest  # noqa: E402

WORDS = "find the key open door take go north south room you are in a step".split()
PROMPT = "find the key"
STEPS = ["open the door", "go north", "take the key", "you are in a room"]


@pytest.fixture(scope="module")
def causal_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny_causal_prm")
    vocab = {w: i for i, w in enumerate(["<|endoftext|>", "[UNK]", "ки", "+", "-", *WORDS])}
    t = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    t.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok = tf.PreTrainedTokenizerFast(tokenizer_object=t, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                     unk_token="[UNK]")
    torch.manual_seed(0)
    cfg = tf.GPT2Config(vocab_size=len(vocab), n_embd=32, n_layer=2, n_head=2, n_positions=64,
                        bos_token_id=0, eos_token_id=0)
    tf.GPT2LMHeadModel(cfg).eval().save_pretrained(str(d))
    tok.save_pretrained(str(d))
    write_lm_prm_manifest(d)
    return d


@pytest.fixture(scope="module")
def masked_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny_masked_prm")
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "ки", "+", "-", *WORDS]
    tok = tf.BertTokenizer(vocab={w: i for i, w in enumerate(words)})
    assert tok.tokenize("ки + - open") == ["ки", "+", "-", "open"]  # the vocabulary really is in use
    torch.manual_seed(1)
    cfg = tf.BertConfig(vocab_size=len(WORDS) + 8, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64)
    tf.BertForMaskedLM(cfg).eval().save_pretrained(str(d))
    tok.save_pretrained(str(d))
    write_lm_prm_manifest(d)
    return d


def reference(model_dir, kind, prompt, steps, *, bos=True):
    """The documented layout by hand: <bos>? prompt | (step + ' ки\\n')*, p('+') vs p('-') at the last tag."""
    tok = tf.AutoTokenizer.from_pretrained(str(model_dir))
    auto = tf.AutoModelForCausalLM if kind == "causal" else tf.AutoModelForMaskedLM
    model = auto.from_pretrained(str(model_dir)).eval()
    tag, good, bad = (tok.convert_tokens_to_ids(x) for x in ("ки", "+", "-"))
    ids = ([tok.bos_token_id] if bos and tok.bos_token_id is not None else []) + tok.encode(prompt, add_special_tokens=False)
    tags = []
    for s in steps:
        ids += tok.encode(s, add_special_tokens=False)
        sep = tok.encode(" ки\n", add_special_tokens=False)
        tags.append(len(ids) + sep.index(tag))
        ids += sep
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0]
    two = logits[tags][:, [good, bad]]
    return torch.softmax(two, -1)[:, 0].numpy()


def test_causal_scores_match_per_prefix_reference_and_one_pass(causal_dir):
    prm = StepTagLMPRM(causal_dir)
    assert prm.kind == "causal" and prm.verified
    per = prm.score(TextStep.prefixes(PROMPT, STEPS))
    ref = np.array([reference(causal_dir, "causal", PROMPT, STEPS[: t + 1])[-1] for t in range(len(STEPS))])
    np.testing.assert_allclose(per.success, ref, atol=1e-5)
    np.testing.assert_array_equal(per.progress, per.success)
    assert not np.allclose(ref, ref[0])  # the steps really differ
    one = prm.score_trajectory(PROMPT, STEPS)
    np.testing.assert_allclose(one.success, ref, atol=1e-5)  # one pass reads every tag, same scores
    np.testing.assert_array_equal(one.extra["truncated"], 0.0)
    check_critic(prm, TextStep.prefixes(PROMPT, STEPS), atol=1e-5)


def test_causal_one_pass_uses_one_row(causal_dir, monkeypatch):
    prm = StepTagLMPRM(causal_dir)
    shapes = []
    fwd = prm.model.forward
    monkeypatch.setattr(prm.model, "forward", lambda *a, **k: (shapes.append(tuple(k["input_ids"].shape)), fwd(*a, **k))[1])
    prm.score(TextStep.prefixes(PROMPT, STEPS))
    prm.score_trajectory(PROMPT, STEPS)
    assert [s[0] for s in shapes] == [1, 1]  # all four steps from one row, twice


def test_masked_scores_each_prefix_alone_and_one_pass_reads_the_whole_solution(masked_dir):
    prm = StepTagLMPRM(masked_dir)
    assert prm.kind == "masked"
    per = prm.score(TextStep.prefixes(PROMPT, STEPS))
    # BERT has no bos token: open='bos' then adds nothing, as in the reference
    ref = np.array([reference(masked_dir, "masked", PROMPT, STEPS[: t + 1])[-1] for t in range(len(STEPS))])
    np.testing.assert_allclose(per.success, ref, atol=1e-5)
    one = prm.score_trajectory(PROMPT, STEPS)
    np.testing.assert_allclose(one.success, reference(masked_dir, "masked", PROMPT, STEPS), atol=1e-5)
    assert abs(one.success[0] - per.success[0]) > 1e-6  # bidirectional: later steps change earlier tags


def test_token_ids_and_custom_tokens(causal_dir):
    tok = tf.AutoTokenizer.from_pretrained(str(causal_dir))
    a = StepTagLMPRM(causal_dir).score_trajectory(PROMPT, STEPS).success
    b = StepTagLMPRM(causal_dir, step_tag=tok.convert_tokens_to_ids("ки"), separator=" ки\n",
                     good_token=tok.convert_tokens_to_ids("+"), bad_token="-").score_trajectory(PROMPT, STEPS).success
    np.testing.assert_allclose(a, b, atol=1e-6)
    swapped = StepTagLMPRM(causal_dir, good_token="-", bad_token="+").score_trajectory(PROMPT, STEPS).success
    np.testing.assert_allclose(swapped, 1.0 - a, atol=1e-5)


@pytest.mark.parametrize("kwargs, match", [
    ({"step_tag": "key door"}, r"step_tag: 'key door' is not a single token in this tokenizer: it encodes to 2 tokens "
                               r"\[\d+, \d+\] \(\['key', 'door'\]\); expected exactly one"),
    ({"good_token": "++"}, r"good_token: '\+\+' is not in the tokenizer's vocabulary \(it encodes to the unknown token "
                           r"'\[UNK\]', id 1\)"),
    ({"bad_token": "+ -"}, r"bad_token: '\+ -' is not a single token in this tokenizer: it encodes to 2 tokens"),
    ({"bad_token": "+"}, r"good_token / bad_token: '\+' and '\+' are the same token"),
    ({"good_token": 999}, r"good_token: token id 999 is outside the tokenizer's vocabulary \[0, 20\)"),
    ({"separator": " step\n"}, r"separator: ' step\\n' encodes to \[\d+\] \(\['step'\]\), which holds the step tag 'ки' "
                               r"\(id 2\) 0 times; expected exactly once"),
    ({"separator": " ки ки\n"}, r"holds the step tag 'ки' \(id 2\) 2 times"),
    ({"step_tag": 2}, r"separator: None needs step_tag as a str"),
    ({"kind": "seq2seq"}, r"kind: expected one of \('causal', 'masked'\) or None, got 'seq2seq'"),
    ({"max_length": 100}, r"max_length: 100 exceeds the model's position limit 64"),
])
def test_token_and_argument_checks(causal_dir, kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        StepTagLMPRM(causal_dir, **kwargs)


def test_truncation_keeps_late_steps_and_reports_it(causal_dir):
    prm = StepTagLMPRM(causal_dir, max_length=16, max_prompt_tokens=4)
    steps = ["you are in a room"] * 6 + ["take the key"]
    out = prm.score([TextStep(PROMPT, tuple(steps[:-1]), steps[-1])])
    assert out.extra["truncated"][0] == 1.0
    # budget 16 - bos - 3 prompt tokens = 12; a room step costs 6 with its separator, the key step 4:
    # steps 4 and 5 fill the window (12), the key step overflows it and the history is cut to
    # <= refill * 12 = 6 tokens, i.e. the key step keeps no history (both room steps cost 12 > 6 - 4)
    ref = reference(causal_dir, "causal", PROMPT, ["take the key"])[-1]
    assert out.success[0] == pytest.approx(ref, abs=1e-5)
    traj = prm.score_trajectory(PROMPT, steps)
    assert traj.success[-1] == pytest.approx(ref, abs=1e-5)  # the late step is scored, never dropped
    np.testing.assert_array_equal(traj.extra["truncated"], [0, 0, 1, 1, 1, 1, 1])
    # a context the rule keeps (steps 4 and 5 without 0-3) equals the reference on those steps alone
    assert traj.success[5] == pytest.approx(reference(causal_dir, "causal", PROMPT, steps[4:6])[-1], abs=1e-5)
    np.testing.assert_allclose(traj.success, prm.score(TextStep.prefixes(PROMPT, steps)).success, atol=1e-5)


def test_integrity_refuses_corrupt_unlisted_and_unverified(causal_dir, tmp_path):
    import shutil

    d = tmp_path / "copy"
    shutil.copytree(causal_dir, d)
    w = d / "model.safetensors"
    data = bytearray(w.read_bytes())
    data[-5] ^= 0xFF  # one flipped byte inside a weight
    w.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"model.safetensors' is corrupt or was modified after saving"):
        StepTagLMPRM(d)
    with pytest.raises(CheckpointError, match="is corrupt"):  # allow_unverified never accepts a mismatch
        StepTagLMPRM(d, allow_unverified=True)

    d2 = tmp_path / "extra"
    shutil.copytree(causal_dir, d2)
    (d2 / "pytorch_model.bin").write_bytes(b"not listed")
    with pytest.raises(CheckpointError, match=r"holds file\(s\) \['pytorch_model.bin'\] that prm.json does not record"):
        StepTagLMPRM(d2)

    d3 = tmp_path / "user"
    shutil.copytree(causal_dir, d3)
    (d3 / "prm.json").unlink()
    with pytest.raises(CheckpointError, match=r"has no prm.json recording 'files_sha256'.*allow_unverified=True"):
        StepTagLMPRM(d3)
    prm = StepTagLMPRM(d3, allow_unverified=True)
    assert not prm.verified
    np.testing.assert_allclose(prm.score_trajectory(PROMPT, STEPS).success,
                               StepTagLMPRM(causal_dir).score_trajectory(PROMPT, STEPS).success, atol=1e-6)
    write_lm_prm_manifest(d3)
    assert StepTagLMPRM(d3).verified
    doc = json.loads((d3 / "prm.json").read_text())
    assert set(doc["files_sha256"]) == {p.name for p in d3.iterdir() if p.name != "prm.json"}


def test_random_head_is_refused(causal_dir, tmp_path):
    # a bare GPT2Model (no LM head weights) saved in the folder: its head would be random
    d = tmp_path / "bare"
    d.mkdir()
    cfg = tf.AutoConfig.from_pretrained(str(causal_dir))
    cfg.tie_word_embeddings = False
    tf.GPT2Model(cfg).save_pretrained(str(d))
    cfg2 = json.loads((d / "config.json").read_text())
    cfg2["architectures"] = ["GPT2LMHeadModel"]
    (d / "config.json").write_text(json.dumps(cfg2))
    tf.AutoTokenizer.from_pretrained(str(causal_dir)).save_pretrained(str(d))
    with pytest.raises(ValueError, match=r"without trained weights for GPT2LMHeadModel: \['lm_head.weight'\]"):
        StepTagLMPRM(d, allow_unverified=True)


def test_kind_and_foreign_manifest_checks(causal_dir, tmp_path):
    import shutil

    d = tmp_path / "odd"
    shutil.copytree(causal_dir, d)
    (d / "prm.json").unlink()
    cfg = json.loads((d / "config.json").read_text())
    cfg["architectures"] = ["GPT2Model"]
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"kind: cannot tell from architectures \['GPT2Model'\] whether the model is a "
                                         r"causal or a masked LM; pass kind='causal' or kind='masked'"):
        StepTagLMPRM(d, allow_unverified=True)
    assert StepTagLMPRM(d, allow_unverified=True, kind="causal").kind == "causal"
    # a prm.json of another prm-critic folder (a MiniLMStepPRM) is neither trusted nor overwritten
    (d / "prm.json").write_text(json.dumps({"format": "prm-critic/minilm-step-prm", "files_sha256": {}}))
    with pytest.raises(CheckpointError, match=r"is not an LM PRM manifest \(format 'prm-critic/minilm-step-prm', "
                                              r"expected 'prm-critic/lm-step-prm'\)"):
        StepTagLMPRM(d, kind="causal")
    with pytest.raises(CheckpointError, match=r"exists and is not a 'prm-critic/lm-step-prm' manifest; refusing to overwrite"):
        write_lm_prm_manifest(d)
    # a manifest naming a file outside the folder
    (d / "prm.json").write_text(json.dumps({"format": "prm-critic/lm-step-prm", "format_version": 1,
                                            "files_sha256": {"../x": "0" * 64, "config.json": "0" * 64}}))
    with pytest.raises(CheckpointError, match=r"field 'files_sha256': '../x' leaves its folder"):
        StepTagLMPRM(d, kind="causal")
