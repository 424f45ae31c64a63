"""Build hook: ship the built-in task specs (``envs/specs``) inside the wheel as ``prm_critic/_specs``.

Regular wheels only. An editable install maps the ``prm_critic`` package straight onto the
source tree (which then reads ``envs/specs`` in place); a ``prm_critic/_specs`` folder in
site-packages would shadow that mapping with an empty namespace package.
"""

from __future__ import annotations

from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class SpecsHook(BuildHookInterface):
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name == "wheel" and version == "standard":
            build_data["force_include"]["envs/specs"] = "prm_critic/_specs"
