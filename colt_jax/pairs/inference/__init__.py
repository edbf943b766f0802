"""colt-pairs' inference, extending the paper's (`colt_jax.inference`, which never imports it):
its settings (`pairs_settings`: PairsInferenceSettings, the selection fields), phi's heads over the
tokens in jitted cores (`pairs_cores`), and the Retriever that lists by them (`pairs_retriever`:
PairsRetriever, with an optional relevance model beside phi), registered with the paper's
Retriever when imported (pyproject.toml declares it an entry point of `colt_jax.inference`)."""
# Importing any part registers colt-pairs' settings with its Retriever: PairsInferenceSettings
# never meet the paper's Retriever, which would list them by Eq. 6.
from colt_jax.pairs.inference import pairs_retriever  # pylint: disable=unused-import
