"""Every name the guides give exists: README.md and docs/*.md name only files, modules, settings,
commands and sections that are there.

A guide names things a reader will type or open: a path (`crawler/queue/claim.lua`, a link to
`../bench/results/...`), a module (`crawler.counters.unescape`), a setting (`PEERCRAWL_...`), a
command (`peercrawl status --json`) and a section of another guide (docs/metrics.md, "Coverage").
Each is checked against the repository itself: files on disk relative to its root (a link relative
to its guide), modules by ``importlib.util.find_spec`` and their attributes by import, settings
against the declarations of crawler/settings.py and crawler/source_settings.py (``declarations``),
commands and their options against the click group of crawler/cli/, sections against the headings
(or bold lead-ins) of the guide named. A failure names the guide, the line and what is missing.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from functools import cache
from pathlib import Path

import pytest

from crawler.settings import declarations

ROOT = Path(__file__).resolve().parent.parent
GUIDES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# Directories at the root a guide names paths in; a path starting elsewhere (`static/`, `queue/`)
# is relative to something the sentence names, which only a reader can resolve.
TOP_DIRS = ("crawler", "workers", "geo", "tests", "bench", "docs", ".ci")
PACKAGES = ("crawler", "workers", "geo", "tests")
# A bare file name (`record.lua`, `views.py`) must be some file of the repository.
SOURCE_SUFFIXES = (".py", ".lua", ".md", ".toml", ".js", ".html", ".css", ".README")

_PATH = re.compile(r"(?<![\w/.<>{-])((?:" + "|".join(re.escape(d) for d in TOP_DIRS) + r")/[\w./*…<>{}-]*)")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_CODE = re.compile(r"`([^`\n]+)`")
_BARE_FILE = re.compile(r"^[\w.-]+(" + "|".join(re.escape(s) for s in SOURCE_SUFFIXES) + r")$")
_DOTTED = re.compile(r"(?<![\w./-])((?:" + "|".join(PACKAGES) + r")(?:\.[A-Za-z_]\w*)+)")
_COMMAND = re.compile(r"(?:^|(?<=[\s/(`]))peercrawl\s+([a-z][a-z-]*)(.*)")
_OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z-]*)")
# A section of a guide named after it: docs/metrics.md, "Coverage" / [x](metrics.md) ("A", "B") /
# docs/worker.md "Benchmark". Several names may follow, joined by ", ", " and " or "; ".
_GUIDE_REF = re.compile(r"((?:[\w.-]+/)*[\w-]+\.md)(?:#[\w-]*)?\)?[,:]?\s*\(?(?=\")")
_QUOTED = re.compile(r"\"([^\"]{1,120})\"")


def _lines(path: Path) -> list[tuple[int, str, bool]]:
    """(number, text, in a code block) for each line of a guide."""
    out, fenced = [], False
    for n, line in enumerate(path.read_text("utf-8").splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        out.append((n, line, fenced or line.startswith("    ")))
    return out


def _code(line: str, block: bool) -> list[str]:
    """The parts of a line that are code: the whole line in a code block, else its `spans`."""
    return [line] if block else _CODE.findall(line)


def _clean(path: str) -> str:
    return path.rstrip(".,:;)'\"")


@cache
def _tracked_names() -> frozenset[str]:
    return frozenset(p.name for p in ROOT.rglob("*") if ".venv" not in p.parts and ".git" not in p.parts)


def _missing_paths(guide: Path) -> list[str]:
    missing = []
    for n, line, block in _lines(guide):
        missing += [f"{guide.name}:{n}: {what}"
                    for what in (*_paths_in(line), *_links_in(guide, line), *_files_in(_code(line, block)))]
    return missing


def _paths_in(line: str) -> list[str]:
    """Paths from the root (`crawler/...`, `docs/x.md`) that are not there."""
    missing = []
    for raw in _PATH.findall(line):
        path = _clean(raw)
        if any(c in path for c in "*…<>{}") or "..." in path:
            continue  # a pattern (`tests/test_*.py`, `tests/...`), not one file
        if not (ROOT / path).exists():
            missing.append(f"no file or directory {path}")
    return missing


def _links_in(guide: Path, line: str) -> list[str]:
    """Links relative to the guide whose file, or heading in it, is not there."""
    missing = []
    for target in _LINK.findall(line):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        path, _, anchor = target.partition("#")
        if not (guide.parent / path).exists():
            missing.append(f"link to a missing file {target}")
        elif anchor and path.endswith(".md") and anchor not in _anchors(guide.parent / path):
            missing.append(f"link to a missing heading {target}")
    return missing


def _files_in(spans: list[str]) -> list[str]:
    """Bare file names in code (`record.lua`) that no file of the repository has."""
    words = (_clean(w) for span in spans for w in span.split())
    return [f"no file named {w}" for w in words if _BARE_FILE.match(w) and w not in _tracked_names()]


def _anchors(md: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    return {_slug(h) for h in _headings(md)}


def _slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@cache
def _headings(md: Path) -> tuple[str, ...]:
    """A Markdown file's headings (`#` and underlined) and bold lead-ins (`**Name.**`), as written."""
    text = md.read_text("utf-8")
    lines = text.splitlines()
    heads = [m.group(1).strip() for m in re.finditer(r"^#+\s+(.+)$", text, re.M)]
    heads += [lines[i] for i in range(len(lines) - 1)
              if lines[i].strip() and re.fullmatch(r"[=-]{3,}", lines[i + 1]) and not lines[i].startswith("|")]
    heads += re.findall(r"\*\*([^*]+)\*\*", text)
    return tuple(heads)


