"""The operator UI in a real Chromium (Debian's `chromium` package, driven by Playwright; no
browser is ever downloaded), under `inner-plane up` with its real workers. Signals and user
turns come from other processes (the CLI). Screenshots of every page, at 1,280 and 390 px, are
saved under tests/artifacts/ on every run."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from inner_plane.services.embedded import free_port
from tests.support.processes import ChildProcess
from tests.support.stores import ROOT
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = ROOT / "tests" / "artifacts"
HOSTILE = '<script>window.__xss=1</script><img src=x onerror="window.__xss=1">'
FRAGILE = "test.fragile"

playwright_api = pytest.importorskip("playwright.sync_api")
if not Path(CHROMIUM).exists():  # .ci/run installs Debian's chromium when it is missing
    pytest.skip(f"no Chromium at {CHROMIUM}", allow_module_level=True)


class Plane:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.data_dir = root / "plane"
        self.fail_flag = root / "fail"
        self.fail_flag.write_text("fail while this exists\n")
        kinds = root / "kinds.toml"
        kinds.write_text(f'[kinds."{FRAGILE}"]\nmode = "wake"\nmax_attempts = 1\n')
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("INNER_PLANE_")}
        self.env.update(
            INNER_PLANE_DATA_DIR=str(self.data_dir),
            INNER_PLANE_API_PORT=str(self.port),
            INNER_PLANE_FLOWER_PORT=str(free_port()),
            INNER_PLANE_AGENT="scripted",
            INNER_PLANE_AGENT_SCRIPT=json.dumps(
                {"reply": "noted", "fail_kinds": [FRAGILE], "fail_while": str(self.fail_flag)}
            ),
            INNER_PLANE_KINDS_FILE=str(kinds),
            INNER_PLANE_BATCH_QUIET_MS="100",
            INNER_PLANE_BATCH_MAX_AGE_MS="300",
            PYTHONUNBUFFERED="1",
        )
        self.up = ChildProcess("up", [sys.executable, "-m", "inner_plane", "up"], self.env, root)
        self.token = ""

    def start(self) -> None:
        self.up.start()
        # `up` says ready once every worker answered a ping and the API and Flower answered.
        self.up.wait_for("; press Ctrl-C to stop", timeout=240)
        assert f"inner-plane: operator UI and API: {self.base}/" in self.up.output()
        wait_until(self._ready, "the workers", 60)
        wait_until(self._healthy, "the API", 60)
        added = json.loads(self.cli("operators", "add", "tester", "--json"))
        self.token = added["token"]

    def _ready(self) -> bool:
        return "inner-plane: ready in " in self.up.output()

    def _healthy(self) -> bool:
        try:
            return httpx.get(f"{self.base}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def cli(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "inner_plane", *args],
            env=self.env, cwd=ROOT, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done.stdout

    def api(self, path: str, **params: Any) -> Any:
        headers = {"Authorization": f"Bearer {self.token}"}
        return httpx.get(f"{self.base}{path}", params=params, headers=headers, timeout=10).json()

    def signal_state(self, signal_id: str) -> str:
        return str(self.api(f"/v1/signals/{signal_id}/detail")["state"])

    def stop(self) -> None:
        if self.up.process is not None and self.up.process.poll() is None:
            os.kill(self.up.pid, signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.up.process.wait(60)
        self.up.kill()
        # Whatever happened, nothing started for this data dir outlives the tests.
        marker = f"INNER_PLANE_DATA_DIR={self.data_dir}\0".encode()
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and int(entry.name) != os.getpid():
                with contextlib.suppress(OSError):
                    if marker in (entry / "environ").read_bytes() or str(self.data_dir) in (
                        entry / "cmdline"
                    ).read_bytes().decode(errors="replace"):
                        os.kill(int(entry.name), signal.SIGKILL)


@pytest.fixture(scope="module")
def plane() -> Iterator[Plane]:
    # Under the worktree, not the shared /tmp/pytest-of-*: the embedded PostgreSQL runs as
    # its own user and must reach its data directory whatever other pytest runs do to theirs.
    parent = ROOT / ".inner-plane-test-ui"
    parent.mkdir(exist_ok=True)
    root = Path(tempfile.mkdtemp(dir=parent))
    started = Plane(root)
    try:
        started.start()
        yield started
    finally:
        started.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright_api.sync_playwright() as p:
        launched = p.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        yield launched
        launched.close()


def signed_in(browser: Any, plane: Plane, width: int = 1280) -> Any:
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    page.goto(f"{plane.base}/login?next=/")
    page.fill("input[name=token]", plane.token)
    page.click("form.login button[type=submit]")
    page.wait_for_url(f"{plane.base}/")
    return page


def shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def sequence(page: Any) -> list[tuple[str, str, str]]:
    return [
        tuple(item)
        for item in page.eval_on_selector_all(
            "#timeline > li.entry",
            "els => els.map(e => [e.dataset.seq, e.dataset.type,"
            " e.querySelector('summary').textContent.replace(/\\s+/g, ' ').trim()])",
        )
    ]


def test_a_wake_from_another_process_appears_live_and_reads_the_same_after_reload(
    plane: Plane, browser: Any
) -> None:
    page = signed_in(browser, plane)
    page.goto(f"{plane.base}/delegates/default")
    page.wait_for_selector("#live-status[data-state=live]")
    before = len(sequence(page))

    published = json.loads(
        plane.cli(
            "publish",
            "--kind",
            "task.completed",
            "--source",
            "copilot",
            "--data",
            json.dumps({"note": HOSTILE}),
            "--wait",
            "--json",
        )
    )
    completed = page.locator('#timeline > li.entry[data-type="inner.activation.completed"]')
    completed.first.wait_for(timeout=60_000)  # arrived without a reload
    live = sequence(page)
    assert len(live) > before
    assert [t for _s, t, _x in live].count("inner.activation.started") == 1

    page.reload()
    page.wait_for_selector("#live-status[data-state=live]")
    assert sequence(page) == live

    # Expanding the activation entry shows the claimed batch and the envelope.
    entry = completed.first
    entry.locator("summary").click()
    assert entry.locator("text=Claimed batch").is_visible()
    assert entry.locator("text=Inner-context envelope").is_visible()
    assert published["id"] in entry.locator("table.batch").inner_text()
    # The hostile payload is text on the page and never ran.
    shown = entry.locator("table.batch").inner_text()
    assert "<script>window.__xss=1</script>" in shown and "<img src=x onerror=" in shown
    assert page.evaluate("window.__xss") is None
    assert page.locator("img").count() == 0
    shot(page, "timeline-expanded-1280")


def test_a_user_turn_shows_its_inner_context_never_as_a_user_message(
    plane: Plane, browser: Any
) -> None:
    page = signed_in(browser, plane)
    page.goto(f"{plane.base}/delegates/default")
    page.wait_for_selector("#live-status[data-state=live]")
    plane.cli(
        "publish", "--kind", "external.notes.saved", "--source", "notes", "--mode",
        "next-turn", "--data", json.dumps({"note": "buy oat milk"}), "--wait",
    )  # fmt: skip
    plane.cli("say", "what is new?", "--wait")
    attached = page.locator('#timeline > li.entry[data-type="inner.context.attached"]')
    attached.first.wait_for(timeout=60_000)
    users = page.locator("#timeline > li.cat-user")
    assert users.last.locator("summary").inner_text().endswith("what is new?")
    for text in users.all_inner_texts():
        assert "buy oat milk" not in text and "external.notes.saved" not in text
    assert page.locator('#timeline > li.cat-user[data-type="inner.context.attached"]').count() == 0
    attached.last.locator("summary").click()
    assert "external.notes.saved" in attached.last.locator("table.batch").inner_text()
    assert "buy oat milk" in attached.last.locator("table.batch").inner_text()
    page.locator('#timeline > li.entry[data-type="assistant.message"]').last.wait_for()
    shot(page, "timeline-user-turn-1280")


def test_a_dead_signal_retried_from_the_ui_is_then_delivered(plane: Plane, browser: Any) -> None:
    published = json.loads(
        plane.cli("publish", "--kind", FRAGILE, "--source", "tests", "--wait", "--json")
    )
    signal_id = published["id"]
    wait_until(lambda: plane.signal_state(signal_id) == "dead", "the signal to go dead", 60)
    plane.fail_flag.unlink()  # the agent stops failing it

    page = signed_in(browser, plane)
    page.goto(f"{plane.base}/dead-letters")
    row = page.locator(f'li.dead-signal[data-signal="{signal_id}"]')
    row.wait_for()
    row.locator("summary").click()
    shot(page, "dead-letters-with-signal-1280")
    row.locator("button[data-action=retry]").click()
    page.locator(f'.action-result[data-for="{signal_id}"]').filter(
        has_text="retried by tester"
    ).wait_for()
    shot(page, "dead-letters-retried-1280")
    wait_until(lambda: plane.signal_state(signal_id) == "delivered", "the retried delivery", 60)
    events = plane.api(f"/v1/signals/{signal_id}/detail")["events"]
    assert {"event": "retried", "actor": "tester"}.items() <= next(
        e for e in events if e["event"] == "retried"
    ).items()


@pytest.mark.parametrize("width", [1280, 390])
def test_every_page_works_at_desktop_and_phone_widths(
    plane: Plane, browser: Any, width: int
) -> None:
    page = signed_in(browser, plane, width)
    activation = plane.api("/v1/delegates/default/activations")["items"][0]["id"]
    pages = {
        "dashboard": "/",
        "timeline": "/delegates/default",
        "activation": f"/activations/{activation}",
        "dead-letters": "/dead-letters",
    }
    for name, path in pages.items():
        page.goto(f"{plane.base}{path}")
        page.wait_for_load_state("networkidle") if name != "timeline" else page.wait_for_selector(
            "#live-status[data-state=live]"
        )
        assert page.locator("h1").first.is_visible(), name
        overflow = page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 1, f"{name} at {width} px overflows by {overflow} px"
        shot(page, f"{name}-{width}")
    page.context.clear_cookies()
    page.goto(f"{plane.base}/login")
    assert page.locator("input[name=token]").is_visible()
    shot(page, f"login-{width}")
