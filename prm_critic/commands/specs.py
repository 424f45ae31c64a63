"""``prm-critic specs``: list the built-in task specs, or print one as TOML with its path.

    prm-critic specs                      # the built-in names
    prm-critic specs FetchReach-v4        # the spec's TOML text (the file to copy and edit)
    prm-critic specs my_task.toml         # validate a spec file and print it back

The first line printed is a TOML comment with the file's path, so ``prm-critic specs NAME > my.toml``
writes a valid spec to start from.
"""

from __future__ import annotations

from pathlib import Path


DESCRIPTION = """\
List the built-in task specs, or print one as TOML with its path.

  prm-critic specs                      # the built-in names
  prm-critic specs FetchReach-v4        # the spec's TOML text (the file to copy and edit)
  prm-critic specs my_task.toml         # validate a spec file and print it back

The first line printed is a TOML comment with the file's path, so prm-critic specs NAME > my.toml
writes a valid spec to start from.
"""


def register(sub) -> None:
    p = sub.add_parser("specs", help="list built-in task specs, or print one as TOML with its path",
                       description=DESCRIPTION)
    p.add_argument("name", nargs="?",
                   help="a built-in spec name or a .toml path to validate and show (default: list the built-in names)")
    p.set_defaults(func=run)


def spec_file(name: str) -> Path:
    """Path of the TOML file behind ``name``: a built-in spec name or a ``.toml`` file path.

    Raises:
        SpecError: an unknown name (the message lists the built-in names) or a missing file.
    """
    from prm_critic.robotics.spec import SpecError, _spec_files

    p = Path(name)
    if p.suffix == ".toml" or p.exists():
        if not p.is_file():
            raise SpecError(f"spec: file {str(p)!r} does not exist (expected a .toml spec file or one of the "
                            f"built-in names {sorted(_spec_files())})")
        return p
    files = _spec_files()
    if name not in files:
        import difflib

        close = difflib.get_close_matches(name, list(files), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise SpecError(f"task: unknown task {name!r}; expected one of {sorted(files)} or a .toml path{hint}")
    return files[name]


def run(args) -> int:
    from prm_critic.robotics.spec import list_builtin_specs, load_spec

    if not args.name:
        for n in list_builtin_specs():
            print(n)
        return 0
    path = spec_file(args.name)
    load_spec(path)  # validate before showing
    text = path.read_text(encoding="utf-8")
    print(f"# {path.resolve()}")
    print(text, end="" if text.endswith("\n") else "\n")
    return 0
