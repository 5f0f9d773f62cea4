"""The HTTP edge: FastAPI gateway (health, readiness, metrics; queries arrive in later issues)."""
