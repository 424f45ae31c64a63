"""TextWorld cooking benchmark: success rate vs policy calls on held-out games.

Methods (see agents/textworld_agent/search.py for the cost accounting):

  base          the offline base policy alone (REPS episodes per game)
  outcome_bon4  outcome-only best-of-4: up to 4 base episodes, stop at the first won
  prm_bon3      learned PRM best-of-3 at every step (one-step look-ahead on forked states)
  prm_beam      learned PRM beam search (width 2, branch 2) with dead-end pruning,
                prm_critic.langgraph.build_beam_search_graph
  prm_beam_noprune  the same beam without pruning (threshold 0), so pruning's savings are measured
  prm_mcts      Monte Carlo tree search with the PRM's step scores as values (PUCT, branch 2, at most
                --mcts-budget policy calls), prm_critic.langgraph.MCTSSearch
  oracle_bon3   ORACLE best-of-3 at every step on privileged intermediate_reward (upper reference)
  gold          ORACLE: the game's gold path (its walkthrough), no policy call (upper reference)

The critic of the critic searches (prm_bon3, prm_beam, prm_beam_noprune, prm_mcts) is the learned PRM
(``--critic prm``, default) or an uninformed control in the same search, with the same policy seeds
and the same call budget: ``--critic random`` (prm_critic.RandomCritic: independent uniform scores)
or ``--critic constant`` (prm_critic.ConstantCritic: 0.5, ties broken at random). A control's rows
are named ``<method>+random`` / ``<method>+constant`` and record ``critic`` and ``critic_seed``.

``--implicit`` wraps the ``--prm`` model in the implicit PRM (prm_critic.text.ImplicitPRM): the model
must be an outcome value model (``train_prm.py --outcome-only``), ``--tag`` names the rows (e.g.
``--tag implicit96``) and each result records ``"implicit": true`` (false for every other critic
search). The searches rank by and prune on the ``success`` head, which the implicit PRM sets to the
value model's value ``V_t`` (its step rewards ``V_t - V_{t-1}`` are the ``progress`` head).

Resumable: one JSON per (method, game seed, rep) under --out, written atomically; existing ones
are skipped. ``--report`` rebuilds the markdown table and the PNG from what is there;
``python -m benchmarks.agents.report --render`` writes ``docs/agents_benchmark.md`` from the same files.

    python -m benchmarks.agents.run --methods base,outcome_bon4,oracle_bon3 --seeds 1000-1007
    python -m benchmarks.agents.run --methods prm_bon3,prm_beam --seeds 1000-1007 --prm .cache/textworld/prm
    python -m benchmarks.agents.run --report --seeds 1000-1007
    python -m benchmarks.agents.run --methods base --recipe 2 --take 2 --seeds 3000-3007   # harder games
    python -m benchmarks.agents.run --methods prm_beam --critic random --seeds 2000-2015 --dead-end-threshold 0.02
    python -m benchmarks.agents.run --methods prm_mcts --critic random --seeds 2000-2015 --mcts-budget 160
    python -m benchmarks.agents.run --methods prm_beam,prm_mcts --seeds 2000-2015 --prm .cache/textworld/prm_outcome \
        --implicit --tag implicit96

Games by type and name: ``--env SPEC`` plays the games of any forkable text environment spec
(``prm_critic.text.envs``), one per seed, e.g. TextWorld treasure hunts or TextWorldExpress games::

    python -m benchmarks.agents.run --env "textworld:tw-treasure_hunter?level=5" --methods base --seeds 0-3
    python -m benchmarks.agents.run --env twx:coin --methods base,prm_beam --critic random --seeds 20000-20003

Game types (``plan.py``: each type's spec and its label / tune / test seeds, fixed before the runs):
``--type NAME --split test`` plays that type's test seeds (``--seeds`` must lie in the split), writes
under ``benchmarks/agents/results/types/NAME/SPLIT`` and records ``type`` and ``split``::

    python -m benchmarks.agents.run --type twx-coin --split test --methods base,outcome_bon4,gold --reps 1
    python -m benchmarks.agents.run --type twx-coin --split test --methods prm_beam,prm_mcts \
        --prm benchmarks/agents/prms/twx-coin --tag twx-coin
    python -m benchmarks.agents.run --type twx-coin --split test --methods prm_beam,prm_mcts --critic random

MCTS settings (``--mcts-exploration``, ``--mcts-aggregate``, ``--mcts-branch``, ``--mcts-selection``,
``--mcts-prior``)
are recorded in each prm_mcts result, and non-default ones tag its row (``prm_mcts+PRM+c2-mean-b3-puct``,
``prm_mcts+random+c2-mean-b3-puct``); tune them on ``--split tune`` only.

Each result records its games' tag (the cooking difficulty's, or the spec's, with the spec itself
under ``env``); the report counts only those of the chosen one.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
import functools
import os
import sys
import time
import zlib
from pathlib import Path

import numpy as np

from agents.textworld_agent.env import DEFAULT_DIFFICULTY, ensure_game
from agents.textworld_agent.labels import parse_seeds
from agents.textworld_agent.policy import BasePolicy
from agents.textworld_agent.search import (
    EpisodeResult, open_game, oracle_score_fn, prm_score_fn, run_base, run_gold, run_outcome_bon, run_step_bon)
from agents.textworld_agent.text import step_text
from benchmarks.agents.plan import SPLITS, TYPES, game_type, split_seeds
from benchmarks.agents.report import METHODS, plot, summary, table as summary_table
from benchmarks.report_io import write_json
from prm_critic.aggregate import AGGREGATES

DEFAULT_OUT = "benchmarks/agents/results"
DEFAULT_MD = "benchmarks/agents/results/table.md"
#: the methods that use a critic (``--critic`` chooses it)
CRITIC_METHODS = ("prm_bon3", "prm_beam", "prm_beam_noprune", "prm_mcts")
#: ``--critic`` choices: the learned PRM, or an uninformed control
CRITICS = ("prm", "random", "constant")


def control_critic(kind: str, seed: int):
    """The uninformed control critic ``kind`` (``"random"`` or ``"constant"``) for one episode."""
    from prm_critic.critic import ConstantCritic, RandomCritic

    if kind == "random":
        return RandomCritic(seed=seed)
    if kind == "constant":
        return ConstantCritic(0.5, seed=seed)
    raise ValueError(f"kind: expected 'random' or 'constant', got {kind!r}")


def implicit_critic(prm_dir: str | os.PathLike):
    """The implicit PRM on the outcome value model saved in ``prm_dir`` (``train_prm.py --outcome-only``);
    a model trained on other labels is refused."""
    from prm_critic.text.implicit import ImplicitPRM
    from prm_critic.text.prm import MiniLMStepPRM

    model = MiniLMStepPRM.load(prm_dir)
    labels = model.meta.get("labels")
    if labels != "outcome-only":
        raise SystemExit(f"--implicit: expected an outcome value model (train_prm.py --outcome-only) in --prm "
                         f"{str(prm_dir)!r}, got one trained on labels {labels!r}")
    return ImplicitPRM(model)


def critic_seed(seed: int, rep: int) -> int:
    """A control critic's seed for game ``seed``, episode ``rep`` (distinct per episode)."""
    return zlib.crc32(f"critic:{seed}:{rep}".encode())


