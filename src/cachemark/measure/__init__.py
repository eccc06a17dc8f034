"""Measuring: HDR histograms, per-worker recording, summaries, the environment fingerprint."""
