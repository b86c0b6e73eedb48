"""Person tokens (real PostgreSQL and Redis, in process): `inner-plane delegates token` prints
a token once and keeps only its scrypt hash; several per delegate, listed by label, revocable;
`authenticate_person` proves the one delegate it is scoped to, with processor authentication's
throttle, negative cache and equal-cost failures."""

from __future__ import annotations

import contextlib
import hashlib
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from inner_plane.cli import app
from inner_plane.runtime import Runtime
from inner_plane.sources import auth_throttle, credentials, person_auth, processors

cli = CliRunner()
DUMMY_SALT = credentials._unb64(credentials.DUMMY_HASH.split("$")[4])


@pytest.fixture
def scrypt_salts(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bytes]]:
    salts: list[bytes] = []
    real = hashlib.scrypt

    def counting(password: bytes, **kwargs: Any) -> bytes:
        salts.append(kwargs["salt"])
        return real(password, **kwargs)

    monkeypatch.setattr(credentials.hashlib, "scrypt", counting)
    monkeypatch.setattr(auth_throttle, "_clock", lambda: 1_800_000_010.0)
    credentials._verified.clear()
    yield salts
    credentials._verified.clear()


def _add(name: str) -> None:
    added = cli.invoke(app, ["delegates", "add", name, "--name", name.title()])
    assert added.exit_code == 0, added.output


def _token(name: str, label: str = "phone") -> str:
    made = cli.invoke(app, ["delegates", "token", name, "--label", label, "--json"])
    assert made.exit_code == 0, made.output
    token: str = json.loads(made.stdout)["token"]
    return token


def _refused(runtime: Runtime, token: str | None, client: str = "10.0.0.9") -> type[Exception]:
    with pytest.raises((person_auth.AuthError, person_auth.Throttled)) as caught:
        person_auth.authenticate_person(runtime, token, client)
    return caught.type


def test_token_printed_once_hashed_listed_and_revoked(runtime: Runtime) -> None:
    _add("alice")
    phone, laptop = _token("alice", "phone"), _token("alice", "laptop")
    assert phone.startswith("ipp.") and phone != laptop
    with runtime.engine.connect() as connection:
        stored = connection.execute(text("SELECT secret_hash FROM person_tokens")).scalars().all()
    assert len(stored) == 2 and all(h.startswith("scrypt$") for h in stored)
    assert not any(phone.split(".")[2] in h or laptop.split(".")[2] in h for h in stored)

    listed = cli.invoke(app, ["delegates", "tokens", "alice", "--json"])
    assert [t["label"] for t in json.loads(listed.stdout)] == ["laptop", "phone"]
    assert phone not in listed.stdout and "scrypt" not in listed.stdout

    principal = person_auth.authenticate_person(runtime, phone, "10.0.0.1")
    assert principal.delegate_id == "alice" and principal.label == "phone"
    assert person_auth.authenticate_person(runtime, laptop, "10.0.0.1").label == "laptop"

    revoked = cli.invoke(app, ["delegates", "revoke", "alice", "phone"])
    assert revoked.exit_code == 0, revoked.output
    # Verified (and remembered) a moment ago, yet refused on the next request.
    assert _refused(runtime, phone) is person_auth.AuthError
    assert person_auth.authenticate_person(runtime, laptop, "10.0.0.1").label == "laptop"
    again = cli.invoke(app, ["delegates", "revoke", "alice", "phone"])
    assert again.exit_code == 1 and "label:" in again.stderr


def test_token_commands_refuse_bad_input_and_store_nothing(runtime: Runtime) -> None:
    nobody = cli.invoke(app, ["delegates", "token", "bob"])
    assert nobody.exit_code == 1 and "delegate_id:" in nobody.stderr
    _add("bob")
    bad_label = cli.invoke(app, ["delegates", "token", "bob", "--label", "Bad Label"])
    assert bad_label.exit_code == 2 and "label:" in bad_label.stderr
    _token("bob", "phone")
    taken = cli.invoke(app, ["delegates", "token", "bob", "--label", "phone"])
    assert taken.exit_code == 2 and "label:" in taken.stderr
    with runtime.engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM person_tokens")).scalar() == 1


def test_a_token_names_its_own_delegate_only(runtime: Runtime) -> None:
    _add("alice")
    _add("bob")
    alice, bob = _token("alice"), _token("bob")
    assert person_auth.authenticate_person(runtime, alice, None).delegate_id == "alice"
    assert person_auth.authenticate_person(runtime, bob, None).delegate_id == "bob"
    # A token's id with another token's secret proves nothing.
    forged = ".".join([*alice.split(".")[:2], bob.split(".")[2]])
    assert _refused(runtime, forged) is person_auth.AuthError


def test_removing_the_person_removes_their_tokens(runtime: Runtime) -> None:
    _add("carol")
    token = _token("carol")
    person_auth.authenticate_person(runtime, token, None)
    assert cli.invoke(app, ["delegates", "remove", "carol"]).exit_code == 0
    assert _refused(runtime, token) is person_auth.AuthError


def test_processor_tokens_are_not_person_tokens(runtime: Runtime) -> None:
    _, processor_token = processors.add(runtime, "ci")
    assert _refused(runtime, processor_token) is person_auth.AuthError
    assert _refused(runtime, None) is person_auth.AuthError
    assert _refused(runtime, "") is person_auth.AuthError


def test_failures_cost_the_same_and_are_throttled_before_any_hash(
    runtime: Runtime, scrypt_salts: list[bytes]
) -> None:
    _add("dora")
    token = _token("dora")
    scrypt_salts.clear()
    unknown = f"ipp.{uuid.uuid4().hex}.whatever"
    wrong = ".".join([*token.split(".")[:2], "wrong"])
    assert _refused(runtime, unknown) is person_auth.AuthError
    assert _refused(runtime, wrong) is person_auth.AuthError
    assert _refused(runtime, "not-a-token") is person_auth.AuthError
    # One hash each: unknown and malformed against the dummy, the wrong secret against its row.
    assert len(scrypt_salts) == 3
    assert scrypt_salts[0] == DUMMY_SALT and scrypt_salts[2] == DUMMY_SALT
    assert scrypt_salts[1] != DUMMY_SALT

    # The same bad token again: refused from the negative cache, no hash.
    assert _refused(runtime, wrong) is person_auth.AuthError
    assert len(scrypt_salts) == 3

    # Past the address's failure limit: 429 before any lookup or hash.
    limit = runtime.settings.auth_failures_per_minute
    for n in range(limit):
        with contextlib.suppress(person_auth.AuthError, person_auth.Throttled):
            person_auth.authenticate_person(runtime, f"ipp.{uuid.uuid4().hex}.{n}", "10.0.0.9")
    hashed = len(scrypt_salts)
    assert _refused(runtime, f"ipp.{uuid.uuid4().hex}.late") is person_auth.Throttled
    assert len(scrypt_salts) == hashed
    # Another address is not throttled; the good token still passes there.
    assert person_auth.authenticate_person(runtime, token, "10.0.0.50").delegate_id == "dora"
