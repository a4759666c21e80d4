"""The label rules written a second time, as SQL over the native columns, straight from datasets.md.

`rules.RULES` computes each task with pandas; the consistency check used to recompute the stored labels
with those same functions, so a wrong threshold there produced wrong labels that the check then confirmed.
This module is the independent reference: one literal SQL expression per dataset and task, transcribed from
the "Rules" line of each dataset in shared/datasets.md (not from rules.py), evaluated by DuckDB over the
records frame exactly as read (its native column names, quoted). A task absent here is not defined for the
dataset and must be null.

Conventions, all from datasets.md: a blank grade gives a null label (never a negative), so the DR tasks are
wrapped in `CASE WHEN <grade> IS NULL THEN NULL ...`; a blank edema flag counts as no edema (mBRSET says so;
elsewhere it is the reference's reading); numeric codes are compared after `TRY_CAST(... AS DOUBLE)`, since
stored records may carry them as integers, floats or text.

Subset membership is transcribed the same way: `SUBSET_SQL` holds, per dataset, one SQL boolean expression
over the native columns that is TRUE exactly when the record belongs to the benchmark subset ("Benchmark
subset" and the reject lines of datasets.md, again not rules.py's `subset` filters). A dataset absent from it
has no subset rule: every record belongs. A NULL verdict (a blank native value) counts as outside.
`independent_labels(..., subset=True)` adds it as the boolean column `in_subset`, one row per record, so the
consistency check can also tell a wrong subset filter (an image kept that lies outside the subset, or one
inside it that was dropped for anything but its split) from a sound one.
"""

from __future__ import annotations

import pandas as pd

__all__ = ["COLUMN_ALIASES", "RULE_SQL", "SUBSET_SQL", "declared_rule_sql", "independent_labels", "rules_for",
           "subset_for"]

TASK_NAMES = ("any_dr", "referable_dr", "gon")

# {dataset: {task: SQL expression over the native columns giving TRUE / FALSE / NULL}}.
RULE_SQL: dict[str, dict[str, str]] = {
    # BRSET: any_dr = DR_ICDR >= 1; referable_dr = DR_ICDR >= 2 or macular_edema == 1; gon = increased_cup_disc.
    "brset": {
        "any_dr": 'CASE WHEN TRY_CAST("DR_ICDR" AS DOUBLE) IS NULL THEN NULL '
                  'ELSE TRY_CAST("DR_ICDR" AS DOUBLE) >= 1 END',
        "referable_dr": 'CASE WHEN TRY_CAST("DR_ICDR" AS DOUBLE) IS NULL THEN NULL '
                        'ELSE TRY_CAST("DR_ICDR" AS DOUBLE) >= 2 '
                        'OR coalesce(TRY_CAST("macular_edema" AS DOUBLE) = 1, false) END',
        "gon": 'TRY_CAST("increased_cup_disc" AS DOUBLE) = 1',
    },
    # mBRSET: any_dr = final_icdr >= 1; referable_dr = final_icdr >= 2 or final_edema == yes (blank = no).
    "mbrset": {
        "any_dr": 'CASE WHEN TRY_CAST("final_icdr" AS DOUBLE) IS NULL THEN NULL '
                  'ELSE TRY_CAST("final_icdr" AS DOUBLE) >= 1 END',
        "referable_dr": 'CASE WHEN TRY_CAST("final_icdr" AS DOUBLE) IS NULL THEN NULL '
                        'ELSE TRY_CAST("final_icdr" AS DOUBLE) >= 2 '
                        'OR coalesce(CAST("final_edema" AS VARCHAR) = \'yes\', false) END',
    },
    # PAPILA: gon = Diagnosis in {1 glaucoma, 2 suspect}; 0 healthy.
    "papila": {
        "gon": 'TRY_CAST("Diagnosis" AS DOUBLE) IN (1, 2)',
    },
    # RFMiD: any_dr = DR (binary); referable_dr = CME (the reference's choice).
    "rfmid": {
        "any_dr": 'TRY_CAST("DR" AS DOUBLE) = 1',
        "referable_dr": 'TRY_CAST("CME" AS DOUBLE) = 1',
    },
    # RFMiD 2.0: any_dr = DR; referable_dr = ME.
    "rfmid_2": {
        "any_dr": 'TRY_CAST("DR" AS DOUBLE) = 1',
        "referable_dr": 'TRY_CAST("ME" AS DOUBLE) = 1',
    },
    # IDRiD: any_dr = grade >= 1; referable_dr = grade >= 2 or edema risk > 0.
    "idrid": {
        "any_dr": 'CASE WHEN TRY_CAST("Retinopathy grade" AS DOUBLE) IS NULL THEN NULL '
                  'ELSE TRY_CAST("Retinopathy grade" AS DOUBLE) >= 1 END',
        "referable_dr": 'CASE WHEN TRY_CAST("Retinopathy grade" AS DOUBLE) IS NULL THEN NULL '
                        'ELSE TRY_CAST("Retinopathy grade" AS DOUBLE) >= 2 '
                        'OR coalesce(TRY_CAST("Risk of macular edema" AS DOUBLE) > 0, false) END',
    },
    # Messidor-2: any_dr = grade >= 1; referable_dr = grade >= 2 or dme == 1 (grade column: `diagnosis`,
    # or `adjudicated_dr_grade` in the original grade file, see COLUMN_ALIASES).
    "messidor_2": {
        "any_dr": 'CASE WHEN TRY_CAST("diagnosis" AS DOUBLE) IS NULL THEN NULL '
                  'ELSE TRY_CAST("diagnosis" AS DOUBLE) >= 1 END',
        "referable_dr": 'CASE WHEN TRY_CAST("diagnosis" AS DOUBLE) IS NULL THEN NULL '
                        'ELSE TRY_CAST("diagnosis" AS DOUBLE) >= 2 '
                        'OR coalesce(TRY_CAST("adjudicated_dme" AS DOUBLE) = 1, false) END',
    },
    # REFUGE: gon = Label (1 = glaucoma).
    "refuge": {
        "gon": 'TRY_CAST("Label" AS DOUBLE) = 1',
    },
    # G1020: gon = binaryLabels (0 normal / 1 glaucoma).
    "g1020": {
        "gon": 'TRY_CAST("binaryLabels" AS DOUBLE) = 1',
    },
    # JSIEC1000: the class folder (`<code>.<name>`) is the label. any_dr: DR1, DR2, DR3, blur with suspected
    # PDR; referable_dr: DR2, DR3, suspected PDR (DR1 negative).
    "jsiec1000": {
        "any_dr": "regexp_extract(CAST(\"class_folder\" AS VARCHAR), '^[0-9]+\\.[0-9]+\\.(.*)$', 1) "
                  "IN ('DR1', 'DR2', 'DR3', 'Blur fundus with suspected PDR')",
        "referable_dr": "regexp_extract(CAST(\"class_folder\" AS VARCHAR), '^[0-9]+\\.[0-9]+\\.(.*)$', 1) "
                        "IN ('DR2', 'DR3', 'Blur fundus with suspected PDR')",
    },
}

