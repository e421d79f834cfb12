"""The web console in a real headless Chromium (Debian's `chromium` + `chromium-driver`),
against the API as `cronledger dev` serves it (`local_gateway.serve_api`), with the real scheduler.

Invariant: the page loads with no console error and asks nothing of any other origin; a
channel's timeline shows each occurrence in its status's colour, misfire summaries as such,
and the DST days of the coming month; a channel with an open alert is flagged and its panel
lists its events; an event's console link opens its panel; retry on a failed occurrence makes
it run again, and its panel follows the row to its end; a misfire summary stays in view however
many runs follow it; the strip's axis ticks fall between the runs they separate; search,
filters and sort narrow 200 channels; at 1280 and 800 px the strip stays in view beside (or
above) the panel; an ended one-time channel reads "ended", a draft offers "Activate"; the
page draws every channel with 10,000 occurrences in the ledger (how fast is a benchmark's
figure: `python -m tests.bench console`).

Without the browser these tests are skipped, saying why (`.ci/run` installs it).
`CRONLEDGER_SCREENSHOT=docs/console.png` keeps the screenshot the run makes there.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from cronledger import claim, reconcile
from cronledger.api import create_app, handle_event
from cronledger.ledger import FAILED, SKIPPED_MISFIRE, Ledger, NewOccurrence, paging
from cronledger.local_gateway import serve_api
from cronledger.targets import target_ref
from tests.api.helpers import FAIL_TARGET, OK_TARGET, SETTINGS, Scheduler
from tests.browser.chromium import (
    BUSY_CHANNELS,
    BUSY_ROWS,
    CHROMEDRIVER,
    CHROMIUM,
    MISSING,
    open_console,
    seed_busy_ledger,
    start_chromium,
)

pytestmark = [
    pytest.mark.xdist_group(name="browser"),
    pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER), reason=MISSING),
]
COLOURS = {"completed": "rgb(47, 158, 94)", "failed": "rgb(215, 68, 62)"}


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    driver = start_chromium(tmp_path_factory.mktemp("chromium"))
    yield driver
    driver.quit()


@dataclass
class Console:
    url: str
    ledger: Ledger
    scheduler: Scheduler
    driver: Any

    def open(self, timeout: float = 10) -> int:
        """Load the page until it has drawn; how long that took, in milliseconds."""
        return open_console(self.driver, self.url, timeout)

    def wait(self, until: Callable[[Any], Any], timeout: float = 10) -> Any:
        from selenium.webdriver.support.ui import WebDriverWait

        return WebDriverWait(self.driver, timeout, poll_frequency=0.05).until(until)

    def click(self, selector: str) -> None:
        """Click what `selector` finds, again if a refresh redrew it meanwhile."""
        from selenium.common.exceptions import StaleElementReferenceException

        def clicked(driver: Any) -> bool:
            try:
                driver.find_element("css selector", selector).click()
            except StaleElementReferenceException:
                return False
            return True

        self.wait(clicked)

    def cells(self, channel: str) -> list[dict[str, str]]:
        """The channel's timeline as the browser draws it: status, id, colour, label."""
        return list(
            self.driver.execute_script(
                """
                const strip = document.querySelector(`.timeline[data-channel="${arguments[0]}"]`);
                return strip ? [...strip.querySelectorAll('.cell')].map((c) => ({
                  status: c.dataset.status, id: c.dataset.id, text: c.textContent,
                  colour: getComputedStyle(c).backgroundColor,
                  image: getComputedStyle(c).backgroundImage })) : [];
                """,
                channel,
            )
        )

    def channel(self, name: str, target: dict[str, Any], **config: Any) -> str:
        # Failures are final at once (no automatic retry): retrying is the operator's here.
        transport = {"schedule": "0 15 2 * * *", "retry": {"max_attempts": 1}, **config}
        return self.ledger.channels.create_channel(
            name, transport, target, 5000, "active"
        ).channel_id


@pytest.fixture
def console(ledger: Ledger, browser: Any) -> Iterator[Console]:
    app = create_app(ledger, SETTINGS)
    server = serve_api(lambda event, context: handle_event(app, event, context), "127.0.0.1", 0)
    try:
        yield Console(f"http://127.0.0.1:{server.server_port}", ledger, Scheduler(ledger), browser)
    finally:
        server.shutdown()
        server.server_close()


