"""Torrent names (``crawler.torrents.torrent_names``): cleaned and bounded whatever comes in, read from
magnets and ``.torrent`` files, stored once per torrent by ``add.lua`` (filled when missing, never
replaced), and kept through eviction, re-admission, a reshard and a Redis killed and started again."""

from __future__ import annotations

import hashlib
import unicodedata
from datetime import timedelta

import pytest
import redis
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from crawler.bencode import codec as bencode
from crawler.keys import Keys
from crawler.queue.queue import Queue
from crawler.queue.resharding import Reshard
from crawler.queue.scoring import Outcome
from crawler.queue.view import QueueView
from crawler.store import scripts
from crawler.torrents import torrent_names
from crawler.torrents.items import NewItem, parse_items, parse_magnet, parse_torrent
from crawler.torrents.torrent_names import MAX_BYTES, MAX_CHARS, clean, of_torrent
from tests.redis_servers import AofRedis
from tests.test_cluster import SECRET, cluster_ns  # noqa: F401 (fixture)

T = 1_000_000.0


def h(name: str) -> str:
    return hashlib.sha1(name.encode()).hexdigest()


def torrent_bytes(name: bytes | None = None, utf8: bytes | None = None, **extra) -> bytes:
    info = {b"piece length": 16384, b"pieces": b"\x00" * 20, b"length": 1, **extra}
    if name is not None:
        info[b"name"] = name
    if utf8 is not None:
        info[b"name.utf-8"] = utf8
    return bencode.encode({b"announce": b"udp://127.0.0.1:6969/announce", b"info": info})


# --- cleaning: any bytes or text in, a bounded name without control characters out ---------------

def assert_clean(name: str | None) -> None:
    if name is None:
        return
    assert 0 < len(name) <= MAX_CHARS and len(name.encode("utf-8")) <= MAX_BYTES
    assert not any(unicodedata.category(c).startswith("C") for c in name), ascii(name)
    assert name == name.strip(" ") and "  " not in name and all(c == " " or not c.isspace() for c in name)
    assert clean(name) == name  # idempotent: a stored name comes back as it is


JUNK = st.sampled_from(["\x00", "\x1b", "\x07", "\x9b", "\u202e", "\u2066", "\u200b", "\u200d", "\ufeff",
                        "\t", "\n", "\u2028", "\u3000", " ", "\ud800", "\udcff", "\ue000", "\U0010ffff",
                        "\u0301", "é", "東", "🎬", "a"])
TEXTS = st.one_of(
    st.text(st.characters(codec=None, exclude_categories=()), max_size=600),
    st.lists(JUNK, min_size=150, max_size=5000).map("".join),  # past the cap, and past what is read
    st.tuples(st.text(max_size=50), st.integers(MAX_CHARS - 5, 3 * MAX_CHARS)).map(lambda t: t[0] * t[1]),
)
BYTES = st.one_of(st.binary(max_size=2000), TEXTS.map(lambda t: t.encode("utf-8", "surrogatepass")),
                  st.integers(0, 20_000).map(lambda n: "東".encode() * n))


@hsettings(max_examples=300, deadline=timedelta(seconds=2))
@given(st.one_of(TEXTS, BYTES))
def test_any_text_or_bytes_clean_to_a_bounded_name_without_control_characters(raw):
    assert_clean(clean(raw))


@hsettings(max_examples=150, deadline=timedelta(seconds=2))
@given(st.one_of(st.none(), BYTES, st.integers(), st.lists(st.binary(max_size=5))),
       st.one_of(st.none(), BYTES, st.integers()))
def test_any_torrent_name_values_give_a_clean_name_or_none(name, utf8):
    got = of_torrent(name, utf8)
    assert_clean(got)
    strings = [v if isinstance(v, bytes) else None for v in (name, utf8)]
    assert parse_torrent(torrent_bytes(*strings)).items[0].name == got


def test_cleaning_by_example():
    assert clean("  Ubuntu\t22.04\n\nDesktop  ") == "Ubuntu 22.04 Desktop"
    assert clean("abc\u202egnp.exe\u2066x\u2069") == "abcgnp.exex"  # bidi overrides and isolates go
    assert clean("zero\u200bwidth\u200djoin\ufeff") == "zerowidthjoin"
    assert clean("red\x1b[31mtown\x07\x9b2J") == "red[31mtown2J"
    assert clean(b"caf\xe9 \xff") == "caf\ufffd \ufffd" and clean("raw\udce9") == "raw\ufffd"
    assert clean("\u200b \x00\t") is None and clean("") is None and clean(b"") is None
    long = "é" * (MAX_CHARS - 1) + "e\u0301\u0302" + "x" * 10  # a base and its marks are not parted
    assert clean(long) == "é" * (MAX_CHARS - 1)
    assert clean("東" * 10_000) == "東" * MAX_CHARS and len(clean("東" * 10_000).encode()) == 3 * MAX_CHARS


