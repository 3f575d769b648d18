"""Redis's own CPU, as the benchmarks read it around what they measure."""

from __future__ import annotations


def redis_cpu(client) -> float:
    """Redis's user + system CPU seconds so far (INFO cpu; the whole server, so other clients add noise)."""
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
