"""Peak FLOP/s of Intel GPUs, so that Lightning's `ThroughputMonitor` can report MFU on XPU.

Peak = (operations per EU per clock for the data type) x (EUs the device exposes) x (maximum clock). The rates
are Intel's per-Xe-core figures divided by the EUs (vector engines) of one Xe-core. The EU count comes from the
device itself (`gpu_eu_count`), so one stack ("tile") of a Max 1550 in FLAT mode gets half the card's figure and a
part with EUs fused off gets its own. Every figure below names its public source. Devices and data types without a
sourced figure are left out on purpose (Lightning then warns and reports no MFU, as it does for unknown CUDA cards).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

# Keys of the rate tables: torch dtypes are mapped to these names (see `dtype_key`).
FLOAT64, FLOAT32, TFLOAT32, BFLOAT16, FLOAT16, INT8 = "float64", "float32", "tfloat32", "bfloat16", "float16", "int8"


@dataclass(frozen=True)
class Architecture:
    name: str
    ops_per_eu_per_clock: Mapping[str, int]


# Xe-HPC (Data Center GPU Max). Per Xe-core and clock: 256 FP64 and 256 FP32 operations on the vector engines;
# 2048 TF32, 4096 FP16/BF16 and 8192 INT8 operations on the XMX matrix engines; 8 vector engines (EUs) per Xe-core.
# Source: Intel Architecture Day 2021, as reported in
# https://www.techpowerup.com/285769/intel-xe-hpc-architecture-detailed-has-dual-use-as-compute-and-cloud-gaming-accelerator
XE_HPC = Architecture(
    "Xe-HPC",
    {FLOAT64: 256 // 8, FLOAT32: 256 // 8, TFLOAT32: 2048 // 8, BFLOAT16: 4096 // 8, FLOAT16: 4096 // 8,
     INT8: 8192 // 8},
)

# Xe-HPG (Arc A-series). Per Xe-core: 16 vector engines (EUs), each with 8 FP32 lanes doing one FMA (2 operations)
# per clock, and 16 XMX engines of 128 FP16/BF16 or 256 INT8 operations per clock.
# Sources: https://techpowerup.com/review/asrock-arc-a580-challenger/2.html (16 vector engines of 8 FP units and 16
# XMX engines per Xe-core); Intel Architecture Day 2021 XMX rates as reproduced in
# https://m.yd166.com/jingyan/5611804206_3.html (XMX: 128 FP16/BF16, 256 INT8 operations per clock).
# Xe-HPG has no FP64 hardware and its XMX engines take no TF32 (https://newsinseconds.com/intel-ponte-vecchio-and-xe-hpc-
# architecture-built-for-big-data/: "The Xe HPG MXM only works on FP16 and BF16 data"), so those are left out.
XE_HPG = Architecture("Xe-HPG", {FLOAT32: 16, BFLOAT16: 2048 // 16, FLOAT16: 2048 // 16, INT8: 4096 // 16})


@dataclass(frozen=True)
class Product:
    pattern: str  # matched (case-insensitive regex search) against torch.xpu.get_device_name()
    architecture: Architecture
    max_clock_hz: float


PRODUCTS: tuple[Product, ...] = (
    # Data Center GPU Max 1550: 2 stacks, 128 Xe-cores (1024 EUs), 1.6 GHz peak clock. Source: Intel ARK 232873
    # (https://ark.intel.com/content/www/us/en/ark/products/232873/intel-data-center-gpu-max-1550.html, as summarised
    # in https://glennklockwood.com/garden/processors/pvc).
    # Resulting peaks per card (1024 EUs): FP64 = FP32 = 52.4 TFLOP/s, TF32 419.4, BF16 = FP16 838.9 TFLOP/s,
    # INT8 1677.7 TOP/s; per stack/tile (512 EUs): half of that (26.2, 209.7, 419.4, 838.9). Cross-check: Intel's
    # launch quoted 52 TFLOPS (FP64) per 600 W OAM card (SC22; reported in
    # https://clickthis.blog/pt/graficheskij-proczessor-intel-serii-max-dlya-czentrov-obrabotki-dannyh-128-gb-hbm2e-52-teraflops-na-oam-maks).
    Product(r"Data Center GPU Max 1550", XE_HPC, 1.6e9),
    # Arc A-series desktop cards, graphics clock from Intel's specification pages (as reported in
    # https://www.svethardware.cz/intel-zverejnil-oficialni-specifikace-grafickych-karet-arc/58344):
    # A770: 32 Xe-cores (512 EUs), 2100 MHz -> FP32 17.2 TFLOP/s, FP16/BF16 137.6 TFLOP/s, INT8 275.3 TOP/s.
    # A750: 28 Xe-cores (448 EUs), 2050 MHz. A580: 24 Xe-cores (384 EUs), 1700 MHz.
    # A380: 8 Xe-cores (128 EUs), 2000 MHz.
    # Mobile parts (A770M, ...) have other clocks and are left out, as are Max 1100/1450, Flex and Arc B-series
    # (Battlemage): no public per-clock XMX rate or clock was found for them.
    Product(r"\bA770\b", XE_HPG, 2.1e9),
    Product(r"\bA750\b", XE_HPG, 2.05e9),
    Product(r"\bA580\b", XE_HPG, 1.7e9),
    Product(r"\bA380\b", XE_HPG, 2.0e9),
)


class FlopsUnknown(LookupError):
    """No sourced peak figure exists for this device or data type (the message says which)."""


def find_product(device_name: str) -> Product | None:
    for product in PRODUCTS:
        if re.search(product.pattern, device_name, flags=re.IGNORECASE):
            return product
    return None


def dtype_key(dtype: object, tf32_matmul: bool) -> str:
    """The rate-table key for a torch dtype (or one of Lightning's dtype strings such as "tfloat32").

    `tf32_matmul`: float32 matmuls run on TF32 (on XPU: oneDNN's switch, see
    `lightning_xpu.throughput.xpu_matmul_uses_tf32`).
    """
    name = dtype if isinstance(dtype, str) else str(dtype).removeprefix("torch.")
    if name == FLOAT32 and tf32_matmul:
        return TFLOAT32
    return name


def peak_flops(device_name: str, eu_count: int | None, dtype: object, tf32_matmul: bool) -> int:
    """Theoretical peak operations per second of one XPU device; raises `FlopsUnknown` when no figure is sourced."""
    product = find_product(device_name)
    if product is None:
        raise FlopsUnknown(f"FLOPs not found for {device_name!r}")
    if not eu_count:
        raise FlopsUnknown(f"FLOPs of {device_name!r} need the device's EU count, which this torch does not report")
    rates = product.architecture.ops_per_eu_per_clock
    key = dtype_key(dtype, tf32_matmul)
    if key == TFLOAT32 and key not in rates:
        key = FLOAT32  # no TF32 units (Xe-HPG): float32 matmuls run at the FP32 rate
    if key not in rates:
        raise FlopsUnknown(f"{device_name!r} has no published peak for {dtype}")
    return int(rates[key] * eu_count * product.max_clock_hz)
