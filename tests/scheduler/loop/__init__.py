"""Tests of scheduler/loop/, laid out as the source is."""
