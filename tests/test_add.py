"""``peercrawl add`` end to end: every item form, duplicates, evictions, bad lines."""

import base64
import hashlib
import json
import os
import subprocess
import sys

import pytest

from crawler.bencode import codec as bencode
from crawler.keys import Keys
from crawler.queue.queue import Queue
from crawler.queue.scoring import Outcome
from crawler.queue.view import QueueView
from crawler.torrents.items import NewItem
from tests.cli import run, run_json

H = ["%040x" % (i * 7919) for i in range(1, 20)]
# The counts of add --json that stay 0 unless quarantine or the tracker bound comes in.
QUIET = {"skipped_quarantined": 0, "readmitted": 0, "trackers_dropped": 0, "made_due": 0}


def torrent_file(path, name=b"x", trackers=(b"udp://t.example:6969/announce",)):
    info = {b"name": name, b"piece length": 16384, b"pieces": b"\1" * 20, b"length": 5}
    path.write_bytes(bencode.encode({b"info": info, b"announce": trackers[0], b"announce-list": [list(trackers)]}))
    return hashlib.sha1(bencode.encode(info)).hexdigest()


def test_every_item_form(test_env, tmp_path, client, namespace, settings):
    tf = tmp_path / "a.torrent"
    th = torrent_file(tf)
    b32 = base64.b32encode(bytes.fromhex(H[1])).decode()
    magnet = f"magnet:?xt=urn:btih:{H[2]}&tr=http%3A%2F%2Ftr.example%2Fannounce"
    p, out = run_json(test_env, "add", H[0], b32, magnet, str(tf), "--tracker", "udp://extra.example:1/announce")
    assert p.returncode == 0, p.stderr
    assert out == {"added": 4, "already_tracked": 0, "skipped_evicted": 0, "invalid": 0, **QUIET}
    q = Queue(client, Keys(namespace), settings)
    view = QueueView(q.client, q.keys)
    for h in (H[0], H[1], H[2], th):
        assert view.state(h)[0] == "ready"
    assert view.torrent(H[2])["trackers"] == ["http://tr.example/announce", "udp://extra.example:1/announce"]
    assert view.torrent(th)["trackers"] == ["udp://extra.example:1/announce", "udp://t.example:6969/announce"]
    # torrent --json shows it
    p, info = run_json(test_env, "torrent", th)
    assert info["state"] == "ready" and info["score"] == 1.0 and info["visits"] == 0


def test_duplicates_and_evicted_with_and_without_readmit(test_env, client, namespace, settings):
    q = Queue(client, Keys(namespace), settings)
    view = QueueView(q.client, q.keys)
    q.add([NewItem(H[3])])
    for _ in range(8):
        (lease,) = q.claim(1)
        q.complete(lease, Outcome.NONE, due=0)
    assert view.state(H[3])[0] == "evicted"
    p, out = run_json(test_env, "add", H[0], H[0], H[3])
    assert p.returncode == 0
    assert out == {"added": 1, "already_tracked": 1, "skipped_evicted": 1, "invalid": 0, **QUIET}
    p, out = run_json(test_env, "add", H[0], H[3], "--readmit")
    assert out == {"added": 1, "already_tracked": 1, "skipped_evicted": 0, "invalid": 0, **QUIET}
    assert view.state(H[3]) == ("ready", 1.0)
    p = run(test_env, "add", H[3])
    assert p.stdout.strip() == "added 0, already tracked 1, evicted and skipped 0, invalid 0"


def test_mixed_file_reports_bad_lines_and_adds_good_ones(test_env, tmp_path, client, namespace, settings):
    f = tmp_path / "list.txt"
    f.write_text("\n".join([
        "# a comment",
        H[4],
        "",
        "nonsense here",
        f"magnet:?xt=urn:btih:{H[5]}",
        "abc",
        "missing.torrent",
        H[6],
    ]) + "\n")
    p, out = run_json(test_env, "add", "--from", str(f))
    assert p.returncode == 1
    assert out == {"added": 3, "already_tracked": 0, "skipped_evicted": 0, "invalid": 3, **QUIET}
    errs = p.stderr.strip().splitlines()
    assert len(errs) == 3, p.stderr
    assert errs[0].startswith(f"peercrawl add: {f} line 4: not an info-hash")
    assert errs[1].startswith(f"peercrawl add: {f} line 6: hex info-hash must have 40 characters")
    assert errs[2].startswith(f"peercrawl add: {f} line 7: no such file")
    assert "Traceback" not in p.stderr
    q = Queue(client, Keys(namespace), settings)
    view = QueueView(q.client, q.keys)
    assert {h for h in H[4:7] if view.state(h)[0] == "ready"} == set(H[4:7])


