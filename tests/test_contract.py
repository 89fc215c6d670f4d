"""The satellites (serving, ablation) use the core only through its public names and ``inductor_knobs.ext``."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).parents[1] / "inductor_knobs"


def _private_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level >= 1:
            module = node.module
            if module.split(".")[0] in ("core", "patches") or module.startswith(("core.", "patches.")):
                if any(part.startswith("_") for part in module.split(".")):
                    found.append(f"{path.name}:{node.lineno} from {module}")
                found += [f"{path.name}:{node.lineno} {a.name}" for a in node.names if a.name.startswith("_")]
    return found


def test_no_satellite_imports_a_private_name_or_module_of_the_core():
    found = [
        hit
        for satellite in ("serving", "ablation")
        for path in (PACKAGE / satellite).glob("*.py")
        for hit in _private_imports(path)
    ]
    assert found == [], found


def test_the_core_never_imports_a_satellite():
    found = []
    for path in (PACKAGE / "core").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level >= 2:
                if node.module.split(".")[0] in ("serving", "ablation"):
                    found.append(f"{path.name}:{node.lineno} from {node.module}")
    assert found == [], found
