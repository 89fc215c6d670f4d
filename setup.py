"""Ship ``inductor_knobs_startup.pth`` at the root of site-packages, in wheels and editable installs.

Everything else is declared in ``pyproject.toml``.  The ``.pth`` activates ``INDUCTOR_KNOBS_*``
variables in every Python process (see ``inductor_knobs/startup.py``); a ``.pth`` file only runs
from a site directory, so it cannot live inside the package.

- Wheels: ``build_py`` copies it into the build directory's root, which becomes the wheel's root.
- Editable installs (PEP 660): setuptools writes the editable wheel from a strategy object and
  offers no public hook to add a root file, so the strategy is wrapped to add it.  Its name sorts
  after setuptools' ``__editable__.*.pth`` (the finder that maps ``inductor_knobs.patches`` to the
  top-level ``patches/`` folder), so the package is importable when it runs.  CI checks that both
  install kinds activate.
"""

from __future__ import annotations

import os
from typing import Any

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

PTH = "inductor_knobs_startup.pth"
HERE = os.path.dirname(os.path.abspath(__file__))


def _pth_text() -> str:
    with open(os.path.join(HERE, PTH), encoding="utf-8") as f:
        return f.read()


class BuildPyWithStartupPth(build_py):
    def run(self) -> None:
        super().run()
        if not self.editable_mode:
            self.copy_file(os.path.join(HERE, PTH), os.path.join(self.build_lib, PTH), preserve_mode=False)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, PTH)]


class _WithStartupPth:
    """An editable strategy that also writes the startup ``.pth`` into the editable wheel."""

    def __init__(self, strategy: Any) -> None:
        self._strategy = strategy

    def __enter__(self) -> _WithStartupPth:
        self._strategy.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._strategy.__exit__(*exc)

    def __call__(self, wheel: Any, files: list[str], mapping: dict[str, str]) -> None:
        self._strategy(wheel, files, mapping)
        wheel.writestr(PTH, _pth_text())


class EditableWheelWithStartupPth(editable_wheel):
    def _select_strategy(self, *args: Any, **kwargs: Any) -> Any:
        return _WithStartupPth(super()._select_strategy(*args, **kwargs))


setup(cmdclass={"build_py": BuildPyWithStartupPth, "editable_wheel": EditableWheelWithStartupPth})
