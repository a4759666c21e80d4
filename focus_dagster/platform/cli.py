"""`focus`: the platform from a terminal. Heavy libraries load inside the commands, so `--help` is instant."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from focus_dagster.datasets.images import DEFAULT_IMAGE_CHECK, IMAGE_CHECKS
from focus_dagster.errors import FocusError
from focus_dagster.platform.instance import (
    UI_HOST,
    UI_PORT,
    prepare_dagster_home,
    quiet_connection_retries,
    unreachable_database,
)


ROOT_HELP = "the dataset's root folder (default: where focus.yaml, or the synthetic default, reads it from)"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "run"):
        parser.print_help()
        return 2
    quiet_connection_retries()
    try:
        return args.run(args) or 0
    except FocusError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        # An instance database that cannot be opened surfaces wherever a command first touches the instance, as
        # three chained tracebacks: one line says which database, where, and what to check.
        message = unreachable_database(exc)
        if message is None:
            raise
        print(f"error: {message}", file=sys.stderr)
        return 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="focus",
        description="FOCUS retinal benchmark platform (Dagster). Data and models never leave this machine.",
    )
    sub = parser.add_subparsers(title="commands")

    demo = sub.add_parser("demo", help="materialise the pipeline on the configured (default: synthetic) datasets",
                          description="Materialise the whole graph on focus.yaml's datasets and models (or the "
                          "synthetic default), printing each step's progress as it runs and a summary per stage.")
    demo.add_argument("--datasets", nargs="+", metavar="KEY", help="only these of the configured datasets")
    demo.add_argument("--models", nargs="+", metavar="ID", help="only these of the configured models")
    demo.add_argument("--no-lora", dest="lora", action="store_false",
                      help="skip the LoRA stage (training an adapter, scoring it, comparing it with its base)")
    demo.add_argument("--per-dataset", type=_positive, metavar="N",
                      help="images of every synthetic look-alike (default: synthetic.per_dataset of focus.yaml: 80, "
                           "BRSET and mBRSET 160); a look-alike of another size is written anew. Only synthetic "
                           "datasets: a dataset with a root of its own is read whole")
    demo.set_defaults(run=cmd_demo)

    synth = sub.add_parser("synth", help="write synthetic look-alikes of the datasets in their published layouts")
    synth.add_argument("--out", required=True, type=Path, help="folder to write <key>/ dataset roots into")
    synth.add_argument("--datasets", nargs="+", metavar="KEY", help="dataset keys (default: all ten)")
    synth.add_argument("--per-dataset", type=_positive, default=None,
                       help="images of every dataset (default 80, BRSET and mBRSET 160)")
    synth.add_argument("--seed", type=int, default=0)
    size = synth.add_mutually_exclusive_group()
    size.add_argument("--scale", type=float, default=None, help="fraction of the published resolution (default 0.125)")
    size.add_argument("--full-size", action="store_true", help="write images at the published resolutions")
    synth.add_argument("--workers", type=int, default=None, help="rendering processes (default: one per core)")
    synth.set_defaults(run=cmd_synth)

    records = sub.add_parser("records", help="read one dataset into native records (no Dagster needed)")
    records.add_argument("key", help="dataset key, e.g. brset")
    records.add_argument("--root", type=Path, help=ROOT_HELP)
    records.add_argument("--out", required=True, type=Path, help="output file: .csv or .parquet")
    records.add_argument("--quarantine", type=Path, help="also write the quarantined rows (.csv or .parquet)")
    records.add_argument("--image-check", choices=list(IMAGE_CHECKS), default=DEFAULT_IMAGE_CHECK)
    records.set_defaults(run=cmd_records)

    labels = sub.add_parser("labels", help="harmonise one dataset's labels and splits (no Dagster needed)")
    labels.add_argument("key", help="dataset key, e.g. brset")
    labels.add_argument("--root", type=Path, help=ROOT_HELP)
    labels.add_argument("--splits-dir", type=Path, help="folder of published labels_splits_<dataset>.csv files")
    labels.add_argument("--seed", type=int, default=0, help="seed of the 60/40 split where no other split applies")
    labels.add_argument("--out", required=True, type=Path, help="output file: .csv or .parquet")
    labels.add_argument("--rejects", type=Path, help="also write the rejected records (.csv or .parquet)")
    labels.add_argument("--no-content-hash", action="store_true", help="skip hashing image bytes (leakage check)")
    labels.set_defaults(run=cmd_labels)

    release = sub.add_parser("release", help="fingerprint one dataset on disk (its release version)")
    release.add_argument("key")
    release.add_argument("--root", type=Path, help=ROOT_HELP)
    release.add_argument("--content-hash", action="store_true", help="hash image bytes too (slower)")
    release.set_defaults(run=cmd_release)

    models = sub.add_parser("models", help="list the model catalog and whether each model's weights are here")
    models.add_argument("--selected", action="store_true", help="only the models focus.yaml selects")
    models.set_defaults(run=cmd_models)

    trace = sub.add_parser("trace", help="the lineage of one number: metric row -> predictions -> model -> labels -> files")
    trace.add_argument("metric_id", help="a metric id (leaderboard, metrics.values)")
    trace.add_argument("--json", action="store_true", help="machine-readable output (schema: README, `focus trace`)")
    trace.add_argument("--runs", action="store_true", help="add each run's job and status from the Dagster instance")
    trace.set_defaults(run=cmd_trace)

    compare = sub.add_parser("compare", help="model A against model B on the same test images: paired bootstrap "
                             "deltas A - B of every axis with 95%% intervals, p- and q-values")
    compare.add_argument("model_a", metavar="A", help="a selected model id")
    compare.add_argument("model_b", metavar="B", help="another selected model id")
    compare.add_argument("--dataset", nargs="+", metavar="KEY", help="only these datasets (default: every one with "
                         "predictions of both)")
    compare.add_argument("--task", nargs="+", metavar="TASK", help="only these tasks")
    compare.add_argument("--method", nargs="+", metavar="METHOD", help="only these methods (linear_probe, "
                         "zero_shot, yes_no, yes_no_lora)")
    compare.add_argument("--out", type=Path, help="also write every row to this .csv or .parquet file")
    compare.add_argument("--json", action="store_true", help="print the rows as JSON records")
    compare.set_defaults(run=cmd_compare)

    add_export_parser(sub)

    report = sub.add_parser("report", help="the arena report: build it from the tables as they are now (unless it is "
                            "up to date) and print where it is")
    report.add_argument("--open", action="store_true", help="open it in the default web browser")
    report.add_argument("--rebuild", action="store_true", help="build it even when it is up to date")
    report.set_defaults(run=cmd_report)

    datasets = sub.add_parser("datasets", help="list the datasets and where each is read from")
    datasets.set_defaults(run=cmd_datasets)

    config = sub.add_parser("config", help="focus.yaml: print its JSON Schema, or check a file and print it resolved")
    what = config.add_mutually_exclusive_group(required=True)
    what.add_argument("--schema", action="store_true", help="print the JSON Schema of focus.yaml (for editors)")
    what.add_argument("--check", nargs="?", const="", metavar="FILE",
                      help="validate FILE (default: $FOCUS_CONFIG) and print it resolved: paths absolute, "
                           "defaults written out")
    config.set_defaults(run=cmd_config)

    recover = sub.add_parser("recover", help="fail the runs whose process is gone and free the pool slots they hold "
                             "(what run monitoring does while the daemon runs)")
    recover.set_defaults(run=cmd_recover)

    ui = sub.add_parser("ui", help=f"start the Dagster UI on http://{UI_HOST}:{UI_PORT}")
    ui.add_argument("--port", type=int, default=UI_PORT)
    ui.set_defaults(run=cmd_ui)
    return parser


def add_export_parser(sub) -> None:
    from focus_dagster.platform.export import ALL, FORMATS, RESULTS, TABLES, WHOLE_SET_GROUP

    export = sub.add_parser(
        "export", help="write the result tables as CSV or Parquet files with a manifest.json of their lineage",
        description="Write the current tables, every column kept (intervals, reasons, metric ids, lineage), one "
                    f"file per table, then manifest.json: the lineage stamps of what was read, the code version, the "
                    f"time, the filters, each file's row count and sha256. In the files {WHOLE_SET_GROUP}. Reads "
                    "the table store only (no Dagster); a metric_id of an exported row is what `focus trace` takes.")
    export.add_argument("--out", required=True, type=Path,
                        help="folder to export into: new or empty, unless --force")
    export.add_argument("--format", choices=FORMATS, default=FORMATS[0], help="file format (default: %(default)s)")
    export.add_argument("--tables", nargs="+", metavar="NAME",
                        help="tables, comma- or space-separated: " + ", ".join(f"{name} ({table})" for name, table
                                                                               in TABLES.items())
                        + f", or {ALL}. Default: {','.join(RESULTS)}, the results a paper reports (every metric row: "
                          "performance, calibration, fairness, quality, cross-dataset; the per-image predictions; "
                          "the configurations without predictions and why; the LoRA effects), those written so far")
    export.add_argument("--datasets", nargs="+", metavar="KEY",
                        help="only rows whose dataset is one of these (a cross-dataset row's dataset is the one it "
                             "was evaluated on, whatever its train_dataset); a table without a dataset column is "
                             "exported whole")
    export.add_argument("--models", nargs="+", metavar="ID",
                        help="only rows whose model is one of these; a table without a model column (labels, "
                             "attributes, ...) is exported whole")
    export.add_argument("--force", action="store_true",
                        help="export into a folder that is not empty: replace the files of an earlier export there "
                             "(those its manifest names and this export does not write are removed)")
    export.set_defaults(run=cmd_export)


# ------------------------------------------------------------------------------------------------ commands


def cmd_synth(args) -> int:
    from focus_dagster.synthetic import DEFAULT_PER_DATASET, synthesize
    from focus_dagster.synthetic.common import DEFAULT_SCALE

    scale = 1.0 if args.full_size else (args.scale if args.scale is not None else DEFAULT_SCALE)
    per_dataset = args.per_dataset if args.per_dataset is not None else DEFAULT_PER_DATASET
    manifests = synthesize(args.out, args.datasets, per_dataset, args.seed, scale, args.workers)
    for key, manifest in manifests.items():
        quarantine = sum(manifest.expected_quarantine.values())
        print(
            f"{key:<11} {manifest.root}  label rows {manifest.label_rows}, images {manifest.images_written}"
            + (f", rows without image {quarantine}" if quarantine else "")
        )
    return 0


def cmd_records(args) -> int:
    from focus_dagster.datasets import read_dataset

    result = read_dataset(args.key, dataset_root(args), image_check=args.image_check)
    write_frame(result.records, args.out)
    if args.quarantine is not None:
        write_frame(result.quarantine, args.quarantine)
    print(result.accounting_line())
    print(f"records written to {args.out}" + (f", quarantine to {args.quarantine}" if args.quarantine else ""))
    return 0


def cmd_labels(args) -> int:
    from focus_dagster.datasets import read_dataset
    from focus_dagster.labels import harmonise

    read = read_dataset(args.key, dataset_root(args))
    result = harmonise(
        args.key, read.records, read.quarantine, root=None if args.no_content_hash else read.root,
        splits_dir=args.splits_dir, seed=args.seed,
    )
    write_frame(result.labels, args.out)
    if args.rejects is not None:
        write_frame(result.rejects, args.rejects)
    print(f"rule {result.rule.id}: {result.rule.description}")
    print(f"split: {result.split_method}" + (f" ({result.split_source})" if result.split_source else ""))
    for task, splits in result.positives_by_split().items():
        cells = "  ".join(f"{split} {c['positives']}/{c['n']}" for split, c in splits.items())
        print(f"  {task:<13} positives/labelled: {cells}")
    for name, value in result.split_report.items():
        if isinstance(value, int) and value and name != "split_file_rows":
            print(f"  split file: {name.replace('_', ' ')}: {value}")
    print(result.accounting_line())
    return 0


def cmd_release(args) -> int:
    from focus_dagster.datasets.release import fingerprint_dataset

    fp = fingerprint_dataset(args.key, dataset_root(args), content_hash=args.content_hash)
    print(f"{fp.dataset} release {fp.version}: {fp.label_files} label/annotation files, {fp.images} images, "
          f"{fp.total_bytes} bytes, fingerprinted in {fp.seconds}s")
    return 0


def cmd_models(args) -> int:
    from focus_dagster.config import load_config
    from focus_dagster.models.catalog import SELF_BUILDING_FAMILIES, weights_available
    from focus_dagster.models.selection import resolve_models

    config = load_config()
    selected = resolve_models(config.models, config.model_cache)
    if args.selected:
        specs = list(selected.values())
    else:
        from focus_dagster.models.catalog import CATALOG

        specs = [selected.get(model_id, spec) for model_id, spec in CATALOG.items()]
        specs += [spec for model_id, spec in selected.items() if model_id not in CATALOG]
    print(f"{'model':<28} {'iface':<5} {'domain':<14} {'family':<18} {'hub id':<44} {'revision':<12} "
          f"{'selected':<8} weights")
    for spec in specs:
        available, where = weights_available(spec)
        built_in = spec.family in SELF_BUILDING_FAMILIES
        state = "built on first use" if built_in else ("here: " if available else "MISSING: ") + where
        print(f"{spec.id:<28} {spec.interface:<5} {spec.domain:<14} {spec.family:<18} {spec.source:<44} "
              f"{spec.revision or '-':<12} {'yes' if spec.id in selected else '':<8} {state}")
        if args.selected:
            print(_preprocess_lines(spec))
    return 0


def _preprocess_lines(spec) -> str:
    """The preprocessing a selected model's images get, and where each value came from (models/preprocessing.py)."""
    from focus_dagster.models.preprocessing import with_own_preprocessing

    try:
        preprocess = with_own_preprocessing(spec).preprocess
    except FocusError as error:
        return f"    preprocess: cannot be resolved: {error}"
    v = preprocess.values()
    normalise = "/255 only" if v["scale_only"] else f"mean {_shown(v['mean'])}, std {_shown(v['std'])}"
    by = f"the image processor in {preprocess.processor}" if preprocess.processor else "timm's eval transform"
    by_source: dict[str, list[str]] = {}
    for name, source in sorted(preprocess.described()["sources"].items()):
        by_source.setdefault(source, []).append(name)
    sources = "; ".join(f"{source}: {', '.join(names)}" for source, names in by_source.items())
    return (f"    preprocess: {v['size']} px, {v['resize']} via {v['resize_to']} (crop_pct {v['crop_pct']:g}), "
            f"{v['interpolation']}, {normalise}; pixels by {by}\n    from {sources}")


