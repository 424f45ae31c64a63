"""The command line's help: every command and option explained, with its default, in plain text;
consistent option names (old spellings kept); the quickstart listed first; ``export`` writes beside
its input; Ctrl-C ends a command with one line and exit status 130."""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import all_parsers, subparsers

from prm_critic.cli import EXIT_INTERRUPTED, build_parser, main
from prm_critic.commands._help import is_flag
from prm_critic.robotics.families import label_families

ROOT = Path(__file__).resolve().parents[1]
#: reStructuredText / Markdown markup that a terminal shows raw: backticks, **strong**, *emphasis*
#: (a glob such as shards/*.npz or a product such as gamma * Phi is not markup)
MARKUP = re.compile(r"`|\*\*|(?:^|\s)\*[A-Za-z0-9]|[A-Za-z0-9]\*(?:$|[\s.,;:)])", re.M)


def _options(parser: argparse.ArgumentParser):
    """The actions a user types (not ``--help``, ``--version`` or the subcommand selector)."""
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)):
            continue
        yield action


def _in_required_group(parser: argparse.ArgumentParser, action: argparse.Action) -> bool:
    return any(g.required and action in g._group_actions for g in parser._mutually_exclusive_groups)


def _help_of(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The help text of ``action`` as ``--help`` prints it (defaults expanded), on one line."""
    return " ".join(parser._get_formatter()._expand_help(action).split())


def test_every_command_has_a_help_line_and_a_plain_text_description():
    parser = build_parser()
    missing, markup = [], []
    for name, sub in [("prm-critic", parser), *all_parsers(parser)]:
        if not (sub.description or "").strip():
            missing.append(f"{name}: no description")
        if MARKUP.search(sub.description or ""):
            markup.append(f"{name} description: {MARKUP.findall(sub.description)}")
    # the one-line help of each command, as the parent's command list shows it
    for name, sub in [("prm-critic", parser), *all_parsers(parser)]:
        for action in sub._actions:
            if isinstance(action, argparse._SubParsersAction):
                for choice in action._choices_actions:
                    if not (choice.help or "").strip():
                        missing.append(f"{name} {choice.dest}: no help line")
                    if MARKUP.search(choice.help or ""):
                        markup.append(f"{name} {choice.dest} help line")
    assert not missing, missing
    assert not markup, markup
    # collect and label explain themselves
    subs = subparsers(parser)
    assert "prm-critic label --data OUT --family" in " ".join(subs["collect"].description.split())
    assert "mc_bisect" in subs["label"].description and "train-critic" in subs["label"].description


def test_every_option_has_help_that_states_its_default():
    """Walks every command and subcommand: an option without help, an option whose help does not state
    its default (unless it is required or an on/off flag), or raw markup in a help text fails."""
    parser = build_parser()
    no_help, no_default, markup, checked = [], [], [], 0
    for name, sub in [("prm-critic", parser), *all_parsers(parser)]:
        for action in _options(sub):
            label = f"{name} {'/'.join(action.option_strings) or action.dest}"
            checked += 1
            if not (action.help or "").strip() or action.help == argparse.SUPPRESS:
                no_help.append(label)
                continue
            text = _help_of(sub, action)
            if MARKUP.search(text):
                markup.append(f"{label}: {text}")
            needs_default = not (action.required or is_flag(action) or _in_required_group(sub, action))
            if needs_default and "default" not in text.lower():
                no_default.append(f"{label}: {text}")
    assert checked > 100
    assert not no_help, f"options without help: {no_help}"
    assert not no_default, f"options whose help does not state the default: {no_default}"
    assert not markup, f"raw markup in help texts: {markup}"


def test_defaults_shown_are_the_parsers_own():
    """The appended default is argparse's %(default)s: it cannot drift from the value the parser uses."""
    subs = subparsers(build_parser())
    collect = subs["collect"]
    shard = next(a for a in collect._actions if a.dest == "shard_size")
    assert _help_of(collect, shard) == f"episodes per shard file (default: {shard.default})"
    quick = subs["quickstart"]
    assert _help_of(quick, next(a for a in quick._actions if a.dest == "episodes")).endswith("(default: 60)")
    label = subs["label"]
    from prm_critic.robotics.families import OPTION_DEFAULTS

    assert _help_of(label, next(a for a in label._actions if a.dest == "k")).endswith(
        f"(default: {OPTION_DEFAULTS['k']})")


def test_quickstart_is_listed_first():
    parser = build_parser()
    assert list(subparsers(parser))[0] == "quickstart"
    text = parser.format_help()
    listed = re.findall(r"^    (\S+)", text.split("COMMAND\n", 1)[1], flags=re.M)
    assert listed[0] == "quickstart" and "label" in listed, listed


@pytest.mark.parametrize("argv, dest, value", [
    (["label", "--data", "d", "--family", "mc"], "family", "mc"),
    (["label", "--data", "d", "--label", "mc"], "family", "mc"),
    (["train-critic", "--data", "d", "--out", "o", "--label", "outcome"], "label", "outcome"),
    (["train-critic", "--data", "d", "--out", "o", "--family", "outcome"], "label", "outcome"),
    (["minari", "import", "ds", "out", "--task", "PointMaze_UMaze-v3"], "spec", "PointMaze_UMaze-v3"),
    (["minari", "import", "ds", "out", "--spec", "PointMaze_UMaze-v3"], "spec", "PointMaze_UMaze-v3"),
])
def test_both_spellings_of_renamed_options_are_accepted(argv, dest, value):
    """label and train-critic both take --family and --label; minari import takes --task and --spec."""
    assert getattr(build_parser().parse_args(argv), dest) == value


def test_both_spellings_are_documented_in_help():
    subs = subparsers(build_parser())
    for command in ("label", "train-critic"):
        text = " ".join(subs[command].format_help().split())
        assert "--family FAMILY" in text.replace("{" + ",".join(label_families()) + "}", "FAMILY")
        assert "--label is the same option" in text, command
    text = " ".join(subparsers(subs["minari"])["import"].format_help().split())
    assert "--task TASK, --spec TASK" in text and "--spec is the same option" in text


def test_export_writes_beside_its_input_by_default(tmp_path):
    from prm_critic.commands.export import default_out

    parser = build_parser()

    def out(*argv):
        return default_out(parser.parse_args(["export", *argv]))

    assert out("--checkpoint", str(tmp_path / "runs" / "critic.safetensors")) == tmp_path / "runs" / "critic.onnx"
    assert out("--checkpoint", str(tmp_path / "runs" / "critic.json"), "--batch", "1") == tmp_path / "runs" / "critic.b1.onnx"
    assert out("--checkpoint", "critic") == Path("critic.onnx")
    toml = tmp_path / "specs" / "fetch_reach.toml"
    toml.parent.mkdir()
    r = subprocess.run([sys.executable, "-m", "prm_critic.cli", "specs", "FetchReach-v4"], capture_output=True,
                       text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    toml.write_text(r.stdout)
    assert out("--subgoal-spec", str(toml)) == toml.parent / "subgoal_FetchReach-v4.onnx"
    assert out("--subgoal-spec", "FetchReach-v4", "--batch", "1") == Path("subgoal_FetchReach-v4.b1.onnx")


def test_export_subgoal_spec_file_end_to_end(tmp_path, monkeypatch, capsys):
    """The real export (onnx, gymnasium-robotics): the file lands beside the .toml spec, not in the
    working directory."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    pytest.importorskip("gymnasium_robotics")
    from prm_critic.commands.specs import spec_file

    spec_dir = tmp_path / "my_specs"
    spec_dir.mkdir()
    toml = spec_dir / "reach.toml"
    toml.write_text(spec_file("FetchReach-v4").read_text())
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert main(["export", "--subgoal-spec", str(toml), "--quiet"]) == 0
    assert (spec_dir / "subgoal_FetchReach-v4.onnx").is_file()
    assert list(work.iterdir()) == []
    assert f"wrote {spec_dir / 'subgoal_FetchReach-v4.onnx'}" in capsys.readouterr().out


def test_ctrl_c_during_a_command_prints_one_line_and_exits_130(monkeypatch, capsys):
    import prm_critic.commands.specs as specs

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(specs, "run", interrupted)  # build_parser() binds the module's run anew
    assert main(["specs"]) == EXIT_INTERRUPTED == 130
    captured = capsys.readouterr()
    assert captured.err == "prm-critic specs: interrupted\n" and captured.out == ""


def test_a_real_sigint_gives_one_line_and_status_130(tmp_path):
    """A real SIGINT to a running ``prm-critic`` process: no traceback, exit status 130."""
    # a process started from a terminal has Python's SIGINT handler; one started in the background by a
    # non-interactive shell (as CI may run the suite) inherits SIGINT ignored, so the child restores it
    code = ("import signal, sys, time\n"
            "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
            "import prm_critic.commands.specs as specs\n"
            "def slow(args):\n"
            "    print('running', flush=True)\n"
            "    time.sleep(60)\n"
            "specs.run = slow\n"
            "from prm_critic.cli import main\n"
            "sys.exit(main(['specs']))\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdout.readline() == "running\n"
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, (proc.returncode, err)
    assert err == "prm-critic specs: interrupted\n", err
