"""List prices per GPU-hour by GPU model and capacity tier, from ``docs/gpu-facts.md``, Prices.

AWS us-east-1, Linux, per GPU = instance ÷ 8, the "now" columns (post June-2025 cut; skypilot catalog):

| model | instance | on-demand | spot (middle of the AZ range) | reserved, 1 year |
|---|---|---|---|---|
| A100-SXM4-40GB, A100-PCIE-40GB | p4d.24xlarge | $2.74 | $0.665 ($0.31–1.02) | $1.78 |
| A100-SXM4-80GB, A100-PCIE-80GB | p4de.24xlarge | $3.43 | $1.165 ($1.08–1.25) | $2.23 |
| H100-SXM5-80GB, H100-PCIE-80GB, H100-NVL-94GB | p5.48xlarge | $6.88 | $2.71 ($2.20–3.22) | $4.47 |
| H200-SXM-141GB | p5en.48xlarge | $7.91 ($63.296 ÷ 8) | $3.40 (≈$27.2 ÷ 8) | $5.14 |

Reserved = on-demand × (1 − 0.35): the planning assumption for a 1-year commitment is 30–40 % off the
current on-demand rate (AWS publishes no per-family GPU rate); 35 % is its middle. AWS has no PCIe A100/H100
instance: PCIe parts take their SXM sibling's price (an assumption; a PCIe server is cheaper to build, so this
overstates their cost equally in every policy's bill).
"""

from __future__ import annotations

from scheduler.core.gpus.catalog import GPU_MODEL_BY_NAME
from scheduler.core.model.vocabulary import CapacityTier

RESERVED_DISCOUNT = 0.35  # 1-year commitments ≈ 30–40 % off current on-demand (docs/gpu-facts.md, Prices)
PRICES_AS_OF = "2025-06 (AWS us-east-1 post-cut list prices; docs/gpu-facts.md, Prices)"

# (on-demand, spot) per GPU-hour by the memory of the part within its class.
_BY_PART: dict[str, tuple[float, float]] = {
    "A100-40": (2.74, round((0.31 + 1.02) / 2, 3)),
    "A100-80": (3.43, round((1.08 + 1.25) / 2, 3)),
    "H100": (6.88, round((2.20 + 3.22) / 2, 3)),
    "H200": (round(63.296 / 8, 3), round(27.2 / 8, 3)),
}


def _part(gpu_model: str) -> str:
    spec = GPU_MODEL_BY_NAME.get(gpu_model)
    if spec is None:
        raise KeyError(f"no price for unknown GPU model {gpu_model!r}; known: {', '.join(GPU_MODEL_BY_NAME)}")
    if spec.gpu_class == "A100":
        return "A100-80" if spec.memory_mib > 50_000 else "A100-40"
    return spec.gpu_class


def price_per_gpu_hour(gpu_model: str, tier: CapacityTier | str) -> float:
    """The list price of one GPU-hour of ``gpu_model`` on ``tier`` (module table)."""
    on_demand, spot = _BY_PART[_part(gpu_model)]
    tier = CapacityTier(tier)
    if tier == CapacityTier.SPOT:
        return spot
    if tier == CapacityTier.RESERVED:
        return round(on_demand * (1 - RESERVED_DISCOUNT), 3)
    return on_demand
