"""Tests of scheduler/core/model/, laid out as the engine is."""
