"""Finance pages: the month's chargeback, one team's breakdown, the downloads and the procurement advisor.

Thin edges: parse the query, check who may see what (billing.selectors' scopes), call one selector, render.
Finance and platform admins see every team and the cluster lines; a team lead sees their own teams; anyone
else gets 403, and a team they are not part of is a 404.
"""

from __future__ import annotations

from dataclasses import replace

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from billing import charts
from billing.advisor import AdvisorInputError, TierPrices, breakeven, breakeven_curve, reserved_use_sentence
from billing.cents import report_cents
from billing.exports import JOB_COLUMNS, SUMMARY_COLUMNS, file_name, job_records, summary_records, to_csv, to_xlsx
from billing.forms import AdvisorForm, BreakevenForm, ReportForm
from billing.procurement import PURCHASE_UNIT_GPUS, catalog_prices, procurement_advise, production_wait_advise
from billing.report import Report
from billing.selectors import (
    Scope,
    billing_scope_for_user,
    billing_team_for_user,
    chargeback_history,
    chargeback_report,
    ledger_gpu_models,
    ledger_months,
    scope_label,
)
from teams.models import Team

_XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"


def _scope(request: HttpRequest) -> Scope:
    scope = billing_scope_for_user(user=request.user)
    if scope is None:
        raise PermissionDenied("Billing figures are for finance, platform admins and team leads.")
    return scope


def _team(request: HttpRequest, slug: str | None) -> Team | None:
    if not slug:
        return None
    team, allowed = billing_team_for_user(user=request.user, slug=slug)
    if team is None:
        raise Http404("No such team.")
    if not allowed:
        raise PermissionDenied("Only the team's lead, finance and platform admins see its costs.")
    return team


@login_required
@require_GET
def reports(request: HttpRequest, slug: str | None = None) -> HttpResponse:
    """The month's chargeback (every team for finance, a lead's own teams), or one team's with ``slug``."""
    scope = _scope(request) if slug is None else Scope(all_teams=False)
    team = _team(request, slug)
    now = timezone.now()
    form = ReportForm(request.GET, now=now)
    context: dict[str, object] = {"form": form, "team": team, "months": ledger_months()[:24]}
    if not form.is_valid():
        return render(request, "billing/reports.html", context, status=400)
    month = form.cleaned_data["month"]
    mode = form.cleaned_data.get("mode") or None
    if team is not None:
        scope = Scope(all_teams=False, team_ids=frozenset({team.pk}))
    report = chargeback_report(scope=scope, month=month, now=now, mode=mode, team_id=team.pk if team else None)
    history = chargeback_history(scope=scope, month=month, now=now)
    cents = report_cents(report)
    teams = report.teams()
    for line in teams:
        # The files' team totals (apportioned to the cent: billing.cents), so page and downloads agree.
        line.total_cents = cents.by_team.get(line.slug)
    context.update(
        report=report,
        cents=cents,
        teams=teams,
        query=f"month={report.period.label}&mode={report.mode}" + (f"&team={team.slug}" if team else ""),
        figures={
            "fig-cost-per-team": charts.cost_per_team_over_months(history, finance=report.scope_all),
            "fig-gpu-hours-by-tier": charts.gpu_hours_by_tier(report),
            "fig-guaranteed-vs-borrowed": charts.guaranteed_vs_borrowed(report),
        },
    )
    return render(request, "billing/reports.html", context)


@login_required
@require_GET
def download(request: HttpRequest) -> HttpResponse:
    """``?month=YYYY-MM&file=summary|jobs&format=csv|xlsx[&team=slug][&mode=…]``: the chargeback as a file."""
    scope = _scope(request) if not request.GET.get("team") else Scope(all_teams=False)
    team = _team(request, request.GET.get("team"))
    fmt = request.GET.get("format", "csv")
    kind = request.GET.get("file", "summary")
    problems = []
    if fmt not in ("csv", "xlsx"):
        problems.append(f"format {fmt!r} is not offered: use format=csv or format=xlsx")
    if kind not in ("summary", "jobs"):
        problems.append(f"file {kind!r} is not offered: use file=summary or file=jobs")
    form = ReportForm(request.GET, now=timezone.now())
    if not form.is_valid():
        problems += [f"{field}: {message}" for field, messages in form.errors.items() for message in messages]
    if problems:
        return HttpResponse("\n".join(problems) + "\n", status=400, content_type="text/plain; charset=utf-8")
    if team is not None:
        scope = Scope(all_teams=False, team_ids=frozenset({team.pk}))
    report = chargeback_report(
        scope=scope,
        month=form.cleaned_data["month"],
        now=form.now,
        mode=form.cleaned_data.get("mode") or None,
        team_id=team.pk if team else None,
    )
    return report_file(report, detail=kind == "jobs", fmt=fmt, scope_label=scope_label(scope))


