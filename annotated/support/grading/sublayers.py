"""Checks of notebook 06's exercises."""

SIZE_SETS: dict = {}
