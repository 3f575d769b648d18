"""The terminal pictures in the docs: ``peercrawl run``, ``status`` and ``torrent`` on a small world.

``python -m tests.terminal_pictures --write`` builds the world on loopback (an opentracker, three
named torrents with peers in four countries, a small GeoIP database, a private Redis namespace),
runs the real commands on a pseudo-terminal 100 columns wide, and writes what they printed as SVG
(rich's own export) to ``docs/terminal/``. Without ``--write`` it prints them instead.
"""

from __future__ import annotations

import io
import os
import sys
import tempfile
import uuid
from pathlib import Path

import redis
from rich.console import Console
from rich.text import Text

from tests import cli
from tests.mmdb import write_city_db
from tests.namespaces import delete_namespace
from tests.opentracker import OpenTracker

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "terminal"
COLUMNS, ROWS = 100, 50
REDIS_URL = os.environ.get("PEERCRAWL_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
PLACES = {
    "127.1.0.0/24": ("Germany", "Berlin", "10115"),
    "127.1.1.0/24": ("United States", "St. Louis", "63101"),
    "127.1.2.0/24": ("Japan", "東京", "100-0001"),
    "127.1.3.0/24": ("Brazil", "São Paulo", "01000-000"),
}
TORRENTS = {"Big Buck Bunny": 24, "Sintel": 14, "Tears of Steel": 7}


def on_terminal(env: dict, *args: str, timeout: float = 120) -> str:
    """What ``peercrawl ARGS`` printed on a pseudo-terminal of ``COLUMNS`` x ``ROWS`` (stderr too)."""
    return cli.on_terminal(env, *args, timeout=timeout, size=(ROWS, COLUMNS), stderr_too=True)


def last_frame(text: str) -> str:
    """A live display's output as its last frame: what the screen showed when the command ended."""
    # rich's Live moves the cursor up and erases lines between frames; the final text follows the last erase
    marker = "\x1b[2K"
    return text[text.rfind(marker) + len(marker):] if marker in text else text


def picture(title: str, command: str, text: str, path: Path | None) -> None:
    con = Console(record=True, width=COLUMNS, force_terminal=True, color_system="truecolor",
                  file=io.StringIO())
    con.print(Text("$ " + command, style="bold"))
    con.print(Text.from_ansi(text.rstrip("\n")))
    if path is None:
        print(con.export_text())
        return
    con.save_svg(str(path), title=title)


def world(tmp: Path) -> tuple[dict, list[str], OpenTracker]:
    """A namespace with three named torrents on an opentracker, their peers placed by a small database."""
    hashes = [f"{n:02x}" * 20 for n in (0xb1, 0xb2, 0xb3)]
    ot = OpenTracker(tmp / "ot", hashes).start()
    for h, (t, peers) in zip(hashes, enumerate(TORRENTS.values())):
        for i in range(peers):
            ot.announce_from(f"127.1.{(i + t) % 4}.{i + 10}", h, 6881, left=i % 3)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PEERCRAWL_", "STATHAT_", "GEOIP_"))}
    env.update(REDIS_URL=REDIS_URL, PEERCRAWL_NAMESPACE="pcpictures-" + uuid.uuid4().hex[:8],
               PEERCRAWL_DATA_DIR=str(tmp / "data"), PEERCRAWL_TRACKERS="", PEERCRAWL_DHT="off",
               PEERCRAWL_ALLOW_PRIVATE="1", PEERCRAWL_SECRET="pictures-secret-0123456789",
               GEOIP_DB=str(write_city_db(tmp / "city.mmdb", PLACES)), PEERCRAWL_LOG_FORMAT="json",
               PEERCRAWL_LOG_LEVEL="warning", COLUMNS=str(COLUMNS))
    items = [f"magnet:?xt=urn:btih:{h}&dn={name.replace(' ', '+')}&tr={ot.udp_url}"
             for h, name in zip(hashes, TORRENTS)]
    return env, items, ot


def main(argv: list[str]) -> int:
    write = argv == ["--write"]
    if argv not in ([], ["--write"]):
        print("usage: python -m tests.terminal_pictures [--write]", file=sys.stderr)
        return 2
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as d:
        env, items, ot = world(Path(d))
        try:
            run = on_terminal(env, "run", *items, "--until-idle", "--no-dashboard")
            picture("peercrawl run", "peercrawl run MAGNET... --until-idle", last_frame(run),
                    OUT / "run.svg" if write else None)
            picture("peercrawl status", "peercrawl status", on_terminal(env, "status"),
                    OUT / "status.svg" if write else None)
            first = items[0].split("btih:")[1][:40]
            picture("peercrawl torrent", "peercrawl torrent " + first, on_terminal(env, "torrent", first),
                    OUT / "torrent.svg" if write else None)
        finally:
            ot.stop()
            delete_namespace(redis.Redis.from_url(REDIS_URL), env["PEERCRAWL_NAMESPACE"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
