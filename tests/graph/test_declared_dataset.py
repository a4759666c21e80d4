"""A dataset of the researcher's own, declared in focus.yaml without code (README "Your own dataset").

The expectations come from the hand-written clinic export (tests/support/clinic_export.py: every row with the task
values the ICDR and VCDR definitions give it, or the reason it must be quarantined), never from the code's
own rule. The module's end-to-end fixture runs `focus demo` on the export and a look-alike of Messidor-2,
with the default model of every interface and a LoRA adapter trained on the clinic.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from focus_dagster.config import parse_config
from focus_dagster.errors import ConfigError, DatasetLayoutError
from tests.support import clinic_export
from tests.support.focus_cli import run_focus
from tests.support.tables import table_views

pytestmark = pytest.mark.heavy(60)  # seconds on a quiet 2-core machine: started first

TASKS = ("any_dr", "referable_dr", "gon")


def declare(tmp_path: Path, entry: str, extra: str = "") -> Path:
    config = tmp_path / "focus.yaml"
    config.write_text("datasets:\n" + entry + extra)
    return config


def parse(config: Path):
    import yaml

    return parse_config(yaml.safe_load(config.read_text()), config.parent / "home", config)


def expected_frame(copies: int = 0) -> pd.DataFrame:
    """The hand-written expectations of every sound row, by image id (`img/<file stem>`)."""
    rows = [(f"img/{row[0].removesuffix('.jpg')}", row[1], row[8], *tasks)
            for row, tasks in clinic_export.rows(copies) if tasks is not None]
    return pd.DataFrame(rows, columns=["image_id", "patient_id", "split_column", *TASKS]).set_index("image_id")


def as_values(series: pd.Series) -> list:
    return [None if pd.isna(v) else int(v) for v in series]


@pytest.fixture()
def clinic(tmp_path):
    root = clinic_export.write_export(tmp_path / "clinic")
    return root, parse(declare(tmp_path, clinic_export.declaration(root)))


# ------------------------------------------------------------------------------------------------ the rows


def test_every_task_value_follows_the_icdr_and_vcdr_definitions(clinic):
    from focus_dagster.datasets import read_dataset
    from focus_dagster.labels import harmonise

    root, _ = clinic
    read = read_dataset("clinic", root)
    result = harmonise("clinic", read.records, read.quarantine, root=root)
    labels = result.labels.set_index("image_id")
    expected = expected_frame()
    assert sorted(labels.index) == sorted(expected.index)
    for task in TASKS:
        assert as_values(labels.loc[expected.index, task]) == [None if pd.isna(v) else int(v) for v in expected[task]], task
    metadata = [tuple(None if pd.isna(v) else v for v in row)
                for row in labels.loc[expected.index, ["age", "sex", "quality"]].itertuples(index=False)]
    assert metadata == clinic_export.METADATA
    assert labels["label_rule"].str.fullmatch(r"clinic\.declared-[0-9a-f]{8}").all()
    assert "cdr >= 0.6" in result.rule.description and "dme" in result.rule.description


def test_out_of_scale_values_are_quarantined_with_row_column_and_value(clinic):
    from focus_dagster.datasets import read_dataset

    root, _ = clinic
    read = read_dataset("clinic", root)
    bad = {f"img/{row[0]}": reason for row, reason in clinic_export.BAD}
    quarantine = read.quarantine.set_index("image_path")
    assert sorted(quarantine.index) == sorted(bad)
    for path, (code, words) in bad.items():
        assert quarantine.at[path, "reason_code"] == code
        assert words in quarantine.at[path, "reason"]
    # The row number is the CSV's: data row k (header excluded) of export.csv.
    table_rows = [f"img/{row[0]}" for row, _ in clinic_export.rows()]
    for path in bad:
        assert quarantine.at[path, "source_row"] == table_rows.index(path) + 1
        assert quarantine.at[path, "source_file"] == "export.csv"
    assert read.accounting_line().startswith("clinic: 18 rows read = 11 kept + 7 quarantined")


def test_the_sql_form_is_built_from_the_declaration_and_agrees_with_the_literal_rows(clinic):
    from focus_dagster.datasets import read_dataset
    from focus_dagster.labels.rule_sql import independent_labels, rules_for

    root, _ = clinic
    read = read_dataset("clinic", root)
    sql = rules_for("clinic")
    assert set(sql) == set(TASKS) and '"cdr"' in sql["gon"] and "0.6" in sql["gon"]
    independent = independent_labels("clinic", read.records).set_index("image_id")
    expected = expected_frame()
    for task in TASKS:
        assert as_values(independent.loc[expected.index, task]) == [None if pd.isna(v) else int(v)
                                                                   for v in expected[task]], task


def test_a_binary_column_task_with_and_without_a_negative_list(tmp_path):
    """{column, positive[, negative]}: listed values, numbers by value and text without case; blank undefined."""
    from focus_dagster.datasets import read_dataset
    from focus_dagster.labels import harmonise
    from focus_dagster.labels.rule_sql import independent_labels

    root = tmp_path / "site"
    (root / "img").mkdir(parents=True)
    cells = ["1", "yes", "0", "no", "", "Yes", "1.0", "maybe"]
    for i in range(len(cells)):
        (root / "img" / f"{i}.jpg").write_bytes(_jpeg())
    pd.DataFrame({"path": [f"img/{i}.jpg" for i in range(len(cells))], "glaucoma": cells}).to_csv(
        root / "labels.csv", index=False)
    for negative, expected, quarantined in [
        ("", [1, 1, 0, 0, None, 1, 1, 0], []),
        (", negative: [0, no]", [1, 1, 0, 0, None, 1, 1], ["img/7.jpg"]),
    ]:
        parse(declare(tmp_path, f"  site: {{root: {root}, labels: labels.csv, image: path, "
                                f"tasks: {{gon: {{column: glaucoma, positive: [1, yes]{negative}}}}}}}\n"))
        read = read_dataset("site", root)
        assert read.quarantine["image_path"].tolist() == quarantined
        labels = harmonise("site", read.records, read.quarantine).labels.sort_values("image_path")
        assert as_values(labels["gon"]) == expected
        sql = independent_labels("site", read.records).set_index("image_id").loc[labels["image_id"]]
        assert as_values(sql["gon"]) == expected


def test_a_seeded_split_keeps_each_patient_on_one_side(tmp_path):
    from focus_dagster.datasets import read_dataset
    from focus_dagster.labels import harmonise

    root = tmp_path / "site"
    (root / "img").mkdir(parents=True)
    n = 60
    for i in range(n):
        (root / "img" / f"{i}.jpg").write_bytes(_jpeg())
    pd.DataFrame({"file": [f"img/{i}.jpg" for i in range(n)], "pid": [f"P{i // 3}" for i in range(n)],
                  "grade": [i % 5 for i in range(n)]}).to_csv(root / "t.csv", index=False)
    parse(declare(tmp_path, f"  site: {{root: {root}, labels: t.csv, image: file, patient: pid, "
                            "tasks: {any_dr: {icdr: grade}}, split: {seeded: 0.5}}\n"))
    read = read_dataset("site", root)
    result = harmonise("site", read.records, read.quarantine)
    sides = result.labels.groupby("patient_id")["split"].nunique()
    assert (sides == 1).all() and len(sides) == n // 3
    assert set(result.labels["split"]) == {"train", "test"}
    assert result.split_method == "seeded" and result.split_report["test_fraction"] == 0.5
    assert result.split_report["grouping"] == "patient_id"


def test_tsv_xlsx_and_cp1252_tables_are_read_with_detected_delimiter_and_encoding(tmp_path):
    from focus_dagster.datasets import read_dataset

    root = tmp_path / "site"
    (root / "img").mkdir(parents=True)
    for i in range(3):
        (root / "img" / f"{i}.jpg").write_bytes(_jpeg())
    frame = pd.DataFrame({"file": [f"img/{i}.jpg" for i in range(3)], "grade": ["0", "2", "4"],
                          "site": ["Zürich", "Genève", "Köln"]})
    frame.to_csv(root / "semi.csv", index=False, sep=";", encoding="cp1252")
    frame.to_csv(root / "tabs.tsv", index=False, sep="\t")
    frame.to_excel(root / "book.xlsx", index=False, sheet_name="export")
    for name in ("semi.csv", "tabs.tsv", "book.xlsx"):
        parse(declare(tmp_path, f"  site: {{root: {root}, labels: {name}, image: file, "
                                "tasks: {referable_dr: {icdr: grade}}}\n"))
        read = read_dataset("site", root)
        assert read.records["site"].tolist() == ["Zürich", "Genève", "Köln"], name
        assert read.records["grade"].tolist() == [0, 2, 4], name


# ----------------------------------------------------------------------------------- bad declarations


@pytest.mark.parametrize("change, message", [
    (("tasks:\n      any_dr: {icdr: dr_grade}", "tasks:\n      any_dr: {icdr: grade}"),
     r"datasets\.clinic\.tasks\.any_dr\.icdr names column 'grade', which export\.csv lacks; its columns: \['file'"),
    (("image: file", "image: patient_id"),
     r"none of the 18 image files that column 'patient_id' \(datasets\.clinic\.image\) names exists under root .*"
     r"check datasets\.clinic\.root"),
    (("labels: export.csv", "labels: export.csv\n    delimiter: ';'"),
     r"datasets\.clinic\.delimiter is ';', but the header splits on ',' into 9 columns.*set delimiter: ','"),
])
def test_a_declaration_that_does_not_fit_the_table_gets_one_clear_error(tmp_path, change, message):
    from focus_dagster.datasets import read_dataset

    root = clinic_export.write_export(tmp_path / "clinic")
    parse(declare(tmp_path, clinic_export.declaration(root).replace(*change)))
    with pytest.raises(DatasetLayoutError, match=message):
        read_dataset("clinic", root)


def test_a_column_blank_in_every_row_is_named(tmp_path):
    from focus_dagster.datasets import read_dataset

    root = clinic_export.write_export(tmp_path / "clinic")
    table = pd.read_csv(root / "export.csv", dtype=str)
    table["cdr"] = ""
    table.to_csv(root / "export.csv", index=False)
    parse(declare(tmp_path, clinic_export.declaration(root)))
    with pytest.raises(DatasetLayoutError, match=r"datasets\.clinic\.tasks\.gon\.vcdr names column 'cdr' of "
                                                 r"export\.csv, which is blank in every one of its 18 rows"):
        read_dataset("clinic", root)


@pytest.mark.parametrize("entry, message", [
    ("  clinic: {root: x, labels: e.csv, image: f, reader: csv, tasks: {any_dr: {icdr: g}}}\n",
     r"datasets\.clinic\.reader: unknown key; allowed: root, labels, image, id, patient, delimiter, encoding"),
    ("  brset: {root: synthetic, reader: csv}\n", r"datasets\.brset\.reader: unknown key; allowed: root"),
    ("  clinic: {root: x, labels: e.csv, image: f, tasks: {gon: {vcdr: c, threshold: high}}}\n",
     r"datasets\.clinic\.tasks\.gon\.threshold: .*number.* \(got 'high'\)"),
    ("  clinic: {root: x, labels: e.csv, image: f, tasks: {gon: {icdr: g}}}\n",
     r"datasets\.clinic\.tasks: .*gon: an ICDR grade is not a glaucoma label"),
    ("  clinic: {root: x, labels: e.csv, tasks: {any_dr: {icdr: g}}}\n", r"datasets\.clinic\.image: required key missing"),
    ("  clinic: {root: x, labels: e.pdf, image: f, tasks: {any_dr: {icdr: g}}}\n",
     r"datasets\.clinic\.labels: 'e\.pdf': the label table is a \.csv, \.tsv, \.txt, \.xlsx, \.xlsm file"),
    ("  clinic: {root: x, labels: e.csv, image: f, tasks: {any_dr: {grade: g}}}\n",
     r"datasets\.clinic\.tasks\.any_dr: a task is \{icdr: <column>"),
    ("  clinic: /data/clinic\n", r"datasets\.clinic is not a published dataset .* so it is declared"),
])
def test_bad_declarations_are_refused_with_their_key_path(tmp_path, entry, message):
    with pytest.raises(ConfigError, match=message):
        parse(declare(tmp_path, entry))


def test_a_declared_dataset_is_never_synthesised_and_is_listed_with_root_counts_and_rule(clinic, tmp_path, monkeypatch,
                                                                                          capsys):
    from focus_dagster.platform.cli import main
    from focus_dagster.config import ensure_dataset_root

    root, config = clinic
    assert ensure_dataset_root(config, "clinic") == root
    assert not (config.synthetic_dir / "clinic").exists()
    monkeypatch.setenv("FOCUS_CONFIG", str(config.source))
    monkeypatch.setenv("FOCUS_HOME", str(tmp_path / "home"))
    assert main(["datasets"]) == 0
    out = capsys.readouterr().out
    assert f"clinic      clinic      {root}" in out
    assert "clinic: 18 rows read = 11 kept + 7 quarantined" in out
    assert re.search(r"rule clinic\.declared-[0-9a-f]{8}: Declared in focus\.yaml", out)
    assert main(["labels", "clinic", "--out", str(tmp_path / "labels.csv")]) == 0
    assert "clinic: 18 records in = 11 labelled + 7 rejected" in capsys.readouterr().out


def test_the_attributes_declared_are_the_ones_coverage_expects(clinic):
    from focus_dagster.labels.coverage import not_applicable_reason, published

    assert published("clinic") == ("age", "sex", "quality")
    assert "focus.yaml declaration" in not_applicable_reason("clinic", "camera")


def test_a_question_showing_a_declared_label_column_is_a_leak(clinic):
    """The columns the declaration reads the tasks from are label columns: a yes/no question that shows one
    (defect 4 of datasets.md, on the user's own data) is refused; one showing the age is not."""
    from focus_dagster.labels.rule_lookup import rule_for
    from focus_dagster.questions import find_leaks, question_book

    book = question_book({"version": "site-1", "datasets": {"clinic": {
        "any_dr": "Graded {dr_grade}. Any diabetic retinopathy? Answer with yes or no only.",
        "gon": "The patient is {age}. Glaucomatous optic neuropathy? Answer with yes or no only."}}})
    rule = rule_for("clinic")
    assert set(rule.label_columns) == {"dr_grade", "dme", "cdr"}
    assert [leak.column for leak in find_leaks(book.question("any_dr", "clinic"), rule)] == ["dr_grade"]
    assert find_leaks(book.question("gon", "clinic"), rule) == []


def test_a_changed_grade_changes_the_release_and_the_rule_id_follows_the_declaration(clinic, tmp_path):
    from focus_dagster.datasets.release import fingerprint_dataset
    from focus_dagster.labels.rule_lookup import rule_for

    root, _ = clinic
    before = fingerprint_dataset("clinic", root).version
    text = (root / "export.csv").read_text()
    (root / "export.csv").write_text(text.replace("img/p01_r.jpg,P01,0,", "img/p01_r.jpg,P01,1,"))
    assert fingerprint_dataset("clinic", root).version != before
    first = rule_for("clinic").id
    parse(declare(tmp_path, clinic_export.declaration(root).replace("threshold: 0.6", "threshold: 0.7")))
    assert rule_for("clinic").id != first


def _jpeg() -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (16, 16), (120, 40, 20)).save(out, format="JPEG")
    return out.getvalue()


