"""The import graph: rooms (top-level modules and packages) form layers, with no cycles and
no import that climbs back up. Lazy imports inside functions count too; imports under
``if TYPE_CHECKING:`` (annotations only) do not."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).parent.parent / "src" / "cachemark"

# Lower layers never import higher ones (a room may import rooms of its own layer or below,
# as long as no cycle forms).
LAYERS = [
    {"errors", "textfile", "interrupts", "procs", "scratch", "_engine", "wire", "memcache_binary", "outfile"},
    {"schemes", "target", "proctitle", "crash", "sweep", "needs"},
    {"workload"},
    {"spec", "backends", "engine", "measure"},
    {"lab", "results"},
    {"plan", "run", "presets", "analysis"},
    {"report"},
    {"cli", "entry", "__main__", "__init__"},
]


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    name = ".".join(rel.parts)
    return name.removesuffix(".__init__")


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(inner) for stmt in node.body for inner in ast.walk(stmt)}
    return skip


def room_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for path in ROOT.rglob("*.py"):
        name = _module_name(path)
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        tree = ast.parse(path.read_text())
        skip = _type_checking_nodes(tree)
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            targets = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    targets.append(".".join(base + ([node.module] if node.module else [])))
                elif node.module:
                    targets.append(node.module)
            elif isinstance(node, ast.Import):
                targets += [alias.name for alias in node.names]
            for target in targets:
                if target.startswith("cachemark.") and _room(target) != _room(name):
                    graph[_room(name)].add(_room(target))
    return graph


def _layer(room: str) -> int:
    for index, rooms in enumerate(LAYERS):
        if room in rooms:
            return index
    raise AssertionError(f"room {room!r} is in no layer: place it in LAYERS")


def test_no_room_imports_a_higher_layer() -> None:
    climbs = [f"{a} -> {b}" for a, bs in room_graph().items() for b in bs if _layer(b) > _layer(a)]
    assert not climbs, climbs


def test_no_cycles_between_rooms() -> None:
    graph = room_graph()
    state: dict[str, int] = {}

    def visit(room: str, path: list[str]) -> None:
        state[room] = 1
        for nxt in sorted(graph.get(room, ())):
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*path, room, nxt]))
            if nxt not in state:
                visit(nxt, [*path, room])
        state[room] = 2

    for room in sorted(graph):
        if room not in state:
            visit(room, [])
