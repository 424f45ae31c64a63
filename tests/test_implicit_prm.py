"""The implicit PRM: outcome-only labels, step rewards as value differences (prm_critic.text.implicit).

The property tests use a FAKE value model (a hash of the prefix, not a learned model); one test
trains a real MiniLMStepPRM for 2 epochs on a handful of synthetic outcome-labelled trajectories.
"""

from __future__ import annotations

import asyncio
import hashlib
import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from prm_critic.critic import ConstantCritic, StepScores, check_critic
from prm_critic.text import ImplicitPRM, StepwiseExample, TextCritic, TextStep, outcome_examples, prompt_value_examples
from prm_critic.text.implicit import PROMPT_STEP, REWARD, VALUE_PREV


class FakeValueModel(TextCritic):
    """FAKE value model (not learned): V(prefix) is a hash of (prompt, history, step) in [0, 1]; it
    counts its calls and the steps it was given."""

    def __init__(self):
        self.calls = 0
        self.seen: list[TextStep] = []

    @staticmethod
    def value(s: TextStep) -> float:
        h = hashlib.sha256(json.dumps([s.prompt, list(s.history), s.step]).encode()).digest()
        return int.from_bytes(h[:4], "little") / 2 ** 32

    def score(self, steps):
        self.calls += 1
        self.seen += list(steps)
        v = np.array([self.value(s) for s in steps])
        return StepScores(np.full(len(v), 0.25), v, {"truncated": np.zeros(len(v), np.float32)})


def traj(prompt, steps, labels, progress=None):
    return StepwiseExample(prompt, list(steps), list(labels), progress=progress)


# --------------------------------------------------------------------------- outcome labels
def test_outcome_examples_label_every_step_with_the_last_label_and_leave_the_input_alone():
    won = traj("p1", ["a", "b", "c"], [0.2, 0.7, 1.0], progress=[0.1, 0.5, 1.0])
    lost = traj("p2", ["a", "x"], [0.4, 0.0])
    branch = traj("p1", ["a", "d"], [0.2, True])  # a branch example: prefix (MC label) + terminal step
    out = outcome_examples([won, lost, branch])
    assert [e.labels for e in out] == [[1.0] * 3, [0.0] * 2, [1.0] * 2]
    assert [e.completions for e in out] == [["a", "b", "c"], ["a", "x"], ["a", "d"]]
    assert [e.prompt for e in out] == ["p1", "p2", "p1"]
    assert all(e.progress is None for e in out)  # progress labels are step labels too: dropped
    assert won.labels == [0.2, 0.7, 1.0] and won.progress == [0.1, 0.5, 1.0]  # input unchanged
    assert outcome_examples([]) == []


@pytest.mark.parametrize("last", [0.5, 0.999, 1e-9])
def test_outcome_examples_refuse_a_last_label_that_is_not_an_outcome(last):
    good = traj("p", ["a"], [1.0])
    with pytest.raises(ValueError, match=rf"examples\[1\]: the last label is the trajectory's outcome and must be "
                                         rf"exactly 0 or 1, got {last!r}"):
        outcome_examples([good, traj("p", ["a", "b"], [1.0, last])])


def test_outcome_examples_refuse_empty_trajectories_and_other_inputs():
    empty = traj("p", ["a"], [1.0])
    empty.completions, empty.labels = [], []  # StepwiseExample refuses this at construction; mutated after
    with pytest.raises(ValueError, match=r"examples\[1\]: a trajectory with no steps has no outcome"):
        outcome_examples([traj("p", ["a"], [0.0]), empty])
    odd = traj("p", ["a", "b"], [0.0, 1.0])
    odd.labels = [1.0]
    with pytest.raises(ValueError, match=r"examples\[0\]: expected one label per step, got 1 labels for 2 steps"):
        outcome_examples([odd])
    with pytest.raises(TypeError, match=r"examples\[0\]: expected StepwiseExample, got dict"):
        outcome_examples([{"prompt": "p", "completions": ["a"], "labels": [1.0]}])
    with pytest.raises(TypeError, match=r"examples: expected a list of StepwiseExample, got str"):
        outcome_examples("labels.jsonl")


