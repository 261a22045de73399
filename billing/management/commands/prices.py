"""``manage.py prices seed``: add the missing default GPU prices (dated) of ``docs/gpu-facts.md``."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from billing.services import price_catalog_seed


class Command(BaseCommand):
    help = "Price catalog: `seed` adds the default prices of docs/gpu-facts.md that are missing (never changes a row)."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        actions.add_parser("seed", help="Add the missing default prices (idempotent).")

    def handle(self, *args: Any, **options: Any) -> None:
        created = price_catalog_seed()
        self.stdout.write(f"price catalog: {created} default price(s) added")
