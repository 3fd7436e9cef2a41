"""``NamedTuple``: ``typing.NamedTuple``'s class syntax without importing ``typing``.

``typing`` (with ``re``, ``enum``, ``functools``, ``contextlib``) costs a store's first use more
than the rest of kstate's Python. The modules on that first use write their tuples as
``class KeyValue(NamedTuple): key: Any; value: Any`` under ``from __future__ import annotations``
and import ``NamedTuple`` from ``typing`` when type checking, from here at run time. Both make
the same class: ``collections.namedtuple(name, fields, defaults=..., module=...)`` with the class
body's docstring, methods and properties set on it, no base class but ``tuple``. The one
difference: ``__annotations__`` holds the annotations as written (strings), where ``typing``
wraps them in ``ForwardRef``.
"""

from __future__ import annotations

from collections import namedtuple

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers know the name)
if TYPE_CHECKING:
    from typing import Any

_MADE_BY_NAMEDTUPLE = frozenset(
    {"__new__", "__init__", "__slots__", "__getnewargs__", "_fields", "_field_defaults", "_make", "_replace", "_asdict"}
)


class _NamedTupleMeta(type):
    def __new__(cls, typename: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> Any:
        if bases != (NamedTuple,):
            raise TypeError("a NamedTuple class has no base class but NamedTuple")
        fields = dict(namespace.get("__annotations__", {}))
        defaults = []
        for name in fields:
            if name in namespace:
                defaults.append(namespace[name])
            elif defaults:
                raise TypeError(f"{typename}: field {name} without a default follows one with a default")
        made = namedtuple(typename, list(fields), defaults=defaults, module=namespace["__module__"])  # type: ignore[misc]
        made.__annotations__ = fields
        for name, value in namespace.items():
            if name in _MADE_BY_NAMEDTUPLE:
                raise AttributeError(f"{typename}: cannot overwrite NamedTuple attribute {name}")
            if name not in ("__module__", "__name__", "__annotations__") and name not in fields:
                setattr(made, name, value)
        return made


NamedTuple = type.__new__(_NamedTupleMeta, "NamedTuple", (), {})
"""The base to write ``class Name(NamedTuple):`` with, as ``typing.NamedTuple``'s."""
