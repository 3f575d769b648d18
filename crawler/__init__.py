"""peercrawl: a distributed BitTorrent peer crawler.

The packages follow the user's layout: ``crawler`` holds the queue, the peer
sources, the counters and the command line; ``geo`` the geolocation;
``workers`` the gevent worker process.
"""

__version__ = "0.1.0"