def _shown(values) -> str:
    return "/".join(f"{value:g}" for value in values)


def cmd_datasets(args) -> int:
    from focus_dagster.config import load_config
    from focus_dagster.datasets import dataset_info

    config = load_config()
    print(f"FOCUS_HOME {config.home}" + (f"   config {config.source}" if config.source else "   (no FOCUS_CONFIG: synthetic default)"))
    missing = [key for key in config.dataset_keys if not config.is_synthetic(key) and not config.root_of(key).is_dir()]
    for key in config.dataset_keys:
        where = f"synthetic look-alike at {config.root_of(key)}" if config.is_synthetic(key) else str(config.root_of(key))
        print(f"  {key:<11} {dataset_info(key).title:<11} {where}" + ("   (MISSING)" if key in missing else ""))
        if key in config.declared and key not in missing:
            print(_declared_summary(key, config))
    # A root that is not there would fail every run of its dataset: the listing says so now, one line each.
    for key in missing:
        print(f"error: [{key}] dataset root {config.root_of(key)} does not exist or is not a folder: correct its path "
              f"under datasets: in {config.source}, or set it to synthetic.", file=sys.stderr)
    return 2 if missing else 0


def _declared_summary(key: str, config) -> str:
    """A declared dataset's label table, its counts as read now (images checked for existence only), its rules."""
    from focus_dagster.datasets import read_dataset
    from focus_dagster.labels.rule_lookup import rule_for

    declaration = config.declared[key]
    lines = [f"      declared in {config.source}: labels {declaration.labels}, image column {declaration.image!r}"]
    try:
        lines.append("      " + read_dataset(key, config.root_of(key), image_check="none").accounting_line())
    except FocusError as error:
        lines.append(f"      cannot be read: {error}")
    rule = rule_for(key)
    lines.append(f"      rule {rule.id}: {rule.description}")
    return "\n".join(lines)


