"""redist (see DESIGN.md)."""
