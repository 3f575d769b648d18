"""Redis, as every room reaches it: connecting, waiting out outages, running scripts.

``store`` holds ``Store``, the client a room is handed with what the process keeps beside it. ``connect`` opens the client (``REDIS_URL``: one Redis or a cluster, or the
``embedded`` server under the data dir) with the patience that rides out a
Redis going away (``outage``); ``connection_pool`` skips redis-py's poll for
stray data. ``scripts`` loads each room's ``.lua`` files once and runs them
by SHA, pipelined, on a cluster one pipeline per node (``cluster_run``);
``replica_wait`` asks replicas to acknowledge a batch; ``coalesce`` shares
round trips among a worker's greenlets (a ``group_commit``). ``layout``
records a crawl's shard counts, ``hash_pages`` reads big hashes in pages,
``minute_figures`` keeps per-minute figures. ``slices.lua`` holds the
helpers every room's scripts include. Nothing here knows what a torrent is.
"""
