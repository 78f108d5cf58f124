"""One kernel seam: no module above the driver asks whether a device is simulated or real.

The difference between the simulated GPU and a real one lies in the driver (``driver/``:
each kernel and library call is declared once, with its CUDA half and its NumPy reference,
and the device's driver runs the one it has). This test reads every module of ``src/vram``
outside ``driver/`` and fails where one compares a device type (or any string) with "sim"
or "cuda" in a way that tells the two apart: ``== "sim"``, ``!= "cuda"``, ``in ("cuda",)``,
``.startswith("sim")``. A test of membership in a set that holds both (``in ("cuda",
"sim")``: "has a driver", or the cpu device's question) does not tell them apart and
passes; so do the cpu device's own questions (``ops/_plans.launcher`` decides those).

The few modules that name device kinds for what they are, not to choose an implementation,
are listed in ``ALLOWED`` with the reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "src" / "vram"
KINDS = frozenset(("sim", "cuda"))

ALLOWED = {  # path under src/vram -> why it names a device kind
    "cli.py": "the CLI lists each kind's devices and keeps the sim's demo to sim devices",
    "_device.py": "device strings are parsed, and each kind's devices counted by its driver",
    "_demo.py": "the demo holds the sim's work in deferred mode (a vram.sim control) to show "
    "queued and completed work step by step",
    "sim.py": "vram.sim's controls (deferred mode, faults, capacity) take sim devices only",
    "_tensor.py": "Tensor.is_cuda is PyTorch's question, answered as PyTorch answers it",
    "_interop.py": "DLPack and __cuda_array_interface__ name the device kind they export "
    "(kDLCUDA for a GPU; a sim tensor's memory is host memory)",
    "distributed/_group.py": "process group backends by name: NCCL on cuda devices, the "
    "sim's collectives on sim devices",
    "distributed/run.py": "the launcher's --device choice, passed to the workers",
    "interop/torch.py": "PyTorch's own device types (torch.device('cuda')), not vram's",
    "interop/cuda_core.py": "cuda.core works with CUDA devices only",
    "interop/_streams.py": "CUDA's legacy default stream handle exists on CUDA devices only",
    "interop/triton.py": "Triton's CUDA driver serves CUDA devices only",
    "aoti/_model.py": "a model's undefined symbols named cuda* ask for the CUDA runtime (a "
    "symbol's name, not a device kind)",
}


def _names_kinds(node: ast.AST) -> set[str] | None:
    """The kinds a literal string or container of strings names (None: not such a literal)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value} & KINDS
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        found = set()
        for item in node.elts:
            if not (isinstance(item, ast.Constant) and isinstance(item.value, str)):
                return None
            found |= {item.value} & KINDS
        return found
    return None


def _constants(tree: ast.Module) -> dict[str, set[str]]:
    """Module-level names bound to literal containers of strings, and the kinds they name."""
    found = {}
    for stmt in tree.body:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else []
        if isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets = [stmt.target]
        value = getattr(stmt, "value", None)
        kinds = _names_kinds(value) if value is not None else None
        if kinds is None:
            continue
        for target in targets:
            if isinstance(target, ast.Name):
                found[target.id] = kinds
    return found


def _tells_apart(kinds: set[str] | None) -> bool:
    return kinds is not None and len(kinds) == 1


def branches(source: str) -> list[tuple[int, str]]:
    """(line, text) of each expression that tells the sim from cuda in ``source``."""
    tree = ast.parse(source)
    constants = _constants(tree)

    def kinds_of(node: ast.AST) -> set[str] | None:
        if isinstance(node, ast.Name):
            return constants.get(node.id)
        return _names_kinds(node)

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for op, left, right in zip(node.ops, operands, operands[1:], strict=False):
                if isinstance(op, (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)):
                    hit = _tells_apart(_names_kinds(left)) or _tells_apart(_names_kinds(right))
                elif isinstance(op, (ast.In, ast.NotIn)):
                    hit = _tells_apart(kinds_of(right))
                else:
                    hit = False
                if hit:
                    found.append((node.lineno, ast.unparse(node)))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("startswith", "endswith")
            and any(_tells_apart(_names_kinds(arg)) for arg in node.args)
        ):
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_no_module_above_the_driver_tells_the_sim_from_cuda():
    offenders = []
    for path in sorted(ROOT.rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith("driver/") or relative in ALLOWED:
            continue
        for line, text in branches(path.read_text()):
            offenders.append(f"src/vram/{relative}:{line}: {text}")
    assert not offenders, "device-kind branches above the driver:\n" + "\n".join(offenders)


def test_every_allowed_module_exists_and_names_a_kind():
    """The list stays honest: each entry is a module that still names a device kind."""
    for relative in ALLOWED:
        path = ROOT / relative
        assert path.exists(), relative
        assert branches(path.read_text()), f"{relative} no longer names a kind: drop it"


def test_the_check_finds_what_it_looks_for():
    source = """
KIND = ("cuda",)
BOTH = ("cuda", "sim")
a = device.type == "sim"
b = "cuda" != device.type
c = device.type in KIND
d = name.startswith("sim")
e = device.type in BOTH
f = device.type not in ("cuda", "sim")
g = device.type == "cpu"
"""
    assert [line for line, _ in branches(source)] == [4, 5, 6, 7]
