"""Entry points: python -m launch CONFIG, the mpirl CLI, the role-map schema."""
