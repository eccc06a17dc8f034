"""The driver protocol as data: ``drivers/protocol/protocol.json`` (a JSON Schema of every message,
both ways, with cachemark's constants in its ``x-`` keywords) and a small, fast check against it.

``run/driver.py`` checks every message a driver sends (a handful per phase: hello, ready, prefilled,
loaded, done, bye, error — never one per op) with :func:`problem`; the conformance suite
(tests/test_driver_conformance.py) checks every message both ways, and that this checker and a full
JSON Schema validator agree. The checker knows the subset of JSON Schema the file uses — ``type``,
``const``, ``enum``, ``required``, ``properties``, ``additionalProperties`` (a schema), ``items``,
``prefixItems``, ``minItems``, ``maxItems``, ``minimum``, ``maximum``, ``minLength`` and local
``$ref`` — compiled once into closures; a keyword it does not know is refused when it compiles, so the
file cannot say more than is checked.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

SCHEMA_FILE = Path("protocol") / "protocol.json"  # under the drivers' directory (run/driver.py's DRIVERS_DIR)
_ANNOTATIONS = {"description", "title", "$schema", "$id", "$defs", "oneOf"}
_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}
_WIDTH = {"u1": 1, "<u4": 4, "<u8": 8}

Check = Callable[[Any], "str | None"]  # None when the value conforms, else what is wrong (one line)


class Protocol:
    """The protocol file, loaded: its messages' checks, blob layouts and constants."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        self.version: int = document["x-version"]
        self.defs: dict[str, Any] = document["$defs"]
        exchange = document["x-exchange"]
        self.from_driver: tuple[str, ...] = tuple(exchange["from_driver"])
        self.to_driver: tuple[str, ...] = tuple(exchange["to_driver"])
        self.answers: dict[str, str] = dict(exchange["answers"])
        self.outcomes: dict[str, int] = {k: v for k, v in document["x-outcomes"].items() if k != "description"}
        self.error_kinds = tuple(k for k in document["x-error-kinds"] if k != "description")
        self.value_format: dict[str, Any] = document["x-value-format"]
        self._compiled: dict[str, Check] = {}
        self.checks = {name: self._compile(self.defs[name], f"#/$defs/{name}")
                       for name in (*self.from_driver, *self.to_driver)}

    # -- checking ---------------------------------------------------------------------
    def problem(self, msg: Any, direction: str = "from_driver") -> str | None:
        """None when ``msg`` is a message of the protocol that this side may send; else what is wrong."""
        if not isinstance(msg, dict):
            return f"a message must be a JSON object, not {_kind(msg)}"
        kind = msg.get("type")
        allowed = self.from_driver if direction == "from_driver" else self.to_driver
        if kind not in allowed:
            return f"no message of type {kind!r} goes this way (expected one of {', '.join(allowed)})"
        return self.checks[kind](msg)

    def blob_size(self, msg: dict[str, Any]) -> int:
        """The bytes ``msg``'s blob must have, from its type's ``x-blob`` layout (0: no blob)."""
        size = 0
        for field in self.defs[msg["type"]].get("x-blob", ()):
            _name, dtype, per, *when = field
            if when and not msg.get(when[0]):
                continue
            size += _WIDTH[dtype] * int(msg.get(per) or 0)
        return size

    def blob_fields(self, msg: dict[str, Any]) -> list[tuple[str, str, int]]:
        """``msg``'s blob as (name, numpy dtype, length) columns, in order."""
        return [(name, dtype, int(msg.get(per) or 0)) for name, dtype, per, *when in self.defs[msg["type"]]
                .get("x-blob", ()) if not when or msg.get(when[0])]

    # -- compiling ----------------------------------------------------------------------
    def _compile(self, schema: dict[str, Any], where: str) -> Check:
        ref = schema.get("$ref")
        if ref is not None:
            if not ref.startswith("#/$defs/"):
                raise ValueError(f"{where}: only local $refs (#/$defs/…), not {ref}")
            name = ref.removeprefix("#/$defs/")
            if name not in self._compiled:
                self._compiled[name] = lambda v: None  # a recursive $ref: filled in just below
                self._compiled[name] = self._compile(self.defs[name], ref)
            target = self._compiled
            return lambda v: target[name](v)
        checks: list[Check] = []
        unknown = set(schema) - _ANNOTATIONS - {
            "type", "const", "enum", "required", "properties", "additionalProperties", "items", "prefixItems",
            "minItems", "maxItems", "minimum", "maximum", "minLength"} - {k for k in schema if k.startswith("x-")}
        if unknown:
            raise ValueError(f"{where}: the checker does not know {', '.join(sorted(unknown))}")
        if "type" in schema:
            names = [schema["type"]] if isinstance(schema["type"], str) else list(schema["type"])
            tests = tuple(_TYPES[n] for n in names)
            checks.append(lambda v, tests=tests, names=" or ".join(names):
                          None if any(t(v) for t in tests) else f"must be {names}, not {_kind(v)}")
        if "const" in schema:
            const = schema["const"]
            checks.append(lambda v: None if v == const and type(v) is type(const) else f"must be {const!r}")
        if "enum" in schema:
            options = schema["enum"]
            checks.append(lambda v: None if v in options else f"must be one of {', '.join(map(repr, options))}")
        if "minimum" in schema:
            low = schema["minimum"]
            checks.append(lambda v: None if not _TYPES["number"](v) or v >= low else f"must be >= {low}, not {v}")
        if "maximum" in schema:
            high = schema["maximum"]
            checks.append(lambda v: None if not _TYPES["number"](v) or v <= high else f"must be <= {high}, not {v}")
        if "minLength" in schema:
            least = schema["minLength"]
            short = "must not be empty" if least == 1 else f"must have at least {least} characters"
            checks.append(lambda v: None if not isinstance(v, str) or len(v) >= least else short)
        if "required" in schema or "properties" in schema or "additionalProperties" in schema:
            checks.append(self._object(schema, where))
        if any(k in schema for k in ("items", "prefixItems", "minItems", "maxItems")):
            checks.append(self._array(schema, where))

        def check(v: Any) -> str | None:
            for c in checks:
                if (wrong := c(v)) is not None:
                    return wrong
            return None
        return checks[0] if len(checks) == 1 else check

    def _object(self, schema: dict[str, Any], where: str) -> Check:
        required = tuple(schema.get("required", ()))
        fields = {k: self._compile(s, f"{where}/properties/{k}") for k, s in schema.get("properties", {}).items()}
        extra = schema.get("additionalProperties")
        other = self._compile(extra, f"{where}/additionalProperties") if isinstance(extra, dict) else None

        def check(v: Any) -> str | None:
            if not isinstance(v, dict):
                return None
            for key in required:
                if key not in v:
                    return f"lacks {key!r}"
            for key, value in v.items():
                test = fields.get(key, other)
                if test is not None and (wrong := test(value)) is not None:
                    return f"{key}: {wrong}"
            return None
        return check

    def _array(self, schema: dict[str, Any], where: str) -> Check:
        first = [self._compile(s, f"{where}/prefixItems/{i}") for i, s in enumerate(schema.get("prefixItems", ()))]
        rest = self._compile(schema["items"], f"{where}/items") if "items" in schema else None
        least, most = schema.get("minItems", 0), schema.get("maxItems")

        def check(v: Any) -> str | None:
            if not isinstance(v, list):
                return None
            if len(v) < least or (most is not None and len(v) > most):
                upper = "" if most == least else ".." + ("" if most is None else str(most))
                return f"must have {least}{upper} items"
            for i, item in enumerate(v):
                test = first[i] if i < len(first) else rest
                if test is not None and (wrong := test(item)) is not None:
                    return f"[{i}]: {wrong}"
            return None
        return check


def _kind(v: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null",
            int: "an integer", float: "a number"}.get(type(v), type(v).__name__)


@cache
def load(drivers_dir: Path) -> Protocol:
    """The protocol of the drivers in ``drivers_dir`` (read and compiled once)."""
    return Protocol(json.loads((drivers_dir / SCHEMA_FILE).read_text()))


__all__ = ["SCHEMA_FILE", "Protocol", "load"]
