"""StatHat delivery (SPEC §6): the EZ API client and the outbox flusher."""

from crawler.stathat.client import EZClient, PostError
from crawler.stathat.flusher import Flusher

__all__ = ["EZClient", "Flusher", "PostError"]
