"""Helpers shared by the test suite (servers, roles, DSNs, clients, connections)."""
