"""Reading a config file's YAML: PyYAML's safe loader, refusing a key given twice in one mapping.

YAML itself keeps the last of two equal keys without a word, so `lr: 1e-4` ten lines above a forgotten `lr: 3e-4`
would train with the second; a config file never means that, and the error names the key and both lines.
"""

from __future__ import annotations

from typing import Any

import yaml


class DuplicateKeyError(yaml.MarkedYAMLError):
    """A mapping that gives one key twice: `problem_mark` is the second, `first_line` (1-based) the first."""

    def __init__(self, key: Any, first: yaml.Mark, second: yaml.Mark):
        super().__init__(problem=f"key {key!r} given twice", problem_mark=second)
        self.key = key
        self.first_line = first.line + 1


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader whose mappings refuse a repeated key (the merge key `<<` aside)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Mark] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, list | dict):  # unhashable: the base loader says so
                continue
            if key in seen:
                raise DuplicateKeyError(key, seen[key], key_node.start_mark)
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep)


def load_yaml(text: str) -> Any:
    """`yaml.safe_load`, with a repeated key in any mapping a DuplicateKeyError."""
    return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
