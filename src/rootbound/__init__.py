"""rootbound: an MCP server for files and commands, confined to named roots."""

__version__ = "0.1.0"
