"""Evaluation: metrics (official scorer's rules), run files, the post-processing
baselines, paired significance, and running a method over a split (`methods`)."""
