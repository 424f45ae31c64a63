"""Faults at the text step boundary: separators the tokenizer does not know, and tool output that
is not valid UTF-8. The real tokenizer of the packaged all-MiniLM-L6-v2, real transformers models
(tiny, random weights, built locally), real LangGraph graphs and checkpointers. FAKES (labelled):
the scripted chat models of tests/fakes.py and the keyword critic stand in for an LLM and a trained
PRM where the point is the plumbing, not the scores."""

from __future__ import annotations

import pytest

from faults import correct, loud

pytestmark = pytest.mark.fault


# =========================================================================== item 25: separators
@pytest.fixture(scope="module")
def minilm_tc_folder(tmp_path_factory):
    """A real, tiny BertForTokenClassification (random weights) saved with MiniLM's real tokenizer."""
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers")
    from prm_critic.text.prm import minilm_model_dir

    d = tmp_path_factory.mktemp("minilm_tc")
    tok = tf.AutoTokenizer.from_pretrained(str(minilm_model_dir()), local_files_only=True)
    torch.manual_seed(0)
    cfg = tf.BertConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=128, num_labels=2)
    tf.BertForTokenClassification(cfg).eval().save_pretrained(str(d))
    tok.save_pretrained(str(d))
    return d


@pytest.mark.parametrize("separator", ["\u2713", "step \U0001f99c"])
def test_token_classification_prm_refuses_a_separator_outside_the_vocabulary(minilm_tc_folder, separator):
    """The separator encodes to MiniLM's [UNK]: scores would be read at [UNK] positions."""
    from prm_critic.text.prm import TokenClassificationPRM

    with loud(25, f"TokenClassificationPRM with separator {separator!r}, which MiniLM's tokenizer encodes to [UNK]",
              ValueError, match=r"separator: .* is not in the tokenizer's vocabulary: it encodes to .*'\[UNK\]'"
                                r".*expected a separator made of known tokens"):
        TokenClassificationPRM(minilm_tc_folder, separator=separator)


def test_token_classification_prm_scores_with_a_known_separator(minilm_tc_folder):
    from prm_critic.text import TextStep
    from prm_critic.text.prm import TokenClassificationPRM

    prm = TokenClassificationPRM(minilm_tc_folder, separator="[SEP]")
    out = prm.score(TextStep.prefixes("find the key", ["open the door", "go north"]))
    assert out.success.shape == (2,) and ((out.success > 0) & (out.success < 1)).all()
    prm = TokenClassificationPRM(minilm_tc_folder, separator="<step>")  # three known tokens
    assert list(prm.layout.sep_ids) == prm.tokenizer.encode("<step>", add_special_tokens=False)
    correct(25, "TokenClassificationPRM with MiniLM's tokenizer and a separator of known tokens ('[SEP]', '<step>')",
            "accepted; scores in (0, 1) read at the separator's last token")
