"""The arena report: the study's figures and tables from the metric tables, every number with its metric_id."""
