"""Where the repository and the tests are, for tests at any depth."""

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
