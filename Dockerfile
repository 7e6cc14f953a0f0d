# rootbound over Streamable HTTP. Build: docker build -t rootbound .
# Run:   docker run -p 127.0.0.1:8091:8091 -e ROOTBOUND_AUTH_TOKEN=... \
#          -v "$PWD/config/docker.yaml:/config/rootbound.yaml:ro" -v "$PWD:/data/workspace" rootbound
FROM python:3.11-slim

# bubblewrap: the OS sandbox for command tools, where the host allows user namespaces.
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/rootbound
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip install --no-cache-dir . && rm -rf /root/.cache

# Never root: a file tool bug or a command then cannot touch what the image's root owns.
RUN useradd --create-home --uid 10001 rootbound
USER rootbound
WORKDIR /data

EXPOSE 8091
HEALTHCHECK --interval=30s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8091/health', timeout=2).read() != b'ok')"]

ENTRYPOINT ["rootbound"]
CMD ["serve", "--transport", "http", "--host", "0.0.0.0", "--port", "8091", "--config", "/config/rootbound.yaml"]
