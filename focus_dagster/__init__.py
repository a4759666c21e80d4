"""focus-dagster: the FOCUS retinal fundus benchmark as one lineage graph of Dagster assets.

The domain core (this package) never imports Dagster, so every reader, rule and metric can be used and
tested on its own; the thin Dagster layer lives in the top-level `assets`, `resources` and `checks`
packages and is wired together in `focus_dagster.definitions`; what runs it (the `focus` command, the demo, the
UI, the instance) is `focus_dagster.platform`.
"""

__version__ = "0.1.0"
