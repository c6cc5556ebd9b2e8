//! Unit tests of [`SessionCount`] and [`SessionPermit`]: a permit counts, its drop uncounts, and
//! a full count refuses without counting.

use super::*;

#[test]
fn a_permit_counts_one_session_until_it_drops() {
    let count = Arc::new(SessionCount::default());
    let a = count.try_take(2).expect("room for a first session");
    assert_eq!(count.load(Ordering::Relaxed), 1);
    let b = count.try_take(2).expect("room for a second session");
    assert_eq!(count.load(Ordering::Relaxed), 2);
    drop(a);
    assert_eq!(
        count.load(Ordering::Relaxed),
        1,
        "a drop gives its place back"
    );
    drop(b);
    assert_eq!(count.load(Ordering::Relaxed), 0);
}

#[test]
fn a_full_count_refuses_and_counts_nothing() {
    let count = Arc::new(SessionCount::default());
    let held: Vec<_> = (0..3).map(|_| count.try_take(3)).collect();
    assert!(held.iter().all(Option::is_some));
    assert!(
        count.try_take(3).is_none(),
        "a fourth session over a max of 3"
    );
    assert_eq!(
        count.load(Ordering::Relaxed),
        3,
        "a refusal leaves nothing counted"
    );
    assert!(count.try_take(0).is_none(), "a max of 0 admits nobody");
    drop(held);
    assert_eq!(count.load(Ordering::Relaxed), 0);
    assert!(
        count.try_take(3).is_some(),
        "room again once the permits dropped"
    );
}

#[test]
fn a_lowered_max_refuses_until_enough_permits_dropped() {
    let count = Arc::new(SessionCount::default());
    let mut held: Vec<_> = (0..4).filter_map(|_| count.try_take(4)).collect();
    assert_eq!(held.len(), 4);
    // A reload lowers `-x` to 2 while four sessions are open: none is cut, new ones wait.
    assert!(count.try_take(2).is_none());
    held.truncate(2);
    assert!(count.try_take(2).is_none(), "two open, max two");
    held.truncate(1);
    let c = count.try_take(2);
    assert!(c.is_some());
    assert_eq!(count.load(Ordering::Relaxed), 2);
}
