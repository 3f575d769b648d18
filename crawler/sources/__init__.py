"""Peer sources (SPEC §3): UDP and HTTP trackers and the Mainline DHT.

Codecs are sans-IO (bytes in, frozen values out); the clients only move
bytes over gevent sockets. Every source reports a ``SourceResult``.
"""
