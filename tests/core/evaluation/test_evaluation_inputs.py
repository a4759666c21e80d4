"""The rules that decide whether the inputs of an evaluation step fit together (focus_dagster/evaluation/inputs.py),
each against the literal sentence or verdict it must give."""

import pandas as pd

from focus_dagster.evaluation import inputs
from focus_dagster.labels.coverage import ATTRIBUTES
from focus_dagster.questions import QuestionBook


def labels(version: str) -> dict:
    return {"asset": "harmonised_labels", "version": version}


def output(labels_version: str, *, weights: str = "w1", audit_clean: bool = True, embeddings: dict | None = None):
    """A model output's stamp as model_output_stamp writes it (probes: with the embeddings they were fit on)."""
    facts = {} if embeddings else {"model": {"weights_sha256": weights, "audit_clean": audit_clean,
                                             "weights_path": "/weights/tiny.safetensors"}}
    stamp = {"asset": "token_probabilities", "inputs": {"labels": labels(labels_version)}, "facts": facts}
    if embeddings:
        stamp["inputs"]["embeddings"] = embeddings
    return stamp


def attributes(labels_version: str, *, usable=None, withheld=None, fault=None) -> dict:
    return {"asset": "group_attributes", "inputs": {"labels": labels(labels_version)},
            "facts": {"usable": usable or {}, "withheld": withheld or {}, "fault": fault}}


def predictions(labels_version: str) -> dict:
    return {"asset": "predictions", "inputs": {"labels": labels(labels_version)}}


# ------------------------------------------------------------------------------------------ model outputs


def test_an_output_from_the_current_labels_by_audited_weights_is_usable():
    assert inputs.unusable_output(output("L2"), labels("L2"), "token_probabilities", "tiny", "brset") is None


def test_an_output_without_lineage_is_refused():
    assert inputs.unusable_output(None, labels("L2"), "token_probabilities", "tiny", "brset") == (
        "token_probabilities tiny/brset was written without lineage (by an earlier version): rematerialise it")


def test_an_output_from_older_labels_is_refused_until_the_refresh_reaches_it():
    assert inputs.unusable_output(output("L1"), labels("L2"), "token_probabilities", "tiny", "brset") == (
        "token_probabilities tiny/brset was computed from labels version L1 of brset, but the labels are now "
        "version L2: rematerialise token_probabilities (the refresh sensor does so once its upstream is current)")


def test_an_output_of_weights_that_failed_their_audit_is_refused():
    assert inputs.unusable_output(output("L2", audit_clean=False), labels("L2"), "token_probabilities", "tiny",
                                  "brset") == ("token_probabilities tiny/brset was computed by weights whose "
                                               "checkpoint audit failed (/weights/tiny.safetensors)")


def test_probes_fit_on_embeddings_of_other_labels_rest_on_no_single_version():
    probes = output("L2", embeddings=output("L1"))
    assert inputs.labels_version_used(probes) is None
    assert inputs.labels_version_used(output("L2", embeddings=output("L2"))) == "L2"
    assert inputs.unusable_output(probes, labels("L2"), "probe_predictions", "enc", "brset").startswith(
        "probe_predictions enc/brset was computed from labels version None of brset")


def test_the_model_of_probes_is_that_of_their_embeddings():
    probes = output("L2", embeddings=output("L2", weights="w9"))
    assert inputs.model_of(probes)["weights_sha256"] == "w9"
    assert inputs.model_of(None) is None


def test_a_missing_output_says_where_to_look():
    assert inputs.not_materialised("zero_shot_scores", "clip", "idrid") == (
        "zero_shot_scores clip/idrid is not materialised (its run failed or a blocking check upstream stopped it: "
        "see the asset in the UI)")


# ------------------------------------------------------------------------------------------- cross-dataset


def cross(embeddings, labels_stamp=labels("B2"), probes=None, present=True):
    probes = probes or output("A1", embeddings=output("A1", weights="w1"))
    return inputs.unusable_cross_embeddings("enc", "brset", "idrid", probes, embeddings, labels_stamp, present)


def test_cross_dataset_embeddings_of_the_current_labels_and_the_probes_weights_are_usable():
    assert cross(output("B2", weights="w1")) is None


def test_cross_dataset_embeddings_are_refused_with_the_reason():
    assert cross(None, present=False) == inputs.not_materialised("image_embeddings", "enc", "idrid")
    assert cross(None) == ("image_embeddings enc/idrid was written without lineage (by an earlier version): "
                           "rematerialise it")
    assert cross(output("B1", weights="w1")) == (
        "image_embeddings enc/idrid was computed from labels version B1, but the labels of idrid are now version B2: "
        "rematerialise it")
    assert cross(output("B2", weights="w2")) == (
        "the probes of enc on brset were fit on embeddings of weights w1, image_embeddings enc/idrid comes from "
        "weights w2: rematerialise the older of the two")


# ------------------------------------------------------------------------------- predictions and labels


def test_predictions_and_labels_of_one_release_fit_together():
    assert inputs.mixed_labels(predictions("L2"), labels("L2"), "brset") is None
    assert inputs.mixed_labels(None, labels("L2"), "brset") is None  # nothing assembled yet: no mix


