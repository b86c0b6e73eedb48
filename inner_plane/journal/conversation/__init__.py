"""The conversation: durable conversation events (``events``), the composer's one-round-trip read
of what an activation sees (``context``) and the ThoughtFlow record of each activation
(``thoughtflow``)."""
