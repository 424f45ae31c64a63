"""TokenClassificationPRM on a tiny BERT token-classification model built and saved locally
(a real transformers model and tokenizer, random weights: no hub access needed)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")

from prm_critic.critic import check_critic  # noqa: E402
from prm_critic.text import TextStep  # noqa: E402
from prm_critic.text.prm import TokenClassificationPRM  # noqa: E402

WORDS = "find the key open door take go north south room good bad you are in a".split()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny_prm")
    # vocab= (transformers 5 builds a BertTokenizer from vocab_file= with its special tokens only)
    tok = tf.BertTokenizer(vocab={w: i for i, w in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS])})
    assert tok.tokenize("open the door") == ["open", "the", "door"]  # the words are real tokens, not [UNK]
    torch.manual_seed(0)
    cfg = tf.BertConfig(vocab_size=len(WORDS) + 5, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128, num_labels=2)
    model = tf.BertForTokenClassification(cfg).eval()
    model.save_pretrained(str(d))
    tok.save_pretrained(str(d))
    return d


def manual_score(model_dir, prompt, steps):
    """TRL's layout by hand: prompt ids + (step ids + separator ids)*, label read at the separator."""
    tok = tf.AutoTokenizer.from_pretrained(str(model_dir))
    model = tf.AutoModelForTokenClassification.from_pretrained(str(model_dir)).eval()
    ids = tok.encode(prompt, add_special_tokens=False)
    for s in steps:
        ids += tok.encode(s, add_special_tokens=False) + [tok.sep_token_id]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0]
    return float(torch.softmax(logits, -1)[len(ids) - 1, 1])


def test_scores_match_trl_layout(model_dir):
    prm = TokenClassificationPRM(model_dir, separator="[SEP]")
    steps = ["open the door", "go north", "take the key"]
    out = prm.score(TextStep.prefixes("find the key", steps))
    for t in range(3):
        assert out.success[t] == pytest.approx(manual_score(model_dir, "find the key", steps[: t + 1]), abs=1e-5)
    np.testing.assert_array_equal(out.progress, out.success)
    check_critic(prm, TextStep.prefixes("find the key", steps), atol=1e-5)


def test_score_trajectory_is_one_pass_over_all_separators(model_dir):
    prm = TokenClassificationPRM(model_dir, separator="[SEP]")
    steps = ["open the door", "go north", "take the key"]
    one = prm.score_trajectory("find the key", steps)
    assert one.success.shape == (3,)
    # the last step sees the same tokens either way
    assert one.success[-1] == pytest.approx(manual_score(model_dir, "find the key", steps), abs=1e-5)
    # a bidirectional encoder lets later steps change earlier scores (documented difference)
    per = prm.score(TextStep.prefixes("find the key", steps))
    assert abs(one.success[0] - per.success[0]) > 1e-6


def test_truncation_keeps_late_steps(model_dir):
    prm = TokenClassificationPRM(model_dir, separator="[SEP]", max_length=16, max_prompt_tokens=4)
    steps = ["you are in a room"] * 6 + ["take the key"]
    out = prm.score([TextStep("find the key", tuple(steps[:-1]), steps[-1])])
    assert out.extra["truncated"][0] == 1.0
    # step budget 16 - 3 prompt tokens = 13; each room step costs 6 (with its separator): on every
    # overflow the history is cut to <= refill * 13 = 6.5 tokens, so the last step keeps no history
    kept = ["take the key"]
    assert out.success[0] == pytest.approx(manual_score(model_dir, "find the key", kept), abs=1e-5)
    full = TokenClassificationPRM(model_dir, separator="[SEP]", max_length=16, max_prompt_tokens=4, refill=1.0)
    kept = ["you are in a room", "take the key"]  # refill=1.0 drops as little as possible: 3 + 6 + 4 <= 16
    assert full.score([TextStep("find the key", tuple(steps[:-1]), steps[-1])]).success[0] == pytest.approx(
        manual_score(model_dir, "find the key", kept), abs=1e-5)


def test_errors(model_dir, tmp_path):
    with pytest.raises(ValueError, match=r"separator: '\\n' encodes to no tokens"):
        TokenClassificationPRM(model_dir)  # TRL's default "\n" vanishes under a BERT tokenizer
    with pytest.raises(ValueError, match=r"label: expected an int in \[0, 2\), got 2"):
        TokenClassificationPRM(model_dir, separator="[SEP]", label=2)
    with pytest.raises(ValueError, match=r"max_length: 4096 exceeds the model's position limit 128"):
        TokenClassificationPRM(model_dir, separator="[SEP]", max_length=4096)
    with pytest.raises(FileNotFoundError, match=r"model_dir: .* has no config.json"):
        TokenClassificationPRM(tmp_path)
    prm = TokenClassificationPRM(model_dir, separator="[SEP]")
    with pytest.raises(TypeError, match=r"steps\[0\]: expected TextStep, got dict"):
        prm.score([{"step": "go"}])