def test_predictions_of_older_labels_are_refused():
    assert inputs.mixed_labels(predictions("L1"), labels("L2"), "brset") == (
        "the predictions of brset were assembled from labels version L1, but the labels are now version L2: "
        "materialise predictions[brset] first (the refresh sensor does so on its own).")


# ------------------------------------------------------------------------------------- group attributes

MISMATCH = ("the predictions of brset rest on labels version L2, group_attributes[brset] on L1: materialise the "
            "older of the two (the refresh sensor does so on its own).")


def test_attributes_of_other_labels_than_the_predictions_are_refused_by_both_steps_with_one_sentence():
    assert inputs.attributes_mismatch("brset", predictions("L2"), attributes("L1")) == MISMATCH
    assert inputs.attributes_refusal("brset", predictions("L2"), attributes("L1")) == MISMATCH
    usable, reasons = inputs.attribute_verdicts("brset", predictions("L2"), attributes("L1"))
    assert usable == {}
    assert reasons == {column: MISMATCH for column in ATTRIBUTES}


def test_the_metric_tables_refuse_missing_or_failed_attributes():
    assert inputs.attributes_refusal("brset", predictions("L2"), None) == (
        "group_attributes[brset] is not materialised: materialise it (with its checks) first.")
    assert inputs.attributes_refusal("brset", predictions("L2"), attributes("L2", fault="no attribute usable")) == (
        "attributes_usable failed for brset: no attribute usable")
    assert inputs.attributes_refusal("brset", predictions("L2"), attributes("L2")) is None


def test_the_recorded_verdicts_are_read_back_as_recorded():
    stamp = attributes("L2", usable={"sex": 1, "age": 0}, withheld={"age": "attribute_coverage: age is low"})
    assert inputs.recorded_attributes(stamp) == ({"sex": True, "age": False},
                                                 {"age": "attribute_coverage: age is low"})
    assert inputs.recorded_attributes(None) == ({}, {})


def test_a_comparison_gives_each_attribute_its_reason_instead_of_failing():
    stamp = attributes("L2", usable={"sex": True, "age": False, "quality": True, "camera": False},
                       withheld={"age": "attribute_coverage: age is set on 50.0% of the test images (floor 90%)"})
    usable, reasons = inputs.attribute_verdicts("brset", predictions("L2"), stamp)
    assert usable == {"sex": True, "age": False, "quality": True, "camera": False}
    assert reasons == {"age": "attribute_coverage: age is set on 50.0% of the test images (floor 90%)",
                       "camera": "attribute_coverage: camera is below its coverage floor"}
    usable, reasons = inputs.attribute_verdicts("idrid", predictions("L2"), attributes("L2"))
    assert reasons == {a: f"not applicable: idrid does not publish {a} (datasets.md)" for a in ATTRIBUTES}
    assert inputs.attribute_verdicts("brset", predictions("L2"), None) == (
        {}, {column: "group_attributes[brset] is not materialised" for column in ATTRIBUTES})


# ---------------------------------------------------------------------------------------- yes/no questions


def asked(question_ids: dict[str, str], leak: str = "") -> pd.DataFrame:
    return pd.DataFrame([{"image_id": "img1", "task": task, "question_id": qid, "question": "?", "leak": leak}
                         for task, qid in question_ids.items()])


def test_the_registrys_clean_questions_are_asked_in_task_order():
    stored = asked({"gon": "focus-yes-no-1/gon", "any_dr": "focus-yes-no-1/any_dr"})
    assert inputs.questions_refusal(stored, "brset", QuestionBook()) is None
    assert inputs.asked_tasks(stored) == ["any_dr", "gon"]


def test_questions_the_registry_no_longer_asks_are_refused():
    stored = asked({"any_dr": "old-version/any_dr"})
    assert inputs.questions_refusal(stored, "brset", QuestionBook()) == (
        "yes_no_questions for brset holds questions ['old-version/any_dr'], not the registry's "
        "['focus-yes-no-1/any_dr']: materialise yes_no_questions first.")


def test_a_leak_recorded_with_the_questions_or_found_now_is_refused():
    recorded = asked({"any_dr": "focus-yes-no-1/any_dr"}, leak="restates the label")
    assert inputs.questions_refusal(recorded, "brset", QuestionBook()) == (
        "brset: the yes/no questions leak the label (['restates the label']); nothing is scored until the questions "
        "are fixed (`questions:` in focus.yaml) and yes_no_questions passes no_label_leak.")
    book = QuestionBook(version="v2", datasets={"brset": {"any_dr": "Is {any_dr} positive? Answer yes or no."}})
    found = asked({"any_dr": "v2/any_dr/brset"})
    assert inputs.questions_refusal(found, "brset", book) == (
        "brset: the yes/no questions leak the label (['placeholder {any_dr} fills in a column that defines the "
        "labels']); nothing is scored until the questions are fixed (`questions:` in focus.yaml) and "
        "yes_no_questions passes no_label_leak.")
