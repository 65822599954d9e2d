"""The results format: bundle (manifest, schema check, migrations, resume, archive/verify), atomic writes."""