# ------------------------------------------------------------------------------- the whole graph, end to end


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """`focus demo` on the clinic export (its literal rows and four copies of the sound ones) and a Messidor-2
    look-alike: the default model of every interface, cross-dataset transfer both ways, fairness and quality,
    a LoRA adapter trained on the clinic, the report."""
    tmp = tmp_path_factory.mktemp("clinic_demo")
    root = clinic_export.write_export(tmp / "clinic", copies=4)
    config = declare(tmp, clinic_export.declaration(root),
                     "synthetic: {per_dataset: 50, scale: 0.04}\nlora: {train_datasets: [clinic], tasks: [any_dr]}\n")
    env = {"FOCUS_HOME": str(tmp / "home"), "FOCUS_CONFIG": str(config)}
    code, out = run_focus(env, "demo")
    assert code == 0, out
    with table_views(tmp / "home") as con:
        metric = con.execute("SELECT metric_id FROM metrics.values WHERE dataset = 'clinic' AND method = "
                             "'linear_probe' AND metric = 'auroc' AND value IS NOT NULL LIMIT 1").fetchone()[0]
    code, trace = run_focus(env, "trace", metric, "--json")
    assert code == 0, trace
    return tmp / "home", root, out, json.loads(trace)


def _query(home: Path, sql: str) -> pd.DataFrame:
    with table_views(home) as con:
        return con.execute(sql).df()


