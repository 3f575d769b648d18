"""The worker process (SPEC §1–§4, §7): a gevent pool that claims torrents
from the score queue, visits their trackers and the DHT, records the peers and
completes the visit.

Modules: ``visit`` (one torrent, end to end), ``pool`` (the claim loop, lease
extension, shutdown), ``heartbeat`` (registration for ``status``),
``autoscale`` (``--concurrency auto``), ``progress`` (``run``'s live view) and
``cli`` (the ``worker`` and ``run`` commands, where gevent is patched).
Nothing here monkey-patches at import: only the command functions do.
"""
