"""Hatch build hook: ship inductor_knobs_startup.pth at the root of site-packages.

Wheel installs get it through ``force_include``; editable installs through
``force_include_editable`` (hatchling's own editable ``.pth`` is named with a leading
underscore, so it sorts first and the package is importable when ours runs).
"""

from __future__ import annotations

from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

PTH = "inductor_knobs_startup.pth"


class StartupPthHook(BuildHookInterface):  # type: ignore[misc]
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        key = "force_include_editable" if version == "editable" else "force_include"
        build_data.setdefault(key, {})[PTH] = PTH
