"""What every frontend shares: the converter base its tracer builds on (``converter``), its
converter tables (``table``), the factory's example inputs as a tuple (``inputs``), how
source lines are shown (``sources``) and how a framework's exception is quoted
(``messages``)."""
