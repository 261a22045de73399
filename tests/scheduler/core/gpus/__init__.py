"""Tests of scheduler/core/gpus/, laid out as the engine is."""
