"""The import graph: rooms (top-level modules and packages) form layers, with no cycles and
no import that climbs back up; and no two modules anywhere, inside a room or across rooms,
import each other round a circle. Lazy imports inside functions count too (a lazy import
hides a circle from the interpreter, not from the reader); imports under
``if TYPE_CHECKING:`` (annotations only) do not."""

from __future__ import annotations

import ast
import functools
import re
from collections import defaultdict, deque
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).parent.parent / "src" / "cachemark"

# Lower layers never import higher ones (a room may import rooms of its own layer or below,
# as long as no cycle forms). ``__init__`` is the package's own __init__.py: it only holds
# ``__version__``, and every module below imports it anyway (it is their parent package).
LAYERS = [
    {"__init__", "errors", "textfile", "interrupts", "procs", "scratch", "_engine", "wire", "memcache_binary",
     "outfile", "driver_registry", "limits", "units"},
    {"schemes", "target", "proctitle", "crash", "sweep"},
    {"workload"},
    {"spec", "backends", "engine", "measure", "needs"},  # needs: its op names are the backends' ops
    {"lab", "results"},
    {"plan", "run", "presets", "analysis"},
    {"report"},
    {"cli", "entry", "__main__"},
]




class Edge(NamedTuple):
    """One import of a cachemark module by another, with where it is written (for the message)."""

    source: str
    target: str
    where: str


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent)
    name = ".".join((*rel.parts[:-1], rel.name.split(".")[0]))  # _engine.abi3.so is cachemark._engine
    return name.removesuffix(".__init__")


def _all_modules() -> dict[str, Path]:
    paths = [*ROOT.rglob("*.py"), *ROOT.rglob("*.so")]
    return {_module_name(path): path for path in paths if "__pycache__" not in path.parts}


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(inner) for stmt in node.body for inner in ast.walk(stmt)}
    return skip


def _imported(node: ast.AST, package: str, known: set[str]) -> Iterator[str]:
    """The modules one import statement loads: ``from . import thresholds`` names the submodule
    ``thresholds``, ``from .. import __version__`` the package itself."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            parts = package.split(".")
            base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        for alias in node.names:
            yield f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base


@functools.cache  # parsed once for the three tests that read it (~1.5 s of CPU each)
def module_edges() -> tuple[Edge, ...]:
    """Every import of a cachemark module by another, lazy ones included."""
    modules = _all_modules()
    known = set(modules)
    edges = []
    for name, path in sorted(modules.items()):
        if path.suffix != ".py":
            continue
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        tree = ast.parse(path.read_text())
        skip = _type_checking_nodes(tree)
        lazy = {id(inner) for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                for inner in ast.walk(node)}
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            for target in _imported(node, package, known):
                if (target == "cachemark" or target.startswith("cachemark.")) and target != name:
                    where = f"{path.relative_to(ROOT.parent)}:{node.lineno}"
                    edges.append(Edge(name, target, where + (" (in a function)" if id(node) in lazy else "")))
    return tuple(edges)


def module_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for edge in module_edges():
        graph[edge.source].add(edge.target)
    return graph


def room_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for source, targets in module_graph().items():
        for target in targets:
            if _room(source) != _room(target):
                graph[_room(source)].add(_room(target))
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
    cycles = import_cycles(room_graph())
    assert not cycles, "import cycle between rooms: " + "; ".join(" -> ".join(cycle) for cycle in cycles)


def test_no_cycles_between_modules() -> None:
    """A circle inside one package is still a circle: neither module can be read, tested or
    moved without the other (report/blocks.py and the modules that draw its blocks were one)."""
    edges = module_edges()
    graph: dict[str, set[str]] = defaultdict(set)
    where: dict[tuple[str, str], str] = {}
    for edge in edges:
        graph[edge.source].add(edge.target)
        where.setdefault((edge.source, edge.target), edge.where)
    knots = {min(group): group for group in _strongly_connected(graph)}
    cycles = import_cycles(graph)
    lines = []
    for cycle in cycles:
        lines.append("import cycle: " + " -> ".join(cycle))
        lines += [f"    {a} -> {b}  ({where[a, b]})" for a, b in zip(cycle, cycle[1:])]
        if len(knots[cycle[0]]) > len(cycle) - 1:
            lines.append(f"    (one circle of a knot of {len(knots[cycle[0]])}: {', '.join(sorted(knots[cycle[0]]))})")
    message = "\n".join(lines)
    if cycles:
        print(message)
    assert not cycles, f"{len(cycles)} import cycle(s) among modules:\n{message}"


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One shortest cycle per strongly connected group of nodes (each group is a knot of
    circles; breaking the one printed may leave another, which the next run prints)."""
    cycles = []
    for group in _strongly_connected(graph):
        if len(group) < 2:
            continue
        start = min(group)
        cycles.append(_shortest_cycle(graph, start, group))
    return sorted(cycles)


