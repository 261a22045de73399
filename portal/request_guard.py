"""Refuse malformed requests before any view, form or query sees them.

A NUL character cannot be stored in a PostgreSQL text column (psycopg raises ``DataError``: a 500), and bytes
that are not UTF-8 (``%ED%A0%80``, a lone surrogate) are silently turned into U+FFFD by Django's query parser,
so a filter would search for something nobody typed. Checking every filter, lookup and header at its use is a
game of whack-a-mole; this middleware checks the request once, at the door:

- ``Content-Length`` beyond ``DATA_UPLOAD_MAX_MEMORY_SIZE`` → 413 (Django would raise ``RequestDataTooBig``
  only when the body is first read, and answer an HTML 400; DRF's parsers read the stream directly and never
  check the limit at all); a ``Content-Length`` that is not a number → 400;
- query parameters (names and values) with a NUL or bytes that are not UTF-8, or more of them than
  ``DATA_UPLOAD_MAX_NUMBER_FIELDS`` → 400, one entry per parameter;
- a NUL in the URL path or in a header (a cookie, ``Authorization``) → 400.

Under ``/api/`` the answer is the API's error JSON (``{"detail": "…"}`` or ``{"param": ["…"]}``, as
``jobs.api.errors``); elsewhere a page saying what was wrong. JSON bodies are checked by the API's parser
(``jobs.api.parsers``), which knows the field paths. On the way out, a 4xx that Django itself answered with a
page under ``/api/`` (no route matched the URL) becomes the same error JSON.
"""

from __future__ import annotations

from collections.abc import Callable
from http import HTTPStatus
from urllib.parse import unquote_to_bytes

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string

API_PREFIX = "/api/"
NUL_MESSAGE = "must not contain a NUL character (%00)"
NOT_UTF8_MESSAGE = "is not valid UTF-8 once percent-decoded (a lone surrogate such as %ED%A0%80?): send UTF-8 text"
# Longer names are cut in messages: the point is to say which parameter, not to echo a megabyte back.
_NAME_CHARS = 80


class Refusal(Exception):
    """Why a request is refused: its status, and either one message or one message list per field."""

    def __init__(self, status: int, detail: str | None = None, fields: dict[str, list[str]] | None = None) -> None:
        super().__init__(detail or "; ".join(f"{k}: {' '.join(v)}" for k, v in (fields or {}).items()))
        self.status = status
        self.detail = detail
        self.fields = fields or {}

    def as_json(self) -> dict[str, object]:
        return {"detail": self.detail} if self.detail is not None else dict(self.fields)


def printable(text: str) -> str:
    """``text`` safe to echo in a message: control characters as ``\\xNN``, cut at a readable length."""
    shown = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text[:_NAME_CHARS])
    return shown + ("…" if len(text) > _NAME_CHARS else "")


def check_body_size(meta: dict[str, object]) -> None:
    """413 when ``Content-Length`` announces more than ``DATA_UPLOAD_MAX_MEMORY_SIZE``; 400 when it is junk.

    Under WSGI the body is read through a stream limited to ``Content-Length`` (Django's ``LimitedStream``), so
    the header is the whole story: a body cannot be longer than it says."""
    raw = str(meta.get("CONTENT_LENGTH") or "").strip()
    if not raw:
        return
    if not raw.isascii() or not raw.isdigit():
        raise Refusal(400, detail="Content-Length must be a whole number of bytes")
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    # int() of a 5,000-digit header would raise ValueError (Python's digit limit); its length already says "big".
    if limit is not None and (len(raw) > 18 or int(raw) > limit):
        raise Refusal(413, detail=f"request body larger than {limit} bytes")


