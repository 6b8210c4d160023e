"""Checks of notebook 08's exercises."""

SIZE_SETS: dict = {}
