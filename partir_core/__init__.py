"""partir_core (see DESIGN.md)."""
