"""Tests of scheduler/gateways/, laid out as the source is."""
