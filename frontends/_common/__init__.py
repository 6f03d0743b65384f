"""What every frontend shares: the converter table (``table``) and how source lines are
shown (``sources``)."""
