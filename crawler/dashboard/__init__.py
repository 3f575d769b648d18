"""The web dashboard and the crawl's ``/metrics``: read-only pages over Redis.

``app`` holds the Flask routes (page shells, their JSON and CSV,
``/metrics``, the token) and answers every HTTP error as plain text;
``views`` computes what each page shows from the same functions ``stats``
and ``status`` use; ``collector`` is the Prometheus collector read at
scrape time; ``access`` decides who a token-less dashboard serves (by the
connection's address, never a header); ``server`` serves the app on
gevent; ``countries`` maps GeoLite2 country names to the map's ISO codes;
``build_world`` rebuilds the vendored map by hand. See the contract, §10.
"""
