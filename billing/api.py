"""``GET /api/v1/chargeback/?month=YYYY-MM[&detail=jobs][&team=slug][&mode=…][&format=csv]`` for finance systems.

The same figures as the finance page and its downloads: JSON by default, the CSV file with ``format=csv``.
Authentication (session or ``Authorization: Token …``) and permissions are set on the view itself, so the
endpoint does not depend on the global DRF settings. Finance and platform admins read every team; a team
lead reads their own teams; anyone else gets 403, and ``team=`` naming a team they are not part of, 404.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.http import HttpResponse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.exceptions import NotFound, PermissionDenied
from rest_framework.permissions import BasePermission, IsAuthenticated
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from billing.cents import report_cents, to_cents
from billing.exports import decimal_text, job_records, summary_records
from billing.forms import ReportForm
from billing.selectors import Scope, billing_scope_for_user, billing_team_for_user, chargeback_report, scope_label
from billing.views import report_file


class CSVRenderer(BaseRenderer):
    """Lets ``?format=csv`` through content negotiation; the view writes the file itself."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None) -> bytes:
        return str(data).encode()  # only reached for errors; the report itself is an HttpResponse


class CanReadChargeback(BasePermission):
    message = "Billing figures are for finance, platform admins and team leads."

    def has_permission(self, request: Request, view: APIView) -> bool:
        return billing_scope_for_user(user=request.user) is not None or bool(request.query_params.get("team"))


def _json(value: object, column: str = "") -> object:
    """Decimals as strings at their column's places (``billing.exports.decimal_text``): money in cents."""
    return decimal_text(value, column) if isinstance(value, Decimal) else value


class ChargebackAPIView(APIView):
    # The API's own authentication (settings: token first, so a wrong token answers 401 with a WWW-Authenticate
    # header, as API clients expect).
    permission_classes = [IsAuthenticated, CanReadChargeback]
    renderer_classes = [JSONRenderer, CSVRenderer]

    def finalize_response(  # type: ignore[override]  # DRF's stubs say Response; the CSV file is an HttpResponse
        self, request: Request, response: HttpResponse, *args: Any, **kwargs: Any
    ) -> HttpResponse:
        # An error is JSON whatever format was asked for: the CSV renderer would write a Python dict's repr as
        # text/csv, which neither a spreadsheet nor an API client can read.
        if isinstance(response, Response) and response.status_code >= 400:
            request.accepted_renderer = JSONRenderer()
            request.accepted_media_type = JSONRenderer.media_type
        return super().finalize_response(request, response, *args, **kwargs)  # type: ignore[arg-type]  # any HttpResponse, as DRF allows

    @extend_schema(
        summary="The month's chargeback (JSON, or the CSV file with format=csv)",
        parameters=[
            OpenApiParameter(
                "month",
                str,
                required=True,
                # billing.periods.parse_month: year 2000 or later, month 01-12; a month not begun yet is a 400 too.
                pattern=r"^[2-9]\d{3}-(0[1-9]|1[0-2])$",
                description="YYYY-MM, from 2000-01 to this month, e.g. 2026-11.",
            ),
            OpenApiParameter("detail", str, enum=["jobs"], description="jobs: one row per job, GPU model and tier."),
            OpenApiParameter("team", str, description="One team's slug (its lead, finance, platform admins)."),
            OpenApiParameter("mode", str, enum=["chargeback", "showback"]),
            OpenApiParameter("format", str, enum=["json", "csv"]),
        ],
        # The error statuses and their JSON are added to every operation by jobs.api.schema.
        responses={(200, "application/json"): OpenApiTypes.OBJECT, (200, "text/csv"): OpenApiTypes.STR},
    )
    def get(self, request: Request) -> Response | HttpResponse:
        params = request.query_params
        slug = params.get("team")
        scope = billing_scope_for_user(user=request.user)
        team = None
        if slug:
            team, allowed = billing_team_for_user(user=request.user, slug=slug)
            if team is None:
                raise NotFound("No such team.")
            if not allowed:
                raise PermissionDenied("Only the team's lead, finance and platform admins see its costs.")
            scope = Scope(all_teams=False, team_ids=frozenset({team.pk}))
        assert scope is not None  # CanReadChargeback
        form = ReportForm({"month": params.get("month", ""), "mode": params.get("mode", "")}, now=timezone.now())
        errors: dict[str, list[str]] = {}
        if not params.get("month"):
            errors["month"] = ["month is required: write it as YYYY-MM, e.g. 2026-11"]
        elif not form.is_valid():
            errors.update({field: [str(m) for m in messages] for field, messages in form.errors.items()})
        detail = params.get("detail", "")
        if detail not in ("", "jobs"):
            errors["detail"] = [f"detail {detail!r} is not offered: leave it out (summary) or use detail=jobs"]
        if errors:
            return Response(errors, status=400)
        report = chargeback_report(
            scope=scope,
            month=form.cleaned_data["month"],
            now=form.now,
            mode=form.cleaned_data.get("mode") or None,
            team_id=team.pk if team else None,
        )
        if request.accepted_renderer.format == "csv":
            return report_file(report, detail=detail == "jobs", fmt="csv", scope_label=scope_label(scope))
        records = job_records(report) if detail == "jobs" else summary_records(report)
        cents = report_cents(report)
        return Response(
            {
                "period": report.period.label,
                "start": report.period.start,
                "as_of": report.period.as_of,
                "complete": report.period.complete,
                # final: the month is over and every hour of it closed; provisional: running, or still closing.
                "status": report.status,
                "mode": report.mode,
                "idle_cost": "shared" if report.idle_shared else "own-line",
                "currency": "USD",
                "scope": "all-teams" if report.scope_all else "own-teams",
                "rows": [{key: _json(value, key) for key, value in record.items()} for record in records],
                # Money in USD cents, as in the files (billing.cents): the lines total is the rows' total row.
                "lines_total": _json(cents.total, "total_usd"),
                # Included in the totals: hours the ledger has not closed yet (rows with provisional = yes).
                "provisional_total": _json(to_cents(report.provisional_total), "total_usd"),
                "cluster_cost": _json(cents.cluster_cost, "total_usd") if report.scope_all else None,
                "reconciled": report.reconciled if report.scope_all else None,
            }
        )
