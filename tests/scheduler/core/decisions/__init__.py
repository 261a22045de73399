"""Tests of scheduler/core/decisions/, laid out as the engine is."""
