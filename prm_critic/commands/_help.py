"""Help conventions shared by every ``prm-critic`` command.

* Every option's help ends with its default: :class:`HelpFormatter` appends ``(default: VALUE)``
  unless the help text already states it (options whose unset value means "the library's default"
  or "none" say so in their own words). On/off flags (``store_true``) need no default.
* Descriptions are plain text (no reStructuredText or Markdown markup): prose paragraphs are wrapped
  to the terminal, indented lines (example command lines, lists) are kept as written.
* Install commands in help texts come from :func:`install` (the one that applies to this install).

:class:`Parser` carries the formatter: ``add_subparsers`` creates every command's parser (and the
``minari`` subcommands') of the same class, so no command can miss it.
"""

from __future__ import annotations

import argparse
import textwrap

__all__ = ["HelpFormatter", "Parser", "install", "is_flag"]


def is_flag(action: argparse.Action) -> bool:
    """An option without a value to show as a default: on/off flags, ``--help``, ``--version``."""
    return action.nargs == 0 and not isinstance(action, argparse.BooleanOptionalAction)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Wraps the description's prose paragraphs to the terminal, keeps its indented lines (examples,
    lists) as written, and shows each option's default (argparse's ``%(default)s``) where the help
    text does not state it already."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        out = []
        for para in text.strip("\n").split("\n\n"):
            lines = para.split("\n")
            if any(line[:1].isspace() for line in lines):  # an indented block: as written
                out.append("\n".join(indent + line for line in lines))
            else:
                out.append(textwrap.fill(" ".join(lines), width, initial_indent=indent, subsequent_indent=indent))
        return "\n\n".join(out)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        shown = "default" in text.lower()
        if (not shown and not is_flag(action) and not action.required and action.default is not None
                and action.default is not argparse.SUPPRESS and (action.option_strings or action.nargs in ("?", "*"))):
            text += " (default: %(default)s)"
        return text


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose help is formatted by :class:`HelpFormatter` (unless a command
    passes a subclass of it)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        if not issubclass(kwargs["formatter_class"], HelpFormatter):
            raise TypeError(f"formatter_class: expected prm_critic.commands._help.HelpFormatter or a subclass, "
                            f"got {kwargs['formatter_class'].__name__}")
        super().__init__(*args, **kwargs)


def install(extras: str) -> str:
    """The install command of ``extras`` for a help text (``%`` escaped for argparse)."""
    from prm_critic._optional import install_command

    return install_command(extras).replace("%", "%%")
