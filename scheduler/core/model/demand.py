"""What one replica needs on one GPU model, once the request has been right-sized.

A job states its request in one of several ways (``gpus``, ``mig_profile``, ``memory_gib``, ``model``,
``gpu_milli``); :func:`scheduler.core.sizing.rightsize.resolve` turns it, for a given GPU model, into exactly one
:class:`Demand`. Placement only ever sees demands.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class DemandKind(StrEnum):
    WHOLE = "whole"  # ``gpus`` whole GPUs with MIG off
    MIG = "mig"  # one MIG instance of ``mig_profile``
    SHARE = "share"  # ``milli`` thousandths of one time-sliced GPU with MIG off


@dataclass(frozen=True, slots=True)
class Demand:
    kind: DemandKind
    gpus: int = 0
    mig_profile: str | None = None
    milli: int = 0
    memory_mib: int | None = None  # the estimate behind a right-sized demand, for explanations

    @classmethod
    def whole(cls, gpus: int, memory_mib: int | None = None) -> Demand:
        return cls(DemandKind.WHOLE, gpus=gpus, memory_mib=memory_mib)

    @classmethod
    def mig(cls, profile: str, memory_mib: int | None = None) -> Demand:
        return cls(DemandKind.MIG, mig_profile=profile, memory_mib=memory_mib)

    @classmethod
    def share(cls, milli: int) -> Demand:
        return cls(DemandKind.SHARE, milli=milli)
