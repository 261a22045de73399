"""YAML text to plain data: a safe loader that builds only JSON's kinds of value and keeps documents small."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import yaml

from scheduler.specs.files.text import MAX_DEPTH, MAX_DIGITS, MAX_VALUES, SpecFileError, kind_of, position

_YAML_TAGS = "tag:yaml.org,2002:"


class _SpecYamlLoader(yaml.SafeLoader):
    """``SafeLoader`` (pure Python, so the composer can be watched) that keeps documents small and plain.

    While composing it counts nesting, refuses an alias inside the value it names (a recursive structure)
    and sums each node's size with its aliases expanded, so a bomb stops before anything walks it.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._open: set[str] = set()  # anchors of the collections being composed
        self._sizes: dict[int, int] = {}  # id(node) → values in it, aliases expanded
        self._aliased = False

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        event = self.peek_event()  # type: ignore[no-untyped-call]  # types-PyYAML leaves it unannotated
        if isinstance(event, yaml.AliasEvent):
            if event.anchor in self._open:
                raise yaml.composer.ComposerError(
                    None,
                    None,
                    f"alias *{event.anchor} is inside the value it names (a recursive value)",
                    _pure(event.start_mark),
                )
            self._aliased = True
            return _composed(super().compose_node(parent, index))  # the anchored node, already sized
        self._depth += 1
        anchor = event.anchor if isinstance(event, yaml.CollectionStartEvent) else None
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(
                    None, None, f"nested deeper than {MAX_DEPTH} levels", event.start_mark
                )
            if anchor:
                self._open.add(anchor)
            node = _composed(super().compose_node(parent, index))
        finally:
            self._depth -= 1
            if anchor:
                self._open.discard(anchor)
        self._sizes[id(node)] = size = 1 + sum(self._sizes[id(child)] for child in _children(node))
        if size > MAX_VALUES:
            through = " once its aliases are expanded" if self._aliased else ""
            raise yaml.composer.ComposerError(
                None, None, f"this value holds more than {MAX_VALUES:,} values{through}", node.start_mark
            )
        return node


def _composed(node: yaml.Node | None) -> yaml.Node:
    """PyYAML's composer always returns a node (or raises); its stubs allow None."""
    return cast(yaml.Node, node)


def _pure(mark: object) -> yaml.error.Mark | None:
    """A mark of this pure-Python loader, never libyaml's C one that the stubs also allow."""
    return cast(yaml.error.Mark | None, mark)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _yaml_mapping(loader: _SpecYamlLoader, node: yaml.MappingNode) -> dict[str, Any]:
    """A mapping with string keys, each once (plain YAML keeps the last of two equal keys, silently)."""
    loader.flatten_mapping(node)  # merges (<<: *base) first, as SafeLoader does
    result: dict[str, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node)
        if not isinstance(key, str):
            written = f"key {key_node.value!r}" if isinstance(key_node, yaml.ScalarNode) else "a key"
            raise yaml.constructor.ConstructorError(
                None, None, f"{written} is a {kind_of(key)}; keys must be strings (quote it)", key_node.start_mark
            )
        if key in result:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        result[key] = loader.construct_object(value_node)
    return result


def _yaml_number(construct: Callable[[Any, yaml.ScalarNode], Any]) -> Callable[[Any, yaml.ScalarNode], Any]:
    def constructor(loader: _SpecYamlLoader, node: yaml.ScalarNode) -> Any:
        if len(node.value) > MAX_DIGITS:
            raise yaml.constructor.ConstructorError(
                None, None, f"a number with more than {MAX_DIGITS} digits", node.start_mark
            )
        return construct(loader, node)

    return constructor


def _yaml_refused_tag(loader: _SpecYamlLoader, node: yaml.Node) -> Any:
    raise yaml.constructor.ConstructorError(
        None,
        None,
        f"tag {node.tag.replace(_YAML_TAGS, '!!')!r} is not allowed: a spec holds strings, numbers, booleans, "
        "null, lists and mappings",
        node.start_mark,
    )


# Only JSON's kinds of value: every other tag (python objects, binary, set, omap, pairs) is refused, and a
# date stays the string it was written as, as it would in JSON.
_SafeC = yaml.constructor.SafeConstructor
_SpecYamlLoader.yaml_constructors = {
    f"{_YAML_TAGS}null": _SafeC.construct_yaml_null,
    f"{_YAML_TAGS}bool": _SafeC.construct_yaml_bool,
    f"{_YAML_TAGS}int": _yaml_number(_SafeC.construct_yaml_int),
    f"{_YAML_TAGS}float": _yaml_number(_SafeC.construct_yaml_float),
    f"{_YAML_TAGS}str": _SafeC.construct_yaml_str,
    f"{_YAML_TAGS}timestamp": _SafeC.construct_yaml_str,
    f"{_YAML_TAGS}seq": lambda loader, node: loader.construct_sequence(node),
    f"{_YAML_TAGS}map": _yaml_mapping,
    None: _yaml_refused_tag,
}
_SpecYamlLoader.yaml_multi_constructors = {}


def load_yaml(name: str, text: str) -> Any:
    loader: _SpecYamlLoader | None = None
    try:
        loader = _SpecYamlLoader(text)  # the reader checks every character here already
        return loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        problem = exc.problem or "syntax error"
        if exc.context and exc.context_mark:  # where the unfinished construct began is often the real bug
            problem += f" ({exc.context} started at line {exc.context_mark.line + 1})"
        elif exc.context:
            problem += f" ({exc.context})"
        line, column = (mark.line + 1, mark.column + 1) if mark else (None, None)
        raise SpecFileError(name, f"invalid YAML: {problem}", line=line, column=column) from None
    except yaml.reader.ReaderError as exc:
        line, column = position(text, exc.position)
        message = f"invalid YAML: {exc.reason} (U+{exc.character:04X})"
        raise SpecFileError(name, message, line=line, column=column) from None
    except yaml.YAMLError as exc:
        raise SpecFileError(name, f"invalid YAML: {exc}") from None
    finally:
        if loader is not None:
            loader.dispose()
