"""The attention policy as data: one TOML document, validated, and the pure resolution of the
rule that applies to a (delegate, kind). No I/O.

A document holds global ``[defaults]`` (unset ones come from today's settings
``INNER_PLANE_BATCH_QUIET_MS``, ``..._BATCH_MAX_AGE_MS``, ``..._BATCH_LIMIT``,
``..._WAKE_BUDGET_PER_HOUR``, so an install that sets nothing behaves as before) and
``[[rules]]``, each for a kind pattern, a delegate, or both. For every field the most specific
matching rule that sets it wins, then less specific ones, then the defaults. Specificity: a rule
naming a delegate beats one that does not; then the kind pattern with more literal segments;
then an exact kind over a pattern. Two rules of equal specificity that could match the same
signal are refused, as is anything else that would make the outcome depend on rule order.

Kind patterns: dot-separated segments; ``*`` stands for one segment, or, as the last segment,
for one or more (``task.*``, ``external.*.failed``, ``*``).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cached_property
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from inner_plane.attention.quiet import QuietHours, quiet_span
from inner_plane.signals.model import IDENTIFIER_RE, Mode

# A policy is a few dozen rules; a megabyte is far above any real one and far below a size that
# costs a worker memory on every reload.
MAX_DOCUMENT_BYTES = 256 * 1024
MAX_RULES = 1_000
SEGMENT_RE = re.compile(r"[a-z][a-z0-9_-]*\Z")
WILDCARD = "*"
# Fields that hold for a whole delegate (its lane), not for one kind: refused on a kind rule.
DELEGATE_WIDE = ("wake_budget_per_hour", "daily_token_budget", "quiet_hours")
# Namespaces every install accepts even when no kind of theirs is registered: external
# processors publish ``external.<processor>.<event>`` without registering each kind.
OPEN_NAMESPACES = ("external",)


class PolicyError(ValueError):
    """A policy document was refused; ``problems`` are (field, reason) pairs."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{where}: {why}" for where, why in problems))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Defaults(_Strict):
    """Global values; each unset one is the setting of the same name (quiet hours: none)."""

    quiet_ms: int | None = Field(default=None, ge=0, le=86_400_000)
    max_age_ms: int | None = Field(default=None, ge=0, le=86_400_000)
    batch_limit: int | None = Field(default=None, ge=1, le=10_000)
    wake_budget_per_hour: int | None = Field(default=None, ge=1, le=1_000_000)
    # Tokens (input + output) a delegate may spend in a UTC day before its background wakes
    # wait for the next day (INNER_PLANE_DAILY_TOKEN_BUDGET; user turns are never held).
    daily_token_budget: int | None = Field(default=None, ge=1, le=10**12)
    # "HH:MM-HH:MM" in the delegate's person's time zone (UTC without a person), or "off":
    # background wakes wait for the end; interrupts and user turns are not held.
    quiet_hours: str | None = Field(default=None, max_length=40)

    @field_validator("quiet_hours")
    @classmethod
    def _quiet_hours(cls, value: str | None) -> str | None:
        if value is not None:
            quiet_span(value)  # raises ValueError with the reason
        return value


class Rule(Defaults):
    """An override for signals of ``kind`` (a pattern) and/or of ``delegate``."""

    name: str | None = Field(default=None, min_length=1, max_length=100)
    kind: str | None = Field(default=None, min_length=1, max_length=200)
    delegate: str | None = None
    mode: Mode | None = Field(default=None, strict=False)
    priority: int | None = Field(default=None, ge=0, le=100)

    @field_validator("kind")
    @classmethod
    def _pattern(cls, value: str | None) -> str | None:
        if value is not None:
            pattern_segments(value)
        return value

    @field_validator("delegate")
    @classmethod
    def _delegate(cls, value: str | None) -> str | None:
        if value is not None and IDENTIFIER_RE.fullmatch(value) is None:
            raise ValueError("a delegate id is 1-128 characters of A-Z a-z 0-9 . _ : -")
        return value

    @property
    def label(self) -> str:
        """How decisions name this rule."""
        if self.name:
            return self.name
        parts = [self.kind or WILDCARD] if self.kind or not self.delegate else []
        if self.delegate:
            parts.append(f"@{self.delegate}")
        return " ".join(parts)

    @property
    def specificity(self) -> tuple[int, int, int]:
        segments = pattern_segments(self.kind) if self.kind else [WILDCARD]
        literal = sum(1 for s in segments if s != WILDCARD)
        exact = int(WILDCARD not in segments)
        return (int(self.delegate is not None), literal, exact)


