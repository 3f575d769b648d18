"""The torrent queue: every torrent's state and the transitions between them.

``queue`` (``Queue``) is the only writer of the queue's keys, through the
``.lua`` scripts beside it (``queue.TRANSITIONS``), whose arguments and
replies ``script_calls`` builds and reads; ``admission`` batches what
``add`` admits, ``visit_plan`` is the trackers a visit may ask and
``visit_buckets`` the trim of the per-minute counts. ``view``
(``QueueView``) reads without writing, ``torrent_record`` is one torrent's
record as shown; ``rates`` are the operator rates the scripts count;
``lanes``, ``pins``, ``due_now`` and ``shard_tops`` decide what is claimed
next; ``scoring`` is the visit's multiplier (pure); ``source_notes`` what a
visit keeps of its sources, ``coverage`` how much of a swarm it saw, and
``torrent_metadata`` what the metadata fetcher learned (a name brings a
torrent forward). ``resharding`` moves a stopped crawl to another shard
count. See the contract, §1 and §2.
"""
