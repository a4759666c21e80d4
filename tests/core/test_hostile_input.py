"""Faults and hostile input, tried as an operator would: a name in focus.yaml that is a path, a path that leads
out of its store, and markup in a model id or a dataset value reaching a Markdown or HTML output.

Every expectation is a literal (the pattern, the escaped text), never the code's own helper."""

from __future__ import annotations

import json
import os
import re
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from focus_dagster.config import parse_config
from focus_dagster.datasets.registry import register_declared
from focus_dagster.errors import ConfigError, FocusError

# The pattern README states for ids of models, questions versions and the names lists refer to.
SAFE_NAME = r"^[A-Za-z0-9][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*$"
DATASET_KEY = r"^[a-z][a-z0-9_]*$"
HOSTILE = "<img src=x onerror=alert(1)>"
ESCAPED = "&lt;img src=x onerror=alert(1)&gt;"
OWN_MODEL = {"family": "timm", "interface": "vm", "domain": "general", "source": "local"}


@pytest.fixture(autouse=True)
def no_declared_datasets_left_behind():
    """parse_config registers the declared datasets of the file for the process: unregister them after."""
    yield
    register_declared({})


def _refused(document) -> str:
    with pytest.raises(ConfigError) as raised:
        parse_config(document, Path("/tmp/home"))
    return str(raised.value)


# ---------------------------------------------------------------------------------- a name is not a path


