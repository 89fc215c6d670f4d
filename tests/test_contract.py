"""The satellites (serving, ablation) use the core only through its public names and ``inductor_knobs.ext``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PACKAGE = ROOT / "inductor_knobs"

#: The ablation's dependencies: the [ablate] extra, never the package's own.
ABLATE_EXTRA = {"scipy", "tqdm", "matplotlib", "submitit"}


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


def _module_level_imports(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, top-level module) of every absolute import that runs when the module is imported (not inside a def)."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return
        if isinstance(node, ast.Import):
            found.extend((node.lineno, a.name.split(".")[0]) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module.split(".")[0]))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def test_the_package_depends_on_torch_wrapt_packaging_only():
    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python >= 3.11")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0] for d in project["dependencies"]}
    assert names == {"torch", "wrapt", "packaging", "tomli"}, names
    extras = project["optional-dependencies"]
    assert {re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0] for d in extras["ablate"]} == ABLATE_EXTRA
    assert "inductor-knobs[ablate]" in extras["test"]


def test_no_module_imports_the_ablate_extra_when_it_is_imported():
    """The CLI imports the ablation's options for every command (``doctor`` too), so no module, the ablation's
    included, may import scipy, tqdm, matplotlib or submitit at module level: only inside the function that needs it."""
    found = [
        f"{path.relative_to(ROOT)}:{line} import {name}"
        for folder in (PACKAGE, ROOT / "patches")
        for path in sorted(folder.rglob("*.py"))
        for line, name in _module_level_imports(ast.parse(path.read_text(), str(path)))
        if name in ABLATE_EXTRA
    ]
    assert found == [], found