def test_prompt_value_examples_are_the_mean_outcome_of_each_prompt():
    exs = [traj("p1", ["a", "b"], [0.3, 1.0]), traj("p2", ["a"], [0.0]), traj("p1", ["c"], [0.0]),
           traj("p1", ["d", "e"], [0.5, 1.0])]
    out = prompt_value_examples(exs)
    assert [(e.prompt, e.completions, e.progress) for e in out] == [("p1", [PROMPT_STEP], [0.0]),
                                                                    ("p2", [PROMPT_STEP], [0.0])]
    assert out[0].labels == [pytest.approx(2 / 3)] and out[1].labels == [0.0]
    with pytest.raises(ValueError, match=r"examples\[1\]: the last label .* got 0.3"):
        prompt_value_examples([exs[0], traj("p", ["a"], [0.3])])


# --------------------------------------------------------------------------- the wrapper, on a fake
texts = st.text(alphabet="abc xyz", max_size=6)


@settings(max_examples=60, deadline=None)
@given(prompt=texts, steps=st.lists(texts, min_size=1, max_size=8),
       baseline=st.one_of(st.just("prompt"), st.floats(0.0, 1.0)))
def test_rewards_telescope_and_success_is_the_value(prompt, steps, baseline):
    fake = FakeValueModel()
    prm = ImplicitPRM(fake, baseline=baseline)
    out = prm.score_trajectory(prompt, steps)
    assert fake.calls == 1
    v = np.array([fake.value(s) for s in TextStep.prefixes(prompt, steps)])
    v0 = fake.value(TextStep(prompt, (), PROMPT_STEP)) if baseline == "prompt" else baseline
    r = out.extra[REWARD].astype(np.float64)
    np.testing.assert_allclose(out.success, v, atol=1e-6)  # success = V_t
    np.testing.assert_allclose(r.sum(), v[-1] - v0, atol=1e-5)  # sum r_t = V_T - V_0
    np.testing.assert_allclose(r, np.diff(np.r_[v0, v]), atol=1e-6)  # r_t = V_t - V_{t-1}
    np.testing.assert_allclose(out.extra[VALUE_PREV], np.r_[v0, v[:-1]], atol=1e-6)
    np.testing.assert_allclose(out.progress, (1 + r) / 2, atol=1e-6)
    assert set(out.extra) == {REWARD, VALUE_PREV, "truncated"}
    # each step scored alone gives the same scores (the critic interface), the prefixes in any order too
    check_critic(prm, TextStep.prefixes(prompt, steps)[::-1])


def test_one_value_model_call_per_batch_with_each_previous_prefix_once():
    fake = FakeValueModel()
    prm = ImplicitPRM(fake)
    hist = ("go north", "take knife")
    batch = [TextStep("cook", hist, c) for c in ("eat", "look", "drop knife")] + [TextStep("cook", (), "look")] * 2
    out = prm.score(batch)
    assert fake.calls == 1 and len(out) == 5
    parents = fake.seen[5:]  # the steps first, then each previous prefix once
    assert parents == [TextStep("cook", ("go north",), "take knife"), TextStep("cook", (), PROMPT_STEP)]
    np.testing.assert_allclose(out.extra[VALUE_PREV][:3], fake.value(parents[0]), atol=1e-6)
    # a float baseline needs no prompt-only row
    fake2 = FakeValueModel()
    ImplicitPRM(fake2, baseline=0.3).score([TextStep("cook", (), "look")])
    assert fake2.seen == [TextStep("cook", (), "look")]


def test_ascore_equals_score():
    prm = ImplicitPRM(FakeValueModel(), baseline=0.5)
    steps = TextStep.prefixes("cook", ["a", "b", "c"])
    a, s = asyncio.run(prm.ascore(steps)), prm.score(steps)
    np.testing.assert_array_equal(a.success, s.success)
    np.testing.assert_array_equal(a.extra[REWARD], s.extra[REWARD])


