"""DevUI in a real browser: a reply says which agent wrote it, and a handoff shows as a line.

Debian's chromium, headless, driven by selenium through Debian's chromedriver, opens DevUI
serving the desk of ``tests/serving_app.py`` (``devui_agent``), sends a message that triage hands
to billing, and reads the page; a screenshot of it is saved in the test's ``tmp_path``.
Without chromium and chromedriver the test skips, saying so; in CI (``CI`` set) it fails
instead: ``.ci/run`` installs them when they are missing.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeVar

import pytest

from tests.serving_app import TOKEN
from tests.serving_http import Serve

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

# What a headless Chromium needs on this machine kind: no sandbox as root, no GPU, and none of
# its background connections (the network is closed: they would fail, many at a time).
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,900",
)
T = TypeVar("T")
WAIT = 180  # seconds: a backstop (a cold first start of chromium is slow), never a way to sync


def chromium() -> tuple[str, str]:
    """The paths of chromium and chromedriver; skips (fails in CI) when one is missing."""
    browser, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if browser is None or driver is None:
        message = (
            "the DevUI browser test needs Debian's chromium and chromium-driver "
            "(apt-get install chromium chromium-driver)"
        )
        if os.environ.get("CI"):
            pytest.fail(f"{message}: CI must run it, not skip it")
        pytest.skip(message)
    return browser, driver


@pytest.fixture
def page(tmp_path: Path) -> Iterator[WebDriver]:
    """A headless chromium with a fresh profile; closed (browser and driver) at the end."""
    browser, driver = chromium()
    pytest.importorskip("selenium", reason="install handoff-builder[dev] (selenium)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"):
        options.add_argument(flag)
    opened = webdriver.Chrome(options=options, service=Service(driver))
    try:
        yield opened
    finally:
        opened.quit()


def conversation(page: WebDriver) -> str:
    """The conversation DevUI shows (``Conversation 1a2b3c4d``), once it has loaded it.

    Until then its picker is disabled; a message sent before would start another conversation,
    and the loading one would then replace the chat.
    """
    from selenium.webdriver.common.by import By

    def loaded(p: WebDriver) -> str | Literal[False]:
        picker = p.find_element(By.CSS_SELECTOR, "button[role=combobox]")
        shown = (picker.text.strip().splitlines() or [""])[0]  # its tokens may follow
        return shown if picker.is_enabled() and shown.startswith("Conversation ") else False

    return wait_for(page, loaded)


def say(page: WebDriver, text: str) -> None:
    """Type ``text`` in DevUI's message box and send it (Enter)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    box = wait_for(page, lambda p: p.find_element(By.CSS_SELECTOR, "textarea:not([disabled])"))
    box.send_keys(text, Keys.ENTER)


def replies(page: WebDriver, last: str) -> list[str]:
    """The text of each message in the chat, once one of them ends with ``last``."""
    from selenium.webdriver.common.by import By

    def shown(p: WebDriver) -> list[str] | Literal[False]:
        texts = [e.text for e in p.find_elements(By.CSS_SELECTOR, ".markdown-content")]
        return texts if any(t.endswith(last) for t in texts) else False

    return wait_for(page, shown)


def wait_for(page: WebDriver, found: Callable[[WebDriver], T | Literal[False]]) -> T:
    """What ``found`` finds once it finds it; a failure that shows the page if it never does."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(page, WAIT).until(found)
    except TimeoutException:
        shown = page.find_element(By.TAG_NAME, "body").text
        pytest.fail(f"not found in {WAIT} s; the page shows:\n{shown}")


def test_devui_shows_the_agent_of_each_reply_and_the_handoff(
    serve: Serve, page: WebDriver, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    base = serve("devui")
    # The token goes into DevUI's storage from a page of the same origin that runs none of
    # DevUI's code (its health check): DevUI itself, finding no token on a first start, would
    # race with us and could clear the one we set.
    page.get(f"{base.rstrip('/')}/health")
    keep = "localStorage.setItem('devui_auth_token', arguments[0])"  # DevUI reads it there
    page.execute_script(keep, TOKEN)  # pyright: ignore[reportUnknownMemberType] - selenium leaves *args untyped
    page.get(base)

    first = conversation(page)
    say(page, "I was charged twice")
    assert replies(page, "billing read: I was charged twice") == [
        "I was charged twice",
        "handoff triage → billing: Help.\nbilling: billing read: I was charged twice",
    ]
    [line] = page.find_elements(By.CSS_SELECTOR, ".markdown-content blockquote")
    assert line.text == "handoff triage → billing: Help."  # the handoff, a line of its own
    assert [e.text for e in page.find_elements(By.CSS_SELECTOR, ".markdown-content strong")] == [
        "billing:"  # the agent that answered, in bold before its reply
    ]
    shot = tmp_path / "devui-handoff.png"
    shot.write_bytes(page.get_screenshot_as_png())
    assert shot.read_bytes().startswith(b"\x89PNG")

    # After a reload DevUI shows the conversation empty (it keeps no items of an agent's runs),
    # but it is the same conversation: the next message goes on at billing, with its history.
    page.refresh()
    assert conversation(page) == first
    say(page, "and now?")
    assert replies(page, "| and now?")[-1] == (
        "billing: billing read: I was charged twice | and now?"
    )
    (tmp_path / "devui-after-reload.png").write_bytes(page.get_screenshot_as_png())
