"""The person each delegate serves: validation (:mod:`.model`), quiet hours (:mod:`.quiet`)
and management (:mod:`.directory`)."""
