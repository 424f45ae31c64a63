"""Writing the benchmarks' raw data and results docs: atomic writes (a killed run never leaves a
half-written file), a doc rendered from its raw-data file alone, and the machine a measurement ran on."""

from __future__ import annotations

import argparse
import json
import os
import platform
from pathlib import Path
from typing import Any, Callable

__all__ = ["write_text", "write_json", "save_figure", "render_file", "add_doc_arguments", "render_only",
           "write_measurement", "machine", "measured_on"]


def write_text(path: "str | Path", text: str) -> Path:
    """Write ``text`` to ``path`` atomically (``prm_critic._io.atomic_write_bytes``); returns the path."""
    from prm_critic._io import atomic_write_bytes

    atomic_write_bytes(Path(path), text.encode())
    return Path(path)


def write_json(path: "str | Path", data: Any, *, indent: int = 1, **dumps: Any) -> Path:
    """Write ``data`` as JSON (``json.dumps`` with ``indent`` and ``dumps``) and a final newline to ``path``
    atomically; returns the path."""
    return write_text(path, json.dumps(data, indent=indent, **dumps) + "\n")


def save_figure(fig: Any, path: "str | Path", **savefig: Any) -> Path:
    """Save the matplotlib figure ``fig`` to ``path`` atomically (its format from the suffix; ``savefig``:
    ``Figure.savefig`` arguments) and close it; returns the path."""
    import io

    import matplotlib.pyplot as plt

    from prm_critic._io import atomic_write_bytes

    buf = io.BytesIO()
    fig.savefig(buf, format=Path(path).suffix.lstrip(".") or "png", **savefig)
    plt.close(fig)
    atomic_write_bytes(Path(path), buf.getvalue())
    return Path(path)


def render_file(render: Callable[[dict], str], raw_path: "str | Path", md_path: "str | Path") -> Path:
    """Write the doc ``render(raw)`` of the raw-data JSON at ``raw_path`` to ``md_path``; returns ``md_path``."""
    return write_text(md_path, render(json.loads(Path(raw_path).read_text())))


def add_doc_arguments(ap: argparse.ArgumentParser, raw: Path, doc: Path, *, doc_flag: str = "--md") -> None:
    """The options of a script whose doc is rendered from its raw data alone: ``--raw`` (the raw-data
    JSON), ``doc_flag`` (the doc, ``args.doc``) and ``--render`` (only write the doc from ``--raw``)."""
    ap.add_argument("--raw", type=Path, default=raw, help="raw-data JSON the measurement is written to")
    ap.add_argument(doc_flag, dest="doc", metavar=doc_flag.lstrip("-").upper(), type=Path, default=doc,
                    help="markdown rendered from the raw data")
    ap.add_argument("--render", action="store_true", help=f"only write {doc_flag} from --raw (no measurement)")


def render_only(args: argparse.Namespace, render: Callable[[dict], str]) -> bool:
    """With ``--render`` (:func:`add_doc_arguments`): write the doc from ``--raw``, say so and return
    True (the script measures nothing); else False."""
    if args.render:
        print(f"wrote {render_file(render, args.raw, args.doc)}")
    return bool(args.render)


def write_measurement(render: Callable[[dict], str], raw: dict, raw_path: "str | Path", doc_path: "str | Path") -> Path:
    """Write the measurement ``raw`` to ``raw_path`` and the doc rendered from that file to ``doc_path``; say
    so; returns ``doc_path``."""
    write_json(raw_path, raw)
    out = render_file(render, raw_path, doc_path)
    print(f"wrote {raw_path} and {out}")
    return out


def machine() -> str:
    """``x86_64, Python 3.11.9, 16 CPU cores``: what a measurement records of the machine it ran on."""
    return f"{platform.machine()}, Python {platform.python_version()}, {os.cpu_count()} CPU cores"


def measured_on(machine: str, end: str = ".") -> str:
    """The doc line naming the machine a measurement ran on (``machine`` as the raw data recorded it)."""
    return f"Measured on: {machine}{end}"
