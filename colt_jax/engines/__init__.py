"""Candidate search: the exact top-N (`exact`) and the approximate engines (`approximate`:
FAISS HNSW/IVF/IVF-SQ/IVF-PQ, Qdrant) behind one interface, with their parameter tuning."""
