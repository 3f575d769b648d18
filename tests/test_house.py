"""The house's rules, read from the source (tests/house_graph.py): arrows only go down,
no module reads another's private names, no module over 400 lines, one name per
module, every room says what it holds, and docs/house.md shows the layers the code has."""

from __future__ import annotations

import ast
import shutil
from collections import Counter

import pytest

from tests import house_graph as g


@pytest.fixture(scope="module")
def house():
    return g.modules()


def test_every_arrow_goes_down_to_a_lower_floor_or_stays_in_its_room(house):
    assert g.upward(house) == []
    # the rooms the crawler is built from are all there, each reached from above
    assert {g.room_of(m) for m in house} == {"base", "top", *g.ROOMS}


def test_no_module_reads_another_modules_private_names(house):
    reads = {m.name: m.private_reads for m in house.values() if m.private_reads}
    assert reads == {}


def test_no_module_is_longer_than_400_lines(house):
    long = {m.name: m.lines for m in house.values() if m.lines > g.MAX_LINES}
    assert long == {}


def test_no_two_modules_share_a_name_or_a_lua_script_its_name(house):
    names = Counter(m.path.name for m in house.values() if m.path.name not in ("__init__.py", "__main__.py"))
    assert [n for n, c in names.items() if c > 1] == []
    scripts = Counter(p.name for pkg in g.PACKAGES for p in (g.ROOT / pkg).rglob("*.lua"))
    assert [n for n, c in scripts.items() if c > 1] == []


def test_every_room_says_what_it_holds_in_one_paragraph_or_more(house):
    for room in g.ROOMS:
        doc = ast.get_docstring(ast.parse(house[room].path.read_text("utf-8")))
        assert doc and len(doc) > 80, room


def test_docs_house_md_shows_the_floors_and_rooms_the_code_has(house):
    text = (g.ROOT / "docs" / "house.md").read_text("utf-8")
    stale = "docs/house.md is stale: run `python -m tests.house_graph --write`"
    assert "```\n" + g.picture(house) + "\n```" in text, stale
    assert g.rooms_section(house) in text, stale
    # every module and script of the project has its line
    for m in house.values():
        if m.path.name != "__init__.py":
            assert f"- `{m.path.relative_to(g.ROOT)}` — " in text, m.name
    for pkg in g.PACKAGES:
        for script in (g.ROOT / pkg).rglob("*.lua"):
            assert f"- `{script.relative_to(g.ROOT)}` — " in text, script


@pytest.mark.parametrize("planted, rule", [
    # the store importing the commands: an arrow up
    ("crawler/store/planted.py", "from crawler.cli.context import open_context\n"),
    # a room on the same floor's neighbour below reaching up: the queue importing the counters
    ("crawler/queue/planted.py", "import crawler.counters.recorder\n"),
    # another module's private name, by import and by attribute
    ("crawler/counters/planted.py", "from crawler.counters.recorder import _private\n"),
    ("crawler/counters/planted.py", "def f(recorder):\n    return recorder._shards\n"),
    # a long module
    ("crawler/queue/planted.py", "x = 1\n" * 401),
])
def test_each_rule_fails_on_a_planted_breach(tmp_path, planted, rule):
    for pkg in g.PACKAGES:
        shutil.copytree(g.ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("static", "templates", "*.lua"))
    before = g.counts(g.modules(tmp_path))
    assert before["arrows_up"] == before["private_reads"] == before["over_max_lines"] == 0
    (tmp_path / planted).write_text(rule)
    after = g.counts(g.modules(tmp_path))
    assert after["arrows_up"] + after["private_reads"] + after["over_max_lines"] == 1, after
