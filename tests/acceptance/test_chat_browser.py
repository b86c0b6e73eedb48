"""The person's chat page in a real Chromium (Debian's `chromium`, driven by Playwright; no
browser is downloaded), against real workers and the slow streaming stand-in of
test_chat_workers: sign in and send with the keyboard alone, the reply growing while it
streams, markup in a reply shown as text, a proactive message without reload, the history
after a reload, nothing overflowing at 390 px. Screenshots go to tests/artifacts/."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from inner_plane.publish import publish
from inner_plane.runtime import Runtime
from tests.acceptance.test_chat_workers import HOSTILE, PROACTIVE, REPLY, plane  # noqa: F401
from tests.support.responses_wire import ResponsesServer
from tests.support.stores import ROOT

pytestmark = pytest.mark.acceptance

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = ROOT / "tests" / "artifacts"

playwright_api = pytest.importorskip("playwright.sync_api")
if not Path(CHROMIUM).exists():  # .ci/run installs Debian's chromium when it is missing
    pytest.skip(f"no Chromium at {CHROMIUM}", allow_module_level=True)

# Every text the draft reply showed, recorded by the page's own DOM events (no polling).
RECORD_DRAFTS = """
() => {
  window.__drafts = [];
  new MutationObserver(() => {
    const draft = document.querySelector("li.draft .text");
    if (draft) { window.__drafts.push(draft.textContent); }
  }).observe(document.getElementById("messages"),
             { childList: true, subtree: true, characterData: true });
}
"""
OVERFLOW = "document.documentElement.scrollWidth - document.documentElement.clientWidth"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright_api.sync_playwright() as p:
        launched = p.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        yield launched
        launched.close()


def shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def assistant_texts(page: Any) -> list[str]:
    texts: list[str] = page.eval_on_selector_all(
        "li.message.assistant:not(.draft) .text", "nodes => nodes.map(n => n.textContent)"
    )
    return texts


def sign_in_with_keyboard(page: Any, token: str) -> None:
    """The keyboard alone: the token field takes the focus on its own (autofocus), Enter
    submits. Typing waits for that focus: Chromium applies autofocus a moment after load, and
    keys pressed before it are lost, as a person's would be."""
    page.wait_for_function("document.activeElement && document.activeElement.id === 'token'")
    page.keyboard.type(token)
    page.keyboard.press("Enter")


def send(page: Any, text: str) -> None:
    page.focus("#text")
    page.keyboard.type(text)
    page.keyboard.press("Enter")


def test_the_chat_page_in_chromium(
    runtime: Runtime,
    plane: tuple[ResponsesServer, str, dict[str, str]],  # noqa: F811
    browser: Any,
) -> None:
    _server, base, headers = plane
    token = headers["Authorization"].split(" ", 1)[1]
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.goto(f"{base}/chat")
    shot(page, "chat-sign-in-1280")
    sign_in_with_keyboard(page, token)
    page.wait_for_selector("#compose")
    page.wait_for_function("document.getElementById('status').textContent.length > 0")
    page.evaluate(RECORD_DRAFTS)

    send(page, "hello there")
    page.wait_for_function(
        "text => [...document.querySelectorAll('li.message.person .text')]"
        ".some(n => n.textContent === text)",
        arg="hello there",
    )
    page.wait_for_function(
        "text => [...document.querySelectorAll('li.message.assistant:not(.draft) .text')]"
        ".some(n => n.textContent === text)",
        arg=REPLY,
        timeout=90_000,
    )
    drafts: list[str] = page.evaluate("window.__drafts")
    grown = [d for d in drafts if 0 < len(d) < len(REPLY)]
    assert len(set(grown)) >= 3, drafts  # the reply grew on the page while it streamed
    assert all(REPLY.startswith(d) for d in grown)
    assert not page.query_selector("li.draft")  # the final message replaced the draft
    shot(page, "chat-answered-1280")

    # Markup in the model's reply is shown as text and never runs.
    send(page, "show me some markup")
    page.wait_for_function(
        "text => [...document.querySelectorAll('li.message.assistant:not(.draft) .text')]"
        ".some(n => n.textContent === text)",
        arg=HOSTILE,
        timeout=90_000,
    )
    assert page.evaluate("window.__xss") is None
    assert page.query_selector("#messages script") is None
    assert page.query_selector("#messages img") is None

    # A proactive message arrives on the idle page, without reload.
    publish(kind="task.completed", source="copilot", data={"task_id": "report-ready"})
    page.wait_for_selector("li.message.proactive", timeout=90_000)
    assert PROACTIVE in assistant_texts(page)
    page.wait_for_function("document.getElementById('status').dataset.state === 'idle'")
    shot(page, "chat-proactive-1280")

    # A reload keeps the history, in order.
    page.reload()
    page.wait_for_function(
        "n => document.querySelectorAll('li.message:not(.draft)').length >= n", arg=5
    )
    assert assistant_texts(page) == [REPLY, HOSTILE, PROACTIVE]
    assert not page.is_visible("#earlier")  # all of the history fits one page
    persons = page.eval_on_selector_all(
        "li.message.person .text", "nodes => nodes.map(n => n.textContent)"
    )
    assert persons == ["hello there", "show me some markup"]
    assert page.evaluate("window.__xss") is None

    # At 390 px nothing overflows sideways, and the compose box is still there.
    page.set_viewport_size({"width": 390, "height": 844})
    assert page.evaluate(OVERFLOW) == 0
    assert page.is_visible("#text") and page.is_visible("#send")
    shot(page, "chat-390")
    context.close()
