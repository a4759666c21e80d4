"""G1020 (Bajwa et al. 2020): `G1020/G1020.csv` + `G1020/Images/image_{n}.jpg`.

1,020 images of 432 patients from a private clinical practice, sizes between 1944x2108 and
2426x3007 pixels; numbers `n` run from 0 to 3202 with gaps. Beside each image, a LabelMe
`image_{n}.json` holds the optic disc and cup polygons (not read here: the benchmark uses the labels
only). Columns `imageID, binaryLabels` (0 = normal, 1 = glaucoma; 724 / 296). `imageID` is the file
name (`image_0.jpg`) in the published file; some copies drop the extension (`image_0`): both are
accepted and the image id is the stem, as in the benchmark's split file.

There is no patient column, so patient_id is None: a split of G1020 cannot be grouped by patient and
may put the two eyes (or repeat visits) of one patient on both sides; checks downstream say so.
Tolerated: the dataset root being the `G1020` folder itself.
"""

from __future__ import annotations

from pathlib import Path

from focus_dagster.datasets.codes import Code, apply_codes
from focus_dagster.datasets.label_files import read_label_csv
from focus_dagster.datasets.reader import DatasetReader
from focus_dagster.datasets.records import LabelTable
from focus_dagster.datasets.rows import file_name_rows
from focus_dagster.errors import DatasetLayoutError

DATASET_FOLDER = "G1020"
LABEL_FILE = "G1020.csv"
IMAGE_DIR = "Images"

PUBLISHED_COLUMNS = ["imageID", "binaryLabels"]
REQUIRED_COLUMNS = PUBLISHED_COLUMNS
CODES = [Code("binaryLabels", int_range=(0, 1))]


class G1020Reader(DatasetReader):
    key = "g1020"

    def read_table(self, root: Path) -> LabelTable:
        base = dataset_folder(root, self.key)
        label_file = _join(base, LABEL_FILE)
        image_dir = _join(base, IMAGE_DIR)
        if not (root / image_dir).is_dir():
            raise DatasetLayoutError(
                f"[{self.key}] image folder {root / image_dir} is missing; the published layout has "
                f"{DATASET_FOLDER}/{IMAGE_DIR}/image_<n>.jpg beside {DATASET_FOLDER}/{LABEL_FILE}."
            )
        native = read_label_csv(root, label_file, self.key, REQUIRED_COLUMNS)
        rows = file_name_rows(native, root, "imageID", image_dir, default_suffix=".jpg")
        return LabelTable(apply_codes(rows, CODES, self.key), [label_file], [image_dir])


def dataset_folder(root: Path, dataset: str) -> str:
    """`G1020` under the root, or "" when the root is that folder itself."""
    if (root / DATASET_FOLDER / LABEL_FILE).is_file():
        return DATASET_FOLDER
    if (root / LABEL_FILE).is_file():
        return ""
    raise DatasetLayoutError(
        f"[{dataset}] label file missing: looked for {root / DATASET_FOLDER / LABEL_FILE} and {root / LABEL_FILE}. "
        f"Point the dataset root at the folder holding {DATASET_FOLDER}/ or at {DATASET_FOLDER}/ itself."
    )


def _join(base: str, rel: str) -> str:
    return f"{base}/{rel}" if base else rel


READER = G1020Reader()
