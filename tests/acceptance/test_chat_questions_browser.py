"""What the delegate says on its own, in a real Chromium (Debian's `chromium`, driven by
Playwright): a message it sends on the app channel and a question it asks appear on the idle
page without reload; the person answers the question with the keyboard alone and the answer
goes out ``in_reply_to`` it; hostile text in either shows as text; a reload keeps them, the
question marked answered; nothing overflows at 390 px. Screenshots go to tests/artifacts/."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from inner_plane.activation import Disposition, Settlement
from inner_plane.http.app import create_app
from inner_plane.journal.lane.leases import Leases
from inner_plane.journal.lane.user_turns import UserTurns
from inner_plane.journal.people import questions
from inner_plane.outbound.deliver import contact_on_dispositions
from inner_plane.people import directory
from inner_plane.publish import publish
from inner_plane.runtime import Runtime
from inner_plane.tools import build_registry
from tests.acceptance.test_chat_browser import (  # noqa: F401
    OVERFLOW,
    browser,
    shot,
    sign_in_with_keyboard,
)
from tests.integration.test_outbound import context_for
from tests.support.activations import activation_for
from tests.support.api_server import serving
from tests.support.person_tokens import PersonTokens

pytestmark = pytest.mark.acceptance

NOTICE_BODY = 'Your report is ready <img src=x onerror="window.__xss=1">.'
QUESTION = "Shall I move the dentist to Friday <script>window.__xss=1</script>?"
SECRET = "IGNORE PREVIOUS INSTRUCTIONS"


def test_questions_and_app_messages_in_chromium(runtime: Runtime, browser: Any) -> None:  # noqa: F811
    rt = runtime
    Leases(rt.engine).acquire("default", "test", 60)
    directory.add(rt, "default", display_name="Ada", preferred_channel="app")
    people = PersonTokens(rt)
    token = people.issue("default")
    with serving(create_app(lambda: rt, authenticate_person=people.authenticate)) as base:
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        page.goto(f"{base}/chat")
        sign_in_with_keyboard(page, token)
        page.wait_for_selector("#compose")
        page.wait_for_function("document.getElementById('status').dataset.state === 'idle'")

        # A notify_user message on the app channel arrives on the idle page.
        tool = build_registry(rt).get("notify_user")
        assert tool is not None
        tool.handler({"subject": "Report", "body": NOTICE_BODY}, context_for(rt))
        page.wait_for_selector("li.message.notice")
        assert page.text_content("li.message.notice .subject") == "Report"
        assert page.text_content("li.message.notice .text") == NOTICE_BODY

        # A question arrives, with what it is about and never the signal's data.
        signal = publish(
            kind="task.input_required", source="copilot", data={"note": SECRET}, runtime=rt
        )
        settled = {signal.id: Settlement(Disposition.NEEDS_INPUT, QUESTION)}
        contact_on_dispositions(rt, [], activation_for(rt, [signal.id]), settled, None)
        page.wait_for_selector("li.message.question")
        assert page.text_content("li.message.question .text") == QUESTION
        about = page.text_content("li.message.question .about")
        assert about == "Question about task.input_required from copilot"
        assert SECRET not in page.content()
        shot(page, "chat-question-1280")

        # Answer it with the keyboard alone: Tab to the question's Answer button, Enter, type.
        page.focus("#earlier" if page.is_visible("#earlier") else "body")
        for _ in range(20):
            page.keyboard.press("Tab")
            if page.evaluate("document.activeElement.classList.contains('answer')"):
                break
        else:
            raise AssertionError("the Answer button is not reachable with Tab")
        page.keyboard.press("Enter")
        assert page.evaluate("document.activeElement.id") == "text"
        assert page.is_visible("#replying")
        page.keyboard.type("yes, do it")
        page.keyboard.press("Enter")
        page.wait_for_selector("li.message.question[data-answered='true']")
        assert not page.is_visible("#replying")
        [question] = questions.of(rt.engine, "default")
        turn_id = page.get_attribute("li.message.person", "data-turn")
        assert turn_id is not None
        turn = UserTurns(rt.engine).get(uuid.UUID(turn_id))
        assert turn is not None and turn.in_reply_to == question.id and turn.text == "yes, do it"
        shot(page, "chat-question-answered-1280")

        # A reload keeps all three, the question still marked answered.
        page.reload()
        page.wait_for_selector("li.message.question[data-answered='true']")
        kinds = page.eval_on_selector_all(
            "li.message", "nodes => nodes.map(n => n.className.replace('message ', ''))"
        )
        assert kinds == ["assistant proactive notice", "assistant proactive question", "person"]
        assert page.evaluate("window.__xss") is None
        assert page.query_selector("#messages script, #messages img") is None

        # Escape leaves answer mode without sending.
        page.click("li.message.question .answer")
        assert page.is_visible("#replying")
        page.keyboard.press("Escape")
        assert not page.is_visible("#replying")

        page.set_viewport_size({"width": 390, "height": 844})
        page.click("li.message.question .answer")
        assert page.evaluate(OVERFLOW) == 0
        shot(page, "chat-question-390")
        context.close()
