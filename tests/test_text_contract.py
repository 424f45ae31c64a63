"""The text step contract: layout, score positions, truncation (real MiniLM tokenizer)."""

import numpy as np
import pytest

from prm_critic.text.contract import StepContract, block_causal_mask, pad_batch


@pytest.fixture(scope="module")
def tok():
    tf = pytest.importorskip("transformers")
    from prm_critic.text.prm import minilm_model_dir

    return tf.AutoTokenizer.from_pretrained(str(minilm_model_dir()), local_files_only=True)


def test_layout_and_positions(tok):
    c = StepContract()
    enc = c.encode(tok, "find the key", ["open the door", "take the key"])
    ids = enc.input_ids.tolist()
    cls, sep = tok.cls_token_id, tok.sep_token_id
    prompt = tok.encode("find the key", add_special_tokens=False)
    s0 = tok.encode("open the door", add_special_tokens=False)
    s1 = tok.encode("take the key", add_special_tokens=False)
    assert ids == [cls, *prompt, sep, *s0, sep, *s1, sep]
    assert enc.step_positions.tolist() == [len(prompt) + 2 + len(s0), len(ids) - 1]
    assert all(ids[p] == sep for p in enc.step_positions)
    assert enc.step_indices.tolist() == [0, 1]
    assert enc.segment_ids.tolist() == [0] * (len(prompt) + 2) + [1] * (len(s0) + 1) + [2] * (len(s1) + 1)
    assert not enc.truncated


def test_truncation_keeps_prompt_head_and_late_steps(tok):
    c = StepContract(max_length=40, max_prompt_tokens=6)
    prompt = "alpha beta gamma delta epsilon zeta eta theta iota kappa"
    steps = [f"step number {i} moves the box" for i in range(12)]
    enc = c.encode(tok, prompt, steps)
    assert len(enc) <= 40
    head = tok.encode(prompt, add_special_tokens=False)[:6]
    assert enc.input_ids[1:7].tolist() == head
    assert enc.prompt_tokens_dropped == len(tok.encode(prompt, add_special_tokens=False)) - 6
    # the last step is always present and scored; older steps were dropped from the left
    assert enc.step_indices[-1] == 11
    assert enc.dropped_steps == enc.first_step > 0
    assert enc.truncated
    last = tok.encode(steps[-1], add_special_tokens=False)
    assert enc.input_ids[-1 - len(last):-1].tolist() == last


def test_overlong_single_step_keeps_its_end(tok):
    c = StepContract(max_length=16, max_prompt_tokens=4)
    step = " ".join(f"w{i}" for i in range(40)) + " error"
    enc = c.encode(tok, "p", [step])
    assert len(enc) == 16
    assert enc.step_tokens_dropped > 0
    assert tok.convert_ids_to_tokens(int(enc.input_ids[-2])) == "error"


def test_trajectory_windows_match_per_prefix_context(tok):
    c = StepContract(max_length=48, max_prompt_tokens=8)
    prompt = "cook the meal"
    steps = [f"call go(room {i})\nresult: you are in room {i}" for i in range(9)]
    wins = c.encode_trajectory(tok, prompt, steps)
    scored = np.concatenate([w.step_indices for w in wins]).tolist()
    assert scored == list(range(9))
    for w in wins:
        for t, pos in zip(w.step_indices, w.step_positions):
            alone = c.encode(tok, prompt, steps[: t + 1])
            # the tokens step t can attend to in the window == its own encoding
            assert w.input_ids[: pos + 1].tolist() == alone.input_ids.tolist()
    assert len(c.encode_trajectory(tok, prompt, steps[:2])) == 1


def test_refill_shares_windows_on_long_trajectories(tok):
    prompt = "cook the meal"
    steps = [f"call go(room {i})\nresult: you are in room {i}" for i in range(40)]
    lazy = StepContract(max_length=64, max_prompt_tokens=8, refill=0.5)
    tight = StepContract(max_length=64, max_prompt_tokens=8, refill=1.0)
    w_lazy, w_tight = lazy.encode_trajectory(tok, prompt, steps), tight.encode_trajectory(tok, prompt, steps)
    n_tok = lambda ws: sum(len(w) for w in ws)  # noqa: E731
    assert len(w_lazy) < 40 / 2 and len(w_tight) > 30  # refill=1.0: about one window per step
    assert n_tok(w_lazy) < n_tok(w_tight) / 2
    # refill=1.0 keeps the most history that fits; refill=0.5 never keeps more
    for t in range(40):
        a, b = lazy.encode(tok, prompt, steps[: t + 1]), tight.encode(tok, prompt, steps[: t + 1])
        assert a.first_step >= b.first_step
        assert b.step_indices[-1] == a.step_indices[-1] == t
    with pytest.raises(ValueError, match=r"refill: expected a float in \(0, 1\], got 0"):
        StepContract(refill=0)


def test_pad_batch_and_mask(tok):
    c = StepContract()
    a = c.encode(tok, "p", ["a b c", "d"])
    b = c.encode(tok, "p", ["x"])
    bt = pad_batch([a, b], tok.pad_token_id)
    assert bt["input_ids"].shape == (2, len(a))
    assert bt["step_row"].tolist() == [0, 0, 1]
    m = block_causal_mask(bt["attention_mask"], bt["segment_ids"])
    assert m.shape == (2, len(a), len(a))
    p0 = int(a.step_positions[0])
    assert m[0, p0, : p0 + 1].all() and not m[0, p0, p0 + 1 :].any()  # step 0 cannot see step 1
    assert not m[1, :, len(b):].any()  # padding is never attended to


def test_contract_errors(tok):
    with pytest.raises(ValueError, match=r"max_length: expected an int >= 8, got 4"):
        StepContract(max_length=4)
    with pytest.raises(ValueError, match=r"max_prompt_tokens: expected an int in \[0, max_length // 2 = 32\], got 50"):
        StepContract(max_length=64, max_prompt_tokens=50)
    with pytest.raises(ValueError, match=r"open: expected one of"):
        StepContract(open="start")
    with pytest.raises(ValueError, match=r"close_prompt: expected True or False, got 1$"):
        StepContract(close_prompt=1)
    with pytest.raises(ValueError, match=r"separator: '\\n' encodes to no tokens"):
        StepContract.trl(separator="\n").layout(tok)
    with pytest.raises(ValueError, match=r"steps: expected at least one step"):
        StepContract().encode(tok, "p", [])
    with pytest.raises(TypeError, match=r"steps\[1\]: expected str, got int"):
        StepContract().encode(tok, "p", ["a", 3])
    with pytest.raises(ValueError, match=r"contract: unknown field\(s\) \['max_len'\]"):
        StepContract.from_dict({"max_len": 3})
    assert StepContract.from_dict(StepContract(max_length=300).to_dict()) == StepContract(max_length=300)
