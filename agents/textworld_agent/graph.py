"""The TextWorld agent as a LangGraph ``StateGraph``, with a step critic after every tool step.

Graph::

    START -> setup -> agent -> tools -> step_critic -> agent (verdict continue / retry) | END

``setup`` goes to ``tools`` instead of ``agent`` when the thread's last run ended between the model's
tool call and its execution; ``agent`` goes to END when the model answers without a tool call.

* ``setup``: a run whose input names a game (``{"seed": S}`` or ``{"game": path}``, optionally
  ``"max_steps"``) starts a NEW episode on the thread: it generates / opens the game, resets it and
  replaces the thread's transcript, commands, step scores and critic counters (nothing of an earlier
  episode stays in the state). A run without them continues the thread's episode; continuing one
  that is over (won, lost or out of steps) is an error saying how to start a new game. ``seed``,
  ``game`` and ``max_steps`` are requests (ephemeral channels): what the episode is lives in
  ``state["episode"]`` (``number``, ``seed``, ``game``, ``max_steps``, ``critic``).
* ``agent``: a chat model with the tools bound (``act(command)``, ``look()``, ``inventory()``)
  returns an AIMessage with one tool call. The default is :class:`OfflinePolicyModel`, which
  samples among the admissible commands with :class:`~agents.textworld_agent.policy.BasePolicy`;
  any LangChain chat model with ``bind_tools`` can replace it (``build_graph(model=...)``).
* ``tools``: runs the call on the game session for ``(game, commands)`` and appends a
  ToolMessage (content = game feedback; artifact = the command and the admissible commands).
* ``step_critic``: :class:`GameStepCritic`, the library's
  :class:`~prm_critic.langgraph.StepCriticNode` (default critic: the rule-based
  :class:`~prm_critic.text.VerifierCritic`; ``build_graph(critic=...)`` takes any text critic, and
  the served graph loads a trained text PRM from ``$PRM_CRITIC_TEXTWORLD_PRM``). Every scored step
  appends a record to ``state["step_scores"]`` (and to ``stream_mode="custom"``). A rejected step
  (verdict ``"retry"``) is undone in the game too: its messages are removed and its commands dropped,
  so the game state (replayed from ``commands``) matches the transcript.
* ends when the model answers without a tool call, the game is over (won / lost / out of steps), the
  critic ends the run, or LangGraph's step budget (``recursion_limit``) runs low; why is in the state
  (``done`` / ``won`` / ``lost``, ``critic_stop_reason``). A run ended by the step budget on an
  unfinished game continues with the next run on the thread.

``graph`` (module level, compiled, offline policy) is what ``langgraph.json`` (repository root)
serves: ``langgraph dev --config langgraph.json`` from the repository root.
"""


import os
import uuid
from pathlib import Path
from typing import Annotated, Any, Mapping, Sequence

from typing_extensions import TypedDict

if not __package__:  # loaded by file path (LangGraph CLI / server): make the repo root importable
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from prm_critic._optional import require
from prm_critic.langgraph import StepCriticNode, add_step_records

from agents.textworld_agent.env import DEFAULT_DIFFICULTY, ensure_game
from agents.textworld_agent.policy import BasePolicy
from agents.textworld_agent.text import tool_of
from agents.textworld_agent.tools import command_of, make_tools, session_for

_lg_graph = require("langgraph.graph")
_lg_message = require("langgraph.graph.message")
_lg_managed = require("langgraph.managed")
_lg_channels = require("langgraph.channels")
_msgs = require("langchain_core.messages")
_chat = require("langchain_core.language_models.chat_models")
_outputs = require("langchain_core.outputs")

__all__ = ["TextWorldAgentState", "TextWorldInput", "TextWorldOutput", "OfflinePolicyModel", "GameStepCritic", "build_graph",
           "served_critic", "episode_step_records", "graph", "SYSTEM_PROMPT", "PRM_ENV", "RESET_STEP_SCORES"]

SYSTEM_PROMPT = (
    "You play a text adventure cooking game. Use the tools: act(command) issues a game command, "
    "look() describes the room, inventory() lists what you carry. Read the cookbook, gather and "
    "prepare the ingredients as the recipe says, prepare the meal and eat it. One tool call per turn."
)

#: environment variable naming a trained text PRM folder (``MiniLMStepPRM``) for the served graph
PRM_ENV = "PRM_CRITIC_TEXTWORLD_PRM"
#: a write to ``step_scores`` that empties it (a new episode on the thread)
RESET_STEP_SCORES = "__reset_step_scores__"


