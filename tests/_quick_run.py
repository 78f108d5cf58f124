"""The quick run: ``pytest -m quick`` runs a subset of every test package in a few minutes.

``mark(item)`` (called by tests/conftest.py's ``pytest_itemcollected``) gives the ``quick``
marker to the first case (the first of its parameters) of the first ``PER_FILE`` test
functions of each file (each test pays its fixtures' set-up and teardown, a garbage
collection among them, so the quick run takes a few of every file), leaving out those
``SLOW`` names: the functions whose cheapest case took over 1 s in a full run on a shared
2-core machine (compiling NVRTC kernels, the browser, the fuzz, subprocesses, the searches
over real traces), and the files whose module fixtures compile or emulate NVRTC kernels.
The full run (``pytest``, what CI runs) is unchanged. A new slow test goes in ``SLOW``.
"""

from __future__ import annotations

import pytest

__all__ = ["SLOW", "PER_FILE", "mark"]

PER_FILE = 8  # test functions of each file in the quick run, the first ones

SLOW = {  # test file -> functions left out of the quick run ("*": the whole file)
    "tests/ops/test_reduce_compile.py": "*",  # NVRTC compiles of kernel instances
    "tests/ops/test_attention_compile.py": "*",
    "tests/ops/test_index_kernels.py": "*",
    "tests/ops/test_tiled_copy.py": ("test_every_tiled_instance_compiles",),
    "tests/linalg/test_lu_kernels_on_cpu.py": "*",  # the LU kernels emulated on the CPU
    "tests/linalg/test_linalg_kernels.py": "*",  # its fixture compiles the LU kernels
    "tests/blas/test_blas_kernels.py": ("test_activation_instances_compile_for_every_dtype",),
    "tests/blas/test_tunable.py": (
        "test_a_second_process_reuses_the_file_and_tunes_nothing",
        "test_results_file_is_pytorchs_csv_and_is_read_back",
        "test_tuning_picks_deterministically_by_the_sims_cost_model",
    ),
    "tests/distributed/test_distributed_sim.py": (
        "test_every_collective_matches_numpy_on_every_rank",
        "test_launcher_stops_the_others_and_returns_the_failed_exit_code",
        "test_ranks_running_different_collectives_fail_with_invalid_usage",
    ),
    "tests/graphs/test_graphs.py": ("test_a_replayed_mlp_step_is_bitwise_the_eager_step",),
    "tests/linalg/test_linalg_dispatch.py": ("test_a_blocked_solve_factors_blocked",),
    "tests/linalg/test_linalg_workspaces.py": (
        "test_device_mallocs_do_not_grow_with_the_batch",
        "test_warm_calls_make_no_device_malloc",
    ),
    "tests/memory/test_expandable.py": (
        "test_data_survives_across_page_boundaries",
        "test_empty_cache_keeps_pages_under_live_blocks",
        "test_out_of_memory_unmaps_other_streams_free_pages_and_retries",
    ),
    "tests/memory/test_pools.py": (
        "test_a_pool_in_use_is_not_released",
        "test_blocks_alive_after_the_pool_is_deleted_are_released_once_freed",
        "test_empty_cache_releases_the_pool_after_it_is_deleted",
    ),
    "tests/memory/test_stateful.py": (
        "test_allocator_state_machine",
        "test_data_integrity_over_random_operations",
    ),
    "tests/memory/test_stats.py": ("test_device_stats_count_as_pytorch_counts",),
    "tests/memory/test_threads.py": (
        "test_finalizer_free_inside_free_and_empty_cache",
        "test_finalizer_free_inside_malloc_is_left_for_the_next_call",
        "test_finalizer_on_another_thread_does_not_wait_for_the_lock",
        "test_free_memory_callback_collects_garbage_and_the_malloc_reuses_it",
        "test_threads_allocate_and_free_raw_blocks_and_tensors",
        "test_threads_drop_tensors_in_reference_cycles",
    ),
    "tests/ops/test_multi_tensor.py": (
        "test_foreach_kernels_compile_with_the_largest_metadata",
        "test_tiles_and_the_tensors_a_launch_can_take",
    ),
    "tests/optim/test_adam.py": (
        "test_fused_steps_take_two_launches_for_two_hundred_tensors",
        "test_the_state_has_pytorchs_layout",
        "test_the_three_paths_agree_to_float32_rounding",
    ),
    "tests/optim/test_optimizer.py": ("test_closure_result_is_returned",),
    "tests/optim/test_training_memory.py": ("test_memory_allocated_is_flat_after_the_first_step",),
    "tests/test_cli.py": (
        "test_bench_help_ends_its_sentence_and_its_errors_name_the_command",
        "test_bench_help_is_the_benchmarks_own",
        "test_bench_names_an_unknown_benchmark",
        "test_bench_out_file_json_is_a_file_and_results_stay_untouched",
        "test_bench_save_writes_the_results_folder",
        "test_demo_runs_on_sim_and_shows_queued_then_completed_work",
        "test_info_diagnoses_a_bad_environment",
        "test_info_lists_versions_devices_configuration_and_environment",
        "test_info_reports_a_bad_allocator_setting",
        "test_python_dash_m_vram_is_the_same_command",
        "test_replay_labels_the_record_use_row",
        "test_stats_abbreviated_on_a_snapshot",
        "test_tables_fit_80_columns",
        "test_the_tools_are_reachable_after_import_vram",
        "test_viz_checks_its_output_paths_first",
        "test_viz_needs_an_output_file",
        "test_viz_of_a_device_the_snapshot_does_not_have",
        "test_viz_of_an_empty_snapshot",
        "test_viz_png_of_a_snapshot_with_segments_only",
        "test_viz_png_without_matplotlib_is_one_line_before_anything_is_written",
        "test_viz_writes_the_page_and_the_png",
    ),
    "tests/test_device.py": (
        "test_bad_device_types_raise_type_error_naming_device",
        "test_bad_index_argument",
        "test_cuda_device_does_not_exist_without_a_gpu",
        "test_default_device_is_sim0_without_a_gpu",
        "test_device_queries_reject_cpu_and_bad_devices",
        "test_get_device_name_and_properties",
        "test_mem_get_info_before_and_after_an_allocation",
        "test_no_cuda_devices_without_a_gpu",
        "test_synchronize_runs_everything_queued_on_the_device",
        "test_total_memory_follows_the_capacity",
        "test_with_device_makes_it_current_and_restores",
        "test_with_device_nests_and_restores_on_error",
    ),
    "tests/test_interop.py": (
        "test_a_capsule_is_consumed_once",
        "test_a_cuda_array_interface_producer_is_wrapped_without_a_copy",
        "test_an_export_keeps_the_tensor_alive_until_the_consumer_lets_go",
        "test_an_imported_capsule_is_released_with_the_last_tensor",
        "test_an_unconsumed_capsule_lets_go_of_its_tensor",
        "test_asarray_of_data_goes_to_the_current_device",
        "test_asarray_shares_numpy_memory_and_copies_when_asked",
        "test_contiguous_producers_and_bad_ones",
        "test_dlpack_export_options",
        "test_only_cuda_tensors_have_the_cuda_array_interface",
    ),
    "tests/test_pinned.py": (
        "test_empty_pin_memory_and_errors",
        "test_non_blocking_download_into_pinned",
        "test_non_blocking_upload_is_queued_and_keeps_the_pinned_block",
    ),
    "tests/test_record_traces.py": (
        "test_a_trace_file_is_xz_of_a_protocol_5_pickle_and_reads_back",
        "test_every_workload_has_a_description_and_a_run",
        "test_requests_are_checked_across_settings",
        "test_requests_number_streams_by_first_use",
        "test_summary_of_a_trace",
        "test_the_index_has_a_row_per_file",
        "test_the_readme_lists_every_workload_and_setting",
    ),
    "tests/test_streams.py": (
        "test_a_stream_of_another_device_waits_on_an_event_as_cudas_do",
        "test_an_exception_in_queued_work_surfaces_at_event_synchronize",
        "test_an_exception_in_queued_work_surfaces_at_the_next_synchronize",
        "test_default_and_current_stream_reject_cpu_and_bad_devices",
        "test_elapsed_time_bad_input",
        "test_elapsed_time_before_the_end_has_run_is_not_ready",
        "test_elapsed_time_measures_the_work_between_records",
        "test_event_before_its_first_record",
        "test_event_query_is_false_while_its_work_is_held",
        "test_event_record_on_the_current_stream",
        "test_leaving_the_deferred_block_runs_what_is_left",
        "test_never_recorded_event",
        "test_pending_rejects_what_is_not_a_stream",
        "test_record_event_returns_a_new_or_the_given_event",
        "test_sim_run_drives_every_stream",
        "test_stream_equality_and_hash",
        "test_stream_methods_reject_non_streams_and_non_events",
        "test_stream_on_the_current_device_by_default",
        "test_stream_priority_is_clamped_to_the_pooled_levels",
        "test_stream_query_and_synchronize",
        "test_streams_are_pooled_32_per_priority_level",
        "test_synchronize_runs_only_the_work_it_depends_on",
        "test_wait_event_waits_for_the_record_made_before_it",
        "test_with_stream_none_does_nothing",
        "test_with_stream_rejects_non_streams",
    ),
    "tests/test_tensor.py": (
        "test_a_queued_fill_is_not_visible_until_the_stream_runs",
        "test_arithmetic_queues_on_the_current_stream",
        "test_bad_view_shapes",
        "test_clone_fill_zero_item_tolist",
        "test_contiguous_returns_self_or_a_copy",
        "test_copy_between_non_contiguous_tensors_with_a_cast",
        "test_copy_broadcasts_the_source",
        "test_dropping_the_last_tensor_frees_its_allocation",
        "test_empty_has_the_shape_dtype_and_contiguous_strides",
        "test_factories_default_to_float32_on_the_current_device",
        "test_from_numpy_keeps_strides_and_the_array_alive",
        "test_from_numpy_rejects_negative_strides_and_odd_dtypes",
        "test_from_numpy_shares_memory_both_ways",
        "test_negative_or_non_int_sizes_name_the_argument",
        "test_numpy_of_a_cpu_tensor_is_a_view_and_of_a_device_tensor_a_copy",
        "test_record_stream_and_record_use_take_a_stream_of_the_tensors_device",
        "test_setitem_writes_through_the_view",
        "test_size_may_be_a_tuple_or_a_list",
        "test_tensor_infers_pytorch_dtypes",
        "test_to_device_and_dtype",
        "test_unknown_dtype_names_the_argument",
        "test_view_and_reshape",
        "test_view_of_a_non_contiguous_tensor_where_strides_allow",
    ),
    "tests/tools/test_diff.py": (
        "test_cli_diff_bad_input_is_one_line",
        "test_cli_stats_and_viz_diff",
        "test_frames_that_grew_and_shrank",
        "test_the_page_has_numbered_axes_default_pools_and_no_empty_frame_table",
    ),
    "tests/tools/test_explain.py": (
        "test_a_request_no_device_could_hold_is_named_so",
        "test_capacity_answers_would_it_fit_and_with_which_setting",
        "test_explain_a_pytorch_snapshot_with_an_oom_event",
        "test_without_an_oom_it_says_there_was_none",
    ),
    "tests/tools/test_output.py": ("test_progress_shows_only_once_the_work_has_taken_2_s",),
    "tests/tools/test_predictions.py": ("test_the_default_trace_predicts_each_other_setting",),
    "tests/tools/test_replay.py": (
        "test_a_recorded_setting_is_replaced_by_name",
        "test_bad_config",
        "test_empty_cache_calls_are_replayed",
        "test_expandable_segments_lower_peak_reserved",
        "test_fidelity_under_the_recorded_settings",
        "test_html_output",
        "test_json_output",
        "test_missing_file",
        "test_not_a_snapshot",
        "test_oom_at_a_small_capacity",
        "test_record_use_reuses_a_block_freed_on_another_stream_at_once",
        "test_settings_round_trip",
        "test_table_output",
        "test_the_recorded_rp2_setting_parses_as_pytorch_parsed_it",
        "test_the_report_says_what_each_row_changes_and_not_recorded",
        "test_the_rp2_trace_is_replayed_with_its_rounding",
        "test_the_synthetic_trace_with_pending_frees_and_pre_trace_state",
    ),
    "tests/tools/test_settings.py": (
        "test_a_change_replaces_adds_or_drops_recorded_settings",
        "test_recorded_settings_come_back_in_the_short_forms_pytorch_reads",
        "test_the_memory_fraction_call",
        "test_vram_rows_cap_with_vrams_own_call",
    ),
    "tests/tools/test_snapshot_file.py": (
        "test_a_malicious_snapshot_runs_nothing",
        "test_any_global_but_set_and_frozenset_is_refused",
        "test_every_protocol_compressed_or_not",
        "test_the_payload_runs_under_plain_pickle",
        "test_the_tools_report_malformed_contents_in_one_line",
    ),
    "tests/tools/test_suggest.py": (
        "test_a_pruned_candidate_stopped_once_it_passed_the_recorded_peak",
        "test_a_recorded_setting_can_be_replaced_and_the_row_says_so",
        "test_capacity_names_the_change_that_makes_the_run_fit",
        "test_cli_suggest_bad_input_is_one_line",
        "test_cli_suggest_json",
        "test_every_candidate_is_a_real_replay_ranked_by_peak_reserved",
        "test_parallel_workers_find_what_one_process_finds",
        "test_suggest_ranks_settings_on_every_bundled_trace",
        "test_the_best_line_is_a_pytorch_setting_with_the_line_to_paste",
        "test_the_lines_fit_80_columns_and_never_wrap_a_setting",
        "test_the_lower_bound_is_the_peak_of_live_bytes_rounded_to_512",
        "test_what_each_suggestion_recovers_is_a_share_of_the_gap_to_the_bound",
        "test_what_the_capacity_did_is_said",
    ),
    "tests/tools/test_trace.py": (
        "test_stats_errors",
        "test_stats_of_a_snapshot",
        "test_stats_shows_the_peaks_with_the_event_at_which_they_happened",
        "test_stats_without_a_snapshot_says_what_it_needs",
        "test_trace_errors",
        "test_trace_help_lists_every_option",
        "test_trace_of_a_failing_script",
        "test_trace_returns_the_exit_status_and_still_writes",
        "test_trace_writes_the_snapshot_of_the_script",
    ),
    "tests/tools/test_viz.py": (
        "test_a_120k_event_trace_builds_fast_and_small",
        "test_a_trace_without_history_still_shows_the_final_state",
        "test_html_for_each_bundled_trace",
        "test_lifetimes_include_what_predates_the_trace",
        "test_load_snapshot_takes_a_dict_or_a_pickle",
        "test_png_for_each_bundled_trace",
    ),
    "tests/tools/test_viz_browser.py": (
        "test_a_120k_event_trace_draws_without_errors",
        "test_a_crafted_snapshot_runs_no_script",
        "test_bundled_traces_draw_without_errors",
        "test_the_payload_runs_where_it_is_not_escaped",
    ),
}

_seen: set[str] = set()  # test functions that have their quick case already
_taken: dict[str, int] = {}  # test file -> its functions in the quick run so far


def mark(item: pytest.Item) -> None:
    """Mark ``item`` quick when it is its function's first case, among the first
    ``PER_FILE`` functions of its file, and not a slow one."""
    path, _, name = item.nodeid.partition("::")
    function = name.split("[")[0]
    key = f"{path}::{function}"
    slow = SLOW.get(path, ())
    if key in _seen or slow == "*" or function in slow or _taken.get(path, 0) >= PER_FILE:
        return
    _seen.add(key)
    _taken[path] = _taken.get(path, 0) + 1
    item.add_marker(pytest.mark.quick)