def test_the_page_loads_with_no_console_error_and_no_request_elsewhere(console: Console) -> None:
    console.channel("nightly", OK_TARGET, timezone="Europe/London")

    console.open()
    console.driver.find_element("css selector", ".timeline .now")  # drawn
    console.wait(lambda d: "reachable" in d.find_element("id", "health").text)

    errors = [e for e in console.driver.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
    assert errors == []
    requested = [
        json.loads(entry["message"])["message"]["params"]["request"]["url"]
        for entry in console.driver.get_log("performance")
        if '"Network.requestWillBeSent"' in entry["message"]
    ]
    assert any(url.endswith("/console/console.js") for url in requested)
    assert any("/api/v1/admin/cron/occurrences?channel_id=" in url for url in requested)
    # The browser's own pages (chrome://…) are not requests; anything on the network is.
    network = [u for u in requested if u.startswith(("http:", "https:", "ws:", "wss:"))]
    elsewhere = [u for u in network if not u.startswith(f"{console.url}/")]
    assert elsewhere == []


def test_a_timeline_shows_completed_failed_and_misfire_rows_in_their_colours(
    console: Console,
) -> None:
    # Given a channel whose runs succeed and one whose runs fail, each run three times,
    # and a misfire summary
    good = console.channel("good", OK_TARGET)
    console.channel("bad", FAIL_TARGET)
    for name in ("good", "bad"):
        for days in (3, 2, 1):
            at = datetime.now(UTC).replace(microsecond=0) - timedelta(days=days)
            channel = console.ledger.channels.get_channel_by_name(name)
            console.ledger.occurrences.insert_occurrence(
                NewOccurrence.of(channel, at, None, trigger="backfill")
            )
    console.scheduler.run_due()
    missed = datetime.now(UTC).replace(microsecond=0) - timedelta(days=4)
    console.ledger.occurrences.insert_occurrence(
        NewOccurrence.of(
            console.ledger.channels.get_channel(good),
            missed,
            None,
            status=SKIPPED_MISFIRE,
            error_message="skipped 86399 missed occurrence(s) between 2026-01-01T00:00:00Z and "
            '2026-01-02T00:00:00Z (misfire_policy "latest")',
        )
    )

    # When the page is drawn
    console.open()

    # Then each cell has its status's colour, the misfire summary reads as one
    good_cells, bad_cells = console.cells("good"), console.cells("bad")
    assert [c["status"] for c in good_cells] == ["skipped_misfire", *["completed"] * 3]
    assert {c["colour"] for c in good_cells[1:]} == {COLOURS["completed"]}
    assert good_cells[0]["text"] == "86399 missed"
    assert "repeating-linear-gradient" in good_cells[0]["image"]
    assert [c["status"] for c in bad_cells] == ["failed"] * 3
    assert {c["colour"] for c in bad_cells} == {COLOURS["failed"]}


def test_the_dst_days_of_the_coming_month_are_marked_as_the_tz_database_says(
    console: Console,
) -> None:
    zones = ["Europe/London", "America/Santiago", "Australia/Lord_Howe", "America/New_York"]
    for index, zone in enumerate(zones):
        console.channel(f"zone-{index}", OK_TARGET, timezone=zone)

    console.open()

    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    for index, zone in enumerate(zones):
        expected = [
            (today + timedelta(days=i)).date().isoformat()
            for i in range(31)
            if _offset(zone, today + timedelta(days=i))
            != _offset(zone, today + timedelta(days=i + 1))
        ]
        marked = console.driver.execute_script(
            "return [...document.querySelectorAll("
            "`.timeline[data-channel='${arguments[0]}'] .day.dst`)].map((d) => d.dataset.dst)",
            f"zone-{index}",
        )
        assert marked == expected, zone


def test_the_coming_month_marks_the_days_each_channel_fires_on(console: Console) -> None:
    # Given a channel that fires on Mondays at 09:00 UTC, and one that fires every minute
    console.channel("mondays", OK_TARGET, schedule="0 0 9 * * MON")
    console.channel("minutely", OK_TARGET, schedule="0 * * * * *")

    # When the page is drawn
    console.open()
    marked = """return [...document.querySelectorAll(
                  `.timeline[data-channel='${arguments[0]}'] .day`)].map((d) => d.className)"""
    fires = (
        "return [...document.querySelectorAll(`.timeline[data-channel='${arguments[0]}'] "
        ".day.fire:not(.likely)`)].map((d) => d.dataset.fire)"
    )
    console.wait(lambda d: d.execute_script(fires, "mondays"))

    # Then the Mondays of the next 31 days are marked, and only they
    now = datetime.now(UTC)
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    mondays = [
        day.date().isoformat()
        for day in (today + timedelta(days=i) for i in range(31))
        if day.weekday() == 0 and day.replace(hour=9) > now
    ]
    assert console.driver.execute_script(fires, "mondays") == mondays
    # …and every day for the one firing every minute (past its hundredth instant: "likely")
    console.wait(lambda d: all(" fire" in c for c in d.execute_script(marked, "minutely")))
    assert len(console.driver.execute_script(marked, "minutely")) == 31


def _offset(zone: str, at: datetime) -> timedelta | None:
    return at.astimezone(ZoneInfo(zone)).utcoffset()


def test_retry_on_a_failed_occurrence_makes_it_run_again(console: Console) -> None:
    # Given an occurrence that failed its first attempt (its target succeeds on a retry)
    console.channel("flaky", {"type": "python", "callable": "tests.api.jobs:fail_first"})
    channel = console.ledger.channels.get_channel_by_name("flaky")
    at = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
    console.ledger.occurrences.insert_occurrence(
        NewOccurrence.of(channel, at, None, trigger="backfill")
    )
    console.scheduler.run_due()
    (failed,) = console.ledger.occurrences.list_occurrences().data
    assert (failed.status, failed.attempt) == (FAILED, 1)

    # When its cell is opened and Retry clicked, and the scheduler runs what is due
    console.open()
    console.click(f'.cell[data-id="{failed.id}"]')
    console.wait(lambda d: d.find_element("id", "retry").is_enabled())
    console.click("#retry")
    console.wait(lambda d: console.ledger.occurrences.get_occurrence(failed.id).status == "pending")
    assert console.scheduler.run_due() == 1

    # Then the same row ran again, as its second attempt, and the page shows it completed
    again = console.ledger.occurrences.get_occurrence(failed.id)
    assert (again.status, again.attempt) == ("completed", 2)
    console.wait(
        lambda d: [c["status"] for c in console.cells("flaky")] == ["completed"], timeout=15
    )


def test_trigger_and_pause_buttons_act_on_the_channel(console: Console) -> None:
    console.channel("nightly", OK_TARGET)
    console.open()

    row = '#channels tr[data-channel="nightly"]'
    console.click(f"{row} button.primary")
    console.wait(lambda d: console.ledger.occurrences.list_occurrences().total == 1)
    console.click(f"{row} button.act:not(.primary)")
    console.wait(
        lambda d: console.ledger.channels.get_channel_by_name("nightly").status == "paused"
    )

    (manual,) = console.ledger.occurrences.list_occurrences().data
    assert manual.trigger == "manual"


def test_cancel_on_a_pending_occurrence_and_resume_on_a_paused_channel(console: Console) -> None:
    # Given a channel with a run waiting (triggered, not yet claimed), then paused
    channel_id = console.channel("nightly", OK_TARGET)
    channel = console.ledger.channels.get_channel(channel_id)
    at = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
    waiting = NewOccurrence.of(channel, at, None, trigger="manual")
    console.ledger.occurrences.insert_occurrence(waiting)
    console.ledger.channels.set_channel_status(channel_id, "paused")

    # When its cell is opened and Cancel clicked, then the channel's Resume
    console.open()
    console.click(f'.cell[data-id="{waiting.id}"]')
    console.wait(lambda d: d.find_element("id", "cancel").is_enabled())
    console.click("#cancel")
    console.wait(
        lambda d: console.ledger.occurrences.get_occurrence(waiting.id).status == "cancelled"
    )
    status = "return document.querySelector('#panel dl .badge')?.textContent"
    console.wait(lambda d: d.execute_script(status) == "cancelled")  # the panel too
    console.click('#channels tr[data-channel="nightly"] button.act:not(.primary)')

    # Then the row is cancelled (its panel says so), the channel active again, and the page
    # shows both
    console.wait(lambda d: console.ledger.channels.get_channel(channel_id).status == "active")
    console.wait(lambda d: [c["status"] for c in console.cells("nightly")] == ["cancelled"])
    badge = """return document.querySelector('#channels tr[data-channel="nightly"] .badge')
               .textContent"""  # read in one step: a refresh may redraw the row at any time
    console.wait(lambda d: d.execute_script(badge) == "active")


def test_a_channels_panel_previews_its_next_fires_in_utc_local_and_due_time(
    console: Console,
) -> None:
    console.channel(
        "london", OK_TARGET, schedule="0 30 1 * * *", timezone="Europe/London", jitter_secs=600
    )

    console.open()
    console.click('#channels tr[data-channel="london"] .name')
    rows = console.wait(
        lambda d: d.find_elements("css selector", "#panel .preview tr")[1:] or False
    )

    expected = console.ledger.channels.get_channel_by_name("london")
    cells = [[td.text for td in row.find_elements("css selector", "td")] for row in rows]
    assert len(cells) == 10
    for utc, local, due in cells:
        at = datetime.fromisoformat(utc.replace("Z", "+00:00"))
        assert datetime.fromisoformat(local) == at  # the same instant, in London's wall time
        assert local[11:19] == "01:30:00"
        # …and when its row falls due, within the jitter after it
        assert at <= datetime.fromisoformat(due.replace("Z", "+00:00")) < at + timedelta(minutes=10)
    assert expected.name in console.driver.find_element("id", "panel").text


#: Where a cell is drawn, and whether it is what the browser shows at its centre (not hidden
#: under a sticky neighbour, nor scrolled out of its strip).
IN_VIEW = """
const cell = arguments[0], past = cell.closest('.timeline');
const box = cell.getBoundingClientRect(), strip = past.getBoundingClientRect();
const top = document.elementFromPoint(box.left + box.width / 2, box.top + box.height / 2);
return { left: box.left, right: box.right, width: box.width, stripLeft: strip.left,
         stripRight: strip.right, onTop: top === cell || cell.contains(top),
         classes: [...cell.classList], text: cell.textContent };
"""


def _every_5_s(console: Console, name: str, outage_ago: timedelta, newer: int) -> None:
    """A channel firing every 5 s: a misfire summary for a 2-minute outage `outage_ago`, then
    `newer` completed runs 5 s apart up to now, seeded straight into the ledger."""
    channel = console.ledger.channels.get_channel(
        console.channel(name, OK_TARGET, schedule="*/5 * * * * *")
    )
    now = datetime.now(UTC).replace(microsecond=0)
    now -= timedelta(seconds=now.second % 5)
    console.ledger.occurrences.insert_occurrence(
        NewOccurrence.of(
            channel,
            now - outage_ago,
            None,
            status=SKIPPED_MISFIRE,
            error_message='skipped 24 missed occurrence(s) (misfire_policy "latest")',
        )
    )
    console.ledger.occurrences.insert_occurrences(
        NewOccurrence.of(channel, now - timedelta(seconds=5 * i), None, status="completed")
        for i in range(newer)
    )


def test_a_5_s_channels_misfire_summary_stays_in_view_after_an_hour_of_newer_runs(
    console: Console,
) -> None:
    # Given a 5 s channel whose 2-minute outage was an hour ago (720 runs since), and one
    # whose outage was 100 runs ago
    _every_5_s(console, "hour-ago", timedelta(minutes=62), newer=720)
    _every_5_s(console, "minutes-ago", timedelta(seconds=5 * 100 + 2), newer=300)

    # When the page is drawn, and the second strip paged back once (120 runs read: the
    # summary among them, scrolled past the strip's left edge)
    console.driver.set_window_size(1500, 760)
    console.open()
    console.click('.timeline[data-channel="minutes-ago"] button.older')
    console.wait(lambda d: len(console.cells("minutes-ago")) == 120)

    # Then each summary is drawn inside its strip, on top, and marked as held there: the
    # hour-old one pinned before the strip, the other stuck to its edge
    for name, mark in (("hour-ago", "pinned"), ("minutes-ago", "clipped")):
        selector = f'.timeline[data-channel="{name}"] .cell.skipped_misfire'
        summary = console.driver.find_element("css selector", selector)
        shown = console.driver.execute_script(IN_VIEW, summary)
        assert shown["text"] == "24 missed", name
        assert shown["width"] > 30, name
        assert shown["stripLeft"] <= shown["left"] < shown["right"] <= shown["stripRight"], name
        assert shown["onTop"], name
        assert mark in shown["classes"], name
    # …and the hour-old one's 60 newer runs drawn after it, the rest a click away
    statuses = [c["status"] for c in console.cells("hour-ago")]
    assert statuses == ["skipped_misfire", *["completed"] * 60]
    older = console.driver.find_element(
        "css selector", '.timeline[data-channel="hour-ago"] button.older'
    )
    assert older.text == "\u2039 661"  # "older": 721 runs, 60 drawn


def test_the_strips_time_axis_ticks_fall_between_the_runs_they_separate(
    console: Console,
) -> None:
    # Given a 5 s channel with 60 runs
    _every_5_s(console, "five", timedelta(hours=2), newer=60)

    # When the page is drawn
    console.driver.set_window_size(1500, 760)
    console.open()

    # Then the strip has ticks every 30 s, each between the runs before and after it
    ticks = console.driver.execute_script(
        """return [...document.querySelectorAll('.timeline[data-channel="five"] .tick')]
           .map((t) => [t.previousElementSibling.dataset.at, t.dataset.at,
                        t.nextElementSibling.dataset.at, t.textContent])"""
    )
    assert len(ticks) >= 6
    for before, at, after, label in ticks:
        tick = datetime.fromisoformat(at.replace("Z", "+00:00"))
        assert _at(before) < tick <= _at(after)
        assert tick.second % 30 == 0 and label == tick.strftime("%H:%M:%S")


def _at(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


ROWS_SHOWN = """return [...document.querySelectorAll('#channels tbody tr.channel')]
                .map((r) => r.dataset.channel)"""


def test_the_table_holds_every_channel_when_the_api_answers_a_page_at_a_time(
    console: Console, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given eleven channels, and an API that answers at most four rows a page
    names = [f"paged-{i:02d}" for i in range(11)]
    for name in names:
        console.channel(name, OK_TARGET)
    monkeypatch.setattr(paging, "MAX_PAGE_SIZE", 4)

    # When the console loads
    console.open()

    # Then it followed each list's `next` to its end: every channel is drawn, with its status
    assert console.driver.execute_script(ROWS_SHOWN) == names
    assert console.driver.find_element("id", "shown").text == "11 channels"
    status_rows = console.driver.execute_script("return state.status.size")
    assert status_rows == 11


def test_search_and_filters_narrow_a_table_of_two_hundred_channels(console: Console) -> None:
    # Given 200 channels: every tenth paused, four drafts, three whose latest run failed
    names = [f"job-{i:03d}" for i in range(200)]
    paused, drafts, failing = names[::10], ["job-001", "job-051", "job-101", "job-151"], []
    for name in names:
        status = "paused" if name in paused else "draft" if name in drafts else "active"
        console.ledger.channels.create_channel(
            name, {"schedule": "0 15 2 * * *"}, OK_TARGET, 5000, status
        )
    for name in ("job-007", "job-077", "job-177"):
        channel = console.ledger.channels.get_channel_by_name(name)
        at = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
        console.ledger.occurrences.insert_occurrence(
            NewOccurrence.of(channel, at, None, status=FAILED)
        )
        failing.append(name)
    console.driver.set_window_size(1500, 760)
    console.open(timeout=60)
    assert console.driver.execute_script(ROWS_SHOWN) == names

    def shown(expected: list[str]) -> None:
        console.wait(lambda d: d.execute_script(ROWS_SHOWN) == expected)
        count = console.driver.find_element("id", "shown").text
        assert count == f"{len(expected)} of 200 channels"

    # When a name is searched for, then each filter chosen, then a sort
    search = console.driver.find_element("id", "search")
    search.send_keys("07")
    shown([n for n in names if "07" in n])
    search.clear()
    search.send_keys("JOB-19")  # case does not matter
    shown([n for n in names if n.startswith("job-19")])
    search.clear()
    console.driver.execute_script("arguments[0].dispatchEvent(new Event('input'))", search)

    from selenium.webdriver.support.ui import Select

    choose = Select(console.driver.find_element("id", "filter"))
    choose.select_by_value("paused")
    shown(paused)
    choose.select_by_value("draft")
    shown(drafts)
    choose.select_by_value("failing")
    shown(failing)
    search.send_keys("77")
    shown(["job-077", "job-177"])  # search and filter together

    # Then failing first puts the three on top of all 200
    search.clear()
    console.driver.execute_script("arguments[0].dispatchEvent(new Event('input'))", search)
    choose.select_by_value("")
    Select(console.driver.find_element("id", "sort")).select_by_value("failing")
    console.wait(lambda d: d.execute_script(ROWS_SHOWN)[:3] == failing)
    assert sorted(console.driver.execute_script(ROWS_SHOWN)) == names
    # …and a failing row reads so
    last = """return document.querySelector('#channels tr[data-channel="job-007"] .last .badge')
              .textContent"""  # read in one step: a refresh may redraw the row at any time
    assert console.driver.execute_script(last) == "failed"


def test_labels_show_on_a_channel_and_filter_the_table(console: Console) -> None:
    # Given channels of two teams and tenants, and one without labels
    made = {
        "billing-acme": {"team": "billing", "tenant": "acme"},
        "billing-globex": {"team": "billing", "tenant": "globex"},
        "ops-acme": {"team": "ops", "tenant": "acme"},
        "plain": {},
    }
    for name, labels in made.items():
        console.ledger.channels.create_channel(
            name, {"schedule": "0 15 2 * * *"}, OK_TARGET, 5000, "active", labels=labels
        )
    console.driver.set_window_size(1500, 760)
    console.open()
    chips = """return [...document.querySelectorAll(
                 '#channels tr[data-channel="billing-acme"] .label')].map((c) => c.textContent)"""
    assert console.driver.execute_script(chips) == ["team=billing", "tenant=acme"]

    def shown(expected: list[str]) -> None:
        console.wait(lambda d: d.execute_script(ROWS_SHOWN) == expected)

    # When a selector is typed, then another term added, then a chip clicked on a clear filter
    selector = console.driver.find_element("id", "labels")
    selector.send_keys("team=billing")
    shown(["billing-acme", "billing-globex"])
    selector.send_keys(", tenant=acme")
    shown(["billing-acme"])
    selector.clear()
    console.driver.execute_script("arguments[0].dispatchEvent(new Event('input'))", selector)
    shown(list(made))
    console.click('#channels tr[data-channel="ops-acme"] .label:nth-child(2)')

    # Then the chip's label is the filter, and the panel lists the channel's labels
    shown(["billing-acme", "ops-acme"])
    assert selector.get_attribute("value") == "tenant=acme"
    console.click('#channels tr[data-channel="billing-acme"] .name')
    console.wait(lambda d: "tenant=acme" in d.find_element("id", "panel-body").text)


GEOMETRY = """
const rect = (el) => { const r = el.getBoundingClientRect();
  return { left: r.left, right: r.right, top: r.top, bottom: r.bottom, width: r.width }; };
const row = document.querySelector(`#channels tr[data-channel="${arguments[0]}"]`);
const cells = row.querySelectorAll('.past .cell');
return { strip: rect(row.querySelector('.past')), newest: rect(cells[cells.length - 1]),
         now: rect(row.querySelector('.now')), actions: rect(row.querySelector('.actions')),
         panel: rect(document.getElementById('panel')), width: innerWidth, height: innerHeight,
         page: document.documentElement.scrollWidth };
"""


@pytest.mark.parametrize("width", [1280, 800])
def test_at_1280_and_800_px_the_strip_stays_in_view_with_the_panel_open(
    console: Console, width: int
) -> None:
    # Given a channel with a long history, and its panel open in a window `width` wide
    channel = console.ledger.channels.get_channel(
        console.channel("nightly-report", OK_TARGET, timezone="Europe/London")
    )
    now = datetime.now(UTC).replace(microsecond=0)
    console.ledger.occurrences.insert_occurrences(
        NewOccurrence.of(channel, now - timedelta(days=i + 1), None, status="completed")
        for i in range(40)
    )
    console.driver.set_window_size(width, 760)
    console.open()
    console.click('#channels tr[data-channel="nightly-report"] .name')
    console.wait(lambda d: "nightly-report" in d.find_element("id", "panel").text)

    # When it is measured
    box = console.driver.execute_script(GEOMETRY, "nightly-report")
    strip, newest, panel = box["strip"], box["newest"], box["panel"]

    # Then nothing is wider than the window, the strip has room, and its newest cell and
    # the actions are in the window
    assert box["page"] <= box["width"]
    assert strip["width"] >= 200
    assert strip["left"] >= 0 and strip["right"] <= box["width"]
    assert strip["left"] <= newest["left"] and newest["right"] <= strip["right"]
    assert box["actions"]["right"] <= box["width"]
    if width == 1280:
        # …beside the panel, not under it
        assert box["now"]["right"] <= box["actions"]["right"] <= panel["left"]
    else:
        # …above the panel, which is a sheet over the lower part of the window
        assert newest["bottom"] <= panel["top"] and panel["bottom"] <= box["height"] + 1


def test_the_occurrence_panel_shows_the_run_that_follows_a_retry(console: Console) -> None:
    # Given a failed occurrence, its panel open
    console.channel("flaky", {"type": "python", "callable": "tests.api.jobs:fail_first"})
    channel = console.ledger.channels.get_channel_by_name("flaky")
    at = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
    console.ledger.occurrences.insert_occurrence(
        NewOccurrence.of(channel, at, None, trigger="backfill")
    )
    console.scheduler.run_due()
    (failed,) = console.ledger.occurrences.list_occurrences().data
    console.driver.set_window_size(1500, 760)
    console.open()
    console.click(f'.cell[data-id="{failed.id}"]')
    status = "return document.querySelector('#panel dl .badge')?.textContent"
    # Read in one step: the panel is redrawn on every refresh.
    retry_disabled = "return document.getElementById('retry').disabled"
    console.wait(lambda d: d.execute_script(status) == "failed")

    # When Retry is clicked, and then the scheduler runs it (no click on the page)
    console.click("#retry")
    console.wait(lambda d: d.execute_script(status) == "pending")
    assert console.driver.execute_script(retry_disabled)
    assert console.scheduler.run_due() == 1

    # Then the panel follows: completed, as the second attempt, nothing left to retry
    console.wait(lambda d: d.execute_script(status) == "completed", timeout=15)
    panel = "return document.getElementById('panel').innerText"
    assert "attempt\n2" in console.driver.execute_script(panel)
    assert console.driver.execute_script(retry_disabled)
    # and lists both attempts, the failed one with its error
    attempts = "return [...document.querySelectorAll('#attempts .attempt')].map(a => a.innerText)"
    shown = console.wait(
        lambda d: (lambda a: a if len(a) == 2 else None)(d.execute_script(attempts))
    )
    assert shown[0].startswith("attempt 1 failed")
    assert "first attempt fails; a retry succeeds" in shown[0]
    assert shown[1].startswith("attempt 2 completed")


def test_an_ended_one_time_channel_shows_ended_and_a_draft_offers_activate(
    console: Console,
) -> None:
    # Given a one-time channel that has fired (its cursor parked), and a draft
    at = (console.ledger.db_now() + timedelta(seconds=2)).replace(microsecond=0)
    once = {"at": at.strftime("%Y-%m-%dT%H:%M:%S"), "timezone": "UTC"}
    console.ledger.channels.create_channel("once", once, OK_TARGET, 5000, "active")
    console.scheduler.reconcile()
    console.wait(lambda d: console.ledger.db_now() >= at)
    console.scheduler.reconcile()
    assert console.scheduler.run_due() == 1
    console.ledger.channels.create_channel("drafted", {"schedule": "0 15 2 * * *"}, OK_TARGET, 5000)

    # When the page is drawn
    console.driver.set_window_size(1500, 760)
    console.open()
    label = """const row = document.querySelector(`#channels tr[data-channel="${arguments[0]}"]`);
               return [row.querySelector('.badge').textContent,
                       [...row.querySelectorAll('.actions button')].map((b) => b.textContent)]"""

    # Then the one-time channel reads "ended", with nothing to pause; the draft offers Activate
    assert console.driver.execute_script(label, "once") == ["ended", ["Trigger"]]
    assert console.driver.execute_script(label, "drafted") == ["draft", ["Trigger", "Activate"]]
    # …which makes it active
    console.click('#channels tr[data-channel="drafted"] .actions button:not(.primary)')
    console.wait(
        lambda d: console.ledger.channels.get_channel_by_name("drafted").status == "active"
    )
    console.wait(lambda d: d.execute_script(label, "drafted") == ["active", ["Trigger", "Pause"]])


def _failed_run(console: Console, name: str) -> str:
    """A past run of the (failing) channel `name`, run to its final failure; its id."""
    channel = console.ledger.channels.get_channel_by_name(name)
    at = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
    row = NewOccurrence.of(channel, at, None, trigger="backfill")
    console.ledger.occurrences.insert_occurrence(row)
    console.scheduler.run_due()
    assert console.ledger.occurrences.get_occurrence(row.id).status == FAILED
    return row.id


def test_a_failed_channel_shows_an_alert_badge_and_its_panel_lists_the_event(
    console: Console,
) -> None:
    # Given a channel whose run failed (an alert it delivers by default), beside a quiet one
    console.channel("flaky", FAIL_TARGET)
    console.channel("quiet", OK_TARGET)
    failed = _failed_run(console, "flaky")

    # When the page is drawn
    console.open()
    alert = """return [...document.querySelectorAll('#channels tr.channel')].map((r) =>
               [r.dataset.channel, r.querySelector('.badge.alert')?.dataset.alert ?? null])"""

    # Then the failed channel's row carries the open alert, the quiet one's none
    console.wait(lambda d: dict(d.execute_script(alert)).get("flaky") is not None)
    assert dict(console.driver.execute_script(alert)) == {
        "flaky": "occurrence.failed",
        "quiet": None,
    }
    # …and its panel lists the event, which opens the occurrence it is about
    console.click('#channels tr[data-channel="flaky"] .name')
    event = console.wait(
        lambda d: (
            d.find_elements("css selector", '#panel tr.event[data-kind="occurrence.failed"]')
            or False
        )
    )[0]
    assert "RuntimeError: report for" in event.text
    assert "open alert: occurrence.failed" in console.driver.find_element("id", "panel").text
    event.click()
    console.wait(lambda d: "Occurrence of flaky" in d.find_element("id", "panel").text)
    assert console.driver.execute_script("return location.hash") == f"#occurrence={failed}"


def test_an_events_console_links_open_its_channel_and_its_occurrence(console: Console) -> None:
    # Given a failed run's event, and the console links it carries
    channel_id = console.channel("flaky", FAIL_TARGET)
    failed = _failed_run(console, "flaky")
    (event,) = [
        e for e in console.ledger.events.list_events().data if e.kind == "occurrence.failed"
    ]
    to_occurrence = event.document["links"]["console"]
    to_channel = f"/#channel={channel_id}"  # what a channel's own events (stalled) link to

    # When each link is opened from the site's root (as a receiver's message would)
    shown: dict[str, str] = {}
    for link in (to_occurrence, to_channel):
        console.driver.get("about:blank")
        console.driver.get(f"{console.url}{link}")
        panel = console.wait(
            lambda d: (p := d.find_element("id", "panel")).is_displayed() and "flaky" in p.text
        )
        assert panel
        shown[link] = console.driver.find_element("css selector", "#panel h2").text

    # Then the console opened the panel the link names
    assert to_occurrence == f"/#occurrence={failed}"
    assert shown[to_occurrence] == "Occurrence of flaky"
    assert shown[to_channel].startswith("flaky")
    assert console.driver.current_url.endswith(f"/console#channel={channel_id}")


def test_the_page_works_through_the_signing_proxy(console: Console) -> None:
    from cronledger.api_client import ApiClient
    from cronledger.console.proxy import start_proxy

    console.channel("nightly", OK_TARGET)
    proxy = start_proxy(ApiClient(console.url), 0)
    try:
        console.url = f"http://127.0.0.1:{proxy.server_port}"
        console.open()
        console.click('#channels tr[data-channel="nightly"] button.primary')
        console.wait(lambda d: console.ledger.occurrences.list_occurrences().total == 1)
        errors = [e for e in console.driver.get_log("browser") if e["level"] == "SEVERE"]
    finally:
        proxy.shutdown()
        proxy.server_close()

    assert errors == []
    assert console.ledger.occurrences.list_occurrences().data[0].trigger == "manual"


def test_the_page_draws_every_channel_with_ten_thousand_occurrences(
    console: Console, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given 10,000 occurrences over 10 channels
    seed_busy_ledger(console.ledger)
    assert console.ledger.occurrences.list_occurrences().total == BUSY_CHANNELS * BUSY_ROWS

    # When the page is loaded (a deadline no busy machine reaches: how fast it is, is
    # `python -m tests.bench console`'s figure)
    elapsed = console.open(timeout=60)

    # Then every channel's strip is drawn, its latest 60 occurrences in their colours
    for index in range(BUSY_CHANNELS):
        cells = console.cells(f"busy-{index}")
        assert len(cells) == 60
        assert {c["status"] for c in cells} == {"completed", "failed"}
    with capsys.disabled():
        print(
            f"\nconsole: drawn with 10,000 occurrences in {elapsed} ms ({_backend(console)}, "
            f"load average {os.getloadavg()[0]:.1f})"
        )


def _backend(console: Console) -> str:
    return "PostgreSQL" if console.ledger.engine.dialect.name == "postgresql" else "SQLite"


#: The screenshot's channels: name, target, transport_config, minutes between its past runs.
SHOWN = (
    ("nightly-report", OK_TARGET, {"schedule": "0 15 2 * * *", "timezone": "Europe/London"}, 1440),
    ("billing-sync", {"type": "python", "callable": "tests.api.jobs:sometimes"}, {}, 1),
    ("cache-warm", OK_TARGET, {"schedule": "0 * * * * *", "timezone": "America/Santiago"}, 1),
    (
        "legacy-export",
        FAIL_TARGET,
        {"schedule": "0 0 6 * * *", "timezone": "America/New_York"},
        1440,
    ),
)


def test_a_screenshot_of_the_console(console: Console, tmp_path: Path) -> None:
    """The picture the README shows, made from real runs."""
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    for name, target, config, minutes in SHOWN:
        channel = console.ledger.channels.get_channel(
            console.channel(name, target, **{"schedule": "0 * * * * *", **config})
        )
        console.ledger.occurrences.insert_occurrences(
            # Past rows run as a backfill does (a cron row this late would be a misfire).
            NewOccurrence.of(
                channel,
                now - timedelta(minutes=minutes * (i + 1)),
                target_ref(channel.target),
                trigger="backfill",
            )
            for i in range(40)
        )
    cache = console.ledger.channels.get_channel_by_name("cache-warm")
    console.ledger.occurrences.insert_occurrence(
        NewOccurrence.of(
            cache,
            now - timedelta(minutes=4, seconds=30),
            None,
            status=SKIPPED_MISFIRE,
            error_message='skipped 118 missed occurrence(s) (misfire_policy "latest")',
        )
    )
    console.scheduler.reconcile()
    console.scheduler.run_due()
    legacy = console.ledger.channels.get_channel_by_name("legacy-export")
    console.ledger.channels.set_channel_status(legacy.channel_id, "paused")
    for job in (reconcile.JOB, claim.JOB):  # the heartbeats the running loops would record
        console.ledger.reporting.record_job_ok(job)

    console.driver.set_window_size(1500, 900)
    console.open()
    failed = [c for c in console.cells("billing-sync") if c["status"] == "failed"][-1]
    console.click(f'.cell[data-id="{failed["id"]}"]')
    console.wait(lambda d: d.find_element("id", "retry").is_enabled())

    path = Path(os.environ.get("CRONLEDGER_SCREENSHOT") or tmp_path / "console.png")
    assert console.driver.save_screenshot(str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
