"""The forkable text environment protocol (prm_critic.text.envs): exact forks on every kind of
environment -- a user's own (written here), TextWorld games made by tw-make, TextWorldExpress games
by name -- and a few steps of TextWorldExpress CookingWorld, TWC and Coin.

Real TextWorld and TextWorldExpress (its Java engine); the small environments below are a user's own
environments, not fakes of a real one.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from prm_critic.text.envs import (
    ForkMismatchError, SamplingPolicy, TextEnv, TextEnvSpec, TextStepResult, check_fork, make_text_env,
    parse_env_spec, register_text_env, text_env_kinds,
)
from prm_critic.validate import ArgumentError
from text_env_helpers import Corridor, need_twx

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:jericho.*")


class NoisyCorridor(Corridor):
    """A user's environment that is NOT deterministic (a draw from an unseeded generator in its text):
    replaying its history cannot fork it exactly, and check_fork must say so."""

    def _obs(self, command, text, won=False, lost=False):
        res = super()._obs(command, text, won, lost)
        return TextStepResult(res.command, res.feedback + f" A draught: {random.random():.6f}.", res.admissible,
                              res.done, res.won, res.lost, res.score, res.max_score)

    def _spawn(self):
        return NoisyCorridor(self.seed, n=self.n, max_steps=self.max_steps)


class SharedCopy(Corridor):
    """A user's state copy that is wrong: it copies the room but forgets the key."""

    def _copy_state(self, other):
        other.room = self.room
        return True

    def _spawn(self):
        return SharedCopy(self.seed, n=self.n, max_steps=self.max_steps)


def _random_walk(env: TextEnv, n: int, seed: int) -> list[str]:
    """``n`` commands a uniform policy issues from the current state on a fork (not on ``env``)."""
    f = env.fork()
    rng = np.random.default_rng(seed)
    out = []
    try:
        for _ in range(n):
            if f.last.done:
                break
            c = SamplingPolicy().sample(f.valid_actions(), f.history, rng)[0]
            out.append(c)
            f.step(c)
    finally:
        f.close()
    return out