def _strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's algorithm: the groups of nodes that can each reach every other."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            groups.append(group)

    for node in sorted(set(graph) | {t for ts in graph.values() for t in ts}):
        if node not in index:
            visit(node)
    return groups


def _shortest_cycle(graph: dict[str, set[str]], start: str, group: set[str]) -> list[str]:
    """Breadth first from ``start`` back to itself, staying inside its group."""
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in sorted(graph.get(node, ())):
            if nxt not in group:
                continue
            if nxt == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if nxt not in came_from:
                came_from[nxt] = node
                queue.append(nxt)
    raise AssertionError(f"{start} is in a cycle group but no cycle returns to it")


def test_cycle_finder_sees_a_knot_and_leaves_a_chain() -> None:
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}) == [["a", "b", "c", "a"]]
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


# --- the Rust engine: the same rule for its modules -------------------------------------------------

ENGINE = Path(__file__).parent.parent / "engine"
_RUST_USE = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?use\s+(crate|super)::([A-Za-z0-9_:{}, \n]+?);", re.M)


def _rust_modules(src: Path) -> dict[str, Path]:
    """Each module of one crate by its path (``proto::resp``), ``""`` for the crate root."""
    modules = {}
    for path in src.rglob("*.rs"):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] in ("lib", "main", "mod"):
            parts.pop()
        modules["::".join(parts)] = path
    return modules


def rust_module_graph(src: Path) -> dict[str, set[str]]:
    """Edges from each module to the modules it ``use``s, between modules neither of which holds the
    other: a parent declares and re-exports its children, and a child takes items from its parent,
    without making a circle a reader has to untangle. Test modules (``#[cfg(test)]``) are left out."""
    modules = _rust_modules(src)
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        here = name.split("::") if name else []
        for root, tail in _RUST_USE.findall(path.read_text().split("#[cfg(test)]", 1)[0]):
            base = [] if root == "crate" else here[:-1]
            tail = " ".join(tail.split())
            items = tail.strip("{}").split(",") if tail.startswith("{") else [tail]
            for item in items:
                segments = [s.strip() for s in item.split("{", 1)[0].split("::") if s.strip()]
                prefixes = ("::".join([*base, *segments[:n]]) for n in range(len(segments), 0, -1))
                target = next((m for m in prefixes if m in modules), None)
                if target is None or target == name or not target or not name:
                    continue
                if name.startswith(target + "::") or target.startswith(name + "::"):
                    continue  # a parent and its child
                graph[name].add(target)
    return graph


def test_no_cycles_between_engine_modules() -> None:
    """The engine's crates keep the rule too: two modules that use each other were one module
    (the protocols and their dispatch; the proxy and its pumps) until their shared part moved below."""
    crates = sorted({ENGINE, *(p.parent for p in ENGINE.glob("*/src") if p.is_dir())})
    assert len(crates) >= 5  # the extension module and its four crates
    found = {crate.name: import_cycles(rust_module_graph(crate / "src")) for crate in crates}
    assert not any(found.values()), found


def test_the_engine_graph_sees_a_circle_between_siblings(tmp_path: Path) -> None:
    (tmp_path / "lib.rs").write_text("pub mod a;\npub mod b;\npub use a::Thing;\n")
    (tmp_path / "a.rs").write_text("use crate::b::helper;\npub struct Thing;\n")
    (tmp_path / "b.rs").write_text("use super::a::Thing;\npub fn helper() {}\n")
    assert import_cycles(rust_module_graph(tmp_path)) == [["a", "b", "a"]]
    (tmp_path / "b.rs").write_text("pub fn helper() {}\n")
    assert import_cycles(rust_module_graph(tmp_path)) == []
