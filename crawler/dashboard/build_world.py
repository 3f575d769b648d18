"""Rebuild the vendored world map ``static/world.json`` (run by hand, not at run time).

Input: ``countries-110m.json`` of the npm package ``world-atlas`` 2.x
(Natural Earth 1:110m admin-0 countries, public domain, as TopoJSON whose
geometries carry an ISO 3166-1 numeric ``id`` and a Natural Earth ``name``)
and Debian's ``iso-codes`` table (numeric to alpha-2). Output: a GeoJSON
FeatureCollection whose features are named by ISO alpha-2 (the page colours
them through ``countries.NAMES``), coordinates rounded to 0.01 degree
(~1 km, far finer than the 110m shapes), and rings that cross the
antimeridian (Russia, Fiji, Antarctica) cut there, since ECharts draws
longitude and latitude on a plane. Natural Earth shapes with no ISO
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


def _unwrap(ring: list[list[float]]) -> list[list[float]]:
    """Longitudes made continuous (no jump over 180 degrees between neighbours).

    A ring around a pole (Antarctica) then ends 360 degrees from its start:
    it is closed along the pole's latitude.
    """
    out = [list(ring[0])]
    for x, y in ring[1:]:
        px = out[-1][0]
        while x - px > 180:
            x -= 360
        while x - px < -180:
            x += 360
        out.append([x, y])
    drift = out[-1][0] - out[0][0]
    if abs(drift) > 180:
        pole = -90.0 if sum(y for _, y in out) < 0 else 90.0
        out += [[out[-1][0], pole], [out[0][0], pole], list(out[0])]
    return out


def _clip(ring: list[list[float]], edge: float, keep_below: bool) -> list[list[float]]:
    """Sutherland-Hodgman clip of a ring to longitude <= edge (or >= edge)."""
    def inside(p):
        return p[0] <= edge if keep_below else p[0] >= edge

    out: list = []
    for i, cur in enumerate(ring):
        prev = ring[i - 1]
        if inside(cur):
            if not inside(prev):
                out.append(_cross(prev, cur, edge))
            out.append(cur)
        elif inside(prev):
            out.append(_cross(prev, cur, edge))
    if out and out[0] != out[-1]:
        out.append(list(out[0]))
    return out


def _cross(a, b, x):
    t = (x - a[0]) / (b[0] - a[0])
    return [x, round(a[1] + t * (b[1] - a[1]), 2)]


def _planar(ring: list[list[float]]) -> list[list[list[float]]]:
    """A ring as drawn on a flat map: cut at the antimeridian into one or two rings."""
    r = _unwrap(ring)
    xs = [x for x, _ in r]
    if min(xs) >= -180 and max(xs) <= 180:
        return [r]  # the ring itself, or closed along its pole
    pieces = []
    for shift in (-360, 0, 360):
        moved = [[x + shift, y] for x, y in r]
        piece = _clip(_clip(moved, 180, True), -180, False)
        if len(piece) >= 4:
            pieces.append([[round(x, 2), y] for x, y in piece])
    return pieces


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
            if not rings:
                continue
            outer = _planar(rings[0])
            if outer == [rings[0]]:
                polygons.setdefault(code, []).append(rings)
            else:  # cut at the antimeridian (no country there has holes at 1:110m)
                polygons.setdefault(code, []).extend([piece] for piece in outer)
    features = [
        {"type": "Feature", "properties": {"name": code},
         "geometry": {"type": "MultiPolygon", "coordinates": polys}}
        for code, polys in sorted(polygons.items())
    ]
    return {"type": "FeatureCollection", "features": features}


def main(argv: list[str]) -> None:
    """Write the vendored map: ``build_world TOPOJSON ISO_CODES OUT`` (see the module note)."""
    topo_path, iso_path, out_path = argv
    with open(topo_path, encoding="utf-8") as f:
        topo = json.load(f)
    with open(iso_path, encoding="utf-8") as f:
        iso = json.load(f)
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(build(topo, iso), f, separators=(",", ":"))


if __name__ == "__main__":
    main(sys.argv[1:])
