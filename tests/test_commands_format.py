"""The two small parsers/emitters behind execute_command, checked directly: shell-word splitting, and the YAML
text block (any output must read back exactly, with a YAML parser the agent's client might use)."""

from __future__ import annotations

import random

import pytest
import yaml

from rootbound.execution.words import CommandSyntaxError, OperatorError, literal_word, split_command
from rootbound.execution.yamltext import dump


@pytest.mark.parametrize(("text", "argv"), [
    ("git status --short", ["git", "status", "--short"]),
    ("  echo   'a b'  \"c d\" ", ["echo", "a b", "c d"]),
    ("echo a\\ b 'it'\\''s'", ["echo", "a b", "it's"]),
    ('echo "q\\"uote" "back\\\\slash" "\\n"', ["echo", 'q"uote', "back\\slash", "\\n"]),
    ("echo '' \"\"", ["echo", "", ""]),
    ("echo $HOME ~ *.py {a,b}", ["echo", "$HOME", "~", "*.py", "{a,b}"]),  # nothing is expanded
    ("echo one \\\ntwo", ["echo", "one", "two"]),
])
def test_split_command(text: str, argv: list[str]) -> None:
    assert split_command(text) == argv


@pytest.mark.parametrize(("text", "operator"), [
    ("a;b", ";"), ("a && b", "&&"), ("a || b", "||"), ("a|b", "|"), ("a > f", ">"), ("a >> f", ">>"),
    ("a < f", "<"), ("a &", "&"), ("echo $(x)", "$("), ("echo `x`", "`"), ('echo "$(x)"', "$("),
    ('echo "`x`"', "`"), ("(a)", "("), ("a\nb", "newline"), ("a 2>&1", ">"),
])
def test_operators_are_refused(text: str, operator: str) -> None:
    with pytest.raises(OperatorError) as info:
        split_command(text)
    assert info.value.operator == operator


@pytest.mark.parametrize("text", ["", "   ", "echo 'open", 'echo "open', "echo \\", "a\x00b"])
def test_unreadable_commands(text: str) -> None:
    with pytest.raises(CommandSyntaxError):
        split_command(text)


@pytest.mark.parametrize(("word", "value"), [
    ("ls", "ls"), ("l's'", "ls"), ('"ls"', "ls"), ("l\\s", "ls"), ("/usr/bin/ls", "/usr/bin/ls"),
    ("$x", None), ('"$x"', None), ("`x`", None), ("l*", None), ("~/bin/x", None), ("{a,b}", None), ("'$x'", "$x"),
])
def test_literal_word(word: str, value: str | None) -> None:
    assert literal_word(word) == value


def test_yaml_block_scalars_are_readable() -> None:
    text = dump([("exit_code", 0), ("stdout", "hello\nworld\n"), ("stderr", "")])
    assert text == 'exit_code: 0\nstdout: |\n  hello\n  world\nstderr: ""\n'
    assert dump([("stdout", "no newline\nat end")]) == "stdout: |-\n  no newline\n  at end\n"


def test_yaml_round_trips_any_text() -> None:
    pieces = ["a", " ", "\n", "\t", "\r", "\x00", "\x1b", "\x7f", "\x85", "\u2028", "\ufeff", "é", "😀", ":", "#",
              "- ", "'", '"', "\\", "|", ">", "---", "...", "%", "@", "`", "\n\n", "  x", "null", "1.5", "yes"]
    rng = random.Random(4711)
    for _ in range(5000):
        value = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 10)))
        doc = dump([("exit_code", 1), ("stdout", value), ("stderr", value[::-1])])
        assert yaml.safe_load(doc) == {"exit_code": 1, "stdout": value, "stderr": value[::-1]}, doc
