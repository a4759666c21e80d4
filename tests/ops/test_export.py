"""`focus export` on a materialised pipeline: the files against the tables read directly, the manifest against
the store's lineage and the files' own hashes, filters, traceability of an exported metric id, clear errors."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
from contextlib import contextmanager, redirect_stderr, redirect_stdout

import duckdb
import pandas as pd
import pyarrow.parquet as pq
import pytest

from focus_dagster import lineage
from focus_dagster.platform.cli import main
from tests.support.tables import query
from tests.graph.test_evaluation_assets import world  # noqa: F401 (the materialised pipeline this module reads)

DEFAULT_FILES = {"metrics.csv": "metrics.values", "predictions.csv": "predictions.samples",
                 "unavailable.csv": "predictions.unavailable"}


def focus(config, *argv: str) -> tuple[int, str, str]:
    """`focus ARGV` as a user runs it on this FOCUS_HOME: exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch, redirect_stdout(out), redirect_stderr(err):
        patch.setattr("focus_dagster.config.load_config", lambda environ=None: config)
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def exported(world, tmp_path_factory):  # noqa: F811
    """The default export, as CSV: (config, folder, manifest, what it printed)."""
    config = world[0]
    folder = tmp_path_factory.mktemp("export") / "paper"
    code, out, err = focus(config, "export", "--out", str(folder))
    assert code == 0, err
    return config, folder, json.loads((folder / "manifest.json").read_text()), out


@pytest.fixture(scope="module")
def filtered(world, tmp_path_factory):  # noqa: F811
    """brset and tiny_clip only, as Parquet, with a table that has no model column."""
    config = world[0]
    folder = tmp_path_factory.mktemp("export") / "brset-clip"
    code, _, err = focus(config, "export", "--out", str(folder), "--format", "parquet", "--tables",
                         "metrics,predictions", "unavailable", "labels", "--datasets", "brset", "--models", "tiny_clip")
    assert code == 0, err
    return config, folder, json.loads((folder / "manifest.json").read_text())


def comparable(frame: pd.DataFrame) -> pd.DataFrame:
    """Every value as text (null and '' alike as ''; numbers as floats; booleans lower case), rows sorted: how
    a file read back and a table read directly are compared, whatever types each reader gives a column."""
    def text(value) -> str:
        if value is None or (isinstance(value, float) and value != value) or value is pd.NA:
            return ""
        if isinstance(value, (bool,)) or type(value).__name__ == "bool_":
            return str(bool(value)).lower()
        if isinstance(value, (int, float)) or type(value).__module__ == "numpy":
            return repr(float(value))
        return str(value)

    shown = frame.astype(object).map(text)
    return shown.sort_values(list(shown.columns)).reset_index(drop=True)


def read_csv_like(path, reference: pd.DataFrame) -> pd.DataFrame:
    """An exported CSV with pandas, text columns read as text (an image id '00012' stays '00012'), numbers to the
    last bit (pandas' default parser may round the last digit of the shortest decimal the file writes)."""
    text = [column for column, dtype in reference.dtypes.items() if dtype == object]
    return pd.read_csv(path, dtype={column: str for column in text}, float_precision="round_trip")


def test_the_default_export_holds_every_result_row_with_all_its_columns(exported):
    config, folder, manifest, printed = exported
    assert sorted(p.name for p in folder.iterdir()) == sorted([*DEFAULT_FILES, "manifest.json"])
    # this pipeline trains no adapter, declares no comparison and scores no degradation
    assert manifest["not_written"] == ["lora_effects", "lora_summary", "comparisons", "robustness",
                                       "robustness_summary"]
    assert "lora_effects, lora_summary, comparisons, robustness, robustness_summary" in printed
    for name, table in DEFAULT_FILES.items():
        reference = query(config, f"SELECT * FROM {table}")
        exported_rows = read_csv_like(folder / name, reference)
        assert list(exported_rows.columns) == list(reference.columns), name
        assert len(exported_rows) == len(reference) == manifest["files"][name]["rows"], name
        pd.testing.assert_frame_equal(comparable(exported_rows), comparable(reference), obj=name)
        assert f"{name:<22} {len(reference):>9} rows  {table}" in printed
    metrics = pd.read_csv(folder / "metrics.csv")
    for column in ("metric_id", "ci_low", "ci_high", "reason", "lineage_id", "release_version", "labels_version",
                   "weights_sha256", "code_version", "run_id", "partition"):
        assert metrics[column].notna().any(), column