def check_query(raw_query: bytes) -> None:
    """400 for a query string with too many parameters, or names/values with a NUL or bytes that are not UTF-8.

    Reads the raw bytes (as ``QUERY_STRING`` arrives) because Django's parser replaces undecodable bytes."""
    if not raw_query:
        return
    limit = settings.DATA_UPLOAD_MAX_NUMBER_FIELDS
    # The same count as Python's parse_qsl(max_num_fields=…), which Django turns into TooManyFieldsSent.
    if limit is not None and raw_query.count(b"&") + 1 > limit:
        raise Refusal(400, detail=f"more than {limit} query parameters")
    fields: dict[str, list[str]] = {}
    for piece in raw_query.split(b"&"):
        if not piece:
            continue
        raw_name, _, raw_value = piece.partition(b"=")
        name_bytes = unquote_to_bytes(raw_name.replace(b"+", b" "))
        name = printable(name_bytes.decode("utf-8", errors="replace"))
        problems = [f"the parameter name {message}" for message in _text_problems(name_bytes)]
        problems += _text_problems(unquote_to_bytes(raw_value.replace(b"+", b" ")))
        for problem in problems:
            if problem not in fields.setdefault(name, []):
                fields[name].append(problem)
    fields = {name: messages for name, messages in fields.items() if messages}
    if fields:
        raise Refusal(400, fields=fields)


def _text_problems(data: bytes) -> list[str]:
    problems = []
    try:
        data.decode("utf-8")  # strict: encoded surrogates (ED A0 80) are not UTF-8 either
    except UnicodeDecodeError:
        problems.append(NOT_UTF8_MESSAGE)
    if b"\x00" in data:
        problems.append(NUL_MESSAGE)
    return problems


def check_path_and_headers(path_info: str, meta: dict[str, object]) -> None:
    """400 for a NUL in the URL path (it would reach a lookup such as ``slug=…``) or in any header value
    (a session cookie or an ``Authorization`` token is looked up in the database)."""
    if "\x00" in path_info:
        raise Refusal(400, detail=f"the URL path {NUL_MESSAGE}")
    for key, value in meta.items():
        if (key.startswith("HTTP_") or key == "CONTENT_TYPE") and isinstance(value, str) and "\x00" in value:
            header = key.removeprefix("HTTP_").replace("_", "-").title()
            raise Refusal(400, detail=f"the {header} header {NUL_MESSAGE}")


def check_request(request: HttpRequest) -> None:
    """Every check above, cheapest first; raises :class:`Refusal` for the first kind of problem found."""
    check_body_size(request.META)
    check_path_and_headers(request.path_info, request.META)
    check_query(str(request.META.get("QUERY_STRING", "")).encode("iso-8859-1", errors="replace"))


def refusal_response(request: HttpRequest, refusal: Refusal) -> HttpResponse:
    if request.path_info.startswith(API_PREFIX):
        return JsonResponse(refusal.as_json(), status=refusal.status)
    # A page of its own, not base.html: no session, user or database has been touched for this request, and
    # rendering the navigation would touch all three with the very input being refused.
    problems = [refusal.detail] if refusal.detail is not None else []
    problems += [f"{name}: {message}" for name, messages in refusal.fields.items() for message in messages]
    title = "Request too large" if refusal.status == 413 else "Bad request"
    body = render_to_string("portal/refused.html", {"title": title, "status": refusal.status, "problems": problems})
    return HttpResponse(body, status=refusal.status, content_type="text/html; charset=utf-8")


class RequestGuardMiddleware:
    """See the module docstring. Sits near the top of ``MIDDLEWARE``, before sessions and authentication read
    cookies and headers, and before CSRF checking reads a form body."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        try:
            check_request(request)
        except Refusal as refusal:
            return refusal_response(request, refusal)
        response = self.get_response(request)
        if request.path_info.startswith(API_PREFIX) and 400 <= response.status_code < 500:
            return api_error_as_json(response)
        return response


def api_error_as_json(response: HttpResponse) -> HttpResponse:
    """A 4xx under ``/api/`` that Django answered as a page — a URL no route matches (``/api/v1/jobs/1.5/``), a
    bad ``Host`` — as the API's error JSON with the same status; DRF's own errors are JSON already."""
    if response.get("Content-Type", "").startswith("application/json"):
        return response
    detail = "Not found." if response.status_code == 404 else HTTPStatus(response.status_code).phrase
    converted = JsonResponse({"detail": detail}, status=response.status_code)
    for header in ("Allow", "Retry-After", "WWW-Authenticate"):
        if header in response:
            converted[header] = response[header]
    return converted
