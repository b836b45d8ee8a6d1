"""Arguments the parser did not recognise: reported against the subcommand they were given to,
with the closest option named ("did you mean --seconds?").

argparse reports a subcommand's unknown option through the top-level parser ("usage: executors
[-h] ... unrecognized arguments"), which names neither the subcommand nor what was meant, on
every Python from 3.11 to 3.13.
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Sequence
from typing import NoReturn

__all__ = ("SYNONYMS", "closest_option", "unrecognized")

#: Words users reach for that an option says another way: a misspelling is found by spelling,
#: these are not (``--duration`` is closer in letters to ``--uri`` than to ``--seconds``).
SYNONYMS: dict[str, tuple[str, ...]] = {
    "--seconds": ("--duration", "--time", "--runtime", "--length", "--secs"),
    "--workers": ("--threads", "--jobs", "--concurrency"),
}

# How alike in spelling a typo must be (difflib's ratio): "--limt" / "--limit" is 0.92,
# "--duration" / "--uri" 0.67 (no guess is better than a wrong one).
_CUTOFF = 0.75


def _options(parser: argparse.ArgumentParser) -> list[str]:
    # argparse has no public list of a parser's options; `_actions` is stable since 3.2.
    return [option for action in parser._actions for option in action.option_strings
            if option.startswith("--")]


def closest_option(parser: argparse.ArgumentParser, word: str) -> str | None:
    """The option of *parser* that *word* (``--duration`` or ``--duration=5``) most likely
    meant: a synonym first, then the closest spelling; None if nothing is close.

    Example:
        >>> parser = argparse.ArgumentParser()
        >>> _ = parser.add_argument("--seconds"), parser.add_argument("--uri")
        >>> closest_option(parser, "--duration=5"), closest_option(parser, "--secnods")
        ('--seconds', '--seconds')
        >>> print(closest_option(parser, "--colour"))
        None
    """
    if not word.startswith("-"):
        return None
    name = word.partition("=")[0]
    options = _options(parser)
    for option in options:
        if name in SYNONYMS.get(option, ()):
            return option
    matches = difflib.get_close_matches(name, options, n=1, cutoff=_CUTOFF)
    return matches[0] if matches else None


def unrecognized(parser: argparse.ArgumentParser, args: argparse.Namespace,
                 extras: Sequence[str], argv: Sequence[str]) -> NoReturn:
    """Exit with status 2 for the *extras* `parse_known_args` left over from *argv*.

    Words before the subcommand's name belong to the top-level command; the rest to the
    subcommand (``args.parser``), whose usage line and name head the message, followed by the
    closest option of each unknown one.
    """
    command: str = args.command
    before = list(argv[:list(argv).index(command)]) if command in argv else []
    if before:  # `executors --verbose demo`: the top-level command's own options
        parser.error(f"unrecognized arguments: {' '.join(before)}")
    sub: argparse.ArgumentParser = args.parser
    message = f"unrecognized arguments: {' '.join(extras)}"
    guesses = {word: closest_option(sub, word) for word in extras}
    meant = [(word, option) for word, option in guesses.items() if option is not None]
    if len(meant) == 1:
        message += f" (did you mean {meant[0][1]}?)"
    elif meant:
        message += " (did you mean " + ", ".join(
            f"{option} for {word.partition('=')[0]}" for word, option in meant) + "?)"
    sub.error(message)
