"""The API's ``Idempotency-Key`` header (:mod:`jobs.idempotency` has the contract): :func:`idempotent` wraps a
write's view method so that a request carrying the header runs once per key and user, and a retry answers the
first answer again, marked ``Idempotent-Replayed: true`` (Stripe's header). Without the header nothing changes.

The operations that take it are :data:`jobs.api.schema.IDEMPOTENT_OPERATIONS`; the schema documents the header
and the 409/422 there.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any, TypeVar, cast

from django.contrib.auth.models import User
from django.http import QueryDict
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from jobs.idempotency import HEADER, Answer, fingerprint, idempotent_write, key_parse

REPLAYED_HEADER = "Idempotent-Replayed"

View = TypeVar("View", bound=Callable[..., Response])


def idempotent(method: View) -> View:
    """Decorate a DRF view method that writes (module doc). The user is the request's, authenticated by then."""

    @functools.wraps(method)
    def wrapper(self: Any, request: Request, *args: Any, **kwargs: Any) -> Response:
        raw, user = request.headers.get(HEADER), request.user
        if raw is None or not isinstance(user, User):  # anonymous: refused by the view's permissions already
            return method(self, request, *args, **kwargs)
        key = key_parse(raw)
        done: list[Response] = []

        def write() -> Answer:
            response = method(self, request, *args, **kwargs)
            done.append(response)
            # Stored as the client received it: the rendered JSON, read back.
            return Answer(response.status_code, json.loads(JSONRenderer().render(response.data) or b"null"))

        digest = fingerprint(endpoint=f"{request.method} {request.path}", body=_body(request.data))
        outcome = idempotent_write(user=user, key=key, fingerprint=digest, write=write)
        if not outcome.replayed:
            return done[0]
        replay = Response(outcome.answer.body, status=outcome.answer.status)
        replay[REPLAYED_HEADER] = "true"
        return replay

    return cast(View, wrapper)


def _body(data: Any) -> Any:
    """The body as JSON can say it: a form's fields as lists of values, a JSON body as it is."""
    if isinstance(data, QueryDict):
        return {name: data.getlist(name) for name in sorted(data)}
    return data
