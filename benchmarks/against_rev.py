"""Before/after timings against a git revision of the library, never against frozen copies of old code.

``checkout(rev)`` checks ``rev`` out with ``git worktree add`` into a temporary folder and yields a
folder whose one entry is that tree's ``prm_critic``, with ``rev``'s commit hash. ``Worker`` runs a
benchmark module (``python -m benchmarks.<name> --worker CONFIG``) in a subprocess with that folder
first on ``PYTHONPATH``: the current benchmark's scenario over the library as it was at ``rev``. The
worker builds its scenario once (``serve``) and then times one round per request, so the caller
interleaves the revision's rounds with its own, under the same protocol (the thread's CPU time).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def checkout(rev: str) -> Iterator[tuple[Path, str]]:
    """``(path, commit)``: a folder holding only ``prm_critic`` as of git revision ``rev``, and its commit hash."""
    got = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], cwd=ROOT,
                         capture_output=True, text=True)
    if got.returncode:
        raise SystemExit(f"--against {rev!r}: not a commit of this repository (expected a tag, branch or commit hash)")
    commit = got.stdout.strip()
    tmp = Path(tempfile.mkdtemp(prefix="prm_against_"))
    tree, path = tmp / "tree", tmp / "path"
    subprocess.run(["git", "worktree", "add", "--detach", "--quiet", str(tree), commit], cwd=ROOT, check=True)
    try:
        path.mkdir()
        (path / "prm_critic").symlink_to(tree / "prm_critic", target_is_directory=True)
        yield path, commit
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)
        shutil.rmtree(tmp, ignore_errors=True)


class Worker:
    """``module`` run as a worker over the library in ``path``: ``worker(request)`` is the reply of its
    scenario's step; ``worker.info`` what its scenario reported when built."""

    def __init__(self, module: str, path: Path, config: dict):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(path), str(ROOT)]))
        self.module = module
        # cwd too: ``-m`` puts the working folder first on sys.path, where the current prm_critic would win
        self.proc = subprocess.Popen([sys.executable, "-m", module, "--worker", json.dumps(config)], cwd=path,
                                     env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.info = self._reply()
        lib, want = Path(self.info.pop("prm_critic")).resolve(), (path / "prm_critic").resolve()
        if lib != want:
            self.close()
            raise RuntimeError(f"{module} --worker imported prm_critic from {lib}, expected the checkout's {want}")

    def __call__(self, request: dict) -> dict:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return self._reply()

    def _reply(self) -> dict:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.module} --worker exited with status {self.proc.wait()} (its error is above)")
        return json.loads(line)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=120)

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def add_arguments(p: argparse.ArgumentParser, what: str) -> None:
    """``--against REV`` (time ``what`` over the library at git revision REV too) and the worker's hidden ``--worker``."""
    p.add_argument("--against", metavar="REV", help=f"also time {what} over the library at git revision REV "
                                                    "(tag or commit), in the same rounds")
    p.add_argument("--worker", help=argparse.SUPPRESS)


def serve(config: str, build: Callable[[dict], tuple[dict, Callable[[dict], dict]]]) -> int:
    """The worker's side: ``build(config) -> (info, step)``, then one JSON line ``step(request)`` per request
    line. Replies go to the original stdout; anything else printed goes to stderr."""
    import prm_critic

    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    info, step = build(json.loads(config))
    first = {**info, "prm_critic": str(Path(prm_critic.__file__).parent)}
    for reply in itertools.chain([first], (step(json.loads(line)) for line in sys.stdin)):
        replies.write(json.dumps(reply) + "\n")
        replies.flush()
    return 0
