"""The ``prm-critic`` command line.

Each subcommand lives in a module of :mod:`prm_critic.commands` that defines
``register(subparsers)``; the module is imported only when the CLI starts, and heavy
dependencies are imported inside the command function. Every parser is a
:class:`prm_critic.commands._help.Parser`: each option's help shows its default.

Exit status: 0 on success, 2 on a usage error or a refused input (one line on stderr, no traceback),
130 when interrupted (Ctrl-C: one line, ``prm-critic COMMAND: interrupted; WHAT WAS KEPT AND HOW TO RESUME``,
from the command's ``interrupted(args)`` given to ``set_defaults``).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from prm_critic import __version__

__all__ = ["main", "build_parser", "COMMAND_MODULES", "EXIT_INTERRUPTED"]

#: Modules that register subcommands, in help order (the quickstart first: where a new user starts).
COMMAND_MODULES = [
    "prm_critic.commands.quickstart",
    "prm_critic.commands.specs",
    "prm_critic.commands.export",
    "prm_critic.commands.collect",
    "prm_critic.commands.label",
    "prm_critic.commands.train_policy",
    "prm_critic.commands.evaluate",
    "prm_critic.commands.train_critic",
    "prm_critic.commands.distill",
    "prm_critic.commands.ensemble",
    "prm_critic.commands.minari",
    "prm_critic.commands.serve_llm",
]


#: exit status of a command stopped by Ctrl-C (128 + SIGINT, as shells report it)
EXIT_INTERRUPTED = 130


def build_parser() -> argparse.ArgumentParser:
    from prm_critic.commands._help import Parser

    parser = Parser(
        prog="prm-critic",
        description="Process reward models for robots and tool-using agents. New here? Start with "
        "prm-critic quickstart; prm-critic COMMAND --help shows each command's options and their defaults.",
    )
    parser.add_argument("--version", action="version", version=f"prm-critic {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from prm_critic.parallel import TaskError

    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        rc = args.func(args)
    except KeyboardInterrupt:
        # Ctrl-C: one line, no traceback, with what was kept and how to resume where the command says;
        # 130 as a shell reports a process stopped by SIGINT
        note = getattr(args, "interrupted", None)
        kept = f"; {note(args)}" if note is not None else ""
        print(f"prm-critic {args.command}: interrupted{kept}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (ValueError, FileNotFoundError, KeyError, ImportError, TaskError, ConnectionError, FileExistsError,
            NotADirectoryError, IsADirectoryError, PermissionError) as exc:
        # bad input, a path of the wrong kind, a cluster that does not answer, or a task that failed on a worker
        # (named in the message): one clear line, no traceback
        print(f"prm-critic {args.command}: error: {exc}", file=sys.stderr)
        return 2
    return int(rc or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
