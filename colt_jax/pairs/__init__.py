"""colt-pairs, beyond the paper: phi's relevance and pair heads turned into a list
(`selection`), a relevance model beside phi (`relevance_model`), and the gradient-boosted pair
baseline (`pairlearner`)."""
