"""The package's import contract: the satellites (serving, ablation) use the core only through its public names,
``inductor_knobs.errors`` and ``inductor_knobs.ext``; the core never imports a satellite; no module imports a private
name or a private module of another; each lazy public table equals what type checkers read."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PACKAGE = ROOT / "inductor_knobs"
SATELLITES = ("serving", "ablation")
#: What a satellite may import of the rest of the package.
CORE_FACES = ("inductor_knobs", "inductor_knobs.errors", "inductor_knobs.ext")

#: The ablation's dependencies: the [ablate] extra, never the package's own.
ABLATE_EXTRA = {"scipy", "tqdm", "matplotlib", "submitit"}


def _modules() -> list[tuple[str, Path]]:
    found = []
    for path in sorted([*PACKAGE.rglob("*.py"), *(ROOT / "patches").glob("*.py")]):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[0] == "patches":
            parts = ["inductor_knobs", *parts]
        found.append((".".join(parts[:-1] if parts[-1] == "__init__" else parts), path))
    return found


def _imports(module: str, path: Path) -> list[tuple[int, str, list[str]]]:
    """(line, absolute module imported from, names) for every import of ``path``."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[: len(package) - node.level + 1], *([node.module] if node.module else [])])
            out.append((node.lineno, base, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name, []) for a in node.names]
    return out


def _satellite(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "inductor_knobs" and parts[1] in SATELLITES else None


def test_a_satellite_reaches_the_core_only_through_its_public_faces():
    import inductor_knobs as ik

    public = {*ik._PUBLIC, "__version__", "errors", "ext"}
    found = []
    for module, path in _modules():
        mine = _satellite(module)
        if mine is None:
            continue
        for line, base, names in _imports(module, path):
            if not base.startswith("inductor_knobs") or _satellite(base) == mine:
                continue
            if base in CORE_FACES and (base != "inductor_knobs" or public.issuperset(names)):
                continue
            found.append(f"{path.relative_to(ROOT)}:{line} from {base} import {', '.join(names)}")
    assert found == [], "\n".join(found)


def test_the_core_never_imports_a_satellite():
    found = [
        f"{path.relative_to(ROOT)}:{line} {base}"
        for module, path in _modules()
        # the package's lazy table names serving; the CLI finds ``ablate`` in its subpackage
        if _satellite(module) is None and module not in ("inductor_knobs", "inductor_knobs.cli")
        for line, base, names in _imports(module, path)
        if _satellite(base) or any(_satellite(f"{base}.{n}") for n in names)
    ]
    assert found == [], "\n".join(found)


def test_no_module_imports_a_private_name_or_module_of_another():
    found = []
    for module, path in _modules():
        for line, base, names in _imports(module, path):
            if not base.startswith("inductor_knobs") and base not in ("patches",):
                continue
            private = [p for p in base.split(".") if p.startswith("_") and not p.startswith("__")]
            private += [n for n in names if n.startswith("_") and not n.startswith("__")]
            if private:
                found.append(f"{path.relative_to(ROOT)}:{line} from {base} import {', '.join(names)}")
    assert found == [], "\n".join(found)


@pytest.mark.parametrize("package", ["inductor_knobs", "inductor_knobs.serving"])
def test_each_lazy_public_table_equals_what_type_checkers_read(package):
    """``_PUBLIC`` (what loads at run time) and the ``if TYPE_CHECKING:`` imports (what IDEs read) name the same
    objects from the same modules."""
    import importlib

    mod = importlib.import_module(package)
    tree = ast.parse(Path(mod.__file__).read_text())
    checked = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for imp in node.body:
                if isinstance(imp, ast.ImportFrom) and imp.module:
                    for alias in imp.names:
                        checked[alias.asname or alias.name] = imp.module
    assert checked == mod._PUBLIC  # ``from .core.blocks import knobs`` <-> ``"knobs": "core.blocks"``
    for name in checked:
        assert getattr(mod, name) is not None


def test_at_most_25_public_names_at_the_top_level():
    import inductor_knobs as ik

    assert len(ik.__all__) <= 25, ik.__all__
    assert all(getattr(ik, name) is not None for name in ik.__all__)


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


def test_the_extension_api_loads_lazily_and_its_table_equals_what_type_checkers_read():
    """``inductor_knobs.ext`` imports nothing until a name is used (a forked ablation server imports it), and its
    ``_PUBLIC`` table names the objects its ``if TYPE_CHECKING:`` imports name."""
    import importlib
    import subprocess
    import sys

    code = "import sys, inductor_knobs.ext; print(sorted(m for m in sys.modules if m.startswith('inductor_knobs')))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "['inductor_knobs', 'inductor_knobs.ext']", loaded
    ext = importlib.import_module("inductor_knobs.ext")
    checked = {}
    for node in ast.walk(ast.parse(Path(ext.__file__).read_text())):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for imp in node.body:
                for alias in imp.names:  # ``from .core import setup`` is the module itself: ("core.setup", None)
                    is_module = (imp.module, alias.name) in (("core", "events"), ("core", "setup"), ("core", "torch_compat"))
                    entry = (f"{imp.module}.{alias.name}", None) if is_module else (imp.module, alias.name)
                    checked[alias.asname or alias.name] = entry
    assert checked == ext._PUBLIC
    assert sorted(ext.__all__) == sorted(ext._PUBLIC) and all(getattr(ext, name) is not None for name in ext.__all__)
