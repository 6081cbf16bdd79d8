"""Stamps in, figures out: per-stream records, histograms and counters; the vocabulary (pure, sync, clock-free)."""
