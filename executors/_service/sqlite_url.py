"""The file a ``sqlite:`` store URL names: two forms, SQLAlchemy's, and nothing else."""

from __future__ import annotations

__all__ = ("sqlite_path",)

_SQLITE_FORMS = ("write sqlite:///jobs.db (a file relative to the working folder) or "
                 "sqlite:////srv/jobs.db (an absolute path)")


def sqlite_path(url: str) -> str:
    """The file of a ``sqlite:`` URL: ``sqlite:///jobs.db`` is relative to the working
    folder, ``sqlite:////srv/jobs.db`` absolute (SQLAlchemy's rule). Those two forms only:
    the URL names a file, nothing else.

    Raises:
        ValueError: the URL names no file, is of another form (``sqlite:/jobs.db``, which
            would be the root's ``/jobs.db``; ``sqlite://host/jobs.db``), or has a query or
            a fragment (``?mode=ro``: no option is read, and none may end up in the file's
            name), each named, with the two accepted forms.
    """
    scheme, colon, rest = url.partition(":")
    if not colon or scheme.lower() != "sqlite":
        raise ValueError(f"store {url!r} is not a sqlite: URL: {_SQLITE_FORMS}")
    if not rest.startswith("///"):
        what = "names no file" if rest in ("", "/", "//") else (
            "has a host" if rest.startswith("//") else "has fewer than three slashes")
        raise ValueError(f"store {url!r} {what}: {_SQLITE_FORMS}")
    path = rest[3:]
    for mark, what in (("?", "a query"), ("#", "a fragment")):
        if mark in path:
            extra = path[path.index(mark):]
            raise ValueError(f"store {url!r} has {what} ({extra!r}), which a sqlite: store "
                             f"does not take: the URL names a file only ({_SQLITE_FORMS})")
    if not path:
        raise ValueError(f"store {url!r} names no file: {_SQLITE_FORMS}")
    return path
