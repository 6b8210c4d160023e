"""The rest of torchtext's ``Vocab`` interface, and what a checkpoint stores of a vocabulary.

``annotated.vocab.Vocab`` (notebook 10) teaches the table itself: tokens to ids and back, with a
default index for unknown tokens. The accessors below give the same table under torchtext's names
(``get_itos``, ``get_stoi``, ``get_default_index``), so that code written against torchtext reads
the same, and the plain lists a checkpoint holds (``state_dict``), which load with
``torch.load(weights_only=True)``.
"""


class TorchtextNames:
    """Accessors and (de)serialization for a class with ``itos``, ``stoi`` and ``default_index``."""

    def get_default_index(self) -> int | None:
        return self.default_index

    def get_itos(self) -> list[str]:
        return list(self.itos)

    def get_stoi(self) -> dict[str, int]:
        return dict(self.stoi)

    def state_dict(self) -> dict:
        """Plain lists and ints, so a checkpoint holding it loads with ``weights_only=True``."""
        return {"itos": list(self.itos), "default_index": self.default_index}

    @classmethod
    def from_state_dict(cls, state: dict):
        return cls(state["itos"], state["default_index"])
