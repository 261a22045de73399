"""Tests of scheduler/core/planning/, laid out as the engine is."""
