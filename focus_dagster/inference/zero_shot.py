"""Zero-shot scores of a dual encoder from stored image embeddings.

For each image and task, the score is P(positive prompt): the softmax, over the task's registered
(negative, positive) prompt pair, of `logit_scale * cosine(image, prompt)` (focus_dagster.prompts). Only the
text tower runs here; the image side is read from the embeddings the encoder already produced, so scoring
a dataset costs two prompt encodings per task.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np
import pandas as pd

from focus_dagster.prompts import PROMPTS_VERSION, prompt_pair, zero_shot_probability

if TYPE_CHECKING:
    from focus_dagster.models.base import LoadedEncoder

ZERO_SHOT_COLUMNS = ["model", "dataset", "image_id", "task", "score", "prompts", "pipeline_check_model",
                     "in_pretraining_data"]


def zero_shot_frame(encoder: LoadedEncoder, embeddings: pd.DataFrame, tasks: Sequence[str],
                    dataset: str) -> pd.DataFrame:
    """One row per task and image (tasks in the order given, images in the order of `embeddings`), with
    the columns of ZERO_SHOT_COLUMNS: the P(positive) score, the prompts version it came from, and the
    model's pipeline-check and pretraining-contamination flags for `dataset`.

    encoder: a loaded dual encoder (text tower and logit_scale); embeddings: its image embeddings
    (image_id, embedding); tasks: the tasks to score, those the dataset's labels define. No task or no
    image gives an empty frame with the same columns.
    """
    import torch

    if not len(tasks) or embeddings.empty:
        return pd.DataFrame(columns=ZERO_SHOT_COLUMNS)
    images = torch.from_numpy(np.stack(embeddings["embedding"].to_numpy()).astype(np.float32))
    rows = [_task_rows(encoder, images, embeddings["image_id"], task, dataset) for task in tasks]
    return pd.concat(rows, ignore_index=True)


def _task_rows(encoder: LoadedEncoder, images, image_ids: pd.Series, task: str, dataset: str) -> pd.DataFrame:
    """The rows of one task: its prompt pair through the text tower, then the two-prompt softmax per image."""
    import torch

    negative, positive = prompt_pair(task)
    with torch.inference_mode():
        text = encoder.text([negative, positive]).float()
    scores = zero_shot_probability(images, text[0], text[1], encoder.logit_scale).numpy()
    return pd.DataFrame({"model": encoder.spec.id, "dataset": dataset, "image_id": image_ids,
                         "task": task, "score": scores.astype(float), "prompts": PROMPTS_VERSION,
                         "pipeline_check_model": encoder.spec.is_pipeline_check,
                         "in_pretraining_data": encoder.spec.contamination(dataset)})