def test_whole_set_rows_have_a_null_group_in_the_files(exported, filtered):
    config, folder, _, _ = exported
    whole = query(config, "SELECT count(*) AS n FROM metrics.values WHERE \"group\" = ''")["n"][0]
    assert whole > 0
    # Read so that a quoted empty string stays a string: the file must hold nulls, not ''.
    with duckdb.connect() as con:
        groups = con.execute("SELECT count(*) FILTER (WHERE \"group\" IS NULL), count(*) FILTER (WHERE \"group\" = '') "
                             "FROM read_csv(?, allow_quoted_nulls = false, all_varchar = true)",
                             [str(folder / "metrics.csv")]).fetchone()
    assert groups == (whole, 0)
    config, folder, _ = filtered
    table = pq.read_table(folder / "metrics.parquet").to_pandas()
    reference = query(config, "SELECT metric_id, \"group\" FROM metrics.values WHERE dataset = 'brset' AND "
                              "model = 'tiny_clip'")
    merged = table[["metric_id", "group"]].merge(reference, on="metric_id", suffixes=("", "_table"))
    assert len(merged) == len(reference)
    assert (merged["group"].isna() == (merged["group_table"] == "")).all()
    assert merged["group"].isna().any() and merged["group"].notna().any()
    assert (merged.dropna()["group"] == merged.dropna()["group_table"]).all()


def test_filters_keep_the_rows_of_the_datasets_and_models_named(filtered):
    config, folder, manifest = filtered
    for name, table in (("metrics", "metrics.values"), ("predictions", "predictions.samples"),
                        ("unavailable", "predictions.unavailable")):
        reference = query(config, f"SELECT * FROM {table} WHERE dataset = 'brset' AND model = 'tiny_clip'")
        rows = pq.read_table(folder / f"{name}.parquet").to_pandas()
        if "group" in reference:
            reference["group"] = reference["group"].replace("", None)
        assert len(rows) == len(reference) == manifest["files"][f"{name}.parquet"]["rows"]
        pd.testing.assert_frame_equal(comparable(rows), comparable(reference), obj=name)
        assert manifest["files"][f"{name}.parquet"]["filtered_by"] == ["dataset", "model"]
    # A cross-dataset row is kept by the dataset it was evaluated on, whatever it was trained on.
    metrics = pq.read_table(folder / "metrics.parquet").to_pandas()
    cross = metrics[metrics["partition"] == "cross"]
    assert len(cross) and (cross["train_dataset"] != "brset").all()
    # Labels have no model column: every brset label row, not filtered by model.
    labels = pq.read_table(folder / "labels.parquet").to_pandas()
    assert len(labels) == query(config, "SELECT count(*) AS n FROM labels.harmonised WHERE dataset = 'brset'")["n"][0]
    assert manifest["files"]["labels.parquet"]["filtered_by"] == ["dataset"]
    assert manifest["filters"] == {"tables": ["metrics", "predictions", "unavailable", "labels"],
                                   "datasets": ["brset"], "models": ["tiny_clip"]}


def writer(table: str, partition: str) -> tuple[str, str]:
    """The asset partition that writes a table partition, as the graph is drawn (README, "The graph")."""
    if partition == "cross":
        return "cross_dataset_metrics", "cross"
    if table == "labels.harmonised":
        return "harmonised_labels", partition
    if table == "metrics.values":
        dataset, _, axis = partition.partition("|")
        return (f"{axis}_metrics" if axis else "metrics"), dataset
    return "predictions", partition


def partitions_read(config, table: str, which: str) -> set[str]:
    """The table partitions holding the rows an export of `which` keeps, read from the table directly."""
    column = "dataset" if table == "labels.harmonised" else "partition"
    where = "" if which == "exported" else " WHERE dataset = 'brset'" + (
        "" if table == "labels.harmonised" else " AND model = 'tiny_clip'")
    return set(query(config, f"SELECT DISTINCT {column} FROM {table}{where}")[column])


