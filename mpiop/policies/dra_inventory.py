"""How many devices of a DeviceClass each node's ResourceSlices publish: a node's GPUs for total-GPU mode through DRA
(spec.gpuDeviceClassName, policies/gpu_layout).

A DeviceClass selects devices by CEL expressions, which mpiop does not evaluate. It reads the two forms GPU drivers'
classes take: `device.driver == "<driver>"` (every device of that driver), optionally `&& device.attributes["<driver>"]
.type == "<type>"` (NVIDIA's `gpu.nvidia.com` is `type == 'gpu'`, its `mig.nvidia.com` `type == 'mig'`); quotes
either kind, the terms in one selector or several. Any other selector (another attribute, `||`, a function, a
capacity) is refused by name: a layout counting devices the class does not select would strand the job.

A ResourceSlice is kept trimmed (controller/trims.trim_resource_slice): its node, driver, pool (name, generation) and
its devices counted by their `type` attribute (at most TYPES_KEPT values, the rest under OTHER_TYPES). Of a pool
only the slices of its highest generation count (older ones are being replaced); slices of no single node
(`allNodes`, `nodeSelector`: network-attached devices) count nowhere.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from mpiop.api.raw import JSON

TYPE_ATTRIBUTE = "type"
TYPES_KEPT = 16  # distinct `type` values counted per slice (a slice holds at most 128 devices)
OTHER_TYPES = "*"  # devices of types past TYPES_KEPT, or with a type longer than TYPE_LENGTH: only a driver-only class
UNTYPED = ""  # devices without a string `type` attribute
TYPE_LENGTH = 63

_STRING = r"""(?:"([^"\\]*)"|'([^'\\]*)')"""
_DRIVER_TERM = re.compile(rf"^device\.driver\s*==\s*{_STRING}$")
_TYPE_TERM = re.compile(rf"^device\.attributes\[\s*{_STRING}\s*\]\.{TYPE_ATTRIBUTE}\s*==\s*{_STRING}$")
FORMS = 'device.driver == "<driver>", optionally && device.attributes["<driver>"].type == "<type>"'


@dataclass(frozen=True)
class ClassDevices:
    """The devices a DeviceClass selects, as mpiop reads it: those of `driver`, of `type` when set."""

    driver: str
    type: str | None = None

    def __str__(self) -> str:
        return f"driver {self.driver}" + (f", type {self.type}" if self.type is not None else "")


def _literal(match: re.Match[str], first: int) -> str:
    return match.group(first) if match.group(first) is not None else match.group(first + 1)


def class_devices(name: str, device_class: JSON) -> ClassDevices | str:
    """The devices DeviceClass `name` selects, or why mpiop cannot tell (a message naming the class)."""
    selectors = (device_class.get("spec") or {}).get("selectors") or []
    drivers: set[str] = set()
    types: set[tuple[str, str]] = set()
    for selector in selectors:
        expression = str(((selector or {}).get("cel") or {}).get("expression") or "")
        for term in (t.strip() for t in expression.split("&&")):
            if (named := _DRIVER_TERM.match(term)) is not None:
                drivers.add(_literal(named, 1))
            elif (typed := _TYPE_TERM.match(term)) is not None:
                types.add((_literal(typed, 1), _literal(typed, 3)))
            else:
                return (f"DeviceClass {name}: mpiop counts only devices selected as {FORMS}, not by "
                        f"`{expression[:120]}`")
    if len(drivers) != 1:
        return (f"DeviceClass {name}: its selectors name {len(drivers)} drivers; mpiop counts devices selected as "
                f"{FORMS}")
    driver = next(iter(drivers))
    if len(types) > 1 or any(domain != driver for domain, _ in types):
        return f"DeviceClass {name}: mpiop counts devices selected as {FORMS}, by the type of the driver's own domain"
    return ClassDevices(driver, next(iter(types))[1] if types else None)


def device_type(device: JSON, driver: str) -> str:
    """A device's string `type` attribute (short, or qualified by the driver's domain), UNTYPED without one."""
    attributes = device.get("attributes") or {}
    value = attributes.get(TYPE_ATTRIBUTE) or attributes.get(f"{driver}/{TYPE_ATTRIBUTE}") or {}
    found = value.get("string") if isinstance(value, dict) else None
    if not isinstance(found, str):
        return UNTYPED
    return found if len(found) <= TYPE_LENGTH else OTHER_TYPES


def node_devices(slices: Iterable[JSON], selected: ClassDevices) -> dict[str, int]:
    """Devices the class selects, by node: the trimmed slices of its driver, each pool at its highest generation."""
    latest: dict[str, int] = {}
    mine = []
    for piece in slices:
        spec = piece.get("spec") or {}
        if spec.get("driver") != selected.driver or not spec.get("nodeName"):
            continue
        pool = spec.get("pool") or {}
        mine.append((spec, str(pool.get("name")), int(pool.get("generation") or 0)))
        latest[mine[-1][1]] = max(latest.get(mine[-1][1], 0), mine[-1][2])
    counts: dict[str, int] = {}
    for spec, pool_name, generation in mine:
        if generation != latest[pool_name]:
            continue
        by_type: Mapping[str, int] = spec.get("devices") or {}
        found = sum(by_type.values()) if selected.type is None else by_type.get(selected.type, 0)
        if found:
            counts[spec["nodeName"]] = counts.get(spec["nodeName"], 0) + found
    return counts


def cached_class(trimmed: JSON) -> ClassDevices | str:
    """A DeviceClass as controller/trims.trim_device_class kept it."""
    devices = trimmed.get("devices") or {}
    if "refused" in devices:
        return str(devices["refused"])
    return ClassDevices(str(devices.get("driver")), devices.get("type"))
