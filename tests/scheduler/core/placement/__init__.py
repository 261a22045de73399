"""Tests of scheduler/core/placement/, laid out as the engine is."""
