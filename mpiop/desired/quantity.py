"""Kubernetes resource quantities: parse, add, multiply, and print in the apiserver's canonical form.

A PodGroup's minResources is a sum of container requests (kubeflow adds them with Go's resource.Quantity),
so "500m" x 4 must print as "2" and "1Gi" x 4 as "4Gi", exactly as kubeflow's PodGroup says. Values are exact
decimals; like Go's, they are rounded up to whole nano-units, and a sum keeps the suffix family (binary Ki/Mi
or decimal k/M/m) of its first non-zero term.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from typing import Literal

Format = Literal["DecimalSI", "BinarySI", "DecimalExponent"]

_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_SUFFIX = {v: k for k, v in _DECIMAL.items()}
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$")
_NANO = Decimal("1e-9")


@dataclass(frozen=True)
class Quantity:
    value: Decimal
    format: Format = "DecimalSI"

    @classmethod
    def parse(cls, text: str | int, field: str = "quantity") -> Quantity:
        """A quantity from its string (or integer) form; a clear ValueError naming `field` otherwise."""
        if isinstance(text, bool):
            raise ValueError(f"{field}: {text!r} is not a quantity")
        if isinstance(text, int):
            return cls(Decimal(text))
        match = _QUANTITY.match(text.strip())
        if match is None:
            raise ValueError(f"{field}: {text!r} is not a quantity (e.g. 500m, 2, 1Gi)")
        number, suffix = Decimal(match.group(1)), match.group(2) or ""
        if suffix in _BINARY:
            value, fmt = number * (2 ** _BINARY[suffix]), "BinarySI"
        elif suffix[:1] in ("e", "E"):
            value, fmt = number.scaleb(int(suffix[1:])), "DecimalExponent"
        else:
            value, fmt = number.scaleb(_DECIMAL[suffix]), "DecimalSI"
        return cls(_round_nano(value), fmt)  # type: ignore[arg-type]

    def __add__(self, other: Quantity) -> Quantity:
        fmt = other.format if self.value == 0 else self.format
        return Quantity(self.value + other.value, fmt)

    def __mul__(self, times: int) -> Quantity:
        return Quantity(self.value * times, self.format)

    def __str__(self) -> str:
        """Go's canonical form: no precision lost, no fractional digits, the largest exponent that allows that."""
        value = self.value
        fmt = self.format
        if fmt == "BinarySI" and (abs(value) < 1024 or value != value.to_integral_value()):
            fmt = "DecimalSI"
        if fmt == "BinarySI":
            number, shift = int(value), 0
            while number != 0 and number % 1024 == 0 and shift < 60:
                number, shift = number // 1024, shift + 10
            return f"{number}{next((s for s, b in _BINARY.items() if b == shift), '')}"
        if value == 0:
            return "0"
        exponent = -9
        while exponent < 18 and _is_integer(value.scaleb(-(exponent + 3))):
            exponent += 3
        mantissa = int(value.scaleb(-exponent))
        if fmt == "DecimalExponent":
            return f"{mantissa}e{exponent}" if exponent else str(mantissa)
        return f"{mantissa}{_DECIMAL_SUFFIX[exponent]}"


def _is_integer(value: Decimal) -> bool:
    return value == value.to_integral_value()


def _round_nano(value: Decimal) -> Decimal:
    return (value / _NANO).to_integral_value(rounding=ROUND_CEILING) * _NANO