def cmd_config(args) -> int:
    """`--schema`: the JSON Schema of focus.yaml; `--check [FILE]`: FILE resolved, as a focus.yaml that gives the
    same configuration (a mistake is an `error:` line per key, exit 2)."""
    if args.schema:
        import json

        from focus_dagster.config_schema import focus_yaml_schema

        print(json.dumps(focus_yaml_schema(), indent=2))
        return 0
    import yaml

    from focus_dagster.config import load_config
    from focus_dagster.errors import ConfigError

    path = args.check or os.environ.get("FOCUS_CONFIG")
    if not path:
        raise ConfigError("focus config --check: name a focus.yaml, or set FOCUS_CONFIG to one.")
    if not Path(path).expanduser().is_file():
        raise ConfigError(f"focus config --check: {path} is not a file.")
    config = load_config({**os.environ, "FOCUS_CONFIG": path})
    print(f"# {config.source}: valid. Resolved: paths absolute, defaults written out.")
    print(yaml.safe_dump(config.to_document(), sort_keys=False, allow_unicode=True), end="")
    return 0


def _positive(text: str) -> int:
    """A count of at least 1, or argparse's usage error naming the value."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return value


def cmd_demo(args) -> int:
    from focus_dagster.platform.demo import run_demo
    from focus_dagster.platform.runner import DemoOptions

    return run_demo(DemoOptions(datasets=args.datasets and tuple(args.datasets),
                                models=args.models and tuple(args.models), lora=args.lora,
                                per_dataset=args.per_dataset))


def cmd_report(args) -> int:
    import webbrowser

    import dagster as dg

    from assets.report import REPORT_JOB, stale_reason
    from focus_dagster.config import load_config
    from focus_dagster.definitions import build_definitions
    from focus_dagster.platform.recovery import HOST_TAG, this_host
    from focus_dagster.platform.runner import QUIET
    from resources import layout

    config = load_config()
    defs = build_definitions(config)
    storage = defs.resources["storage"]
    page = storage.artifact_path(layout.ARENA_REPORT_PAGE)
    reason = "--rebuild" if args.rebuild else stale_reason(storage)
    if reason is None:
        print(f"arena report (up to date with the tables): {page}")
    else:
        print(f"building the arena report ({reason}) ...")
        with dg.DagsterInstance.from_config(str(prepare_dagster_home(config))) as instance:
            result = defs.resolve_job_def(REPORT_JOB).execute_in_process(
                instance=instance, raise_on_error=False, run_config=QUIET, tags={HOST_TAG: this_host()})
        if not result.success:
            failure = next((e.event_specific_data.error for e in result.all_events if e.is_step_failure), None)
            print(f"error: the report was not built: {failure.message.strip() if failure else 'see the run in the UI'}",
                  file=sys.stderr)
            return 1
        print(f"arena report: {page}  (run {result.run_id[:8]})")
    if args.open:
        webbrowser.open(page.as_uri())
    return 0


def cmd_recover(args) -> int:
    import dagster as dg

    from focus_dagster.config import load_config
    from focus_dagster.platform.recovery import recover_dead_runs

    home = prepare_dagster_home(load_config())
    with dg.DagsterInstance.from_config(str(home)) as instance:
        lines = recover_dead_runs(instance)
    for line in lines:
        print(line)
    print(f"instance {home}: " + (f"{len(lines)} run(s) recovered" if lines else "no dead run, no slot held by a finished run"))
    return 0


def cmd_ui(args) -> int:
    from focus_dagster.config import load_config
    from focus_dagster.platform.ui import serve

    # `dagster dev` runs as a child that focus ui stops whole, its runs in flight canceled (focus_dagster/platform/ui.py).
    return serve(args.port, prepare_dagster_home(load_config()))


# ------------------------------------------------------------------------------------------------ helpers


def dataset_root(args) -> Path:
    """`--root`, else the root focus.yaml gives the dataset. Reading the configuration also declares the
    user's own datasets, so that their keys are known to the readers."""
    from focus_dagster.config import ensure_dataset_root, load_config

    config = load_config()
    if args.root is not None:
        if not args.root.is_dir():  # the readers would advise focus.yaml, which is not where this root came from
            raise FocusError(f"--root {args.root} does not exist or is not a folder: give the folder that holds "
                             f"{args.key}'s files as its publisher distributes them.")
        return args.root
    return ensure_dataset_root(config, args.key)


