"""benchmarks (see DESIGN.md)."""
