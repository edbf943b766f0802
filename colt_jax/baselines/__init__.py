"""The baselines in one room: the re-rankers over features (top-k, MMR, MSD, DPP, Flickr's
order: `rerankers`), UMONS (`umons`), the greedy selection they share with colt-pairs and
expected coverage (`greedy`), the gradient-boosted gbt-pairs (`gbt_pairs`) and its mix with a
relevance model (`gbt_pairs_relevance`), each method versioned for the row cache (`versions`).
It imports data, inputs and plumbing only: the paper's modules, colt-pairs, evaluation and the
reproduction import it, never the reverse."""
