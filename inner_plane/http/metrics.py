"""``GET /metrics``: the plane in Prometheus' text format (see ``services/metrics.py``).

Counters come from the Redis hash every process adds to, gauges from the journal and Redis at
scrape time, so any API process answers the same. Flower keeps its own /metrics for Celery's
view (workers, task rates).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

from inner_plane.runtime import Runtime
from inner_plane.services import metrics, probes
from inner_plane.services.probes import is_redis_url, redis_client, redis_py_url

if TYPE_CHECKING:
    import redis

    from inner_plane.config import Settings

QUEUES = ["signals", "activation", "user_turns", "periodic"]
AMQP_TIMEOUT_S = 2.0


def queue_depths(settings: Settings, client: redis.Redis) -> dict[str, int] | None:
    """Messages waiting in each plane queue, on either broker: Redis lists' lengths, or
    RabbitMQ's count from a passive ``queue.declare`` (AMQP itself: no management plugin, no
    HTTP port). None when the broker does not answer: no samples rather than false zeros."""
    broker_url = settings.effective_broker_url
    try:
        if is_redis_url(broker_url):
            broker = (
                client
                if broker_url == settings.redis_url
                else redis_client(redis_py_url(broker_url))
            )
            return probes.queue_depths(broker, QUEUES)
        from inner_plane import celery_bridge

        return celery_bridge.amqp_queue_depths(broker_url, QUEUES, AMQP_TIMEOUT_S)
    except Exception:  # any broker failure: the scrape goes on without depths
        return None


class PlaneCollector:
    def __init__(self, runtime_factory: Callable[[], Runtime]) -> None:
        self.runtime_factory = runtime_factory

    def collect(self) -> Iterator[Any]:
        rt = self.runtime_factory()
        settings = rt.settings
        assert settings.redis_url is not None
        client = redis_client(settings.redis_url)
        metrics.flush()  # this process's own increments count too
        yield from metrics.families(client, rt.engine, queue_depths(settings, client))
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
