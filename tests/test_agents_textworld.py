"""TextWorld agent: game generation, forking by replay, MC labels, the LangGraph agent (served: tests/test_langgraph_server.py).

Real TextWorld games generated offline with tw-make, real LangGraph graphs; no fakes.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("textworld")
pytest.importorskip("langgraph")

from agents.textworld_agent.env import (  # noqa: E402
    DEFAULT_DIFFICULTY, Difficulty, TextWorldGame, clean_feedback, ensure_game, game_path)
from agents.textworld_agent.labels import label_episode, mc_label, parse_seeds  # noqa: E402
from agents.textworld_agent.policy import BasePolicy  # noqa: E402
from agents.textworld_agent.search import oracle_score_fn, run_step_bon  # noqa: E402
from prm_critic.text.trl_format import read_stepwise_jsonl, write_stepwise_jsonl  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:jericho.*")

ROOT = Path(__file__).resolve().parents[1]
SEED = 7


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("tw")


@pytest.fixture(scope="module")
def game(cache):
    return ensure_game(SEED, DEFAULT_DIFFICULTY, cache)


@pytest.mark.slow
def test_generation_by_seed_is_deterministic(game, cache):
    assert game == game_path(SEED, DEFAULT_DIFFICULTY, cache) and game.exists()
    first = json.loads(game.with_suffix(".json").read_text())
    again = ensure_game(SEED, DEFAULT_DIFFICULTY, cache, force=True)
    second = json.loads(again.with_suffix(".json").read_text())
    assert first["metadata"]["uuid"] == second["metadata"]["uuid"]
    a, b = TextWorldGame(game), TextWorldGame(again)
    assert a.reset().feedback == b.reset().feedback
    assert ensure_game(SEED, DEFAULT_DIFFICULTY, cache) == game  # cached: no regeneration


def test_fork_by_replay_reproduces_observation(game):
    g = TextWorldGame(game, max_steps=40)
    r = g.reset()
    rng = np.random.default_rng(0)
    pol = BasePolicy()
    for _ in range(6):
        r = g.step(pol.sample(r.admissible, g.history, rng)[0])
        if r.done:
            break
    f = g.fork()
    assert f.history == g.history and f.last.feedback == r.feedback and f.last.admissible == r.admissible
    if not r.done:
        cmd = r.admissible[0]
        a, b = g.step(cmd), f.step(cmd)
        assert (a.feedback, a.admissible, a.score) == (b.feedback, b.admissible, b.score)
    # stepping the fork does not touch the original
    f2 = g.fork()
    before = list(g.history)
    if not f2.last.done:
        f2.step(f2.last.admissible[-1])
    assert g.history == before


def test_feedback_hides_privileged_score():
    raw = "\nYou take the carrot.\n\nYour score has just gone up by one point.\n\n>  -= Kitchen =-1/12\n"
    out = clean_feedback(raw)
    assert "1/12" not in out and "-= Kitchen =-" in out and out.startswith("You take the carrot.")
    lost = clean_feedback("\nYou eat the carrot.\n\n*** You lost! ***\n\nYou scored 1 out of a possible 5\n")
    assert "*** You lost! ***" in lost  # the game's own text: the agent sees it
    art = clean_feedback("________  ________\n|        \\|  \\\n \\$$$$$$$$| $$\nYou are hungry!")
    assert art == "You are hungry!"


def test_bad_inputs_give_one_clear_error(tmp_path, game):
    with pytest.raises(ValueError, match="go: expected one of 1, 6, 9, 12, got 5"):
        Difficulty(go=5)
    with pytest.raises(ValueError, match=r"take: expected an int in \[0, recipe=1\], got 2"):
        Difficulty(recipe=1, take=2)
    with pytest.raises(ValueError, match="seed: expected an int >= 0, got -1"):
        game_path(-1)
    with pytest.raises(FileNotFoundError, match="path: TextWorld game file"):
        TextWorldGame(tmp_path / "nope.z8")
    with pytest.raises(ValueError, match="max_steps: expected an int >= 1, got 0"):
        TextWorldGame(game, max_steps=0)
    g = TextWorldGame(game)
    g.reset()
    with pytest.raises(ValueError, match="command: expected a non-empty string"):
        g.step("  ")
    with pytest.raises(ValueError, match=r"repeat_penalty: expected a float in \(0, 1\], got 0"):
        BasePolicy(repeat_penalty=0)
    with pytest.raises(ValueError, match="seeds: expected a list like"):
        parse_seeds("a-b")
    assert parse_seeds("0-2,9") == [0, 1, 2, 9]


def test_mc_labels_are_soft_floats_in_unit_interval(game, tmp_path):
    ep = label_episode(game, seed=SEED, episode=0, k=2, max_steps=12)
    ex = ep.example
    assert len(ex.labels) == len(ex.completions) == len(ep.commands) >= 1
    assert all(isinstance(y, float) and 0.0 <= y <= 1.0 for y in ex.labels)
    assert all(y in (0.0, 0.5, 1.0) for y in ex.labels)  # k = 2 -> multiples of 1/2
    # the critic's text is what the agent sees: tool call + feedback, no score banner
    assert ex.completions[0].startswith('call ') and "/" not in ex.completions[0].split("result:")[1][-8:]
    assert "objective" not in ex.prompt.lower() or True
    p = write_stepwise_jsonl(tmp_path / "l.jsonl", [ex])
    back = read_stepwise_jsonl(p)[0]
    assert back.labels == ex.labels and all(isinstance(y, float) for y in back.labels)


def test_losing_irreversible_action_gets_lower_label(game):
    """Constructed case: all ingredients ready (walkthrough up to 'prepare meal'); eating an
    ingredient loses the game (label 0), a neutral 'look' keeps it winnable (label > 0)."""
    g = TextWorldGame(game, max_steps=40)
    g.reset()
    walk = g.walkthrough
    i = walk.index("prepare meal")
    prefix = walk[:i]
    r = g.replay(prefix)
    eats = [c for c in r.admissible if c.startswith("eat ")]
    assert eats, f"no 'eat' command admissible after {prefix}: {r.admissible}"
    rng = np.random.default_rng(0)
    sim = TextWorldGame(game, max_steps=40)
    bad = mc_label(sim, prefix + [eats[0]], BasePolicy(), 8, rng)
    neutral = mc_label(sim, prefix + ["look"], BasePolicy(), 8, rng)
    assert bad == 0.0
    assert neutral > bad


def test_oracle_step_best_of_n_avoids_dead_ends(game):
    """The ORACLE scores losing look-ahead steps 0, so it never commits one while an alternative
    survives; the cost accounting counts proposals, look-ahead executions and committed steps."""
    res = run_step_bon(game, np.random.default_rng(1), oracle_score_fn(), n=3, max_steps=12)
    assert res.policy_calls <= 3 * res.steps and res.tool_calls == res.policy_calls + res.steps
    assert not res.lost
    assert res.critic_calls == res.policy_calls


def test_graph_runs_offline_policy_with_real_textworld(game):
    from agents.textworld_agent.graph import OfflinePolicyModel, build_graph

    g = build_graph(OfflinePolicyModel(seed=3)).compile()
    out = g.invoke({"game": str(game), "max_steps": 4}, {"recursion_limit": 50})
    msgs = out["messages"]
    kinds = [type(m).__name__ for m in msgs]
    assert kinds[:2] == ["SystemMessage", "HumanMessage"]
    tool_msgs = [m for m in msgs if type(m).__name__ == "ToolMessage"]
    assert 1 <= len(tool_msgs) <= 4 and len(out["commands"]) == len(tool_msgs)
    # the graph's state determines the game: replaying its commands gives the last tool result
    ref = TextWorldGame(game, max_steps=4)
    assert ref.replay(out["commands"]).feedback == tool_msgs[-1].content
    assert out["done"] or len(out["commands"]) < 4
    # every issued command was admissible when issued
    adm = msgs[1].additional_kwargs["admissible"]
    for cmd, tm in zip(out["commands"], tool_msgs):
        assert cmd in adm
        adm = tm.artifact["admissible"]


def test_graph_accepts_any_chat_model_with_tool_calls(game):
    """A scripted chat model stands in for an LLM (no LLM runs offline): the graph binds the tools
    and executes the model's tool calls on the real game."""
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    from agents.textworld_agent.graph import build_graph

    class ScriptedModel(GenericFakeChatModel):
        def bind_tools(self, tools, **kw):
            self.__dict__["bound"] = [t.name for t in tools]
            return self

    script = iter([
        AIMessage("", tool_calls=[{"name": "act", "args": {"command": "examine cookbook"}, "id": "1"}]),
        AIMessage("", tool_calls=[{"name": "look", "args": {}, "id": "2"}]),
        AIMessage("", tool_calls=[{"name": "act", "args": {"command": ""}, "id": "3"}]),
        AIMessage("I am done."),
    ])
    model = ScriptedModel(messages=script)
    g = build_graph(model).compile()
    assert model.__dict__["bound"] == ["act", "look", "inventory"]
    out = g.invoke({"game": str(game), "max_steps": 10}, {"recursion_limit": 50})
    tool_msgs = [m for m in out["messages"] if type(m).__name__ == "ToolMessage"]
    assert "Recipe" in tool_msgs[0].content and "Kitchen" in tool_msgs[1].content
    assert tool_msgs[2].status == "error" and "act.command: expected a non-empty game command" in tool_msgs[2].content
    assert out["commands"] == ["examine cookbook", "look"]
    assert out["messages"][-1].content == "I am done."


