"""Trackers as a peer source: UDP (BEP 15) and HTTP (BEP 3) announces and scrapes, and what the crawl keeps of each tracker.

``trackers`` is what a visit calls: one announce to one tracker, answered as
a ``SourceResult``; ``announcer`` makes the exchange (announce, then
withdraw) and reads what the reply means, ``outcomes`` what a failure is.
Below them the codecs are sans-IO, bytes in and frozen values out
(``udp_codec``, ``http_codec``, ``http_scrape``, and ``peers`` for the
compact peer lists both kinds of reply carry); the clients only move bytes
over gevent sockets (``udp_client`` driving ``udp_batch``, ``http_client``),
and both raise the errors of ``tracker_errors``. Requests are
grouped: ``announce_groups`` puts one UDP tracker's announces into one
batch, ``scrape_groups`` many torrents into one scrape, which
``tracker_scrapes`` sends before anyone announces. ``tracker_urls`` parses
a URL once and says which URLs name one tracker, ``tracker_addresses``
where its requests go under the address policy, ``tracker_mirrors`` which
trackers list the same peers so that one is asked. ``health`` is tracker
health shared by every worker through Redis (its scripts, ``tracker_*.lua``,
sit beside it; ``health_report`` reads it for ``status``), pruned only for trackers no torrent names any more
(``tracker_names``); ``self_filter`` takes the crawler's own entry out of
the peers a tracker hands back.
"""
