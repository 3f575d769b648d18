"""What operators read: the figures ``peercrawl status``, the operators page and ``/metrics`` show.

``queue_report`` gathers the queue's, the sources' and the counters' figures
into one report with the capacity model; ``costs`` what the visits cost
the sources (requests per second, per visit, per pair counted); ``nodes``
describes the Redis servers behind a crawl. It only reads: every figure is owned and written by
the room it comes from.
"""
