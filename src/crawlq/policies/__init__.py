"""The frontier's policies: small objects with one job each and a sensible default."""
