"""Torrents as users hand them in, before the queue holds them: what ``add`` parses, and their names.

``items`` parses one item (an info-hash, a magnet link, a ``.torrent``
file) into a ``NewItem``, untrusted bytes through the bounded bencode
reader; ``intake`` reads items from arguments, files and standard input,
one clear line per bad one; ``torrent_names`` cleans the names they carry
(``dn``, ``info.name``) to what any terminal or page may show, and reads
them back from the queue's torrent hashes. See the contract, §7.
"""
