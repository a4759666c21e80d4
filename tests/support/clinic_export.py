"""A clinic export as a researcher brings it: JPEGs under `img/` and a CSV `file, patient_id, dr_grade, dme, cdr,
age, sex, quality, split`, declared in focus.yaml exactly as README's "Your own dataset" shows (the example is
read from README.md, only its root replaced).

The rows are written by hand, each with the task values the published definitions give it (ICDR: any DR =
grade >= 1, referable DR = grade >= 2 or macular edema; GON = vertical cup-to-disc ratio >= 0.6 as declared;
a blank grade or ratio is undefined, a blank edema flag no edema), or the reason it must be quarantined.
`write_export(copies=n)` repeats the sound rows n more times under new patients (same values, same
expectations) so that a model run has both classes on both sides of the split.
"""

from __future__ import annotations

import csv
from pathlib import Path

N = None  # undefined: the task has no label for this image

# file, patient_id, dr_grade, dme, cdr, age, sex, quality, split -> (any_dr, referable_dr, gon)
SOUND = [
    (("p01_r.jpg", "P01", "0", "no", "0.3", "54", "F", "good", "train"), (0, 0, 0)),
    (("p01_l.jpg", "P01", "1", "no", "0.35", "54", "F", "good", "train"), (1, 0, 0)),
    (("p02_r.jpg", "P02", "2", "no", "0.5", "61", "M", "usable", "test"), (1, 1, 0)),
    # Edema alone makes DR referable (ICDR 0 with DME); cup-to-disc 0.62 >= 0.6.
    (("p02_l.jpg", "P02", "0", "yes", "0.62", "61", "M", "usable", "test"), (0, 1, 1)),
    # Exactly at the threshold is positive; sex code 2 = female; 'poor' is not an adequate value.
    (("p03_r.jpg", "P03", "4", "yes", "0.6", "70", "2", "poor", "train"), (1, 1, 1)),
    # A blank grade is undefined for both DR tasks (never negative); the blank edema flag changes nothing.
    (("p03_l.jpg", "P03", "", "", "0.59", "70", "2", "poor", "train"), (N, N, 0)),
    # A blank ratio leaves gon undefined; blank edema is no edema, grade 3 is referable anyway.
    (("p04_r.jpg", "P04", "3", "", "", "45", "1", "good", "test"), (1, 1, N)),
    (("p04_l.jpg", "P04", "1", "yes", "0.8", "45", "1", "good", "test"), (1, 1, 1)),
    # Values compared as written: 'm' is M, 'Good' is good, '1' is an edema 'yes' (default flags), NA age blank.
    (("p08_r.jpg", "P08", "2.0", "1", "0.4", "NA", "m", "Good", "val"), (1, 1, 0)),
    (("p09_r.jpg", "P09", "0", "NO", "0.1", "33", "F", "usable", "train"), (0, 0, 0)),
    (("p10_r.jpg", "P10", "1", "0", "0.7", "48", "F", "good", "test"), (1, 0, 1)),
]
# Expected metadata of the sound rows, in order: (age, sex, quality).
METADATA = [(54.0, "F", "adequate"), (54.0, "F", "adequate"), (61.0, "M", "adequate"), (61.0, "M", "adequate"),
            (70.0, "F", "inadequate"), (70.0, "F", "inadequate"), (45.0, "M", "adequate"), (45.0, "M", "adequate"),
            (None, "M", "adequate"), (33.0, "F", "adequate"), (48.0, "F", "adequate")]

# Rows the reader must quarantine: the row, and (reason code, words the reason must hold).
BAD = [
    (("p05_r.jpg", "P05", "7", "no", "0.3", "50", "F", "good", "train"), ("out_of_scale:dr_grade", "'7'")),
    (("p05_l.jpg", "P05", "2.5", "no", "0.3", "50", "F", "good", "train"), ("out_of_scale:dr_grade", "'2.5'")),
    (("p06_r.jpg", "P06", "0", "no", "1.4", "50", "F", "good", "train"), ("out_of_scale:cdr", "'1.4'")),
    (("p06_l.jpg", "P06", "1", "maybe", "0.3", "50", "F", "good", "train"), ("out_of_scale:dme", "'maybe'")),
    (("p07_r.jpg", "P07", "0", "no", "0.2", "38", "X", "good", "train"), ("out_of_scale:sex", "'X'")),
    (("p07_l.jpg", "P07", "0", "no", "0.2", "38", "F", "good", "holdout"), ("out_of_scale:split", "'holdout'")),
    (("absent.jpg", "P11", "0", "no", "0.3", "50", "F", "good", "train"), ("image_missing", "absent.jpg")),
]
HEADER = ("file", "patient_id", "dr_grade", "dme", "cdr", "age", "sex", "quality", "split")

README = Path(__file__).resolve().parents[2] / "README.md"
README_ROOT = "root: /data/clinic"


def readme_datasets() -> str:
    """The `datasets:` entries of README's "Your own dataset" example, exactly as printed there."""
    section = README.read_text(encoding="utf-8").split("## Your own dataset", 1)[1]
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert block.startswith("datasets:\n") and README_ROOT in block, "README's example has moved"
    return block.removeprefix("datasets:\n")


def rows(copies: int = 0) -> list[tuple[tuple, tuple | None]]:
    """(CSV row, expected tasks or None for a quarantined row): the literal rows, then `copies` repeats of the
    sound ones under new patients (`C<k>-P01` ...), files `c<k>_...`."""
    out = [(row, tasks) for row, tasks in SOUND] + [(row, None) for row, _ in BAD]
    for k in range(copies):
        out += [((f"c{k}_{row[0]}", f"C{k}-{row[1]}", *row[2:]), tasks) for row, tasks in SOUND]
    return out


def write_export(root: Path, copies: int = 0, size: int = 64) -> Path:
    """The export under `root`: `export.csv` and one small fundus JPEG per row (none for `absent.jpg`)."""
    from focus_dagster.synthetic.render import FundusSpec, render_fundus

    (root / "img").mkdir(parents=True, exist_ok=True)
    table = rows(copies)
    with open(root / "export.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(HEADER)
        for row, _ in table:
            writer.writerow((f"img/{row[0]}", *row[1:]))
    for index, (row, _) in enumerate(table):
        if row[0] == "absent.jpg":
            continue
        grade = int(float(row[2])) if row[2] not in ("",) and float(row[2]) <= 4 and float(row[2]).is_integer() else 0
        cdr = float(row[4]) if row[4] and float(row[4]) <= 1 else 0.3
        spec = FundusSpec(width=size, height=size, camera="generic", dr_grade=grade,
                          macular_edema=row[3] in ("yes", "1"), cup_disc_ratio=min(max(cdr, 0.1), 0.9))
        render_fundus(spec, seed=index).save(root / "img" / row[0], quality=90)
    return root


def declaration(root: Path) -> str:
    """The `datasets:` entries of README's example, the clinic's root pointing at `root`."""
    return readme_datasets().replace(README_ROOT, f"root: {root}")
