"""Does a JSON schema admit a finite instance? One whose every instance must contain itself forever (an object
whose required property is the object again: ``{"properties": {"a": {"$ref": "#"}}, "required": ["a"]}``)
compiles, and its grammar fails only mid-generation, when the model has written its way in. Found here, by
reading the schema, it is refused before the request is queued.

Conservative: it answers "unending" only when every branch a valid instance could take recurses through a
required part (a required property, the first items of a non-empty array, an allOf part); anything it cannot
follow (a remote $ref, a boolean schema) counts as finite, and the grammar engine decides.
"""

from __future__ import annotations

from typing import Any

_SCALARS = {"string", "number", "integer", "boolean", "null"}
_BUDGET = 10_000  # schema nodes visited at most; past it the schema counts as finite (the engine decides)


def unending_ref(schema: Any) -> str | None:
    """The $ref every instance must expand forever, or None when a finite instance may exist."""
    walk = _Walk(schema)
    return None if walk.finite(schema, ()) else walk.culprit


class _Walk:
    def __init__(self, root: Any) -> None:
        self.root = root
        self.visits = 0
        self.culprit: str | None = None

    def finite(self, node: Any, active: tuple[str, ...]) -> bool:
        self.visits += 1
        if not isinstance(node, dict) or self.visits > _BUDGET:
            return True
        ref = node.get("$ref")
        if isinstance(ref, str):
            if ref in active:
                self.culprit = ref
                return False
            target = self._resolve(ref)
            if target is not None and not self.finite(target, (*active, ref)):
                return False
        if "enum" in node or "const" in node:
            return True
        if isinstance(node.get("allOf"), list) and not all(self.finite(part, active) for part in node["allOf"]):
            return False
        for key in ("anyOf", "oneOf"):
            if isinstance(node.get(key), list) and node[key] and not any(self.finite(p, active) for p in node[key]):
                return False
        return self._typed_finite(node, active)

    def _typed_finite(self, node: dict, active: tuple[str, ...]) -> bool:
        kinds = node.get("type")
        kinds = [kinds] if isinstance(kinds, str) else kinds if isinstance(kinds, list) else None
        if kinds is None or any(kind in _SCALARS for kind in kinds):
            return True  # no type: a string is an instance too
        if "object" in kinds and self._object_finite(node, active):
            return True
        return "array" in kinds and self._array_finite(node, active)

    def _object_finite(self, node: dict, active: tuple[str, ...]) -> bool:
        properties = node.get("properties") if isinstance(node.get("properties"), dict) else {}
        extra = node.get("additionalProperties")
        required = node.get("required") if isinstance(node.get("required"), list) else []
        return all(self.finite(properties.get(name, extra if isinstance(extra, dict) else {}), active)
                   for name in required if isinstance(name, str))

    def _array_finite(self, node: dict, active: tuple[str, ...]) -> bool:
        least = node.get("minItems") if isinstance(node.get("minItems"), int) else 0
        if least <= 0:
            return True
        prefix = node.get("prefixItems") if isinstance(node.get("prefixItems"), list) else []
        items = node.get("items") if isinstance(node.get("items"), dict) else {}
        return all(self.finite(prefix[i] if i < len(prefix) else items, active) for i in range(min(least, 64)))

    def _resolve(self, ref: str) -> Any:
        """A local ref ("#", "#/$defs/a", "#/definitions/a/properties/b"); None for anything else."""
        if not ref.startswith("#"):
            return None
        node = self.root
        for part in (p.replace("~1", "/").replace("~0", "~") for p in ref[1:].split("/") if p):
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node
