"""Built-in scenarios (package data)."""
