"""The TextWorld agent as a LangGraph server serves it: ``langgraph.json`` at the repository root.

* the config's graph paths resolve from the repository root (where ``langgraph dev`` runs), and the
  graph loaded from that path, as the server loads it, has the step critic;
* a thread takes a second run on a new game: the new game's episode only, nothing of the old one
  (transcript, commands, step scores) left in the checkpointed state; continuing a finished episode
  without naming a game is a clear error; a run cut by the step budget continues on the next run;
* a step the critic rejects is undone in the game as well as in the transcript;
* with ``langgraph-cli[inmem]`` installed: ``langgraph dev --config langgraph.json`` started from the
  repository root and driven with ``langgraph_sdk`` (marker ``langgraph_server``; skipped without it:
  langgraph-api pins grpcio / protobuf below what the ``all`` extras resolve to, so it is not in the
  project's extras). CI runs it in an environment of its own (``constraints-langgraph-server.txt``)
  with ``PRM_CRITIC_LANGGRAPH_SERVER=1``, which turns every skip of this file into a failure.

Real TextWorld games (tw-make), real LangGraph graphs and checkpointers; no fakes of either.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

#: set to 1 in the LangGraph server's environment (CI): what this file needs must be there, no skips
SERVER_ENV = "PRM_CRITIC_LANGGRAPH_SERVER"
REQUIRED = os.environ.get(SERVER_ENV) == "1"


def need(module: str, reason: str | None = None):
    """``pytest.importorskip``, except with ``$PRM_CRITIC_LANGGRAPH_SERVER=1``, where a missing module fails."""
    if not REQUIRED:
        return pytest.importorskip(module, reason=reason)
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        error = exc
    pytest.fail(f"{SERVER_ENV}=1 and {module} does not import ({error}); {reason or 'install the server environment'}",
                pytrace=False)


need("textworld")
need("langgraph")

from faults import correct, loud  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:jericho.*")

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "langgraph.json"
SEEDS = (7, 8)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """Where the served graph looks for games (``$PRM_CRITIC_CACHE``), with the first seed's game
    generated; the graph generates the second itself when a run names its seed."""
    from agents.textworld_agent.env import DEFAULT_DIFFICULTY, ensure_game

    root = tmp_path_factory.mktemp("prm_cache")
    ensure_game(SEEDS[0], DEFAULT_DIFFICULTY, root / "textworld")
    return root


@pytest.fixture
def served(cache, monkeypatch):
    """The graph of ``langgraph.json``, loaded from its path as the server loads it, with a
    checkpointer attached the way the server attaches its own (``copy``)."""
    from langgraph.checkpoint.memory import InMemorySaver

    monkeypatch.setenv("PRM_CRITIC_CACHE", str(cache))
    return load_served_graph().copy(update={"checkpointer": InMemorySaver()})


def load_served_graph(name: str = "textworld_agent"):
    cfg = json.loads(CONFIG.read_text())
    file, attr = cfg["graphs"][name].split(":")
    spec = importlib.util.spec_from_file_location(f"lg_served_{name}", ROOT / file)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, attr)


def thread(tid: str, recursion_limit: int = 100) -> dict:
    return {"configurable": {"thread_id": tid}, "recursion_limit": recursion_limit}


def check_one_episode(out: dict, game: Path, max_steps: int) -> None:
    """The state holds exactly one episode: its transcript, commands and step scores agree."""
    from agents.textworld_agent.env import TextWorldGame

    msgs = out["messages"]
    kinds = [m.type for m in msgs]
    assert kinds[:2] == ["system", "human"] and kinds.count("system") == 1
    intro = TextWorldGame(game, max_steps=max_steps)
    assert msgs[1].content == intro.reset().feedback  # this game's intro, not an earlier one's
    calls = [c["id"] for m in msgs if m.type == "ai" for c in m.tool_calls]
    tools = [m for m in msgs if m.type == "tool"]
    assert [m.tool_call_id for m in tools] == calls and len(tools) == len(out["commands"]) >= 1
    assert intro.replay(out["commands"]).feedback == tools[-1].content
    scored = [cid for r in out["step_scores"] for cid in r["tool_call_ids"]]
    assert scored == calls  # one record per step of this episode, none of another
    for r in out["step_scores"]:
        assert 0.0 <= r["score"] <= 1.0 and r["verdict"] == "continue" and r["text"].startswith(("call act(", "call look(", "call inventory("))


def test_root_config_serves_the_agent_with_its_step_critic():
    from prm_critic.langgraph import StepCriticNode

    cfg = json.loads(CONFIG.read_text())
    assert set(cfg) >= {"dependencies", "graphs"} and cfg["graphs"]
    for dep in cfg["dependencies"]:  # paths are relative to the repository root (langgraph dev's cwd)
        assert (ROOT / dep / "pyproject.toml").exists()
    for name, ref in cfg["graphs"].items():
        file, _ = ref.split(":")
        assert (ROOT / file).is_file(), f"{name}: {file} does not exist relative to the repository root"
    assert not (ROOT / "agents" / "langgraph.json").exists(), "one LangGraph config: langgraph.json at the root"
    g = load_served_graph()
    assert {"setup", "agent", "tools", "step_critic"} <= set(g.get_graph().nodes)
    assert isinstance(g.nodes["step_critic"].bound, StepCriticNode)
    outputs = set(g.get_output_jsonschema()["properties"])
    assert {"step_scores", "episode", "commands", "won", "lost", "done", "critic_stop_reason"} <= outputs
    assert not outputs & {"seed", "game", "max_steps"}  # the request, not the episode
    assert {"seed", "game", "max_steps"} <= set(g.get_input_jsonschema()["properties"])


def test_a_prm_folder_that_does_not_load_stops_the_served_graph(monkeypatch, tmp_path):
    """``$PRM_CRITIC_TEXTWORLD_PRM`` names the served critic; one that does not load is an error at load
    time (what the server reports for the graph), never a silent fallback to the rule critic."""
    monkeypatch.setenv("PRM_CRITIC_TEXTWORLD_PRM", str(tmp_path / "no_prm"))
    with pytest.raises(RuntimeError, match=r"PRM_CRITIC_TEXTWORLD_PRM: cannot load the text PRM folder '.*no_prm'"):
        load_served_graph()


@pytest.mark.fault
def test_a_thread_takes_a_new_game_and_refuses_to_continue_a_finished_one(served, cache):
    from agents.textworld_agent.env import DEFAULT_DIFFICULTY, game_path

    first, second = (game_path(s, DEFAULT_DIFFICULTY, cache / "textworld") for s in SEEDS)
    cfg = thread("two-games")
    out1 = served.invoke({"game": str(first), "max_steps": 3}, cfg)
    assert out1["episode"] == {"number": 1, "seed": None, "game": str(first), "max_steps": 3,
                               "critic": "VerifierCritic"}
    assert out1["done"] and len(out1["commands"]) == 3
    check_one_episode(out1, first, 3)

    # the server runs graphs asynchronously: the second run goes through ainvoke (the critic's acall)
    out2 = asyncio.run(served.ainvoke({"seed": SEEDS[1], "max_steps": 2}, cfg))  # generates the game
    assert out2["episode"] == {"number": 2, "seed": SEEDS[1], "game": str(second), "max_steps": 2,
                               "critic": "VerifierCritic"}
    check_one_episode(out2, second, 2)
    old_ids = {m.id for m in out1["messages"]}
    assert not old_ids & {m.id for m in out2["messages"]}
    state = served.get_state(cfg).values
    assert state["step_scores"] == out2["step_scores"] and state["commands"] == out2["commands"]
    correct(39, "a second run on a used thread names a new game",
            f"episode 2 on game_{SEEDS[1]}: {len(out2['commands'])} commands and {len(out2['step_scores'])} step "
            f"scores, none of episode 1's {len(out1['messages'])} messages left in the state")

    with loud(39, "a run continues the thread's finished episode without naming a new game", ValueError,
              match=r"input: the episode on this thread is over \(game '.*game_8\.z8', won=False, lost=False, "
                    r"2 commands\); start a new game on the thread with \{'seed': S\} or \{'game': path\}"):
        served.invoke({}, cfg)
    with loud(39, "max_steps given without a game on a thread's episode", ValueError,
              match=r"max_steps: applies to a new game \(5 given without 'seed' or 'game'\)"):
        served.invoke({"max_steps": 5}, thread("two-games"))
    with loud(39, "a run names two games", ValueError, match=r"input: name one game, 'seed' \(7\) or 'game'"):
        served.invoke({"seed": 7, "game": str(second)}, thread("two-games"))
    with loud(39, "the first run on a new thread names no game", KeyError, match=r"the thread has no game yet"):
        served.invoke({}, thread("empty"))
    # a refused run leaves the thread's episode as it was; a new game still starts on it
    assert served.get_state(cfg).values["commands"] == out2["commands"]
    out3 = served.invoke({"seed": SEEDS[0], "max_steps": 1}, cfg)
    assert out3["episode"]["number"] == 3 and len(out3["commands"]) == 1
    check_one_episode(out3, first, 1)


def test_a_run_cut_by_the_step_budget_continues_on_the_next_run(served):
    cfg = thread("budget", recursion_limit=8)  # setup + 2 rounds of agent, tools, critic
    out1 = served.invoke({"seed": SEEDS[0], "max_steps": 10}, cfg)
    assert out1["critic_stop_reason"] == "recursion_limit" and not out1["done"] and len(out1["commands"]) == 2
    out2 = served.invoke({}, cfg)
    assert out2["episode"]["number"] == 1 and out2["commands"][:2] == out1["commands"]
    assert len(out2["commands"]) == 4 and len(out2["step_scores"]) == 4
    assert [r["tool_call_ids"] for r in out2["step_scores"][:2]] == [r["tool_call_ids"] for r in out1["step_scores"]]


def test_a_rejected_step_is_undone_in_the_game(cache):
    """A step the critic rejects leaves the transcript (the node's on_reject="remove") and the game:
    its command is dropped, so the next command runs where the transcript says the game is."""
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langgraph.checkpoint.memory import InMemorySaver

    from agents.textworld_agent.env import DEFAULT_DIFFICULTY, TextWorldGame, game_path
    from agents.textworld_agent.graph import build_graph
    from prm_critic.critic import BaseCritic, StepScores

    class NoExamining(BaseCritic):
        """A rule critic: 0 for a step that examines something, else 0.9."""

        def score(self, steps):
            s = np.array([0.0 if "examine" in t.step else 0.9 for t in steps], np.float32)
            return StepScores(s, s)

    class ScriptedModel(GenericFakeChatModel):
        def bind_tools(self, tools, **kw):
            return self

    script = iter([
        AIMessage("", tool_calls=[{"name": "act", "args": {"command": "examine cookbook"}, "id": "a1"}]),
        AIMessage("", tool_calls=[{"name": "inventory", "args": {}, "id": "a2"}]),
        AIMessage("I am done."),
    ])
    game = game_path(SEEDS[0], DEFAULT_DIFFICULTY, cache / "textworld")
    g = build_graph(ScriptedModel(messages=script), critic=NoExamining()).compile(checkpointer=InMemorySaver())
    out = g.invoke({"game": str(game), "max_steps": 5}, thread("undo"))
    assert [(r["verdict"], r["tool_call_ids"]) for r in out["step_scores"]] == [("retry", ["a1"]), ("continue", ["a2"])]
    assert out["commands"] == ["inventory"]
    tools = [m for m in out["messages"] if m.type == "tool"]
    assert [m.tool_call_id for m in tools] == ["a2"]
    assert tools[0].content == TextWorldGame(game, max_steps=5).replay(["inventory"]).feedback
    assert any(m.type == "human" and m.additional_kwargs.get("prm_critic_feedback") for m in out["messages"])
    assert out["messages"][-1].content == "I am done." and not out["done"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _langgraph_cli() -> str | None:
    exe = Path(sys.executable).parent / "langgraph"
    return str(exe) if exe.exists() else shutil.which("langgraph")


@pytest.mark.slow  # about 25 s: server start, two games (one generated by the server)
@pytest.mark.langgraph_server
def test_langgraph_dev_from_the_repo_root_serves_two_games_on_one_thread(request):
    install = ('needs langgraph-cli[inmem] and langgraph-sdk (not in the project\'s extras): pip install '
               '-c constraints-cpu.txt -c constraints-langgraph-server.txt -e ".[agents]" "langgraph-cli[inmem]" '
               'langgraph-sdk, in an environment of its own')
    need("langgraph_api", install)
    sdk = need("langgraph_sdk", install)
    cli = _langgraph_cli()
    if cli is None:
        if REQUIRED:
            pytest.fail(f"{SERVER_ENV}=1 and the langgraph CLI is not installed", pytrace=False)
        pytest.skip(f"the langgraph CLI is not installed; {install}")
    cache = request.getfixturevalue("cache")  # generates a game: after the checks above
    port = _free_port()
    env = dict(os.environ, PRM_CRITIC_CACHE=str(cache))
    log = cache / "langgraph_dev.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen([cli, "dev", "--config", "langgraph.json", "--port", str(port), "--no-browser",
                                 "--no-reload"], cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(url + "/ok", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"langgraph dev did not start within 30 s (exit {proc.poll()}):\n{log.read_text()[-3000:]}")
            time.sleep(0.5)

        async def drive():
            client = sdk.get_client(url=url)
            assistant = (await client.assistants.search(graph_id="textworld_agent"))[0]
            served = await client.assistants.get_graph(assistant["assistant_id"])
            tid = (await client.threads.create())["thread_id"]
            r1 = await client.runs.wait(tid, "textworld_agent", input={"seed": SEEDS[0], "max_steps": 2})
            r2 = await client.runs.wait(tid, "textworld_agent", input={"seed": SEEDS[1], "max_steps": 2})
            state = (await client.threads.get_state(tid))["values"]
            with pytest.raises(Exception, match="the episode on this thread is over"):
                await client.runs.wait(tid, "textworld_agent", input={})
            return served, r1, r2, state

        served, r1, r2, state = asyncio.run(drive())
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    # the server's graph has the critic node after the tools node
    assert {"setup", "agent", "tools", "step_critic"} <= {n["id"] for n in served["nodes"]}
    assert {"source": "tools", "target": "step_critic"} in [{k: e[k] for k in ("source", "target")} for e in served["edges"]]
    for r, seed in ((r1, SEEDS[0]), (r2, SEEDS[1])):
        assert r["episode"]["seed"] == seed and r["episode"]["number"] == (1 if seed == SEEDS[0] else 2)
        assert r["episode"]["critic"] == "VerifierCritic" and r["episode"]["game"].endswith(f"game_{seed}.z8")
        assert len(r["step_scores"]) == len(r["commands"]) == 2
        assert all(0.0 <= s["score"] <= 1.0 and s["verdict"] == "continue" for s in r["step_scores"])
    # the thread's state is the second game's episode only, scored by the critic node
    assert state["episode"] == r2["episode"] and [m["type"] for m in state["messages"]][:2] == ["system", "human"]
    assert [m["type"] for m in state["messages"]].count("system") == 1
    assert state["step_scores"] == r2["step_scores"] and state["commands"] == r2["commands"]
    ids = {c["id"] for m in state["messages"] if m["type"] == "ai" for c in m["tool_calls"]}
    assert {cid for s in state["step_scores"] for cid in s["tool_call_ids"]} == ids
    assert not {cid for s in r1["step_scores"] for cid in s["tool_call_ids"]} & ids
