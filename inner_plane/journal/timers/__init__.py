"""Timers: the timer tables and every access to them (``store``) but the tick's own reads and
writes (``ticks``)."""
