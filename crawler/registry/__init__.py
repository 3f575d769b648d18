"""The worker processes of a namespace, as ``status`` lists them and ``reshard`` checks for them.

``worker_registry`` is the registry's one writer and reader: each process's
figures and heartbeat expiry, gone once the heartbeat lapses. The worker's
side (identity, how often to beat) is ``workers.heartbeat``. See the
contract, §7.
"""
