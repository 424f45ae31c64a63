"""benchmarks/wrappers_overhead.py's doc: an idle measurement stored beside the loaded one gets its own
tables and its own verdict for every goal, computed from its own numbers."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from benchmarks import wrappers_overhead

REPO = Path(__file__).resolve().parents[1]


def _raw() -> dict:
    return json.loads((REPO / "benchmarks" / "results" / "wrappers_overhead.json").read_text())


def test_without_an_idle_measurement_the_goals_carry_no_condition():
    text = wrappers_overhead.render({k: v for k, v in _raw().items() if k != "idle"})
    assert "[idle]" not in text and "[loaded]" not in text and "## Idle machine" not in text
    assert "(load as noted above): " in text


def test_idle_goals_are_computed_from_the_idle_numbers():
    raw = {k: v for k, v in _raw().items() if k != "idle"}
    idle = copy.deepcopy(raw)
    push = idle["rows"]["FetchPush-v4"]
    for k in list(push):  # make every FetchPush variant cost 1 % over the raw step when idle
        push[k]["cpu_us"] = push["raw env"]["cpu_us"] * (1.0 if k == "raw env" else 1.01)
    raw["idle"] = dict(idle, note="paused for the test", command="python -m benchmarks.wrappers_overhead --idle")
    text = wrappers_overhead.render(raw)
    lines = [ln for ln in text.splitlines() if "end to end, shaper(OnnxCritic push_mc (256x256" in ln]
    loaded = [ln for ln in lines if ln.startswith("- [loaded]")]
    idle_ln = [ln for ln in lines if ln.startswith("- [idle]")]
    assert len(loaded) == 1 and len(idle_ln) == 1
    assert "**met** (+1.0%)" in idle_ln[0] and "**not met**" in loaded[0]
    assert "## Idle machine" in text and "paused for the test" in text and "### FetchPush-v4, idle" in text
