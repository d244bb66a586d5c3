"""Named plug-ins of one kind (rewards, advantage estimators, policy losses): a new variant is one decorated function.

    LOSSES: Registry[LossFn] = Registry("loss")

    @LOSSES.register("dapo", clip_low=0.2, clip_high=0.28)
    def dapo_loss(...): ...

`registry[name]` is the whole `Entry` (function and metadata), picklable, so a driver can ship a plug-in it alone
registered to Ray workers and `setdefault` it there; `get(name)` is the function, `meta(name)` its metadata.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class UnknownName(KeyError, ValueError):
    """A name no plug-in was registered under. A ValueError too, so config validators can let it through."""

    def __str__(self) -> str:  # KeyError would print the message quoted
        return str(self.args[0])


@dataclass(frozen=True)
class Entry(Generic[T]):
    """A registered plug-in and the metadata given to `register` (e.g. a loss's default clip bounds)."""

    fn: T
    meta: dict[str, Any] = field(default_factory=dict)


class Registry(Generic[T]):
    """name -> Entry, with lookups whose error lists the known names."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, Entry[T]] = {}

    def register(self, name: str, **meta: Any) -> Callable[[T], T]:
        """Decorator: make `fn` selectable as `name` (a later registration under the same name wins)."""

        def deco(fn: T) -> T:
            self._entries[name] = Entry(fn, dict(meta))
            return fn

        return deco

    def __getitem__(self, name: str) -> Entry[T]:
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownName(f"unknown {self.kind} {name!r}; known: {self.names()}") from None

    def check(self, name: str) -> str:
        """`name` if it is registered, else UnknownName listing the known names (for config validators)."""
        self[name]
        return name

    def get(self, name: str) -> T:
        """The function registered as `name`; an UnknownName error listing the known names otherwise."""
        return self[name].fn

    def meta(self, name: str) -> dict[str, Any]:
        """The metadata `name` was registered with."""
        return dict(self[name].meta)

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._entries)

    def setdefault(self, name: str, entry: Entry[T]) -> Entry[T]:
        """Add an entry taken from another process's registry unless `name` is already registered here."""
        return self._entries.setdefault(name, entry)

    def pop(self, name: str) -> Entry[T]:
        """Unregister `name` (tests that plug a variant in take it out again)."""
        return self._entries.pop(name)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {self.names()})"
