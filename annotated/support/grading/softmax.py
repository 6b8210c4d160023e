"""Checks of notebook 01's exercises."""

SIZE_SETS: dict = {}
