"""Analyses of a key stream or of results: miss-ratio curves (how big must the cache be)."""
