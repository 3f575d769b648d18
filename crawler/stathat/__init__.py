"""StatHat delivery: the counters' increments posted to the EZ API, each exactly once.

The counters' scripts add what StatHat must hear to an outbox hash in the
same atomic step that counts it. ``flusher`` (``Flusher``, run by every
worker as a service and by ``peercrawl flush``) takes that outbox under a
lease (``take.lua``), posts it in chunks and settles each chunk
(``settle.lua``: acked stats deleted, a failed post handed back), so a
flusher killed anywhere loses nothing and posts nothing twice;
``client`` (``EZClient``) is the one JSON POST with a deadline on the whole
post. See the contract, §6.
"""


from crawler.stathat.client import EZClient, PostError
from crawler.stathat.flusher import Flusher

__all__ = ["EZClient", "Flusher", "PostError"]
