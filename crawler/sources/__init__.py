"""Peer sources: UDP and HTTP trackers and the Mainline DHT, each answering a ``SourceResult``, and the metadata fetcher beside them.

Three rooms on one floor, none importing another: ``trackers``, ``dht``
and ``metadata`` (BEP 9 info dictionaries asked of peers: no peer source,
but it talks to peers under the same address policy). What two or more of
them use lives here, one floor down: the address policy every socket
obeys (``addresses``), the result both peer sources answer, the
per-process caches, the reader's turns of the UDP sockets, libtorrent's
alert pump and listen addresses, the namespace's rate budgets (the
announce cap, the DHT's lookups, the metadata fetches) and the per-minute
request counts. See the contract, §3.
"""