BAD_NAMES = ["../../../../ESCAPED", "a/b", "a\\b", "..", ".hidden", "a..b", "trailing.", "two words", "tab\there",
             "line\n", "nul\x00", HOSTILE, "x" * 101, "é"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_model_id_that_is_not_a_plain_name_is_refused_with_its_key_path_value_and_the_pattern(name):
    message = _refused({"models": [{"id": name, **OWN_MODEL}]})
    assert message.startswith("focus.yaml: models.0.id: ") and repr(name) in message and SAFE_NAME in message


def test_the_escaping_model_of_the_report_is_refused_in_every_form_and_every_list_that_names_it():
    bad = "../../../../ESCAPED"
    assert f"models.0: must be a plain name" in _refused({"models": [bad]})
    assert "lora.models.0: must be a plain name" in _refused({"lora": {"models": [bad]}})
    assert "compare.0.1: must be a plain name" in _refused({"compare": [["tiny_vit", bad]]})
    assert "models.0.pretrained_on.0: must be a plain name" in _refused(
        {"models": [{"id": "mine", **OWN_MODEL, "pretrained_on": [bad]}]})


def test_a_questions_version_or_dataset_that_is_not_a_plain_name_is_refused():
    tasks = {"gon": "Is the optic disc glaucomatous? Answer with yes or no only."}
    message = _refused({"questions": {"version": "../v2", "tasks": tasks}})
    assert "questions.version: must be a plain name" in message and "'../v2'" in message and SAFE_NAME in message
    message = _refused({"questions": {"version": "v2", "datasets": {"../brset": tasks}}})
    assert "questions.datasets.../brset: must be a plain name" in message


@pytest.mark.parametrize("key", ["../clinic", "clinic\n", "Clinic", "_clinic", "cl inic"])
def test_a_declared_dataset_key_that_is_not_a_plain_key_is_refused_with_the_pattern(key):
    declaration = {"root": "/data/clinic", "labels": "export.csv", "image": "file",
                   "tasks": {"any_dr": {"icdr": "dr_grade"}}}
    message = _refused({"datasets": {key: declaration}})
    assert f"datasets.{key}: dataset key {key!r}" in message and DATASET_KEY in message


@pytest.mark.parametrize("name", ["tiny_vit", "retfound_mae_natureCFP", "messidor_2", "test-flair", "qwen2.5_vl_7b",
                                  "site-2026-1", "M1", "x" * 100])
def test_plain_names_of_every_existing_form_are_accepted(name):
    config = parse_config({"models": [{"id": name, **OWN_MODEL}], "compare": [[name, "other"]],
                           "questions": {"version": name, "tasks": {"gon": "Glaucoma? Answer yes or no."}}},
                          Path("/tmp/home"))
    assert config.models[0]["id"] == name


def test_the_json_schema_states_the_pattern_so_an_editor_refuses_the_same_names():
    import jsonschema

    from focus_dagster.config_schema import focus_yaml_schema

    validator = jsonschema.Draft202012Validator(focus_yaml_schema())
    for document in ({"models": ["../x"]}, {"models": [{"id": "a/b"}]}, {"lora": {"models": [".hidden"]}},
                     {"questions": {"version": "v 2"}}, {"compare": [["a", "b/c"]]}):
        assert list(validator.iter_errors(document)), document
    assert not list(validator.iter_errors({"models": ["tiny_vit", {"id": "qwen2.5_vl_7b"}], "compare": [["a", "b"]],
                                           "questions": {"version": "site-1"}}))


def test_every_catalog_id_is_a_plain_name():
    from focus_dagster.models.catalog import CATALOG

    assert [model for model in CATALOG if not re.fullmatch(SAFE_NAME, model)] == []


# ------------------------------------------------------------------------- a path stays inside its store


def test_a_path_that_resolves_outside_its_root_is_refused(tmp_path):
    from focus_dagster.files import PathOutsideRootError, confined

    root = tmp_path / "artifacts"
    root.mkdir()
    assert confined(root, "embeddings/tiny_vit/brset.parquet") == root / "embeddings/tiny_vit/brset.parquet"
    for rel in ("embeddings/../../../ESCAPED/brset.parquet", "../outside", str(tmp_path / "elsewhere")):
        with pytest.raises(PathOutsideRootError) as raised:
            confined(root, rel, "artifact")
        assert str(root.resolve()) in str(raised.value) and "outside" in str(raised.value)
    assert issubclass(PathOutsideRootError, FocusError)


def test_a_link_inside_the_root_that_leads_out_is_refused_and_a_linked_root_is_not(tmp_path):
    from focus_dagster.files import PathOutsideRootError, confined

    root, outside = tmp_path / "artifacts", tmp_path / "outside"
    root.mkdir(), outside.mkdir()
    os.symlink(outside, root / "embeddings")
    with pytest.raises(PathOutsideRootError, match="embeddings"):
        confined(root, "embeddings/tiny_vit/brset.parquet")
    linked = tmp_path / "linked_home"
    os.symlink(root, linked)  # the whole store on another disk, linked: inside it still
    assert confined(linked, "probes/a.npz") == linked / "probes/a.npz"


def test_the_artifact_store_refuses_a_model_output_path_that_leads_out_of_it(tmp_path):
    """The paths of embeddings, probes and probe predictions of a model id such as '../../../../ESCAPED'."""
    from focus_dagster.files import PathOutsideRootError
    from resources import layout
    from resources.storage import FocusStorage

    storage = FocusStorage(tables_url=str(tmp_path / "tables"), artifacts_dir=str(tmp_path / "home" / "artifacts"))
    for files in (layout.EMBEDDINGS, layout.PROBES, layout.PROBE_SCORES):
        with pytest.raises(PathOutsideRootError):
            storage.artifact_path(files.file("../../../../ESCAPED", "brset"))
    with pytest.raises(PathOutsideRootError):
        storage.write_parquet(layout.EMBEDDINGS.file("../../ESCAPED", "brset"), pd.DataFrame({"a": [1]}))
    assert not (tmp_path / "ESCAPED").exists() and not (tmp_path / "home" / "ESCAPED").exists()


def test_a_model_cache_folder_stays_in_the_model_cache(tmp_path):
    from focus_dagster.files import PathOutsideRootError
    from focus_dagster.models.selection import resolve_models

    with pytest.raises(PathOutsideRootError):  # an id that reached the models layer without the schema
        resolve_models([{"id": "../../ESCAPED", "family": "tiny_vit", "interface": "vm", "domain": "pipeline-check",
                         "source": "local"}], tmp_path / "models")


# ------------------------------------------------------------------------------- markup stays text


def _cells(line: str) -> list[str]:
    """The cells of a Markdown table row, split at the pipes that are not escaped."""
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def _no_raw_markup(text: str) -> None:
    assert "<img" not in text and "onerror=alert(1)>" not in text, text


METRIC_COLUMNS = ["model", "dataset", "task", "method", "train_dataset", "metric", "group", "value", "ci_low",
                  "ci_high", "metric_id"]


def test_the_leaderboard_shows_a_hostile_model_id_as_text_in_its_own_cell():
    from focus_dagster.evaluation.leaderboard import cross_matrix_markdown, leaderboard_markdown

    table = pd.DataFrame([(HOSTILE, "brset", "any_dr", "linear_probe", "brset", "auroc", "", 0.8, 0.7, 0.9, "m-1"),
                          ("a|b", "brset", "any_dr", "linear_probe", "brset", "auroc", "", 0.7, 0.6, 0.8, "m-2"),
                          (HOSTILE, "idrid", "any_dr", "linear_probe", "brset", "auroc", "", 0.6, 0.5, 0.7, "m-3")],
                         columns=METRIC_COLUMNS)
    board = leaderboard_markdown(table)
    _no_raw_markup(board)
    rows = [_cells(line) for line in board.splitlines()[2:]]
    assert [row[2] for row in rows] == [ESCAPED, "a\\|b", ESCAPED] and {len(row) for row in rows} == {8}
    matrix = cross_matrix_markdown(table[table["dataset"] == "idrid"])
    _no_raw_markup(matrix)
    assert _cells(matrix.splitlines()[2])[0] == ESCAPED


def test_the_records_preview_shows_a_hostile_camera_and_column_name_as_text():
    from assets.datasets import _preview

    records = pd.DataFrame({"image_id": ["img1", "img2"], "camera": [HOSTILE, "Canon | CR-2\n# heading"],
                            "<b>note</b>": ["[link](javascript:alert(1))", "`code`"]})
    preview = _preview(records)
    _no_raw_markup(preview)
    lines = preview.splitlines()
    assert len(lines) == 4 and "<b>" not in preview and not re.search(r"(?<!\\)\]\(", preview)  # no link
    assert _cells(lines[0]) == ["image_id", "camera", "&lt;b&gt;note&lt;/b&gt;"]
    assert _cells(lines[2])[1] == ESCAPED and _cells(lines[3])[1] == "Canon \\| CR-2 # heading"
    assert _cells(lines[2])[2] == "\\[link\\](javascript:alert(1))" and _cells(lines[3])[2] == "\\`code\\`"


def test_comparisons_questions_and_rule_previews_show_user_text_as_text():
    from assets.comparisons import auroc_markdown
    from assets.labels import labels_metadata
    from assets.mllm import _questions_table

    comparison = pd.DataFrame([{"metric": "auroc", "group": "", "model_a": HOSTILE, "model_b": "b", "dataset": "brset",
                                "task": "gon", "method": "linear_probe", "a": 0.8, "b": 0.7, "delta": 0.1,
                                "ci_low": 0.0, "ci_high": 0.2, "q_value": 0.5, "reason": "x|y", "metric_id": "c-1"}])
    text = auroc_markdown(comparison)
    _no_raw_markup(text)
    assert _cells(text.splitlines()[2])[0] == ESCAPED and _cells(text.splitlines()[2])[9] == "x\\|y"
    question = SimpleNamespace(task="gon", id="site-1/gon", text=f"Is it {HOSTILE}? | yes or no")
    text = _questions_table([question])
    _no_raw_markup(text)
    assert _cells(text.splitlines()[2])[2] == f"Is it {ESCAPED}? \\| yes or no"
    result = SimpleNamespace(labels=pd.DataFrame(), rule=SimpleNamespace(id="clinic.declared-1", description=HOSTILE),
                             split_method="seeded", split_source=None, split_report={},
                             positives_by_split=lambda: {}, records_in=0, rejects=pd.DataFrame())
    rule = labels_metadata(result)["rule"].value
    _no_raw_markup(rule)
    assert rule == f"**clinic.declared-1**: {ESCAPED}"


class _Elements(HTMLParser):
    """Every element of a page with its attributes, and its text (with the elements it is inside)."""

    def __init__(self):
        super().__init__()
        self.elements, self.text, self.open, self.placed = [], [], [], []

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))
        self.open.append(tag)

    def handle_endtag(self, tag):
        if tag in self.open:
            del self.open[len(self.open) - 1 - self.open[::-1].index(tag):]

    def handle_data(self, data):
        self.text.append(data)
        self.placed.append((tuple(self.open), data))

    def text_in(self, tag: str) -> list[str]:
        """The text inside `tag` elements."""
        return [data for path, data in self.placed if tag in path]