# {dataset: SQL expression over the native columns, TRUE when the record belongs to the benchmark subset}.
# Datasets without a subset rule in datasets.md are absent: every record belongs.
SUBSET_SQL: dict[str, str] = {
    # BRSET: "diabetic patients only (`diabetes == yes`)".
    "brset": 'CAST("diabetes" AS VARCHAR) = \'yes\'',
    # mBRSET: "macula-centred files only (`*.1.jpg`, `*.3.jpg`), rows with blank `final_icdr` dropped".
    "mbrset": "regexp_matches(CAST(\"file\" AS VARCHAR), '\\.[13]\\.jpg$', 'i') "
              'AND TRY_CAST("final_icdr" AS DOUBLE) IS NOT NULL',
    # Messidor-2: the gradable images ("not gradable -> reject"; adjudicated_gradable 0/1), each with its
    # adjudicated grade (1,744 gradable images, all graded; grade column `diagnosis`, see COLUMN_ALIASES).
    "messidor_2": 'TRY_CAST("adjudicated_gradable" AS DOUBLE) = 1 '
                  'AND TRY_CAST("diagnosis" AS DOUBLE) IS NOT NULL',
    # REFUGE: labelled records only ("the mirror's test split is unlabelled"; benchmark = train + val).
    "refuge": 'TRY_CAST("Label" AS DOUBLE) IS NOT NULL',
}

# The same native column under the other name a publisher uses (datasets.md: "accept both").
COLUMN_ALIASES: dict[str, dict[str, str]] = {
    "messidor_2": {"adjudicated_dr_grade": "diagnosis"},
}


def rules_for(dataset: str) -> dict[str, str]:
    """The SQL rules of a dataset: transcribed above for a published one, built from its declaration for a
    dataset declared in focus.yaml."""
    from focus_dagster.datasets.registry import declaration

    if dataset in RULE_SQL:
        return RULE_SQL[dataset]
    declared = declaration(dataset)
    if declared is None:
        raise ValueError(f"No independent SQL label rules for dataset {dataset!r}: add them to RULE_SQL.")
    return declared_rule_sql(declared)


def subset_for(dataset: str) -> str:
    """The SQL subset rule of a dataset (a declared dataset has none: every record belongs)."""
    return SUBSET_SQL.get(dataset, "TRUE")


# ------------------------------------------------------------------------------- declared datasets
# The SQL form of a focus.yaml declaration (focus_dagster/datasets/declaration.py): the task definitions of
# datasets.md over the declared columns, written here in SQL and not derived from the pandas rule
# (focus_dagster/labels/declared.py), so that the consistency check compares two readings of one declaration.


