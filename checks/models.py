"""The checkpoint audit of every model step: a model whose tensors were not all filled from its checkpoint
must not produce numbers. Evaluated with its asset (image_embeddings, token_probabilities,
adapted_token_probabilities), from the report of the load the step made."""

import dagster as dg

from checks.conditions import WITH_ITS_ASSET

CHECKPOINT_AUDIT = "checkpoint_audit"


def checkpoint_audit_spec(asset: str, partitions: dg.PartitionsDefinition) -> dg.AssetCheckSpec:
    """The audit of one (dataset, model) partition: partitioned like its asset, so that one model's failed load
    blocks that model's outputs only, and another's clean load cannot stand for it at the gates downstream."""
    return dg.AssetCheckSpec(
        CHECKPOINT_AUDIT, asset=asset, blocking=True, automation_condition=WITH_ITS_ASSET, partitions_def=partitions,
        description="Every tensor of the model was filled from its checkpoint (matched / missing / unexpected "
        "counts in the metadata). A partial load fails here and blocks everything downstream.",
    )


def checkpoint_audit_result(report) -> dg.AssetCheckResult:
    """The verdict of a load that succeeded: clean or not, with the counts."""
    audit = report.summary()
    return dg.AssetCheckResult(
        check_name=CHECKPOINT_AUDIT, passed=report.clean,
        metadata={k: audit[k] for k in ("matched", "model_tensors", "missing_count", "unexpected_count",
                                        "ignored_missing_count", "weights_sha256", "checkpoint")},
    )


def checkpoint_load_failed(error: Exception) -> dg.AssetCheckResult:
    """The verdict of a load that was refused (the step then fails with the same error)."""
    return dg.AssetCheckResult(check_name=CHECKPOINT_AUDIT, passed=False, metadata={"error": str(error)})


def checkpoint_not_loaded(why: str) -> dg.AssetCheckResult:
    """The verdict of a step that had no reason to load the model: passed, since no weights produced anything."""
    return dg.AssetCheckResult(check_name=CHECKPOINT_AUDIT, passed=True, metadata={"note": f"no model loaded: {why}"})
