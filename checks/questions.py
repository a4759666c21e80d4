"""The check of the yes/no questions: none may show the model its label. Evaluated with its asset,
`yes_no_questions`, from the leaks the step found while rendering them."""

import dagster as dg

from checks.conditions import WITH_ITS_ASSET
from resources import layout

NO_LABEL_LEAK = "no_label_leak"


def no_label_leak_spec(datasets: dg.PartitionsDefinition) -> dg.AssetCheckSpec:
    return dg.AssetCheckSpec(
        NO_LABEL_LEAK, asset=layout.YES_NO_QUESTIONS, blocking=True, automation_condition=WITH_ITS_ASSET,
        partitions_def=datasets,  # each dataset's own verdict
        description="No question shows the model a column that defines its label, a file name that may encode "
        "it, or per-image context whose values decide it. A leak fails here and blocks token_probabilities.",
    )


def no_label_leak_result(leaks: list, questions_checked: int, label_columns: list[str]) -> dg.AssetCheckResult:
    """Passed when no leak was found; the leaks and what was checked in the metadata."""
    return dg.AssetCheckResult(
        check_name=NO_LABEL_LEAK, passed=not leaks,
        metadata={"leaks": dg.MetadataValue.json([leak.__dict__ for leak in leaks]),
                  "questions_checked": questions_checked, "label_columns": label_columns},
    )
