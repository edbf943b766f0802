"""Diagnostics of colt-pairs (beyond the paper), read by the report but choosing nothing:
what its heads predict (`head_quality`), how far better heads could take its list rule
(`headroom`), whether a relevance model beside phi (`relevance_models`) or other signals
(`relevance_signals`) would move it, and whether a longer or larger phi would
(`steps_quality`). `runner` is their one entry (`experiments/diagnose.py --what ...`)."""
