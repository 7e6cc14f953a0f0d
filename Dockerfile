# rootbound over Streamable HTTP. From a clean clone of this repository:
# Build: docker build -t rootbound .
# Run:   export ROOTBOUND_AUTH_TOKEN=$(python3 -c 'import secrets; print(secrets.token_urlsafe(32))')
#        docker run --rm -p 127.0.0.1:8091:8091 --user "$(id -u):$(id -g)" -e ROOTBOUND_AUTH_TOKEN \
#          -v "$PWD/config/docker.yaml:/config/rootbound.yaml:ro" -v "$PWD:/data/workspace" rootbound
# (--user: the server runs as you, so it can write the mounted folder and what it writes stays yours.
# config/docker.yaml's read-only root "reference" is the image's empty /data/reference unless you mount one.)
FROM python:3.11-slim

# bubblewrap: the OS sandbox for command tools, where the host allows user namespaces. Not version-pinned:
# the base image's Debian release decides it, and a pin would break the build at its next point release.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/rootbound
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip install --no-cache-dir . && rm -rf /root/.cache

# Never root: a file tool bug or a command then cannot touch what the image's root owns. Numeric, so a
# runtime (Kubernetes' runAsNonRoot) can check it. Both roots of config/docker.yaml exist in the image,
# so the server starts whichever of them is mounted.
RUN groupadd --gid 10001 rootbound \
    && useradd --create-home --uid 10001 --gid 10001 rootbound \
    && mkdir -p /data/workspace /data/reference \
    && chown 10001:10001 /data/workspace
USER 10001:10001
WORKDIR /data

EXPOSE 8091
HEALTHCHECK --interval=30s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8091/health', timeout=2).read() != b'ok')"]

ENTRYPOINT ["rootbound"]
CMD ["serve", "--transport", "http", "--host", "0.0.0.0", "--port", "8091", "--config", "/config/rootbound.yaml"]