class PolicyDocument(_Strict):
    defaults: Defaults = Defaults()
    rules: list[Rule] = Field(default_factory=list, max_length=MAX_RULES)


def pattern_segments(pattern: str) -> list[str]:
    segments = pattern.split(".")
    for segment in segments:
        if segment != WILDCARD and SEGMENT_RE.fullmatch(segment) is None:
            raise ValueError(
                f"{pattern!r} is not a kind pattern: segments are lowercase names or '*'"
            )
    if pattern != WILDCARD and len(segments) < 2 and segments[0] != WILDCARD:
        raise ValueError(f"{pattern!r} is not a kind pattern: kinds are namespaced (a.b)")
    return segments


def matches(pattern: str, kind: str) -> bool:
    """Whether ``kind`` matches ``pattern`` (``*``: one segment; last ``*``: one or more)."""
    segments = pattern.split(".")
    parts = kind.split(".")
    if segments[-1] == WILDCARD:
        if len(parts) < len(segments):
            return False
        head = segments[:-1]
        return all(s in (WILDCARD, p) for s, p in zip(head, parts, strict=False))
    if len(parts) != len(segments):
        return False
    return all(s in (WILDCARD, p) for s, p in zip(segments, parts, strict=True))


def overlaps(a: str, b: str) -> bool:
    """Whether some kind matches both patterns."""
    sa, sb = a.split("."), b.split(".")
    open_a, open_b = sa[-1] == WILDCARD, sb[-1] == WILDCARD
    if not open_a and not open_b and len(sa) != len(sb):
        return False
    if not open_a and open_b and len(sa) < len(sb):
        return False
    if not open_b and open_a and len(sb) < len(sa):
        return False
    return all(WILDCARD in (x, y) or x == y for x, y in zip(sa, sb, strict=False))


def _pydantic_problems(error: ValidationError) -> list[tuple[str, str]]:
    problems = []
    for item in error.errors():
        where = ""
        for part in item["loc"]:
            where += f"[{part}]" if isinstance(part, int) else (f".{part}" if where else str(part))
        problems.append((where or "document", item["msg"]))
    return problems


def parse_document(
    source: str | bytes, known_kinds: Iterable[str], settings_defaults: SettingsDefaults
) -> PolicyDocument:
    """Validate a TOML policy document; raise :class:`PolicyError` naming each field and why.

    ``known_kinds``: the registered kinds; a rule's pattern must match one of them or stay
    inside a namespace one of them (or an open namespace such as ``external``) uses."""
    size = len(source.encode() if isinstance(source, str) else source)
    if size > MAX_DOCUMENT_BYTES:
        raise PolicyError(
            [("document", f"{size} bytes; a policy holds at most {MAX_DOCUMENT_BYTES}")]
        )
    try:
        text = source.decode() if isinstance(source, bytes) else source
        raw = tomllib.loads(text)
    except UnicodeDecodeError:
        raise PolicyError([("document", "not UTF-8 text")]) from None
    except tomllib.TOMLDecodeError as error:
        raise PolicyError([("document", f"not TOML: {error}")]) from None
    try:
        document = PolicyDocument.model_validate(raw)
    except ValidationError as error:
        raise PolicyError(_pydantic_problems(error)) from None
    problems = check_document(document, known_kinds, settings_defaults)
    if problems:
        raise PolicyError(problems)
    return document


