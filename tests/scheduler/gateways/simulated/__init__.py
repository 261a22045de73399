"""Tests of scheduler/gateways/simulated/, laid out as the source is."""
