"""Run a function in a forked child and get its JSON-encoded result back in the parent."""

from __future__ import annotations

import json
import os
import traceback
from collections.abc import Callable

__all__ = ("in_forked_child",)


def in_forked_child(fn: Callable[[], object]) -> object:
    """Fork; in the child, run `fn` and send what it returns (JSON-encodable) to the parent.

    The child leaves with ``os._exit``, so none of the parent's cleanup (atexit handlers,
    fixtures, ``finally`` blocks up the stack) runs there. An exception in the child comes back
    as an AssertionError carrying the child's traceback; the child's exit status is checked.
    """
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read)
            try:
                message: dict[str, object] = {"result": fn()}
            except BaseException:  # reported to the parent, which fails the test
                message = {"error": traceback.format_exc()}
            data = json.dumps(message).encode()
            while data:
                data = data[os.write(write, data):]
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read()  # to EOF before waiting: a large answer cannot fill the pipe
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, f"the forked child exited with {status}"
    answer = json.loads(data)
    assert "error" not in answer, "the forked child raised:\n" + answer["error"]
    return answer["result"]
