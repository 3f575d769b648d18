"""peercrawl: a distributed BitTorrent peer crawler.

The packages follow the user's layout: ``crawler`` holds the library (a
base of settings, keys, errors, logs and redaction, then one sub-package
per concept: ``store``, ``queue``, ``counters``, ``sources``, ``stathat``,
``report``, ``dashboard``, ``cli``); ``geo`` the geolocation; ``workers``
the gevent worker process. docs/house.md draws the floors.
"""

__version__ = "0.1.0"
