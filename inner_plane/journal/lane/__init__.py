"""The lane's tables: claims on signals (``claims``), the per-delegate lease (``leases``),
activations, their closing statement (``closing``), user turns, the sweeper's and operator's
recovery reads and actions (``recovery``), lane notices and the notify_user outbox
(``notifications``)."""
