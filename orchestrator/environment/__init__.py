"""What a bundle records about where it was measured: the source, the host, its tools and the images (record.py)."""
