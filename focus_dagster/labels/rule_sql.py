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

Only the labels are checked here; which records belong to the benchmark subset is the rules' `subset`, and
the comparison is made on the images the harmonised table kept.
"""

from __future__ import annotations

import pandas as pd

__all__ = ["COLUMN_ALIASES", "RULE_SQL", "independent_labels"]

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

# The same native column under the other name a publisher uses (datasets.md: "accept both").
COLUMN_ALIASES: dict[str, dict[str, str]] = {
    "messidor_2": {"adjudicated_dr_grade": "diagnosis"},
}


def independent_labels(dataset: str, records: pd.DataFrame) -> pd.DataFrame:
    """image_id and the three tasks (nullable Int8, null where undefined) by the dataset's SQL rules.

    Raises ValueError naming the dataset when it has no SQL rules, or naming the native columns the SQL
    needs when the records lack them.
    """
    import duckdb  # loaded on first use: importing the labels package stays light

    if dataset not in RULE_SQL:
        raise ValueError(f"No independent SQL label rules for dataset {dataset!r}: add them to RULE_SQL.")
    frame = records.reset_index(drop=True)
    aliases = {old: new for old, new in COLUMN_ALIASES.get(dataset, {}).items()
               if old in frame.columns and new not in frame.columns}
    frame = frame.rename(columns=aliases)
    # Object columns of mixed Python types confuse DuckDB's type sniffing; text is what TRY_CAST expects.
    frame = frame.astype({c: "string" for c in frame.columns if frame[c].dtype == object})
    tasks = RULE_SQL[dataset]
    selects = ", ".join(
        f"CAST(({tasks[task]}) AS TINYINT) AS {task}" if task in tasks else f"CAST(NULL AS TINYINT) AS {task}"
        for task in TASK_NAMES
    )
    sql = f'SELECT CAST("image_id" AS VARCHAR) AS image_id, {selects} FROM records_frame'
    with duckdb.connect() as con:
        con.register("records_frame", frame)
        try:
            out = con.execute(sql).df()
        except duckdb.BinderException as error:
            raise ValueError(f"The {dataset} records lack a native column the SQL label rules use: {error}") from error
    for task in TASK_NAMES:
        out[task] = out[task].astype("Int8")
    return out