def test_the_arena_report_shows_hostile_model_ids_and_header_text_as_text():
    from focus_dagster.report.arena import ModelInfo
    from focus_dagster.report.build import ReportInputs, build_report, headline_markdown

    rows = []
    for model, value in ((HOSTILE, 0.9), ("enc_o", 0.6)):
        for metric, number in (("auroc", value), ("ece", 0.1)):
            rows.append({"metric_id": f"m-{len(rows)}", "model": model, "dataset": "brset", "task": "any_dr",
                         "method": "linear_probe", "train_dataset": "brset", "metric": metric, "group": "",
                         "axis": "performance" if metric == "auroc" else "calibration", "value": number,
                         "ci_low": None, "ci_high": None, "n": 40, "n_pos": 12, "reason": None, "partition": "brset"})
    models = {HOSTILE: ModelInfo("vm", "general"), "enc_o": ModelInfo("vm", "ophthalmic")}
    samples = pd.DataFrame(columns=["model", "dataset", "task", "method", "train_dataset", "split", "score", "label"])
    # The lineage of every number, with hostile values where a stamp holds users' text (a partition, a fact).
    hostile_link = {"id": f"dataset_records[{HOSTILE}]", "link": "records", "asset": "dataset_records",
                    "partition": HOSTILE, "version": "v1", "run": None, "recorded": {"root": f"</script>{HOSTILE}"},
                    "inputs": [], "changed": [f"<!--{HOSTILE}"], "stale": True}

    def chains(ids):
        return {"schema": 1, "links": {"k1": hostile_link},
                "metrics": {i: {"value": 0.9, "ci": [None, None], "reason": None,
                                "link": {"id": f"metric:{i}", "link": "metric", "asset": "metrics", "partition": HOSTILE,
                                         "version": None, "run": None, "recorded": {"model": HOSTILE}, "inputs": ["k1"],
                                         "changed": [], "stale": False}} for i in ids}}

    report = build_report(ReportInputs(pd.DataFrame(rows), pd.DataFrame(), None, models, ["brset"],
                                       lambda datasets: samples, header=[f"tables {HOSTILE}"], chains=chains))
    page = _Elements()
    page.feed(report.html)
    handlers = [(tag, name) for tag, attrs in page.elements for name in attrs if name.lower().startswith("on")]
    assert handlers == []
    tags = [tag for tag, _ in page.elements]
    # The figures are inline SVG, whose text (the model ids of legends and labels) is the page's own text.
    assert tags.count("svg") >= 5 and "img" not in tags and "foreignobject" not in tags
    # One script, inline, the page's own: the hostile id is in a row's data attribute, never in code; the lineage
    # is data (JSON, never run), its `<`, `>` and `&` escaped so that no value ends the block, and reads back whole.
    scripts = [attrs for tag, attrs in page.elements if tag == "script"]
    assert scripts == [{"type": "application/json", "id": "spider-data"}, {"type": "application/json", "id": "lineage"},
                       {}]
    spider, data, code = page.text_in("script")
    assert HOSTILE not in code and "alert" not in code
    assert "<" not in data and ">" not in data and HOSTILE not in data
    # The spider picker's configurations too: escaped as data, the hostile id read back whole as a label.
    assert "<" not in spider and ">" not in spider
    assert any(HOSTILE in c["label"] for c in json.loads(spider)["configurations"])
    assert json.loads(data)["links"]["k1"] == hostile_link and json.loads(data) == json.loads(json.dumps(report.lineage))
    assert any(attrs.get("data-model") == HOSTILE for tag, attrs in page.elements if tag == "tr")
    text = "".join(page.text)
    assert any(HOSTILE in part for part in page.text_in("svg")), "the hostile id is drawn, as text"
    assert f"tables {HOSTILE}" in text and text.count(HOSTILE) >= 2  # the header and a table cell, as text
    _no_raw_markup(headline_markdown(report))
