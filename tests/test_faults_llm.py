"""Faults of the local model server and of the real-model middleware: a damaged GGUF file of the
right size. The packaged SmolLM2 GGUF and llama.cpp are real (skipped without them); the damaged
file is a real copy with 4 KiB of flipped bytes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from llm_helpers import smollm2

from faults import correct, loud
from prm_critic.llm.server import SMOLLM2, LocalLLMServer, ModelFileError
from prm_critic.validate import ArgumentError

pytestmark = pytest.mark.fault

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), *sys.path])}


# =========================================================================== item 24: GGUF hash
@pytest.fixture(scope="module")
def damaged_gguf(tmp_path_factory):
    """The packaged GGUF with 4 KiB in the middle of its tensor data flipped: same size, same header."""
    good = smollm2()
    data = bytearray(good.read_bytes())
    mid = len(data) // 2
    data[mid:mid + 4096] = bytes(b ^ 0xFF for b in data[mid:mid + 4096])
    p = tmp_path_factory.mktemp("gguf") / "damaged.gguf"
    p.write_bytes(bytes(data))
    assert p.stat().st_size == good.stat().st_size and data[:4] == b"GGUF"
    return p


def _sigint_default():
    """In the child before exec: SIGINT at its default, so Python installs its KeyboardInterrupt handler
    (a suite started in the background by a non-interactive shell hands its children SIGINT ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)



def test_local_llm_server_refuses_a_gguf_with_another_hash(damaged_gguf):
    with loud(24, "a same-size copy of the packaged GGUF with 4 KiB flipped, given LocalLLMServer(sha256=pinned)",
              ModelFileError, match=rf"damaged\.gguf' has SHA-256 [0-9a-f]{{64}}, expected {SMOLLM2.sha256} "
                                    r"\(sha256=\): a damaged or different file; refusing to serve it"):
        LocalLLMServer(damaged_gguf, sha256=SMOLLM2.sha256)
    with loud(24, "LocalLLMServer(sha256=) that is not a SHA-256 hex digest", ArgumentError,
              match=r"sha256: expected a SHA-256 hex digest \(64 hex characters\), got str 'b179c95'"):
        LocalLLMServer(damaged_gguf, sha256="b179c95")
    server = LocalLLMServer(smollm2(), sha256=SMOLLM2.sha256.upper())
    assert server.sha256 == server.file_sha256 == SMOLLM2.sha256


def test_serve_llm_cli_refuses_a_gguf_with_another_hash(damaged_gguf):
    proc = subprocess.run([sys.executable, "-m", "prm_critic.cli", "serve-llm", "--model", str(damaged_gguf),
                           "--sha256", SMOLLM2.sha256], capture_output=True, text=True, timeout=120, env=ENV)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"serve-llm: error: model: {str(damaged_gguf)!r} has SHA-256 " in proc.stderr
    assert f"expected {SMOLLM2.sha256}" in proc.stderr and proc.stdout == ""
    correct(24, "`prm-critic serve-llm --model damaged.gguf --sha256 <pinned>` (4 KiB flipped, same size)",
            "exit 2 before loading: 'serve-llm: error: model: ... has SHA-256 <actual>, expected <pinned>'")


def test_serve_llm_cli_prints_the_file_hash_at_start():
    path = smollm2()
    proc = subprocess.Popen([sys.executable, "-m", "prm_critic.cli", "serve-llm", "--model", str(path),
                             "--sha256", SMOLLM2.sha256], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=ENV, preexec_fn=_sigint_default)
    try:
        line = proc.stdout.readline()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert line.startswith(f"serving {path.name} (SHA-256 {SMOLLM2.sha256}, matches --sha256) as model "), line + err
    assert proc.returncode == 0, err
    correct(24, "`prm-critic serve-llm --model <the packaged GGUF> --sha256 <its hash>`",
            "serves; the start line prints the file's SHA-256 and that it matches --sha256")
