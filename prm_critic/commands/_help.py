"""Help conventions shared by every ``prm-critic`` command.

* Every option's help ends with its default: :class:`HelpFormatter` appends ``(default: VALUE)``
  unless the help text already states it (options whose unset value means "the library's default"
  or "none" say so in their own words). On/off flags (``store_true``) need no default.
* Descriptions are plain text (no reStructuredText or Markdown markup): prose paragraphs are wrapped
  to the terminal, indented lines (example command lines, lists) are kept as written.
* Install commands in help texts come from :func:`install` (the one that applies to this install).
* Each command's parser reports its own unknown options (``prm-critic train-policy: error:
  unrecognized arguments: --total-steps 300 (did you mean --steps?)``), before a missing required
  option that a misspelt one was meant to give.
* A list is given either way, ``--hidden 32 32`` or ``--hidden 32,32`` (:func:`list_items`, :func:`int_list`).

:class:`Parser` carries the formatter: ``add_subparsers`` creates every command's parser (and the
``minari`` subcommands') of the same class, so no command can miss it.
"""

from __future__ import annotations

import argparse
import difflib
import sys
import textwrap
from typing import Any, Callable, NoReturn, Sequence

__all__ = ["HelpFormatter", "Parser", "add_trust_pickle", "config_defaults", "install", "is_flag", "int_list",
           "library_defaults_formatter", "list_items"]


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


def library_defaults_formatter(names: Sequence[str], defaults: Callable[[], dict]) -> type[HelpFormatter]:
    """A :class:`HelpFormatter` that shows the library's default of each option in ``names`` (unset on the
    command line, the library value applies), read from ``defaults()`` only when help is printed."""

    class LibraryDefaultsFormatter(HelpFormatter):
        def _expand_help(self, action):
            text = super()._expand_help(action)
            if action.dest in names:
                value = defaults()[action.dest]
                text = f"{text} (default: {'none' if value is None else value})"
            return text

    return LibraryDefaultsFormatter


def config_defaults(config: Any, names: Sequence[str]) -> dict:
    """``config``'s value of each option in ``names``, as ``--help`` shows it (``hidden``: ``"32 32"``)."""
    d = {name: getattr(config, name) for name in names}
    if "hidden" in d:
        d["hidden"] = " ".join(str(h) for h in d["hidden"])
    return d


def add_trust_pickle(p: argparse.ArgumentParser, option: str) -> None:
    """``--trust-pickle``: allow ``option`` to name a stable-baselines3 ``.zip`` (unpickled on load)."""
    p.add_argument("--trust-pickle", action="store_true",
                   help=f"allow {option} to be a stable-baselines3 .zip: loading one unpickles objects stored in the "
                        "file, which runs arbitrary code from it (only for files you trust)")


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose help is formatted by :class:`HelpFormatter` (unless a command
    passes a subclass of it)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        if not issubclass(kwargs["formatter_class"], HelpFormatter):
            raise TypeError(f"formatter_class: expected prm_critic.commands._help.HelpFormatter or a subclass, "
                            f"got {kwargs['formatter_class'].__name__}")
        super().__init__(*args, **kwargs)
        self._arg_strings: list[str] = []

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None):  # type: ignore[override]
        # kept for error(): a missing required option is reported after the unknown ones in these
        self._arg_strings = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None):  # type: ignore[override]
        """As argparse's, but unknown arguments are reported by the command's own parser (the
        deepest subcommand chosen), each unknown option with the closest valid ones."""
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            command = _chosen_parser(self, ns)
            command.error(command.unrecognized(extras))
        return ns

    def unrecognized(self, extras: Sequence[str]) -> str:
        """``unrecognized arguments: ...``, naming for each unknown option the closest of this
        parser's options."""
        hints = [f"{tok.split('=', 1)[0]}: did you mean {' or '.join(close)}?"
                 for tok in extras if (close := self.closest_options(tok))]
        return f"unrecognized arguments: {' '.join(extras)}" + (f" ({'; '.join(hints)})" if hints else "")

    def closest_options(self, token: str) -> list[str]:
        """This parser's options nearest to the unknown option ``token`` (``[]`` for a non-option):
        close spellings (``--epsiodes``: ``--episodes``) and options whose name is part of it or the
        other way round (``--total-steps``: ``--steps``)."""
        if not token.startswith("-") or self._negative_number_matcher.match(token):
            return []
        word = token.split("=", 1)[0]
        options = [o for o in self._option_string_actions if o.startswith("--") and o not in ("--help", "--version")]
        stem = word.lstrip("-")
        close = [o for o in options if len(stem) >= 3 and (o[2:] in stem.split("-") or stem in o[2:].split("-"))]
        close += [o for o in difflib.get_close_matches(word, options, n=3, cutoff=0.75) if o not in close]
        return close[:3]

    def _unknown_options(self) -> list[str]:
        """The options among the arguments being parsed that this parser does not know."""
        unknown = []
        for tok in self._arg_strings:
            if tok == "--":
                break
            word = tok.split("=", 1)[0]
            if (not tok.startswith("-") or len(tok) < 2 or self._negative_number_matcher.match(tok)
                    or word in self._option_string_actions
                    or (not tok.startswith("--") and tok[:2] in self._option_string_actions)  # -x3, -vv
                    or (self.allow_abbrev and any(o.startswith(word) for o in self._option_string_actions))):
                continue
            unknown.append(tok)
        return unknown

    def error(self, message: str) -> NoReturn:
        """A missing required option is reported after the unknown options typed instead (a
        misspelt ``--epsiodes`` is the reason ``--episodes`` is missing)."""
        if message.startswith("the following arguments are required"):
            unknown = self._unknown_options()
            if unknown:
                message = f"{self.unrecognized(unknown)}; {message}"
        super().error(message)


def _chosen_parser(parser: argparse.ArgumentParser, ns: argparse.Namespace) -> Parser:
    """The deepest subcommand parser that ``ns`` chose under ``parser`` (``parser`` without one)."""
    while True:
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        name = getattr(ns, sub.dest, None) if sub is not None and sub.dest != argparse.SUPPRESS else None
        if sub is None or name not in sub.choices:
            return parser if isinstance(parser, Parser) else Parser(prog=parser.prog)
        parser = sub.choices[name]


def list_items(values: "str | Sequence[str]") -> list[str]:
    """The items of a list option given as ``a b`` (``nargs``), ``a,b`` or both; empty items dropped."""
    items = [values] if isinstance(values, str) else list(values)
    return [part.strip() for item in items for part in str(item).split(",") if part.strip()]


def int_list(name: str, values: "str | Sequence[str] | None") -> tuple[int, ...] | None:
    """Integers given as ``32 32`` (``nargs="+"``), ``32,32`` or both (``32,32 16``); ``None`` stays
    ``None``. A word that is not an integer is refused naming the option and the value; the library
    checks the numbers themselves."""
    if values is None:
        return None
    items = [values] if isinstance(values, str) else [str(v) for v in values]
    try:
        return tuple(int(part) for part in list_items(items))
    except ValueError:
        raise ValueError(f"{name}: expected integers, space- or comma-separated (256 256 or 256,256), "
                         f"got {' '.join(items)!r}") from None


def install(extras: str) -> str:
    """The install command of ``extras`` for a help text (``%`` escaped for argparse)."""
    from prm_critic._optional import install_command

    return install_command(extras).replace("%", "%%")
