"""Bencode, sans-IO and bounded against hostile input (BEP 3).

``codec`` is what callers use (``decode``, ``decode_prefix``, ``encode``);
``reader`` is the one-pass reader behind ``decode`` (strictness, a budget of
values, what a schema keeps); ``schema`` says what a decode keeps and how
its results look. Part of the base: trackers' replies and ``.torrent``
files are read with it, and it imports nothing of the crawler's but errors.
"""
