"""Rebuild the vendored world map ``static/world.json`` (run by hand, not at run time).

Input: ``countries-110m.json`` of the npm package ``world-atlas`` 2.x
(Natural Earth 1:110m admin-0 countries, public domain, as TopoJSON whose
geometries carry an ISO 3166-1 numeric ``id`` and a Natural Earth ``name``)
and Debian's ``iso-codes`` table (numeric to alpha-2). Output: a GeoJSON
FeatureCollection whose features are named by ISO alpha-2 (the page colours
them through ``countries.NAMES``), coordinates rounded to 0.01 degree
(~1 km, far finer than the 110m shapes). Natural Earth shapes with no ISO
code of their own join the country GeoLite2 places them in (N. Cyprus in
Cyprus, Somaliland in Somalia); Kosovo is XK as in GeoLite2.

    python -m crawler.dashboard.build_world countries-110m.json \
        /usr/share/iso-codes/json/iso_3166-1.json crawler/dashboard/static/world.json
"""

from __future__ import annotations

import json
import sys

# Natural Earth shapes without an ISO numeric id in world-atlas.
_NO_ID = {"N. Cyprus": "CY", "Somaliland": "SO", "Kosovo": "XK"}


def _arcs(topo: dict) -> list[list[tuple[float, float]]]:
    """Decode the quantized, delta-encoded arcs into absolute longitude/latitude."""
    (sx, sy), (tx, ty) = topo["transform"]["scale"], topo["transform"]["translate"]
    out = []
    for arc in topo["arcs"]:
        x = y = 0
        pts = []
        for dx, dy in arc:
            x += dx
            y += dy
            pts.append((round(x * sx + tx, 2), round(y * sy + ty, 2)))
        out.append(pts)
    return out


def _ring(arcs: list, indexes: list[int]) -> list[list[float]]:
    ring: list = []
    for i in indexes:
        pts = arcs[i] if i >= 0 else arcs[~i][::-1]
        ring.extend(pts[1:] if ring else pts)  # consecutive arcs share their end point
    out = [list(p) for j, p in enumerate(ring) if j == 0 or p != ring[j - 1]]
    return out


def build(topo: dict, iso: dict) -> dict:
    """The FeatureCollection of ``topo``'s countries keyed by ISO alpha-2."""
    alpha2 = {row["numeric"]: row["alpha_2"] for row in iso["3166-1"]}
    arcs = _arcs(topo)
    polygons: dict[str, list] = {}
    for g in topo["objects"]["countries"]["geometries"]:
        code = alpha2.get(g.get("id")) or _NO_ID.get(g["properties"]["name"])
        if code is None:
            raise ValueError(f"no ISO code for map shape {g['properties']['name']!r}")
        polys = g["arcs"] if g["type"] == "MultiPolygon" else [g["arcs"]]
        for poly in polys:
            rings = [r for r in (_ring(arcs, ring) for ring in poly) if len(r) >= 4]
            if rings:
                polygons.setdefault(code, []).append(rings)
    features = [
        {"type": "Feature", "properties": {"name": code},
         "geometry": {"type": "MultiPolygon", "coordinates": polys}}
        for code, polys in sorted(polygons.items())
    ]
    return {"type": "FeatureCollection", "features": features}


def main(argv: list[str]) -> None:
    topo_path, iso_path, out_path = argv
    with open(topo_path, encoding="utf-8") as f:
        topo = json.load(f)
    with open(iso_path, encoding="utf-8") as f:
        iso = json.load(f)
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(build(topo, iso), f, separators=(",", ":"))


if __name__ == "__main__":
    main(sys.argv[1:])
