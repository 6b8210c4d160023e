"""Checks of notebook 09's exercises."""

SIZE_SETS: dict = {}
