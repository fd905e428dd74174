"""Entry point: ``python -m tierpool_operator`` / ``tierpool-operator``."""

import sys


def main() -> int:
    print("tierpool-operator: not built yet", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
