"""Where the plane is: the configured store URLs, or those of the plane `up` runs on the data
dir. Commands that need a running plane use these and start nothing themselves."""

from __future__ import annotations

import sys
from typing import NoReturn

import typer

from inner_plane.config import Settings, load_settings
from inner_plane.services.plane import PlaneState, running_plane


def no_plane(settings: Settings) -> NoReturn:
    sys.stderr.write(
        f"inner-plane: error: no plane running on {settings.data_dir.resolve()} "
        "(start it with `inner-plane up`, or set INNER_PLANE_DATABASE_URL and "
        "INNER_PLANE_REDIS_URL)\n"
    )
    raise typer.Exit(1)


def plane_state(settings: Settings) -> PlaneState | None:
    return running_plane(settings.data_dir)


def plane_settings() -> Settings:
    """Settings with every store URL set: configured, or the running plane's; else exit 1."""
    settings = load_settings()
    if settings.database_url is not None and settings.redis_url is not None:
        return settings
    state = plane_state(settings)
    if state is None:
        no_plane(settings)
    return settings.model_copy(
        update={
            "database_url": settings.database_url or state.database_url,
            "redis_url": settings.redis_url or state.redis_url,
            "broker_url": settings.broker_url or state.broker_url,
        }
    )


def _local(host: str) -> str:
    # A server bound to every interface is reached on loopback from this host.
    return "127.0.0.1" if host in {"0.0.0.0", "::", ""} else host


def api_url() -> str:
    settings = load_settings()
    state = None if settings.database_url else plane_state(settings)
    if state is not None and state.api_url:
        return state.api_url
    return f"http://{_local(settings.api_host)}:{settings.api_port}/"


def flower_url() -> str:
    settings = load_settings()
    state = None if settings.database_url else plane_state(settings)
    if state is not None and state.flower_url:
        return state.flower_url
    return f"http://{_local(settings.flower_address)}:{settings.flower_port}/"
