"""Faults of the Ray executor's cluster connection: an address where nothing listens, an address
where something listens but no Ray head answers, and the line that says which cluster was joined.
The connection attempts are real (Ray, a local socket); each runs in a child process with a generous
wall-clock limit, so a connection that never gives up fails the test instead of hanging it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from faults import correct, loud
from prm_critic.parallel import RayExecutor, joined_cluster_message

pytest.importorskip("ray")
pytestmark = pytest.mark.fault

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), *sys.path])}
CHILD = """
import sys
from prm_critic.parallel import RayExecutor
try:
    RayExecutor(1, address=sys.argv[1])._init()
except Exception as exc:
    print("ERROR", type(exc).__name__, str(exc).replace(chr(10), " "))
else:
    print("CONNECTED")
"""


def _connect_in_child(address: str, connect_s: float) -> str:
    """The child's one-line answer; ``subprocess.TimeoutExpired`` if it is still trying after 240 s."""
    env = {**ENV, "PRM_RAY_CONNECT_S": str(connect_s)}
    proc = subprocess.run([sys.executable, "-c", CHILD, address], env=env, capture_output=True, text=True,
                          timeout=240)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(("ERROR", "CONNECTED"))]
    assert lines, proc.stdout + proc.stderr
    return lines[-1]


def _reraise(answer: str) -> None:
    assert answer.startswith("ERROR "), answer
    kind, _, message = answer[len("ERROR "):].partition(" ")
    raise {"ConnectionError": ConnectionError, "ValueError": ValueError}.get(kind, RuntimeError)(message)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# =========================================================================== item 29: Ray cluster connection
def test_ray_address_with_nothing_listening_fails_with_a_clear_error():
    address = f"127.0.0.1:{_free_port()}"
    answer = _connect_in_child(address, 5)
    with loud(29, "--address host:port where nothing listens", ConnectionError,
              match=rf"nothing answers at '{address}'.*ray start --head"):
        _reraise(answer)


def test_ray_address_with_a_silent_listener_gives_up_after_connect_s():
    with socket.socket() as srv:
        srv.bind(("", 0))  # all interfaces: Ray resolves 127.0.0.1 to this machine's address
        srv.listen(8)
        address = f"127.0.0.1:{srv.getsockname()[1]}"
        answer = _connect_in_child(address, 3)
    with loud(29, "--address where a non-Ray server listens", ConnectionError,
              match=rf"no Ray cluster at '{address}'.*ray start --head"):
        _reraise(answer)


def test_ray_connect_s_is_checked():
    with loud(29, "connect_s <= 0", ValueError, match=r"connect_s: expected a finite number of seconds > 0, got 0"):
        RayExecutor(1, address="auto", connect_s=0)


def test_joined_cluster_message_names_address_nodes_and_cpus():
    # a fake cluster description (what ray.nodes() / ray.cluster_resources() return), not a real cluster
    fake_nodes = [{"Alive": True}, {"Alive": True}, {"Alive": False}]
    msg = joined_cluster_message("auto", "10.0.0.5:6379", fake_nodes, {"CPU": 48.0, "GPU": 2.0})
    assert "10.0.0.5:6379" in msg and "'auto'" in msg and "2 node(s)" in msg and "48 CPUs" in msg
    correct(29, "--address auto joins another job's cluster", msg)