def episode_step_records(left: list | None, right: Any) -> list:
    """Reducer of ``step_scores``: append records (:func:`prm_critic.langgraph.add_step_records`);
    :data:`RESET_STEP_SCORES` empties the list (``setup`` writes it when a new episode starts)."""
    if isinstance(right, str):
        if right != RESET_STEP_SCORES:
            raise ValueError(f"step_scores: expected a record, a list of records or {RESET_STEP_SCORES!r}, got {right!r}")
        return []
    return add_step_records(left, right)


class TextWorldInput(TypedDict, total=False):
    """A run's input. ``seed`` (an int >= 0, a generated game) or ``game`` (a ``.z8`` path) starts a new
    episode on the thread, with ``max_steps`` game commands at most; none of them: continue the
    thread's episode."""

    seed: int
    game: str
    max_steps: int
    messages: list


class TextWorldOutput(TypedDict, total=False):
    """What a run returns (and a client reads from the thread's state).

    ``messages`` (reducer: append), ``episode`` (``number``, ``seed``, ``game``, ``max_steps``,
    ``critic``: the episode the thread plays), ``commands`` (game commands so far: with the game they
    determine the game state), ``won``/``lost``/``done`` (game status, for the caller; the model never
    reads them), ``step_scores`` / ``critic_revisions`` / ``critic_verdict`` / ``critic_stop_reason``
    (the step critic's, see :class:`~prm_critic.langgraph.StepCriticNode`).
    """

    messages: Annotated[list, _lg_graph.add_messages]
    episode: dict
    commands: list[str]
    won: bool
    lost: bool
    done: bool
    step_scores: Annotated[list[dict], episode_step_records]
    critic_revisions: int
    critic_verdict: str
    critic_stop_reason: str


class TextWorldAgentState(TextWorldOutput, total=False):
    """Graph state: :class:`TextWorldOutput`, the run's request (``seed``, ``game``, ``max_steps``:
    ephemeral channels, read by ``setup`` in the run that names them, then cleared) and LangGraph's
    ``remaining_steps``."""

    seed: Annotated[int, _lg_channels.EphemeralValue(int)]
    game: Annotated[str, _lg_channels.EphemeralValue(str)]
    max_steps: Annotated[int, _lg_channels.EphemeralValue(int)]
    remaining_steps: _lg_managed.RemainingSteps


def _admissible(messages: Sequence[Any]) -> list[str]:
    for m in reversed(messages):
        art = getattr(m, "artifact", None)
        if isinstance(art, dict) and "admissible" in art:
            return list(art["admissible"])
        kw = getattr(m, "additional_kwargs", None) or {}
        if "admissible" in kw:
            return list(kw["admissible"])
    return []


def _issued(messages: Sequence[Any]) -> list[str]:
    out = []
    for m in messages:
        for c in getattr(m, "tool_calls", None) or []:
            try:
                out.append(command_of(c["name"], c.get("args")))
            except ValueError:
                pass
    return out


class OfflinePolicyModel(_chat.BaseChatModel):
    """A chat model that needs no LLM: it samples one admissible command with ``BasePolicy`` and
    returns it as a tool call (``act``, or ``look`` / ``inventory``). It reads the admissible
    commands from the latest message that carries them, and its own earlier tool calls.
    The commands are deterministic given ``seed`` and the call sequence; tool-call ids are random
    (unique across runs and server restarts, as the step critic keys its records by them).
    """

    seed: int = 0
    repeat_penalty: float = 0.3
    uniform: bool = False

    def model_post_init(self, __context) -> None:
        import numpy as np

        self._rng = np.random.default_rng(self.seed)
        self._policy = BasePolicy(prior={} if self.uniform else BasePolicy().prior, repeat_penalty=self.repeat_penalty)

    @property
    def _llm_type(self) -> str:
        return "textworld-offline-policy"

    def bind_tools(self, tools, **kwargs):
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        adm = _admissible(messages)
        if not adm:
            raise ValueError("messages: no admissible commands found (expected the game's intro or a tool result)")
        cmd = self._policy.sample(adm, _issued(messages), self._rng)[0]
        tool, args = tool_of(cmd)
        msg = _msgs.AIMessage(content="", tool_calls=[{"name": tool, "args": args or {},
                                                       "id": f"call_{uuid.uuid4().hex[:16]}", "type": "tool_call"}])
        return _outputs.ChatResult(generations=[_outputs.ChatGeneration(message=msg)])


