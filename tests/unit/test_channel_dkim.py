"""A DKIM signature the plane verifies itself (dkimpy), with the key published in a DNS answer
the test gives: a signed mail names its signing domain; a changed body, another domain's key or
no signature names none. Pure: no network (the DNS lookup is the test's function)."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import dkim
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from inner_plane.channels import mail_parse
from inner_plane.channels.identity import mail_sender

KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
PRIVATE = KEY.private_bytes(
    serialization.Encoding.PEM,
    serialization.PrivateFormat.TraditionalOpenSSL,
    serialization.NoEncryption(),
)
PUBLIC = base64.b64encode(
    KEY.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
)
NOW = datetime.now(UTC)


def dns(name: bytes, timeout: int = 5) -> bytes | None:
    """The TXT record of s1._domainkey.example.org, and nothing else."""
    if name.rstrip(b".") == b"s1._domainkey.example.org":
        return b"v=DKIM1; k=rsa; p=" + PUBLIC
    return None


def mail(body: bytes = b"Lunch at noon?\r\n", sender: bytes = b"ada@example.org") -> bytes:
    return (
        b"From: Ada <" + sender + b">\r\nTo: d@example.net\r\nSubject: Lunch\r\n"
        b"Date: " + format_datetime(NOW).encode() + b"\r\nMessage-ID: <m1@example.org>\r\n"
        b"\r\n" + body
    )


def signed(raw: bytes, domain: bytes = b"example.org") -> bytes:
    signature = dkim.sign(
        raw, b"s1", domain, PRIVATE, include_headers=[b"from", b"subject", b"date", b"message-id"]
    )
    return bytes(signature) + raw


def test_a_signed_mail_names_its_domain_and_vouches_for_the_person() -> None:
    raw = signed(mail())
    assert mail_parse.dkim_domains(raw, dns) == ("example.org",)
    parsed = mail_parse.parse(raw)
    verdict = mail_sender(
        parsed.sender,
        ["ada@example.org"],
        require_authenticated=True,
        dkim_domains=mail_parse.dkim_domains(raw, dns),
        now=NOW,
        max_age=timedelta(days=7),
    )
    assert verdict.person and "DKIM" in verdict.reason


def test_a_changed_body_another_domains_key_or_no_signature_vouch_for_nobody() -> None:
    tampered = signed(mail()).replace(b"noon", b"midnight")
    assert mail_parse.dkim_domains(tampered, dns) == ()
    assert mail_parse.dkim_domains(signed(mail(), b"evil.test"), dns) == ()  # no key there
    assert mail_parse.dkim_domains(mail(), dns) == ()
    assert mail_parse.dkim_domains(b"DKIM-Signature: v=1; garbage\r\n\r\nx", dns) == ()
