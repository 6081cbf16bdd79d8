"""The load generator: the only async code and the only reader of the clock."""
