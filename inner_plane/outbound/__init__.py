"""Outbound contact with the user: channels (SMTP, signed webhook) and idempotent delivery."""
