"""Settings: defaults, and invalid values failing with a message that names the variable."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from inner_plane.config import ConfigError, build_settings


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # Only what each test sets: the test session exports store URLs for integration tests.
    for name in list(os.environ):
        if name.startswith("INNER_PLANE_"):
            monkeypatch.delenv(name)
    yield


def config_error(monkeypatch: pytest.MonkeyPatch, **env: str) -> str:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as error:
        build_settings()
    return str(error.value)


def test_defaults() -> None:
    settings = build_settings()
    assert settings.database_url is None and settings.redis_url is None
    assert settings.broker_url is None
    assert settings.data_dir == Path(".inner-plane")
    assert settings.log_format == "logfmt"


def test_values_are_read_from_prefixed_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INNER_PLANE_DATABASE_URL", "postgresql://u:p@db:5432/plane")
    monkeypatch.setenv("INNER_PLANE_REDIS_URL", "redis://cache:6379/0")
    monkeypatch.setenv("INNER_PLANE_DATA_DIR", "/var/lib/inner-plane")
    monkeypatch.setenv("INNER_PLANE_LOG_FORMAT", "json")
    settings = build_settings()
    assert settings.database_url == "postgresql://u:p@db:5432/plane"
    assert settings.data_dir == Path("/var/lib/inner-plane")
    assert settings.log_format == "json"


def test_broker_defaults_to_the_redis_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INNER_PLANE_REDIS_URL", "redis://cache:6379/0")
    assert build_settings().effective_broker_url == "redis://cache:6379/0"
    monkeypatch.setenv("INNER_PLANE_BROKER_URL", "redis://broker:6379/1")
    assert build_settings().effective_broker_url == "redis://broker:6379/1"


def test_no_broker_at_all_says_which_variables_to_set() -> None:
    with pytest.raises(ConfigError) as error:
        _ = build_settings().effective_broker_url
    assert "INNER_PLANE_BROKER_URL" in str(error.value)
    assert "INNER_PLANE_REDIS_URL" in str(error.value)


def test_empty_urls_mean_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INNER_PLANE_DATABASE_URL", "")
    monkeypatch.setenv("INNER_PLANE_REDIS_URL", "")
    settings = build_settings()
    assert settings.database_url is None and settings.redis_url is None


def test_invalid_log_format_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    message = config_error(monkeypatch, INNER_PLANE_LOG_FORMAT="xml")
    assert message.startswith("invalid configuration: INNER_PLANE_LOG_FORMAT: ")
    assert "'logfmt' or 'json'" in message


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("INNER_PLANE_DATABASE_URL", "mysql://db/plane", "must be a postgresql:// URL"),
        ("INNER_PLANE_REDIS_URL", "http://cache", "must be a redis://"),
        ("INNER_PLANE_BROKER_URL", "kafka://broker", "must be a redis://"),
        ("INNER_PLANE_LOG_LEVEL", "LOUD", "Input should be"),
        ("INNER_PLANE_DB_POOL_SIZE", "abc", "valid integer"),
        ("INNER_PLANE_DB_POOL_SIZE", "0", "greater than or equal to 1"),
        ("INNER_PLANE_DEDUP_TTL_S", "-5", "greater than or equal to 1"),
        ("INNER_PLANE_FLOWER_PORT", "70000", "less than or equal to 65535"),
        ("INNER_PLANE_WAKE_LEAD_MS", "soon", "valid integer"),
        ("INNER_PLANE_WAKE_LEAD_MS", "-1", "greater than or equal to 0"),
        ("INNER_PLANE_WAKE_LEAD_MS", "1001", "less than or equal to 1000"),
    ],
)
def test_invalid_values_name_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, expected: str
) -> None:
    message = config_error(monkeypatch, **{variable: value})
    assert f"{variable}: " in message
    assert expected in message


def test_every_invalid_variable_is_named_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    message = config_error(
        monkeypatch, INNER_PLANE_LOG_FORMAT="xml", INNER_PLANE_DB_POOL_SIZE="many"
    )
    assert "INNER_PLANE_LOG_FORMAT" in message and "INNER_PLANE_DB_POOL_SIZE" in message


def test_cross_field_limits_name_both_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    message = config_error(
        monkeypatch, INNER_PLANE_TASK_SOFT_TIME_LIMIT_S="300", INNER_PLANE_TASK_TIME_LIMIT_S="300"
    )
    assert "INNER_PLANE_TASK_SOFT_TIME_LIMIT_S must be below INNER_PLANE_TASK_TIME_LIMIT_S" in (
        message
    )


def test_overrides_are_validated_too() -> None:
    with pytest.raises(ConfigError) as error:
        build_settings(log_format="yaml")
    assert "INNER_PLANE_LOG_FORMAT" in str(error.value)


def test_visibility_timeout_outlasts_the_hard_time_limit() -> None:
    settings = build_settings(task_soft_time_limit_s=10, task_time_limit_s=20)
    assert settings.visibility_timeout_s > settings.task_time_limit_s


def test_the_head_deadline_is_a_setting_with_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    assert build_settings().api_head_timeout_s == 10.0
    monkeypatch.setenv("INNER_PLANE_API_HEAD_TIMEOUT_S", "2.5")
    assert build_settings().api_head_timeout_s == 2.5
    for bad in ("0", "-1", "3601", "ten", "nan"):
        message = config_error(monkeypatch, INNER_PLANE_API_HEAD_TIMEOUT_S=bad)
        assert "INNER_PLANE_API_HEAD_TIMEOUT_S" in message, (bad, message)


def test_the_trace_url_template_must_be_a_url_holding_the_trace_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert build_settings().trace_url_template is None
    good = "https://jaeger.example/trace/{trace_id}"
    monkeypatch.setenv("INNER_PLANE_TRACE_URL_TEMPLATE", good)
    assert build_settings().trace_url_template == good
    for bad in (
        "javascript:alert(1)//{trace_id}",
        "https://jaeger.example/trace/",
        "https://jaeger.example/{trace_id}/{span_id}",
        "https://jaeger.example/{trace_id}/{0}",
        "https://jaeger.example/{trace_id",
    ):
        message = config_error(monkeypatch, INNER_PLANE_TRACE_URL_TEMPLATE=bad)
        assert "INNER_PLANE_TRACE_URL_TEMPLATE" in message, (bad, message)


def test_a_mapping_variable_that_is_not_json_names_its_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    message = config_error(monkeypatch, INNER_PLANE_TOKEN_PRICES="{not json")
    assert message == "invalid configuration: INNER_PLANE_TOKEN_PRICES: not valid JSON"


def test_a_mapping_variable_in_json_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INNER_PLANE_TOKEN_PRICES", '{"m": {"input": 1.5}}')
    assert build_settings().token_prices == {"m": {"input": 1.5}}
