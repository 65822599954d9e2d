"""Pure data models (pydantic v2). Imports nothing that touches the outside world."""