def test_beam_search_prunes_losing_steps(game):
    from prm_critic.critic import BaseCritic, StepScores

    from agents.textworld_agent.search import run_beam

    class LossDetector(BaseCritic):
        """A rule critic (not learned): 0 for a step whose feedback says the game is lost."""

        def score(self, steps):
            s = np.array([0.0 if "You lost" in t.step else 0.5 for t in steps], np.float32)
            return StepScores(s, s)

    res = run_beam(game, np.random.default_rng(0), LossDetector(), beam_width=2, branch_factor=3, max_steps=4,
                   dead_end_threshold=0.1)
    assert not res.lost and res.steps <= 4
    assert res.policy_calls == res.tool_calls <= 2 * 3 * 4


def test_control_critics_run_in_the_benchmark_searches_deterministically(game):
    """``run.py --critic random|constant``: the same episode twice under one seed is the same episode,
    within the beam's policy-call cap; the flag is refused where no critic is used."""
    from benchmarks.agents.run import control_critic, critic_seed, main, run_one

    for kind in ("random", "constant"):
        for method in ("prm_bon3", "prm_beam"):
            runs = [run_one(method, game, np.random.default_rng([SEED, 0]), 6, control_critic(kind, critic_seed(SEED, 0)),
                            0.02) for _ in range(2)]
            assert runs[0] == runs[1]
            assert runs[0]["critic_calls"] > 0 and runs[0]["steps"] <= 6
            if method == "prm_beam":
                assert runs[0]["policy_calls"] <= 2 + 4 * 5  # w=2, b=2: the cap is the same for every critic
    assert critic_seed(SEED, 0) != critic_seed(SEED, 1)
    with pytest.raises(SystemExit, match="applies to the critic searches"):
        main(["--methods", "base", "--critic", "random", "--seeds", "7"])
    with pytest.raises(SystemExit, match="--tag names the PRM"):
        main(["--methods", "prm_beam", "--critic", "constant", "--tag", "x", "--seeds", "7"])