def _missing_modules(guide: Path) -> list[str]:
    missing = []
    for n, line, _ in _lines(guide):
        for dotted in _DOTTED.findall(line):
            if not _resolves(dotted):
                missing.append(f"{guide.name}:{n}: no module or name {dotted}")
    return missing


@cache
def _resolves(dotted: str) -> bool:
    """Whether a dotted name is a module, or a name inside its longest module prefix."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        try:
            spec = importlib.util.find_spec(module)
        except ModuleNotFoundError:
            spec = None
        if spec is None:
            continue
        obj = importlib.import_module(module)
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


@cache
def _settings() -> tuple[frozenset[str], re.Pattern]:
    """The declared variables, and a pattern for every name that looks like one of them."""
    names = frozenset(var.env for _, var in declarations())
    prefixes = sorted({n.split("_", 1)[0] for n in names})
    return names, re.compile(r"\b((?:" + "|".join(prefixes) + r")_[A-Z0-9_]*[A-Z0-9])\b")


@cache
def _test_knobs() -> frozenset[str]:
    """Variables the tests, benchmarks and build (setup.py) read from the environment themselves (not settings)."""
    knobs = set()
    for path in [*(ROOT / "tests").glob("*.py"), *(ROOT / "bench").glob("*.py"), ROOT / "setup.py"]:
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith(("environ.get", "getenv")) and node.args:
                if isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                    knobs.add(node.args[0].value)
    return frozenset(knobs)


def _missing_settings(guide: Path) -> list[str]:
    names, pattern = _settings()
    missing = []
    for n, line, _ in _lines(guide):
        for name in pattern.findall(line):
            if name not in names and name not in _test_knobs():
                missing.append(f"{guide.name}:{n}: no setting {name}")
    return missing


@cache
def _commands() -> dict:
    from crawler.cli import _register, cli

    _register()
    return dict(cli.commands)


def _missing_commands(guide: Path) -> list[str]:
    missing = []
    for n, line, block in _lines(guide):
        for span in _code(line, block):
            for m in _COMMAND.finditer(span):
                name, rest = m.group(1), m.group(2)
                command = _commands().get(name)
                if command is None:
                    missing.append(f"{guide.name}:{n}: no command peercrawl {name}")
                    continue
                # its options, up to a comment, a pipe to another command or the next command
                rest = re.split(r"\s#\s|\|\||&&|;|\bpeercrawl\s", rest)[0]
                known = {o for p in command.params for o in (*p.opts, *p.secondary_opts)} | {"--help"}
                missing += [f"{guide.name}:{n}: peercrawl {name} has no option {opt}"
                            for opt in _OPTION.findall(rest) if opt not in known]
    return missing


def _missing_sections(guide: Path) -> list[str]:
    """Sections of guides named as `docs/x.md, "Heading"`: each must begin a heading of x.md."""
    missing = []
    text = guide.read_text("utf-8")
    flat = text.replace("\n", " ")
    for m in _GUIDE_REF.finditer(flat):
        # a path from the root (docs/x.md), or from the guide (a link, or a guide naming its neighbour)
        target = next((p for p in (ROOT / m.group(1), guide.parent / m.group(1)) if p.is_file()), None)
        if target is None:
            continue  # the path check names it
        pos, names = m.end(), []
        while q := _QUOTED.match(flat, pos):
            names.append(q.group(1))
            sep = re.match(r"(?:,\s|\sand\s|;\s)(?=\")", flat[q.end():q.end() + 6])
            if not sep:
                break
            pos = q.end() + sep.end()
        heads = [" ".join(h.split()) for h in _headings(target)]
        for name in names:
            name = " ".join(name.split())
            if not any(h.startswith(name) or h.startswith(f"§{name}") for h in heads):
                line = text.count("\n", 0, m.start()) + 1
                missing.append(f"{guide.name}:{line}: {m.group(1)} has no section {name!r}")
    return missing


@pytest.mark.parametrize("guide", GUIDES, ids=lambda p: p.name)
@pytest.mark.parametrize("check", [_missing_paths, _missing_modules, _missing_settings, _missing_commands,
                                   _missing_sections], ids=lambda f: f.__name__.removeprefix("_missing_"))
def test_every_name_a_guide_gives_exists(guide, check):
    missing = check(guide)
    assert not missing, "\n".join(missing)


# README and docs together, in words as ``wc -w`` counts them: the guides stay short enough to be read.
WORD_BUDGET = 27_000


def test_readme_and_docs_stay_within_their_word_budget():
    words = {p.name: len(p.read_text("utf-8").split()) for p in GUIDES}
    assert sum(words.values()) <= WORD_BUDGET, f"{sum(words.values())} words > {WORD_BUDGET}: {words}"