def test_from_stdin_in_many_batches(test_env, client, namespace, settings):
    hashes = ["%040x" % (10**12 + i) for i in range(2600)]
    p, out = run_json(test_env, "add", "--from", "-", stdin="\n".join(hashes + hashes[:100]) + "\n")
    assert p.returncode == 0, p.stderr
    assert out == {"added": 2600, "already_tracked": 100, "skipped_evicted": 0, "invalid": 0, **QUIET}
    q = Queue(client, Keys(namespace), settings)
    view = QueueView(q.client, q.keys)
    assert view.counts()["ready"] == 2600 and len(q.claim(2000)) + len(q.claim(2000)) == 2600


def test_usage_errors_are_one_line(test_env):
    p = run(test_env, "add")
    assert p.returncode == 2 and "give ITEMs or --from FILE" in p.stderr and "Traceback" not in p.stderr
    p = run(test_env, "add", H[0], "--tracker", "ftp://nope")
    assert p.returncode == 2 and "--tracker" in p.stderr and "Traceback" not in p.stderr


def test_status_json_keys(test_env):
    run(test_env, "add", H[7], H[8])
    p, s = run_json(test_env, "status")
    assert p.returncode == 0
    for k in ("tracked", "ready", "cooling", "in_flight", "evicted", "visits_last_hour", "queue_latency_s",
              "workers", "trackers"):
        assert k in s
    assert (s["tracked"], s["ready"], s["in_flight"]) == (2, 2, 0)


def test_torrent_unknown_and_bad_hash(test_env):
    p = run(test_env, "torrent", H[9])
    assert p.returncode == 1 and "is not tracked" in p.stderr
    p = run(test_env, "torrent", "xyz")
    assert p.returncode == 2 and "Traceback" not in p.stderr


def _added(client, namespace, settings, hashes):
    q = Queue(client, Keys(namespace), settings)
    view = QueueView(q.client, q.keys)
    return {h for h in hashes if view.state(h)[0] == "ready"}


def test_a_bad_torrent_beside_a_good_hash_costs_only_itself(test_env, tmp_path, client, namespace, settings):
    big = tmp_path / "big_int.torrent"
    big.write_bytes(b"d4:infod6:lengthi" + b"9" * 5000 + b"eee")
    p, out = run_json(test_env, "add", H[10], str(big), H[11])
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert out == {"added": 2, "already_tracked": 0, "skipped_evicted": 0, "invalid": 1, **QUIET}
    (line,) = p.stderr.strip().splitlines()
    assert line.startswith(f"peercrawl add: argument 2: {big} is not valid bencode: integer at offset")
    assert _added(client, namespace, settings, H[10:12]) == set(H[10:12])


def test_hostile_from_lines_are_reported_with_their_position(test_env, tmp_path, client, namespace, settings):
    f = tmp_path / "list.txt"
    f.write_bytes(b"\n".join([
        H[12].encode(),
        b"evil\x00name.torrent",
        b"caf\xe9 au lait",                       # Latin-1, not UTF-8
        b"\x1b[2J" + b"z" * 5000,
        b"magnet:?xt=urn:btih:" + H[13].encode() + b"&tr=udp://h%0A:1/a",
        H[14].encode(),
    ]) + b"\n")
    p, out = run_json(test_env, "add", "--from", str(f))
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert out["added"] == 2 and out["invalid"] == 4
    errs = p.stderr.strip().splitlines()
    assert [e.split(": ", 2)[1] for e in errs] == [f"{f} line {n}" for n in (2, 3, 4, 5)]
    assert "holds a NUL byte: evil\\x00name.torrent" in errs[0]
    assert "(and not UTF-8 text): caf\\udce9 au lait" in errs[1]
    assert "\\x1b[2Jzzz" in errs[2] and "\x1b" not in p.stderr
    assert "magnet tr=" in errs[3]
    assert _added(client, namespace, settings, [H[12], H[14]]) == {H[12], H[14]}


@pytest.mark.parametrize("encoding, bom", [("utf-8", b"\xef\xbb\xbf"), ("utf-16-le", b"\xff\xfe"),
                                           ("utf-16-be", b"\xfe\xff"), ("utf-32-le", b"\xff\xfe\x00\x00")])
