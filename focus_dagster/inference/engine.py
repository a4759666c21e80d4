"""A batched runner over images, shared by every model step: encoders (embeddings) and the yes/no scorer
(per-image score vectors) alike.

`run_on_images` calls one forward function on batches of images and keeps one output row per image.
Images are decoded and preprocessed in worker processes while the model runs (on CUDA the workers read
the bytes and the GPU decodes JPEGs a batch at a time, device_decode.py); with a pixel cache
(pixel_cache.py) each image is decoded once per preprocessing, and the next model on the dataset reads its
pixels. The device is chosen automatically (CUDA when present, with bf16 autocast); work is written in
shards, so a run killed half way resumes without redoing finished shards, and a changed model, revision,
preprocessing, decoder or image set gives new shard keys (stale shards are removed). An unreadable image is
recorded with its reason and the rest continue; a CUDA out-of-memory halves the batch and retries.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Callable, NamedTuple, Protocol, Sequence

import numpy as np

from focus_dagster.files import atomic_path
from focus_dagster.inference.device_decode import Decoder, choose_decoder, decode_batch
from focus_dagster.inference.images import is_colour_jpeg, normalise, pixels_from_bytes
from focus_dagster.inference.pixel_cache import KnownHashes, PixelCache, content_hash_of, preprocessing_key
from focus_dagster.models.spec import Preprocess
from focus_dagster.progress import Progress

SHARD_SIZE = 512
DECODE_CHUNK = 8  # images per worker task
SHARD_PREFIX = "shard-"


@dataclass
class ImageRun:
    """The forward function's output row of every image that could be read (`outputs[i]` belongs to
    `image_ids[i]`), why the others could not be read, and how the run went."""

    image_ids: list[str]
    outputs: np.ndarray
    failed: dict[str, str]
    device: str
    batch_size: int
    seconds: float
    shards_reused: int
    shards_computed: int
    images_computed: int = 0
    log: list[str] = field(default_factory=list)
    decoder: str = ""
    pixels_from_cache: int = 0  # images of the computed shards whose pixels were read back, not decoded
    pixels_decoded: int = 0  # images decoded by this run (on the CPU or the device)

    @property
    def images_per_second(self) -> float:
        return self.images_computed / self.seconds if self.seconds > 0 and self.images_computed else 0.0

    def summary(self) -> dict:
        data = asdict(self)
        data.pop("outputs")
        data.pop("image_ids")
        data.pop("log")
        data["failed"] = dict(list(self.failed.items())[:20])
        data.update(n=len(self.image_ids), failed_count=len(self.failed),
                    dim=int(self.outputs.shape[1]) if self.outputs.ndim == 2 else 0,
                    images_per_second=round(self.images_per_second, 2))
        return data


def pick_device(requested: str | None = None) -> str:
    import torch

    if requested:
        return requested
    return "cuda" if torch.cuda.is_available() else "cpu"


def default_batch_size(device: str) -> int:
    return 128 if device.startswith("cuda") else 32


SMALL_RUN = 256  # images: below this, starting decoder processes costs more than decoding in the main one


def default_workers(n_images: int | None = None) -> int:
    """Decoder processes: one per core (up to 16), none for a small run."""
    if n_images is not None and n_images < SMALL_RUN:
        return 0
    return max(1, min(16, (os.cpu_count() or 2)))


class Fetched(NamedTuple):
    """One image as a worker hands it over: its pixels, or its JPEG bytes for the device to decode, or why it
    could not be read; `origin` says which (CACHED, DECODED, ON_DEVICE or FAILED)."""

    index: int
    pixels: object  # torch uint8 [3, size, size] or None
    encoded: object  # torch uint8 [n] (the file's bytes) or None
    key: str  # the image's content hash where pixels are cached, else ""
    origin: str
    error: str = ""


CACHED, DECODED, ON_DEVICE, FAILED = "cache", "decoded", "device", "failed"


class Alteration(Protocol):
    """What a run does to every image's pixels on the model's grid, before the model's normalisation (a
    degradation at one severity): `id` names it and its parameters (part of the pixel-cache key and of the shard
    keys), and calling it with the image's uint8 pixels (H x W x 3) and its content hash returns the altered
    pixels, the same bytes for the same image every time."""

    id: str

    def __call__(self, image: np.ndarray, key: str) -> np.ndarray: ...


def altered_key(content: str, alteration: Alteration) -> str:
    """The pixel-cache key of an altered image: its content hash and the alteration, hashed together."""
    return hashlib.blake2b(f"{content}|{alteration.id}".encode(), digest_size=16).hexdigest()


class ImageFiles:
    """A torch-style dataset of images as `Fetched` items: pixels from the cache when they are there, else
    decoded here (or, for the device decoder, the JPEG's bytes); a file that cannot be read yields its reason."""

    def __init__(self, paths: Sequence[str], preprocess: Preprocess, decoder: Decoder | None = None,
                 cache: PixelCache | None = None, hashes: KnownHashes | None = None,
                 alteration: Alteration | None = None):
        self.paths = list(paths)
        self.preprocess = preprocess
        self.decoder = decoder or choose_decoder("cpu")
        self.cache = cache
        self.hashes = hashes
        self.alteration = alteration

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> Fetched:
        try:
            return self._fetch(index)
        except Exception as exc:  # any decoding failure is a per-image outcome, recorded, not fatal
            return Fetched(index, None, None, "", FAILED, f"{type(exc).__name__}: {exc}")

    def _fetch(self, index: int) -> Fetched:
        import torch

        path = self.paths[index]
        content, data = self._content_key(path) if self.cache or self.alteration else ("", None)
        key = altered_key(content, self.alteration) if self.alteration else content
        cached = self.cache.read(key) if self.cache else None
        if cached is not None:
            return Fetched(index, torch.from_numpy(cached), None, key, CACHED)
        if self.alteration is not None:
            return self._altered(index, path, data, content, key)
        data = Path(path).read_bytes() if data is None else data
        if self.decoder.device and is_colour_jpeg(data):
            return Fetched(index, None, torch.frombuffer(bytearray(data), dtype=torch.uint8), key, ON_DEVICE)
        pixels = pixels_from_bytes(data, self.preprocess, self.decoder.cpu)
        if self.cache:
            self.cache.write(key, pixels)
        return Fetched(index, torch.from_numpy(pixels), None, key, DECODED)

    def _altered(self, index: int, path: str, data: bytes | None, content: str, key: str) -> Fetched:
        """One image's degraded pixels: its clean pixels on the model's grid (read back from the cache when the
        clean run or another degradation left them there: each image is decoded once for all its degradations),
        degraded on that grid (degradations/__init__.py says why there), then cached under their own key."""
        import torch

        clean = self.cache.read(content) if self.cache else None
        origin = CACHED
        if clean is None:
            data = Path(path).read_bytes() if data is None else data
            clean = pixels_from_bytes(data, self.preprocess, self.decoder.cpu)
            origin = DECODED
            # A device decoder's cache holds its own pixels (they can differ in the last bit): the clean run
            # writes them there, not this CPU decode.
            if self.cache and not self.decoder.device:
                self.cache.write(content, clean)
        pixels = np.ascontiguousarray(self.alteration(clean.transpose(1, 2, 0), content).transpose(2, 0, 1))
        if self.cache:
            self.cache.write(key, pixels)
        return Fetched(index, torch.from_numpy(pixels), None, key, origin)

    def _content_key(self, path: str) -> tuple[str, bytes | None]:
        """The image's content hash: the labels' while the file is unchanged since, else its bytes' (then read
        here once, for decoding too)."""
        recorded = self.hashes.current(path) if self.hashes else None
        if recorded:
            return recorded, None
        data = Path(path).read_bytes()
        return content_hash_of(data), data


def run_fingerprint(parts: dict) -> str:
    """A key for everything that determines the numbers: model, weights, revision, preprocessing, code."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:20]


def run_on_images(
    forward: Callable,
    items: Sequence[tuple[str, str]],
    preprocess: Preprocess,
    *,
    work_dir: Path,
    fingerprint: str,
    device: str | None = None,
    batch_size: int | None = None,
    num_workers: int | None = None,
    shard_size: int | None = None,
    progress: Callable[[str], None] | None = None,
    stop_after_shards: int | None = None,
    pass_ids: bool = False,
    pixel_cache: Path | None = None,
    known_hashes: KnownHashes | None = None,
    decoder: Decoder | None = None,
    what: str = "images",
    alteration: Alteration | None = None,
) -> ImageRun:
    """Run `forward` (pixels [B, 3, H, W] -> [B, D] tensor) over `items` ((image_id, absolute path) pairs),
    in batches: an encoder's `embed` gives embeddings, a yes/no scorer gives per-image score vectors.

    `pass_ids=True` calls `forward(pixels, image_ids)` instead, for models whose input depends on the image
    beyond its pixels (a yes/no question with per-image context).

    Shards of `shard_size` images are written under `work_dir` as they finish; a shard whose key (the run
    fingerprint + its image ids and paths) is already there is reused. `stop_after_shards` stops early,
    as a killed run would (for tests).

    `pixel_cache` (a dataset's folder in the artifact store) keeps every decoded image for the next model with
    the same preprocessing; `known_hashes` (the labels' content hashes) spare reading and hashing files that
    have not changed since. `decoder` is chosen from the device unless given (device_decode.choose_decoder).

    `alteration` (a degradation at one severity; `Alteration`) is applied to every image's clean pixels on the
    model's grid (read back from the pixel cache when there, so an image is decoded once for all degradations);
    the altered pixels are cached under their own key and the shards keyed by the alteration.

    `progress` gets a progress line (done / total images of the shards to compute, rate, time left) about every
    ten seconds and a final one, named `what` (focus_dagster/progress.py); without it the lines go to `ImageRun.log`.
    """
    device = pick_device(device)
    decoder = decoder or choose_decoder(device, preprocess=preprocess)
    cache = (PixelCache(Path(pixel_cache) / preprocessing_key(preprocess, decoder.id), preprocess.size)
             if pixel_cache is not None else None)
    files = partial(ImageFiles, preprocess=preprocess, decoder=decoder, cache=cache, hashes=known_hashes,
                    alteration=alteration)
    # Pixels from another decoder can differ in the last bit: shards of one decoder are not another's.
    fingerprint = f"{fingerprint}:{decoder.id}" + (f":{alteration.id}" if alteration else "")
    shard_size = shard_size or SHARD_SIZE
    batch_size = batch_size or default_batch_size(device)
    num_workers = default_workers(len(items)) if num_workers is None else num_workers
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    shards = [list(items[i : i + shard_size]) for i in range(0, len(items), shard_size)]
    keys = [shard_key(fingerprint, shard) for shard in shards]
    started, computed, images_computed = time.perf_counter(), 0, 0
    origins: dict[str, int] = {}
    log: list[str] = []
    paths = [work_dir / f"{SHARD_PREFIX}{index:05d}-{key}.npz" for index, key in enumerate(keys)]
    todo = [(shard, path) for shard, path in zip(shards, paths) if not path.exists()]
    reused = len(shards) - len(todo)
    todo = todo if stop_after_shards is None else todo[:stop_after_shards]
    # Counted per batch, over the images still to compute: reused shards cost nothing and say nothing of the rate.
    tracker = Progress(what, sum(len(shard) for shard, _ in todo), "images", progress or log.append)
    for shard, path in todo:
        batch_size = _compute_shard(forward, shard, files, path, device, batch_size, num_workers, pass_ids, origins,
                                    tracker.advance)
        computed += 1
        images_computed += len(shard)
    tracker.finish()
    _remove_stale_shards(work_dir, keys)
    ids, outputs, failed = _collect(work_dir, keys)
    return ImageRun(ids, outputs, failed, device, batch_size, time.perf_counter() - started, reused, computed,
                    images_computed, log, decoder.id, origins.get(CACHED, 0),
                    origins.get(DECODED, 0) + origins.get(ON_DEVICE, 0))


def shard_key(fingerprint: str, shard: Sequence[tuple[str, str]]) -> str:
    """The run fingerprint plus each image's id, path, size and modification time: an image replaced in
    place (same name, other bytes) gives its shard a new key."""
    digest = hashlib.sha256(fingerprint.encode())
    for image_id, path in shard:
        try:
            stat = os.stat(path)
            version = f"{stat.st_size}:{stat.st_mtime_ns}"
        except OSError:
            version = "absent"
        digest.update(f"{image_id}\0{path}\0{version}\n".encode())
    return digest.hexdigest()[:20]


def _compute_shard(forward, shard, files: Callable[[list[str]], ImageFiles], path: Path, device: str, batch_size: int, num_workers: int,
                   pass_ids: bool = False, origins: dict[str, int] | None = None,
                   advance: Callable[[int], None] = lambda _n: None) -> int:
    """Run one shard and write it atomically; returns the batch size that worked (it may have halved).
    `origins` counts where each image's pixels came from; `advance(n)` is told of every n images done."""
    ids = [image_id for image_id, _ in shard]
    forward = _with_ids(forward, ids) if pass_ids else _pixels_only(forward)
    dataset = files([p for _, p in shard])
    rows: dict[int, np.ndarray] = {}
    failures: dict[int, str] = {}
    origins = {} if origins is None else origins
    # Workers decode small chunks (so every worker is busy even on a short shard); the model gets full batches.
    pending: list[Fetched] = []
    for chunk in _loader(dataset, min(DECODE_CHUNK, batch_size), num_workers, device):
        for fetched in chunk:
            if fetched.origin != ON_DEVICE:  # those count once the device has decoded them
                _count(origins, fetched.origin)
            if fetched.error:
                failures[fetched.index] = fetched.error
            else:
                pending.append(fetched)
        advance(sum(1 for fetched in chunk if fetched.error))  # an unreadable image is done too
        if len(pending) >= batch_size:
            batch_size = _run_pending(forward, pending, dataset, rows, failures, origins, device, batch_size)
            advance(len(pending))
            pending = []
    if pending:
        batch_size = _run_pending(forward, pending, dataset, rows, failures, origins, device, batch_size)
        advance(len(pending))
    order = sorted(rows)
    matrix = np.stack([rows[i] for i in order]) if order else np.zeros((0, 0), dtype=np.float32)
    # The array keeps its first name, "embeddings", so shards written before still resume.
    with atomic_path(path, suffix=".npz") as partial:
        np.savez(partial, embeddings=matrix, ids=np.asarray([ids[i] for i in order], dtype=object).astype(str),
                 failed=json.dumps({ids[i]: reason for i, reason in failures.items()}))
    return batch_size


def _run_pending(forward, pending: list[Fetched], dataset: ImageFiles, rows: dict, failures: dict,
                 origins: dict[str, int], device: str, batch_size: int) -> int:
    """Decode on the device what the workers left as bytes, then run the model on the whole batch."""
    pixels, indices = _device_pixels(pending, dataset, failures, origins, device)
    return _run_batch(forward, pixels, indices, rows, device, batch_size, dataset.preprocess)


def _device_pixels(pending: list[Fetched], dataset: ImageFiles, failures: dict, origins: dict[str, int], device: str):
    """The batch's pixels on the model's device and their shard positions: the workers' pixels moved there,
    the JPEG bytes decoded there (and written to the pixel cache)."""
    import torch

    ready = [f for f in pending if f.pixels is not None]
    parts = [torch.stack([f.pixels for f in ready]).to(device, non_blocking=True)] if ready else []
    indices = [f.index for f in ready]
    encoded = [f for f in pending if f.encoded is not None]
    if encoded:
        decoded = decode_batch([f.encoded for f in encoded], dataset.preprocess, dataset.decoder)
        for fetched, result in zip(encoded, decoded):
            if isinstance(result, str):
                failures[fetched.index] = result
                _count(origins, FAILED)
                continue
            _count(origins, ON_DEVICE)
            if dataset.cache and fetched.key:
                dataset.cache.write(fetched.key, result.cpu().numpy())
            parts.append(result[None].to(device))
            indices.append(fetched.index)
    return (torch.cat(parts) if parts else torch.zeros(0, dtype=torch.uint8)), indices


def _count(origins: dict[str, int], origin: str) -> None:
    origins[origin] = origins.get(origin, 0) + 1


def _with_ids(forward, ids: list[str]):
    """forward(pixels, positions in the shard) -> the model called with the image ids at those positions."""
    return lambda pixels, positions: forward(pixels, [ids[i] for i in positions])


def _pixels_only(forward):
    return lambda pixels, positions: forward(pixels)


def _loader(dataset, batch_size: int, num_workers: int, device: str):
    from torch.utils.data import DataLoader

    return DataLoader(
        dataset,
        batch_size=batch_size,
        num_workers=num_workers,
        pin_memory=device.startswith("cuda"),
        persistent_workers=False,
        prefetch_factor=4 if num_workers else None,
        worker_init_fn=_decoder_worker,
        collate_fn=_as_list,
    )


def _as_list(items: list[Fetched]) -> list[Fetched]:
    """A chunk stays a list: cached pixels, decoded pixels and JPEG bytes do not stack into one tensor."""
    return items


def _decoder_worker(_worker_id: int) -> None:
    """Decoders yield to the model: one thread each, and a lower scheduling priority, so that on a small
    CPU the model's threads are never the ones waiting."""
    import torch

    torch.set_num_threads(1)
    try:
        os.nice(5)
    except OSError:
        pass


def _run_batch(forward, pixels, indices, out: dict, device: str, batch_size: int, preprocess: Preprocess) -> int:
    """Run the model (forward(pixels, shard positions)) on one batch, halving it on CUDA out-of-memory until it fits."""
    import torch

    start = 0
    while start < len(indices):
        chunk = slice(start, start + batch_size)
        try:
            with torch.inference_mode(), _autocast(device):
                result = forward(model_input(pixels[chunk], device, preprocess), indices[chunk])
        except torch.OutOfMemoryError:
            if batch_size == 1:
                raise
            torch.cuda.empty_cache()
            batch_size = max(1, batch_size // 2)
            continue
        for i, row in zip(indices[chunk], result.float().cpu().numpy()):
            out[i] = row
        start += len(indices[chunk])
    return batch_size


def model_input(pixels, device: str, preprocess: Preprocess | None = None):
    """A batch on the device (uint8 pixels normalised there), channels-last like the model's convolutions."""
    import torch

    pixels = pixels.to(device, non_blocking=True)
    if preprocess is not None and pixels.dtype == torch.uint8:
        pixels = normalise(pixels, preprocess)
    return pixels.contiguous(memory_format=torch.channels_last)


def compute_dtype(device: str) -> str:
    """The dtype a batch's matrix products run in on `device`: bf16 autocast on CUDA, float32 on a CPU."""
    return "bfloat16" if device.startswith("cuda") else "float32"


def _autocast(device: str, dtype: str | None = None):
    """Autocast to `dtype` (default: `compute_dtype(device)`) on the device's type; float32 runs as it is."""
    import contextlib

    import torch

    dtype = dtype or compute_dtype(device)
    if dtype == "float32":
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=getattr(torch, dtype))


def _remove_stale_shards(work_dir: Path, keys: list[str]) -> None:
    wanted = set(keys)
    for path in work_dir.glob(f"{SHARD_PREFIX}*.npz"):
        if path.stem.rsplit("-", 1)[-1] not in wanted:
            path.unlink()


def _collect(work_dir: Path, keys: list[str]):
    ids: list[str] = []
    parts: list[np.ndarray] = []
    failed: dict[str, str] = {}
    for path in sorted(work_dir.glob(f"{SHARD_PREFIX}*.npz")):
        if path.stem.rsplit("-", 1)[-1] not in keys:
            continue
        with np.load(path, allow_pickle=False) as data:
            if len(data["ids"]):
                ids.extend(data["ids"].tolist())
                parts.append(data["embeddings"])
            failed.update(json.loads(str(data["failed"])))
    matrix = np.concatenate(parts) if parts else np.zeros((0, 0), dtype=np.float32)
    return ids, matrix.astype(np.float32, copy=False), failed
