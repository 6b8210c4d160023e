"""Checks of notebook 10's exercises."""

SIZE_SETS: dict = {}
