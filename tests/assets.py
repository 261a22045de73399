"""The scripts, stylesheets and images a page loads, read from its HTML.

A test that a page works offline asks where its assets come from. Searching the
whole page for a word such as "cdn" is not that question: a random CSRF token
or nonce can contain the word (one did, and failed CI).
"""

from __future__ import annotations

from html.parser import HTMLParser

_ASSET_ATTRIBUTES = {"script": "src", "link": "href", "img": "src"}


class _AssetParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        wanted = _ASSET_ATTRIBUTES.get(tag)
        for name, value in attrs:
            if name == wanted and value:
                self.urls.append(value)


def asset_urls(page: str) -> list[str]:
    """Every URL the page's script, link and img tags load, in page order."""
    parser = _AssetParser()
    parser.feed(page)
    return parser.urls


def external_assets(page: str) -> list[str]:
    """The asset URLs that leave the site: absolute or scheme-relative ones."""
    return [url for url in asset_urls(page) if url.startswith(("http:", "https:", "//"))]