def test_from_files_with_a_byte_order_mark_are_read(test_env, tmp_path, client, namespace, settings, encoding, bom):
    f = tmp_path / "list.txt"
    f.write_bytes(bom + f"{H[15]}\r\n# note\r\n{H[16]}\r\n".encode(encoding))
    p, out = run_json(test_env, "add", "--from", str(f))
    assert p.returncode == 0, p.stderr
    assert out == {"added": 2, "already_tracked": 0, "skipped_evicted": 0, "invalid": 0, **QUIET}
    assert _added(client, namespace, settings, H[15:17]) == set(H[15:17])


def test_utf16_without_a_byte_order_mark_is_one_line_naming_the_file(test_env, tmp_path, client, namespace, settings):
    f = tmp_path / "list.txt"
    f.write_bytes(f"{H[17]}\n{H[18]}\n".encode("utf-16-le"))
    p, out = run_json(test_env, "add", H[1], "--from", str(f))
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert out == {"added": 1, "already_tracked": 0, "skipped_evicted": 0, "invalid": 1, **QUIET}
    assert p.stderr.strip() == (f"peercrawl add: {f}: holds NUL bytes between its characters: UTF-16 or UTF-32 "
                                "text without a byte-order mark? Save it as UTF-8")
    assert _added(client, namespace, settings, [H[1]] + H[17:19]) == {H[1]}


def test_a_file_named_in_another_encoding_is_found_from_a_list(test_env, tmp_path, client, namespace, settings):
    name = b"caf\xe9.torrent"  # Latin-1 bytes, as an old file system holds them
    th = torrent_file(tmp_path / os.fsdecode(name))
    f = tmp_path / "list.txt"
    f.write_bytes(name + b"\n")
    p, out = run_json(test_env, "add", "--from", str(f))
    assert p.returncode == 0, p.stderr
    assert _added(client, namespace, settings, [th]) == {th}


