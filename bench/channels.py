"""Benchmark of the mail and SMS channels (issue 24), in one run on the same stores:

  (a) mail to turn: a mail from the person APPENDed to a real Dovecot until its user turn is in
      the journal, with the mailbox watched under IDLE (inner_plane.channels.watcher, as beat
      runs it); baseline: the same APPEND until a bare IMAP client in IDLE on another mailbox
      hears of it (what IDLE itself costs);
  (b) SMS webhook: a signed text from the person's number ``POST /v1/channels/sms/twilio``
      (throttle check, X-Twilio-Signature, number lookup, message row and turn, wake) one after
      another on a kept-alive connection to a uvicorn API process; baseline: a bare FastAPI
      route on the same uvicorn that inserts one row (bench/chat_baseline.py).

Prints medians and p99; the last line is one JSON object with ``mail_to_turn_p99_s`` (target
<= 2), ``mail_to_turn_vs_idle_p99``, ``sms_webhook_p99_ms`` and ``sms_webhook_vs_bare_p99``
(target <= 2).

    .venv/bin/python -m bench.channels [--quick]
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import format_datetime, make_msgid
from typing import Any
from urllib.parse import urlencode

import httpx
from sqlalchemy import text

from bench import harness
from bench.chat import bare_insert, serve
from bench.harness import QUICK, ratio, summary, verdict
from inner_plane.channels import mailbox
from inner_plane.channels.watcher import MailWatcher
from inner_plane.config import build_settings
from inner_plane.journal.channels.messages import message_uuid
from inner_plane.people import directory
from inner_plane.runtime import Runtime, build_runtime
from inner_plane.signals.kinds import KindRegistry
from tests.support.dovecot import PASSWORD, Dovecot
from tests.support.stores import truncate_all
from tests.support.twilio import ACCOUNT_SID, AUTH_TOKEN, PLANE_NUMBER, inbound, signed

MAILS = 30 if QUICK else 100
TEXTS = 300 if QUICK else 2_000
DELEGATE = "bench"
PERSON = "ada@example.org"
PHONE = "+4915112345678"
PUBLIC_URL = "https://plane.example.com/v1/channels/sms/twilio"


def a_mail(n: int) -> tuple[bytes, str]:
    mail = EmailMessage()
    mail["From"] = PERSON
    mail["To"] = "delegate@example.net"
    mail["Subject"] = f"bench {n}"
    mail["Date"] = format_datetime(datetime.now(UTC))
    mail["Message-ID"] = make_msgid(domain="example.org")
    mail.set_content(f"Mail number {n}.")
    return bytes(mail), str(mail["Message-ID"])


def mail_to_turn(runtime: Runtime, imap: Dovecot) -> list[float]:
    watcher = MailWatcher(runtime, refresh_s=1.0).start()
    try:
        deadline = time.monotonic() + 60
        while (box := mailbox.get(runtime, DELEGATE)) is None or not box.idle:
            if time.monotonic() > deadline:
                raise RuntimeError("the watcher never went into IDLE")
            time.sleep(0.05)
        times = []
        with runtime.engine.connect() as connection:
            for n in range(MAILS + 3):
                raw, mid = a_mail(n)
                turn = message_uuid(DELEGATE, "email", mid)
                imap.append("ada", raw)
                appended = time.perf_counter()
                while not connection.execute(
                    text("SELECT EXISTS (SELECT 1 FROM user_turns WHERE id = :t)"), {"t": turn}
                ).scalar():
                    connection.rollback()
                    time.sleep(0.002)
                    if time.perf_counter() - appended > 30:
                        raise RuntimeError(f"mail {n} never became a turn")
                connection.rollback()
                if n >= 3:  # warm-up
                    times.append(time.perf_counter() - appended)
        return times
    finally:
        watcher.stop()


def idle_baseline(imap: Dovecot) -> list[float]:
    """APPEND until an IDLE client on another mailbox hears EXISTS."""
    listener = imap.client("bob")
    listener.select_folder("INBOX")
    times: list[float] = []
    heard = threading.Event()
    stop = threading.Event()
    stamps: list[float] = []

    def listen() -> None:
        listener.idle()
        while not stop.is_set():
            for response in listener.idle_check(timeout=0.5):
                if isinstance(response, tuple) and len(response) > 1 and response[1] == b"EXISTS":
                    stamps.append(time.perf_counter())
                    heard.set()
        listener.idle_done()

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    time.sleep(0.3)
    for n in range(MAILS + 3):
        heard.clear()
        raw, _ = a_mail(n)
        imap.append("bob", raw)
        appended = time.perf_counter()
        if not heard.wait(30):
            raise RuntimeError("IDLE never announced the mail")
        if n >= 3:
            times.append(stamps[-1] - appended)
    stop.set()
    thread.join(5)
    listener.logout()
    return times


def sms_webhook(url: str) -> list[float]:
    times: list[float] = []
    with httpx.Client(base_url=url, timeout=30) as client:
        for n in range(TEXTS + 20):
            params = inbound(PHONE, f"text {n}")
            headers = {
                "Content-Type": "application/x-www-form-urlencoded",
                "X-Twilio-Signature": signed(PUBLIC_URL, params),
            }
            body = urlencode(params)
            started = time.perf_counter()
            answer = client.post("/v1/channels/sms/twilio", content=body, headers=headers)
            elapsed = (time.perf_counter() - started) * 1000
            assert answer.status_code == 200, answer.text
            if n >= 20:
                times.append(elapsed)
    return times


def main() -> None:
    with harness.stores("channels") as stores, Dovecot(["ada", "bob"]) as imap:
        truncate_all(stores.database_url)
        runtime = build_runtime(
            build_settings(
                database_url=stores.database_url,
                redis_url=stores.redis_url,
                data_dir=stores.data_dir,
            ),
            registry=KindRegistry(),
        )
        directory.add(runtime, DELEGATE, display_name="Bench", emails=[PERSON], phones=[PHONE])
        mailbox.set_mailbox(
            runtime,
            DELEGATE,
            address="delegate@example.net",
            host="127.0.0.1",
            port=imap.port,
            security="plain",
            username="ada",
            password=PASSWORD,
            require_authenticated=False,
        )
        baseline_idle = idle_baseline(imap)
        mail = mail_to_turn(runtime, imap)
        api, api_url = serve(
            stores,
            "inner_plane.asgi:create_app",
            INNER_PLANE_TWILIO_ACCOUNT_SID=ACCOUNT_SID,
            INNER_PLANE_TWILIO_AUTH_TOKEN=AUTH_TOKEN,
            INNER_PLANE_TWILIO_FROM_NUMBER=PLANE_NUMBER,
            INNER_PLANE_SMS_WEBHOOK_URL=PUBLIC_URL,
        )
        bare, bare_url = serve(stores, "bench.chat_baseline:create_app")
        try:
            texts = sms_webhook(api_url)
            baseline = bare_insert(bare_url)
        finally:
            for process in (api, bare):
                process.terminate()
                process.wait(20)
            runtime.engine.dispose()
    figures: dict[str, Any] = {
        "mail_to_turn_s": summary(mail, 4),
        "idle_notice_s": summary(baseline_idle, 4),
        "sms_webhook_ms": summary(texts),
        "bare_insert_ms": summary(baseline),
    }
    mail_p99 = figures["mail_to_turn_s"]["p99"]
    mail_ratio = ratio(mail_p99, figures["idle_notice_s"]["p99"])
    sms_ratio = ratio(figures["sms_webhook_ms"]["p99"], figures["bare_insert_ms"]["p99"])
    print(f"mail to turn    s  {figures['mail_to_turn_s']}")
    print(f"  p99 {verdict(mail_p99, 2.0, higher_is_better=False)}")
    print(f"IDLE notice     s  {figures['idle_notice_s']}  (ratio p99 {mail_ratio})")
    print(f"sms webhook     ms {figures['sms_webhook_ms']}")
    print(f"bare insert     ms {figures['bare_insert_ms']}")
    print(f"  ratio p99 {sms_ratio} {verdict(sms_ratio, 2.0, higher_is_better=False)}")
    harness.emit(
        {
            **figures,
            "mail_to_turn_p99_s": mail_p99,
            "mail_to_turn_vs_idle_p99": mail_ratio,
            "sms_webhook_p99_ms": figures["sms_webhook_ms"]["p99"],
            "sms_webhook_vs_bare_p99": sms_ratio,
        }
    )


if __name__ == "__main__":
    main()
