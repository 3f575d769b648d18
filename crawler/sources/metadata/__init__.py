"""Torrents' info dictionaries asked of their peers (BEP 9/10 ``ut_metadata``): the one part of the crawler that connects to peers.

It is no peer source: a torrent that came without a name gets one from the
peers the trackers and the DHT already found, under the same address
policy (``crawler.sources.addresses``). ``metadata_fetch`` is what a worker
calls; it runs two libtorrent sessions of its own, one for TCP and one for
uTP (``metadata_session`` builds them, keeps payload off and lets in only
the peers of the fetches in flight), whose alerts reach the hub through
the same pump as the DHT's (``crawler.sources.dht_alerts``) and whose IPv6
listen addresses are probed as the DHT node's are
(``crawler.sources.dht_listen``). ``metadata_outcomes`` is how a fetch
ends and how it is counted, ``metadata_info`` checks a received info
dictionary against its info-hash and sums it up, sans-IO.
"""
