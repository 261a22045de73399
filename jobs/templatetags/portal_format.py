"""Numbers with their units, the same way on every page."""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal

from django import template

register = template.Library()


@register.filter
def gpus(value: float | Decimal | None) -> str:
    """GPU-equivalents: ``3`` → ``3 GPUs``, ``0.4286`` → ``0.43 GPUs``, None → ``—``."""
    if value is None:
        return "—"
    number = float(value)
    text = f"{number:,.0f}" if number == round(number) else f"{number:,.2f}"
    return f"{text} GPU" if number == 1 else f"{text} GPUs"


@register.filter
def gpu_hours(value: float | Decimal | None) -> str:
    if value is None:
        return "—"
    return f"{float(value):,.2f} GPU-h"


@register.filter
def money(value: float | Decimal | None) -> str:
    """Prices and costs are in US dollars (the price catalog's currency). A Decimal is rounded half-even to the
    cent, as the downloads round it (billing.cents); a float through binary would round 0.165 up."""
    if value is None:
        return "—"
    if isinstance(value, Decimal):
        return f"${value.quantize(Decimal('0.01'), rounding=ROUND_HALF_EVEN):,.2f}"
    return f"${float(value):,.2f}"


@register.filter
def seconds(value: float | str | None) -> str:
    """A duration in seconds as ``2 h 5 min``, ``45 s``."""
    if value is None or value == "":
        return "—"
    total = round(float(value))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "min")] if total >= 60 else [(secs, "s")]
    shown = [f"{n} {unit}" for n, unit in parts if n]
    return " ".join(shown[:2]) or "0 s"


@register.filter
def percent_of(part: float | None, whole: float | None) -> float:
    """``part`` as a percentage of ``whole`` capped at 100, for bar widths (0 without a whole)."""
    if not whole or part is None:
        return 0.0
    return round(min(100.0, 100.0 * float(part) / float(whole)), 1)


@register.filter
def words(value: str) -> str:
    """``priority_changed`` → ``Priority changed``."""
    text = str(value).replace("_", " ")
    return text[:1].upper() + text[1:]
