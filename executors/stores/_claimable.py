"""Which stored records a process may claim and run: the trust rule of the schedule stores.

Code decides what runs; the store decides when. A process claims the records of the schedules
its code declares, and runs them with the function and arguments of its code, whatever the
record says; a record written elsewhere (another service, an older deploy, a hand edit) is
claimed only when an allowlist of targets admits it (``BackgroundService(serve=...)``). A
store is given a `Claimable` by every claim and leaves out, in its own query, what it does
not admit: an undeclared record is never read as a candidate, so its state never moves for a
process that will not run it.
"""

from __future__ import annotations

import dataclasses

__all__ = ("Claimable", "parse_serve")


@dataclasses.dataclass(frozen=True, eq=False)
class Claimable:
    """What a claim may take: the records `names` (declared by the caller's code), and the
    records of any name whose target is one of `targets` or in one of `modules`.

    Compared by identity (``eq=False``): a store may keep what it derives from one (a
    temporary table of the names) for as long as it is given the same object, so the caller
    makes a new one only when its names change.
    """

    #: The names of the schedules the caller declares.
    names: frozenset[str]
    #: Targets (``"module:qualname"``) admitted whatever the record's name.
    targets: frozenset[str] = frozenset()
    #: Modules every target of which is admitted (``"module:*"`` in the allowlist).
    modules: frozenset[str] = frozenset()

    @property
    def serves_others(self) -> bool:
        """Whether records this process does not declare may be admitted (an allowlist)."""
        return bool(self.targets or self.modules)

    def admits_target(self, target: str) -> bool:
        """Whether the allowlist admits `target` (``"module:qualname"``)."""
        if target in self.targets:
            return True
        module, sep, _ = target.partition(":")
        return bool(sep) and module in self.modules

    def admits(self, name: str, target: str) -> bool:
        """Whether a claim may take the record `name` whose stored target is `target`."""
        return name in self.names or self.admits_target(target)


def _dotted(text: str) -> bool:
    return bool(text) and all(part.isidentifier() for part in text.split("."))


def parse_serve(serve: object) -> tuple[frozenset[str], frozenset[str]]:
    """``(targets, modules)`` of a ``serve=`` allowlist: ``"pkg.module:function"`` admits
    that target, ``"pkg.module:*"`` every target of that module (not of its submodules).
    None or an empty sequence admits none.

    Raises:
        TypeError: `serve` is not a sequence of strings (a lone string included: a tuple
            of one target is written ``("pkg.jobs:refresh",)``).
        ValueError: an entry is neither form (``"*"`` or ``"pkg.*"``, which would admit any
            code a writer of the store names, included), naming it.
    """
    if serve is None:
        return frozenset(), frozenset()
    if isinstance(serve, str | bytes) or not isinstance(serve, tuple | list | set | frozenset):
        raise TypeError("serve must be a tuple of targets ('pkg.module:function' or "
                        f"'pkg.module:*'), or None; got {type(serve).__name__}"
                        + (" (write one target as ('pkg.jobs:refresh',))"
                           if isinstance(serve, str) else ""))
    targets: set[str] = set()
    modules: set[str] = set()
    for entry in serve:
        if not isinstance(entry, str):
            raise TypeError(f"serve entries must be strings, got {type(entry).__name__} "
                            f"({entry!r})")
        module, sep, qualname = entry.partition(":")
        if not sep or not _dotted(module) or not (qualname == "*" or _dotted(qualname)):
            raise ValueError(
                f"serve entry {entry!r} is not 'pkg.module:function' (one target) or "
                "'pkg.module:*' (every function of one module): an allowlist names the "
                "code a record written outside this program may run here")
        if qualname == "*":
            modules.add(module)
        else:
            targets.add(entry)
    return frozenset(targets), frozenset(modules)
