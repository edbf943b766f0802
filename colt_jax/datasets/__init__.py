"""Dataset readers (official MediaEval layouts), category vocabulary, synthetic data."""
