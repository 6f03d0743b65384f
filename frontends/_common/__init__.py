"""What every frontend shares: the converter base its tracer builds on (``converter``), its
converter tables (``table``), the factory's example inputs as a tuple (``inputs``), and how
source lines are shown (``sources``)."""
