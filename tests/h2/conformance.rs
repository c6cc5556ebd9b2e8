//! h2spec's 147 server cases, one test each (`h2spec.py --case ID`, the ids and what each case
//! sends in `../shared/research/h2spec-cases.md`), against Quill's h2c listener in front of an
//! HTTP/1.1 backend that answers 200 with a small body (POST bodies read); ten of them again over
//! TLS with ALPN h2. A case is judged as h2spec judges it: a connection error passes on a GOAWAY
//! with the expected code or on the connection closing, a stream error also on a RST_STREAM with
//! the code; how the script reads each case is in `h2spec.py` and PEERS.md.

use std::time::Duration;

use crate::http_support::Backend;
use crate::script::{self, start_quill, target_args, Transport};

/// Bytes of the backend's answer: the flow-control cases need at least 5 to watch a window.
const BODY_LEN: usize = 64;
/// A case reads for at most 2 s at a time and 15 s in all; past this it is killed.
const CASE_LIMIT: Duration = Duration::from_secs(20);

/// Runs case `id` against a Quill of its own; passes when the script exits 0.
fn check_case(id: &str, transport: Transport) {
    let _turn = script::shared_turn();
    let backend = Backend::fixed(BODY_LEN);
    let quill = start_quill(&backend, transport, "");
    let mut args = target_args(&quill, transport);
    args.extend(["--case".to_string(), id.to_string()]);
    let run = script::run("h2spec.py", &args, CASE_LIMIT);
    assert!(
        run.code == Some(0),
        "h2spec case {id} over {transport:?}:\n{}",
        run.describe()
    );
}

/// One `#[test]` per (name => case id).
macro_rules! h2spec_cases {
    ($transport:expr; $($name:ident => $id:literal,)+) => {
        $(
            #[test]
            fn $name() {
                check_case($id, $transport);
            }
        )+
    };
}

