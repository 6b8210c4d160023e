"""Checks of notebook 07's exercises."""

SIZE_SETS: dict = {}
