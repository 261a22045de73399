"""Tests of scheduler/core/sizing/, laid out as the engine is."""