def test_a_torrent_prefers_its_utf8_name_when_it_is_utf8():
    assert of_torrent("Caf\xe9".encode("latin-1"), "Café".encode()) == "Café"
    assert of_torrent("Caf\xe9".encode("latin-1"), b"bad \xff") == "Caf\ufffd"  # not UTF-8: name, replaced
    assert of_torrent(None, b"only \xff") == "only \ufffd"
    assert of_torrent(b"plain", "\x1b\u200b".encode()) == "plain"  # nothing left of the UTF-8 one
    assert of_torrent([b"a list"], 7) is None
    t = parse_torrent(torrent_bytes("Caf\xe9".encode("latin-1"), "Café 東京".encode()))
    assert t.items[0].name == "Café 東京"
    # a name kept does not change the info-hash: it is the info dictionary's SHA-1 as written
    data = torrent_bytes(b"x" * 70_000)
    assert t.items[0].info_hash != parse_torrent(data).items[0].info_hash
    assert parse_torrent(data).items[0].name == "x" * MAX_CHARS


def test_a_magnet_names_each_topic_by_its_number():
    a, b = h("a"), h("b")
    (one,) = parse_magnet(f"magnet:?xt=urn:btih:{a}&dn=Big+Buck%20Bunny%E2%80%AE%0A.mkv").items
    assert one == NewItem(a, (), "Big Buck Bunny .mkv")
    (one,) = parse_magnet(f"magnet:?dn.2=second&xt.1=urn:btih:{a}").items  # one torrent: any number's
    assert one.name == "second"
    two = parse_magnet(f"magnet:?xt.1=urn:btih:{a}&xt.2=urn:btih:{b}&dn.2=B&dn.1=A&dn.1=later").items
    assert [(i.info_hash, i.name) for i in two] == [(a, "A"), (b, "B")]
    two = parse_magnet(f"magnet:?xt.1=urn:btih:{a}&xt.2=urn:btih:{b}&dn.2=B").items
    assert [i.name for i in two] == [None, "B"]
    assert parse_items(a).items[0].name is None
    assert parse_magnet(f"magnet:?xt=urn:btih:{a}&dn=%E2%80%8B+").items[0].name is None


# --- stored once, in add.lua's step -------------------------------------------------------------

def name_of(client, keys: Keys, ih: str) -> str | None:
    return torrent_names.read(client, keys, [ih])[0]


def test_add_stores_a_name_once_fills_a_missing_one_and_never_replaces(client, namespace, settings):
    keys = Keys(namespace)
    q = Queue(client, keys, settings)
    a, b, c = h("one"), h("two"), h("three")
    assert q.add([NewItem(a, (), "First"), NewItem(b), NewItem(c, (), "C1"), NewItem(c, (), "C2")],
                 now=T) == ["added", "added", "added", "already_tracked"]
    assert torrent_names.read(client, keys, [a, b, c]) == ["First", None, "C1"]  # the batch's first wins
    assert client.hlen(keys.torrent(b)) == 0  # no name, no hash: an unnamed add touches no key of its own
    assert q.add([NewItem(a, (), "Second"), NewItem(b, (), "Filled")], now=T) == ["already_tracked"] * 2
    assert torrent_names.read(client, keys, [a, b]) == ["First", "Filled"]
    assert QueueView(client, keys).torrent(a, T)["name"] == "First"
    assert QueueView(client, keys).torrent(h("none"), T) is None
    # a name that is not clean is cleaned on its way (add cleans again); what is past the bound is cut
    q.add([NewItem(h("raw"), (), "\u202e" + "n" * 500)], now=T)
    assert name_of(client, keys, h("raw")) == "n" * MAX_CHARS
    # add.lua itself refuses a longer name before writing anything
    add = scripts.register(client, "add", "crawler.queue")
    k, args, _ = q.admission._add_args(keys, [NewItem(h("big"), (), "x")], False, T)
    args[args.index("x")] = "x" * (MAX_BYTES + 1)
    before = client.zcard(keys.cooling)
    with pytest.raises(redis.ResponseError, match="add.lua: malformed item"):
        add(keys=k, args=args)
    assert client.zcard(keys.cooling) == before and not client.exists(keys.torrent(h("big")))


