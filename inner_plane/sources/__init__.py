"""Signal sources: Copilot task reports, and external processors over HTTP and MCP."""
