"""Builds peercrawl, with the modules a visit runs compiled by mypyc where a C compiler is at hand.

pyproject.toml describes the package; this file adds only what setuptools takes from code: the
compiled modules (docs/decisions.md says why mypyc). A wheel (``pip install .``) compiles them;
an editable install (``pip install -e .``) does not, so an edit to a module takes effect at once
(a compiled module beside its source would shadow it); ``PEERCRAWL_COMPILE=0`` builds none; where
mypyc or the C compiler fails, the build goes on without them and the sources run as they are.
``python setup.py build_ext --inplace`` puts the compiled modules beside the sources of a
checkout, as the tests' compiled run does (.ci/run).
"""

import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent

# The modules compiled: those a visit's profile shows (bench/bench_visit_cost.py --profile), the
# recording, the trackers' exchanges, the queue's calls and the worker's loop; elsewhere (the
# commands, the dashboard, the DHT's libtorrent session) the time goes outside our Python. What
# mypyc asks of them (docs/decisions.md), tests/test_compiled_set.py checks: every subclass of a
# class here is here too (an interpreted class cannot subclass a compiled one); no class here
# derives from an abstract base class (it would share the base's registry, so the peers'
# CompactPeers, a Set, stays interpreted) or from a dependency's class (the build sees no
# dependency's types, below: the store's outage, with its redis-py error, stays interpreted);
# every greenlet starts in crawler/spawning.py.
COMPILED = (
    "workers/announcing.py",
    "workers/asking.py",
    "workers/claims.py",
    "workers/completions.py",
    "workers/runners.py",
    "workers/scrape_ahead.py",
    "workers/scrape_seats.py",
    "workers/slots.py",
    "workers/visit.py",
    "workers/visit_notes.py",
    "workers/visit_stages.py",
    "crawler/counters/batcher.py",
    "crawler/counters/fresh_places.py",
    "crawler/counters/marks.py",
    "crawler/counters/met_ips.py",
    "crawler/counters/names.py",
    "crawler/counters/packing.py",
    "crawler/counters/places.py",
    "crawler/counters/record_replies.py",
    "crawler/counters/recorder.py",
    "crawler/counters/script_args.py",
    "crawler/counters/shard_keys.py",
    "crawler/counters/swarm_record.py",
    "crawler/queue/queue.py",
    "crawler/queue/rates.py",
    "crawler/queue/scoring.py",
    "crawler/queue/script_calls.py",
    "crawler/queue/source_notes.py",
    "crawler/queue/visit_plan.py",
    "crawler/sources/lru.py",
    "crawler/sources/request_counts.py",
    "crawler/sources/result.py",
    "crawler/sources/trackers/announcer.py",
    "crawler/sources/trackers/health.py",
    "crawler/sources/trackers/peers.py",
    "crawler/sources/trackers/scrape_groups.py",
    "crawler/sources/trackers/self_filter.py",
    "crawler/sources/trackers/tracker_mirrors.py",
    "crawler/sources/trackers/tracker_scrapes.py",
    "crawler/sources/trackers/tracker_urls.py",
    "crawler/sources/trackers/trackers.py",
    "crawler/sources/trackers/udp_batch.py",
    "crawler/sources/trackers/udp_client.py",
    "crawler/sources/trackers/udp_codec.py",
    "crawler/store/coalesce.py",
    "crawler/store/command_packer.py",
    "crawler/store/group_commit.py",
    "crawler/store/scripts.py",
    "crawler/store/store.py",
    "geo/network_places.py",
)
# Only these commands build modules; metadata steps (egg_info, dist_info) run this file too.
BUILDING = {"bdist_wheel", "build", "build_ext", "install"}


def wanted() -> bool:
    """Whether this run of setup.py should compile (module docstring)."""
    if os.environ.get("PEERCRAWL_COMPILE", "1") == "0":
        return False
    if "editable_wheel" in sys.argv or "develop" in sys.argv:
        return False
    return bool(BUILDING.intersection(sys.argv))


def compiled_extensions() -> list:
    """Mypyc's extensions of COMPILED, or none where mypyc cannot make them."""
    if not wanted():
        return []
    try:
        from mypyc.build import mypycify
    except ImportError as exc:
        print(f"peercrawl: not compiling ({exc}): the sources run as they are", file=sys.stderr)
        return []
    # The dependencies' types are left out (Any), whether or not they are installed: a wheel's
    # build environment holds mypy alone, a checkout's every dependency, and both must compile the
    # same code. (CI type-checks against them: pyproject.toml's [tool.mypy].)
    options = ["--no-site-packages", "--ignore-missing-imports", "--no-warn-unused-ignores",
               "--config-file", str(HERE / "pyproject.toml")]
    try:
        extensions = mypycify(options + list(COMPILED), opt_level="3", debug_level="0", group_name="peercrawl")
    except (SystemExit, Exception) as exc:  # mypyc reports type errors by exiting
        print(f"peercrawl: mypyc could not compile ({exc!r}): the sources run as they are", file=sys.stderr)
        return []
    return extensions


class OptionalBuildExt(build_ext):
    """build_ext that leaves the sources to run where the C compiler fails."""

    def run(self) -> None:  # noqa: D102 - build_ext.run, falling back
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - any compiler failure: fall back to the sources
            why = (str(exc).splitlines() or [type(exc).__name__])[0][:200]  # a compiler's command line is long
            print(f"peercrawl: the C build failed ({why}): the sources run as they are", file=sys.stderr)
            for output in self.get_outputs():
                Path(output).unlink(missing_ok=True)


setup(ext_modules=compiled_extensions(), cmdclass={"build_ext": OptionalBuildExt})