h2spec_cases! { Transport::H2c;
    h2spec_http2_3_5_1_server_preface_starts_with_settings => "http2/3.5/1",
    h2spec_http2_3_5_2_invalid_preface_closes_the_connection => "http2/3.5/2",
    h2spec_http2_4_1_1_unknown_frame_type_is_ignored => "http2/4.1/1",
    h2spec_http2_4_1_2_undefined_flags_are_ignored => "http2/4.1/2",
    h2spec_http2_4_1_3_reserved_bit_is_ignored => "http2/4.1/3",
    h2spec_http2_4_2_1_data_frame_of_2_14_bytes_is_accepted => "http2/4.2/1",
    h2spec_http2_4_2_2_data_frame_over_max_frame_size_is_frame_size_error => "http2/4.2/2",
    h2spec_http2_4_2_3_headers_frame_over_max_frame_size_is_frame_size_error => "http2/4.2/3",
    h2spec_http2_4_3_1_invalid_header_block_is_compression_error => "http2/4.3/1",
    h2spec_http2_4_3_2_priority_inside_a_header_block_is_protocol_error => "http2/4.3/2",
    h2spec_http2_4_3_3_headers_of_another_stream_inside_a_header_block_is_protocol_error => "http2/4.3/3",
    h2spec_http2_5_1_1_1_even_stream_id_is_protocol_error => "http2/5.1.1/1",
    h2spec_http2_5_1_1_2_decreasing_stream_id_is_protocol_error => "http2/5.1.1/2",
    h2spec_http2_5_1_2_1_streams_over_max_concurrent_are_refused => "http2/5.1.2/1",
    h2spec_http2_5_1_1_data_on_idle_stream_is_protocol_error => "http2/5.1/1",
    h2spec_http2_5_1_2_rst_stream_on_idle_stream_is_protocol_error => "http2/5.1/2",
    h2spec_http2_5_1_3_window_update_on_idle_stream_is_protocol_error => "http2/5.1/3",
    h2spec_http2_5_1_4_continuation_on_idle_stream_is_protocol_error => "http2/5.1/4",
    h2spec_http2_5_1_5_data_on_half_closed_stream_is_stream_closed => "http2/5.1/5",
    h2spec_http2_5_1_6_headers_on_half_closed_stream_is_stream_closed => "http2/5.1/6",
    h2spec_http2_5_1_7_continuation_on_half_closed_stream_is_stream_closed => "http2/5.1/7",
    h2spec_http2_5_1_8_data_after_rst_stream_is_stream_closed => "http2/5.1/8",
    h2spec_http2_5_1_9_headers_after_rst_stream_is_stream_closed => "http2/5.1/9",
    h2spec_http2_5_1_10_continuation_after_rst_stream_is_stream_closed => "http2/5.1/10",
    h2spec_http2_5_1_11_data_on_closed_stream_is_stream_closed => "http2/5.1/11",
    h2spec_http2_5_1_12_headers_on_closed_stream_is_stream_closed => "http2/5.1/12",
    h2spec_http2_5_1_13_continuation_on_closed_stream_is_stream_closed => "http2/5.1/13",
    h2spec_http2_5_3_1_1_headers_depending_on_itself_is_protocol_error => "http2/5.3.1/1",
    h2spec_http2_5_3_1_2_priority_depending_on_itself_is_protocol_error => "http2/5.3.1/2",
    h2spec_http2_5_4_1_1_connection_error_closes_the_connection => "http2/5.4.1/1",
    h2spec_http2_5_4_1_2_connection_error_sends_goaway_first => "http2/5.4.1/2",
    h2spec_http2_5_5_1_unknown_extension_frame_is_ignored => "http2/5.5/1",
    h2spec_http2_5_5_2_extension_frame_inside_a_header_block_is_protocol_error => "http2/5.5/2",
    h2spec_http2_6_1_1_data_on_stream_0_is_protocol_error => "http2/6.1/1",
    h2spec_http2_6_1_2_data_after_end_stream_is_stream_closed => "http2/6.1/2",
    h2spec_http2_6_1_3_data_with_bad_pad_length_is_protocol_error => "http2/6.1/3",
    h2spec_http2_6_2_1_priority_inside_a_header_block_is_protocol_error => "http2/6.2/1",
    h2spec_http2_6_2_2_headers_of_another_stream_inside_a_header_block_is_protocol_error => "http2/6.2/2",
    h2spec_http2_6_2_3_headers_on_stream_0_is_protocol_error => "http2/6.2/3",
    h2spec_http2_6_2_4_headers_with_bad_pad_length_is_protocol_error => "http2/6.2/4",
    h2spec_http2_6_3_1_priority_on_stream_0_is_protocol_error => "http2/6.3/1",
    h2spec_http2_6_3_2_priority_of_4_bytes_is_frame_size_error => "http2/6.3/2",
    h2spec_http2_6_4_1_rst_stream_on_stream_0_is_protocol_error => "http2/6.4/1",
    h2spec_http2_6_4_2_rst_stream_on_idle_stream_is_protocol_error => "http2/6.4/2",
    h2spec_http2_6_4_3_rst_stream_of_3_bytes_is_frame_size_error => "http2/6.4/3",
    h2spec_http2_6_5_2_1_enable_push_of_2_is_protocol_error => "http2/6.5.2/1",
    h2spec_http2_6_5_2_2_initial_window_size_over_2_31_is_flow_control_error => "http2/6.5.2/2",
    h2spec_http2_6_5_2_3_max_frame_size_under_2_14_is_protocol_error => "http2/6.5.2/3",
    h2spec_http2_6_5_2_4_max_frame_size_of_2_24_is_protocol_error => "http2/6.5.2/4",
    h2spec_http2_6_5_2_5_unknown_setting_is_ignored => "http2/6.5.2/5",
    h2spec_http2_6_5_3_1_settings_values_apply_in_order => "http2/6.5.3/1",
    h2spec_http2_6_5_3_2_settings_are_acknowledged => "http2/6.5.3/2",
    h2spec_http2_6_5_1_settings_ack_with_payload_is_frame_size_error => "http2/6.5/1",
    h2spec_http2_6_5_2_settings_on_a_stream_is_protocol_error => "http2/6.5/2",
    h2spec_http2_6_5_3_settings_of_3_bytes_is_frame_size_error => "http2/6.5/3",
    h2spec_http2_6_7_1_ping_is_acknowledged_with_its_payload => "http2/6.7/1",
    h2spec_http2_6_7_2_ping_ack_is_not_answered => "http2/6.7/2",
    h2spec_http2_6_7_3_ping_on_a_stream_is_protocol_error => "http2/6.7/3",
    h2spec_http2_6_7_4_ping_of_6_bytes_is_frame_size_error => "http2/6.7/4",
    h2spec_http2_6_8_1_goaway_on_a_stream_is_protocol_error => "http2/6.8/1",
    h2spec_http2_6_9_1_1_window_of_1_byte_gets_1_byte_of_data => "http2/6.9.1/1",
    h2spec_http2_6_9_1_2_connection_window_over_2_31_is_flow_control_error => "http2/6.9.1/2",
    h2spec_http2_6_9_1_3_stream_window_over_2_31_is_flow_control_error => "http2/6.9.1/3",
    h2spec_http2_6_9_2_1_new_initial_window_size_applies_to_open_streams => "http2/6.9.2/1",
    h2spec_http2_6_9_2_2_negative_window_is_tracked => "http2/6.9.2/2",
    h2spec_http2_6_9_2_3_initial_window_size_over_2_31_is_flow_control_error => "http2/6.9.2/3",
    h2spec_http2_6_9_1_window_update_of_0_is_protocol_error => "http2/6.9/1",
    h2spec_http2_6_9_2_window_update_of_0_on_a_stream_is_protocol_error => "http2/6.9/2",
    h2spec_http2_6_9_3_window_update_of_3_bytes_is_frame_size_error => "http2/6.9/3",
    h2spec_http2_6_10_1_continuations_of_a_header_block_are_accepted => "http2/6.10/1",
    h2spec_http2_6_10_2_data_inside_a_header_block_is_protocol_error => "http2/6.10/2",
    h2spec_http2_6_10_3_continuation_on_stream_0_is_protocol_error => "http2/6.10/3",
    h2spec_http2_6_10_4_continuation_after_end_headers_is_protocol_error => "http2/6.10/4",
    h2spec_http2_6_10_5_continuation_after_ended_continuation_is_protocol_error => "http2/6.10/5",
    h2spec_http2_6_10_6_continuation_after_data_is_protocol_error => "http2/6.10/6",
    h2spec_http2_7_1_goaway_with_unknown_code_is_not_special => "http2/7/1",
    h2spec_http2_7_2_rst_stream_with_unknown_code_is_not_special => "http2/7/2",
    h2spec_http2_8_1_2_1_1_unknown_pseudo_header_is_protocol_error => "http2/8.1.2.1/1",
    h2spec_http2_8_1_2_1_2_response_pseudo_header_in_request_is_protocol_error => "http2/8.1.2.1/2",
    h2spec_http2_8_1_2_1_3_pseudo_header_in_trailers_is_protocol_error => "http2/8.1.2.1/3",
    h2spec_http2_8_1_2_1_4_pseudo_header_after_regular_field_is_protocol_error => "http2/8.1.2.1/4",
    h2spec_http2_8_1_2_2_1_connection_field_is_protocol_error => "http2/8.1.2.2/1",
    h2spec_http2_8_1_2_2_2_te_other_than_trailers_is_protocol_error => "http2/8.1.2.2/2",
    h2spec_http2_8_1_2_3_1_empty_path_is_protocol_error => "http2/8.1.2.3/1",
    h2spec_http2_8_1_2_3_2_missing_method_is_protocol_error => "http2/8.1.2.3/2",
    h2spec_http2_8_1_2_3_3_missing_scheme_is_protocol_error => "http2/8.1.2.3/3",
    h2spec_http2_8_1_2_3_4_missing_path_is_protocol_error => "http2/8.1.2.3/4",
    h2spec_http2_8_1_2_3_5_duplicate_method_is_protocol_error => "http2/8.1.2.3/5",
    h2spec_http2_8_1_2_3_6_duplicate_scheme_is_protocol_error => "http2/8.1.2.3/6",
    h2spec_http2_8_1_2_3_7_duplicate_path_is_protocol_error => "http2/8.1.2.3/7",
    h2spec_http2_8_1_2_6_1_content_length_unlike_data_is_protocol_error => "http2/8.1.2.6/1",
    h2spec_http2_8_1_2_6_2_content_length_unlike_sum_of_data_is_protocol_error => "http2/8.1.2.6/2",
    h2spec_http2_8_1_2_1_uppercase_field_name_is_protocol_error => "http2/8.1.2/1",
    h2spec_http2_8_1_1_second_headers_without_end_stream_is_protocol_error => "http2/8.1/1",
    h2spec_http2_8_2_1_push_promise_from_client_is_protocol_error => "http2/8.2/1",
    h2spec_hpack_2_3_3_1_index_past_the_table_is_compression_error => "hpack/2.3.3/1",
    h2spec_hpack_2_3_3_2_name_index_past_the_table_is_compression_error => "hpack/2.3.3/2",
    h2spec_hpack_4_2_1_table_size_update_at_block_end_is_compression_error => "hpack/4.2/1",
    h2spec_hpack_5_2_1_huffman_padding_over_7_bits_is_compression_error => "hpack/5.2/1",
    h2spec_hpack_5_2_2_huffman_padding_of_zeros_is_compression_error => "hpack/5.2/2",
    h2spec_hpack_5_2_3_huffman_eos_is_compression_error => "hpack/5.2/3",
    h2spec_hpack_6_1_1_index_0_is_compression_error => "hpack/6.1/1",
    h2spec_hpack_6_3_1_table_size_update_over_the_setting_is_compression_error => "hpack/6.3/1",
    h2spec_generic_1_1_client_preface_is_accepted => "generic/1/1",
    h2spec_generic_2_1_priority_on_idle_stream_is_accepted => "generic/2/1",
    h2spec_generic_2_2_window_update_on_half_closed_stream_is_accepted => "generic/2/2",
    h2spec_generic_2_3_priority_on_half_closed_stream_is_accepted => "generic/2/3",
    h2spec_generic_2_4_rst_stream_on_half_closed_stream_is_accepted => "generic/2/4",
    h2spec_generic_2_5_priority_on_closed_stream_is_accepted => "generic/2/5",
    h2spec_generic_3_1_1_data_is_accepted => "generic/3.1/1",
    h2spec_generic_3_1_2_several_data_frames_are_accepted => "generic/3.1/2",
    h2spec_generic_3_1_3_padded_data_is_accepted => "generic/3.1/3",
    h2spec_generic_3_2_1_headers_are_answered => "generic/3.2/1",
    h2spec_generic_3_2_2_padded_headers_are_answered => "generic/3.2/2",
    h2spec_generic_3_2_3_headers_with_priority_are_answered => "generic/3.2/3",
    h2spec_generic_3_3_1_priority_of_weight_1_is_accepted => "generic/3.3/1",
    h2spec_generic_3_3_2_priority_of_weight_256_is_accepted => "generic/3.3/2",
    h2spec_generic_3_3_3_priority_with_a_dependency_is_accepted => "generic/3.3/3",
    h2spec_generic_3_3_4_exclusive_priority_is_accepted => "generic/3.3/4",
    h2spec_generic_3_3_5_priority_on_idle_stream_then_lower_request_is_answered => "generic/3.3/5",
    h2spec_generic_3_4_1_rst_stream_is_accepted => "generic/3.4/1",
    h2spec_generic_3_5_1_every_setting_is_accepted => "generic/3.5/1",
    h2spec_generic_3_7_1_ping_is_answered => "generic/3.7/1",
    h2spec_generic_3_8_1_goaway_is_accepted => "generic/3.8/1",
    h2spec_generic_3_9_1_window_update_on_the_connection_is_accepted => "generic/3.9/1",
    h2spec_generic_3_9_2_window_update_on_a_stream_is_accepted => "generic/3.9/2",
    h2spec_generic_3_10_1_continuation_is_accepted => "generic/3.10/1",
    h2spec_generic_3_10_2_several_continuations_are_accepted => "generic/3.10/2",
    h2spec_generic_4_1_get_is_answered => "generic/4/1",
    h2spec_generic_4_2_head_is_answered => "generic/4/2",
    h2spec_generic_4_3_post_is_answered => "generic/4/3",
    h2spec_generic_4_4_post_with_trailers_is_answered => "generic/4/4",
    h2spec_generic_5_1_indexed_field_is_accepted => "generic/5/1",
    h2spec_generic_5_2_indexed_literal_of_indexed_name_is_accepted => "generic/5/2",
    h2spec_generic_5_3_indexed_literal_of_indexed_name_in_huffman_is_accepted => "generic/5/3",
    h2spec_generic_5_4_indexed_literal_of_new_name_is_accepted => "generic/5/4",
    h2spec_generic_5_5_indexed_literal_of_new_name_in_huffman_is_accepted => "generic/5/5",
    h2spec_generic_5_6_unindexed_literal_of_indexed_name_is_accepted => "generic/5/6",
    h2spec_generic_5_7_unindexed_literal_of_indexed_name_in_huffman_is_accepted => "generic/5/7",
    h2spec_generic_5_8_unindexed_literal_of_new_name_is_accepted => "generic/5/8",
    h2spec_generic_5_9_unindexed_literal_of_new_name_in_huffman_is_accepted => "generic/5/9",
    h2spec_generic_5_10_never_indexed_literal_of_indexed_name_is_accepted => "generic/5/10",
    h2spec_generic_5_11_never_indexed_literal_of_indexed_name_in_huffman_is_accepted => "generic/5/11",
    h2spec_generic_5_12_never_indexed_literal_of_new_name_is_accepted => "generic/5/12",
    h2spec_generic_5_13_never_indexed_literal_of_new_name_in_huffman_is_accepted => "generic/5/13",
    h2spec_generic_5_14_table_size_update_is_accepted => "generic/5/14",
    h2spec_generic_5_15_two_table_size_updates_are_accepted => "generic/5/15",
}

// The preface, frame sizes and SETTINGS again over TLS (ALPN h2), and a request each way.
h2spec_cases! { Transport::Tls;
    h2spec_tls_http2_3_5_1_server_preface_starts_with_settings => "http2/3.5/1",
    h2spec_tls_http2_3_5_2_invalid_preface_closes_the_connection => "http2/3.5/2",
    h2spec_tls_http2_4_2_1_data_frame_of_2_14_bytes_is_accepted => "http2/4.2/1",
    h2spec_tls_http2_4_2_2_data_frame_over_max_frame_size_is_frame_size_error => "http2/4.2/2",
    h2spec_tls_http2_4_2_3_headers_frame_over_max_frame_size_is_frame_size_error => "http2/4.2/3",
    h2spec_tls_http2_6_5_1_settings_ack_with_payload_is_frame_size_error => "http2/6.5/1",
    h2spec_tls_http2_6_5_2_settings_on_a_stream_is_protocol_error => "http2/6.5/2",
    h2spec_tls_http2_6_5_3_settings_of_3_bytes_is_frame_size_error => "http2/6.5/3",
    h2spec_tls_generic_4_1_get_is_answered => "generic/4/1",
    h2spec_tls_generic_4_3_post_is_answered => "generic/4/3",
}