@pytest.mark.parametrize("kwargs,err,msg", [
    (dict(value_model=ConstantCritic()), TypeError, r"value_model: expected a text critic .* got ConstantCritic"),
    (dict(value_model="model_dir"), TypeError, r"value_model: expected a text critic .* got str"),
    (dict(value_model=ImplicitPRM(FakeValueModel())), TypeError, r"got an ImplicitPRM"),
    (dict(value_model=FakeValueModel(), baseline="mean"), ValueError, r"baseline: expected one of .*'prompt'.*got 'mean'"),
    (dict(value_model=FakeValueModel(), baseline=1.5), ValueError, r"baseline: expected 'prompt' or a value in \[0, 1\].*1.5"),
    (dict(value_model=FakeValueModel(), baseline=None), TypeError, r"baseline: expected 'prompt' or a value in \[0, 1\]"),
])
def test_bad_arguments_are_refused_by_name(kwargs, err, msg):
    with pytest.raises(err, match=msg):
        ImplicitPRM(**kwargs)


def test_a_value_model_out_of_contract_is_refused():
    class Broken(FakeValueModel):
        """FAKE: values above 1."""

        def score(self, steps):
            return StepScores(np.zeros(len(steps)), np.full(len(steps), 1.5))

    class Short(FakeValueModel):
        """FAKE: one score fewer than steps."""

        def score(self, steps):
            return StepScores(np.zeros(len(steps) - 1), np.zeros(len(steps) - 1))

    with pytest.raises(ValueError, match=r"value_model: expected success values in \[0, 1\], got min 1.5"):
        ImplicitPRM(Broken()).score([TextStep("p", (), "a")])
    with pytest.raises(ValueError, match=r"value_model: expected StepScores for the 2 steps it was given, got 1 scores"):
        ImplicitPRM(Short()).score([TextStep("p", (), "a")])
    with pytest.raises(ValueError, match=r"steps: expected at least one step"):
        ImplicitPRM(FakeValueModel()).score_trajectory("p", [])


# --------------------------------------------------------------------------- a real value model
def test_a_real_minilm_value_model_trained_on_outcomes_only():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from prm_critic.text import MiniLMStepPRM, TextTrainConfig, train_text_prm

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        mc = []  # MC-style soft labels; only the last (exact) one survives outcome_examples
        for i in range(6):
            won = i % 2 == 0
            steps = [f"go to room {i}", "take the knife", "eat the meal" if won else "eat the raw chicken"]
            mc.append(traj(f"Game {i % 3}: cook a meal and eat it.", steps, [0.5, 0.6, float(won)]))
        data = outcome_examples(mc) + prompt_value_examples(mc)
        cfg = TextTrainConfig(freeze_encoder=True, epochs=2, lr=3e-3, seed=0, show_progress=False)
        model = train_text_prm(data, config=cfg, model=MiniLMStepPRM.from_pretrained_encoder(seed=0))
        assert model.meta["training"]["examples"] == 9
        prm = ImplicitPRM(model)
        ex = mc[0]
        out = prm.score_trajectory(ex.prompt, ex.completions)
        v = model.score_trajectory(ex.prompt, ex.completions).success
        v0 = model.score([TextStep(ex.prompt, (), PROMPT_STEP)]).success[0]
        np.testing.assert_allclose(out.success, v, atol=2e-5)
        np.testing.assert_allclose(out.extra[REWARD].sum(), v[-1] - v0, atol=5e-5)
        assert set(out.extra) == {REWARD, VALUE_PREV, "truncated"}
        check_critic(prm, TextStep.prefixes(ex.prompt, ex.completions), atol=5e-5)
    finally:
        torch.set_num_threads(n)


