"""POSIX shell-word rules without a shell: split `execute_command`'s text, and read literal words.

`split_command` follows the quoting rules of `sh` (single quotes, double quotes,
backslash) but performs no expansion, and refuses every character that a shell
would treat as an operator, so that "echo hi; touch M" can never look like one
program with arguments when the agent meant two commands.
"""

from __future__ import annotations

__all__ = ["CommandSyntaxError", "OperatorError", "literal_word", "split_command"]

# Unquoted, each of these makes a shell do something other than pass a word along.
_OPERATORS = {";": ";", "&": "&", "|": "|", "<": "<", ">": ">", "(": "(", ")": ")", "`": "`", "\n": "newline"}
_PAIRS = ("&&", "||", ">>", "<<", ";;", "|&", "&>")
# Backslash keeps its meaning inside double quotes only before these.
_DQ_ESCAPABLE = '$`"\\\n'


class CommandSyntaxError(ValueError):
    """The command text cannot be split into words (unterminated quote, empty command, ...)."""


class OperatorError(CommandSyntaxError):
    """The command contains a shell operator, which only the shell tool can honour."""

    def __init__(self, operator: str) -> None:
        super().__init__(operator)
        self.operator = operator


def _operator_at(text: str, i: int) -> str:
    if text.startswith("$(", i):
        return "$("
    for pair in _PAIRS:
        if text.startswith(pair, i):
            return pair
    return _OPERATORS[text[i]]


def split_command(text: str) -> list[str]:
    """Split `text` into argv words; raise `OperatorError` on any shell operator, quoted `$(` or backtick."""
    if "\x00" in text:
        raise CommandSyntaxError("the command contains a null byte")
    words: list[str] = []
    word: list[str] = []
    in_word = False
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in " \t":
            if in_word:
                words.append("".join(word))
                word, in_word = [], False
            i += 1
        elif c in _OPERATORS or text.startswith("$(", i):
            raise OperatorError(_operator_at(text, i))
        elif c == "\\":
            if i + 1 == n:
                raise CommandSyntaxError("the command ends with a lone backslash")
            if text[i + 1] != "\n":  # backslash-newline joins lines
                word.append(text[i + 1])
                in_word = True
            i += 2
        elif c == "'":
            end = text.find("'", i + 1)
            if end < 0:
                raise CommandSyntaxError("unterminated single quote")
            word.append(text[i + 1:end])
            in_word, i = True, end + 1
        elif c == '"':
            i = _double_quoted(text, i + 1, word)
            in_word = True
        else:
            word.append(c)
            in_word = True
            i += 1
    if in_word:
        words.append("".join(word))
    if not words:
        raise CommandSyntaxError("the command is empty")
    return words


def _double_quoted(text: str, i: int, word: list[str]) -> int:
    """Consume a double-quoted span starting after its opening quote; return the index after the closing one."""
    n = len(text)
    while i < n:
        c = text[i]
        if c == '"':
            return i + 1
        if c == "\\" and i + 1 < n and text[i + 1] in _DQ_ESCAPABLE:
            if text[i + 1] != "\n":
                word.append(text[i + 1])
            i += 2
            continue
        # A shell would run these even inside double quotes; without a shell they would be passed
        # literally, which is never what the agent meant.
        if c == "`" or text.startswith("$(", i):
            raise OperatorError(_operator_at(text, i))
        word.append(c)
        i += 1
    raise CommandSyntaxError("unterminated double quote")


_GLOB = set("*?[]{}")


def literal_word(text: str) -> str | None:
    """The value of one shell word if it is a plain literal (quotes removed), else None.

    None means the shell would transform the word before using it: a parameter or
    command expansion, a glob, brace or tilde expansion. Used for command names in
    scripts, which must be known exactly to be checked against the allowlist.
    """
    out: list[str] = []
    i, n = 0, len(text)
    if text.startswith("~"):
        return None
    while i < n:
        c = text[i]
        if c == "\\":
            if i + 1 == n:
                return None
            if text[i + 1] != "\n":
                out.append(text[i + 1])
            i += 2
        elif c == "'":
            end = text.find("'", i + 1)
            if end < 0:
                return None
            out.append(text[i + 1:end])
            i = end + 1
        elif c == '"':
            start = i
            try:
                i = _double_quoted(text, i + 1, out)
            except CommandSyntaxError:
                return None
            if "$" in text[start:i]:  # "$x" expands inside double quotes
                return None
        elif c in "$`" or c in _GLOB or c in _OPERATORS or c in " \t":
            return None
        else:
            out.append(c)
            i += 1
    value = "".join(out)
    return value or None
