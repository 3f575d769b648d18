"""The torrent queue: every torrent's state and the transitions between them.

``queue`` (``Queue``) is the only writer of the queue's keys: add,
claim, extend, complete, defer, release, through the ``.lua`` scripts beside
it, whose arguments and replies ``script_calls`` builds and reads;
``visit_plan`` is the trackers a visit may ask and ``visit_buckets`` the
trim of the per-minute counts. ``view`` (``QueueView``) reads without
writing; ``rates`` are the operator rates the scripts count; ``lanes``,
``pins`` and ``shard_tops`` decide what is claimed next; ``scoring`` is the
visit's multiplier (pure); ``items`` parses what ``add`` is handed
(magnets, hashes, ``.torrent`` files), ``torrent_names`` cleans the names
they carry and reads them back, and ``intake`` reads it from arguments and
files; ``resharding`` moves a stopped crawl to another shard
count; ``registry`` lists the worker processes working the queue (their
heartbeats). See the contract, §1 and §2.
"""