@pytest.mark.parametrize("which", ["exported", "filtered"])
def test_the_manifest_holds_the_stamps_the_rows_came_from_and_each_files_hash(which, request):
    from focus_dagster.version import code_version

    config, folder, manifest = request.getfixturevalue(which)[:3]
    assert manifest["schema"] == 1 and manifest["code_version"] == code_version() and manifest["exported_at"]
    current = query(config, "SELECT c.asset, c.partition, c.stamp_id, s.stamp FROM lineage.current c "
                            "JOIN lineage.stamps s USING (stamp_id)")
    current = {(row.asset, row.partition): (row.stamp_id, lineage.loads(row.stamp)) for row in current.itertuples()}
    expected = {}
    for name, entry in manifest["files"].items():
        assert entry["sha256"] == hashlib.sha256((folder / name).read_bytes()).hexdigest(), name
        read = {found["partition"]: found["stamp_id"] for found in entry["partitions"]}
        assert read == {p: current[writer(entry["table"], p)][0] for p in partitions_read(config, entry["table"], which)}
        expected.update({current[writer(entry["table"], p)][0]: writer(entry["table"], p) for p in read})
    assert {stamp_id: (e["asset"], e["partition"]) for stamp_id, e in manifest["stamps"].items()} == expected
    for stamp_id, entry in manifest["stamps"].items():
        assert current[(entry["asset"], entry["partition"])] == (stamp_id, entry["stamp"])
        assert entry["current"] is True and entry["version"] == entry["stamp"]["version"]
    # The stamps the rows' own lineage ids name, as lineage.stamps keeps them.
    ids = set()
    for name in manifest["files"]:
        frame = (pq.read_table(folder / name).to_pandas() if name.endswith(".parquet")
                 else pd.read_csv(folder / name, dtype=str))
        ids |= set(frame["lineage_id"].dropna()) if "lineage_id" in frame else set()
    kept = query(config, "SELECT stamp_id, stamp FROM lineage.stamps WHERE stamp_id IN (SELECT unnest(?))", [sorted(ids)])
    assert ids and manifest["row_stamps"] == {row.stamp_id: lineage.loads(row.stamp) for row in kept.itertuples()}
    assert set(manifest["row_stamps"]) == ids


def test_an_exported_metric_id_traces_to_its_chain(exported):
    config, folder, manifest, _ = exported
    metrics = pd.read_csv(folder / "metrics.csv", dtype={"group": str}, float_precision="round_trip")
    row = metrics[(metrics["metric"] == "auroc") & metrics["group"].isna() & metrics["value"].notna()
                  & (metrics["partition"] != "cross")].iloc[0]
    code, out, err = focus(config, "trace", row["metric_id"], "--json")
    assert code == 0, err
    traced = json.loads(out)
    assert traced["value"] == pytest.approx(row["value"], abs=1e-12)
    assert traced["ci"] == pytest.approx([row["ci_low"], row["ci_high"]], abs=1e-12)
    links = {link["id"]: link for link in traced["links"]}
    predictions = next(e for e in manifest["stamps"].values()
                       if (e["asset"], e["partition"]) == ("predictions", row["dataset"]))
    assert links[f"predictions[{row['dataset']}]"]["version"] == predictions["version"]


@pytest.mark.parametrize("argv, words", [
    (["--tables", "metric"], ["unknown table 'metric'", "allowed: metrics, predictions, unavailable"]),
    (["--models", "tiny_vit,tiny_vitt"], ["unknown model 'tiny_vitt'", "models there: tiny_clip, tiny_llava, tiny_vit"]),
    (["--datasets", "brset", "mesidor"], ["unknown dataset 'mesidor'", "datasets there: brset, idrid, papila"]),
    (["--tables", "lora_effects"], ["lora_effects (metrics.lora_effects) has no rows yet"]),
])
def test_unknown_names_are_one_clear_error(world, tmp_path, argv, words):  # noqa: F811
    code, _, err = focus(world[0], "export", "--out", str(tmp_path / "out"), *argv)
    assert code == 2
    assert err.startswith("error: ") and all(w in err for w in words), err
    assert not (tmp_path / "out").exists()


def test_a_folder_with_files_is_refused_unless_forced_and_force_replaces_the_earlier_export(exported, tmp_path):
    config = exported[0]
    folder = tmp_path / "paper"
    assert focus(config, "export", "--out", str(folder), "--tables", "metrics,predictions")[0] == 0
    (folder / "notes.txt").write_text("mine")
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    code, _, err = focus(config, "export", "--out", str(folder), "--tables", "metrics")
    assert code == 2 and "is not empty" in err and "--force" in err
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    code, _, err = focus(config, "export", "--out", str(folder), "--tables", "metrics", "--force")
    assert code == 0, err
    assert sorted(p.name for p in folder.iterdir()) == ["manifest.json", "metrics.csv", "notes.txt"]
    assert (folder / "metrics.csv").read_bytes() == before["metrics.csv"]  # the same tables give the same bytes
    assert list(json.loads((folder / "manifest.json").read_text())["files"]) == ["metrics.csv"]


