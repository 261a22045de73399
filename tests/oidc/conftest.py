"""A real OpenID Connect provider on loopback (``provider.mjs``: the certified ``oidc-provider`` from npm), started
for the tests that ask for ``oidc_provider`` and stopped after them, and a browser walk through its sign-in."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest
import requests
from django.test import Client

HERE = Path(__file__).resolve().parent
CLIENT_ID = "microcosm"
CLIENT_SECRET = "microcosm-test-secret-0123456789"
REDIRECT_URI = "http://testserver/oidc/callback/"  # Django's test Client is http://testserver


@dataclass
class Provider:
    issuer: str
    accounts_file: Path

    def accounts(self, accounts: dict[str, dict[str, object]]) -> None:
        """Replace the provider's users (it reads the file at every sign-in): ``{login: {password, email,
        groups, username?}}``."""
        self.accounts_file.write_text(json.dumps(accounts))


@pytest.fixture(scope="session")
def oidc_provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Provider]:
    node = shutil.which("node")
    if node is None or not (HERE / "node_modules" / "oidc-provider").is_dir():
        pytest.fail("the test OIDC provider needs node and its packages: npm ci --prefix tests/oidc (as .ci/run does)")
    accounts_file = tmp_path_factory.mktemp("oidc") / "accounts.json"
    accounts_file.write_text("{}")
    env = {
        "PATH": str(Path(node).parent),
        "ACCOUNTS_FILE": str(accounts_file),
        "CLIENT_ID": CLIENT_ID,
        "CLIENT_SECRET": CLIENT_SECRET,
        "REDIRECT_URI": REDIRECT_URI,
        "PORT": "0",  # any free port; the script prints the one it got
    }
    process = subprocess.Popen(
        [node, str(HERE / "provider.mjs")],
        cwd=HERE,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # blocks until it listens (or dies: then "")
        if not line.startswith("issuer "):
            pytest.fail(f"the test OIDC provider did not start (exit {process.poll()}): {line!r}")
        yield Provider(issuer=line.split()[1], accounts_file=accounts_file)
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture
def sso_settings(settings, oidc_provider: Provider) -> Provider:
    """Single sign-on on, against the loopback provider, its endpoints from discovery (as OIDC_ISSUER alone)."""
    from portal.sso.discovery import discovery_forget

    settings.SSO_ENABLED = True
    settings.SSO_PROVIDER_NAME = "Test IdP"
    settings.OIDC_ISSUER = oidc_provider.issuer
    settings.OIDC_RP_CLIENT_ID = CLIENT_ID
    settings.OIDC_RP_CLIENT_SECRET = CLIENT_SECRET
    discovery_forget()
    return oidc_provider


def provider_sign_in(client: Client, issuer: str, login: str, password: str, *, start: str = "/oidc/authenticate/"):
    """Walk the code flow as a browser would: the portal sends us to the provider, we sign in on its form, it
    sends us back to the portal's callback. Returns the callback's response (not followed)."""
    response = client.get(start)
    assert response.status_code == 302, response
    browser = requests.Session()  # the provider's cookies; a new one per sign-in, as a fresh browser
    page = browser.get(response["Location"], timeout=10)  # → /interaction/<uid>: the login form
    assert page.status_code == 200 and "<form" in page.text, page.text
    answer = browser.post(page.url, data={"login": login, "password": password}, allow_redirects=False, timeout=10)
    # The provider's own redirects (resume, consent, resume) until it sends the browser back to the portal.
    while answer.status_code in (302, 303) and answer.headers["Location"].startswith(("/", issuer)):
        answer = browser.get(urljoin(issuer, answer.headers["Location"]), allow_redirects=False, timeout=10)
    assert answer.status_code in (302, 303), (answer.status_code, answer.text[:500])
    back = urlsplit(answer.headers["Location"])
    assert f"{back.scheme}://{back.netloc}{back.path}" == REDIRECT_URI, back
    return client.get(f"{back.path}?{back.query}")
