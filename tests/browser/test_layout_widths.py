"""The main pages at a laptop's 1366 px and a phone's 390 px: the page never scrolls sideways (a wide table
scrolls inside its own box, no column hidden), the cluster view's MIG slice labels are whole, the simulated
speed is stated where times are shown, a long job's page is as short as a short one's, and every page's
screenshot is non-blank."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date
from decimal import Decimal

import pytest

from billing.models import GpuPrice
from jobs.models import Job
from jobs.pages.job_page import TIMELINE_SHOWN
from scheduler.models import GpuModel
from tests.browser.conftest import BROWSER_TIMEZONE, assert_fits_width, save_screenshot, sign_in
from tests.factories import MembershipFactory, QuotaFactory, TeamFactory, UserFactory
from tests.jobs.long_jobs import long_job
from tests.portal.fleet import fleet, pending_queue, running_job

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

VIEWPORTS = {"laptop": {"width": 1366, "height": 768}, "phone": {"width": 390, "height": 844}}

# Tables wider than their box that no ancestor scrolls sideways, and cells a stylesheet hides.
UNSCROLLED_TABLES = """() => [...document.querySelectorAll('table')].filter(table => {
  if (table.getBoundingClientRect().width <= table.parentElement.clientWidth + 1) return false;
  for (let box = table.parentElement; box && box !== document.body; box = box.parentElement) {
    if (['auto', 'scroll'].includes(getComputedStyle(box).overflowX)) return false;
  }
  return true;
}).map(table => table.outerHTML.slice(0, 120))"""
HIDDEN_CELLS = """() => [...document.querySelectorAll('th, td')].filter(cell => {
  const style = getComputedStyle(cell);
  return style.display === 'none' || style.visibility === 'hidden';
}).map(cell => cell.outerHTML.slice(0, 120))"""
# Cluster map segments whose label does not fit the segment's box (the text would be cut): measured by the box's
# scroll size and by the laid-out text itself, which an ellipsis or a clip would not shrink.
CUT_LABELS = """() => [...document.querySelectorAll('#cluster-map .seg')].filter(seg => {
  if (!seg.textContent.trim()) return false;
  const box = seg.getBoundingClientRect();
  const range = document.createRange();
  range.selectNodeContents(seg);
  const text = range.getBoundingClientRect();
  return seg.scrollWidth > seg.clientWidth || seg.scrollHeight > seg.clientHeight
    || text.left < box.left - 0.5 || text.right > box.right + 0.5
    || text.top < box.top - 0.5 || text.bottom > box.bottom + 0.5;
}).map(seg => `${seg.textContent.trim()}: ${seg.scrollWidth}×${seg.scrollHeight} px
  in ${seg.clientWidth}×${seg.clientHeight}`)"""
PAGE_HEIGHT = "document.documentElement.scrollHeight"


@pytest.fixture
def org():
    nlp = TeamFactory(name="Language Models", slug="nlp", namespace="team-nlp")
    QuotaFactory(team=nlp, gpu_class="any", guaranteed_gpus=4, burst_gpus=8)
    vision = TeamFactory(name="Computer Vision", slug="vision", namespace="team-vision")
    speech = TeamFactory(name="Speech & Audio", slug="speech", namespace="team-speech")
    MembershipFactory(team=nlp, role="lead", user=UserFactory(username="nlp-lead"))
    node = fleet()  # GPU 0 split 1g.10gb, 1g.10gb, 2g.20gb, 3g.40gb; GPUs 1-7 whole
    model = GpuModel.objects.get(name="A100-SXM4-80GB")
    for tier in ("reserved", "on-demand", "spot"):
        GpuPrice.objects.create(
            gpu_model=model, tier=tier, price_per_gpu_hour=Decimal("2.1000"), effective_from=date(2026, 1, 1)
        )
    # The narrowest slice held (one memory slice) and a wider one, so both kinds of label are drawn.
    running_job(speech, node, name="asr-small", gpu_index=0, mig_profile="1g.10gb", mig_start=1)
    running_job(vision, node, name="detector", gpu_index=0, mig_profile="3g.40gb", mig_start=4)
    running_job(nlp, node, name="llama-pretrain", gpu_index=2, project=None)
    pending_queue(nlp, 12)
    short = running_job(nlp, node, name="short-run", gpu_index=3)
    long = long_job(nlp, node, runs=10, gpu_index=4)
    longer = long_job(nlp, node, runs=60, name="longer-pretrain", gpu_index=5)
    return {"short": short, "long": long, "longer": longer}


@pytest.fixture(params=list(VIEWPORTS))
def sized_page(request, browser) -> Iterator[tuple[str, object]]:
    phone = request.param == "phone"
    context = browser.new_context(
        viewport=VIEWPORTS[request.param],
        device_scale_factor=2 if phone else 1,
        is_mobile=phone,
        has_touch=phone,
        timezone_id=BROWSER_TIMEZONE,
    )
    yield request.param, context.new_page()
    context.close()


LINE_PX = 24  # one line of body text


def _open(page, url: str) -> None:
    page.goto(url)
    page.wait_for_load_state("networkidle")


def test_main_pages_fit_the_width_and_keep_every_column(live_server, sized_page, org) -> None:
    size, page = sized_page
    sign_in(page, live_server.url, "nlp-lead")
    pages = {
        "dashboard": ("/teams/nlp/", True),
        "jobs": ("/jobs/", True),
        "queue": ("/queue/", True),
        "job": (f"/jobs/{org['long'].pk}/", True),
        "cluster": ("/cluster/", False),
        "billing": ("/billing/", False),
    }
    for name, (path, shows_times) in pages.items():
        _open(page, f"{live_server.url}{path}")
        assert page.locator("h1").count() == 1, f"{name}: not the page ({page.url})"
        assert_fits_width(page)
        assert page.evaluate(UNSCROLLED_TABLES) == [], f"{name} at {size}: a wide table makes the page scroll"
        assert page.evaluate(HIDDEN_CELLS) == [], f"{name} at {size}: columns hidden"
        notice = page.locator("[data-testid=simulated-speed]")
        assert notice.count() == (1 if shows_times else 0), f"{name}: simulated speed notice"
        if shows_times:
            assert notice.is_visible() and "a 1-hour job takes" in notice.inner_text()
        save_screenshot(page, f"width-{size}-{name}")


def test_mig_slice_labels_are_whole(live_server, sized_page, org) -> None:
    size, page = sized_page
    sign_in(page, live_server.url, "nlp-lead")
    _open(page, f"{live_server.url}/cluster/")
    labels = page.locator("#cluster-map .seg").all_inner_texts()
    assert any("1g.10gb" in text for text in labels) and any("speech" in text for text in labels)
    assert page.evaluate(CUT_LABELS) == [], f"MIG labels cut at {size}"
    save_screenshot(page, f"width-{size}-cluster-labels")


def test_a_long_jobs_page_is_as_short_as_a_short_ones(live_server, sized_page, org) -> None:
    size, page = sized_page
    sign_in(page, live_server.url, "nlp-lead")
    heights = {}
    for name in ("long", "longer"):
        job: Job = org[name]
        assert job.events.count() > TIMELINE_SHOWN
        _open(page, f"{live_server.url}/jobs/{job.pk}/")
        heights[name] = page.evaluate(PAGE_HEIGHT)
    # Six times the history, the same page: only the latest entries are open. Two lines of slack: figures with
    # more digits (GPU-hours, cost, "Show all 302 events") may wrap once more at 390 px.
    assert abs(heights["longer"] - heights["long"]) <= 2 * LINE_PX, heights
    # Unfolding the history shows it all.
    page.click("[data-testid=timeline-earlier] > summary")
    assert page.evaluate(PAGE_HEIGHT) > heights["longer"]
    assert page.locator("[data-testid=timeline-earlier] li").first.is_visible()
    save_screenshot(page, f"width-{size}-long-job-unfolded")
