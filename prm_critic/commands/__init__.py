"""Subcommands of the ``prm-critic`` CLI (one module each, with ``register(subparsers)``)."""
