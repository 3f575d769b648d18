"""The vendored world map and the code that built it: flat-map-ready shapes, ISO names."""

from __future__ import annotations

import json
from pathlib import Path

from crawler.dashboard.build_world import _planar, build

WORLD = Path(__file__).resolve().parents[1] / "crawler" / "dashboard" / "static" / "world.json"


def _area(ring) -> float:
    return abs(sum(x0 * y1 - x1 * y0 for (x0, y0), (x1, y1) in zip(ring, ring[1:]))) / 2


def test_a_ring_across_the_antimeridian_is_cut_in_two_with_its_area():
    # Fiji-like: from 178 E to 178 W (= 182 E), 2 degrees tall
    ring = [[178.0, -16.0], [-178.0, -16.0], [-178.0, -18.0], [178.0, -18.0], [178.0, -16.0]]
    pieces = _planar(ring)
    assert len(pieces) == 2
    for p in pieces:
        assert all(-180 <= x <= 180 for x, _ in p) and p[0] == p[-1]
    assert sum(_area(p) for p in pieces) == 4 * 2


def test_a_ring_around_the_pole_is_closed_along_it():
    # Antarctica-like: a band at 70 S all around the globe, eastwards
    ring = [[x, -70.0] for x in range(-180, 181, 30)]
    ring[-1] = [180.0, -70.0]
    pieces = _planar([[float(x), y] for x, y in ring[:-1]] + [[-180.0, -70.0]])
    assert pieces and all(-180 <= x <= 180 and -90 <= y <= -70 for p in pieces for x, y in p)
    assert abs(sum(_area(p) for p in pieces) - 360 * 20) < 1


def test_a_ring_that_stays_east_is_kept_as_is():
    ring = [[10.0, 50.0], [12.0, 50.0], [12.0, 52.0], [10.0, 50.0]]
    assert _planar(ring) == [ring]


def test_build_names_shapes_by_iso_code_and_merges_unnamed_ones():
    # a two-arc TopoJSON: a square shared by "276" (Germany) and a shape without id named Somaliland
    topo = {"transform": {"scale": [1, 1], "translate": [0, 0]},
            "arcs": [[[0, 0], [1, 0], [0, 1], [-1, 0], [0, -1]], [[10, 10], [1, 0], [0, 1], [-1, 0], [0, -1]]],
            "objects": {"countries": {"geometries": [
                {"type": "Polygon", "id": "276", "arcs": [[0]], "properties": {"name": "Germany"}},
                {"type": "Polygon", "arcs": [[1]], "properties": {"name": "Somaliland"}},
                {"type": "Polygon", "id": "706", "arcs": [[0]], "properties": {"name": "Somalia"}}]}}}
    iso = {"3166-1": [{"numeric": "276", "alpha_2": "DE"}, {"numeric": "706", "alpha_2": "SO"}]}
    got = {f["properties"]["name"]: f["geometry"]["coordinates"] for f in build(topo, iso)["features"]}
    assert set(got) == {"DE", "SO"} and len(got["SO"]) == 2  # Somaliland joins Somalia


def test_the_vendored_map_is_flat_and_named_by_iso():
    world = json.loads(WORLD.read_text(encoding="utf-8"))
    names = [f["properties"]["name"] for f in world["features"]]
    assert len(names) == len(set(names)) > 170
    assert all(len(n) == 2 and n.isupper() for n in names)
    for f in world["features"]:
        for poly in f["geometry"]["coordinates"]:
            for ring in poly:
                assert ring[0] == ring[-1] and len(ring) >= 4
                assert all(-180 <= x <= 180 and -90 <= y <= 90 for x, y in ring)
                # no edge jumps across the map (the stripe an uncut antimeridian ring draws),
                # but Antarctica's closing edge along its southern rim
                assert all(abs(x1 - x0) <= 180 or (y0 == y1 and y0 < -80)
                           for (x0, y0), (x1, y1) in zip(ring, ring[1:]))
