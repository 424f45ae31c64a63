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


# =========================================================================== item 26: non-UTF-8 tool output
#: a tool output holding bytes that are not UTF-8, as ``os`` functions and many subprocess wrappers
#: return it: a str decoded with ``surrogateescape`` (three lone surrogates)
RAW = b"caf\xe9.txt  \xff\xfe.bin  notes.md"
NON_UTF8 = RAW.decode("utf-8", "surrogateescape")
CLEAN = "caf\ufffd.txt  \ufffd\ufffd.bin  notes.md"


def _step(result=NON_UTF8):
    from prm_critic.text import TextStep, format_tool_step

    return TextStep("list the files", (), format_tool_step("ls", {"path": "."}, result))


def test_text_step_replaces_non_utf8_characters_and_notes_it():
    from prm_critic.text import TextStep

    step = _step()
    assert step.step.endswith(CLEAN) and step.step.encode("utf-8")
    assert step.extra == {"non_utf8_replaced": 3}
    assert _step(CLEAN).extra == {} and step == _step(CLEAN)  # the same step as its clean text
    ctx = TextStep(NON_UTF8, (NON_UTF8,), "go")
    assert ctx.prompt == ctx.history[0] == CLEAN and ctx.extra == {"non_utf8_replaced": 6}


@pytest.fixture(scope="module")
def minilm_prm():
    pytest.importorskip("torch")
    from prm_critic.text.prm import MiniLMStepPRM

    return MiniLMStepPRM.from_pretrained_encoder(seed=0)


def test_minilm_prm_scores_a_step_with_non_utf8_tool_output(minilm_prm):
    got = minilm_prm.score([_step()])
    assert got.success == pytest.approx(minilm_prm.score([_step(CLEAN)]).success, abs=0)
    correct(26, "MiniLM PRM scoring a tool output decoded with surrogateescape (bytes that are not UTF-8)",
            "scored as the text with U+FFFD in place of each bad byte (was: TypeError from tokenizers); "
            "TextStep.extra['non_utf8_replaced'] counts them")


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_critic_node_graph_with_non_utf8_tool_output(minilm_prm, mode):
    import asyncio

    pytest.importorskip("langgraph")
    from fakes import ToolCallingFakeChatModel, ai_call, ai_text
    from langchain_core.messages import HumanMessage
    from langchain_core.tools import tool
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode

    from prm_critic.langgraph import CriticState, StepCriticNode

    class State(MessagesState, CriticState):
        pass

    @tool
    def ls(path: str) -> str:
        """List a folder."""
        return NON_UTF8

    # FAKE: the scripted model stands in for a tool-calling LLM; the PRM, tools and graph are real
    model = ToolCallingFakeChatModel.from_script([ai_call("ls", {"path": "."}), ai_text("done")])
    node = StepCriticNode(minilm_prm, threshold=0.0)
    b = StateGraph(State)
    b.add_node("agent", lambda s: {"messages": [model.invoke(s["messages"])]})
    b.add_node("tools", ToolNode([ls]))
    b.add_node("step_critic", node)
    b.add_edge(START, "agent")
    b.add_conditional_edges("agent", node.agent_router(), {"tools": "tools", END: END})
    b.add_edge("tools", "step_critic")
    b.add_conditional_edges("step_critic", node.router(), {"continue": "agent", "retry": "agent", "end": END,
                                                           "backtrack": END})
    graph = b.compile(checkpointer=InMemorySaver())
    inp, cfg = {"messages": [HumanMessage("list the files")]}, {"configurable": {"thread_id": mode}}
    out = graph.invoke(inp, cfg) if mode == "sync" else asyncio.run(graph.ainvoke(inp, cfg))
    (record,) = out["step_scores"]
    assert record["text"].endswith(CLEAN) and record["extra"] == {"non_utf8_replaced": 3}
    assert record["success"] == pytest.approx(float(minilm_prm.score([_step(CLEAN)]).success[0]), abs=1e-6)
    correct(26, f"critic-node graph (MiniLM PRM, checkpointer, {mode}) whose tool returns non-UTF-8 bytes "
                "(surrogateescape)", "the step is scored and recorded with U+FFFD; the record's extra counts them")


def test_write_stepwise_jsonl_with_non_utf8_completion(tmp_path):
    from prm_critic.text.trl_format import StepwiseExample, read_stepwise_jsonl, write_stepwise_jsonl

    ex = StepwiseExample("list the files", ["call ls()\nresult: " + NON_UTF8, "done"], [1.0, 1.0])
    assert ex.extra == {"non_utf8_replaced": 3}
    path = write_stepwise_jsonl(tmp_path / "steps.jsonl", [ex])
    (back,) = read_stepwise_jsonl(path)
    assert back.completions[0].endswith(CLEAN) and back.extra == {}
    correct(26, "write_stepwise_jsonl with a completion decoded with surrogateescape",
            "written with U+FFFD in place of each bad byte (was: UnicodeEncodeError); StepwiseExample.extra counts them")


def test_llm_judge_with_non_utf8_tool_output():
    """The real packaged SmolLM2 behind ChatOpenAI: the request body must encode as UTF-8."""
    from llm_helpers import smollm2

    langchain_openai = pytest.importorskip("langchain_openai")
    from prm_critic.llm import LocalLLMServer
    from prm_critic.text import LLMJudgeCritic
    from prm_critic.text.judge import score_response_format

    with LocalLLMServer(smollm2(), n_threads=1) as server:
        llm = langchain_openai.ChatOpenAI(base_url=server.base_url, api_key="none", model=server.model,
                                          temperature=0, max_tokens=8)
        judge = LLMJudgeCritic(llm, max_retries=0, max_concurrency=1,
                               score_model=llm.bind(response_format=score_response_format(10), max_tokens=16))
        out = judge.score([_step()])
    assert out.success.shape == (1,) and 0 <= out.success[0] <= 1
    correct(26, "LLM judge (real SmolLM2 over HTTP) scoring a tool output decoded with surrogateescape",
            "scored (was: UnicodeEncodeError building the request)")
