"""Tracker URLs are bounded at intake: at most MAX_TRACKER_URL bytes of UTF-8, whichever door they come by
(a magnet's tr=, a .torrent's announce list, add --tracker, PEERCRAWL_TRACKERS); a longer one is refused
in one line naming what was wrong."""

from __future__ import annotations

import hashlib
from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from crawler.bencode import codec as bencode
from crawler.envparse import MAX_TRACKER_URL, tracker_url
from crawler.errors import ItemError, SettingsError
from crawler.keys import Keys
from crawler.queue.view import QueueView
from crawler.settings import Settings
from crawler.torrents.items import parse_items, parse_torrent, trackers_of
from tests.cli import run, run_json

HEX = "0123456789abcdef0123456789abcdef01234567"
OTHER = "89abcdef0123456789abcdef0123456789abcdef"
MIB = 1024 * 1024


def _url(size: int, tail: str = "k") -> str:
    """A usable tracker URL of exactly ``size`` UTF-8 bytes, padded with ``tail`` in its query."""
    head = "udp://big.example:1/announce?pk="
    room = size - len(head.encode())
    n, rest = divmod(room, len(tail.encode()))
    return head + tail * n + "k" * rest


def _magnet(tr: str, h: str = HEX) -> str:
    return f"magnet:?xt=urn:btih:{h}&tr={quote(tr, safe='')}"


def test_a_url_of_exactly_the_bound_is_taken_and_one_byte_more_is_refused():
    at = _url(MAX_TRACKER_URL)
    assert len(at.encode()) == MAX_TRACKER_URL
    assert tracker_url(at) == at
    (item,) = parse_items(_magnet(at)).items
    assert item.trackers == (at,)
    assert trackers_of([at], "--tracker") == (at,)
    with pytest.raises(ValueError, match=f"longer than {MAX_TRACKER_URL} bytes \\({MAX_TRACKER_URL + 1};"):
        tracker_url(_url(MAX_TRACKER_URL + 1))


def test_the_bound_counts_utf8_bytes_not_characters():
    wide = _url(MAX_TRACKER_URL + 1, tail="é")  # 2 bytes a character
    assert len(wide) <= MAX_TRACKER_URL < len(wide.encode())
    with pytest.raises(ValueError, match="longer than"):
        tracker_url(wide)
    assert tracker_url(_url(MAX_TRACKER_URL, tail="é")) is not None


def test_a_1_mib_magnet_tracker_refuses_its_item_in_one_line():
    tr = _url(MIB)
    with pytest.raises(ItemError) as e:
        parse_items(_magnet(tr))
    msg = str(e.value)
    assert msg.startswith(f"magnet tr=: tracker URL longer than {MAX_TRACKER_URL} bytes ({MIB};")
    assert "\n" not in msg and len(msg) < 200
    with pytest.raises(ItemError, match="--tracker: tracker URL longer than"):
        trackers_of(["udp://ok.example:1/announce", tr], "--tracker")


def test_a_torrent_leaves_an_over_long_announce_out_and_keeps_the_others():
    info = {b"name": b"x", b"piece length": 16384, b"pieces": b"\0" * 20, b"length": 1}
    data = bencode.encode({b"info": info, b"announce": _url(MIB).encode(),
                           b"announce-list": [[b"udp://ok.example:1/a", _url(MAX_TRACKER_URL + 1).encode()],
                                              [_url(MAX_TRACKER_URL).encode()]]})
    (item,) = parse_torrent(data).items
    assert item.info_hash == hashlib.sha1(bencode.encode(info)).hexdigest()
    assert item.trackers == ("udp://ok.example:1/a", _url(MAX_TRACKER_URL))


def test_the_trackers_setting_refuses_an_over_long_url_in_one_line():
    assert Settings.from_env({"PEERCRAWL_TRACKERS": _url(MAX_TRACKER_URL) + "|50"}).trackers[0].max_peers == 50
    with pytest.raises(SettingsError) as e:
        Settings.from_env({"PEERCRAWL_TRACKERS": "udp://a:1/announce," + _url(MAX_TRACKER_URL + 1)})
    msg = str(e.value)
    assert msg.startswith(f"PEERCRAWL_TRACKERS: tracker URL longer than {MAX_TRACKER_URL} bytes")
    assert "\n" not in msg and len(msg) < 300


@hsettings(max_examples=300, deadline=None)
@given(st.text(min_size=0, max_size=40), st.integers(min_value=0, max_value=3 * MAX_TRACKER_URL))
def test_any_text_is_taken_within_the_bound_or_refused_in_one_line(tail, pad):
    v = "udp://h.example:1/a?" + tail * (pad // max(len(tail), 1) if tail else 0)
    try:
        got = tracker_url(v)
    except ValueError as e:
        msg = str(e)
        assert "\n" not in msg and len(msg) < 800 and msg.isprintable()  # 60 characters, escaped
        if len(v.encode("utf-8", "surrogatepass")) > MAX_TRACKER_URL:
            assert msg.startswith("tracker URL longer than")
        return
    assert len(got.encode("utf-8")) <= MAX_TRACKER_URL


def test_add_refuses_a_1_mib_magnet_tracker_in_one_line_and_adds_the_rest(test_env, tmp_path, client, namespace):
    f = tmp_path / "items.txt"
    # a 1 MiB argument is past what Linux passes in argv (128 KiB), so the item comes in a --from file
    f.write_text(_magnet(_url(MIB)) + "\n" + OTHER + "\n")
    p, out = run_json(test_env, "add", "--from", str(f))
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert out["added"] == 1 and out["invalid"] == 1
    (line,) = p.stderr.strip().splitlines()
    assert line.startswith(f"peercrawl add: {f} line 1: magnet tr=: tracker URL longer than {MAX_TRACKER_URL} "
                           f"bytes ({MIB}; real ones are under 300): udp://big.example:1/announce?pk=k")
    assert len(line) < len(str(f)) + 250
    view = QueueView(client, Keys(namespace))
    assert view.state(OTHER)[0] == "ready" and view.state(HEX)[0] is None

    # exactly the bound is taken, and stored whole
    f.write_text(_magnet(_url(MAX_TRACKER_URL)) + "\n")
    p, out = run_json(test_env, "add", "--from", str(f))
    assert p.returncode == 0 and out["added"] == 1, p.stderr
    assert view.torrent(HEX)["trackers"] == [_url(MAX_TRACKER_URL)]


def test_add_refuses_an_over_long_tracker_flag_or_setting_before_adding_anything(test_env, client, namespace):
    long = _url(MAX_TRACKER_URL + 1)
    p = run(test_env, "add", HEX, "--tracker", long)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert f"tracker URL longer than {MAX_TRACKER_URL} bytes" in p.stderr
    p = run({**test_env, "PEERCRAWL_TRACKERS": long}, "add", HEX)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    (line,) = p.stderr.strip().splitlines()
    assert f"PEERCRAWL_TRACKERS: tracker URL longer than {MAX_TRACKER_URL} bytes" in line
    assert QueueView(client, Keys(namespace)).state(HEX)[0] is None
