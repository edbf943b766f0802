"""Where the checkout under test is: REPO (its root), FIXTURES (tests/fixtures)."""
import os

TESTS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TESTS)
FIXTURES = os.path.join(TESTS, 'fixtures')
