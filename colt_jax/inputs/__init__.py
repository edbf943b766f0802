"""The input pipeline: from a split and its feature store to what g and phi train on.

candidates (which photos a topic ranks: `pool` or `global`) -> labels (the training
vocabulary, each photo's category, label schemes) -> examples (SCL examples, TTC token
sequences, and the per-step batch samplers). It sits between the data layer
(`colt_jax.data`, `features`, `data`) and the paper's equations (`models`, `scl`,
`augment`, `postprocess`), and imports only downward.
"""
