"""A real Dovecot IMAP server (Debian's ``dovecot-imapd``, which ``.ci/run`` installs when
missing) started by a test with a config of its own: loopback, a free port, a passwd-file with
test users, maildirs under the test's directory. Mail is delivered by IMAP APPEND, as a mail
client or an MTA's delivery agent would put it there."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from imapclient import IMAPClient

from tests.support.smtp import free_port

DOVECOT = shutil.which("dovecot") or "/usr/sbin/dovecot"
PASSWORD = "imap-test-password"


def available() -> bool:
    return Path(DOVECOT).exists()


CONFIG = """\
protocols = imap
listen = 127.0.0.1
base_dir = {dir}/run
state_dir = {dir}/state
log_path = {dir}/dovecot.log
info_log_path = {dir}/dovecot.log
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain login
default_internal_user = dovecot
default_login_user = dovenull
mail_location = maildir:{dir}/mail/%u
first_valid_uid = 1
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%u {dir}/passwd
}}
userdb {{
  driver = static
  args = uid=nobody gid=nogroup home={dir}/home/%u
}}
service imap-login {{
  inet_listener imap {{
    address = 127.0.0.1
    port = {port}
  }}
  inet_listener imaps {{
    port = 0
  }}
}}
service anvil {{
  chroot =
}}
service imap-login {{
  chroot =
}}
"""


class Dovecot:
    """``with Dovecot(["ada"]) as imap:`` one server; ``imap.restart()`` kills and
    starts it again on the same port with the same mail."""

    def __init__(self, users: list[str], port: int | None = None) -> None:
        # Not under pytest's tmp_path: its parents are private to root.
        self.dir = Path(tempfile.mkdtemp(prefix="inner-plane-dovecot-"))
        self.users = users
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def _write(self) -> Path:
        # Dovecot's unprivileged processes (auth as dovecot, mail as nobody) must reach it.
        self.dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o755)
        for sub in ("run", "state", "mail", "home"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        # The mail processes run as nobody: they must write the maildirs.
        for sub in ("mail", "home"):
            os.chmod(self.dir / sub, 0o777)
        (self.dir / "passwd").write_text(
            "".join(f"{user}:{{PLAIN}}{PASSWORD}::::::\n" for user in self.users)
        )
        config = self.dir / "dovecot.conf"
        config.write_text(CONFIG.format(dir=self.dir, port=self.port))
        return config

    def start(self) -> None:
        config = self._write()
        self.process = subprocess.Popen(
            [DOVECOT, "-F", "-c", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                err = self.process.stderr.read().decode() if self.process.stderr else ""
                log = (
                    (self.dir / "dovecot.log").read_text()
                    if (self.dir / "dovecot.log").exists()
                    else ""
                )
                raise RuntimeError(f"dovecot exited: {err}\n{log}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as probe:
                    if probe.recv(100).startswith(b"* OK"):
                        return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("dovecot did not start")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, sig)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
        self.process = None

    def restart(self) -> None:
        self.stop(signal.SIGKILL)
        self.start()

    def __enter__(self) -> Dovecot:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def client(self, user: str) -> IMAPClient:
        client = IMAPClient("127.0.0.1", port=self.port, ssl=False, timeout=10)
        client.login(user, PASSWORD)
        return client

    def append(self, user: str, raw: bytes, folder: str = "INBOX") -> int:
        """Deliver a mail; its UID."""
        client = self.client(user)
        try:
            answer = client.append(folder, raw)
            # APPENDUID (UIDPLUS): b"[APPENDUID <validity> <uid>] ..."
            text = answer.decode() if isinstance(answer, bytes) else str(answer)
            if "APPENDUID" in text:
                return int(text.split("APPENDUID", 1)[1].split("]")[0].split()[1])
            client.select_folder(folder)
            return int(max(client.search(["ALL"])))
        finally:
            client.logout()

    def move(self, user: str, uid: int, folder: str) -> None:
        client = self.client(user)
        try:
            if not client.folder_exists(folder):
                client.create_folder(folder)
            client.select_folder("INBOX")
            client.add_flags([uid], [b"\\Flagged", b"\\Seen"])
            client.remove_flags([uid], [b"\\Seen"])
            client.copy([uid], folder)
        finally:
            client.logout()
