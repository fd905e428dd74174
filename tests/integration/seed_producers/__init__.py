"""The seed articles' producer code (../shared/seeds/000_*.txt, 004_*.txt), as the articles print it but for the
imports and the connection, run against a pool that adopts their streams (tests/integration/test_seed_producers.py).
Nothing here may be changed to suit tierpool: the point is that it runs unchanged."""
