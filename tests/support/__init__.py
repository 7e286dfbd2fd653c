"""Helpers shared by tests and benchmarks (not shipped in the wheel)."""
