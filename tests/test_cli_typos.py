"""Typos on the command line: each command's parser reports its own unknown options with the
closest valid ones (before a required option that a misspelt one was meant to give); a list is given
as ``32 32`` or ``32,32`` on every command; options shared by commands are explained the same way."""

from __future__ import annotations

import argparse
import re

import pytest
from cli_helpers import all_parsers

from prm_critic.cli import build_parser, main
from prm_critic.commands._help import int_list, list_items


def _error(capsys, argv: list[str]) -> str:
    """The one error line ``prm-critic ARGV`` ends with (argparse's exit status 2)."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize("argv, command, unknown, suggested", [
    (["train-policy", "--task", "FetchReach-v4", "--out", "o", "--steps", "3", "--total-steps", "300"],
     "train-policy", "--total-steps 300", "--steps"),
    (["train-critic", "--data", "d", "--family", "mc", "--out", "o", "--hiden", "8"], "train-critic", "--hiden 8",
     "--hidden"),
    (["quickstart", "--epsiodes", "3"], "quickstart", "--epsiodes 3", "--episodes"),
    (["distill", "--critic", "c", "--data", "d", "--out", "o", "--epcohs=3"], "distill", "--epcohs=3", "--epochs"),
])
def test_an_unknown_option_is_reported_by_its_command_with_the_closest_ones(capsys, argv, command, unknown,
                                                                              suggested):
    line = _error(capsys, argv)
    assert line.startswith(f"prm-critic {command}: error: unrecognized arguments: {unknown} ("), line
    assert f"did you mean {suggested}" in line, line


def test_a_misspelt_required_option_is_named_before_the_missing_one(capsys):
    line = _error(capsys, ["collect", "--task", "FetchReach-v4", "--out", "o", "--epsiodes", "3"])
    assert line.startswith("prm-critic collect: error: unrecognized arguments: --epsiodes (--epsiodes: did you mean "
                           "--episodes"), line
    assert line.endswith("the following arguments are required: --episodes"), line
    line = _error(capsys, ["train-policy", "--task", "FetchReach-v4", "--out", "o", "--total-steps", "300"])
    assert "unrecognized arguments: --total-steps (--total-steps: did you mean --steps" in line, line


def test_a_nested_command_reports_its_own_unknown_option(capsys):
    line = _error(capsys, ["minari", "import", "ds", "out", "--task", "FetchReach-v4", "--shard_size", "3"])
    assert line.startswith("prm-critic minari import: error: unrecognized arguments: --shard_size 3"), line
    assert "did you mean --shard-size" in line


def test_a_stray_word_is_still_refused(capsys):
    line = _error(capsys, ["train-critic", "--data", "d", "--family", "mc", "--out", "o", "--epochs", "3", "4"])
    assert line == "prm-critic train-critic: error: unrecognized arguments: 4"


@pytest.mark.parametrize("command", [
    ["train-critic", "--data", "d", "--family", "mc", "--out", "o"],
    ["distill", "--critic", "c", "--data", "d", "--out", "o"],
])
@pytest.mark.parametrize("hidden", [["32", "16"], ["32,16"]])
def test_hidden_sizes_are_given_either_way(command, hidden):
    args = build_parser().parse_args([*command, "--hidden", *hidden])
    assert int_list("--hidden", args.hidden) == (32, 16)


def test_list_items_and_int_list():
    assert list_items(["mc", "outcome,subgoal", ""]) == ["mc", "outcome", "subgoal"]
    assert list_items("mc,outcome") == ["mc", "outcome"]
    assert int_list("--hidden", None) is None
    assert int_list("--hidden", ["8,4", "2"]) == (8, 4, 2)
    with pytest.raises(ValueError, match=r"--hidden: expected integers, space- or comma-separated .*got '8 x'"):
        int_list("--hidden", ["8", "x"])


def test_minari_labels_are_given_either_way():
    base = ["minari", "export", "data", "prm/x-v0", "--labels"]
    for labels in (["mc", "outcome"], ["mc,outcome"]):
        assert list_items(build_parser().parse_args([*base, *labels]).labels) == ["mc", "outcome"]


#: options that mean the same on every command that has them: one help text
SAME_HELP = ("--task", "--episodes", "--max-episode-steps", "--no-progress", "--shard-size", "--datasets-path",
             "--activation", "--weight-decay", "--workers", "--address", "--executor", "--trust-pickle")


#: commands where one of those options means something else
OWN_MEANING = {
    "--task": ("export", "evaluate"),  # the name stored in the ONNX metadata; the task a policy is checked against
    "--episodes": ("evaluate",),       # episodes run, not collected
}


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    return " ".join(parser._get_formatter()._expand_help(action).split())


def test_options_shared_by_commands_are_explained_alike():
    helps: dict[str, dict[str, str]] = {}
    for name, sub in all_parsers(build_parser()):
        for action in sub._actions:
            if isinstance(action, argparse.BooleanOptionalAction):  # train-policy's --progress / --no-progress
                continue
            for opt in action.option_strings:
                if opt in SAME_HELP:
                    # the meaning, without the command's own default, the old spelling and the policy option named
                    text = re.sub(r" \(default: [^)]*\)$|; --\S+ is the same option$", "", action.help or "")
                    helps.setdefault(opt, {})[name] = re.sub(r"--(rollout-)?policy", "--POLICY", text)
    for opt, commands in OWN_MEANING.items():
        for command in commands:
            helps.get(opt, {}).pop(command, None)
    differ = {opt: by for opt, by in helps.items() if len(set(by.values())) > 1}
    assert not differ, differ


def test_help_texts_follow_one_style():
    """``(default: X)`` with a colon, never ``True``/``False``; one sentence per option (no ". A")."""
    bad = []
    for name, sub in all_parsers(build_parser()):
        for action in sub._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            text = _help(sub, action)
            where = f"{name} {'/'.join(action.option_strings) or action.dest}: {text}"
            if re.search(r"\(default [^:]", text) or re.search(r"\(default: (True|False)\)", text):
                bad.append(where)
            if re.search(r"[a-z)]\. [A-Z]", text):
                bad.append(where)
            if re.search(r"\.\w+/\.\w+", text):  # extension lists as .json, .safetensors or .onnx
                bad.append(where)
    assert not bad, bad