def test_the_graph_labels_every_row_as_written_by_hand(demo):
    home, _, out, _ = demo
    assert re.search(r"clinic +read +62 = kept +55 \+ quarantined +7 \| labelled +55 \(native split\) \| 8/11 checks "
                     r"pass \| warn: referable_implies_any_dr, metadata_coverage, degenerate_tasks", out), out
    labels = _query(home, "SELECT * FROM labels.harmonised WHERE dataset = 'clinic'").set_index("image_id")
    expected = expected_frame(copies=4)
    assert sorted(labels.index) == sorted(expected.index)
    for task in TASKS:
        assert as_values(labels.loc[expected.index, task]) == [None if pd.isna(v) else int(v) for v in expected[task]]
    # The split is the export's column, and it keeps each patient on one side.
    assert labels.loc[expected.index, "split"].tolist() == expected["split_column"].tolist()
    assert (labels.groupby("patient_id")["split"].nunique() == 1).all()
    quarantine = _query(home, "SELECT image_path, reason_code FROM records.quarantine WHERE dataset = 'clinic'")
    assert sorted(map(tuple, quarantine.to_numpy())) == sorted((f"img/{r[0]}", c) for r, (c, _) in clinic_export.BAD)


def test_every_interface_transfer_fairness_quality_robustness_and_lora_reach_the_declared_dataset(demo):
    home, _, out, _ = demo
    methods = _query(home, "SELECT DISTINCT method FROM metrics.values WHERE dataset = 'clinic' AND axis = "
                           "'performance' AND value IS NOT NULL")["method"]
    assert set(methods) >= {"linear_probe", "zero_shot", "yes_no", "yes_no_lora"}
    transfer = _query(home, "SELECT DISTINCT dataset, train_dataset FROM metrics.values WHERE method = 'linear_probe' "
                            "AND dataset <> train_dataset ORDER BY dataset")
    assert list(map(tuple, transfer.to_numpy())) == [("clinic", "messidor_2"), ("messidor_2", "clinic")]
    groups = set(_query(home, "SELECT DISTINCT \"group\" FROM metrics.values WHERE dataset = 'clinic' "
                              "AND axis IN ('fairness', 'quality')")["group"])
    assert {"sex=F", "sex=M"} <= groups and any(g.startswith("quality") for g in groups), sorted(groups)
    domains = _query(home, "SELECT DISTINCT domain, dataset FROM metrics.lora_effects ORDER BY domain")
    assert list(map(tuple, domains.to_numpy())) == [("in_domain", "clinic"), ("out_of_domain", "messidor_2")]
    assert "lora adapter      tiny_llava.clinic.any_dr" in out
    robust = _query(home, "SELECT DISTINCT degradation FROM metrics.robustness WHERE dataset = 'clinic' "
                          "AND metric = 'auroc' AND degraded IS NOT NULL")["degradation"]
    assert len(robust) >= 1, "no degraded AUROC on the declared dataset"
    report = (home / "artifacts" / "reports" / "arena" / "index.html").read_text()
    assert "clinic" in report


