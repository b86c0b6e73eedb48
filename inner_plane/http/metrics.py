"""``GET /metrics``: the plane in Prometheus' text format (see ``services/metrics.py``).

Counters come from the Redis hash every process adds to, gauges from the journal and Redis at
scrape time, so any API process answers the same. Flower keeps its own /metrics for Celery's
view (workers, task rates).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

from inner_plane.runtime import Runtime
from inner_plane.services import metrics
from inner_plane.services.probes import is_redis_url, redis_client, redis_py_url

QUEUES = ["signals", "activation", "user_turns", "periodic"]


class PlaneCollector:
    def __init__(self, runtime_factory: Callable[[], Runtime]) -> None:
        self.runtime_factory = runtime_factory

    def collect(self) -> Iterator[Any]:
        rt = self.runtime_factory()
        settings = rt.settings
        assert settings.redis_url is not None
        client = redis_client(settings.redis_url)
        broker_url = settings.effective_broker_url
        broker = None
        if is_redis_url(broker_url):
            broker = (
                client
                if broker_url == settings.redis_url
                else redis_client(redis_py_url(broker_url))
            )
        metrics.flush()  # this process's own increments count too
        yield from metrics.families(client, rt.engine, broker, QUEUES)
        budget = GaugeMetricFamily(
            "inner_plane_wake_budget_per_hour", "Background activations allowed per delegate"
        )
        budget.add_metric([], settings.wake_budget_per_hour)
        yield budget


def build_router(runtime_factory: Callable[[], Runtime]) -> APIRouter:
    router = APIRouter()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PlaneCollector(runtime_factory))

    @router.get("/metrics", include_in_schema=False)
    async def scrape() -> Response:
        body = await run_in_threadpool(generate_latest, registry)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    return router
