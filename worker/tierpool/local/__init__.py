"""Local mode: the same pool file and scaling loop, worker processes on this machine, embedded Valkey."""
