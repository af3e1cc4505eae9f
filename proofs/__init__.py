"""proofs (see DESIGN.md)."""
