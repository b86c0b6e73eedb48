"""The base-agent port: what an activation hands the agent, and what it gets back."""
