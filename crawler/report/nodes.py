"""The Redis servers behind a crawl, as operators see them (contract §7, §9): one row per node.

``status --json`` prints ``node_report``: for a single Redis one row, for a
cluster one row per node (masters and replicas), each with its role, keys,
memory (used, peak, limit, eviction policy), commands per second and CPU seconds, plus whether the cluster is
healthy (``cluster_state:ok`` and every slot served, as the node the client
asks says). Everything comes from ``INFO`` and ``CLUSTER INFO``: no CONFIG,
which managed Redis often disables.
"""

from __future__ import annotations

import redis

from crawler.errors import StoreError, one_line
from crawler.store import connect as store
from crawler.store.outage import Once

SLOTS = 16384


def _row(node: str, info: dict) -> dict:
    keys = sum(v.get("keys", 0) for k, v in info.items() if k.startswith("db") and isinstance(v, dict))
    return {
        "node": node,
        "role": info.get("role"),
        "keys": keys,
        "used_memory_bytes": int(info.get("used_memory", 0)),
        "used_memory_peak_bytes": int(info.get("used_memory_peak", 0)),
        "maxmemory_bytes": int(info.get("maxmemory", 0)),
        "maxmemory_policy": info.get("maxmemory_policy"),
        "ops_per_s": int(info.get("instantaneous_ops_per_sec", 0)),
        "cpu_s": round(float(info.get("used_cpu_sys", 0)) + float(info.get("used_cpu_user", 0)), 2),
    }


def node_report(client) -> dict:
    """``{"cluster", "healthy", "state", "slots_ok", "nodes"}``; raises ``StoreError``.

    Off a cluster ``healthy`` is True whenever the server answered.
    """
    try:
        rows = [_row(node, info) for node, info in node_infos(client, "default")]
        if not store.is_cluster(client):
            return {"cluster": False, "healthy": True, "state": "ok", "slots_ok": None, "nodes": rows}
        info = client.cluster_info()
    except redis.RedisError as e:
        raise StoreError(f"reading the Redis nodes failed: {e}") from e
    state = info.get("cluster_state")
    slots_ok = int(info.get("cluster_slots_ok", 0))
    return {"cluster": True, "healthy": state == "ok" and slots_ok == SLOTS, "state": state,
            "slots_ok": slots_ok, "nodes": rows}


def eviction_warning(report: dict) -> str | None:
    """One line when a node of ``report`` (``node_report``) would evict keys under memory pressure.

    Evicted marks count their IPs again, evicted queue state loses torrents
    (docs/operations.md). Read from INFO (CONFIG may be disabled on managed
    Redis); None when no node says it evicts. On a cluster, the first node
    that would is named.
    """
    for row in report["nodes"]:
        policy = row["maxmemory_policy"]
        if policy is None or policy == "noeviction":
            continue
        limit = row["maxmemory_bytes"]
        when = f"once it holds {limit} bytes" if limit else "once a maxmemory limit is set"
        where = f"Redis {row['node']}" if report["cluster"] else "Redis"
        return (f"{where} maxmemory-policy is {policy}: it evicts keys {when}, and evicted marks count "
                "their IPs again; set maxmemory-policy noeviction (docs/operations.md)")
    return None


def node_infos(client, section: str) -> list[tuple[str, dict]]:
    """``(node, INFO section)`` of every node: one ``("redis", ...)`` off a cluster.

    On a cluster, every node (masters and replicas) the client knows, as
    ``host:port``, sorted; each asked once, without waiting: a node that
    does not answer (down, or a failover under way) is
    ``{"role": "unreachable", "error": ...}``. Raises ``redis.RedisError``
    (off a cluster).
    """
    if not store.is_cluster(client):
        return [("redis", client.info(section))]
    out = []
    for node in client.get_nodes():
        try:
            with Once():
                info = client.get_redis_connection(node).info(section)
        except redis.RedisError as e:
            info = {"role": "unreachable", "error": one_line(str(e))}
        out.append((node.name, info))
    return sorted(out)
