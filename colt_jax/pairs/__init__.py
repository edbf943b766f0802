"""colt-pairs and the rest of what the paper does not have, extending the paper's modules
without their knowing: phi with query-relative tokens, relevance and pair heads, per-view and
relational tokens (`pairs_phi`), its configuration (`config`: PairsTTCConfig), its heads'
train step (`heads_step`, with its targets in `pair_labels`) and how the trainers build them
(`recipe`), the heads turned into a list (`head_selection`, `selection`), a relevance model
beside phi (`relevance_model`); its
inference (`inference`: settings and a Retriever listing by the heads) extends the paper's
Alg. 2 from a layer above it. Nothing is imported here: the trainers, restore and the
Retriever import what the method `colt-pairs` names by path (`train.method_registry`)."""
