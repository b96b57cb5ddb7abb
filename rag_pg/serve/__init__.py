"""Surfaces that answer over the network: the HTTP API, the MCP server, and the rules they share."""
