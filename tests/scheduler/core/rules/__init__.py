"""Tests of scheduler/core/rules/, laid out as the engine is."""
