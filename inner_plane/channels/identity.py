"""Who wrote a mail or a text: the person, or a stranger. Pure decisions, no I/O.

The rules (docs/channels.md says them to operators):

- Only the outermost ``From`` counts, and it must hold exactly one address, one of the person's
  own (compared case-insensitively). Addresses in the body, in quoted or forwarded text and in
  attached mails never count: a stranger who forwards the person's mail is a stranger.
- A mail sent *for* the person by someone else (a ``Sender`` other than the From address: a
  mailing list, a "send as" service) or re-sent (``Resent-From``: a redirect or bounce-forward)
  is a stranger's: the one who sent it is not the person.
- With ``require_authenticated_sender``, the From domain must also be vouched for: by the
  receiving provider's ``Authentication-Results`` (``dkim=pass`` with ``header.d`` aligned to
  the From domain, or ``spf=pass`` with ``smtp.mailfrom`` aligned), or by a DKIM signature the
  plane verified itself (``dkimpy``) for an aligned domain. Only the topmost
  Authentication-Results header counts, and only when it carries the provider's own authserv-id
  (``MAIL_AUTHSERV_ID``): providers put theirs on top and remove look-alikes below (RFC 8601
  section 5), so a header the sender wrote themselves is never believed.
- A replayed mail: the same Message-ID is seen once (the journal's unique key). A genuine signed
  mail resent later under a new envelope keeps its ``Date``: one older than ``max_age`` (or far
  in the future) is a stranger's.
- A text message is the person's when its ``From`` number, in E.164, is one of exactly one
  person's phone numbers; unknown or shared by several people, it is nobody's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.policy import default as default_policy
from email.utils import parsedate_to_datetime

import authres

ALLOWED_FUTURE = timedelta(hours=1)


@dataclass(frozen=True)
class Sender:
    """The headers of a mail that say who sent it (each header's values, top first)."""

    from_: tuple[str, ...]
    sender: tuple[str, ...] = ()
    resent_from: tuple[str, ...] = ()
    authentication_results: tuple[str, ...] = ()
    date: str | None = None


@dataclass(frozen=True)
class Verdict:
    person: bool
    reason: str  # why, for the log and the operator (never holds header text)
    address: str | None = None  # the From address, lower-cased, when there is exactly one


def single_address(values: Sequence[str]) -> str | None:
    """The one address of the From header(s), lower-cased; None for none, several, or junk."""
    if len(values) != 1:
        return None
    try:
        header = default_policy.header_factory("From", values[0])
        found = [str(a.addr_spec) for a in header.addresses if a.username and a.domain]
        broken = bool(header.defects)
    except Exception:  # the standard parser raises assorted errors on junk
        return None
    if broken:
        return None
    if len(found) != 1 or found[0].count("@") != 1 or len(found[0]) > 254:
        return None
    return found[0].strip().lower()


def domain_of(address: str) -> str:
    return address.rpartition("@")[2].lower().rstrip(".")


def aligned(domain: str, from_domain: str) -> bool:
    """Relaxed alignment (DMARC): the same domain, or one a parent of the other."""
    domain, from_domain = domain.lower().rstrip("."), from_domain.lower().rstrip(".")
    if not domain or not from_domain:
        return False
    return (
        domain == from_domain
        or from_domain.endswith("." + domain)
        or domain.endswith("." + from_domain)
    )


def provider_vouches(results: Sequence[str], authserv_ids: Sequence[str], from_domain: str) -> str:
    """'' if the topmost Authentication-Results is the provider's and says dkim or spf passed
    for a domain aligned with the From domain; else why not."""
    if not authserv_ids:
        return "no provider authserv-id configured"
    if not results:
        return "no Authentication-Results"
    try:
        header = authres.AuthenticationResultsHeader.parse_value(results[0])
    except Exception:  # the parser raises its own and builtin errors on malformed text
        return "Authentication-Results unreadable"
    if str(header.authserv_id).lower() not in {a.lower() for a in authserv_ids}:
        return "topmost Authentication-Results is not the provider's"
    for result in header.results:
        method, outcome = str(result.method).lower(), str(result.result).lower()
        if outcome != "pass":
            continue
        for prop in result.properties:
            name = f"{prop.type}.{prop.name}".lower()
            value = str(prop.value or "")
            if method == "dkim" and name == "header.d" and aligned(value, from_domain):
                return ""
            if (
                method == "spf"
                and name == "smtp.mailfrom"
                and aligned(domain_of(value), from_domain)
            ):
                return ""
    return "no aligned dkim=pass or spf=pass"


def stale(date: str | None, now: datetime, max_age: timedelta) -> str:
    """'' if the Date is within ``max_age`` of now (and not far ahead); else why not."""
    if date is None:
        return "no Date"
    try:
        when = parsedate_to_datetime(date)
    except (TypeError, ValueError, IndexError, OverflowError):
        return "Date unreadable"
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    if when < now - max_age:
        return "Date too old (a replay?)"
    if when > now + ALLOWED_FUTURE:
        return "Date in the future"
    return ""


def mail_sender(
    sender: Sender,
    person_emails: Sequence[str],
    *,
    require_authenticated: bool,
    authserv_ids: Sequence[str] = (),
    dkim_domains: Sequence[str] = (),
    now: datetime,
    max_age: timedelta,
) -> Verdict:
    """Is this mail the person's? ``dkim_domains``: the d= domains whose signatures the plane
    verified itself."""
    address = single_address(sender.from_)
    if address is None:
        return Verdict(False, "not exactly one From address")
    own = {e.lower() for e in person_emails}
    if address not in own:
        return Verdict(False, "From is not one of the person's addresses", address)
    if sender.sender and single_address(sender.sender) != address:
        return Verdict(False, "sent on the person's behalf by another (Sender)", address)
    if sender.resent_from:
        return Verdict(False, "re-sent by another (Resent-From)", address)
    too_old = stale(sender.date, now, max_age)
    if too_old:
        return Verdict(False, too_old, address)
    if require_authenticated:
        from_domain = domain_of(address)
        if any(aligned(d, from_domain) for d in dkim_domains):
            return Verdict(True, "the person (DKIM verified)", address)
        why = provider_vouches(sender.authentication_results, authserv_ids, from_domain)
        if why:
            return Verdict(False, f"unauthenticated: {why}", address)
        return Verdict(True, "the person (provider authenticated)", address)
    return Verdict(True, "the person", address)


@dataclass(frozen=True)
class PhoneVerdict:
    delegate_id: str | None
    reason: str


def phone_owner(number: str | None, owners: Sequence[str]) -> PhoneVerdict:
    """Whose text this is: ``owners`` are the delegates whose person has the number (E.164)."""
    if not number:
        return PhoneVerdict(None, "no From number")
    if not owners:
        return PhoneVerdict(None, "unknown number")
    if len(set(owners)) > 1:
        return PhoneVerdict(None, "number shared by several people")
    return PhoneVerdict(owners[0], "the person")
