"""The web dashboard and metrics endpoint (SPEC §10): Flask routes, read-only views of Redis, the vendored map."""
