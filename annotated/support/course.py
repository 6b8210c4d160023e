"""Which notebook teaches which module: the map that the verbatim test checks."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"

# module of ``annotated`` -> the notebook whose code cells define it, verbatim.
TAUGHT_MODULES: dict[str, str] = {
    "annotated.softmax": "01_softmax_and_scaling.ipynb",
    "annotated.attention": "02_scaled_dot_product_attention.ipynb",
    "annotated.masks": "03_masking.ipynb",
    "annotated.multi_head": "04_multi_head_attention.ipynb",
    "annotated.positional": "05_positional_encoding.ipynb",
    "annotated.feed_forward": "06_feed_forward_residual_layer_norm.ipynb",
    "annotated.layer_norm": "06_feed_forward_residual_layer_norm.ipynb",
    "annotated.residual": "06_feed_forward_residual_layer_norm.ipynb",
    "annotated.model": "07_the_full_model.ipynb",
    "annotated.batching": "08_training.ipynb",
    "annotated.synthetic": "08_training.ipynb",
    "annotated.label_smoothing": "08_training.ipynb",
    "annotated.schedule": "08_training.ipynb",
    "annotated.training": "08_training.ipynb",
    "annotated.decoding": "08_training.ipynb",
    "annotated.data": "09_translating_german_to_english.ipynb",
    "annotated.bpe": "09_translating_german_to_english.ipynb",
    "annotated.vocab": "09_translating_german_to_english.ipynb",
    "annotated.beam_search": "09_translating_german_to_english.ipynb",
    "annotated.evaluation": "09_translating_german_to_english.ipynb",
    "annotated.heads": "10_what_the_heads_learned.ipynb",
    "annotated.alignment": "10_what_the_heads_learned.ipynb",
    "annotated.local_attention": "11_the_cost_of_attention.ipynb",
    "annotated.linformer": "11_the_cost_of_attention.ipynb",
    "annotated.bigbird": "11_the_cost_of_attention.ipynb",
    "annotated.learned_positions": "12_positions.ipynb",
    "annotated.relative_positions": "12_positions.ipynb",
    "annotated.rotary": "12_positions.ipynb",
}