def check_document(
    document: PolicyDocument, known_kinds: Iterable[str], settings_defaults: SettingsDefaults
) -> list[tuple[str, str]]:
    """The rules no field validator sees alone: known kinds, overlaps, quiet within max age,
    delegate-wide fields on kind rules."""
    kinds = sorted(set(known_kinds))
    namespaces = {k.split(".")[0] for k in kinds} | set(OPEN_NAMESPACES)
    problems: list[tuple[str, str]] = []
    base = filled_defaults(document.defaults, settings_defaults)
    if base.quiet_ms > base.max_age_ms:
        problems.append(
            (
                "defaults.quiet_ms",
                f"quiet period {base.quiet_ms} ms is above the maximum age {base.max_age_ms} ms",
            )
        )
    for index, rule in enumerate(document.rules):
        where = f"rules[{index}]"
        if rule.kind is None and rule.delegate is None:
            problems.append((where, "a rule names a kind pattern, a delegate, or both"))
            continue
        if rule.kind is not None:
            first = rule.kind.split(".")[0]
            known = any(matches(rule.kind, k) for k in kinds)
            if not known and first not in namespaces:
                problems.append(
                    (
                        f"{where}.kind",
                        f"{rule.kind!r} matches no registered kind and no known namespace",
                    )
                )
            for name in DELEGATE_WIDE:
                if getattr(rule, name) is not None:
                    problems.append(
                        (
                            f"{where}.{name}",
                            "applies to a whole delegate: set it in a rule without a kind",
                        )
                    )
        quiet = rule.quiet_ms if rule.quiet_ms is not None else base.quiet_ms
        max_age = rule.max_age_ms if rule.max_age_ms is not None else base.max_age_ms
        if quiet > max_age:
            field_name = "quiet_ms" if rule.quiet_ms is not None else "max_age_ms"
            problems.append(
                (
                    f"{where}.{field_name}",
                    f"quiet period {quiet} ms is above the maximum age {max_age} ms",
                )
            )
        for other_index in range(index):
            other = document.rules[other_index]
            if other.specificity != rule.specificity or other.delegate != rule.delegate:
                continue
            if overlaps(rule.kind or WILDCARD, other.kind or WILDCARD):
                problems.append(
                    (
                        f"{where}.kind",
                        f"overlaps rules[{other_index}] ({other.label!r}) with the same "
                        "specificity: which one applies would depend on their order",
                    )
                )
    return problems


@dataclass(frozen=True)
class SettingsDefaults:
    """Today's settings: the values of every field a document leaves unset."""

    quiet_ms: int
    max_age_ms: int
    batch_limit: int
    wake_budget_per_hour: int
    daily_token_budget: int | None = None
    quiet_hours: QuietHours | None = None

    @classmethod
    def of(cls, settings: Any) -> SettingsDefaults:
        return cls(
            quiet_ms=settings.batch_quiet_ms,
            max_age_ms=settings.batch_max_age_ms,
            batch_limit=settings.batch_limit,
            wake_budget_per_hour=settings.wake_budget_per_hour,
            daily_token_budget=getattr(settings, "daily_token_budget", None),
        )


def filled_defaults(defaults: Defaults, settings: SettingsDefaults) -> SettingsDefaults:
    return SettingsDefaults(
        quiet_ms=settings.quiet_ms if defaults.quiet_ms is None else defaults.quiet_ms,
        max_age_ms=settings.max_age_ms if defaults.max_age_ms is None else defaults.max_age_ms,
        batch_limit=settings.batch_limit if defaults.batch_limit is None else defaults.batch_limit,
        wake_budget_per_hour=settings.wake_budget_per_hour
        if defaults.wake_budget_per_hour is None
        else defaults.wake_budget_per_hour,
        daily_token_budget=settings.daily_token_budget
        if defaults.daily_token_budget is None
        else defaults.daily_token_budget,
        quiet_hours=settings.quiet_hours
        if defaults.quiet_hours is None
        else quiet_span(defaults.quiet_hours),
    )


