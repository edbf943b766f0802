"""Data: the benchmarks' readers (Div400/Div150Cred official layout, synthetic, your own
judgments, TFDS builders), the category vocabulary, the feature store, extra feature views,
finding a split and its store (`splits`), and topic folds."""
