"""GPU activity from Prometheus, as scraped from NVIDIA's DCGM exporter (``docs/gpu-facts.md``, DCGM metrics).

Under MIG, ``DCGM_FI_DEV_GPU_UTIL`` is not reported, so activity is ``DCGM_FI_PROF_GR_ENGINE_ACTIVE``
(0–1), one series per GPU or, on a MIG GPU, per instance: ``UUID`` names the *parent* GPU, so a MIG
series is keyed by (``UUID``, ``GPU_I_ID``). ``DCGM_FI_DEV_FB_USED`` (MiB) comes per GPU or per instance the
same way. The node is the series' ``node``/``kubernetes_node`` label when the scrape adds one, else the
exporter's ``hostname`` (``Hostname`` before dcgm-exporter d5e5f51).

Plain ``urllib``: one GET per query, no client library.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.errors import GatewayRetryable

ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
FB_USED = "DCGM_FI_DEV_FB_USED"
_NODE_LABELS = ("node", "kubernetes_node", "hostname", "Hostname")


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU, or one MIG instance of it (``instance`` set), averaged over the query window."""

    node: str
    uuid: str
    instance: str | None  # GPU_I_ID
    profile: str | None  # GPU_I_PROFILE, e.g. "3g.40gb"
    engine_active: float  # 0–1
    memory_used_mib: float | None = None


class PrometheusClient:
    """Reads DCGM series from the Prometheus HTTP API at ``url`` (e.g. ``http://prometheus:9090``)."""

    def __init__(self, url: str, *, timeout_s: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query's vector result. Raises :class:`GatewayRetryable` when Prometheus cannot answer
        (unreachable, an HTTP error, an error status or an answer that is not a vector)."""
        address = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
        try:
            with urllib.request.urlopen(address, timeout=self.timeout_s) as response:
                body = json.loads(response.read().decode())
        except (urllib.error.URLError, TimeoutError, OSError, ValueError) as exc:
            raise GatewayRetryable(f"Prometheus at {self.url} did not answer {promql!r}: {exc}") from exc
        data = body.get("data") if isinstance(body, dict) else None
        if body.get("status") != "success" or not isinstance(data, dict) or data.get("resultType") != "vector":
            raise GatewayRetryable(f"Prometheus at {self.url} refused {promql!r}: {body.get('error', body)}")
        return list(data.get("result") or [])

    def gpu_samples(self, window_s: int) -> tuple[GpuSample, ...]:
        """Engine activity and memory used per GPU / MIG instance, averaged over the last ``window_s``."""
        window = f"{max(int(window_s), 1)}s"
        active = self.query(f"avg_over_time({ENGINE_ACTIVE}[{window}])")
        memory = self.query(f"avg_over_time({FB_USED}[{window}])")
        return samples_from(active, memory)


def _key(labels: Mapping[str, str]) -> tuple[str, str, str | None] | None:
    node = next((labels[name] for name in _NODE_LABELS if labels.get(name)), "")
    uuid = labels.get("UUID") or labels.get("uuid") or ""
    if not node or not uuid:
        return None
    return node, uuid, labels.get("GPU_I_ID") or None


def _value(series: Mapping[str, Any]) -> float | None:
    try:
        value = float(series["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return value if value == value else None  # NaN: no data in the window


def samples_from(active: Iterable[Mapping[str, Any]], memory: Iterable[Mapping[str, Any]] = ()) -> tuple:
    """Join the two metrics' series on (node, UUID, GPU_I_ID).

    A GPU with MIG series reports its activity through them; a parent-GPU series alongside them would count
    the same work twice, so it is dropped.
    """
    used: dict[tuple[str, str, str | None], float] = {}
    for series in memory:
        key, value = _key(series.get("metric", {})), _value(series)
        if key is not None and value is not None:
            used[key] = value
    found: dict[tuple[str, str, str | None], GpuSample] = {}
    for series in active:
        labels = series.get("metric", {})
        key, value = _key(labels), _value(series)
        if key is None or value is None:
            continue
        found[key] = GpuSample(
            node=key[0],
            uuid=key[1],
            instance=key[2],
            profile=labels.get("GPU_I_PROFILE") or None,
            engine_active=min(max(value, 0.0), 1.0),
            memory_used_mib=used.get(key),
        )
    with_mig = {(node, uuid) for node, uuid, instance in found if instance is not None}
    return tuple(
        sample
        for key, sample in sorted(found.items(), key=lambda item: (item[0][0], item[0][1], item[0][2] or ""))
        if key[2] is not None or (key[0], key[1]) not in with_mig
    )
