"""``FrozenRecord``: the base of kstate's immutable value classes on a store's first use (the
store configs, the suppliers, ``StoreBuilder``), in place of ``@dataclass(frozen=True)``.

A frozen dataclass is made when its module is imported, by ``dataclasses``, which imports
``inspect`` (and ``dis``, ``ast``, ``tokenize``, ...): more than a store needs to open, put,
commit and close. A subclass lists its fields in ``__match_args__`` (in ``__init__``'s order, as
a dataclass does), sets them in ``__init__`` with ``object.__setattr__`` and gets what the frozen
dataclass gave it: ``==`` between instances of the same class comparing the fields in order,
``hash`` of the fields, ``repr`` as ``Name(field=value, ...)``, and assigning or deleting a field
raising ``dataclasses.FrozenInstanceError``. Instances keep a ``__dict__`` (no ``__slots__``), so
``vars()``, ``copy`` and ``pickle`` (cloudpickle ships builders to Spark executors) treat them as
before; ``fields()`` gives the fields as a dict (``dataclasses.asdict``'s, for flat records).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers know the name)
if TYPE_CHECKING:
    from typing import Any


class FrozenRecord:
    """Equality, hashing, ``repr`` and immutability of a frozen dataclass, over ``__match_args__``."""

    __match_args__: tuple[str, ...] = ()

    def fields(self) -> dict[str, Any]:
        """The fields and their values, in order."""
        return {name: getattr(self, name) for name in self.__match_args__}

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.__match_args__)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            assert isinstance(other, FrozenRecord)
            return self._values() == other._values()
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__match_args__)
        return f"{self.__class__.__qualname__}({shown})"

    def __setattr__(self, name: str, value: Any) -> None:
        if self._frozen(name):
            from dataclasses import FrozenInstanceError  # the error a frozen dataclass raises

            raise FrozenInstanceError(f"cannot assign to field {name!r}")
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        if self._frozen(name):
            from dataclasses import FrozenInstanceError

            raise FrozenInstanceError(f"cannot delete field {name!r}")
        object.__delattr__(self, name)

    def _frozen(self, name: str) -> bool:
        # As a frozen dataclass: every attribute of the record class itself; of a subclass that
        # adds no fields, the record's fields.
        return "__match_args__" in type(self).__dict__ or name in self.__match_args__
