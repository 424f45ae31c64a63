"""Walk the ``prm-critic`` parser tree (every command and the ``minari`` subcommands)."""

from __future__ import annotations

import argparse
from typing import Iterator


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """``{name: parser}`` of ``parser``'s subcommands (empty for a parser without them)."""
    out: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            out.update(action.choices)
    return out


def all_parsers(parser: argparse.ArgumentParser, prefix: str = "") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """``(command path, parser)`` of every subcommand below ``parser``, depth first (``"minari export"``)."""
    for name, sub in subparsers(parser).items():
        path = f"{prefix} {name}".strip()
        yield path, sub
        yield from all_parsers(sub, path)
