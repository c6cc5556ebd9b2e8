//! The main loop's tick: how long it waits for a message before it checks the watchdog and the
//! idle exit.

use std::time::Duration;

use super::tick;

#[test]
fn without_watchdog_or_idle_exit_the_loop_waits_for_messages_only() {
    assert_eq!(tick(None, None), None);
}

#[test]
fn the_watchdog_ticks_at_its_interval_and_at_least_every_second() {
    let short = Duration::from_millis(300);
    assert_eq!(tick(Some(short), None), Some(short));
    assert_eq!(
        tick(Some(Duration::from_secs(30)), Some(Duration::from_secs(5))),
        Some(Duration::from_secs(1))
    );
}

#[test]
fn the_idle_exit_alone_ticks_four_times_a_second() {
    assert_eq!(
        tick(None, Some(Duration::from_secs(60))),
        Some(Duration::from_millis(250))
    );
}
