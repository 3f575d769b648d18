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
import re
from collections import defaultdict
from dataclasses import dataclass, field

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("crawler", "workers", "geo")
MAX_LINES = 400

# Floors, lowest first: a module may import its own room and any room on a
# lower floor, never one above. Rooms on one floor may not import each other.
# The base is the modules directly in ``crawler/`` (and ``crawler.bencode``):
# settings, keys, errors, logs, redaction, parsing, which every room needs.
# Rooms nest: a module is in the longest room its name starts with, so the
# sources' own rooms (``crawler.sources.dht``, ...) stand on the floor above
# ``crawler.sources``, which keeps what they share.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("base",),
    ("geo",),
    ("crawler.store", "crawler.torrents", "crawler.registry"),
    ("crawler.queue",),
    ("crawler.counters",),
    ("crawler.sources",),
    ("crawler.sources.dht", "crawler.sources.trackers", "crawler.sources.metadata"),
    ("crawler.stathat",),
    ("crawler.report",),
    ("workers",),
    ("crawler.dashboard",),
    ("crawler.cli",),
)
ROOMS = tuple(r for floor in FLOORS for r in floor if r != "base")
BASE_PACKAGES = ("crawler.bencode",)
TOP = ("crawler.__main__",)  # ``python -m crawler``: the commands, above everything

# Other libraries' internals the code relies on on purpose, each with why
# (redis-py's are listed beside its version bound in pyproject.toml).
THIRD_PARTY_PRIVATE = frozenset({
    "_supported_errors",  # redis-py's Retry (pyproject.toml lists it beside the bound)
    "_context",  # urllib.request.HTTPSHandler's TLS context, handed on to the connection it opens
    "_db_reader",  # geoip2's Reader: its maxminddb reader, which it exposes no other way
    "_replace",  # a namedtuple's own API (the underscore keeps it apart from field names)
})


@dataclass
class Module:
    """One module: its dotted name, file, length, the project's modules it imports, the private names it reads."""

    name: str
    path: pathlib.Path
    lines: int
    imports: set[str] = field(default_factory=set)
    private_reads: list[tuple[int, str]] = field(default_factory=list)


