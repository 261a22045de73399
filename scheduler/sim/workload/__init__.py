"""Workload generators and benchmark clusters for the simulator (spec/benchmarks.md B2, B3)."""