def search_seed(seed: int, rep: int) -> int:
    """The seed of prm_mcts's tie-breaks for game ``seed``, episode ``rep`` (distinct per episode)."""
    return zlib.crc32(f"search:{seed}:{rep}".encode())


#: how the searches' proposals draw: one generator per expanded state, seeded by the episode's
#: generator and the state's commands (prm_critic.langgraph.TextEnvExpand), so a rerun takes the same
#: path; rows without this field drew from one generator shared by the beam's threads (not reproducible)
EXPAND_RNG = "per-state"
#: prm_beam_noprune's dead-end threshold: scores lie in [0, 1], so a cut at 0 drops nothing
NO_PRUNING = 0.0
#: prm_mcts's default policy-call budget: the beam's cap (w=2, b=2 to depth 40 stops by 158 calls)
MCTS_BUDGET = 160


@dataclass(frozen=True)
class MCTSSettings:
    """prm_mcts's knobs (``--mcts-*``): expansion width, exploration constant, value aggregation,
    selection rule (``"puct"`` uses a prior, ``"uct"`` none), the prior's source (``"policy"``:
    uniform for the base policy; ``"critic"``: the PRM's step scores)."""

    branch: int = 2
    exploration: float = 1.0
    aggregate: str = "last"
    selection: str = "puct"
    prior: str = "policy"

    @property
    def tag(self) -> str:
        """The rows' tag of non-default settings (``""`` for the defaults), e.g. ``c2-mean-b3-uct``."""
        if self == MCTSSettings():
            return ""
        tag = f"c{self.exploration:g}-{self.aggregate}-b{self.branch}-{self.selection}"
        return tag + ("" if self.prior == "policy" else f"-{self.prior}prior")