def _name_of(path: pathlib.Path, root: pathlib.Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: pathlib.Path = ROOT) -> dict[str, Module]:
    """Every module of the project's packages under ``root``, with the modules it imports."""
    found = {}
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            name = _name_of(path, root)
            found[name] = Module(name, path, path.read_text("utf-8").count("\n"))
    for mod in found.values():
        tree = ast.parse(mod.path.read_text("utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                _add_import(mod, node, found)
        mod.private_reads += _foreign_attributes(tree)
    return found


def _add_import(mod: Module, node: ast.Import | ast.ImportFrom, found: dict[str, Module]) -> None:
    """The project's modules ``node`` imports into ``mod.imports``; ``from m import _x`` into its private reads."""
    if isinstance(node, ast.Import):
        targets = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = mod.name if mod.path.name == "__init__.py" else mod.name.rpartition(".")[0]
            up = package.split(".")
            base = ".".join(up[: len(up) - node.level + 1] + ([node.module] if node.module else []))
        targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in found else base for a in node.names]
        if base in found:
            mod.private_reads += [(node.lineno, f"{base}.{a.name}") for a in node.names
                                  if a.name.startswith("_") and not a.name.startswith("__")]
    for target in targets:
        while target and target not in found:
            target = target.rpartition(".")[0]
        if target and target != mod.name:
            mod.imports.add(target)


def _defined(tree: ast.AST) -> set[str]:
    """Every name a module defines or binds: functions, classes, attributes it sets, arguments, imports."""
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
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            own.add(node.target.id)
    return own


def _foreign_attributes(tree: ast.AST) -> list[tuple[int, str]]:
    """``x._name`` where ``_name`` is not one this module defines (on ``self`` or anything else)."""
    own = _defined(tree) | THIRD_PARTY_PRIVATE
    return [(node.lineno, node.attr) for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr.startswith("_")
            and not node.attr.startswith("__") and node.attr not in own]


def room_of(name: str) -> str:
    """The room a module belongs to: the longest room its name starts with (rooms nest), or the base."""
    if name in TOP:
        return "top"
    held = [room for room in ROOMS if name == room or name.startswith(room + ".")]
    return max(held, key=len, default="base")


def floor_of(room: str) -> int:
    """The floor of a room, 0 for the base; the commands' entry point above every floor."""
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
            below = sorted(reach.get(room, ()), key=lambda r: (-floor_of(r), r))
            names = ", ".join("base" if r == "base" else r.rpartition(".")[2] for r in below)
            rows.append(f"{label:<25} {count[room]:>3} modules" + (f"  -> {names}" if names else ""))
    width = max(len(r) for r in rows)
    line = "+" + "-" * (width + 2) + "+"
    body = [line]
    for row in rows:
        body += [f"| {row:<{width}} |", line]
    return "\n".join(body)


BASE_NOTE = """The ground floor: what every room needs and nothing else. `settings.py`
and `source_settings.py` declare every setting once (variable, parser,
default, why) and build the frozen `Settings`; `envparse.py` is how a
setting is declared and read; `keys/` names every Redis key (grouped by the room that owns it), on the shard
layout of `shard_layout.py`; `errors.py` is the one error hierarchy;
`logs.py` sets up structlog with secrets hidden; `spawning.py` starts every greenlet (in a frame
compiled code cannot lose); `redact.py`, `safe_text.py`
and `redis_url.py` make what third parties wrote (tracker URLs, names, the
Redis URL) safe to show; `bencode/` reads hostile bencode within a budget.
It imports no room. (`__main__.py`, which makes `python -m crawler` the
`peercrawl` command, lives here but stands above every floor.)"""
INCLUDED = "inlined where another script says `--! include`"


def rooms_section(found: dict[str, Module] | None = None) -> str:
    """Each room, lowest floor first: its paragraph (the package's docstring) and one line per module and script."""
    found = found if found is not None else modules()
    lines = []
    for floor in FLOORS:
        for room in floor:
            title = "crawler/ (the base)" if room == "base" else room.replace(".", "/") + "/"
            doc = BASE_NOTE if room == "base" else ast.get_docstring(ast.parse(found[room].path.read_text("utf-8")))
            lines += [f"### `{title}`", "", doc.strip(), ""]
            members = (n for n in found if n != room and (room_of(n) == room or room == "base" and room_of(n) == "top"))
            for name in sorted(members):
                doc = ast.get_docstring(ast.parse(found[name].path.read_text("utf-8"))) or ""
                lines.append(f"- `{found[name].path.relative_to(ROOT)}` — {first_sentence(doc)}")
            if room != "base":
                lines += [_script_line(path) for path in sorted((ROOT / room.replace(".", "/")).glob("*.lua"))]
            lines.append("")
    return "\n".join(lines).rstrip("\n")


def first_sentence(text: str) -> str:
    """The first sentence of ``text``, whitespace joined (an abbreviation's dot ends none)."""
    text = " ".join(text.split("\n\n")[0].split())
    end = re.search(r"(?<!\be\.g)(?<!\bi\.e)\.\s", text)
    return text if end is None else text[:end.start() + 1]


def _script_line(path: pathlib.Path) -> str:
    """A ``.lua`` file's line: the first sentence of its header, without the file's own name."""
    header = []
    for line in path.read_text("utf-8").split("\n"):
        if not line.startswith("--") or not line.strip("- "):
            break
        header.append(line.lstrip("-! ").strip())
    text = " ".join(header).removeprefix(path.name + ":").strip()
    return f"- `{path.relative_to(ROOT)}` — {first_sentence(text)}"


MARKS = {"picture": picture, "rooms": rooms_section}


def generated(name: str) -> tuple[str, str]:
    """The begin and end marks of a generated part of docs/house.md."""
    return (f"<!-- {name}: generated by `python -m tests.house_graph --write`; edit the code, not this -->",
            f"<!-- {name}: end -->")


def write_docs(path: pathlib.Path = ROOT / "docs" / "house.md") -> None:
    """Replace every generated part of ``path`` with what the code draws now."""
    text = path.read_text("utf-8")
    found = modules()
    for name, render in MARKS.items():
        begin, end = generated(name)
        body = render(found)
        if name == "picture":
            body = "```\n" + body + "\n```"
        a, b = text.index(begin) + len(begin), text.index(end)
        text = text[:a] + "\n" + body + "\n" + text[b:]
    path.write_text(text, "utf-8")


def counts(found: dict[str, Module] | None = None) -> dict[str, int]:
    """The figures of the house: modules, arrows, and what the layering test refuses."""
    found = found if found is not None else modules()
    return {"modules": len(found), "arrows": len(arrows(found)), "arrows_up": len(upward(found)),
            "private_reads": sum(len(m.private_reads) for m in found.values()),
            "over_max_lines": sum(m.lines > MAX_LINES for m in found.values())}


if __name__ == "__main__":
    import json
    import sys

    if "--write" in sys.argv:
        write_docs()
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
