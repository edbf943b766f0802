"""colt-pairs, beyond the paper: phi extended with relevance and pair heads, token parts and
relational tokens (`phi`), those heads turned into a list
(`selection`), a relevance model beside phi (`relevance_model`), and the gradient-boosted pair
baseline (`pairlearner`)."""
