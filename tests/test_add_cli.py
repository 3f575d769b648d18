"""``peercrawl add`` end to end: every item form, duplicates, evictions, bad lines."""

import base64
import hashlib

from crawler import bencode
from crawler.keys import Keys
from crawler.lifecycle import NewItem, Queue
from crawler.scoring import Outcome
from tests.cli import run, run_json

H = ["%040x" % (i * 7919) for i in range(1, 20)]
# The counts of add --json that stay 0 unless quarantine or the tracker bound comes in.
QUIET = {"skipped_quarantined": 0, "readmitted": 0, "trackers_dropped": 0}


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
    for h in (H[0], H[1], H[2], th):
        assert q.state(h)[0] == "ready"
    assert q.torrent(H[2])["trackers"] == ["http://tr.example/announce", "udp://extra.example:1/announce"]
    assert q.torrent(th)["trackers"] == ["udp://extra.example:1/announce", "udp://t.example:6969/announce"]
    # torrent --json shows it
    p, info = run_json(test_env, "torrent", th)
    assert info["state"] == "ready" and info["score"] == 1.0 and info["visits"] == 0


def test_duplicates_and_evicted_with_and_without_readmit(test_env, client, namespace, settings):
    q = Queue(client, Keys(namespace), settings)
    q.add([NewItem(H[3])])
    for _ in range(8):
        (lease,) = q.claim(1)
        q.complete(lease, Outcome.NONE, due=0)
    assert q.state(H[3])[0] == "evicted"
    p, out = run_json(test_env, "add", H[0], H[0], H[3])
    assert p.returncode == 0
    assert out == {"added": 1, "already_tracked": 1, "skipped_evicted": 1, "invalid": 0, **QUIET}
    p, out = run_json(test_env, "add", H[0], H[3], "--readmit")
    assert out == {"added": 1, "already_tracked": 1, "skipped_evicted": 0, "invalid": 0, **QUIET}
    assert q.state(H[3]) == ("ready", 1.0)
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
    assert {h for h in H[4:7] if q.state(h)[0] == "ready"} == set(H[4:7])


def test_from_stdin_in_many_batches(test_env, client, namespace, settings):
    hashes = ["%040x" % (10**12 + i) for i in range(2600)]
    p, out = run_json(test_env, "add", "--from", "-", stdin="\n".join(hashes + hashes[:100]) + "\n")
    assert p.returncode == 0, p.stderr
    assert out == {"added": 2600, "already_tracked": 100, "skipped_evicted": 0, "invalid": 0, **QUIET}
    q = Queue(client, Keys(namespace), settings)
    assert q.counts()["ready"] == 2600 and len(q.claim(2000)) + len(q.claim(2000)) == 2600


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
