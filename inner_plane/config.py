"""Settings read from the environment (prefix ``INNER_PLANE_``).

Every component reads its configuration through :func:`load_settings`, so an invalid value fails
at start with a message that names the variable instead of surfacing later as a confusing error.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

ENV_PREFIX = "INNER_PLANE_"
REDIS_SCHEMES = ("redis://", "rediss://", "unix://", "redis+socket://")
# RabbitMQ; Redis stays the store for dedup markers, locks and debounce either way.
AMQP_SCHEMES = ("amqp://", "amqps://", "pyamqp://")


class ConfigError(Exception):
    """A setting is missing or invalid; the message names the environment variable."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True)

    # Stores. Unset URLs mean "start the embedded server under data_dir".
    database_url: str | None = None
    redis_url: str | None = None
    broker_url: str | None = None
    data_dir: Path = Path(".inner-plane")
    # `inner-plane up` ends the plane when one of its embedded stores stays unreachable this
    # long (seconds), restarts included; until then it restarts, adopts or waits for it.
    store_down_deadline_s: float = Field(default=300.0, gt=0)

    log_format: Literal["logfmt", "json"] = "logfmt"
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    # Publish path.
    dedup_ttl_s: int = Field(default=86_400, ge=1)
    db_pool_size: int = Field(default=5, ge=1, le=100)
    # A signals worker journals one-signal messages many per transaction: at most this many,
    # waiting at most this long after the first (workers/batching.py).
    ingest_batch: int = Field(default=500, ge=1, le=10_000)
    ingest_flush_ms: int = Field(default=10, ge=0, le=10_000)

    # Celery limits (seconds). The broker visibility timeout is derived from the hard limit.
    task_soft_time_limit_s: int = Field(default=240, ge=1)
    task_time_limit_s: int = Field(default=300, ge=1)

    # Attention broker and activation lane.
    batch_quiet_ms: int = Field(default=500, ge=0)
    batch_max_age_ms: int = Field(default=2_000, ge=0)
    batch_limit: int = Field(default=100, ge=1, le=10_000)
    # A window's activate is sent this much before the window ends, and the lane waits out a
    # remainder this short in the task instead of deferring: Celery's delivery, the lease's take
    # and the window's read happen while the window is still open (docs/operations.md).
    wake_lead_ms: int = Field(default=10, ge=0, le=1_000)
    lease_ttl_s: int = Field(default=30, ge=1)
    heartbeat_s: float = Field(default=5.0, gt=0)
    retry_base_s: float = Field(default=1.0, gt=0)
    retry_max_s: float = Field(default=60.0, gt=0)
    wake_budget_per_hour: int = Field(default=60, ge=1)
    # Loop guard along causes: an autonomous activation caused (through signals its tools or
    # timers produced) by an activation caused by another ... is not run past this depth.
    loop_chain_limit: int = Field(default=8, ge=1)
    sweep_interval_s: float = Field(default=10.0, gt=0)
    # A signal-carrying message still unjournaled this long after the broker took it (a Redis
    # broker only) is journaled by the sweeper from its receipt (inner_plane.receipts). Far
    # above a batch's journaling time; far below the visibility timeout.
    receipt_grace_s: float = Field(default=30.0, gt=0)
    # Base agent; empty means "openai" when INNER_PLANE_OPENAI_MODEL is set, else "dry-run".
    agent: str = ""
    # JSON script of the scripted test agent (see inner_plane/agent/scripted.py).
    agent_script: str | None = None

    # Context composer and model adapters (composer issue).
    openai_base_url: str | None = None  # None: the official endpoint (or OPENAI_BASE_URL)
    openai_model: str | None = None
    openai_api_key: str | None = None  # None: OPENAI_API_KEY
    openai_max_steps: int = Field(default=8, ge=1, le=64)
    # Ask the Responses API to compact the context past this many tokens (None: never).
    openai_compact_threshold: int | None = Field(default=None, ge=1_000)
    # Which wire format the openai agent speaks: the Responses API, or Chat Completions for
    # OpenAI-compatible local servers (vLLM, the llama.cpp server, Ollama).
    openai_api: Literal["responses", "chat_completions"] = "responses"
    # Responses API: keep responses server-side and chain steps with previous_response_id
    # (False: stateless, reasoning items replayed with their encrypted content).
    openai_store: bool = False
    openai_reasoning_effort: Literal["minimal", "low", "medium", "high"] | None = None
    # One model call may stay silent this long before it counts as timed out (and is retried).
    openai_timeout_s: float = Field(default=120.0, gt=0)
    # All model calls of one activation, retries and their waits included, end within this.
    openai_budget_s: float = Field(default=180.0, gt=0)
    instructions_file: Path | None = None  # None: the packaged prompts/instructions.md
    delegate_timezone: str = "UTC"
    context_budget_tokens: int = Field(default=32_000, ge=1_000, le=2_000_000)
    tools: str = ""  # comma-separated "module:factory" entries adding tools to the registry
    # The conversation's durable context window (continuity issue): compacted once its tokens
    # pass this (None: never; the window then keeps its newest CONTEXT_WINDOW_MESSAGES).
    context_compact_tokens: int | None = Field(default=24_000, ge=1_000)
    context_keep_messages: int = Field(default=4, ge=0, le=100)  # newest kept verbatim
    # And more of the newest while they fit in this many tokens (None: a quarter of
    # CONTEXT_COMPACT_TOKENS), so the recent thread survives a compaction word for word.
    context_keep_tokens: int | None = Field(default=None, ge=0)
    context_window_messages: int = Field(default=200, ge=10, le=10_000)
    context_compact_retry_s: float = Field(default=60.0, gt=0)  # after a failed compaction
    # The continuity capsule's refresh: after this many new messages, and on this schedule
    # when anything was said since (None: never on that trigger); also after each compaction.
    capsule_every_messages: int | None = Field(default=20, ge=1)
    capsule_refresh_s: float | None = Field(default=86_400.0, gt=0)
    capsule_enabled: bool = True
    # Token accounting: USD per million tokens per model, as JSON
    # ({"gpt-4.1-mini": {"input": 0.4, "cached": 0.1, "output": 1.6}}).
    token_prices: dict[str, dict[str, float]] = Field(default_factory=dict)
    # Tokens (input + output) a delegate may spend per UTC day before its background wakes
    # are deferred to the next day (None: no limit). Never blocks a user turn.
    daily_token_budget: int | None = Field(default=None, ge=1)

    # Deployment-specific kinds (TOML file with [kinds."name"] tables).
    kinds_file: Path | None = None

    # Timers and beat's periodic work (timers issue). timers_file None: beat_schedule/timers.toml.
    timers_file: Path | None = None
    timers_tick_s: float = Field(default=1.0, gt=0)
    timers_grace_s: float = Field(default=60.0, ge=0)  # lateness still "on time"
    timers_leader_lock: bool = True  # Redis lock skipping redundant ticks (dedup is the guard)
    timers_batch: int = Field(default=500, ge=1, le=10_000)
    # Retention: each table keeps finished rows this long (seconds); see docs/operations.md.
    retention_age_s: float = Field(default=30 * 86_400, gt=0)  # finished signals
    retention_signal_events_s: float = Field(default=30 * 86_400, gt=0)
    retention_activations_s: float = Field(default=30 * 86_400, gt=0)
    retention_thoughtflows_s: float = Field(default=7 * 86_400, gt=0)  # full model inputs
    retention_conversation_events_s: float = Field(default=90 * 86_400, gt=0)
    retention_user_turns_s: float = Field(default=90 * 86_400, gt=0)
    retention_keep_messages: int = Field(default=100, ge=0)  # newest per conversation, always
    retention_batch: int = Field(default=5_000, ge=1, le=100_000)
    retention_interval_s: float = Field(default=3_600, gt=0)
    # How long the live feed's log keeps events: an SSE client that reconnects within it (with
    # Last-Event-ID) misses nothing; one that comes back later is told to reload.
    live_retention_s: float = Field(default=86_400, gt=0)

    # Outbound contact (the notify_user tool; escalated and needs_input dispositions). A channel
    # is on when configured: SMTP through the standard library to notify_smtp_host, and a
    # webhook POSTed with an HMAC-SHA256 signature of its body (X-Inner-Plane-Signature).
    notify_smtp_host: str | None = None
    notify_smtp_port: int = Field(default=25, ge=1, le=65535)
    notify_smtp_starttls: bool = False
    notify_smtp_username: str | None = None
    notify_smtp_password: str | None = None
    notify_smtp_from: str = "inner-plane@localhost"
    notify_smtp_to: str | None = None  # comma-separated recipients: the user
    notify_webhook_url: str | None = None
    notify_webhook_secret: str | None = None
    notify_webhook_attempts: int = Field(default=4, ge=1, le=10)
    notify_timeout_s: float = Field(default=10.0, gt=0)
    # How often beat sends the outbox sweep: messages held for the end of a person's quiet
    # hours go out within this many seconds of it.
    notify_outbox_interval_s: float = Field(default=5.0, gt=0)

    # Mail in (docs/channels.md): each delegate's IMAP mailbox (`inner-plane mail set`) is
    # watched with IDLE by `inner-plane mail watch` (a process `up` runs) and polled by beat
    # every mail_poll_interval_s as well, so a server without IDLE, or a plane without the
    # watcher, still gets its mail. A mail larger than mail_max_bytes is not read (counted).
    mail_poll_interval_s: float = Field(default=30.0, gt=0)
    mail_idle_s: float = Field(default=300.0, gt=0, le=1740)  # IDLE re-issued (RFC 2177: <29 min)
    mail_timeout_s: float = Field(default=30.0, gt=0)
    mail_batch: int = Field(default=50, ge=1, le=1000)  # mails read per poll; the rest wait
    mail_max_bytes: int = Field(default=25 * 1024 * 1024, ge=1024)
    # A mail dated longer ago than this (or an hour ahead) is a replay: a stranger's.
    mail_max_age_s: float = Field(default=7 * 86_400, gt=0)
    # The receiving provider's authserv-id(s) (comma-separated): only its topmost
    # Authentication-Results header is believed for require_authenticated mailboxes.
    mail_authserv_id: str = ""
    mail_verify_dkim: bool = True  # verify DKIM signatures locally too (dkimpy; DNS lookups)
    mail_ca_file: Path | None = None  # a CA bundle for the IMAP server's certificate
    # Beat keeps one IDLE watch per mailbox (inner_plane/channels/watcher.py says why there);
    # false: run `inner-plane mail watch` instead, or rely on the poll alone.
    mail_watch_in_beat: bool = True

    # SMS (docs/channels.md): a Twilio-compatible provider. Texts come in at
    # POST /v1/channels/sms/twilio, signed with the auth token (X-Twilio-Signature); answers go
    # out through the Messages API at twilio_base_url.
    twilio_account_sid: str | None = None
    twilio_auth_token: str | None = None
    twilio_from_number: str | None = None  # E.164, the number texts are sent from
    twilio_base_url: str = "https://api.twilio.com"
    # The URL the provider calls, as it sees it (behind a proxy it differs from the request's
    # own): the signature covers it. Unset: the request's URL.
    sms_webhook_url: str | None = None
    sms_max_body_bytes: int = Field(default=16 * 1024, ge=1024, le=1024 * 1024)
    sms_attempts: int = Field(default=5, ge=1, le=10)  # per segment, on 429 and 5xx
    sms_retry_max_s: float = Field(default=30.0, gt=0)  # the longest wait between attempts
    sms_max_segments: int = Field(default=10, ge=1, le=50)  # an answer past it is cut

    # Operator endpoints started by `inner-plane up`.
    flower_port: int = Field(default=5555, ge=1, le=65535)
    flower_address: str = "127.0.0.1"
    api_host: str = "127.0.0.1"
    api_port: int = Field(default=8700, ge=1, le=65535)
    # Publications one API worker process carries out at once; more wait their turn on the
    # event loop. The publish path is mostly Python: past a few threads per process they only
    # take the GIL from each other (measured: 4 threads carry about an eighth more than 40).
    api_publish_threads: int = Field(default=4, ge=1, le=64)
    # Failed authentications one client address may make per minute before it is refused (429)
    # without any credential check (no hash is computed for it).
    auth_failures_per_minute: int = Field(default=20, ge=1)
    # A refusal to an address past that limit is held this long before it is sent (a tarpit:
    # a guessing loop then sends one request a second per connection); 0: sent at once.
    api_throttled_delay_s: float = Field(default=1.0, ge=0, le=10)
    # Reverse proxies whose X-Forwarded-For is believed (comma-separated CIDRs; default none):
    # the client is the peer address, or, when the peer is one of these, the right-most
    # X-Forwarded-For hop that is not.
    trusted_proxies: str = ""
    # Host names the API answers to besides loopback names (comma-separated, e.g. the name a
    # reverse proxy serves it under). Unset on a loopback-bound API: loopback names only.
    public_hosts: str = ""
    # Operator sign-in sessions (server-side, in Redis): ended after this much idleness, and
    # this long after sign-in whatever the activity.
    session_idle_s: int = Field(default=2 * 3600, ge=60)
    session_absolute_s: int = Field(default=12 * 3600, ge=60)
    # Long-lived streams (the live feed, MCP's GET stream): at most this many per credential,
    # and this many per API process (the rest of uvicorn's slots stay free for /healthz, reads
    # and actions).
    api_streams_per_credential: int = Field(default=10, ge=1, le=10_000)
    api_streams: int = Field(default=150, ge=1, le=10_000)
    # A request body must arrive within this many seconds (a slow body is refused with 408).
    api_body_timeout_s: float = Field(default=10.0, gt=0, le=3600)
    # A request's head (request line and headers) must arrive within this many seconds of the
    # connection opening or the previous response (a slow head is closed with 408).
    api_head_timeout_s: float = Field(default=10.0, gt=0, le=3600)
    # Where the activation page links a trace (tracing on: docs/tracing.md), e.g.
    # "https://jaeger.example/trace/{trace_id}"; unset: the trace id is shown without a link.
    trace_url_template: str | None = None
    # Serve the interactive API docs (/docs, /redoc); the OpenAPI document itself is always
    # at /openapi.json.
    api_docs: bool = False
    # The conversation API (docs/conversation.md): turns one delegate's person may send per
    # minute (429 past it), and the longest message a turn may hold, in characters (413).
    chat_turns_per_minute: int = Field(default=30, ge=1)
    chat_max_text: int = Field(default=16_000, ge=1, le=100_000)

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        if not value.startswith(("postgresql://", "postgresql+psycopg://", "postgres://")):
            raise ValueError("must be a postgresql:// URL")
        return value

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        if not value.startswith(REDIS_SCHEMES):
            raise ValueError("must be a redis://, rediss:// or unix:// URL")
        return value

    @field_validator("broker_url")
    @classmethod
    def _broker_url(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        if not value.startswith((*REDIS_SCHEMES, *AMQP_SCHEMES)):
            raise ValueError("must be a redis://, rediss://, unix://, amqp:// or amqps:// URL")
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _trusted_proxies(cls, value: str) -> str:
        import ipaddress

        for part in value.split(","):
            if part.strip():
                try:
                    ipaddress.ip_network(part.strip(), strict=False)
                except ValueError:
                    raise ValueError(f"{part.strip()!r} is not an address or CIDR") from None
        return value

    @field_validator("trace_url_template")
    @classmethod
    def _trace_url_template(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        if "{trace_id}" not in value:
            raise ValueError("must hold {trace_id}, where the trace id goes")
        try:
            value.format(trace_id="0" * 32)
        except (KeyError, IndexError, ValueError):
            raise ValueError("may hold no placeholder but {trace_id}") from None
        return value

    @field_validator("notify_webhook_url")
    @classmethod
    def _webhook_url(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value

    @field_validator("twilio_base_url", "sms_webhook_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/") if value.count("/") <= 3 else value

    @model_validator(mode="after")
    def _notify_channels(self) -> Settings:
        if self.notify_smtp_host and not self.notify_smtp_to:
            raise ValueError("notify_smtp_to: required when notify_smtp_host is set")
        if self.notify_webhook_url and not self.notify_webhook_secret:
            raise ValueError("notify_webhook_secret: required when notify_webhook_url is set")
        return self

    @field_validator("delegate_timezone")
    @classmethod
    def _timezone(cls, value: str) -> str:
        import zoneinfo

        try:
            zoneinfo.ZoneInfo(value)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"unknown time zone {value!r} (use an IANA name such as Europe/Paris)"
            ) from None
        return value

    @model_validator(mode="after")
    def _limits(self) -> Settings:
        if self.task_soft_time_limit_s >= self.task_time_limit_s:
            raise ValueError(
                "INNER_PLANE_TASK_SOFT_TIME_LIMIT_S must be below INNER_PLANE_TASK_TIME_LIMIT_S"
            )
        if self.batch_max_age_ms < self.batch_quiet_ms:
            raise ValueError(
                "INNER_PLANE_BATCH_MAX_AGE_MS must be at least INNER_PLANE_BATCH_QUIET_MS"
            )
        explicit_budget = "openai_budget_s" in self.model_fields_set
        if explicit_budget and self.openai_budget_s >= self.task_soft_time_limit_s:
            raise ValueError(
                "INNER_PLANE_OPENAI_BUDGET_S must be below INNER_PLANE_TASK_SOFT_TIME_LIMIT_S"
            )
        if self.session_idle_s > self.session_absolute_s:
            raise ValueError(
                "INNER_PLANE_SESSION_IDLE_S must be at most INNER_PLANE_SESSION_ABSOLUTE_S"
            )
        if not self.agent:
            object.__setattr__(self, "agent", "openai" if self.openai_model else "dry-run")
        return self

    @property
    def effective_broker_url(self) -> str:
        url = self.broker_url or _kombu_redis_url(self.redis_url)
        if url is None:
            raise ConfigError(
                "no broker: set INNER_PLANE_BROKER_URL or INNER_PLANE_REDIS_URL "
                "(or run through `inner-plane`, which starts an embedded Redis)"
            )
        return url

    @property
    def model_budget_s(self) -> float:
        """The activation's model time budget, kept inside the task's soft time limit."""
        return min(self.openai_budget_s, self.task_soft_time_limit_s * 0.75)

    @property
    def visibility_timeout_s(self) -> int:
        # Longer than any task may run, so Redis never redelivers a message whose task still runs
        # (a Redis broker only: RabbitMQ redelivers on a closed channel, not on a timer).
        return self.task_time_limit_s * 2 + 60


def _kombu_redis_url(url: str | None) -> str | None:
    """A redis-py URL as kombu spells it: a unix socket is ``redis+socket://PATH`` (its database
    in ``virtual_host``); other URLs are the same."""
    if url is None or not url.startswith("unix://"):
        return url
    path, _, query = url.removeprefix("unix://").partition("?")
    params = dict(part.partition("=")[::2] for part in query.split("&") if part)
    db = params.get("db", "0")
    return f"redis+socket://{path}" + ("" if db == "0" else f"?virtual_host={db}")


def _describe(error: ValidationError) -> str:
    parts = []
    for item in error.errors():
        loc = item.get("loc") or ()
        if loc:
            name = ENV_PREFIX + str(loc[0]).upper()
            parts.append(f"{name}: {item['msg']}")
        else:
            parts.append(str(item["msg"]).removeprefix("Value error, "))
    return "invalid configuration: " + "; ".join(parts)


def build_settings(**overrides: object) -> Settings:
    """Read settings from the environment, with explicit overrides; raise ConfigError if invalid."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as error:
        raise ConfigError(_describe(error)) from None
    except SettingsError as error:
        # A mapping-valued variable that is not JSON: pydantic-settings names the field only.
        field = re.search(r'field "(\w+)"', str(error))
        name = f"{ENV_PREFIX}{field.group(1).upper()}" if field else "an INNER_PLANE_ variable"
        raise ConfigError(f"invalid configuration: {name}: not valid JSON") from None


@functools.cache
def load_settings() -> Settings:
    """The process-wide settings (cached: the environment is read once)."""
    return build_settings()