def test_a_name_lives_and_expires_with_its_torrent(client, namespace, settings):
    keys = Keys(namespace)
    s = settings.replace(evict_below=0.9, tombstone_seconds=3600)
    q = Queue(client, keys, s)
    named, unnamed = h("evicted named"), h("evicted unnamed")
    q.add([NewItem(named, (), "Kept"), NewItem(unnamed)], now=T)
    for lease in q.claim(2, now=T):
        assert q.complete(lease, Outcome.NONE, now=T)[0] == "evicted"
    assert name_of(client, keys, named) == "Kept" and 0 < client.ttl(keys.torrent(named)) <= 3600
    # skipped as evicted: nothing stored, the expiry left as it is
    assert q.add([NewItem(named, (), "Other"), NewItem(unnamed, (), "Skipped")], now=T) == ["skipped_evicted"] * 2
    assert torrent_names.read(client, keys, [named, unnamed]) == ["Kept", None]
    assert client.ttl(keys.torrent(named)) > 0
    # re-admitted: the expiry lifted, the name kept or filled
    assert q.add([NewItem(named, (), "Other"), NewItem(unnamed, (), "Filled")], readmit=True, now=T) == ["added"] * 2
    assert torrent_names.read(client, keys, [named, unnamed]) == ["Kept", "Filled"]
    assert client.ttl(keys.torrent(named)) == -1 and client.ttl(keys.torrent(unnamed)) == -1
    # a hash left from a forgotten tombstone, a moment before its key expires: a new add keeps it
    gone = h("forgotten")
    client.hset(keys.torrent(gone), mapping={"visits": 3, "name": "Old"})
    client.expire(keys.torrent(gone), 5)
    assert q.add([NewItem(gone, (), "New")], now=T) == ["added"]
    assert name_of(client, keys, gone) == "Old" and client.ttl(keys.torrent(gone)) == -1


def test_names_move_with_their_torrents_through_a_reshard(client, namespace, settings):
    q = Queue(client, Keys(namespace), settings.replace(evict_below=0.9))
    hs = [h(f"move {i}") for i in range(40)]
    q.add([NewItem(x, (), f"name {i} 東京" if i % 3 else None) for i, x in enumerate(hs)], now=T)
    (lease,) = [x for x in q.claim(40, now=T) if x.info_hash == hs[1]]
    assert q.complete(lease, Outcome.NONE, now=T)[0] == "evicted"
    want = torrent_names.read(client, Keys(namespace), hs)
    assert want[1] == "name 1 東京" and want[0] is None
    assert Reshard(client, namespace, 7).run(T)["moved"] > 20
    moved = Keys(namespace, 7)
    assert torrent_names.read(client, moved, hs) == want
    assert client.exists(moved.for_torrent(hs[1]).torrent(hs[1])) and client.ttl(
        moved.for_torrent(hs[1]).torrent(hs[1])) > 0  # the evicted one's hash still expires with its tombstone
    # and a later add in the new layout still fills, never replaces
    q7 = Queue(client, moved, settings)
    assert q7.add([NewItem(hs[0], (), "filled"), NewItem(hs[2], (), "other")], now=T) == ["already_tracked"] * 2
    assert torrent_names.read(client, moved, [hs[0], hs[2]]) == ["filled", "name 2 東京"]


def test_names_survive_a_redis_killed_and_restarted(tmp_path, settings):
    server = AofRedis(tmp_path)
    try:
        keys, ih = Keys("names"), h("restart")
        Queue(server.client, keys, settings).add([NewItem(ih, (), "Survivor ✓")], now=T)
        server.restart()
        assert name_of(server.client, keys, ih) == "Survivor ✓"
    finally:
        server.stop()


def test_names_are_read_from_every_slot_of_a_cluster(cluster_ns, redis_cluster, settings):  # noqa: F811
    from crawler.settings import Settings
    from crawler.store import connect as store

    ns, url = cluster_ns
    client = store.connect(Settings(redis_url=url, secret=SECRET))
    keys = Keys(ns, 16)
    hs = [h(f"cluster {i}") for i in range(64)]
    Queue(client, keys, settings.replace(redis_url=url, namespace=ns)).add(
        [NewItem(x, (), f"名前 {i}") for i, x in enumerate(hs)], now=T)
    # every shard (16 hash tags), spread over the masters: one pipeline asks each node for its part
    assert len({keys.for_torrent(x).prefix for x in hs}) == 16
    assert len({redis_cluster.owner(keys.for_torrent(x).torrent(x)) for x in hs}) > 1
    assert torrent_names.read(client, keys, hs + [h("unknown")]) == [f"名前 {i}" for i in range(64)] + [None]
    client.close()