def _forks_exactly_on_and_off_the_winning_path(env: TextEnv) -> None:
    """Forks along the game's own winning commands (which win), then after random prefixes with
    random continuations (dead ends included); closes ``env``."""
    try:
        env.reset()
        walk = list(env.walkthrough)
        assert walk, f"{env!r}: the game records its winning commands"
        for t in (0, len(walk) // 2, len(walk) - 1):
            check_fork(env, walk[:t], walk[t:])
        assert env.won
        for seed in range(2):
            env.reset()
            prefix = _random_walk(env, 6, seed)
            env.replay(prefix)
            check_fork(env, prefix, _random_walk(env, 15, 70 + seed))
    finally:
        env.close()


# ---------------------------------------------------------------- a user's own environment
@pytest.mark.parametrize("copyable", [False, True], ids=["replay", "state-copy"])
def test_user_env_forks_exactly(copyable):
    env = Corridor(3, copyable=copyable)
    env.reset()
    path = env.winning_path()
    for t in range(len(path)):
        assert check_fork(env, path[:t], path[t:]) == len(path) - t
    assert env.won and env.done and env.last.score == 2.0
    for seed in range(5):  # random prefixes and continuations, losing ones included
        env.reset()
        prefix = _random_walk(env, 6, seed)
        env.replay(prefix)
        check_fork(env, prefix, _random_walk(env, 20, 100 + seed))


def test_fork_is_independent_of_the_original():
    env = Corridor(1)
    env.replay(["forward"])
    f = env.fork()
    f.step("forward")
    f.step("forward")
    assert env.history == ["forward"] and env.last.feedback.endswith("room 1.")
    assert f.history == ["forward", "forward", "forward"]


def test_check_fork_catches_a_nondeterministic_env_and_a_wrong_state_copy():
    env = NoisyCorridor(2)
    with pytest.raises(ForkMismatchError, match="NoisyCorridor"):
        check_fork(env, ["forward"], ["forward", "back"])
    bad = SharedCopy(0)
    path = bad.winning_path()
    t = path.index("take key") + 1
    with pytest.raises(ForkMismatchError, match="SharedCopy"):
        check_fork(bad, path[:t], path[t:])


def test_the_protocol_rules():
    env = Corridor(0, max_steps=2)
    with pytest.raises(RuntimeError, match="before reset"):
        env.step("forward")
    with pytest.raises(RuntimeError, match="before reset"):
        env.fork()
    env.reset()
    with pytest.raises(ArgumentError, match="command"):
        env.step("  ")
    env.step("look")
    r = env.step("look")
    assert r.done and not r.won and not r.lost  # out of steps: over, not won
    assert env.valid_actions() == []
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step("look")
    assert env.reset().admissible == tuple(sorted(env.reset().admissible))


def test_user_env_by_name_through_the_registry():
    register_text_env("corridor-test", lambda game, seed, options, max_steps: Corridor(
        seed, n=int(options.get("n", 5)), max_steps=max_steps), describe="a test corridor", replace=True)
    spec = parse_env_spec("corridor-test:plain?n=7")
    assert spec == TextEnvSpec("corridor-test", "plain", (("n", 7),)) and str(spec) == "corridor-test:plain?n=7"
    env = make_text_env(spec, seed=4, max_steps=12)
    assert isinstance(env, Corridor) and env.n == 7 and env.max_steps == 12
    assert "corridor-test" in text_env_kinds()
    with pytest.raises(ArgumentError, match="already registered"):
        register_text_env("corridor-test", lambda *a: Corridor())
    with pytest.raises(ArgumentError, match="did you mean 'twx'"):
        parse_env_spec("twz:coin")
    with pytest.raises(ArgumentError, match="kind:game"):
        parse_env_spec("coin")
    with pytest.raises(ArgumentError, match="key=value"):
        parse_env_spec("twx:coin?level")
    register_text_env("not-an-env", lambda *a: object(), replace=True)
    with pytest.raises(TypeError, match="expected a TextEnv"):
        make_text_env("not-an-env:x")


# ---------------------------------------------------------------- TextWorld
@pytest.fixture(scope="module")
def tw_games(tmp_path_factory):
    pytest.importorskip("textworld")
    from prm_critic.text.envs import ensure_tw_game

    cache = tmp_path_factory.mktemp("tw")
    return {"cooking": ensure_tw_game("tw-cooking", 3, {"recipe": 2, "take": 1, "cook": True, "open": True},
                                      cache_dir=cache),
            "treasure": ensure_tw_game("tw-treasure_hunter", 3, {"level": 5}, cache_dir=cache)}


@pytest.mark.slow
@pytest.mark.parametrize("which", ["cooking", "treasure"])
def test_textworld_forks_exactly(tw_games, which):
    from prm_critic.text.envs import TextWorldEnv

    _forks_exactly_on_and_off_the_winning_path(TextWorldEnv(tw_games[which], max_steps=40))


def test_textworld_spec_refuses_seeds_of_a_single_file(tw_games):
    with pytest.raises(ArgumentError, match="one game"):
        make_text_env(f"textworld:{tw_games['cooking']}", seed=2)
    env = make_text_env(f"textworld:{tw_games['cooking']}", seed=0, max_steps=5)
    assert env.reset().feedback
    env.close()


# ---------------------------------------------------------------- TextWorldExpress
@pytest.mark.parametrize("game", ["cookingworld", "twc", "coin"])
def test_twx_plays_a_few_steps_and_wins_on_its_gold_path(game):
    need_twx()
    env = make_text_env(f"twx:{game}", seed=11, max_steps=80)
    try:
        r = env.reset()
        assert r.feedback and r.admissible and not r.done and env.walkthrough
        for c in env.walkthrough:
            assert c in env.valid_actions(), f"{game}: gold command {c!r} not among the valid actions"
            r = env.step(c)
            if r.done:
                break
        assert r.won and not r.lost and r.score == 1.0
    finally:
        env.close()


@pytest.mark.parametrize("game", ["cookingworld", "twc", "coin"])
def test_twx_forks_exactly(game):
    need_twx()
    _forks_exactly_on_and_off_the_winning_path(make_text_env(f"twx:{game}", seed=20004, max_steps=60))


def test_twx_refuses_unknown_games_and_seeds_outside_the_folds():
    with pytest.raises(ArgumentError, match="did you mean 'coin'"):
        make_text_env("twx:coins", seed=1)
    with pytest.raises(ArgumentError, match="train 0-999"):
        make_text_env("twx:coin", seed=5000)


def test_the_docs_example_of_a_users_env_runs():
    """docs/readme/agents.md's own-environment example, as written."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "readme" / "agents.md").read_text()
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "class Counter(TextEnv)" in b]
    ns: dict = {}
    exec(compile(block, "docs/readme/agents.md", "exec"), ns)
    env = make_text_env("counter:any", seed=0, max_steps=6)
    assert env.replay(["up", "up", "up"]).won


def test_twx_without_java_says_what_to_install(monkeypatch):
    """No Java on PATH (simulated by hiding it from the lookup): one error naming the runtime and
    the package to install, before any engine starts."""
    import prm_critic.text.envs.twx as twx

    monkeypatch.setattr(twx.shutil, "which", lambda name: None)
    with pytest.raises(twx.JavaMissingError, match="needs a Java runtime .* default-jre-headless"):
        make_text_env("twx:coin", seed=1)
