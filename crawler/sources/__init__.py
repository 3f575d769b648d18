"""Peer sources: UDP and HTTP trackers and the Mainline DHT, each answering a ``SourceResult``, and the metadata fetcher beside them.

Three rooms on one floor, none importing another: ``trackers`` (BEP 15 and
BEP 3 codecs and clients, grouped announces and scrapes, tracker health),
``dht`` (lookups through libtorrent, BEP 33 scrapes over KRPC, BEP 51
samples) and ``metadata`` (BEP 9 info dictionaries asked of peers: no peer
source, but it talks to peers under the same address policy). What two or
more of them use lives here, one floor down. ``addresses`` is the address
policy every room's sockets obey; ``result`` the ``SourceResult`` both peer
sources answer; ``lru`` the per-process caches' one home; ``socket_turns``
the reader's turns both the UDP tracker client and the KRPC socket take.
``dht_alerts`` (libtorrent's alert pump) and ``dht_listen`` (which IPv4 and
IPv6 addresses a libtorrent session can listen on) serve the DHT's session
and the metadata fetcher's alike. ``rate_budget`` is a namespace's rate kept
as one schedule in Redis, with three instances: the trackers' announce cap,
the DHT's lookups and the metadata fetches, which the worker's visit takes
before asking any room (``cap_report`` reads the announce cap's use for
``status``); ``request_counts``
is what the crawl costs its sources, tracker requests and DHT lookups and
scrapes alike, in per-minute hashes (``request_counts.lua``, which shares
``whole.lua`` with ``rate_budget.lua``). See the contract, §3.
"""
