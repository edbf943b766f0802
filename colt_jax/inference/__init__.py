"""Inference (Alg. 2): the Retriever over g, phi and a candidate engine, and model
directories."""
