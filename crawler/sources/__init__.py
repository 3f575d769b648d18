"""Peer sources: UDP and HTTP trackers and the Mainline DHT, each answering a ``SourceResult``.

Codecs are sans-IO (``udp_codec``, ``http_codec``, ``peers``: bytes in,
frozen values out); the clients only move bytes over gevent sockets
(``udp_client`` with ``udp_batch``, ``http_client``). ``trackers`` is what
a visit calls, grouping one UDP tracker's announces (``announce_groups``);
``health`` is tracker health shared through Redis, ``announce_cap`` the
namespace-wide request schedule, ``addresses`` the address policy,
``self_filter`` the crawler's own entry taken out, ``request_counts`` every
request sent, per minute in Redis (what the crawl costs). ``dht`` asks the DHT
through one libtorrent session (``dht_session``, ``dht_alerts``,
``dht_lookups``, paced per node by ``dht_pacing`` and ``dht_pace_gate``), on
IPv4 and, where the machine has it, IPv6 (``dht_listen``);
``discovery`` samples it for new hashes. ``dht_scrape`` estimates a
torrent's DHT swarm from BEP 33's bloom filters (``dht_bloom``), asking the
nodes itself (``krpc_codec``, ``krpc_socket``). ``metadata_fetch``
(opt-in) asks a torrent's peers for its info dictionary through a
libtorrent session of its own (``metadata_session``) and reads it
(``metadata_info``). See the contract, §3.
"""
