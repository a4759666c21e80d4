"""leaderboard: the top configurations per model family and task, over every metric row."""

import dagster as dg

from assets.automation import GATED_EAGER
from assets.evaluation.shared import EVALUATION_GROUP
from focus_dagster.evaluation.leaderboard import leaderboard_markdown
from resources import FocusStorage, layout

LEADERBOARD_DESCRIPTION = (
    "The leaderboard: the top configurations per model family and task by test AUROC (with interval, ECE and "
    f"metric ids), over everything in `{layout.METRICS}`. Markdown in the metadata, and `{layout.LEADERBOARD_REPORT}`. "
    "Pipeline checks (the built-in seeded toy models, which test the plumbing) are marked † and ranked after the real "
    "models of each method and task, whatever their AUROC; `pipeline_check_models` lists those shown."
)


def pipeline_checks(specs: dict) -> frozenset[str]:
    """The models whose numbers test the plumbing only (`domain: pipeline-check`): the selected ones and the
    catalog's, since a metric row can outlive its model's place in focus.yaml."""
    from focus_dagster.models.catalog import CATALOG

    return frozenset(model for model, spec in {**CATALOG, **specs}.items() if spec.is_pipeline_check)


def leaderboard_asset(with_cross: bool, checks: frozenset[str]):
    deps = [layout.METRICS_ASSET] + ([layout.CROSS_DATASET_METRICS] if with_cross else [])

    @dg.asset(
        deps=deps,
        group_name=EVALUATION_GROUP,
        kinds={"parquet", "markdown"},
        automation_condition=GATED_EAGER,
        description=LEADERBOARD_DESCRIPTION,
    )
    def leaderboard(context: dg.AssetExecutionContext, storage: FocusStorage) -> dg.MaterializeResult:
        table = storage.read_table(layout.METRICS)
        text = leaderboard_markdown(table, top=5, pipeline_checks=checks)
        path, _ = storage.write_artifact(layout.LEADERBOARD_REPORT, lambda partial: partial.write_text(text + "\n"))
        shown = sorted(checks & set(table["model"].dropna()))
        return dg.MaterializeResult(metadata={"leaderboard": dg.MetadataValue.md(text),
                                              "path": dg.MetadataValue.path(str(path)), "metric_rows": len(table),
                                              "pipeline_check_models": dg.MetadataValue.json(shown)})

    return leaderboard
