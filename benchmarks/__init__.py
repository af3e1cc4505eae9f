"""benchmarks (see docs/design.md)."""