def cmd_trace(args) -> int:
    import json

    from focus_dagster.config import load_config
    from focus_dagster.platform.trace import format_trace, trace

    config = load_config()
    result = trace(args.metric_id, config, prepare_dagster_home(config) if args.runs else None, runs=args.runs)
    print(json.dumps(result, indent=2, default=str) if args.json else format_trace(result))
    return 0


def cmd_compare(args) -> int:
    from assets.comparisons import comparison_inputs
    from assets.evaluation import MetricsConfig
    from focus_dagster.config import load_config
    from focus_dagster.definitions import build_definitions
    from focus_dagster.evaluation.comparisons import comparison_rows, format_comparison, selected

    config = load_config()
    storage = build_definitions(config).resources["storage"]
    inputs = comparison_inputs(storage, list(config.dataset_keys))
    samples = selected(inputs.samples, datasets=args.dataset, tasks=args.task, methods=args.method)
    settings = MetricsConfig()  # the resamples and seed model_comparisons uses by default: the same rows
    table = comparison_rows(samples, args.model_a, args.model_b, attributes=inputs.attributes, usable=inputs.usable,
                            reasons=inputs.reasons, n_resamples=settings.n_resamples, seed=settings.seed)
    if args.out:
        write_frame(table, args.out)
    print(table.to_json(orient="records", indent=2) if args.json else format_comparison(table))
    return 0


def cmd_export(args) -> int:
    from focus_dagster.config import load_config
    from focus_dagster.platform.export import export_tables, format_summary

    manifest = export_tables(load_config(), args.out, format=args.format, tables=args.tables,
                             datasets=args.datasets, models=args.models, force=args.force)
    print(format_summary(manifest, args.out))
    return 0


def write_frame(frame, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    suffix = path.suffix.lower()
    if suffix == ".csv":
        frame.to_csv(path, index=False)
    elif suffix == ".parquet":
        frame.to_parquet(path, index=False)
    else:
        raise FocusError(f"cannot write {path}: use a .csv or .parquet file name")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
