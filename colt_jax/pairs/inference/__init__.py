"""colt-pairs' inference, extending the paper's (`colt_jax.inference`, which never imports it):
its settings (`pairs_settings`: PairsInferenceSettings, the selection fields), phi's heads over the
tokens in jitted cores (`pairs_cores`), and the Retriever that lists by them (`pairs_retriever`:
PairsRetriever, with an optional relevance model beside phi); `train.method_registry` names
the settings and the Retriever of the method `colt-pairs`, and the paper's Retriever finds them
there by the settings' `METHOD`, so nothing is imported here."""
