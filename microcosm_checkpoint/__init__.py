"""Checkpointing for jobs that run under Microcosm (docs/checkpointing.md). Standard library only."""
