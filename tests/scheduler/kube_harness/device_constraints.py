"""A ResourceClaim's ``spec.devices.constraints`` for the emulator: the API server's validation of them and the
allocator's rule an allocation must keep.

- Validation (kubernetes pkg/apis/resource/validation/validation.go ``validateDeviceConstraint``): each name in
  ``requests`` is a request of the claim, named once; ``matchAttribute`` is required (``distinctAttribute`` needs
  the DRAConsumableCapacity gate, off here) and fully qualified, ``<domain>/<name>``.
- The allocator's rule (kubernetes staging/src/k8s.io/dynamic-resource-allocation/structured/internal/stable/
  allocator_stable.go ``matchAttributeConstraint.add`` and ``lookupAttribute``): every device allocated for a listed
  request (every request when the list is empty) has the attribute (its fully qualified name, or its bare name when
  the domain is the device's driver) and all have one value. The real API server does not check an allocation
  against the claim's constraints (it trusts the allocator that wrote it); the emulator does, on the status write
  that sets the allocation, because Microcosm is that allocator: an allocation that breaks a constraint is refused
  there (422) instead of passing silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DeviceKey = tuple[str, str, str]  # (driver, pool, device)


def spec_errors(spec: Mapping[str, Any]) -> list[str]:
    """validation.go validateDeviceConstraint, for each of the claim's constraints."""
    devices = spec.get("devices") or {}
    names = {str(r.get("name")) for r in devices.get("requests") or []}
    errors: list[str] = []
    for index, constraint in enumerate(devices.get("constraints") or []):
        path = f"spec.devices.constraints[{index}]"
        seen: set[str] = set()
        for position, name in enumerate(constraint.get("requests") or []):
            if name in seen:
                errors.append(f'{path}.requests[{position}]: Duplicate value: "{name}"')
            elif name not in names:
                errors.append(f'{path}.requests[{position}]: Invalid value: "{name}": must be the name of a request '
                              "in the claim")  # fmt: skip
            seen.add(name)
        attribute = constraint.get("matchAttribute")
        if not attribute:
            errors.append(f"{path}.matchAttribute: Required value")
        elif "/" not in str(attribute) or not all(str(attribute).split("/", 1)):
            errors.append(f'{path}.matchAttribute: Invalid value: "{attribute}": a fully qualified name must be a '
                          "domain and a name separated by a slash")  # fmt: skip
    return errors


def lookup(device: Mapping[str, Any], driver: str, name: str) -> object:
    """allocator_stable.go lookupAttribute: the attribute's value (its one-of dict), None when the device lacks it."""
    attributes = device.get("attributes") or {}
    if name in attributes:
        return attributes[name]
    domain, _, bare = name.partition("/")
    return attributes.get(bare) if domain == driver else None


def allocation_errors(
    spec: Mapping[str, Any], allocation: Mapping[str, Any], published: Mapping[DeviceKey, Mapping[str, Any]]
) -> list[str]:
    """The results of ``allocation`` that break one of the claim's matchAttribute constraints (module doc);
    ``published``: the devices of the cluster's ResourceSlices by (driver, pool, name)."""
    results = (allocation.get("devices") or {}).get("results") or []
    errors: list[str] = []
    for index, constraint in enumerate((spec.get("devices") or {}).get("constraints") or []):
        attribute = str(constraint.get("matchAttribute") or "")
        listed = set(constraint.get("requests") or [])
        first: tuple[int, object] | None = None
        for position, result in enumerate(results):
            if listed and result.get("request") not in listed:
                continue
            key = (str(result.get("driver", "")), str(result.get("pool", "")), str(result.get("device", "")))
            value = lookup(published.get(key) or {}, key[0], attribute)
            path = f"status.allocation.devices.results[{position}]"
            if value is None:
                errors.append(f'{path}: Invalid value: "{key[2]}": has no attribute {attribute}, which '
                              f"spec.devices.constraints[{index}] matches")  # fmt: skip
            elif first is None:
                first = (position, value)
            elif value != first[1]:
                errors.append(f'{path}: Invalid value: "{key[2]}": its {attribute} {_shown(value)} differs from '
                              f"{_shown(first[1])} of results[{first[0]}], which spec.devices.constraints[{index}] "
                              "requires to match")  # fmt: skip
    return errors


def _shown(value: object) -> str:
    if isinstance(value, Mapping) and len(value) == 1:
        return repr(next(iter(value.values())))
    return repr(value)
