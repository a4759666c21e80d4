"""Evaluation: linear probes, metrics with bootstrap intervals, fairness and image-quality analyses."""
