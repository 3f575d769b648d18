"""The test suite: real Redis, trackers, DHT nodes and browsers on loopback, and the stand-ins that play them."""
