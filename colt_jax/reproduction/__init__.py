"""The research protocol of the real benchmark (`experiments/reproduce.py`): the rows
(`variants`), one reproduction's configuration (`reproduce_config`), how the rows' models are
trained (`row_training`) and the cache of finished rows (`row_cache`), choices on training
topics (`tuning`, kept as flagfiles by `choice_files`), the official split's stages and k-fold
cross-validation, the report (`report`, `report_sections`, `report_tables`), the results site
and figures, the synthetic demo's table, and the colt-pairs diagnostics (`diagnostics/`)."""
