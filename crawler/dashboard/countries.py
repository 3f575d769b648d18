"""Country names as ``stats`` prints them, and the map shape each one colours.

The vendored world map (``static/world.json``) names its shapes by ISO
3166-1 alpha-2 code; ``crawler.counters.country_names`` maps GeoLite2's
English names to those codes (one table, which ``stats --country`` reads too).
A name not listed there (a future rename) is still counted and listed beside
the map; it just colours no shape, and the page says so.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from crawler.counters.country_names import CODE_OF, NAMES

__all__ = ["CODE_OF", "NAMES", "map_code", "shapes"]


def map_code(country: str) -> str | None:
    """The map shape (ISO alpha-2) of a country as ``stats`` names it (unescaped), or None.

    None also for countries too small for the 1:110m map (Singapore, Malta...).
    """
    code = CODE_OF.get(country)
    return code if code in shapes() else None


@functools.cache
def shapes() -> frozenset[str]:
    """The ISO codes the vendored map has a shape for."""
    with (Path(__file__).parent / "static" / "world.json").open(encoding="utf-8") as f:
        return frozenset(feature["properties"]["name"] for feature in json.load(f)["features"])
