"""``prm-critic specs``: list the built-in task specs or print one as TOML-like text."""

from __future__ import annotations

import json


def register(sub) -> None:
    p = sub.add_parser("specs", help="list built-in task specs, or show one")
    p.add_argument("name", nargs="?", help="a built-in spec name or a .toml path to validate and show")
    p.set_defaults(func=run)


def run(args) -> int:
    from prm_critic.robotics.spec import list_builtin_specs, load_spec

    if not args.name:
        for n in list_builtin_specs():
            print(n)
        return 0
    print(json.dumps(load_spec(args.name).to_dict(), indent=2))
    return 0
