"""Tests of scheduler/core/speedups/, laid out as the engine is."""
