"""The package's layers, read from the source: every import of every module (inside functions too) is parsed with
``ast`` and checked against the rule of the README's architecture section.

1. The library (every module of ``companion/`` outside the two layers below) imports neither ``companion.runs``,
   ``companion.cli`` nor ``companion.book``.
2. The runs (``companion/runs/``, ``companion/cli.py``) never import ``companion.book``.
3. Nothing inside the package imports the package's own ``__init__`` (``import companion``, ``from companion import
   X``, ``from . import X`` at the top level) except ``__main__``: a module that did would be an arrow back up, and
   would load the whole library just to read one name.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parents[2] / "companion"
RUN_LAYER = ("companion.runs", "companion.cli")
BOOK_LAYER = ("companion.book",)
# Known arrows back up, each to be fixed in its own module (the test then passes and the mark can go).
KNOWN_PACKAGE_IMPORTS: dict[str, str] = {}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in sorted(PACKAGE_DIR.rglob("*.py"))}


def _is_module(name: str) -> bool:
    return name in MODULES


def _imported(module: str, path: Path) -> list[tuple[str, int]]:
    """``(dotted name, line)`` of everything ``module`` imports: modules, and the package itself for names read
    from its ``__init__`` (``from companion import Transformer`` gives ``"companion"``)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                found.append((submodule if _is_module(submodule) else source, node.lineno))
    return found


def _layer(module: str) -> str:
    if module == "companion.__main__":
        return "main"
    if module.startswith(BOOK_LAYER):
        return "book"
    if module.startswith(RUN_LAYER):
        return "runs"
    return "library"


def _forbidden(layer: str) -> tuple[str, ...]:
    return {"library": RUN_LAYER + BOOK_LAYER, "runs": BOOK_LAYER}.get(layer, ())


def _hits(target: str, prefixes: tuple[str, ...]) -> bool:
    return any(target == p or target.startswith(p + ".") for p in prefixes)


def test_the_modules_are_found():
    assert {"companion.model", "companion.runs", "companion.cli", "companion.book.interactive"} <= set(MODULES)
    assert _layer("companion.model") == "library" and _layer("companion.runs.train") == "runs"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_import_goes_up_a_layer(module):
    layer = _layer(module)
    wrong = [
        f"line {line}: {target}"
        for target, line in _imported(module, MODULES[module])
        if _hits(target, _forbidden(layer))
    ]
    assert not wrong, f"{module} ({layer}) imports a higher layer: {wrong}"


@pytest.mark.parametrize(
    "module",
    [
        pytest.param(m, marks=pytest.mark.xfail(reason=KNOWN_PACKAGE_IMPORTS[m], strict=False))
        if m in KNOWN_PACKAGE_IMPORTS
        else m
        for m in sorted(MODULES)
        if m not in ("companion", "companion.__main__")
    ],
)
def test_no_module_imports_the_package_init(module):
    wrong = [f"line {line}" for target, line in _imported(module, MODULES[module]) if target == "companion"]
    assert not wrong, f"{module} imports the package's __init__ ({', '.join(wrong)}): import from the module itself"


def test_the_checker_sees_each_kind_of_import(tmp_path):
    source = tmp_path / "companion" / "book" / "x.py"
    source.parent.mkdir(parents=True)
    source.write_text(
        "import companion\nfrom companion import Transformer\nfrom .. import __version__\n"
        "from ..runs import RunConfig\nfrom ..model import Transformer\n\n"
        "def late():\n    from .interactive import interact\n",
        encoding="utf-8",
    )
    targets = [target for target, _ in _imported("companion.book.x", source)]
    assert targets == [
        "companion",
        "companion",
        "companion",
        "companion.runs",
        "companion.model",
        "companion.book.interactive",
    ]
