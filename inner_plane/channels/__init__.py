"""The person's own channels in and out: mail over IMAP and SMTP, text messages through a
Twilio-compatible provider. A face of the plane (DESIGN.md section 7): strangers never become
the person (:mod:`inner_plane.channels.identity`), and nothing is sent twice."""
