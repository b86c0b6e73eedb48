"""Authentication costs the caller, not the server (real PostgreSQL and Redis, in process):
an unknown name is hashed like a known one, failures are throttled per client address before
any hash, a refused token is refused again without a hash, and a token verified before passes
even while its address is throttled."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import pytest

from inner_plane.runtime import Runtime
from inner_plane.sources import auth, auth_throttle, credentials, processors

POST = ("POST", "/v1/signals")


class ScryptCalls:
    def __init__(self) -> None:
        self.salts: list[bytes] = []


@pytest.fixture
def scrypt_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[ScryptCalls]:
    calls = ScryptCalls()
    real = hashlib.scrypt

    def counting(password: bytes, **kwargs: Any) -> bytes:
        calls.salts.append(kwargs["salt"])
        return real(password, **kwargs)

    monkeypatch.setattr(credentials.hashlib, "scrypt", counting)
    # One throttle window for the whole test (a real minute boundary would reset the count).
    monkeypatch.setattr(auth_throttle, "_clock", lambda: 1_800_000_010.0)
    credentials._verified.clear()
    yield calls
    credentials._verified.clear()


def _authenticate(runtime: Runtime, token: str, client: str = "10.0.0.1") -> Any:
    headers = {"authorization": f"Bearer {token}"}
    return auth.authenticate(runtime, *POST, headers, b"", client=client)


def _refused(runtime: Runtime, token: str, client: str = "10.0.0.1") -> type[Exception]:
    with pytest.raises((auth.AuthError, auth.Throttled)) as caught:
        _authenticate(runtime, token, client)
    return caught.type


DUMMY_SALT = credentials._unb64(credentials.DUMMY_HASH.split("$")[4])


def test_an_unknown_name_is_hashed_like_a_known_one(
    runtime: Runtime, scrypt_calls: ScryptCalls
) -> None:
    _, token = processors.add(runtime, "ci")
    scrypt_calls.salts.clear()  # the registration's own hash
    assert _refused(runtime, "ipt.nobody.whatever") is auth.AuthError
    assert _refused(runtime, "ipt.ci.wrong") is auth.AuthError
    processors.revoke(runtime, "ci")
    assert _refused(runtime, token) is auth.AuthError
    # One hash each: the unknown and the revoked names against the dummy, the wrong token
    # against the processor's own hash.
    assert len(scrypt_calls.salts) == 3
    assert scrypt_calls.salts[0] == DUMMY_SALT and scrypt_calls.salts[2] == DUMMY_SALT
    assert scrypt_calls.salts[1] != DUMMY_SALT


def test_failures_are_throttled_per_address_before_any_hash(
    runtime: Runtime, scrypt_calls: ScryptCalls
) -> None:
    processors.add(runtime, "ci")
    scrypt_calls.salts.clear()
    limit = runtime.settings.auth_failures_per_minute
    for n in range(limit):
        assert _refused(runtime, f"ipt.ci.bad-{n}") is auth.AuthError
    assert len(scrypt_calls.salts) == limit
    for n in range(5):
        assert _refused(runtime, f"ipt.ci.more-{n}") is auth.Throttled
        assert _refused(runtime, "ipt.nobody.x") is auth.Throttled
    assert len(scrypt_calls.salts) == limit  # no hash for a throttled address
    # Another address is not throttled by this one's failures.
    assert _refused(runtime, "ipt.ci.other", client="10.0.0.2") is auth.AuthError


def test_a_token_verified_before_passes_while_its_address_is_throttled(
    runtime: Runtime, scrypt_calls: ScryptCalls
) -> None:
    _, token = processors.add(runtime, "ci")
    assert _authenticate(runtime, token).name == "ci"
    for n in range(runtime.settings.auth_failures_per_minute):
        _refused(runtime, f"ipt.ci.bad-{n}")
    assert _refused(runtime, "ipt.ci.again") is auth.Throttled
    hashes = len(scrypt_calls.salts)
    assert _authenticate(runtime, token).name == "ci"
    assert len(scrypt_calls.salts) == hashes
    # Rotation invalidates the remembered verification: the old token meets the throttle.
    processors.rotate(runtime, "ci")
    assert _refused(runtime, token) is auth.Throttled


def test_a_refused_token_is_refused_again_without_a_hash(
    runtime: Runtime, scrypt_calls: ScryptCalls
) -> None:
    processors.add(runtime, "ci")
    scrypt_calls.salts.clear()
    for _ in range(3):
        assert _refused(runtime, "ipt.ci.same-bad-token", client="10.0.0.3") is auth.AuthError
    assert len(scrypt_calls.salts) == 1


def test_hmac_failures_count_too(runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(auth_throttle, "_clock", lambda: 1_800_000_010.0)
    processors.add(runtime, "hooks", credential="hmac")
    headers = {
        "x-inner-plane-processor": "hooks",
        "x-inner-plane-timestamp": "0",
        "x-inner-plane-signature": "v1=00",
    }
    for _ in range(runtime.settings.auth_failures_per_minute):
        with pytest.raises(auth.AuthError):
            auth.authenticate(runtime, *POST, headers, b"", client="10.0.0.4")
    with pytest.raises(auth.Throttled):
        auth.authenticate(runtime, *POST, headers, b"", client="10.0.0.4")