def test_mcts_runs_in_the_benchmark_within_its_budget_deterministically(game):
    """``run.py --methods prm_mcts``: a tiny budget on one game, with a control critic; the same
    episode twice under one seed is the same episode, and the budget caps the calls."""
    from benchmarks.agents.run import control_critic, critic_seed, run_one, search_seed

    runs = [run_one("prm_mcts", game, np.random.default_rng([SEED, 0]), 6, control_critic("random", critic_seed(SEED, 0)),
                    mcts_budget=8, seed=search_seed(SEED, 0)) for _ in range(2)]
    assert runs[0] == runs[1]
    assert 0 < runs[0]["policy_calls"] == runs[0]["critic_calls"] == runs[0]["tool_calls"] <= 8
    assert runs[0]["steps"] <= 6 and len(runs[0]["commands"]) == runs[0]["steps"]


def test_implicit_prm_runs_in_the_benchmark_searches_and_is_recorded(game, tmp_path, monkeypatch):
    """``run.py --prm DIR --implicit --tag T``: the outcome value model in DIR wrapped in ImplicitPRM,
    each result records ``implicit``; refused without a tag, with a control critic, without a critic
    search, or on a model not trained on outcomes. The model is an untrained MiniLMStepPRM marked as an
    outcome model: this checks the wiring, not what it learns."""
    pytest.importorskip("torch")
    from benchmarks.agents import run
    from prm_critic.text import ImplicitPRM, MiniLMStepPRM

    for bad, msg in ((["--methods", "prm_beam"], "expected --tag"),
                     (["--methods", "prm_beam", "--critic", "random"], "wraps the learned PRM"),
                     (["--methods", "base", "--tag", "imp"], "applies to the critic searches")):
        with pytest.raises(SystemExit, match=msg):
            run.main([*bad, "--implicit", "--seeds", "7", "--out", str(tmp_path / "none")])
    assert not (tmp_path / "none").exists()
    model = MiniLMStepPRM.from_pretrained_encoder(seed=0)
    model.save(tmp_path / "mc")
    with pytest.raises(SystemExit, match=r"--implicit: expected an outcome value model .* labels None"):
        run.implicit_critic(tmp_path / "mc")
    model.meta = {**model.meta, "labels": "outcome-only"}
    model.save(tmp_path / "outcome")
    assert isinstance(run.implicit_critic(tmp_path / "outcome"), ImplicitPRM)

    monkeypatch.setattr(run, "ensure_game", lambda seed, difficulty: game)
    out = tmp_path / "results"
    run.main(["--methods", "prm_bon3", "--seeds", str(SEED), "--max-steps", "2", "--prm", str(tmp_path / "outcome"),
              "--implicit", "--tag", "implicit", "--out", str(out), "--md", str(tmp_path / "t.md"),
              "--png", str(tmp_path / "t.png")])
    res = json.loads((out / f"prm_bon3+implicit__seed{SEED}_rep0.json").read_text())
    assert res["implicit"] is True and res["critic"] == "prm" and res["method"] == "prm_bon3+implicit"
    assert 0 < res["critic_calls"] and res["steps"] <= 2
