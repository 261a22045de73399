"""One thing pyproject.toml cannot say: the opt-in compiled engine.

Unset, ``MICROCOSM_COMPILE`` leaves the build as without this file — pure Python (``pip install``, ``make
install-dev`` and CI). ``MICROCOSM_COMPILE=1`` compiles the scheduling engine, ``scheduler/core``, with mypyc
into C extension modules beside its sources (``MICROCOSM_COMPILE=1 pip wheel .``: a wheel for this Python and
platform that installs with pip alone; ``make compile``: in place, for a checkout). The compiled engine plans
exactly as the pure one — proven by the plan digests, not by the suite, which runs on pure Python
(docs/deploy.md, A compiled engine; docs/benchmarks/scale.md, notes).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

COMPILE = os.environ.get("MICROCOSM_COMPILE") == "1"
ENGINE = "scheduler/core"
# The mypy whose mypyc built and measured the compiled engine: another release may compile it differently, so a
# change of this pin is measured again (the digests, B5).
MYPY = "mypy==1.19.1"
# Where the build writes which mypyc compiled the engine; `bench scale` prints it (scheduler/engine.py).
COMPILED_BY = Path(ENGINE) / "compiled_by.txt"
# The engine's own strict checks, not pyproject.toml's mypy configuration: its Django plugins are not in a build
# environment, and mypyc needs the engine alone.
MYPY_FLAGS = ["--config-file", "", "--strict", "--strict-bytes"]


class RecordingBuildExt(build_ext):
    """build_ext that also writes, beside the extensions, which mypyc compiled them."""

    def run(self) -> None:
        super().run()
        from mypy.version import __version__

        root = Path("." if self.inplace else self.build_lib)
        (root / COMPILED_BY).write_text(f"mypyc {__version__}\n")


def compiled() -> dict[str, Any]:
    """setup()'s arguments for the compiled engine."""
    try:
        from mypyc.build import mypycify
    except ImportError:
        if "egg_info" in sys.argv:  # the build's first pass asks what to install: setup_requires says mypy
            return {"setup_requires": [MYPY]}
        raise SystemExit(f"MICROCOSM_COMPILE=1 needs mypyc: install {MYPY}, or build with pip's isolation") from None
    return {
        "setup_requires": [MYPY],
        "ext_modules": mypycify([*MYPY_FLAGS, ENGINE], group_name="microcosm_engine"),
        "cmdclass": {"build_ext": RecordingBuildExt},
    }


setup(**(compiled() if COMPILE else {}))
