"""The tierpool Kubernetes operator (kopf)."""
