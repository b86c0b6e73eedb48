"""The channels aggregate: each delegate's mailbox (``mailboxes``), the mails seen in it
(``mail_seen``) and every message that came in on mail or SMS (``channel_messages``)."""