#: the search methods, dispatched through prm_critic.langgraph's registry of searches: method ->
#: (registered search, its config fields from run_one's settings); every search also gets
#: max_depth=max_steps and the game's is_terminal / is_lost (run_search). MCTS: max_iterations
#: 2 * budget + 1, which the budget always reaches first (agents/textworld_agent/search.py, run_mcts).
SEARCH_METHODS = {
    "prm_beam": ("beam", lambda s: dict(beam_width=2, branch_factor=2, aggregate="last",
                                        dead_end_threshold=s["dead_end_threshold"], on_all_pruned=s["on_all_pruned"])),
    "prm_beam_noprune": ("beam", lambda s: dict(beam_width=2, branch_factor=2, aggregate="last",
                                                dead_end_threshold=NO_PRUNING)),
    "prm_mcts": ("mcts", lambda s: dict(branch_factor=s["mcts"].branch, policy_budget=s["mcts_budget"],
                                        max_iterations=2 * s["mcts_budget"] + 1, aggregate=s["mcts"].aggregate,
                                        exploration=s["mcts"].exploration, selection=s["mcts"].selection,
                                        seed=s["seed"], prior=s["mcts"].prior)),
}


def run_search(method: str, path, rng: np.random.Generator, critic, max_steps: int, policy=None,
               **settings) -> EpisodeResult:
    """One episode of a search method: the registered search of ``SEARCH_METHODS[method]`` over the
    game's ``TextEnvExpand``. ``dead_ends_avoided``: the candidates a search pruned as dead ends where
    it reports them (the beam), else the proposals that lost the game, less the answer's own."""
    from prm_critic.langgraph import TextEnvExpand, get_search

    name, fields = SEARCH_METHODS[method]
    sim = open_game(path, max_steps)
    try:
        ex = TextEnvExpand(sim, policy or BasePolicy(), int(rng.integers(2**63)), step_text=step_text)
        search = get_search(name).build(ex, critic, max_depth=max_steps, is_terminal=ex.is_won, is_lost=ex.is_lost,
                                        **fields(settings))
        out = search.invoke({"prompt": ex.prompt, "root": ex.root})
        st = out.state
        avoided = out.stats.get("pruned_dead_end", ex.lost - int(bool(st["lost"])))
        return EpisodeResult(bool(st["won"]), bool(st["lost"]), len(st["commands"]), out.policy_calls, ex.tool_calls,
                             out.critic_calls, avoided, list(st["commands"]), out.stop_reason)
    finally:
        sim.close()


