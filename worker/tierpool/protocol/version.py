"""The wire protocol version this code writes and honours (docs/protocol.md)."""

PROTOCOL = 10