@dataclass(frozen=True)
class KindTiming:
    """What applies to one (delegate, kind): the batching window, and the mode and priority a
    rule imposes (None: the kind's own). ``rule``: the label of the rule that set the window
    (None: the defaults)."""

    quiet_s: float
    max_age_s: float
    rule: str | None = None
    mode: Mode | None = None
    priority: int | None = None
    # At most this many signals of the kind in one activation (None: only the delegate's).
    batch_limit: int | None = None

    # The same as durations, made once per cached timing (the window decision adds them).
    @cached_property
    def quiet(self) -> timedelta:
        return timedelta(seconds=self.quiet_s)

    @cached_property
    def max_age(self) -> timedelta:
        return timedelta(seconds=self.max_age_s)


@dataclass(frozen=True)
class DelegateLimits:
    batch_limit: int
    wake_budget_per_hour: int
    rule: str | None = None
    daily_token_budget: int | None = None
    quiet_hours: QuietHours | None = None


@dataclass(frozen=True)
class AttentionPolicy:
    """A validated document with the settings filled in: the pure resolution every decision
    uses. ``version``: the journal's version in force (None: none applied, settings only)."""

    version: int | None
    document: PolicyDocument
    base: SettingsDefaults
    _ordered: tuple[Rule, ...] = field(default=(), repr=False)
    _kinds: dict[tuple[str, str], KindTiming] = field(default_factory=dict, repr=False)
    _delegates: dict[str, DelegateLimits] = field(default_factory=dict, repr=False)

    @classmethod
    def build(
        cls, document: PolicyDocument, settings: SettingsDefaults, version: int | None = None
    ) -> AttentionPolicy:
        ordered = tuple(
            sorted(document.rules, key=lambda r: r.specificity, reverse=True)  # stable
        )
        return cls(version, document, filled_defaults(document.defaults, settings), ordered)

    @property
    def uniform(self) -> bool:
        """No rule changes a batching window: every kind waits by the defaults."""
        return not any(r.quiet_ms is not None or r.max_age_ms is not None for r in self._ordered)

    @property
    def needs_zones(self) -> bool:
        """Some quiet hours apply (deciding reads the person's time zone)."""
        return self.base.quiet_hours is not None or any(
            quiet_span(r.quiet_hours) is not None for r in self._ordered if r.quiet_hours
        )

    @property
    def needs_tokens(self) -> bool:
        """Some daily token budget applies (deciding reads the day's tokens)."""
        return self.base.daily_token_budget is not None or any(
            r.daily_token_budget is not None for r in self._ordered
        )

    @property
    def limits_kinds(self) -> bool:
        """Some rule limits how many signals of a kind one activation takes."""
        return any(r.kind is not None and r.batch_limit is not None for r in self._ordered)

    @property
    def sets_modes(self) -> bool:
        """Some rule sets a mode or a priority (the publish path applies them)."""
        return any(r.mode is not None or r.priority is not None for r in self._ordered)

    def matching(self, delegate_id: str, kind: str | None) -> list[Rule]:
        """The rules that apply, most specific first (``kind`` None: delegate-wide rules)."""
        found = []
        for rule in self._ordered:
            if rule.delegate is not None and rule.delegate != delegate_id:
                continue
            if rule.kind is not None and (kind is None or not matches(rule.kind, kind)):
                continue
            found.append(rule)
        return found

    def for_kind(self, delegate_id: str, kind: str) -> KindTiming:
        key = (delegate_id, kind)
        cached = self._kinds.get(key)
        if cached is not None:
            return cached
        rules = self.matching(delegate_id, kind)
        quiet_rule = next((r for r in rules if r.quiet_ms is not None), None)
        age_rule = next((r for r in rules if r.max_age_ms is not None), None)
        mode = next((r.mode for r in rules if r.mode is not None), None)
        priority = next((r.priority for r in rules if r.priority is not None), None)
        # Only a rule naming a kind limits that kind (a delegate-wide limit is the batch's).
        kind_limit = next(
            (r.batch_limit for r in rules if r.kind is not None and r.batch_limit is not None),
            None,
        )
        window_rule = quiet_rule or age_rule
        timing = KindTiming(
            quiet_s=(self.base.quiet_ms if quiet_rule is None else _ms(quiet_rule.quiet_ms)) / 1000,
            max_age_s=(self.base.max_age_ms if age_rule is None else _ms(age_rule.max_age_ms))
            / 1000,
            rule=None if window_rule is None else window_rule.label,
            mode=mode,
            priority=priority,
            batch_limit=kind_limit,
        )
        if len(self._kinds) > 10_000:
            self._kinds.clear()
        self._kinds[key] = timing
        return timing

    def for_delegate(self, delegate_id: str) -> DelegateLimits:
        cached = self._delegates.get(delegate_id)
        if cached is not None:
            return cached
        rules = self.matching(delegate_id, None)
        limit_rule = next((r for r in rules if r.batch_limit is not None), None)
        budget_rule = next((r for r in rules if r.wake_budget_per_hour is not None), None)
        tokens_rule = next((r for r in rules if r.daily_token_budget is not None), None)
        quiet_rule = next((r for r in rules if r.quiet_hours is not None), None)
        named = limit_rule or budget_rule or tokens_rule or quiet_rule
        limits = DelegateLimits(
            batch_limit=self.base.batch_limit
            if limit_rule is None
            else _ms(limit_rule.batch_limit),
            wake_budget_per_hour=self.base.wake_budget_per_hour
            if budget_rule is None
            else _ms(budget_rule.wake_budget_per_hour),
            rule=None if named is None else named.label,
            daily_token_budget=self.base.daily_token_budget
            if tokens_rule is None
            else tokens_rule.daily_token_budget,
            quiet_hours=self.base.quiet_hours
            if quiet_rule is None or quiet_rule.quiet_hours is None
            else quiet_span(quiet_rule.quiet_hours),
        )
        if len(self._delegates) > 10_000:
            self._delegates.clear()
        self._delegates[delegate_id] = limits
        return limits

    def rule_labels(self) -> list[str]:
        return [r.label for r in self.document.rules]


