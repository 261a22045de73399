"""The CEL of DRA device selectors, as far as DeviceClasses and Microcosm's claims use it: what an allocator does with
a selector against a published device.

kubernetes ``staging/src/k8s.io/dynamic-resource-allocation/cel/compile.go``: a selector sees ``device.driver`` and
``device.attributes["<domain>"].<name>`` (a device's attributes grouped by domain; an unqualified attribute name
belongs to its driver's domain, ``getAttributeValue``), and must evaluate to a bool. Looking up an attribute the
device does not have is a runtime error ("no such key: <name>"), and the structured allocator
(``structured/internal/stable/allocator_stable.go`` ``selectorsMatch``) turns an error into a failed allocation, not a
non-match: a claim that names ``index`` on a driver that no longer publishes it is never allocated.

Only conjunctions of equalities are understood (``a == b && c == d``, string and int literals): what the drivers'
DeviceClasses and :func:`scheduler.gateways.kube.dra_claims.device_selector` write. Anything else is refused, so a
selector this model cannot judge fails the test instead of passing it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_TERM = re.compile(
    r"""^\s*device\.(?:(?P<driver>driver)|attributes\[(?P<q>["'])(?P<domain>[^"']+)(?P=q)\]\.(?P<name>[A-Za-z0-9_]+))"""
    r"""\s*==\s*(?:(?P<sq>["'])(?P<text>[^"']*)(?P=sq)|(?P<int>-?\d+))\s*$"""
)
_KINDS = ("string", "int", "bool", "version")


class CelError(Exception):
    """A selector that fails to evaluate on a device (the allocator's error, not a non-match)."""


def _attribute(device: Mapping[str, Any], driver: str, domain: str, name: str) -> object:
    attributes = device.get("attributes") or {}
    # compile.go: the device's attributes by domain; an unqualified name is its driver's.
    value = attributes.get(f"{domain}/{name}") or (attributes.get(name) if domain == driver else None)
    if not isinstance(value, Mapping):
        raise CelError(f"no such key: {name}")
    for kind in _KINDS:
        if kind in value:
            return value[kind]
    raise CelError(f"no such key: {name}")


def matches(expression: str, device: Mapping[str, Any], driver: str) -> bool:
    """Does the selector ``expression`` select ``device`` (a ResourceSlice's device) of ``driver``? CelError when it
    cannot be evaluated on it (module doc)."""
    values: list[bool] = []
    error: CelError | None = None
    for term in expression.replace("\n", " ").split("&&"):
        found = _TERM.match(term)
        if found is None:
            raise ValueError(f"the harness's CEL does not understand {term.strip()!r}")
        right: object = int(found["int"]) if found["int"] is not None else found["text"]
        try:
            left = driver if found["driver"] else _attribute(device, driver, found["domain"], found["name"])
        except CelError as exc:
            error = error or exc
            continue
        values.append(left == right)
    # CEL's && is commutative about errors (cel-spec langdef.md, Logical operators): false wins over an error, an
    # error over true.
    if not all(values):
        return False
    if error is not None:
        raise error
    return True
