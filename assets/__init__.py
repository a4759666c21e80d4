"""Dagster assets, one module per domain: each exposes what it defines (assets, checks, jobs, schedules,
sensors) as one `Definitions` built from the configuration; `focus_dagster.definitions` merges them.
Asset bodies are thin: read inputs, call the core, write through `resources.FocusStorage`, describe."""

import warnings

import dagster as dg

# Partitioned observable sources and partitioned checks are marked beta/preview in Dagster 1.13; they are
# used deliberately, and the warnings would only bury the messages that matter on every load.
warnings.filterwarnings("ignore", category=dg.BetaWarning)
warnings.filterwarnings("ignore", category=dg.PreviewWarning)
