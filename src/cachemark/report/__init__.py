"""Turning results into things people read: terminal tables, files, charts, thresholds."""
