"""The Mainline DHT as a peer source: lookups through libtorrent, scrapes and samples asked of the nodes directly.

``dht`` is what a visit calls: one libtorrent session (``dht_session``
builds it, with the address policy as its IP filter) whose alerts reach the
hub through ``crawler.sources.dht_alerts``, on IPv4 and, where the machine
has it, IPv6 (``crawler.sources.dht_listen``). Lookups wait in
``dht_lookups``, each traversal let start by ``dht_pace_gate`` under the
per-node pacing of ``dht_pacing``; ``dht_schedule`` says when a torrent's
next lookup is due. BEP 33 scrapes go around libtorrent: ``krpc_codec``
turns KRPC queries and replies into bytes and frozen values,
``krpc_socket`` moves them over one paced UDP socket, ``dht_scrape`` asks
the nodes nearest a hash for their bloom filters (``dht_bloom``), believing
only nodes apart (``dht_node_ids``), and ``dht_sizes`` starts such a scrape
where a visit's lookup ended. ``discovery`` samples the nodes' stored
hashes (BEP 51) into the discovered lane. The alert pump and the listen
addresses live one floor down because the metadata fetcher's libtorrent
session uses them too.
"""
