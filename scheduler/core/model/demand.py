"""What one replica needs on one GPU model, once the request has been right-sized.

A job states its request in one of several ways (``gpus``, ``mig_profile``, ``memory_gib``, ``model``,
``gpu_milli``); :func:`scheduler.core.sizing.rightsize.resolve` turns it, for a given GPU model, into exactly one
:class:`Demand`. Placement only ever sees demands.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import final


class DemandKind(StrEnum):
    WHOLE = "whole"  # ``gpus`` whole GPUs with MIG off
    MIG = "mig"  # one MIG instance of ``mig_profile``
    SHARE = "share"  # ``milli`` thousandths of one time-sliced GPU with MIG off


@final
@dataclass(frozen=True, slots=True)
class Demand:
    kind: DemandKind
    gpus: int = 0
    mig_profile: str | None = None
    milli: int = 0
    memory_mib: int | None = None  # the estimate behind a right-sized demand, for explanations

    def __init__(
        self,
        kind: DemandKind,
        gpus: int = 0,
        mig_profile: str | None = None,
        milli: int = 0,
        memory_mib: int | None = None,
    ) -> None:
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "gpus", gpus)
        object.__setattr__(self, "mig_profile", mig_profile)
        object.__setattr__(self, "milli", milli)
        object.__setattr__(self, "memory_mib", memory_mib)

    def __eq__(self, other: object) -> bool:
        if type(other) is not Demand:  # final: the generated method's check, other.__class__ is self.__class__
            return NotImplemented
        return (self.kind, self.gpus, self.mig_profile, self.milli, self.memory_mib) == (
            other.kind,
            other.gpus,
            other.mig_profile,
            other.milli,
            other.memory_mib,
        )

    def __hash__(self) -> int:
        return hash((self.kind, self.gpus, self.mig_profile, self.milli, self.memory_mib))

    @classmethod
    def whole(cls, gpus: int, memory_mib: int | None = None) -> Demand:
        return cls(DemandKind.WHOLE, gpus=gpus, memory_mib=memory_mib)

    @classmethod
    def mig(cls, profile: str, memory_mib: int | None = None) -> Demand:
        return cls(DemandKind.MIG, mig_profile=profile, memory_mib=memory_mib)

    @classmethod
    def share(cls, milli: int) -> Demand:
        return cls(DemandKind.SHARE, milli=milli)
