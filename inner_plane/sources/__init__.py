"""Signal sources: Copilot task reports, and external processors over HTTP and MCP.

Owns Copilot task reports, processors, credentials, grants, rate limits, and the request
checks and error shapes both API faces (``http``, ``mcp_adapter``) use. May import ``publish``,
``journal``, ``runtime`` and the pure layer."""