class GameStepCritic(StepCriticNode):
    """:class:`~prm_critic.langgraph.StepCriticNode` that also undoes a rejected step in the game.

    On verdict ``"retry"`` the node removes the step's messages; this subclass also drops the
    commands the step issued (read from its ToolMessages' ``artifact["command"]``) from
    ``state["commands"]`` and sets ``won`` / ``lost`` / ``done`` to those of the game state before
    the step (replayed), so the next tool call runs where the transcript says the game is.
    """

    def __call__(self, state: Any) -> dict[str, Any]:
        return self._undo_rejected(state, super().__call__(state))

    async def acall(self, state: Any) -> dict[str, Any]:
        return self._undo_rejected(state, await super().acall(state))

    def _undo_rejected(self, state: Any, update: dict[str, Any]) -> dict[str, Any]:
        if update.get(self.verdict_key) != "retry":
            return update
        ids = set(update[self.scores_key][-1]["tool_call_ids"])
        issued = [m.artifact["command"] for m in state[self.messages_key]
                  if getattr(m, "type", None) == "tool" and m.tool_call_id in ids
                  and isinstance(getattr(m, "artifact", None), dict) and m.artifact.get("command")]
        commands = list(state.get("commands") or [])
        if issued:
            if commands[-len(issued):] != issued:
                raise RuntimeError(f"commands: the rejected step issued {issued}, but the episode's last commands are "
                                   f"{commands[-len(issued):]}; cannot undo it in the game")
            commands = commands[: len(commands) - len(issued)]
        episode = state["episode"]
        _, res = session_for(episode["game"], commands, max_steps=int(episode["max_steps"]))
        return {**update, "commands": commands, "won": res.won, "lost": res.lost, "done": res.done}


def served_critic():
    """The critic of the served graph: the trained text PRM folder named by ``$PRM_CRITIC_TEXTWORLD_PRM``
    (``MiniLMStepPRM``), else the rule-based :class:`~prm_critic.text.VerifierCritic`."""
    path = os.environ.get(PRM_ENV, "").strip()
    if not path:
        from prm_critic.text import VerifierCritic

        return VerifierCritic()
    from prm_critic.text.prm import MiniLMStepPRM

    try:
        return MiniLMStepPRM.load(path)
    except Exception as exc:
        raise RuntimeError(f"{PRM_ENV}: cannot load the text PRM folder {path!r} ({type(exc).__name__}: {exc}); "
                           f"unset it to serve the rule-based VerifierCritic") from exc


