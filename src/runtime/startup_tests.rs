//! The limits phase, without raising any limit: the sessions an open-file limit leaves room for,
//! and how `-x` is held to them.

use super::{session_limit, sessions_for, Limits, FD_CONTROL_ADMIN, FD_RESERVE};
use crate::runtime::PIPES_PER_WORKER;

#[test]
fn a_session_takes_two_descriptors_after_the_reserve() {
    let per_worker = 3 + 2 * PIPES_PER_WORKER as u64;
    let reserve = FD_RESERVE + FD_CONTROL_ADMIN + 2 + 5 + 4 * per_worker;
    assert_eq!(sessions_for(reserve + 1000, 4, 2, 5), 500);
    assert_eq!(sessions_for(reserve + 1001, 4, 2, 5), 500);
}

#[test]
fn a_limit_below_the_reserve_leaves_no_session() {
    assert_eq!(sessions_for(10, 4, 2, 5), 0);
}

#[test]
fn x_is_kept_when_it_fits_and_cut_to_what_fits_otherwise() {
    assert_eq!(session_limit(Some(100), 65536, 30000), 100);
    assert_eq!(session_limit(Some(30000), 65536, 30000), 30000);
    assert_eq!(session_limit(Some(40000), 65536, 30000), 30000);
    assert_eq!(session_limit(None, 65536, 30000), 30000);
}

#[test]
fn the_limits_carry_the_open_files_what_fits_and_what_is_allowed() {
    let fit = sessions_for(65536, 2, 1, 3);
    assert_eq!(
        Limits::for_counts(65536, 2, 1, 3, Some(10)),
        Limits {
            nofile: 65536,
            fit,
            max_sessions: 10,
        }
    );
    assert_eq!(Limits::for_counts(65536, 2, 1, 3, None).max_sessions, fit);
}
