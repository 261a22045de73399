"""The footprint ``bench loop`` reports: a cycle's own memory peak and the database's size."""

from __future__ import annotations

import pytest

from benchmarks import footprint


def test_the_peak_is_the_cycles_own_after_a_reset() -> None:
    footprint.peak_reset()
    before = footprint.peak_rss_mib()
    block = bytearray(64 * 2**20)  # touched: resident
    for i in range(0, len(block), 4096):
        block[i] = 1
    grown = footprint.peak_rss_mib()
    del block
    footprint.peak_reset()
    after = footprint.peak_rss_mib()
    assert grown >= before + 60
    assert after < grown - 60  # the reset forgot the freed block's peak (Linux's clear_refs)


@pytest.mark.django_db
def test_the_database_size_counts_what_it_holds() -> None:
    assert footprint.database_mib() > 0.1  # the migrated schema alone takes pages