def test_train_prm_outcome_only_trains_the_value_model_on_the_same_split(tmp_path):
    """``benchmarks/agents/train_prm.py --outcome-only``: outcome labels of both files, the same
    held-out games, the prompts' V_0 examples, ``labels`` in the statistics and the model's meta."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from benchmarks.agents import train_prm
    from prm_critic.text import MiniLMStepPRM, write_stepwise_jsonl

    base = [traj(f"Game {g}.", [f"go {g}", "You lost" if g == 1 else "eat"], [0.4, float(g != 1)]) for g in range(4)]
    base.append(traj("Game 0.", ["look", "eat"], [0.5, 0.0]))
    sib = [traj("Game 0.", ["go 0", "You lost"], [0.4, 0.0]), traj("Game 3.", ["go 3", "drop"], [0.4, 0.0]),
           traj("Game 1.", ["go 1", "eat"], [0.4, 1.0])]
    write_stepwise_jsonl(tmp_path / "labels.jsonl", base)
    write_stepwise_jsonl(tmp_path / "sib.jsonl", sib)
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train_prm.main(["--labels", str(tmp_path / "labels.jsonl"), "--extra", str(tmp_path / "sib.jsonl"),
                        "--out", str(tmp_path / "m"), "--epochs", "1", "--freeze-encoder", "--val-last", "2",
                        "--outcome-only"])
        stats = json.loads((tmp_path / "m" / "train_stats.json").read_text())
        # held out: the last 2 trajectories (games 3 and 0) and the siblings of those games
        assert stats["labels"] == "outcome-only" and stats["n_train"] == 3 + 1 and stats["n_val"] == 2
        assert stats["n_prompt_examples"] == 3 and stats["val_sibling_last_steps"]["n"] == 2
        assert {"loss_per_epoch", "train", "val", "config"} <= set(stats)
        model = MiniLMStepPRM.load(tmp_path / "m")
        assert model.meta["labels"] == "outcome-only"
        assert model.meta["training"]["examples"] == 4 + 3  # trajectories + prompt-only examples
        bad = [*sib, traj("Game 2.", ["go 2"], [0.7])]
        write_stepwise_jsonl(tmp_path / "bad.jsonl", bad)
        with pytest.raises(SystemExit, match=r"--outcome-only: .*bad.jsonl: examples\[3\]: the last label .* 0.7"):
            train_prm.main(["--labels", str(tmp_path / "labels.jsonl"), "--extra", str(tmp_path / "bad.jsonl"),
                            "--out", str(tmp_path / "m2"), "--outcome-only"])
    finally:
        torch.set_num_threads(n)


def test_train_prm_trains_on_several_label_files_and_hashes_each(tmp_path):
    """``train_prm.py --labels A --labels B --extra C``: the examples of both label files (in order,
    so ``--val-last`` holds out B's last ones), one SHA-256 per file, and a missing file named."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import hashlib

    from benchmarks.agents import train_prm
    from prm_critic.text import write_stepwise_jsonl

    a = [traj(f"Game {g}.", [f"go {g}", "eat"], [0.4, 1.0]) for g in range(3)]
    b = [traj(f"Hard {g}.", [f"go {g}", "You lost"], [0.2, 0.0]) for g in range(2)]
    sib = [traj("Hard 1.", ["go 1", "eat"], [0.2, 1.0]), traj("Game 0.", ["go 0", "drop"], [0.4, 0.0])]
    for name, exs in (("a.jsonl", a), ("b.jsonl", b), ("sib.jsonl", sib)):
        write_stepwise_jsonl(tmp_path / name, exs)
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train_prm.main(["--labels", str(tmp_path / "a.jsonl"), "--labels", str(tmp_path / "b.jsonl"),
                        "--extra", str(tmp_path / "sib.jsonl"), "--out", str(tmp_path / "m"), "--epochs", "1",
                        "--freeze-encoder", "--val-last", "1"])
        stats = json.loads((tmp_path / "m" / "train_stats.json").read_text())
        # held out: b's last trajectory (Hard 1) and its sibling; trained: 3 + 1 trajectories + Game 0's sibling
        assert stats["n_train"] == 3 + 1 + 1 and stats["n_val"] == 1
        sha = lambda f: hashlib.sha256((tmp_path / f).read_bytes()).hexdigest()  # noqa: E731
        assert stats["labels_sha256"] == {"labels": [sha("a.jsonl"), sha("b.jsonl")], "extra": sha("sib.jsonl")}
        with pytest.raises(SystemExit, match=r"--labels/--extra: .*missing.jsonl: expected a stepwise JSONL file"):
            train_prm.main(["--labels", str(tmp_path / "a.jsonl"), "--labels", str(tmp_path / "missing.jsonl"),
                            "--out", str(tmp_path / "m2")])
    finally:
        torch.set_num_threads(n)
