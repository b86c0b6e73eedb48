"""The Attention Broker: when a signal enters the agent's awareness.

Owns the batching window and the autonomous-wake budget as pure rules (``policy``) and the
scheduling of ``activate`` through Celery with its Redis debounce (``wakes``). May import the
pure layer, ``journal``, ``publish`` and ``celery_bridge``; nothing from the activation layer.
"""
