"""What every command line of the project shares: both flag spellings, and progress bars.

    from solution.common.cli import ArgumentParser, progress

`ArgumentParser` is argparse's, with each long option also accepted in its
other spelling (`--on-error` and `--on_error`): Hugging Face scripts use
underscores, most Unix tools dashes, and users type what they are used to.
The other spelling is hidden from `--help`, which lists the one the command
declares.

`progress(total=..., desc=...)` is a tqdm bar on stderr: redrawn in place on
a terminal, and one line every `LOG_SECONDS` in a log file (a bar redrawn at
every update would fill a job's log with thousands of lines); in a log, a
job shorter than that prints no progress at all.

Imports only the standard library and tqdm (a dependency of transformers, so
the offline Kaggle kernel has it too).
"""

from __future__ import annotations

import argparse
import os
import sys

LOG_SECONDS = 10.0  # seconds between progress lines when stderr is not a terminal


class ArgumentParser(argparse.ArgumentParser):
    """argparse.ArgumentParser whose long options answer to both `--a_b` and `--a-b`."""

    def parse_known_args(self, args=None, namespace=None):
        # Aliases are added at parse time, so options added through argument groups get them too.
        self._add_other_spellings()
        return super().parse_known_args(args, namespace)

    def _add_other_spellings(self):
        for action in self._actions:
            for name in list(action.option_strings):
                other = _other_spelling(name)
                if other and other not in self._option_string_actions:
                    # Parsed as that action, but not listed in its option_strings: --help and the error
                    # messages keep the spelling the command declares.
                    self._option_string_actions[other] = action

    def _get_option_tuples(self, option_string):
        # An abbreviation (`--dev` for `--dev-fraction`) matches both spellings of one option:
        # that is one match, not an ambiguity.
        seen, unique = set(), []
        for match in super()._get_option_tuples(option_string):
            if id(match[0]) not in seen:
                seen.add(id(match[0]))
                unique.append(match)
        return unique


def _other_spelling(name: str):
    """`--a-b` for `--a_b` and the reverse; None for short options and names with neither character."""
    if not name.startswith("--"):
        return None
    body = name[2:]
    if "_" in body:
        return "--" + body.replace("_", "-")
    if "-" in body:
        return "--" + body.replace("-", "_")
    return None


def progress(iterable=None, total=None, desc: str = "", unit: str = "it", disable: bool = False, **kwargs):
    """A tqdm bar on stderr (over `iterable`, or updated by hand); on a non-terminal stderr, one line
    every LOG_SECONDS instead of one per update."""
    from tqdm import tqdm  # plain tqdm: tqdm.auto would pick a notebook widget in a Kaggle notebook's subprocess

    if _sized_terminal(sys.stderr):
        return tqdm(iterable, total=total, desc=desc, unit=unit, disable=disable, file=sys.stderr,
                    dynamic_ncols=True, mininterval=0.1, **kwargs)
    # delay: a job shorter than LOG_SECONDS leaves no line in the log, so its own output (an error) comes first.
    return tqdm(iterable, total=total, desc=desc, unit=unit, disable=disable, file=_Lines(sys.stderr),
                ascii=True, delay=LOG_SECONDS, mininterval=LOG_SECONDS, maxinterval=LOG_SECONDS, **kwargs)


def _sized_terminal(stream) -> bool:
    """A terminal with rows and columns. A pseudo-terminal of size 0 (script, some CI runners), where tqdm
    draws nothing at all, counts as a log."""
    try:
        size = os.get_terminal_size(stream.fileno())
    except (AttributeError, OSError, ValueError):  # not a terminal, or no file descriptor (a StringIO)
        return False
    return stream.isatty() and size.columns > 0 and size.lines > 0


class _Lines:
    """A log file for tqdm: each refresh on its own line. tqdm redraws in place with a carriage return,
    which in a log file piles every refresh onto one physical line that `tail` and `grep` show as one."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str):
        text = text.strip("\r\n").rstrip()  # tqdm pads with spaces to erase a longer previous line
        if text:
            self.stream.write(text + "\n")

    def flush(self):
        self.stream.flush()


def add_overwrite(parser: argparse.ArgumentParser, what: str = "--json") -> None:
    """The `--overwrite` of a script that writes records at its end (the output rule, fsutil.claim_output)."""
    parser.add_argument("--overwrite", action="store_true",
                        help=f"replace an existing {what} (or chart) that this script did not write")


def claim_records(command: str, overwrite: bool, inputs=(), **paths) -> None:
    """Claim at a script's start the records it writes at its end (`json=PATH`, `png=PATH`; None: not
    written), never one of its `inputs` ((what, path) pairs): a path it may not write is one line
    `error: ...` and exit 2 now, not after the run."""
    from pathlib import Path

    from solution.common.fsutil import claim_output, starts_with

    try:
        for name, path in paths.items():
            if path:
                png = Path(str(path)).suffix == ".png"
                claim_output(path, f"--{name.replace('_', '-')}", command=command, overwrite=overwrite,
                             owned=starts_with(b"\x89PNG") if png else None, inputs=inputs)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