def _check_request(state: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    seed, game, ms = state.get("seed"), state.get("game"), state.get("max_steps")
    if seed is not None and game is not None:
        raise ValueError(f"input: name one game, 'seed' ({seed!r}) or 'game' ({game!r}), not both")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise ValueError(f"seed: expected an int >= 0, got {seed!r}")
    if game is not None and (not isinstance(game, str) or not game.strip()):
        raise ValueError(f"game: expected the path of a .z8 game file, got {game!r}")
    if ms is not None and (isinstance(ms, bool) or not isinstance(ms, int) or ms < 1):
        raise ValueError(f"max_steps: expected an int >= 1, got {ms!r}")
    return seed, game, ms


def build_graph(model: Any = None, *, critic: Any = None, max_steps: int = 50,
                cache_dir: str | Path | None = None, threshold: float = 0.5, max_revisions: int = 3):
    """Build the (uncompiled) agent graph.

    Args:
        model: a LangChain chat model supporting ``bind_tools`` (default: ``OfflinePolicyModel()``).
        critic: a text critic for the ``step_critic`` node (default: ``VerifierCritic()``).
        max_steps: default game step limit (the input may override it with ``max_steps``).
        cache_dir: where generated games live (default: ``.cache/textworld``).
        threshold, max_revisions: the step critic's (see :class:`~prm_critic.langgraph.StepCriticNode`).
    """
    if model is None:
        model = OfflinePolicyModel()
    if not hasattr(model, "invoke"):
        raise TypeError(f"model: expected a LangChain chat model, got {type(model).__name__}")
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise ValueError(f"max_steps: expected an int >= 1, got {max_steps!r}")
    if critic is None:
        from prm_critic.text import VerifierCritic

        critic = VerifierCritic()
    node = GameStepCritic(critic, threshold=threshold, max_revisions=max_revisions)
    critic_route = node.router()
    # tool schemas only (execution happens in the tools node, on the session for the state)
    schema_tools = make_tools(None)  # type: ignore[arg-type]
    bound = model.bind_tools(schema_tools) if hasattr(model, "bind_tools") else model

    def new_episode(state: TextWorldAgentState, seed: Any, game: Any, ms: Any) -> dict:
        if game is None:
            game = str(ensure_game(int(seed), DEFAULT_DIFFICULTY, cache_dir))
        ms = max_steps if ms is None else ms
        sess, res = session_for(game, [], max_steps=ms)
        number = int((state.get("episode") or {}).get("number", 0)) + 1
        old = [_msgs.RemoveMessage(id=_lg_message.REMOVE_ALL_MESSAGES)] if state.get("messages") else []
        return {
            "episode": {"number": number, "seed": seed, "game": str(game), "max_steps": ms,
                        "critic": type(critic).__name__},
            "messages": old + [_msgs.SystemMessage(SYSTEM_PROMPT),
                               _msgs.HumanMessage(sess.intro, additional_kwargs={"admissible": list(res.admissible)})],
            "commands": [], "won": res.won, "lost": res.lost, "done": res.done,
            "step_scores": RESET_STEP_SCORES, "critic_revisions": 0, "critic_verdict": "", "critic_stop_reason": "",
        }

    def setup(state: TextWorldAgentState) -> dict:
        seed, game, ms = _check_request(state)
        if seed is not None or game is not None:
            return new_episode(state, seed, game, ms)
        episode = state.get("episode")
        if not episode:
            raise KeyError("input: the thread has no game yet; name one with 'seed' (an int >= 0) or 'game' "
                           "(a .z8 path)")
        if ms is not None:
            raise ValueError(f"max_steps: applies to a new game ({ms!r} given without 'seed' or 'game'); the "
                             f"thread's episode keeps max_steps={episode['max_steps']}")
        if state.get("done"):
            raise ValueError(
                f"input: the episode on this thread is over (game {episode['game']!r}, won={bool(state.get('won'))}, "
                f"lost={bool(state.get('lost'))}, {len(state.get('commands') or [])} commands); start a new game "
                f"on the thread with {{'seed': S}} or {{'game': path}}")
        return {"critic_stop_reason": ""}

    def agent(state: TextWorldAgentState) -> dict:
        return {"messages": [bound.invoke(state["messages"])]}

    def tools(state: TextWorldAgentState) -> dict:
        last = state["messages"][-1]
        calls = getattr(last, "tool_calls", None) or []
        commands = list(state.get("commands") or [])
        episode = state["episode"]
        sess, res = session_for(episode["game"], commands, max_steps=int(episode["max_steps"]))
        out_msgs = []
        for c in calls:
            if res.done:
                out_msgs.append(_msgs.ToolMessage("The game is over.", tool_call_id=c["id"], name=c["name"],
                                                  artifact={"admissible": [], "done": True}, status="error"))
                continue
            try:
                cmd = command_of(c["name"], c.get("args"))
            except ValueError as exc:
                out_msgs.append(_msgs.ToolMessage(str(exc), tool_call_id=c["id"], name=c["name"],
                                                  artifact={"admissible": list(res.admissible), "done": False}, status="error"))
                continue
            res = sess.step(cmd)
            commands.append(cmd)
            out_msgs.append(_msgs.ToolMessage(res.feedback, tool_call_id=c["id"], name=c["name"],
                                              artifact={"command": cmd, "admissible": list(res.admissible),
                                                        "done": res.done}))
        return {"messages": out_msgs, "commands": commands, "won": res.won, "lost": res.lost, "done": res.done}

    def after_setup(state: TextWorldAgentState) -> str:
        # a run ended by the step budget right after the model's tool call continues with that call
        last = state["messages"][-1]
        return "tools" if getattr(last, "type", None) == "ai" and getattr(last, "tool_calls", None) else "agent"

    def after_critic(state: TextWorldAgentState) -> str:
        route = critic_route(state)
        if route == "retry" or (route == "continue" and not state.get("done")):
            return "agent"
        return _lg_graph.END

    b = _lg_graph.StateGraph(TextWorldAgentState, input_schema=TextWorldInput, output_schema=TextWorldOutput)
    b.add_node("setup", setup)
    b.add_node("agent", agent)
    b.add_node("tools", tools)
    b.add_node(node.name, node)
    b.add_edge(_lg_graph.START, "setup")
    b.add_conditional_edges("setup", after_setup, ["agent", "tools"])
    b.add_conditional_edges("agent", node.agent_router(), ["tools", _lg_graph.END])
    b.add_edge("tools", node.name)
    b.add_conditional_edges(node.name, after_critic, ["agent", _lg_graph.END])
    return b


#: compiled offline agent with the step critic (what ``langgraph.json`` serves); input ``{"seed": S}``
#: or ``{"game": path}`` (a new episode) or ``{}`` (continue the thread's episode)
graph = build_graph(critic=served_critic()).compile()
