"""The ``mailboxes`` table: one IMAP mailbox per delegate, its credentials (the password is
stored like a processor's signing key: in the journal, never in a log line or a listing) and
its poll state, which ``status`` and ``/metrics`` show."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    Engine,
    Integer,
    Table,
    Text,
    func,
    select,
    text,
)
from sqlalchemy.dialects.postgresql import insert

from inner_plane.journal.database import reading
from inner_plane.journal.tables import METADATA

MAILBOXES = Table(
    "mailboxes",
    METADATA,
    Column("delegate_id", Text, primary_key=True),
    Column("address", Text, nullable=False),  # the delegate's own address (replies' From)
    Column("host", Text, nullable=False),
    Column("port", Integer, nullable=False),
    Column("security", Text, nullable=False, server_default=text("'tls'")),
    Column("username", Text, nullable=False),
    Column("password", Text, nullable=False),
    Column("folder", Text, nullable=False, server_default=text("'INBOX'")),
    # What a stranger's mail becomes: an untrusted ambient signal, or nothing (counted either way).
    Column("strangers", Text, nullable=False, server_default=text("'ambient'")),
    Column("require_authenticated", Boolean, nullable=False, server_default=text("true")),
    Column("uidvalidity", BigInteger),
    Column("last_uid", BigInteger, nullable=False, server_default=text("0")),
    Column("last_poll_at", DateTime(timezone=True)),
    Column("last_error", Text),
    Column("idle", Boolean, nullable=False, server_default=text("false")),
    Column("backlog", Integer, nullable=False, server_default=text("0")),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    CheckConstraint("security IN ('tls', 'starttls', 'plain')", name="security"),
    CheckConstraint("strangers IN ('ambient', 'drop')", name="strangers"),
)
_T = MAILBOXES
SECURITY = ("tls", "starttls", "plain")
STRANGERS = ("ambient", "drop")


@dataclass(frozen=True)
class Mailbox:
    delegate_id: str
    address: str
    host: str
    port: int
    security: str
    username: str
    password: str
    folder: str
    strangers: str
    require_authenticated: bool
    uidvalidity: int | None
    last_uid: int
    last_poll_at: datetime | None
    last_error: str | None
    idle: bool
    backlog: int
    created_at: datetime

    @property
    def name(self) -> str:
        """The mailbox as the dedup key names it: account, server and folder."""
        return f"{self.username}@{self.host}:{self.port}/{self.folder}"

    def __repr__(self) -> str:  # never the password, whoever prints it
        return f"Mailbox({self.delegate_id!r}, {self.name!r})"

    def public(self) -> dict[str, Any]:
        """For the CLI, ``status`` and the operator API: everything but the password."""
        return {
            "delegate_id": self.delegate_id,
            "address": self.address,
            "host": self.host,
            "port": self.port,
            "security": self.security,
            "username": self.username,
            "folder": self.folder,
            "strangers": self.strangers,
            "require_authenticated": self.require_authenticated,
            "last_poll_at": None if self.last_poll_at is None else self.last_poll_at.isoformat(),
            "last_error": self.last_error,
            "idle": self.idle,
            "backlog": self.backlog,
        }


def _mailbox(row: Any) -> Mailbox:
    return Mailbox(**{column.name: row._mapping[column.name] for column in _T.c})


class Mailboxes:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def put(self, delegate_id: str, values: dict[str, Any]) -> Mailbox:
        """Add or replace the delegate's mailbox (values validated by the caller); a changed
        mailbox starts its poll state afresh."""
        fresh = {"uidvalidity": None, "last_uid": 0, "last_error": None, "backlog": 0}
        statement = (
            insert(_T)
            .values(delegate_id=delegate_id, **values)
            .on_conflict_do_update(index_elements=["delegate_id"], set_={**values, **fresh})
            .returning(*_T.c)
        )
        with self.engine.begin() as connection:
            return _mailbox(connection.execute(statement).one())

    def get(self, delegate_id: str) -> Mailbox | None:
        with reading(self.engine) as connection:
            row = connection.execute(select(_T).where(_T.c.delegate_id == delegate_id)).first()
        return None if row is None else _mailbox(row)

    def all(self, limit: int = 10_000) -> list[Mailbox]:
        with reading(self.engine) as connection:
            rows = connection.execute(select(_T).order_by(_T.c.delegate_id).limit(limit))
            return [_mailbox(row) for row in rows]

    def remove(self, delegate_id: str) -> bool:
        with self.engine.begin() as connection:
            return bool(
                connection.execute(_T.delete().where(_T.c.delegate_id == delegate_id)).rowcount
            )

    def polled(
        self,
        delegate_id: str,
        *,
        uidvalidity: int | None,
        last_uid: int | None,
        backlog: int,
        error: str | None,
    ) -> None:
        """Record a poll: its time, its error (or none), the unseen mails left; the UID cursor
        only grows within one UIDVALIDITY (a new UIDVALIDITY starts it afresh)."""
        with self.engine.begin() as connection:
            connection.execute(
                text(
                    """
                    UPDATE mailboxes SET last_poll_at = now(), last_error = :error,
                           backlog = :backlog,
                           uidvalidity = COALESCE(CAST(:validity AS bigint), uidvalidity),
                           last_uid = CASE
                               WHEN CAST(:validity AS bigint) IS NULL
                                   THEN last_uid
                               WHEN uidvalidity IS DISTINCT FROM CAST(:validity AS bigint)
                                   THEN COALESCE(CAST(:last_uid AS bigint), 0)
                               ELSE GREATEST(last_uid, COALESCE(CAST(:last_uid AS bigint), 0))
                           END
                     WHERE delegate_id = :d
                    """
                ),
                {
                    "d": delegate_id,
                    "error": error,
                    "backlog": backlog,
                    "validity": uidvalidity,
                    "last_uid": last_uid,
                },
            )

    def idling(self, delegate_id: str, idle: bool) -> None:
        with self.engine.begin() as connection:
            connection.execute(_T.update().where(_T.c.delegate_id == delegate_id).values(idle=idle))