def report_file(report: Report, *, detail: bool, fmt: str, scope_label: str) -> HttpResponse:
    """The report as a CSV or XLSX attachment named after its scope and period (shared with the API)."""
    records, columns = (job_records(report), JOB_COLUMNS) if detail else (summary_records(report), SUMMARY_COLUMNS)
    name = file_name(report, detail=detail, extension=fmt, scope_label=scope_label)
    if fmt == "xlsx":
        body: bytes | str = to_xlsx(records, columns, title=("jobs " if detail else "") + report.period.label)
        response = HttpResponse(body, content_type=_XLSX)
    else:
        response = HttpResponse(to_csv(records, columns), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


@login_required
@require_GET
def advisor(request: HttpRequest) -> HttpResponse:
    """The procurement advisor: a tier mix from the ledger's demand, what production waited for, and colocation
    break-even (finance, admins)."""
    if not _scope(request).all_teams:
        raise PermissionDenied("The procurement advisor is for finance and platform admins.")
    now = timezone.now()
    models = ledger_gpu_models()
    # Only the advisor's own inputs make a submission: a stray ?month= from the report page is a first visit.
    names = set(AdvisorForm.base_fields) | set(BreakevenForm.base_fields)
    data = request.GET if names & set(request.GET) else None
    advisor_form = AdvisorForm(data, gpu_models=models, initial={"history_days": 30, "purchase_unit_gpus": 8})
    breakeven_form = BreakevenForm(data, initial=BreakevenForm.initial_values())
    if data is None:
        # First visit: compute with the defaults, shown in the (unbound) forms.
        advisor_form = AdvisorForm(
            {"gpu_model": models[0] if models else "", "history_days": 30, "purchase_unit_gpus": 8},
            gpu_models=models,
        )
        breakeven_form = BreakevenForm(BreakevenForm.initial_values())
    figures: dict[str, object] = {}
    context: dict[str, object] = {"advisor_form": advisor_form, "breakeven_form": breakeven_form, "figures": figures}
    status = 200
    if advisor_form.is_valid():
        data_ok = advisor_form.cleaned_data
        try:
            prices = None
            overrides = (data_ok["reserved_price"], data_ok["on_demand_price"], data_ok["spot_price"])
            if any(value is not None for value in overrides):
                stated = {
                    tier: float(value)
                    for tier, value in zip(("reserved", "on_demand", "spot"), overrides, strict=True)
                    if value is not None
                }
                # The catalog fills the prices left empty, and is read only when one is.
                prices = (
                    TierPrices(**stated)
                    if len(stated) == len(overrides)
                    else replace(catalog_prices(gpu_model=data_ok["gpu_model"], at=now), **stated)
                )
            result = procurement_advise(
                gpu_model=data_ok["gpu_model"],
                now=now,
                history_days=data_ok["history_days"],
                percentile_q=data_ok["percentile"],
                purchase_unit_gpus=data_ok["purchase_unit_gpus"],
                prices=prices,
                spot_lost_fraction=data_ok["spot_lost_fraction"],
            )
        except AdvisorInputError as exc:
            advisor_form.add_error(None, str(exc))
            status = 400 if data is not None else 200
        else:
            context["mix"] = result
            context["reserved_use"] = reserved_use_sentence(result.advice)
            figures["fig-tier-mix"] = charts.tier_mix(result.advice, start=result.series.start)
    elif data is not None:
        status = 400
    # The purchase unit as given, even when another input of the tier mix is wrong: the two advices share it.
    unit = getattr(advisor_form, "cleaned_data", {}).get("purchase_unit_gpus") or PURCHASE_UNIT_GPUS
    context["production_wait"] = production_wait_advise(now=now, purchase_unit_gpus=unit)
    if breakeven_form.is_valid():
        inputs = breakeven_form.inputs()
        try:
            context["breakeven"] = breakeven(inputs)
            figures["fig-breakeven"] = charts.breakeven_over_utilization(breakeven_curve(inputs))
        except AdvisorInputError as exc:  # the ranges the form did not check (billing.advisor): a form error
            breakeven_form.add_error(None, str(exc))
            status = 400 if data is not None else 200
    elif data is not None:
        status = 400
    return render(request, "billing/advisor.html", context, status=status)
