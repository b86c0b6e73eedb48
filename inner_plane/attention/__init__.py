"""The Attention Broker: when a signal enters the agent's awareness."""
