"""Grading threshold tables and the study's published numbers, shipped as data (YAML).

Each file carries its source and a caveat; analysis/grading.py loads and validates them.
"""
