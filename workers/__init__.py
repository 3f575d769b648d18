"""The worker process: a gevent pool that claims torrents from the queue, asks
their sources for peers, records the peers and completes each visit.

``process`` (``Process``) assembles one worker from the settings: its
``Store`` (script calls of its greenlets share round trips), the sources,
the recorder, the flusher and the pool. ``worker`` (``Worker``) is the pool
of runners over the queue with its services (lease extension, heartbeat,
flusher, autoscaler) and its shutdown; ``slots`` and ``claims`` size and
batch its claims; ``visit`` (``Visitor``) takes a batch of torrents end to end;
``heartbeat`` registers the process for ``status``; ``autoscale`` is
``--concurrency auto``; ``connections`` the process's Redis client;
``worker_metrics`` its own ``/metrics``. The commands that start it live in
``crawler/cli/crawl.py``; nothing here monkey-patches at import.
"""