def test_any_fault_parsing_one_item_is_that_items_line(test_env, client, namespace, settings):
    # A fault no ItemError foresaw (here a RecursionError injected for one item) must cost only that item.
    code = ("import crawler.torrents.intake as a\n"
            "orig = a.parse_items\n"
            "def parse(text, base=None, cap=64):\n"
            "    if text == 'boom':\n"
            "        raise RecursionError('maximum recursion depth exceeded\\nin comparison')\n"
            "    return orig(text, base, cap)\n"
            "a.parse_items = parse\n"
            "from crawler.cli import main\n"
            "main()\n")
    p = subprocess.run([sys.executable, "-c", code, "add", H[2], "boom", H[3], "--json"], env=test_env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert json.loads(p.stdout) == {"added": 2, "already_tracked": 0, "skipped_evicted": 0, "invalid": 1, **QUIET}
    assert p.stderr.strip() == ("peercrawl add: argument 2: cannot parse this item: RecursionError: "
                                "maximum recursion depth exceeded in comparison")
    assert _added(client, namespace, settings, H[2:4]) == set(H[2:4])


def test_a_line_past_the_length_cap_is_one_error_and_the_rest_is_read(test_env, tmp_path, client, namespace,
                                                                       settings):
    from crawler.torrents.intake import MAX_LINE

    f = tmp_path / "list.txt"
    f.write_bytes(H[5].encode() + b"\n" + b"w" * (2 * MAX_LINE + 7) + b"\n" + H[6].encode() + b"\n")
    p, out = run_json(test_env, "add", "--from", str(f))
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert out == {"added": 2, "already_tracked": 0, "skipped_evicted": 0, "invalid": 1, **QUIET}
    assert p.stderr.strip() == f"peercrawl add: {f} line 2: longer than 4 MiB, not an item"
    assert _added(client, namespace, settings, H[5:7]) == set(H[5:7])


def test_a_magnet_of_several_topics_adds_each_with_the_magnets_trackers(test_env, client, namespace, settings):
    b32 = base64.b32encode(bytes.fromhex(H[12])).decode()
    magnet = (f"magnet:?xt=urn:btih:{H[12]}&xt=urn:btmh:1220{'cd' * 32}&xt=urn:btih:{H[13]}&xt.1=urn:btih:{b32}"
              f"&xt.2=urn:btih:{H[14]}&tr=udp%3A%2F%2Fa.example%3A1%2Fannounce&tr=http://b.example/announce")
    p, out = run_json(test_env, "add", magnet)
    assert p.returncode == 0 and not p.stderr, p.stderr
    assert out == {"added": 3, "already_tracked": 0, "skipped_evicted": 0, "invalid": 0, **QUIET}
    view = QueueView(client, Keys(namespace))
    for h in H[12:15]:
        assert view.state(h)[0] == "ready"
        assert set(view.torrent(h)["trackers"]) == {"udp://a.example:1/announce", "http://b.example/announce"}
    # Only a v2 topic: one line, nothing added.
    p, out = run_json(test_env, "add", f"magnet:?xt=urn:btmh:1220{'cd' * 32}")
    assert p.returncode == 1 and out["added"] == 0 and out["invalid"] == 1
    assert p.stderr.strip() == ("peercrawl add: argument 1: magnet has only a v2 (urn:btmh) info-hash; "
                                "peercrawl needs a v1 urn:btih")


def test_a_4_mib_magnet_line_keeps_the_first_trackers_and_reports_the_rest(test_env, tmp_path, client, namespace,
                                                                          settings):
    parts = [f"magnet:?xt=urn:btih:{H[15]}&xt=urn:btih:{H[16]}"]
    size = len(parts[0])
    while size < 4 * 1024 * 1024 - 40:
        parts.append(f"&tr=udp://t{len(parts) - 1}.x:1/a")
        size += len(parts[-1])
    n = len(parts) - 1
    f = tmp_path / "list.txt"
    f.write_text("".join(parts) + "\n")
    p, out = run_json(test_env, "add", "--from", str(f), timeout=30)  # de-duplicating by list search took hours
    assert p.returncode == 0 and "Traceback" not in p.stderr
    assert out == {"added": 2, "already_tracked": 0, "skipped_evicted": 0, "invalid": 0,
                   "skipped_quarantined": 0, "readmitted": 0, "trackers_dropped": 2 * (n - 64), "made_due": 0}
    assert p.stderr.strip() == (f"peercrawl add: {2 * (n - 64)} trackers not stored on 2 torrents "
                                "(at most 64 per torrent, PEERCRAWL_MAX_TRACKERS_PER_TORRENT)")
    view = QueueView(client, Keys(namespace))
    for h in H[15:17]:
        assert set(view.torrent(h)["trackers"]) == {f"udp://t{i}.x:1/a" for i in range(64)}


def test_a_torrent_files_size_and_file_count_are_kept_at_add(test_env, tmp_path):
    one = torrent_file(tmp_path / "one.torrent", b"one")  # a single file of 5 bytes
    info = {b"name": b"many", b"piece length": 16384, b"pieces": b"\1" * 20,
            b"files": [{b"length": n, b"path": [b"f%d" % n]} for n in (3 * 2**30, 7, 0)]}
    (tmp_path / "many.torrent").write_bytes(bencode.encode({b"info": info}))
    many = hashlib.sha1(bencode.encode(info)).hexdigest()
    bad = {b"name": b"bad", b"piece length": 16384, b"pieces": b"\1" * 20,
           b"files": [{b"length": -1, b"path": [b"x"]}]}
    (tmp_path / "bad.torrent").write_bytes(bencode.encode({b"info": bad}))
    p = run(test_env, "add", str(tmp_path / "one.torrent"), str(tmp_path / "many.torrent"),
            str(tmp_path / "bad.torrent"), "a" * 40)
    assert p.returncode == 0, p.stderr
    got = {h: run_json(test_env, "torrent", h)[1] for h in (one, many, hashlib.sha1(bencode.encode(bad)).hexdigest(),
                                                             "a" * 40)}
    assert [(t["total_size"], t["file_count"]) for t in got.values()] == [
        (5, 1), (3 * 2**30 + 7, 3), (None, None), (None, None)]
    shown = run(test_env, "torrent", many).stdout
    assert any(x.split() == ["size", "3", "GiB"] for x in shown.splitlines()), shown
    assert any(x.split() == ["files", "3"] for x in shown.splitlines()), shown


def test_a_url_item_says_it_is_a_url_not_a_missing_file(test_env):
    p = run(test_env, "add", "https://example.org/dl/x.torrent?passkey=0123456789abcdef")
    assert p.returncode == 1
    (line,) = p.stderr.strip().splitlines()
    assert line.startswith("peercrawl add: argument 1: a URL is not an item: download the .torrent and add the file")
    assert "0123456789abcdef" not in line and "no such file" not in line
