"""Housekeep with text: tidy a house on a symbolic backend built from the Housekeep data."""