def declared_rule_sql(declaration) -> dict[str, str]:
    """{task: SQL expression} for each task the declaration defines."""
    from focus_dagster.datasets.declaration import ICDR_THRESHOLDS, IcdrTask, VcdrTask

    out = {}
    for task, spec in declaration.tasks.declared().items():
        if isinstance(spec, IcdrTask):
            out[task] = _icdr_sql(spec, ICDR_THRESHOLDS[task])
        elif isinstance(spec, VcdrTask):
            ratio = _number_sql(spec.vcdr)
            out[task] = f"CASE WHEN {ratio} IS NULL THEN NULL ELSE {ratio} >= {float(spec.threshold)!r} END"
        else:
            positive = _in_sql(spec.column, spec.positive)
            if spec.negative is None:  # every other non-blank value is negative
                out[task] = f'CASE WHEN {_quoted(spec.column)} IS NULL THEN NULL ELSE {positive} END'
            else:
                negative = _in_sql(spec.column, spec.negative)
                out[task] = f"CASE WHEN {positive} THEN TRUE WHEN {negative} THEN FALSE ELSE NULL END"
    return out


def _icdr_sql(spec, threshold: int) -> str:
    grade = _number_sql(spec.icdr)
    edema = spec.edema_flag()
    positive = f"{grade} >= {threshold}"
    if edema is not None:  # a blank edema flag is no edema
        positive += f" OR coalesce({_in_sql(edema.column, edema.positive)}, false)"
    return f"CASE WHEN {grade} IS NULL THEN NULL ELSE {positive} END"


def _quoted(column: str) -> str:
    return '"' + column.replace('"', '""') + '"'


def _number_sql(column: str) -> str:
    return f"TRY_CAST(trim(CAST({_quoted(column)} AS VARCHAR)) AS DOUBLE)"


def _in_sql(column: str, values) -> str:
    """TRUE when the cell is one of `values`: numbers by value, text without case (NULL for a null cell)."""
    from focus_dagster.datasets.declaration import split_values

    numbers, texts = split_values(tuple(values))
    text = f"lower(trim(CAST({_quoted(column)} AS VARCHAR)))"
    terms = []
    if numbers:
        # A cell that reads as a number is compared by value only, so that '1.0' is 1 and never the text '1.0'.
        terms.append(f"coalesce({_number_sql(column)} IN ({', '.join(repr(n) for n in numbers)}), false)")
    if texts:
        literals = ", ".join("'" + t.replace("'", "''") + "'" for t in texts)
        terms.append(f"({_number_sql(column)} IS NULL AND {text} IN ({literals}))")
    body = " OR ".join(terms) or "false"
    return f"(CASE WHEN {_quoted(column)} IS NULL THEN NULL ELSE ({body}) END)"


def independent_labels(dataset: str, records: pd.DataFrame, *, subset: bool = False) -> pd.DataFrame:
    """image_id and the three tasks (nullable Int8, null where undefined) by the dataset's SQL rules.

    One row per record, in the records' order. With `subset=True` a boolean column `in_subset` is added:
    whether the record belongs to the benchmark subset by `SUBSET_SQL` (TRUE for every record of a dataset
    without a subset rule; a NULL verdict counts as FALSE).

    Raises ValueError naming the dataset when it has no SQL rules, or naming the native columns the SQL
    needs when the records lack them.
    """
    import duckdb  # loaded on first use: importing the labels package stays light

    tasks = rules_for(dataset)
    frame = records.reset_index(drop=True)
    aliases = {old: new for old, new in COLUMN_ALIASES.get(dataset, {}).items()
               if old in frame.columns and new not in frame.columns}
    frame = frame.rename(columns=aliases)
    # Object columns of mixed Python types confuse DuckDB's type sniffing; text is what TRY_CAST expects.
    frame = frame.astype({c: "string" for c in frame.columns if frame[c].dtype == object})
    selects = [
        f"CAST(({tasks[task]}) AS TINYINT) AS {task}" if task in tasks else f"CAST(NULL AS TINYINT) AS {task}"
        for task in TASK_NAMES
    ]
    if subset:
        selects.append(f"coalesce(CAST(({subset_for(dataset)}) AS BOOLEAN), false) AS in_subset")
    sql = f'SELECT CAST("image_id" AS VARCHAR) AS image_id, {", ".join(selects)} FROM records_frame'
    with duckdb.connect() as con:
        con.register("records_frame", frame)
        try:
            out = con.execute(sql).df()
        except duckdb.BinderException as error:
            raise ValueError(f"The {dataset} records lack a native column the SQL label (or subset) rules use: "
                             f"{error}") from error
    for task in TASK_NAMES:
        out[task] = out[task].astype("Int8")
    if subset:
        out["in_subset"] = out["in_subset"].astype(bool)
    return out
