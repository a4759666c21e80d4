"""Model comparisons: the pairs of models focus.yaml declares (`compare: [[A, B], ...]`), compared on the same
test images, every axis, as one table; `focus compare A B` computes the same rows for any two models from a
terminal."""

import dagster as dg

from assets.automation import GATED_EAGER
from assets.evaluation import EVALUATION_GROUP, MetricsConfig
from assets.partitions import Registered
from focus_dagster import lineage
from focus_dagster.errors import ConfigError
from focus_dagster.evaluation.comparisons import ComparisonError
from focus_dagster.evaluation.inputs import attribute_verdicts
from focus_dagster.markup import md_text
from focus_dagster.version import code_version
from resources import FocusStorage, layout

COMPARISONS_DESCRIPTION = (
    "Model A against model B on the same test images, for each pair of `compare:` in focus.yaml (DuckDB "
    f"`{layout.COMPARISONS}`): per dataset, task, method and training dataset, the paired bootstrap delta A - B of "
    "AUROC, AUPRC, accuracy (at 0.5 and at each model's Youden threshold), ECE and Brier, and of the max - min "
    "fairness and quality gaps (sex, age median split, image quality), each with a 95% percentile interval, a "
    "two-sided p-value and a Benjamini-Hochberg q-value within the pair and metric. A configuration only one model "
    "has, or scored on other images, is a row with the reason. Every row has a metric_id for `focus trace`, which "
    "follows both prediction sets (and the group attributes of a gap) to their files, labels and weights."
)


def definitions(registered: Registered) -> dg.Definitions:
    """model_comparisons, when focus.yaml declares pairs to compare (none: no asset)."""
    if not registered.compare:
        return dg.Definitions()
    check_pairs(registered.compare, list(registered.specs))
    return dg.Definitions(assets=[_comparisons_asset(registered)])


def check_pairs(pairs, selected: list[str]) -> None:
    """Every model of every pair is a selected model (its predictions exist only then)."""
    for index, pair in enumerate(pairs):
        unknown = [model for model in pair if model not in selected]
        if unknown:
            raise ConfigError(f"focus.yaml: compare[{index}] names {unknown}, which are not selected models; "
                              f"selected: {', '.join(selected)}. Add them under `models:` or fix the ids.")


def _comparisons_asset(registered: Registered):
    @dg.asset(
        deps=[layout.PREDICTIONS, layout.GROUP_ATTRIBUTES],
        group_name=EVALUATION_GROUP,
        kinds={"parquet"},
        automation_condition=GATED_EAGER,
        description=COMPARISONS_DESCRIPTION,
    )
    def model_comparisons(context: dg.AssetExecutionContext, config: MetricsConfig, storage: FocusStorage):
        import pandas as pd

        from focus_dagster.evaluation.comparisons import comparison_rows

        inputs = comparison_inputs(storage, registered.dataset_keys)
        tables = [comparison_rows(inputs.samples, a, b, attributes=inputs.attributes, usable=inputs.usable,
                                  reasons=inputs.reasons, n_resamples=config.n_resamples, seed=config.seed)
                  for a, b in registered.compare]
        table = pd.concat(tables, ignore_index=True).assign(run_id=context.run_id)
        stamp = lineage.stamp(layout.MODEL_COMPARISONS, None, context.run_id, lineage.frame_version(table),
                              code_version=code_version(), inputs=inputs.read)
        storage.replace_table(layout.COMPARISONS, table, stamp=stamp)
        return dg.MaterializeResult(metadata=comparisons_metadata(table))

    return model_comparisons


def comparisons_metadata(table) -> dict:
    """Row counts and the headline deltas (AUROC per pair and configuration) as Markdown, for the UI."""
    defined = table["delta"].notna()
    return {"dagster/row_count": len(table), "defined_rows": int(defined.sum()),
            "significant_rows (q < 0.05)": int((table["q_value"] < 0.05).sum()),
            "auroc": dg.MetadataValue.md(auroc_markdown(table))}


def auroc_markdown(table) -> str:
    from focus_dagster.evaluation.leaderboard import fmt

    rows = table[(table["metric"] == "auroc") & (table["group"] == "")]
    if rows.empty:
        return "no comparison"
    lines = ["| A | B | dataset | task | method | A AUROC | B AUROC | delta (95% CI) | q | reason | metric_id |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows.itertuples():  # names and reasons escaped: they carry model ids and dataset keys of the user's
        names = " | ".join(md_text(name) for name in (r.model_a, r.model_b, r.dataset, r.task, r.method))
        lines.append(f"| {names} | {fmt(r.a)} | {fmt(r.b)} | "
                     f"{fmt(r.delta)} ({fmt(r.ci_low)} to {fmt(r.ci_high)}) | {fmt(r.q_value)} | "
                     f"{md_text(r.reason or '')} | `{r.metric_id}` |")
    return "\n".join(lines)


class ComparisonInputs:
    """The predictions and group attributes of every dataset, as `comparison_rows` takes them, with the stamps
    of what was read (`read`: `asset[partition]` -> stamp)."""

    def __init__(self, samples, attributes, usable: dict, reasons: dict, read: dict):
        self.samples, self.attributes, self.usable, self.reasons, self.read = samples, attributes, usable, reasons, read


def comparison_inputs(storage: FocusStorage, datasets: list[str]) -> ComparisonInputs:
    """Read each dataset's predictions and group attributes, each from the commit of its current stamp."""
    import pandas as pd

    samples, attributes, usable, reasons, read = [], [], {}, {}, {}
    for dataset in datasets:
        (rows,), predictions_stamp = storage.read_stamped([(layout.SAMPLES, dataset)], layout.PREDICTIONS, dataset)
        if predictions_stamp is None:
            continue
        read[f"predictions[{dataset}]"] = predictions_stamp
        samples.append(rows)
        (groups,), attributes_stamp = storage.read_stamped([(layout.ATTRIBUTES, dataset)], layout.GROUP_ATTRIBUTES,
                                                           dataset)
        usable[dataset], reasons[dataset] = attribute_verdicts(dataset, predictions_stamp, attributes_stamp)
        if attributes_stamp is not None:
            read[f"group_attributes[{dataset}]"] = attributes_stamp
            attributes.append(groups.assign(dataset=dataset, attributes_lineage_id=lineage.stamp_id(attributes_stamp)))
    if not samples:
        raise ComparisonError("no predictions yet: materialise `predictions` for at least one dataset first (the "
                              "demo does, or select it in the UI).")
    return ComparisonInputs(pd.concat(samples, ignore_index=True),
                            pd.concat(attributes, ignore_index=True) if attributes else None, usable, reasons, read)
