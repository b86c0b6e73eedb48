"""Redis or RabbitMQ as Celery's broker: which URLs are accepted and how the queues are declared
on each (RabbitMQ: quorum queues on topic exchanges; Redis: plain lists)."""

from __future__ import annotations

import pytest

from inner_plane import celery_bridge
from inner_plane.config import ConfigError, build_settings

REDIS = "redis://cache:6379/0"
RABBITMQ = "amqp://plane:secret@rabbit:5672/plane"


def test_broker_may_be_rabbitmq_while_redis_stays_the_store() -> None:
    settings = build_settings(redis_url=REDIS, broker_url=RABBITMQ)
    assert settings.effective_broker_url == RABBITMQ
    assert settings.redis_url == REDIS  # dedup markers, locks and debounce stay in Redis
    for url in ("amqps://rabbit/plane", "pyamqp://guest@localhost//"):
        assert build_settings(broker_url=url).broker_url == url


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("broker_url", "kafka://broker:9092"),
        ("broker_url", "rabbit:5672"),
        ("redis_url", RABBITMQ),  # the store must be Redis, whatever the broker
    ],
)
def test_a_url_of_the_wrong_kind_names_its_variable(field: str, value: str) -> None:
    with pytest.raises(ConfigError) as error:
        build_settings(**{field: value})
    assert f"INNER_PLANE_{field.upper()}" in str(error.value)


def test_rabbitmq_queues_are_quorum_queues_on_topic_exchanges() -> None:
    queues = {q.name: q for q in celery_bridge.task_queues(RABBITMQ)}
    assert set(queues) == {"signals", "activation", "user_turns", "periodic"}
    for name, queue in queues.items():
        assert queue.durable and queue.exchange.durable, name
        # Celery's native delayed delivery (countdowns on quorum queues) needs a topic exchange.
        assert queue.exchange.type == "topic" and queue.routing_key == name, name
    for name in ("signals", "activation", "user_turns"):
        assert queues[name].queue_arguments == {"x-queue-type": "quorum"}, name
    # Beat re-sends the periodic ticks, which carry a per-message expiry: a classic queue.
    assert not queues["periodic"].queue_arguments


def test_redis_queues_are_plain() -> None:
    for queue in celery_bridge.task_queues(REDIS):
        assert not queue.queue_arguments
        assert queue.exchange.type == "direct"


def test_transport_options_follow_the_broker() -> None:
    on_redis = build_settings(redis_url=REDIS, task_time_limit_s=100, task_soft_time_limit_s=90)
    # Redis redelivers an unacked message after the visibility timeout: above the hard limit.
    timeout = celery_bridge.broker_transport_options(on_redis)["visibility_timeout"]
    assert timeout > on_redis.task_time_limit_s
    on_rabbitmq = build_settings(redis_url=REDIS, broker_url=RABBITMQ)
    # RabbitMQ redelivers on a closed channel only, and confirms what it was sent.
    assert celery_bridge.broker_transport_options(on_rabbitmq) == {"confirm_publish": True}


def test_send_takes_no_broker_priority() -> None:
    # Quorum queues have no message priorities; the journal orders the work.
    assert "priority" not in celery_bridge.send.__code__.co_varnames
