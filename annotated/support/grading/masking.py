"""Checks of notebook 03's exercises."""

SIZE_SETS: dict = {}
