"""What a benchmark ran on: CPUs usable by this process, CPU model, Python, load average.

Figures from a 2-core machine shared with other work are only comparable with the load beside them, so every
benchmark prints this block with its table.
"""

from __future__ import annotations

import os
import platform
import time
from typing import Any


def machine() -> dict[str, Any]:
    """CPUs usable by this process (``nproc``), CPU model, Python version and the load average at start."""
    cpu_model = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    cpu_model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "nproc": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu_model": cpu_model,
        "python": platform.python_version(),
        "load_average_at_start": load_average(),
    }


def load_average() -> list[float]:
    """1, 5 and 15 minute load averages: other work on the machine slows the figures down."""
    return [round(x, 2) for x in os.getloadavg()]


def utc_now() -> str:
    """The wall-clock start of a run, for the record (never an input to a simulation)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def machine_line(info: dict[str, Any]) -> str:
    """One line for a table's head: ``machine: 2 CPUs (model), Python 3.11.2, load average …``."""
    start = " ".join(f"{x:.2f}" for x in info["load_average_at_start"])
    line = (
        f"machine: {info['nproc']} CPUs ({info['cpu_model']}), Python {info['python']}, load average {start} at start"
    )
    if "load_average_at_end" in info:
        line += ", " + " ".join(f"{x:.2f}" for x in info["load_average_at_end"]) + " at end"
    return line


def with_flags(command: str, options: dict[str, Any], *flags: str) -> str:
    """``command`` with ``--flag`` appended for every boolean option among ``flags`` that is set, so that the
    printed command reproduces the run exactly."""
    return command + "".join(f" --{flag}" for flag in flags if options.get(flag))


class RunRecord:
    """The head every benchmark payload starts with: the benchmark, the command that reproduces it, when it
    started and on what machine — the load average taken at the start here and at the end by :meth:`head`."""

    def __init__(self, benchmark: str, command: str) -> None:
        self.benchmark = benchmark
        self.command = command
        self.machine = machine()
        self.date = utc_now()

    def head(self) -> dict[str, Any]:
        """The payload's first keys; call it when the run has finished."""
        self.machine["load_average_at_end"] = load_average()
        return {"benchmark": self.benchmark, "command": self.command, "date": self.date, "machine": self.machine}


def started_line(payload: dict[str, Any]) -> str:
    """A table's machine line with the run's start: ``machine: … at end; started 2026-…Z``."""
    return f"{machine_line(payload['machine'])}; started {payload['date']}"
