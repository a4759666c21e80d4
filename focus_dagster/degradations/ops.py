"""The image operations behind the degradations, on a float image (3 x H x W, values 0-1) on any torch device.

Where torchvision has the operation (brightness, contrast, JPEG through libjpeg-turbo or nvJPEG, Gaussian blur)
it is torchvision's, so its definition is the library's and it runs on a GPU unchanged. The others are written
here because no maintained library defines them on a fundus disc; each is tested against a
reference computed independently (tests/core/degradations).

Spatial parameters arrive already scaled to the image (fundus.Disc.scale); random draws come from the caller's
seeded generator, on the CPU, so that an image degrades to the same bytes on every device.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as nnf
import torchvision.transforms.v2.functional as tvf

from focus_dagster.degradations.fundus import Disc


def disk_kernel(radius: float, alias_sigma: float) -> np.ndarray:
    """ImageNet-C's defocus kernel: a flat disk of `radius` pixels, normalised, its aliased edge smoothed by a
    Gaussian of `alias_sigma` pixels (Hendrycks & Dietterich 2019; MedMNIST-C keeps the definition)."""
    half = math.ceil(radius) + math.ceil(3 * alias_sigma)
    grid = np.arange(-half, half + 1, dtype=np.float64)
    disk = (grid[None, :] ** 2 + grid[:, None] ** 2 <= radius**2).astype(np.float64)
    if alias_sigma > 0:
        taps = np.exp(-(grid**2) / (2 * alias_sigma**2))
        taps /= taps.sum()
        disk = np.apply_along_axis(np.convolve, 0, disk, taps, mode="same")
        disk = np.apply_along_axis(np.convolve, 1, disk, taps, mode="same")
    return disk / disk.sum()


def convolve_reflect(image: torch.Tensor, kernel: np.ndarray) -> torch.Tensor:
    """`image` (3 x H x W) convolved with a symmetric square `kernel`, edges mirrored (d c b | a b c d), through the
    FFT: the cost does not grow with the kernel (a defocus kernel 70 px wide on a 2,000 px fundus, the case of a
    model that sees large images, is ~5,000 taps)."""
    half = kernel.shape[0] // 2
    height, width = image.shape[-2:]
    if half >= min(height, width):
        raise ValueError(f"a kernel {kernel.shape[0]} px wide does not fit an image of {height} x {width} px")
    padded = nnf.pad(image[None], (half, half, half, half), mode="reflect")[0]
    size = padded.shape[-2:]
    taps = torch.zeros(size, dtype=padded.dtype, device=padded.device)
    taps[: kernel.shape[0], : kernel.shape[1]] = torch.as_tensor(kernel, dtype=padded.dtype, device=padded.device)
    spectrum = torch.fft.rfft2(padded) * torch.fft.rfft2(taps)
    full = torch.fft.irfft2(spectrum, s=size)
    return full[..., 2 * half : 2 * half + height, 2 * half : 2 * half + width]


def defocus_blur(image: torch.Tensor, radius: float, alias_sigma: float) -> torch.Tensor:
    return convolve_reflect(image, disk_kernel(radius, alias_sigma)).clamp(0, 1)


def brightness(image: torch.Tensor, factor: float) -> torch.Tensor:
    """torchvision's brightness: every value times `factor` (PIL's ImageEnhance.Brightness, as MedMNIST-C uses)."""
    return tvf.adjust_brightness(image, factor)


def contrast(image: torch.Tensor, factor: float) -> torch.Tensor:
    """torchvision's contrast: a blend with the image's mean grey level (PIL's ImageEnhance.Contrast)."""
    return tvf.adjust_contrast(image, factor)


def jpeg(image: torch.Tensor, quality: int) -> torch.Tensor:
    """Encoded and decoded at `quality` by torchvision (libjpeg-turbo on the CPU, nvJPEG on a GPU)."""
    as_bytes = (image * 255).round().to(torch.uint8)
    return tvf.jpeg(as_bytes, quality).to(image.dtype) / 255


def grain_noise(shape: tuple[int, int], sigma: float, grain: int, generator: torch.Generator) -> torch.Tensor:
    """Gaussian noise of standard deviation `sigma`, one independent draw per `grain` x `grain` block (3 x H x W, on
    the CPU): noise defined at the 224-px reference is per reference pixel, or a model's downscaling would
    average it away (a 2,000 px fundus shrunk to 224 px divides per-pixel noise by about 9)."""
    height, width = shape
    rows, cols = math.ceil(height / grain), math.ceil(width / grain)
    draws = torch.randn((3, rows, cols), generator=generator, dtype=torch.float32) * sigma
    return draws.repeat_interleave(grain, dim=1).repeat_interleave(grain, dim=2)[:, :height, :width]


def gaussian_noise(image: torch.Tensor, sigma: float, grain: int, generator: torch.Generator) -> torch.Tensor:
    noise = grain_noise(tuple(image.shape[-2:]), sigma, grain, generator).to(image.device, image.dtype)
    return (image + noise).clamp(0, 1)


def _field(disc: Disc, values: np.ndarray, image: torch.Tensor) -> torch.Tensor:
    return torch.as_tensor(values, dtype=image.dtype, device=image.device)[None]


def uneven_illumination(image: torch.Tensor, depth: float, disc: Disc, generator: torch.Generator) -> torch.Tensor:
    """Light falling off across the disc from a side drawn at random: full on that side, `depth` darker on the
    opposite rim, linear in between (a decentred or tilted illumination; Shen et al. 2020's light transmission
    disturbance, with a spatial profile)."""
    angle = float(torch.rand((), generator=generator)) * 2 * math.pi
    ys, xs = np.ogrid[: disc.height, : disc.width]
    along = ((xs + 0.5 - disc.cx) * math.cos(angle) + (ys + 0.5 - disc.cy) * math.sin(angle)) / disc.radius
    gain = 1 - depth * (1 + np.clip(along, -1, 1)) / 2
    return (image * _field(disc, gain, image)).clamp(0, 1)


def haze(image: torch.Tensor, transmission: float, disc: Disc) -> torch.Tensor:
    """A cataract's veil: the eye's point spread as a sharp core of weight `transmission` plus a wide halo (a
    Gaussian of a tenth of the disc's diameter), after Peli's cataract model: fine detail keeps `transmission` of
    its contrast, the rest is scattered into a low-frequency glow of the image itself."""
    return transmission * image + (1 - transmission) * wide_blur(image, sigma=0.2 * disc.radius)


def wide_blur(image: torch.Tensor, sigma: float) -> torch.Tensor:
    """A Gaussian blur wider than an FFT needs to be exact: computed at 1/8 of the size, where the blur is still
    many pixels wide, and brought back by bilinear interpolation (a low-pass image loses nothing by it)."""
    height, width = image.shape[-2:]
    factor = max(1, min(8, int(sigma // 4)))
    small = nnf.interpolate(image[None], size=(math.ceil(height / factor), math.ceil(width / factor)), mode="area")
    small_sigma = sigma / factor
    kernel = 2 * min(math.ceil(3 * small_sigma), (min(small.shape[-2:]) - 1) // 2) + 1
    blurred = tvf.gaussian_blur(small, kernel_size=[kernel, kernel], sigma=[small_sigma, small_sigma])
    return nnf.interpolate(blurred, size=(height, width), mode="bilinear", align_corners=False)[0]


def vignetting(image: torch.Tensor, depth: float, disc: Disc) -> torch.Tensor:
    """An edge shadow, as a small pupil or a misaligned camera leaves: no loss at the centre, `depth` at the rim,
    growing with the fourth power of the distance from the centre (the darkening stays near the edge)."""
    gain = 1 - depth * np.clip(disc.radial(), 0, 1) ** 4
    return image * _field(disc, gain, image)