def run_one(method: str, path, rng: np.random.Generator, max_steps: int, critic=None,
            dead_end_threshold: float = 0.05, on_all_pruned: str = "keep_best", policy=None, *,
            mcts_budget: int = MCTS_BUDGET, seed: int = 0, mcts: MCTSSettings = MCTSSettings()) -> dict:
    if method == "base":
        r = run_base(path, rng, max_steps=max_steps, policy=policy)
    elif method == "outcome_bon4":
        r = run_outcome_bon(path, rng, n=4, max_steps=max_steps, policy=policy)
    elif method == "prm_bon3":
        r = run_step_bon(path, rng, prm_score_fn(critic), n=3, max_steps=max_steps, policy=policy)
    elif method == "oracle_bon3":
        r = run_step_bon(path, rng, oracle_score_fn(), n=3, max_steps=max_steps, policy=policy)
    elif method in SEARCH_METHODS:
        r = run_search(method, path, rng, critic, max_steps, policy, dead_end_threshold=dead_end_threshold,
                       on_all_pruned=on_all_pruned, mcts_budget=mcts_budget, seed=seed, mcts=mcts)
    elif method == "gold":
        r = run_gold(path, rng, max_steps=max_steps)
    else:
        raise ValueError(f"method: expected one of {METHODS}, got {method!r}")
    return r.to_dict()