def _ms(value: int | None) -> int:
    assert value is not None
    return value


def settings_policy(settings: SettingsDefaults) -> AttentionPolicy:
    """The policy of an install that applied none: today's settings."""
    return AttentionPolicy.build(PolicyDocument(), settings)


def render_document(policy: AttentionPolicy) -> str:
    """The policy as a TOML file ``apply`` and ``simulate`` accept, the defaults written out."""
    lines = [
        "# inner-plane attention policy"
        + ("" if policy.version is None else f" (version {policy.version})"),
        "[defaults]",
        f"quiet_ms = {policy.base.quiet_ms}",
        f"max_age_ms = {policy.base.max_age_ms}",
        f"batch_limit = {policy.base.batch_limit}",
        f"wake_budget_per_hour = {policy.base.wake_budget_per_hour}",
    ]
    if policy.base.daily_token_budget is not None:
        lines.append(f"daily_token_budget = {policy.base.daily_token_budget}")
    if policy.base.quiet_hours is not None:
        lines.append(f"quiet_hours = {_toml_value(str(policy.base.quiet_hours))}")
    for rule in policy.document.rules:
        lines += ["", "[[rules]]"]
        for name, value in rule.model_dump(exclude_none=True).items():
            lines.append(f"{name} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    text = str(getattr(value, "value", value))
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def document_from_json(data: Mapping[str, Any]) -> PolicyDocument:
    """A stored document (validated when applied) read back."""
    return PolicyDocument.model_validate(data, strict=False)
