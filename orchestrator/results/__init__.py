"""The results format: schema versions and migrations (schema), the bundle's manifest and resume (manifest),
archive/verify (archive), atomic writes (atomic)."""
