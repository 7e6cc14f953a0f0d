"""Configuration mistakes are explained in the operator's words: what is wrong, how to write it, and the
nearest valid key. Each row is a config file an operator might write and the lines they must read."""

from __future__ import annotations

from pathlib import Path

import pytest

from rootbound.config import ConfigError, load_config
from tests.test_config_cli import rootbound, write_config

ROOT = "roots: [{name: d, path: DATA}]\n"

CASES = [
    # (the file, what the message must contain), pydantic's old words in the comment
    pytest.param(ROOT + "commands:\n  allowed: git, ls\n",  # "list[str]: Input should be a valid list; ..."
                 ["commands.allowed must be a list (or \"*\" for any), not 'git, ls'",
                  "    commands:\n      allowed: [git, ls]"], id="allowed-as-a-string"),
    pytest.param("roots:\n  workspace: DATA\n",  # "Input should be a valid dictionary or instance of RootConfig"
                 ["roots must be a list of {name, path} entries (each starting with '-'), not a mapping",
                  "    roots:\n      - name: workspace\n        path: DATA"], id="roots-as-a-mapping"),
    pytest.param("roots:\n  name: w\n  path: DATA\n",
                 ["roots must be a list", "      - name: w\n        path: DATA"], id="root-entry-without-dash"),
    pytest.param("roots: [DATA]\n",
                 ["roots[0] must be a {name, path} entry, not 'DATA'", "      - name: data\n        path: DATA"],
                 id="root-as-a-path"),
    pytest.param("roots: [{name: d, path: DATA, alowed_tools: ['*']}]\n",
                 ["unknown key 'roots[0].alowed_tools'; did you mean 'roots[0].allowed_tools'?"], id="typo-in-root"),
    pytest.param(ROOT + "alowed_tools: ['*']\n",
                 ["unknown key 'alowed_tools'; did you mean 'roots[].allowed_tools'?"], id="root-key-at-top"),
    pytest.param(ROOT + "allowed: [git]\n", ["unknown key 'allowed'; did you mean 'commands.allowed'?"],
                 id="commands-key-at-top"),
    pytest.param(ROOT + "commands: {alowed: [git]}\n", ["unknown key 'commands.alowed'; did you mean "
                                                        "'commands.allowed'?"], id="typo-in-commands"),
    pytest.param(ROOT + "colour: blue\n", ["unknown key 'colour'; valid keys here: host, port,"], id="no-near-key"),
    pytest.param(ROOT + "port: eighty\n", ["port must be a whole number, not 'eighty'"], id="port-not-a-number"),
    pytest.param(ROOT + "max_full_read_size: 0\n", ["max_full_read_size must be at least 1, not 0"], id="too-small"),
    pytest.param(ROOT + "client_roots: withn\n",
                 ["client_roots must be one of off, within, replace, not 'withn'; did you mean 'within'?"],
                 id="enum-typo"),
    pytest.param(ROOT + "commands: {network: maybe}\n", ["commands.network must be true or false, not 'maybe'"],
                 id="not-a-boolean"),
    pytest.param("roots: [{name: d}]\n", ["roots[0].path is missing: every root needs a name and a path",
                                          "      - name: workspace\n        path: /srv/project"], id="no-path"),
    pytest.param("roots: [{name: d, path: DATA, allowed_tools: read_file}]\n",
                 ["roots[0].allowed_tools must be a list, not 'read_file'", "allowed_tools: [read_file]"],
                 id="allowed-tools-as-a-string"),
    pytest.param("roots: [{name: my docs, path: DATA}]\n",
                 ["roots[0].name 'my docs' may contain only letters, digits, '_', '.' and '-', e.g. 'my_docs'"],
                 id="bad-root-name"),
    pytest.param(ROOT + "commands: git\n", ["commands must be a mapping of keys, not 'git'",
                                            "    commands:\n      allowed: [git, ls]"], id="commands-as-a-string"),
    pytest.param(ROOT + "allowed_hosts: ['https://mcp.example.com']\n",
                 ["allowed_hosts: 'https://mcp.example.com' is not a host name: write it without scheme or path",
                  "go in allowed_origins"], id="url-as-host"),
    pytest.param(ROOT + "allowed_hosts: [\"evil.example\\n:443\"]\n",  # a newline inside: `$` let it through
                 ["allowed_hosts: 'evil.example\\n:443' is not a valid host name"], id="newline-in-host"),
    pytest.param(ROOT + "allowed_hosts: ['a.example:\u0664\u0664\u0663']\n",  # Arabic-Indic digits: isdigit() said yes
                 ["allowed_hosts: 'a.example:\u0664\u0664\u0663': the port must be a number from 1 to 65535, or *"],
                 id="non-ascii-port"),
    pytest.param(ROOT + "allowed_origins: ['mcp.example.com']\n",
                 ["allowed_origins: 'mcp.example.com' is not an origin: write scheme://host[:port]"],
                 id="host-as-origin"),
    pytest.param("roots: [{name: d, path: DATA}, {name: d, path: DATA}]\n",
                 ["duplicate root name 'd'; give one of them another name (in the config file, or --root "
                  "other=PATH)"], id="duplicate-name"),
    pytest.param(ROOT + "commands: {allowed: ['git status']}\n",
                 ["'git status' is not a program name (names have no spaces); the list is comma-separated: "
                  "ALLOWED_COMMANDS=git,status, --allow-commands git,status, or in YAML allowed: [git, status]"],
                 id="command-line-as-program"),
    # (the commands' sandbox would bind the root's parent read-write on the way to it)
    pytest.param(ROOT + "protected_paths: ['../secrets']\n",
                 ["protected_paths entry '../secrets' has a '..' component: entries are globs relative to each root"],
                 id="protected-path-outside-the-root"),
]


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_config_errors_say_what_is_wrong_and_how_to_write_it(tmp_path: Path, text: str, expected: list[str]) -> None:
    data = tmp_path / "data"
    data.mkdir()
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text.replace("DATA", str(data)))
    with pytest.raises(ConfigError) as caught:
        load_config(str(cfg), env={})
    message = str(caught.value)
    for part in expected:
        assert part.replace("DATA", str(data)).replace("name: data", f"name: {data.name}") in message, message
    assert "Input should be" not in message and "list[str]" not in message


def test_allowed_commands_with_spaces_says_the_list_is_comma_separated(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(None, [str(tmp_path)], env={"ALLOWED_COMMANDS": "git ls"})
    assert "the list is comma-separated: ALLOWED_COMMANDS=git,ls" in str(caught.value)


def test_check_fails_when_an_allowed_program_is_not_on_path(tmp_path: Path) -> None:
    """`check` used to print `nosuchprog -> NOT FOUND on PATH` and still end `ok`, exit 0."""
    cfg = write_config(tmp_path / "c.yaml", {"roots": [{"name": "d", "path": str(tmp_path)}],
                                             "commands": {"allowed": ["ls", "nosuchprog-rootbound"]}})
    result = rootbound("check", "--config", str(cfg))
    assert result.returncode == 1, result.stdout
    assert "PROBLEM: allowed program 'nosuchprog-rootbound' is not on PATH" in result.stdout
    assert "remove it from commands.allowed" in result.stdout
    assert result.stdout.rstrip().endswith("not ok")
