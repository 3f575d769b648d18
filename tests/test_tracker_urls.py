"""Which tracker URLs name one tracker (crawler/sources/trackers/tracker_urls.py)."""

from __future__ import annotations

from crawler.sources.trackers.tracker_urls import by_tracker, preferred, tracker_of


def test_one_host_port_and_path_is_one_tracker_whatever_the_scheme():
    udp, http = "udp://Tracker.Example:1337/announce", "http://tracker.example.:1337/announce/"
    assert tracker_of(udp) == tracker_of(http) == ("tracker.example", 1337, "/announce")
    # a UDP URL without a path is the /announce of its port; a default port is its scheme's
    assert tracker_of("udp://t.example:6969") == tracker_of("http://t.example:6969/announce")
    assert tracker_of("http://t.example/announce") == tracker_of("udp://t.example:80/announce")
    assert tracker_of("https://t.example/announce")[1] == 443
    # a passkey in the path or the query, or another path, is another tracker
    assert tracker_of("http://t.example/a/announce") != tracker_of("http://t.example/b/announce")
    assert tracker_of("http://t.example/announce?pk=1") != tracker_of("http://t.example/announce?pk=2")
    # no host or no port: the URL alone
    assert tracker_of("udp:///announce") == "udp:///announce" and tracker_of("wss://t.example/x") == "wss://t.example/x"


def test_groups_keep_their_order_and_udp_is_preferred_unless_it_backs_off():
    a = ["http://a.example:1/announce", "udp://b.example:2", "udp://a.example:1/announce",
         "https://a.example:1/announce", "http://b.example:2/announce/"]
    groups = by_tracker(a)
    assert groups == [[a[0], a[2], a[3]], [a[1], a[4]]]
    assert preferred(groups[0]) == a[2]
    assert preferred(groups[0], avoid=lambda u: 123.0 if u.startswith("udp") else None) == a[3]  # HTTPS next
    assert preferred([a[0]], avoid=lambda u: 1.0) == a[0]  # a lone URL is asked even when it backs off
