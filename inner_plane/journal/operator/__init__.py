"""What the operator reads and does: the read API's pages (``reads``, ``paging``), the delegates
overview and charts (``delegates``), live counts for `status` and /metrics (``overview``, plain
SQL), the live feed's log (``live``), operator credentials and actions (``operators``) and the
lane's one object for the CLI (``lane_view``)."""