def test_a_killed_export_leaves_no_half_file_under_a_finished_name(exported, tmp_path, monkeypatch):
    import focus_dagster.platform.export as export

    config, finished = exported[0], exported[1]
    real = export.atomic_path

    @contextmanager
    def killed_before_the_rename(target, suffix=""):
        with real(target, suffix) as partial:
            yield partial
            if target.name == "predictions.csv":
                assert partial.stat().st_size > 0  # written, not yet renamed
                raise KeyboardInterrupt

    monkeypatch.setattr(export, "atomic_path", killed_before_the_rename)
    folder = tmp_path / "paper"
    with pytest.raises(KeyboardInterrupt):
        focus(config, "export", "--out", str(folder))
    assert sorted(p.name for p in folder.iterdir()) == ["metrics.csv"]  # no predictions.csv, no manifest
    monkeypatch.setattr(export, "atomic_path", real)
    assert focus(config, "export", "--out", str(folder), "--force")[0] == 0
    for name in DEFAULT_FILES:
        assert (folder / name).read_bytes() == (finished / name).read_bytes()


def test_focus_export_runs_without_dagster(exported, tmp_path):
    config = exported[0]
    code = ("import sys; from focus_dagster.platform.cli import main\n"
            f"code = main(['export', '--out', {str(tmp_path / 'out')!r}, '--tables', 'metrics'])\n"
            "print('DAGSTER', 'dagster' in sys.modules); sys.exit(code)")
    env = {**os.environ, "FOCUS_HOME": str(config.home), "FOCUS_CONFIG": ""}
    env.pop("DAGSTER_HOME", None)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert "DAGSTER False" in done.stdout
    assert (tmp_path / "out" / "metrics.csv").read_bytes() == (exported[1] / "metrics.csv").read_bytes()


def test_the_python_call_exports_the_same_from_a_focus_home(exported, tmp_path):
    from focus_dagster.platform.export import export_tables

    config, finished, _, _ = exported
    manifest = export_tables(config.home, tmp_path / "out", tables="metrics,unavailable")
    assert list(manifest["files"]) == ["metrics.csv", "unavailable.csv"]
    for name in manifest["files"]:
        assert (tmp_path / "out" / name).read_bytes() == (finished / name).read_bytes()
    assert json.loads((tmp_path / "out" / "manifest.json").read_text()) == manifest


def test_an_object_store_exports_as_a_folder_does(tmp_path):
    """Through fsspec (an in-memory store): each file's partitions found by their URLs, rows written without a
    stamp named as such, a lineage id no commit kept given as null."""
    import uuid

    from focus_dagster.platform.export import export_tables
    from resources import layout
    from resources.tables import TableStore

    store = TableStore(f"memory://export-{uuid.uuid4().hex[:8]}/tables")
    stamp = lineage.stamp("metrics", "brset", "run-1", "v1", code_version="c", inputs={})
    kept = {**stamp, "asset": "predictions", "version": "p1"}  # the stamp a row's lineage_id names
    rows = pd.DataFrame({"metric_id": ["m-1", "m-2"], "model": ["a", "b"], "dataset": ["brset", "brset"],
                         "group": ["", "sex=F"], "value": [0.5, 0.25],
                         "lineage_id": [lineage.stamp_id(kept), "lost"], "partition": ["brset", "brset"]})
    store.commit([(layout.METRICS, "brset", rows)], stamp, stamps=(kept,))
    store.commit([(layout.METRICS, "cross", rows.assign(metric_id=["m-3", "m-4"], dataset="idrid", partition="cross"))])
    manifest = export_tables(store, tmp_path / "out", format="parquet", tables=["metrics"], datasets=["brset"])
    table = pq.read_table(tmp_path / "out" / "metrics.parquet").to_pylist()
    assert [(row["metric_id"], row["group"]) for row in table] == [("m-1", None), ("m-2", "sex=F")]
    assert manifest["files"]["metrics.parquet"]["partitions"] == [{"partition": "brset",
                                                                   "stamp_id": lineage.stamp_id(stamp)}]
    assert manifest["stamps"][lineage.stamp_id(stamp)]["stamp"] == stamp
    assert manifest["row_stamps"] == {lineage.stamp_id(kept): kept, "lost": None}
    everything = export_tables(store, tmp_path / "all", tables="metrics")
    assert [found["stamp_id"] for found in everything["files"]["metrics.csv"]["partitions"]] == [
        lineage.stamp_id(stamp), None]  # the cross rows were written without a stamp
    assert list(everything["stamps"]) == [lineage.stamp_id(stamp)]
