"""Offline training recipes and their model cards; imported by nothing at run time (only the CLI)."""
