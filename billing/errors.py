"""Typed errors of the billing services; the edges (pages, API, commands) show the message unchanged.

Every message says what is wrong and what to do about it.
"""

from __future__ import annotations


class BillingError(Exception):
    """Base class of every error the billing app raises on purpose."""


class LedgerConflict(BillingError):
    """Closed ledger entries disagree with the allocation (it ended before an interval already closed).

    The ledger never rewrites a closed entry; an operator must look at the allocation named in the message.
    """


class LedgerInputError(BillingError):
    """An allocation the ledger cannot size or price (an unknown MIG profile, a missing price)."""


class PeriodInvalid(BillingError):
    """A report period that cannot be read (bad month, a month in the future)."""


class AdvisorInputError(BillingError, ValueError):
    """Advisor or break-even inputs that make no sense (negative prices, utilization above 100 %, …)."""
