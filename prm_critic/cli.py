"""The ``prm-critic`` command line.

Each subcommand lives in a module of :mod:`prm_critic.commands` that defines
``register(subparsers)``; the module is imported only when the CLI starts, and heavy
dependencies are imported inside the command function.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from prm_critic import __version__

__all__ = ["main", "build_parser", "COMMAND_MODULES"]

#: Modules that register subcommands, in help order.
COMMAND_MODULES = [
    "prm_critic.commands.specs",
    "prm_critic.commands.export",
    "prm_critic.commands.collect",
    "prm_critic.commands.label",
    "prm_critic.commands.train_policy",
    "prm_critic.commands.train_critic",
    "prm_critic.commands.distill",
    "prm_critic.commands.quickstart",
    "prm_critic.commands.minari",
    "prm_critic.commands.serve_llm",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="prm-critic",
        description="Process reward models for robots and tool-using agents.",
    )
    parser.add_argument("--version", action="version", version=f"prm-critic {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from prm_critic._notices import install_import_filter
    from prm_critic.executor import TaskError

    install_import_filter()  # dependencies' import-time release notices (gymnasium-robotics) are not shown
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        rc = args.func(args)
    except (ValueError, FileNotFoundError, KeyError, ImportError, TaskError) as exc:
        # bad input, or a task that failed on a worker (named in the message): one clear line, no traceback
        print(f"prm-critic {args.command}: error: {exc}", file=sys.stderr)
        return 2
    return int(rc or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
