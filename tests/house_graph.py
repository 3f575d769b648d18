"""The house as its code draws it: rooms, floors, the arrows between modules.

Read from the source by ``ast`` (every ``import``, at the top of a module or
inside a function), never by importing it, so a test can check the layering
without running anything. ``python -m tests.house_graph`` prints the picture
``docs/house.md`` opens with, and the counts (modules, arrows, arrows that
run up); ``tests/test_house.py`` fails when an arrow goes up, a module reads
another's private name, a module grows past ``MAX_LINES``, or the picture in
the docs is no longer the one the code draws.
"""

from __future__ import annotations

import ast
import pathlib
from collections import defaultdict
from dataclasses import dataclass, field

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("crawler", "workers", "geo")
MAX_LINES = 400

# Floors, lowest first: a module may import its own room and any room on a
# lower floor, never one above. Rooms on one floor may not import each other.
# The base is the modules directly in ``crawler/`` (and ``crawler.bencode``):
# settings, keys, errors, logs, redaction, parsing, which every room needs.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("base",),
    ("geo",),
    ("crawler.store",),
    ("crawler.queue",),
    ("crawler.counters",),
    ("crawler.sources",),
    ("crawler.stathat",),
    ("crawler.report",),
    ("workers",),
    ("crawler.dashboard",),
    ("crawler.cli",),
)
ROOMS = tuple(r for floor in FLOORS for r in floor if r != "base")
BASE_PACKAGES = ("crawler.bencode",)
TOP = ("crawler.__main__",)  # ``python -m crawler``: the commands, above everything

# Names of other libraries' internals the code relies on on purpose (each is
# listed, with why, beside the version bound in pyproject.toml).
THIRD_PARTY_PRIVATE = frozenset({
    "_exit", "_getframe", "_asdict", "_replace", "_fields", "_make",
    # redis-py
    "_pool", "_in_use_connections", "_available_connections", "_created_connections",
    "_checkpid", "_lock", "_sock", "_parser", "_buffer", "_cleanup", "_disconnect_raise",
    "_execution_strategy", "_nodes_manager", "_connection_kwargs",
    # gevent, libtorrent, structlog, werkzeug
    "_fd", "_loop",
})


@dataclass
class Module:
    name: str
    path: pathlib.Path
    lines: int
    imports: set[str] = field(default_factory=set)
    private_reads: list[tuple[int, str]] = field(default_factory=list)


def _name_of(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Module]:
    """Every module of the project's packages, with the modules it imports."""
    found = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            text = path.read_text("utf-8")
            found[_name_of(path)] = Module(_name_of(path), path, text.count("\n"))
    for mod in found.values():
        tree = ast.parse(mod.path.read_text("utf-8"))
        package = mod.name if mod.path.name == "__init__.py" else mod.name.rpartition(".")[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")
                    up = up[: len(up) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in found else base for a in node.names]
                if node.level == 0 and node.module in found:
                    for a in node.names:
                        if a.name.startswith("_") and not a.name.startswith("__"):
                            mod.private_reads.append((node.lineno, f"{node.module}.{a.name}"))
            else:
                continue
            for target in targets:
                while target and target not in found:
                    target = target.rpartition(".")[0]
                if target and target != mod.name:
                    mod.imports.add(target)
        mod.private_reads += _foreign_attributes(tree)
    return found


def _foreign_attributes(tree: ast.AST) -> list[tuple[int, str]]:
    """``x._name`` where ``_name`` is not one this module defines (on ``self`` or anything else)."""
    own = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            own.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        elif isinstance(node, ast.arg):
            own.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            own.update((a.asname or a.name).split(".")[0] for a in node.names)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    own.add(stmt.target.id)
    reads = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            if node.attr not in own and node.attr not in THIRD_PARTY_PRIVATE:
                reads.append((node.lineno, node.attr))
    return reads


def room_of(name: str) -> str:
    """The room a module belongs to: a sub-package of ``crawler``, ``workers``, ``geo``, or the base."""
    if name in TOP:
        return "top"
    for room in ROOMS:
        if name == room or name.startswith(room + "."):
            return room
    return "base"


def floor_of(room: str) -> int:
    if room == "top":
        return len(FLOORS)
    return next(i for i, floor in enumerate(FLOORS) if room in floor)


def arrows(found: dict[str, Module]) -> list[tuple[str, str]]:
    """Every (importer, imported) pair of the project's modules."""
    return sorted((m.name, t) for m in found.values() for t in m.imports)


def upward(found: dict[str, Module]) -> list[tuple[str, str]]:
    """Arrows from a room to a room on its own floor or above (the base's modules may import each other)."""
    bad = []
    for a, b in arrows(found):
        ra, rb = room_of(a), room_of(b)
        if ra != rb and floor_of(rb) >= floor_of(ra):
            bad.append((a, b))
    return bad


def room_arrows(found: dict[str, Module]) -> dict[str, set[str]]:
    """Which rooms each room imports."""
    out: dict[str, set[str]] = defaultdict(set)
    for a, b in arrows(found):
        if room_of(a) != room_of(b):
            out[room_of(a)].add(room_of(b))
    return out


def picture(found: dict[str, Module] | None = None) -> str:
    """The floors, top first, each room with its module count and the rooms it reaches down to."""
    found = found if found is not None else modules()
    reach = room_arrows(found)
    count: dict[str, int] = defaultdict(int)
    for name in found:
        count[room_of(name)] += 1
    rows = []
    for floor in reversed(FLOORS):
        for room in floor:
            label = "crawler/ (base)" if room == "base" else room.replace(".", "/") + "/"
            below = sorted(reach.get(room, ()), key=lambda r: -floor_of(r))
            names = ", ".join("base" if r == "base" else r.rpartition(".")[2] for r in below)
            rows.append(f"{label:<20} {count[room]:>3} modules" + (f"  -> {names}" if names else ""))
    width = max(len(r) for r in rows)
    line = "+" + "-" * (width + 2) + "+"
    body = [line]
    for row in rows:
        body += [f"| {row:<{width}} |", line]
    return "\n".join(body)


def counts(found: dict[str, Module] | None = None) -> dict[str, int]:
    found = found if found is not None else modules()
    return {"modules": len(found), "arrows": len(arrows(found)), "arrows_up": len(upward(found)),
            "private_reads": sum(len(m.private_reads) for m in found.values()),
            "over_max_lines": sum(m.lines > MAX_LINES for m in found.values())}


if __name__ == "__main__":
    import json

    every = modules()
    print(picture(every))
    print(json.dumps(counts(every)))
    for a, b in upward(every):
        print("up:", a, "->", b)
    for m in every.values():
        for line, name in m.private_reads:
            print(f"private: {m.path.relative_to(ROOT)}:{line} {name}")
        if m.lines > MAX_LINES:
            print(f"long: {m.path.relative_to(ROOT)} {m.lines}")
