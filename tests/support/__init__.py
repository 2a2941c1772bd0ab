"""Shared test support: helpers, fakes, sample data, server and process starters, and fixtures
that more than one test module uses.

Test modules and conftest modules import shared code from here, never from a ``test_*`` module
or a ``conftest`` module (tests/test_shape_tests.py keeps it so). A fixture defined here reaches
the tests through the conftest.py of the directory that needs it.
"""
