"""Every exercise of every exercise notebook, as the grader knows them: the function a student
defines and the check that grades it.

The grader (``python -m annotated.support.grade``) reads this table, not the check cells of a
submitted notebook: whatever a notebook's own check cells say, or whether they are there at
all, the course's check of each exercise is what grades it. ``tests/test_grade.py`` keeps the
table in step with ``solutions/`` (headings, the ``def`` of each function, the check cells).
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Exercise:
    """One exercise: ``Exercise 1.1: `stable_softmax` (§3.2.1)``, graded by ``check_stable_softmax``."""

    number: str    # "1.1"
    title: str     # the heading after "Exercise 1.1: "
    function: str  # the name the student's cell defines
    check: str     # the name of the check in annotated.support.grading

    @property
    def heading(self) -> str:
        return f"Exercise {self.number}: {self.title}"

    @property
    def check_cell(self) -> str:
        """The check cell as handed out."""
        return f"{self.check}({self.function})"


NOTEBOOKS: dict[str, tuple[Exercise, ...]] = {
    "01_softmax_and_scaling": (
        Exercise("1.1", "`stable_softmax` (§3.2.1)", "stable_softmax", "check_stable_softmax"),
        Exercise("1.2", "`softmax_with_temperature`", "softmax_with_temperature", "check_softmax_with_temperature"),
        Exercise("1.3", "`score_variances` (§3.2.1, footnote 4)", "score_variances", "check_score_variances"),
    ),
    "02_scaled_dot_product_attention": (
        Exercise("2.1", "`attention` (§3.2.1)", "attention", "check_attention"),
        Exercise("2.2", "`attention_loops` (§3.2.1)", "attention_loops", "check_attention_loops"),
        Exercise("2.3", "`hard_lookup`", "hard_lookup", "check_hard_lookup"),
    ),
    "03_masking": (
        Exercise("3.1", "`padding_mask`", "padding_mask", "check_padding_mask"),
        Exercise("3.2", "`subsequent_mask` (§3.2.3)", "subsequent_mask", "check_subsequent_mask"),
        Exercise("3.3", "`target_mask`", "target_mask", "check_target_mask"),
        Exercise("3.4", "`decoder_input_and_labels` (§3.1)", "decoder_input_and_labels",
                 "check_decoder_input_and_labels"),
    ),
    "04_multi_head_attention": (
        Exercise("4.1", "`split_heads`", "split_heads", "check_split_heads"),
        Exercise("4.2", "`merge_heads`", "merge_heads", "check_merge_heads"),
        Exercise("4.3", "`multi_head_attention` (§3.2.2)", "multi_head_attention", "check_multi_head_attention"),
        Exercise("4.4", "`head_contributions` (§3.2.2)", "head_contributions", "check_head_contributions"),
    ),
    "05_positional_encoding": (
        Exercise("5.1", "`sinusoidal_table` (§3.5)", "sinusoidal_table", "check_sinusoidal_table"),
        Exercise("5.2", "`shift_matrix` (§3.5)", "shift_matrix", "check_shift_matrix"),
        Exercise("5.3", "`embed_with_positions` (§3.4, §3.5)", "embed_with_positions", "check_embed_with_positions"),
    ),
    "06_feed_forward_residual_layer_norm": (
        Exercise("6.1", "`feed_forward` (§3.3)", "feed_forward", "check_feed_forward"),
        Exercise("6.2", "`layer_norm` (§3.1)", "layer_norm", "check_layer_norm"),
        Exercise("6.3", "`sublayer_connection` (§3.1, §5.4)", "sublayer_connection", "check_sublayer_connection"),
    ),
    "07_the_full_model": (
        Exercise("7.1", "`decoder_layer_forward` (§3.1, §3.2.3)", "decoder_layer_forward",
                 "check_decoder_layer_forward"),
        Exercise("7.2", "`tied_embeddings` (§3.4)", "tied_embeddings", "check_tied_embeddings"),
        Exercise("7.3", "`parameter_count` (Table 3)", "parameter_count", "check_parameter_count"),
    ),
    "08_training": (
        Exercise("8.1", "`smoothed_targets` (§5.4)", "smoothed_targets", "check_smoothed_targets"),
        Exercise("8.2", "`label_smoothing_loss` (§5.4)", "label_smoothing_loss", "check_label_smoothing_loss"),
        Exercise("8.3", "`rate` (§5.3)", "rate", "check_rate"),
        Exercise("8.4", "`teacher_forcing_loss` (§3.1, §5)", "teacher_forcing_loss", "check_teacher_forcing_loss"),
    ),
    "09_decoding": (
        Exercise("9.1", "`self_attention_step` (§3.2.3)", "self_attention_step", "check_self_attention_step"),
        Exercise("9.2", "`cached_greedy_decode`", "cached_greedy_decode", "check_cached_greedy_decode"),
        Exercise("9.3", "`beam_step` (§6.1)", "beam_step", "check_beam_step"),
    ),
    "10_data_and_byte_pairs": (
        Exercise("10.1", "`bpe_merge_step` (§5.1)", "bpe_merge_step", "check_bpe_merge_step"),
        Exercise("10.2", "`build_vocab`", "build_vocab", "check_build_vocab"),
        Exercise("10.3", "`segment` (§5.1)", "segment", "check_segment"),
    ),
    "11_translating_german_to_english": (
        Exercise("11.1", "`bleu` (§6.1)", "bleu", "check_bleu"),
        Exercise("11.2", "`ids_to_tokens`", "ids_to_tokens", "check_ids_to_tokens"),
        Exercise("11.3", "`sequence_scores` (§6.1)", "sequence_scores", "check_sequence_scores"),
    ),
    "12_what_the_heads_learned": (
        Exercise("12.1", "`to_words`", "to_words", "check_to_words"),
        Exercise("12.2", "`normalized_entropy`", "normalized_entropy", "check_normalized_entropy"),
        Exercise("12.3", "`previous_token_share`", "previous_token_share", "check_previous_token_share"),
        Exercise("12.4", "`em_step`", "em_step", "check_em_step"),
    ),
    "13_the_cost_of_attention": (
        Exercise("13.1", "`block_band_mask` (Image Transformer)", "block_band_mask", "check_block_band_mask"),
        Exercise("13.2", "`linformer_attention` (Linformer)", "linformer_attention", "check_linformer_attention"),
        Exercise("13.3", "`rank_for_energy` (Linformer, Figure 1)", "rank_for_energy", "check_rank_for_energy"),
    ),
    "14_positions": (
        Exercise("14.1", "`relative_positions` (Shaw et al., 2018, §3.2)", "relative_positions",
                 "check_relative_positions"),
        Exercise("14.2", "`skew` (Huang et al., 2018, §3.4.1)", "skew", "check_skew"),
        Exercise("14.3", "`rotate` (Su et al., 2021, eq. 34)", "rotate", "check_rotate"),
    ),
    "15_model_variations": (
        Exercise("15.1", "`row_parameters` (§6.2, Table 3)", "row_parameters", "check_row_parameters"),
        Exercise("15.2", "`paired_test`", "paired_test", "check_paired_test"),
        Exercise("15.3", "`holm` (Holm, 1979)", "holm", "check_holm"),
    ),
}

# The exercise of each number ("4.3"), and the notebook of each chapter number ("04").
BY_NUMBER = {e.number: e for exercises in NOTEBOOKS.values() for e in exercises}
BY_CHAPTER = {name.split("_", 1)[0]: name for name in NOTEBOOKS}