def test_a_metric_row_is_traced_back_to_the_csv_file(demo):
    _, root, _, trace = demo
    records = next(link for link in trace["links"] if link["id"] == "dataset_records[clinic]")
    assert records["recorded"]["label_files"] == ["export.csv"] and records["recorded"]["root"] == str(root)
    release = next(link for link in trace["links"] if link["id"] == "dataset_release[clinic]")
    assert release["recorded"]["root"] == str(root)
    labels = next(link for link in trace["links"] if link["id"] == "harmonised_labels[clinic]")
    assert re.fullmatch(r"clinic\.declared-[0-9a-f]{8}", labels["recorded"]["label_rule"])
    assert not trace["stale"]


# ------------------------------------------------------------------------------------ refresh by the sensor


def test_a_changed_grade_in_the_export_is_refreshed_by_the_automation(tmp_path):
    """From nothing the automation builds the clinic's graph; a grade changed in export.csv changes the
    release, and the ticks that follow relabel that image and refresh everything below it, until nothing is
    left unsynced."""
    from assets.datasets import OBSERVE_JOB
    from tests.support.automation_driver import drive, unsynced
    from tests.support.world import world_for

    root = clinic_export.write_export(tmp_path / "clinic", copies=2)
    only_clinic = "\n".join(line for line in clinic_export.declaration(root).splitlines()
                            if not line.startswith("  messidor_2")) + "\n"
    config = parse(declare(tmp_path, only_clinic, "models: [tiny_vit, tiny_clip, tiny_llava]\nlora: {models: []}\n"
                                                  "degradations: false\n"))
    _, defs, instance = world_for(config)

    def refresh(cursor=None):
        assert defs.resolve_job_def(OBSERVE_JOB).execute_in_process(instance=instance).success
        return drive(defs, instance, cursor=cursor)

    built = refresh()
    assert {"dataset_records", "harmonised_labels", "image_embeddings", "metrics", "fairness_metrics"} <= set(
        built.requested())
    assert built.check_verdicts()[("harmonised_labels", "rule_consistency", "clinic")] is True
    assert unsynced(defs, instance) == set()
    export = root / "export.csv"
    export.write_text(export.read_text().replace("img/p01_r.jpg,P01,0,", "img/p01_r.jpg,P01,3,"))
    again = refresh(built.cursor)
    assert {"dataset_records", "harmonised_labels", "predictions", "metrics"} <= set(again.requested())
    assert again.check_verdicts()[("harmonised_labels", "rule_consistency", "clinic")] is True
    assert unsynced(defs, instance) == set()
    with table_views(config.home) as con:
        relabelled = con.execute("SELECT any_dr, referable_dr FROM labels.harmonised "
                                 "WHERE image_id = 'img/p01_r'").fetchone()
    assert relabelled == (1, 1)  # ICDR 3: any DR, and referable