def report(out: Path, seeds, md: Path, png: Path, command: str, tag: str = DEFAULT_DIFFICULTY.tag) -> str:
    from benchmarks.agents.report import load_results

    rows = summary(load_results(out, seeds, tag))
    if rows and png is not None:
        plot(rows, seeds, png, tag)
    return summary_table(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--seeds", default=None, help="held-out game seeds (never used for labels; default 1000-1007, "
                                                  "with --type all of the split's seeds)")
    ap.add_argument("--type", default=None, choices=sorted(TYPES),
                    help="a game type of plan.py: its environment spec, and seeds from its --split")
    ap.add_argument("--split", default="test", choices=SPLITS[1:],
                    help="--type: the seeds played: 'tune' (settings are tuned here) or 'test' (reported)")
    ap.add_argument("--reps", type=int, default=4, help="episodes per game for the base policy")
    ap.add_argument("--max-steps", type=int, default=40)
    ap.add_argument("--prm", default=".cache/textworld/prm", help="trained MiniLMStepPRM folder")
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--md", default=DEFAULT_MD)
    ap.add_argument("--png", default="docs/agents_benchmark.png")
    ap.add_argument("--dead-end-threshold", type=float, default=0.05, help="prm_beam: prune steps scoring below it")
    ap.add_argument("--on-all-pruned", default="keep_best", choices=("keep_best", "stop"),
                    help="prm_beam: when every candidate scores under the threshold, keep the best or stop")
    ap.add_argument("--mcts-budget", type=int, default=MCTS_BUDGET,
                    help="prm_mcts: policy calls per episode at most (default %(default)s)")
    ap.add_argument("--mcts-branch", type=int, default=MCTSSettings.branch, help="prm_mcts: expansion width")
    ap.add_argument("--mcts-exploration", type=float, default=MCTSSettings.exploration,
                    help="prm_mcts: exploration constant (c_puct / c_uct)")
    ap.add_argument("--mcts-aggregate", default=MCTSSettings.aggregate, choices=sorted(AGGREGATES),
                    help="prm_mcts: how a path's step scores become its value")
    ap.add_argument("--mcts-selection", default=MCTSSettings.selection, choices=("puct", "uct"),
                    help="prm_mcts: puct (a prior) or uct (no prior)")
    ap.add_argument("--mcts-prior", default=MCTSSettings.prior, choices=("policy", "critic"),
                    help="prm_mcts with puct: the prior from the policy (uniform here) or the PRM's step scores")
    ap.add_argument("--env", default=None,
                    help="games: an environment spec, one game per seed, e.g. 'twx:coin', 'twx:cookingworld', "
                         "'textworld:tw-treasure_hunter?level=5' (default: TextWorld cooking, --recipe/--take)")
    ap.add_argument("--env-module", default=None, help="a module to import first (it registers your environment kind)")
    ap.add_argument("--recipe", type=int, default=None,
                    help=f"cooking games: ingredients in the recipe (tw-cooking --recipe; default {DEFAULT_DIFFICULTY.recipe})")
    ap.add_argument("--take", type=int, default=None,
                    help=f"cooking games: ingredients to find (tw-cooking --take; default {DEFAULT_DIFFICULTY.take})")
    ap.add_argument("--policy", default="hand", choices=("hand", "llm"),
                    help="base policy: the hand-weighted sampler, or a real chat model served locally "
                         "(LLMPolicy; method names get the tag 'llm')")
    ap.add_argument("--llm-model", default="smollm2", help="--policy llm: GGUF file or 'smollm2' (packaged)")
    ap.add_argument("--tag", default="", help="suffix for PRM method names, e.g. 'mc+siblings' (which PRM)")
    ap.add_argument("--critic", default="prm", choices=CRITICS,
                    help="critic of prm_bon3 / prm_beam / prm_beam_noprune / prm_mcts: the learned PRM (--prm), or an "
                         "uninformed control (method names get the tag 'random' / 'constant')")
    ap.add_argument("--implicit", action="store_true",
                    help="--critic prm: wrap the --prm outcome value model in the implicit PRM (needs --tag)")
    ap.add_argument("--report", action="store_true", help="only rebuild the table and plot")
    a = ap.parse_args(argv)
    if a.type is not None:
        if a.env is not None:
            raise SystemExit(f"--type {a.type}: names its games ({game_type(a.type).env}); got --env {a.env} too")
        a.env = game_type(a.type).env
        try:
            seeds = split_seeds(a.type, a.split, None if a.seeds is None else parse_seeds(a.seeds))
        except ValueError as exc:
            raise SystemExit(f"--seeds: {exc}") from None
        if a.out == DEFAULT_OUT:
            a.out = f"{DEFAULT_OUT}/types/{a.type}/{a.split}"
        if a.md == DEFAULT_MD:  # a type's table beside its results; the cooking doc's plot is left alone
            a.md, a.png = f"{a.out}/table.md", None
    else:
        seeds = parse_seeds(a.seeds or "1000-1007")
    mcts = MCTSSettings(a.mcts_branch, a.mcts_exploration, a.mcts_aggregate, a.mcts_selection, a.mcts_prior)
    if a.mcts_budget < 1:
        raise SystemExit(f"--mcts-budget: expected an int >= 1, got {a.mcts_budget}")
    if a.env is not None and (a.recipe is not None or a.take is not None):
        raise SystemExit(f"--recipe/--take: apply to the default cooking games, not to --env {a.env}")
    try:
        difficulty = dataclasses.replace(
            DEFAULT_DIFFICULTY, recipe=DEFAULT_DIFFICULTY.recipe if a.recipe is None else a.recipe,
            take=DEFAULT_DIFFICULTY.take if a.take is None else a.take)
    except ValueError as exc:
        raise SystemExit(f"--recipe/--take: {exc}") from None
    spec = None
    if a.env is not None:
        from prm_critic.text.envs import parse_env_spec

        try:
            if a.env_module:
                __import__(a.env_module)
            spec = parse_env_spec(a.env)
        except ValueError as exc:
            raise SystemExit(f"--env: {exc}") from None
    games_tag = spec.tag if spec is not None else difficulty.tag
    tag_file = "" if spec is None and difficulty == DEFAULT_DIFFICULTY else f"__{games_tag}"
    methods = [m.strip() for m in a.methods.split(",") if m.strip()]
    for m in methods:
        if m not in METHODS:
            raise SystemExit(f"--methods: expected names from {METHODS}, got {m!r}")
    if a.critic != "prm" and not a.report:
        other = [m for m in methods if m not in CRITIC_METHODS]
        if other:
            raise SystemExit(f"--critic {a.critic}: applies to the critic searches {CRITIC_METHODS}, got {other}")
        if a.tag:
            raise SystemExit(f"--tag names the PRM; a control critic's rows are tagged {a.critic!r} (got --tag {a.tag!r})")
    if a.implicit and not a.report:
        if a.critic != "prm":
            raise SystemExit(f"--implicit wraps the learned PRM (--critic prm), got --critic {a.critic}")
        if not any(m in CRITIC_METHODS for m in methods):
            raise SystemExit(f"--implicit: applies to the critic searches {CRITIC_METHODS}, got {methods}")
        if not a.tag:
            raise SystemExit("--implicit: expected --tag naming the implicit PRM's rows (e.g. --tag implicit96)")
    out = Path(a.out)
    if not a.report:
        from tqdm import tqdm

        critic = None
        if a.critic == "prm" and any(m.startswith("prm") for m in methods):
            from prm_critic.text.prm import MiniLMStepPRM

            critic = implicit_critic(a.prm) if a.implicit else MiniLMStepPRM.load(a.prm)
        prm_sha = None
        if critic is not None and a.type is not None:
            from prm_critic.integrity import sha256_bytes

            prm_sha = sha256_bytes((Path(a.prm) / "prm.json").read_bytes())
        policy, server = None, None
        if a.policy == "llm":
            from langchain_openai import ChatOpenAI

            from agents.textworld_agent.llm_policy import LLMPolicy
            from prm_critic.llm import LocalLLMServer

            server = LocalLLMServer(a.llm_model, n_threads=1, ctx_size=4096).start()
            policy = LLMPolicy(ChatOpenAI(base_url=server.base_url, api_key="none", model=server.model,
                                          max_tokens=48))
        units = [(m, s, rep) for m in methods for s in seeds for rep in range(a.reps if m == "base" else 1)]
        try:
            for m, s, rep in tqdm(units, desc="agents benchmark", unit="episode"):
                ctag = a.critic if a.critic != "prm" else a.tag
                tags = ([ctag] if (ctag and m.startswith("prm")) else []) + (["llm"] if a.policy == "llm" else [])
                tags += [mcts.tag] if m == "prm_mcts" and mcts.tag else []
                name = "+".join([m, *tags])
                f = out / f"{name}__seed{s}_rep{rep}{tag_file}.json"
                if f.exists():
                    continue
                path = functools.partial(spec.make, s) if spec is not None else ensure_game(s, difficulty)
                rng = np.random.default_rng([s, rep, zlib.crc32(m.encode())])
                t0 = time.time()
                ep_critic, extra = critic, {}
                if m in CRITIC_METHODS:
                    extra["critic"] = a.critic
                    extra["implicit"] = bool(a.implicit)
                    if a.critic == "prm" and a.type is not None:  # which PRM scored (its manifest's hash)
                        extra["prm_sha256"] = prm_sha
                    if a.critic != "prm":
                        extra["critic_seed"] = critic_seed(s, rep)
                        ep_critic = control_critic(a.critic, extra["critic_seed"])
                res = run_one(m, path, rng, a.max_steps, ep_critic, a.dead_end_threshold, a.on_all_pruned, policy,
                              mcts_budget=a.mcts_budget, seed=search_seed(s, rep), mcts=mcts)
                res.update(extra)
                res.update(method=name, seed=s, rep=rep, wall_s=round(time.time() - t0, 2), max_steps=a.max_steps,
                           difficulty=games_tag)
                if spec is not None:
                    res["env"] = str(spec)
                if a.type is not None:
                    res.update(type=a.type, split=a.split)
                if m == "prm_beam":
                    res["dead_end_threshold"] = a.dead_end_threshold
                    res["on_all_pruned"] = a.on_all_pruned
                elif m == "prm_beam_noprune":
                    res["dead_end_threshold"] = NO_PRUNING
                elif m == "prm_mcts":
                    res["mcts_budget"] = a.mcts_budget
                    res["search_seed"] = search_seed(s, rep)
                    res["mcts"] = dataclasses.asdict(mcts)
                if m in ("prm_beam", "prm_beam_noprune", "prm_mcts"):
                    res["expand_rng"] = EXPAND_RNG
                    res["lost_rule"] = True  # a lost game is never kept nor the answer (is_lost)
                write_json(f, res, indent=None)
        finally:
            if server is not None:
                server.stop()
    table = report(out, seeds, Path(a.md), a.png and Path(a.png), " ".join(sys.argv), games_tag)
    Path(a.md).parent.mkdir(parents=True, exist_ok=True)
    Path(a.md).write_text(table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
