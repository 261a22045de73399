"""The admin's node list at 1,400 px: the page does not scroll sideways and every column is on screen — state,
GPUs free / used and the MIG layouts in NVIDIA's notation included — even for a node whose eight GPUs all have
different layouts."""

from __future__ import annotations

import pytest

from scheduler.models import Gpu
from tests.browser.conftest import BROWSER_TIMEZONE, assert_fits_width, save_screenshot, sign_in
from tests.factories import NodeFactory, TeamFactory
from tests.portal.fleet import fleet, running_job

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Eight different layouts of an A100-SXM4-80GB: the widest MIG column a node can have.
MIXED = [
    [["1g.10gb", s] for s in range(7)],
    [["2g.20gb", 0], ["2g.20gb", 2], ["1g.10gb", 4], ["1g.10gb", 5], ["1g.10gb", 6]],
    [["2g.20gb", 0], ["1g.10gb", 2], ["1g.10gb", 3], ["3g.40gb", 4]],
    [["4g.40gb", 0], ["1g.10gb", 4], ["1g.10gb", 5], ["1g.10gb", 6]],
    [["4g.40gb", 0], ["3g.40gb", 4]],
    [["7g.80gb", 0]],
    [["1g.20gb", 0], ["1g.20gb", 2], ["1g.20gb", 4], ["1g.20gb", 6]],
    [],
]
# Cells whose right edge is beyond the list's own box (which scrolls sideways) or the window: a column the admin
# would have to scroll to.
OFF_SCREEN = """() => {
  const box = document.querySelector('#changelist .results').getBoundingClientRect();
  const right = Math.min(box.right, window.innerWidth);
  return [...document.querySelectorAll('#result_list th, #result_list td')]
    .filter(cell => cell.getBoundingClientRect().right > right + 1)
    .map(cell => cell.className);
}"""


def test_node_list_fits_1400_px(live_server, browser, platform_admin) -> None:
    node = fleet()
    running_job(TeamFactory(slug="nlp", namespace="team-nlp"), node, gpu_index=1)
    wide = NodeFactory(name="h100-spot-us-east-1c-0042.compute.internal", gpu_model=node.gpu_model, state="cordoned")
    for index, layout in enumerate(MIXED):
        Gpu.objects.create(node=wide, index=index, mig_layout=layout)

    context = browser.new_context(viewport={"width": 1400, "height": 900}, timezone_id=BROWSER_TIMEZONE)
    page = context.new_page()
    try:
        sign_in(page, live_server.url, "dave")
        page.goto(f"{live_server.url}/admin/scheduler/node/")
        save_screenshot(page, "admin-node-list-1400")
        assert_fits_width(page)
        assert page.evaluate(OFF_SCREEN) == []
        row = page.locator("#result_list tbody tr", has_text="a100-res-01")
        assert row.locator("td.field-state").inner_text() == "ready"
        assert row.locator("td.field-gpu_use").inner_text() == "7 / 1 of 8"
        assert "GPU 1–7: MIG off" in row.locator("td.field-mig_layouts").inner_text()
        wide_row = page.locator("#result_list tbody tr", has_text="h100-spot")
        assert wide_row.locator("td.field-state").inner_text() == "cordoned"
        assert "GPU 4: 4g.40gb@0,3g.40gb@4" in wide_row.locator("td.field-mig_layouts").inner_text()
    finally:
        context.close()
