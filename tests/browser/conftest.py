"""Playwright driving Debian's chromium (never a downloaded browser) against pytest-django's live server."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from django.utils import timezone

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"

# Flags as the machine's probe runs chromium: without the background-networking ones it keeps dialling out
# to hosts this closed network refuses.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if Path(CHROMIUM).exists():
        return
    skip = pytest.mark.skip(reason="Debian's chromium is not installed (apt-get install chromium; .ci/run does)")
    for item in items:
        if "browser" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    # Django refuses ORM calls from a thread with a running event loop; Playwright's sync API runs one. Set for
    # the browser tests only and restored after, so subprocesses of other tests don't inherit it.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    from playwright.sync_api import sync_playwright

    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            yield browser
            browser.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


# The browser's zone differs from the server's UTC on purpose: pages must show times in the reader's zone.
BROWSER_TIMEZONE = "Asia/Tokyo"


@pytest.fixture
def page(browser) -> Iterator[object]:
    context = browser.new_context(viewport={"width": 1280, "height": 900}, timezone_id=BROWSER_TIMEZONE)
    page = context.new_page()
    yield page
    context.close()


@pytest.fixture(scope="module")
def journey_context(browser) -> Iterator[object]:
    """One laptop-sized browser context for a whole test module: starting chromium's context once keeps the
    persona journeys fast."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, timezone_id=BROWSER_TIMEZONE)
    yield context
    context.close()


@pytest.fixture
def journey_page(journey_context) -> Iterator[object]:
    """A fresh tab of the module's context with no cookie left by the previous test (each test signs in)."""
    journey_context.clear_cookies()
    page = journey_context.new_page()
    yield page
    page.close()


@pytest.fixture
def phone_page(browser) -> Iterator[object]:
    """A phone-sized, touch, high-density viewport (an iPhone 13's CSS pixels)."""
    context = browser.new_context(
        viewport={"width": 390, "height": 844},
        device_scale_factor=2,
        is_mobile=True,
        has_touch=True,
        timezone_id=BROWSER_TIMEZONE,
    )
    page = context.new_page()
    yield page
    context.close()


@pytest.fixture
def server_now(monkeypatch: pytest.MonkeyPatch) -> datetime:
    """Stop the server's clock (``django.utils.timezone.now``) at one instant for the test.

    A running allocation's cost grows every second, so a page, the dashboard and a download read moments apart
    differ by a fraction of a cent; compared at one instant they must agree to the cent."""
    frozen = timezone.now().replace(microsecond=0)
    monkeypatch.setattr(timezone, "now", lambda: frozen)
    return frozen


def sign_in(page, base_url: str, username: str, password: str = "pw-for-tests") -> None:
    page.goto(f"{base_url}/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_load_state()


def assert_fits_width(page) -> None:
    """Nothing on the page makes it scroll sideways (wide tables scroll inside their own box)."""
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 1, f"{page.url} is {overflow}px wider than the viewport"


def save_screenshot(page, name: str) -> Path:
    """Save a full-page screenshot under test-artifacts/ and fail if it is blank (one colour only)."""
    from PIL import Image

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    with Image.open(path) as image:
        colours = image.convert("RGB").getcolors(maxcolors=1_000_000)
    assert colours is None or len(colours) > 1, f"screenshot {path} is blank"
    return path
