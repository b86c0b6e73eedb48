"""What the operator UI tells an operator, in a real Chromium (Debian's `chromium`, driven by
Playwright; never a downloaded browser), served by a real uvicorn server over real PostgreSQL and
Redis, with the journal written by the real lane in-process (the dry-run agent: no model).

Each test saves screenshots under tests/artifacts/ (`operator-*.png`)."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from inner_plane import operators
from inner_plane.activation import AgentResult, Disposition, Settlement, WorkingContext
from inner_plane.agent.dry_run import DryRunAgent
from inner_plane.agent.port import StepGuard
from inner_plane.http.app import create_app
from inner_plane.publish import publish
from inner_plane.runtime import Runtime
from tests.support.api_server import serving
from tests.support.lane_journal import run_lane
from tests.support.stores import ROOT
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = ROOT / "tests" / "artifacts"

playwright_api = pytest.importorskip("playwright.sync_api")
if not Path(CHROMIUM).exists():  # .ci/run installs Debian's chromium when it is missing
    pytest.skip(f"no Chromium at {CHROMIUM}", allow_module_level=True)


class ActsOnEverything:
    """An agent that acts on every rendered signal (a model would, with tools)."""

    name = "acting"

    def run(self, context: WorkingContext, guard: StepGuard) -> AgentResult:
        guard.safe_point()
        return AgentResult(
            settlements={
                i: Settlement(Disposition.ACTED, "handled") for i in context.rendered_signal_ids
            },
            agent=self.name,
        )


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright_api.sync_playwright() as p:
        launched = p.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        yield launched
        launched.close()


@pytest.fixture
def lane_rt(runtime: Runtime) -> Runtime:
    settings = runtime.settings.model_copy(
        update={"batch_quiet_ms": 0, "batch_max_age_ms": 0, "agent": "dry-run"}
    )
    return replace(runtime, settings=settings)


@pytest.fixture
def base(lane_rt: Runtime) -> Iterator[str]:
    # Open on loopback: no operator is configured.
    with serving(create_app(lambda: lane_rt, bind_host="127.0.0.1")) as url:
        yield url


def open_page(browser: Any, width: int = 1280) -> Any:
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    missing: list[str] = []
    page.on("response", lambda r: missing.append(r.url) if r.status == 404 else None)
    page.missing = missing
    return page


def shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"operator-{name}.png"), full_page=True)


def live_timeline(page: Any, base: str, delegate: str = "default") -> None:
    page.goto(f"{base}/delegates/{delegate}")
    page.wait_for_selector("#live-status[data-state=live]")


def test_outcome_words_and_the_dry_run_banner(lane_rt: Runtime, base: str, browser: Any) -> None:
    for n in range(2):
        publish(kind="task.completed", source="copilot", data={"n": n}, runtime=lane_rt)
    [dry] = run_lane(lane_rt, DryRunAgent())
    publish(kind="task.completed", source="copilot", data={"n": 9}, runtime=lane_rt)
    [acted] = run_lane(lane_rt, ActsOnEverything())

    page = open_page(browser)
    live_timeline(page, base)
    completed = page.locator('#timeline > li.entry[data-type="inner.activation.completed"]')
    summaries = [s.strip() for s in completed.locator("summary").all_inner_texts()]
    assert any("dismissed 2 (no model configured)" in s for s in summaries), summaries
    assert any("acted on 1 (handled)" in s for s in summaries), summaries
    banner = page.locator("#agent-banner")
    assert banner.is_visible() and "no model is configured" in banner.inner_text()
    shot(page, "timeline-outcome-banner-1280")

    page.goto(f"{base}/")
    assert page.locator("#agent-banner").is_visible()
    # Every time on the page has its date and zone, UTC on hover.
    stamp = page.locator('[data-col="last-activation"] time').first
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", stamp.inner_text())
    assert stamp.get_attribute("title").endswith(" UTC")
    captions = page.locator(".chart .explain").all_inner_texts()
    assert len(captions) == 3 and all(captions)
    ends = page.locator(".chart .ticks .last").all_inner_texts()
    assert len(set(ends)) == 1, ends  # the three charts end on the same minute
    shot(page, "dashboard-banner-1280")

    page.goto(f"{base}/activations/{dry}")
    assert page.locator("#outcome").inner_text() == "dismissed 2 (no model configured)"
    page.goto(f"{base}/activations/{acted}")
    assert page.locator("#outcome").inner_text() == "acted on 1 (handled)"
    assert page.missing == [], page.missing  # no 404, the favicon included


def test_an_ambient_arrival_is_shown_live_and_can_be_filtered_out(
    lane_rt: Runtime, base: str, browser: Any
) -> None:
    page = open_page(browser)
    live_timeline(page, base)
    ambient = publish(kind="memory.inserted", source="memory", runtime=lane_rt).id
    arrived = page.locator('#timeline > li.entry[data-type="signal.arrived"]')
    arrived.first.wait_for(timeout=30_000)  # live, without a reload
    assert arrived.count() == 1
    summary = arrived.first.locator("summary").inner_text()
    assert "Ambient signal arrived" in summary and "memory.inserted from memory" in summary
    arrived.first.locator("summary").click()
    assert str(ambient) in arrived.first.locator(".detail").inner_text()
    shot(page, "timeline-ambient-1280")

    page.locator('#timeline-filter input[value="arrivals"]').uncheck()
    assert not arrived.first.is_visible()
    shot(page, "timeline-ambient-filtered-1280")
    # A new arrival while its group is hidden stays hidden; ticking the box shows both.
    publish(kind="memory.inserted", source="memory", data={"n": 2}, runtime=lane_rt)
    wait_until(lambda: arrived.count() == 2, "the second arrival", 30)
    assert not arrived.nth(1).is_visible()
    page.locator('#timeline-filter input[value="arrivals"]').check()
    assert arrived.first.is_visible() and arrived.nth(1).is_visible()
    page.reload()
    page.wait_for_selector("#live-status[data-state=live]")
    assert page.locator('#timeline > li.entry[data-type="signal.arrived"]').count() == 2


def test_a_signal_found_by_search_and_opened_from_the_activation_page(
    lane_rt: Runtime, base: str, browser: Any
) -> None:
    signal_id = publish(
        kind="task.completed", source="copilot", data={"task": "T7", "note": "</pre><b>x</b>"},
        runtime=lane_rt,
    ).id  # fmt: skip
    [activation] = run_lane(lane_rt, DryRunAgent())
    page = open_page(browser)
    page.goto(f"{base}/activations/{activation}")
    page.locator(f'table.batch a[href="/signals/{signal_id}"]').first.click()
    page.wait_for_url(f"{base}/signals/{signal_id}")
    history = page.locator("ol.history").inner_text()
    for event in ("published", "claimed", "dismissed"):
        assert event in history, history
    assert "no model configured" in history and "by source copilot" in history
    assert page.locator(f'#taken-by a[href="/activations/{activation}"]').is_visible()
    payload = page.locator("pre#payload").inner_text()
    assert '"note": "</pre><b>x</b>"' in payload  # data, fenced and inert
    assert page.locator("b").count() == 0
    shot(page, "signal-page-1280")

    page.goto(f"{base}/signals")
    page.fill('#signal-search input[name="kind"]', "task.")
    page.fill('#signal-search input[name="source"]', "copilot")
    page.select_option('#signal-search select[name="state"]', "dismissed")
    page.fill('#signal-search input[name="delegate"]', "default")
    page.locator("#signal-search button[type=submit]").click()
    page.wait_for_url(re.compile(r".*/signals\?.*kind=task\..*"))
    result = page.locator(f'table.results a[href="/signals/{signal_id}"]')
    assert result.count() == 1
    shot(page, "signal-search-1280")
    result.click()
    page.wait_for_url(f"{base}/signals/{signal_id}")

    # By id, from the box in the header.
    page.goto(f"{base}/")
    page.fill("form.find input[name=q]", str(signal_id))
    page.press("form.find input[name=q]", "Enter")
    page.wait_for_url(f"{base}/signals/{signal_id}")
    # A bad time range is refused naming the field.
    page.goto(f"{base}/signals?since=yesterday")
    assert "since: not a date and time" in page.locator("main").inner_text()


def test_tables_become_cards_at_390_px_with_every_column_reachable(
    lane_rt: Runtime, base: str, browser: Any
) -> None:
    for n in range(2):
        publish(kind="task.completed", source="copilot", data={"n": n}, runtime=lane_rt)
    [activation] = run_lane(lane_rt, DryRunAgent())
    page = open_page(browser, 390)
    for name, path, table in (
        ("dashboard", "/", "table.overview"),
        ("activation", f"/activations/{activation}", "table.dispositions"),
        ("activation-batch", f"/activations/{activation}", "main > .scroll > table.batch"),
    ):
        page.goto(f"{base}{path}")
        page.wait_for_load_state("networkidle")
        headers = page.locator(f"{table} thead th").all_inner_texts()
        assert headers and not page.locator(f"{table} thead").is_visible()
        cells = page.evaluate(
            """sel => [...document.querySelectorAll(sel + ' tbody tr:not(.payload)')].map(tr =>
                 [...tr.children].map(td => {
                   const box = td.getBoundingClientRect();
                   return [getComputedStyle(td, '::before').content.replace(/"/g, ''),
                           box.left, box.right, box.height];
                 }))""",
            table,
        )
        assert cells, name
        for row in cells:
            labels = [label for label, *_ in row]
            assert [h.lower() for h in headers] == labels, (name, labels)
            for label, left, right, height in row:
                assert left >= 0 and right <= 390 and height > 0, (name, label, left, right)
        overflow = page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 1, f"{name} overflows by {overflow} px"
        shot(page, f"{name}-cards-390")


def test_a_quarantined_signal_shows_in_the_timeline_with_its_reason_once(
    lane_rt: Runtime, base: str, browser: Any
) -> None:
    odd = publish(kind="task.completed", source="copilot", runtime=lane_rt).id
    with lane_rt.engine.begin() as connection:
        connection.execute(
            text("UPDATE signals SET source = :s WHERE id = :id"), {"s": "bad\u2028src", "id": odd}
        )
    assert run_lane(lane_rt, DryRunAgent()) == []
    reason = lane_rt.signals.get(odd).last_error.removeprefix("quarantined: ")

    page = open_page(browser)
    live_timeline(page, base)
    entry = page.locator('#timeline > li.entry[data-type="signal.quarantined"]')
    assert entry.count() == 1
    shown = page.locator("#timeline").inner_text()
    assert shown.count(reason) == 1, shown
    assert shown.count("quarantined: ") == 0  # the prefix is never doubled, nor repeated
    entry.locator("summary").click()
    assert entry.locator(f'a[href="/signals/{odd}"]').is_visible()
    shot(page, "timeline-quarantined-1280")

    # Acting needs an operator (reading on loopback does not): sign in as one.
    _operator, token = operators.add(lane_rt, "dana")
    page.goto(f"{base}/login?next=/dead-letters")
    page.fill("input[name=token]", token)
    page.click("form.login button[type=submit]")
    page.wait_for_url(f"{base}/dead-letters")
    row = page.locator(f'li.dead-signal[data-signal="{odd}"]')
    assert "Quarantined after 1 of 5 attempts" in row.inner_text()
    assert "used every attempt" not in row.inner_text().lower()
    row.locator("button[data-action=dismiss-ask]").click()
    form = row.locator("form.confirm")
    assert form.is_visible()
    form.locator("button[data-action=dismiss]").click()
    assert "give a reason" in row.locator(".action-result").inner_text()
    assert lane_rt.signals.get(odd).state.value == "dead"  # nothing happened yet
    form.locator("input[name=reason]").fill("bad row from the import of 2 Dec")
    form.locator("button[data-action=dismiss]").click()
    row.locator('.action-result[data-ok="true"]').wait_for()
    assert row.locator(".action-result").inner_text() == "dismissed by dana"
    shot(page, "dead-letters-dismissed-1280")
    stored = lane_rt.signals.get(odd)
    assert stored.state.value == "dismissed"
    assert stored.disposition_reason == "bad row from the import of 2 Dec"


def test_every_page_shows_the_persons_zone_and_turn_and_timer_ids_open_their_pages(
    lane_rt: Runtime, base: str, browser: Any
) -> None:
    from inner_plane.lane.user_turns import user_turn
    from inner_plane.people import directory
    from inner_plane.timers.api import add_timer

    directory.add(lane_rt, "default", display_name="Ada", time_zone="Asia/Tokyo")
    signal = publish(kind="task.completed", source="copilot", data={"n": 1}, runtime=lane_rt)
    turn = user_turn("default", "what happened overnight?", "sms", runtime=lane_rt)
    [ran] = run_lane(lane_rt, DryRunAgent())
    timer = add_timer(
        {"name": "standup", "purpose": "the morning standup", "every_s": 3600}, runtime=lane_rt
    )

    def zoned(locator: Any) -> None:
        """A time in Tokyo's zone (JST), with the UTC moment on hover."""
        assert locator.count() > 0
        first = locator.first
        assert first.inner_text().endswith("JST"), first.inner_text()
        assert first.get_attribute("title").endswith("UTC")

    page = open_page(browser)
    page.goto(f"{base}/")
    zoned(page.locator('[data-col="last-activation"] time'))
    # The next due timer is named and opens its page, zoned as well.
    page.locator(f'a[href="/timers/{timer.id}"]').first.click()
    page.wait_for_selector("#timer-next")
    zoned(page.locator("#timer-next time"))
    assert "the morning standup" in page.locator("#timer-purpose").inner_text()
    assert "None" not in page.locator(".facts").inner_text()
    shot(page, "timer-page-1280")

    page.goto(f"{base}/activations/{ran}")
    zoned(page.locator(".facts time"))
    page.locator(f'a[href="/turns/{turn}"]').first.click()
    page.wait_for_selector("#turn-text")
    assert page.locator("#turn-text").inner_text() == "what happened overnight?"
    zoned(page.locator(".facts time"))
    assert page.locator(f'#turn-activations a[href="/activations/{ran}"]').count() == 1
    assert page.locator(f'#turn-activations a[href="/signals/{signal.id}"]').count() == 1
    shot(page, "turn-page-1280")

    page.goto(f"{base}/signals/{signal.id}")
    zoned(page.locator(".facts time"))
    page.goto(f"{base}/signals?delegate=default")
    zoned(page.locator("table time"))
    # The timeline's user entry links its turn.
    live_timeline(page, base)
    assert page.locator(f'#timeline a[href="/turns/{turn}"]').count() >= 1
    assert not [u for u in page.missing if "favicon" not in u], page.missing
