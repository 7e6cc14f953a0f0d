"""The shell tool over the real protocol: seed 002's result shapes, and the allowlist applied to every command a
script would run (pipelines, lists, subshells, substitutions), with a marker file proving refusals ran nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import Harness, text_of
from tests.test_commands_support import CommandServers

pytestmark = pytest.mark.anyio


@pytest.fixture
async def restricted(servers: CommandServers, tmp_path: Path) -> Harness:
    """Allowlist ls, cat, wc, grep, sort; the root `workspace` is where scripts run."""
    (tmp_path / "workspace" / "sub").mkdir(parents=True)
    (tmp_path / "workspace" / "a.txt").write_text("alpha\nbeta\n")
    return await servers({"allowed": ["ls", "cat", "wc", "grep", "sort"]})


# -- seed 002 result shapes ---------------------------------------------------------------------------


async def test_success_shape(servers: CommandServers, tmp_path: Path) -> None:
    h = await servers({"allowed": "*"})
    result = await h.call("shell", command="echo hello; echo oops >&2", working_directory=str(tmp_path))
    assert not result.is_error
    text = text_of(result)
    assert text.startswith("Command executed successfully\n")
    assert "hello" in text and "oops" in text  # a client that ignores structured content still sees the output
    meta = result.structured_content
    assert meta is not None
    assert {k: meta[k] for k in ("command", "exit_code", "stdout", "stderr", "working_directory")} == {
        "command": "echo hello; echo oops >&2", "exit_code": 0, "stdout": "hello\n", "stderr": "oops\n",
        "working_directory": str(tmp_path)}
    assert isinstance(meta["execution_time_ms"], int)


async def test_failure_is_an_error_with_metadata(restricted: Harness) -> None:
    result = await restricted.call("shell", command="ls /nonexistent")
    assert result.is_error
    assert text_of(result).startswith("Command failed with exit code 2")
    meta = result.structured_content
    assert meta is not None and meta["exit_code"] == 2 and "No such file or directory" in meta["stderr"]
    assert meta["stdout"] == ""


async def test_timeout_shape_keeps_partial_output(servers: CommandServers) -> None:
    h = await servers({"allowed": "*"})
    result = await h.call("shell", command="echo started; echo warn >&2; sleep 30", timeout=1)
    assert result.is_error
    assert text_of(result).startswith("Command timed out after 1 seconds")
    meta = result.structured_content
    assert meta is not None
    assert meta["timeout_seconds"] == 1
    assert meta["partial_stdout"] == "started\n" and meta["partial_stderr"] == "warn\n"
    assert "stdout" not in meta and "exit_code" not in meta


async def test_signal_is_named(servers: CommandServers) -> None:
    # Landlock, not bubblewrap: bubblewrap's init reports a command killed by a signal as exit code 128+N.
    h = await servers({"allowed": "*", "sandbox": "landlock"})
    result = await h.call("shell", command="kill -KILL $$")
    assert result.is_error
    assert text_of(result) == "Command terminated by signal SIGKILL"
    assert result.structured_content is not None and result.structured_content["signal"] == "SIGKILL"


async def test_working_directory_and_environment(servers: CommandServers, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "proj").mkdir()
    h = await servers({"allowed": "*"})
    got = await h.ok("shell", command='pwd; echo "$BUILD_ENV"', working_directory="proj",
                     environment={"BUILD_ENV": "production"})
    assert got["stdout"] == f"{tmp_path}/proj\nproduction\n"
    assert got["working_directory"] == "proj"


async def test_timeout_bounds(servers: CommandServers) -> None:
    h = await servers({"allowed": "*"})
    assert "timeout" in await h.err("shell", command="true", timeout=0)
    assert "timeout" in await h.err("shell", command="true", timeout=1801)


async def test_command_not_found_hint(servers: CommandServers) -> None:
    h = await servers({"allowed": "*"})
    assert text_of(await h.call("shell", command="no-such-cmd-4711")).startswith(
        "Command failed with exit code 127 (127: command not found)")


# -- the allowlist applies to every command the script would run --------------------------------------


async def test_allowed_pipelines_and_lists_run(restricted: Harness) -> None:
    got = await restricted.ok("shell", command="cat a.txt | grep -c a && ls | sort", root="workspace")
    assert got["stdout"] == "2\na.txt\nsub\n"


async def test_builtins_need_no_entry(restricted: Harness, tmp_path: Path) -> None:
    got = await restricted.ok("shell", command='cd sub && pwd && echo "done" 2>/dev/null; [ -d . ] && true',
                              root="workspace")
    assert got["stdout"] == f"{tmp_path}/workspace/sub\ndone\n"


@pytest.mark.parametrize("script", [
    "ls | touch MARKER",
    "ls && touch MARKER",
    "ls || touch MARKER; ls",
    "ls; (touch MARKER)",
    "{ touch MARKER; }",
    "echo $(touch MARKER)",
    "echo `touch MARKER`",
    'echo "$(touch MARKER)"',
    "x=$(touch MARKER)",
    "ls $(touch MARKER)",
    "cat <<E\n$(touch MARKER)\nE",
    "if ls; then touch MARKER; fi",
    "for f in a; do touch MARKER; done",
    "case x in x) touch MARKER;; esac",
    "echo ${X:-$(touch MARKER)}",
    "ls &\ntouch MARKER",
])
async def test_every_command_in_a_script_is_checked(restricted: Harness, tmp_path: Path, script: str) -> None:
    error = await restricted.err("shell", command=script, root="workspace")
    assert "command not allowed: touch" in error
    assert not (tmp_path / "workspace" / "MARKER").exists()


@pytest.mark.parametrize(("script", "reason"), [
    ("eval 'touch MARKER'", "eval runs code"),
    ("exec touch MARKER", "exec runs code"),
    (". ./evil.sh", ". runs code"),
    ("source ./evil.sh", "source runs code"),
    ("command touch MARKER", "command runs code"),
    ("f() { touch MARKER; }; f", "function definitions"),
    ("c=touch; $c MARKER", "command name computed"),
    ("$(echo touch) MARKER", "command name computed"),
    ("/usr/bin/tou* MARKER", "command name computed"),
    ("PATH=.:$PATH ls", "assigns PATH"),
    ("export PATH=.", "assigns PATH"),
    ("LD_PRELOAD=./x.so ls", "assigns LD_PRELOAD"),
    ("echo hi > MARKER", "redirection to or from a file"),
    ("cat a.txt >> MARKER", "redirection to or from a file"),
    ("ls &>MARKER touch MARKER", "&>"),
    ("echo $'\\' ; touch MARKER ; echo '\\'", "$'...' quoting"),
    ("echo a\\\n#b; touch MARKER", "would not read as a comment"),
    ("echo ${X:-`touch MARKER`}", "did not read as a substitution"),
    ("echo `echo \\`touch MARKER\\``", "backslash inside"),
    ("x='a[$(touch MARKER)]'; echo $((x))", "arithmetic on variables"),
    ("[[ -n x ]] && ls", "[[ ]] tests"),
    ("cat <(touch MARKER)", "process substitution"),
    ("echo 'unterminated", "does not parse"),
    ("ls\rtouch MARKER", "control character"),
])
async def test_unverifiable_constructs_are_refused(restricted: Harness, tmp_path: Path, script: str,
                                                   reason: str) -> None:
    (tmp_path / "workspace" / "evil.sh").write_text("touch MARKER\n")
    error = await restricted.err("shell", command=script, root="workspace")
    assert reason in error, error
    assert "Nothing was run" in error
    assert not (tmp_path / "workspace" / "MARKER").exists()


async def test_lookalike_in_a_script_is_refused(restricted: Harness, tmp_path: Path) -> None:
    fake = tmp_path / "workspace" / "ls"
    fake.write_text("#!/bin/sh\ntouch MARKER\n")
    fake.chmod(0o755)
    error = await restricted.err("shell", command="./ls", root="workspace")
    assert "allowed only as the one on the server's PATH" in error
    error = await restricted.err("shell", command="cd sub && ../ls", root="workspace")
    assert "relative path in a script that changes directory" in error
    assert not (tmp_path / "workspace" / "MARKER").exists()


async def test_blocked_patterns_in_scripts(servers: CommandServers, tmp_path: Path) -> None:
    h = await servers({"allowed": "*", "blocked": ["rm -rf *"]})
    (tmp_path / "workspace" / "keep").mkdir(parents=True)
    for script in ("ls && rm -rf keep", "echo $(rm -rf keep)", "rm -rf $DIR"):
        assert "blocked by the server's policy" in await h.err("shell", command=script, root="workspace")
    assert (tmp_path / "workspace" / "keep").is_dir()


async def test_wildcard_runs_any_script(servers: CommandServers) -> None:
    h = await servers({"allowed": "*"})
    got = await h.ok("shell", command="f() { echo in-function; }; f | tr a-z A-Z")
    assert got["stdout"] == "IN-FUNCTION\n"


# A shell parser can disagree with the real shell; these scripts probe the places where tree-sitter-bash and
# dash read text differently. Each must be refused, or be harmless when /bin/sh really runs it.
DIFFERENTIAL = [
    "echo a#$(touch MARKER)", "echo a #$(touch MARKER)", "echo '$(touch MARKER)'", 'echo "\\$(touch MARKER)"',
    "echo \\$(touch MARKER)", "echo \\`touch MARKER\\`", "cat <<'E'\n$(touch MARKER)\nE", "cat <<E\n\\$(x)\nE",
    "cat <<-E\n\tE\ntouch MARKER\nE", "cat <<E\nE \ntouch MARKER\nE", "cat <<EO\"F\"\n$(touch MARKER)\nEOF",
    'echo "${X:-\'}\'}"; touch MARKER', "echo ${X#*}$(touch MARKER)", "echo $((1+2))$(touch MARKER)",
    "ls # $(touch MARKER)", "ls;# x\n touch MARKER", "echo x\\\ntouch MARKER", "echo 'a'\"b\"$(touch MARKER)",
    "{ls,-la}", "echo {a,b}$(touch MARKER)", "ls 2>&1 | cat -$(touch MARKER)", "echo $(( $(touch MARKER) ))",
    "echo ~$(touch MARKER)", "echo $[$(touch MARKER)]", "time touch MARKER", "! touch MARKER",
    "ls |& touch MARKER", "coproc touch MARKER", "alias ls=touch\nls MARKER", "trap 'touch MARKER' EXIT",
    "set -- touch MARKER; \"$@\"", "read x; $x", "IFS=x; echo $(touch MARKER)", "cat a.txt <&0",
    "exec 3>MARKER", "ls >/dev/null touch MARKER", "wait; touch MARKER", "true && cd / && touch MARKER",
]


@pytest.mark.parametrize("script", DIFFERENTIAL)
async def test_refused_or_harmless(restricted: Harness, tmp_path: Path, script: str) -> None:
    result = await restricted.call("shell", command=script, root="workspace")
    error = text_of(result)
    refused = result.is_error and ("Nothing was run" in error or "command not allowed" in error)
    assert refused or not (tmp_path / "workspace" / "MARKER").exists(), error
    assert not (tmp_path / "workspace" / "MARKER").exists()
    assert not (tmp_path / "MARKER").exists() and not Path("/MARKER").exists()


# -- the shell checker versus what /bin/sh runs: line continuations --------------------------------------------


# /bin/sh deletes backslash-newline before it reads tokens, so `$\<newline>(` is `$(`; the parser saw plain text.
CONTINUATIONS = [
    'echo "$\\\n(touch {m})"',
    "cat <<E\n$\\\n(touch {m})\nE",
    "echo $\\\n(touch {m})",
    "x=$\\\n{{y:-$(touch {m})}}; echo",
    "echo hi &\\\n& touch {m}",
    "to\\\nuch {m}",
]


@pytest.mark.parametrize("script", CONTINUATIONS)
async def test_line_continuations_cannot_hide_a_command(servers: CommandServers, tmp_path: Path,
                                                        script: str) -> None:
    marker = tmp_path / "M"
    h = await servers({"allowed": ["echo", "cat"], "sandbox": "off"})
    result = await h.call("shell", command=script.format(m=marker), root="workspace")
    assert result.is_error
    assert not marker.exists()


async def test_ordinary_line_continuations_still_run(servers: CommandServers) -> None:
    h = await servers({"allowed": ["echo", "cat"], "sandbox": "off"})
    got = await h.ok("shell", command="echo one \\\n  two \\\n  three && cat <<'E'\nraw\\\nE", root="workspace")
    assert got["stdout"] == "one two three\nraw\\\n"
