"""What every evaluation asset shares: its group in the UI, the resampling settings and the columns a metric
table's version covers."""

import dagster as dg

EVALUATION_GROUP = "evaluation"

# What a metric table's version covers: the numbers, not the run that computed them.
VALUE_COLUMNS = ["metric_id", "value", "ci_low", "ci_high", "n", "n_pos", "reason"]


class MetricsConfig(dg.Config):
    n_resamples: int = 1000
    seed: int = 0
