"""The billing app's writes, one room each (HackSoft services):

- :mod:`billing.services.ledger`: the ledger: allocations' intervals closed exactly once, lost work, the price
  catalog seeded;
- :mod:`billing.services.production_waits`: what production waited for at each scheduling cycle, for the
  procurement advisor.

The ledger's names are re-exported here, where their callers have always imported them.
"""

from billing.services.ledger import (
    LIVE_SETTLE_S,
    PREEMPTION_END_REASONS,
    CloseResult,
    CloseSummary,
    TeamHoldings,
    allocation_units,
    ledger_close_due,
    ledger_close_interval,
    ledger_due_allocation_ids,
    ledger_entries_build,
    price_book_load,
    price_catalog_seed,
)

__all__ = [
    "LIVE_SETTLE_S",
    "PREEMPTION_END_REASONS",
    "CloseResult",
    "CloseSummary",
    "TeamHoldings",
    "allocation_units",
    "ledger_close_due",
    "ledger_close_interval",
    "ledger_due_allocation_ids",
    "ledger_entries_build",
    "price_book_load",
    "price_catalog_seed",
]
