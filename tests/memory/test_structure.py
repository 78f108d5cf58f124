"""The memory package's structure: no import circle (function-local imports included), no
module outside the allocator's own assigning to an allocator (hooks instead), and one
declared protocol that every device allocator satisfies."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import vram
from vram.memory import AsyncAllocator, DeviceCachingAllocator
from vram.memory._protocol import DeviceAllocator
from vram.memory._uncached import UncachedAllocator

SRC = Path(vram.__file__).parent
MEMORY = SRC / "memory"


def _sibling_imports(path: Path) -> set[str]:
    """The memory modules ``path`` imports, anywhere in it (a function's body too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:  # from . import _registry
                found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            parts = node.module.split(".")
            if parts[:2] == ["vram", "memory"] and len(parts) > 2:
                found.add(parts[2])
    return found


def _graph() -> dict[str, set[str]]:
    modules = {p.stem: p for p in MEMORY.glob("*.py") if p.stem != "__init__"}
    return {name: _sibling_imports(path) & set(modules) for name, path in modules.items()}


def test_the_memory_package_has_no_import_circle():
    graph = _graph()
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            circle = path[path.index(name) :] + [name]
            pytest.fail("import circle: " + " -> ".join(circle))
        if name in done:
            return
        for imported in sorted(graph[name]):
            visit(imported, [*path, name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])
    assert "_oom_report" not in graph["_caching"]  # the report registers itself instead


def _assigned_objects(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, object) of every assignment to an attribute or item of an object, and of
    every setattr / delattr: ``a.b.c = x`` gives "a.b"; ``a.b[k] = x`` gives "a.b"."""
    out = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
            and node.args
        ):
            out.append((node.lineno, ast.unparse(node.args[0])))
        for target in targets:
            for part in ast.walk(target):
                if isinstance(part, (ast.Attribute, ast.Subscript)) and isinstance(
                    part.ctx, (ast.Store, ast.Del)
                ):
                    out.append((node.lineno, ast.unparse(part.value)))
    return out


def test_no_module_outside_the_allocator_assigns_to_an_allocator():
    """Other modules observe or steer an allocator through the hooks it declares
    (Note [Hooks] in _caching): no ``allocator.x = ...``, ``allocator.x[k] = ...``,
    ``setattr(allocator, ...)`` anywhere else in vram."""
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        if path == MEMORY / "_caching.py":
            continue
        for line, obj in _assigned_objects(ast.parse(path.read_text())):
            names = re.findall(r"[A-Za-z_][A-Za-z0-9_]*", obj)
            if any(name.lower().endswith("allocator") for name in names):
                offenders.append(f"{path.relative_to(SRC)}:{line}: {obj}")
    assert offenders == []


@pytest.mark.parametrize("kind", [DeviceCachingAllocator, UncachedAllocator, AsyncAllocator])
def test_every_device_allocator_offers_the_protocol(kind, sim0):
    assert isinstance(kind(sim0), DeviceAllocator)


def test_the_caching_and_uncached_allocators_share_one_path():
    """(Note [The cached path]) The uncached allocator overrides no step: the no_caching
    flag and the segment size are all it changes, so no fast path can skip it."""
    own = {
        name
        for name, value in vars(UncachedAllocator).items()
        if callable(value) or isinstance(value, staticmethod)
    }
    assert own == {"allocation_size"}
