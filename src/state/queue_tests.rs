use std::sync::Arc;
use std::time::Duration;

use mio::{Events, Poll, Token, Waker};

use super::{Mailbox, Queue};

const WAKE: Token = Token(7);

fn mailbox() -> (Poll, Arc<Mailbox>) {
    let poll = Poll::new().unwrap();
    let waker = Arc::new(Waker::new(poll.registry(), WAKE).unwrap());
    (poll, Arc::new(Mailbox::new(waker)))
}

fn woken(m: &Mailbox) -> Vec<Token> {
    let mut out = Vec::new();
    m.take(&mut out);
    out.into_iter().map(|(t, _)| t).collect()
}

#[test]
fn a_freed_place_goes_to_the_oldest_waiter_and_wakes_its_worker() {
    let (mut poll, m) = mailbox();
    let q = Arc::new(Queue::default());
    q.wait(Token(1), &m, false);
    q.wait(Token(2), &m, false);
    assert_eq!(q.len(), 2);
    q.wake_one();
    assert_eq!(q.len(), 1);
    let mut events = Events::with_capacity(4);
    poll.poll(&mut events, Some(Duration::from_secs(5)))
        .unwrap();
    assert!(events.iter().any(|e| e.token() == WAKE));
    assert_eq!(woken(&m), [Token(1)]);
    q.wake_one();
    assert_eq!(woken(&m), [Token(2)]);
    assert_eq!(q.len(), 0);
    assert_eq!(q.queued.load(std::sync::atomic::Ordering::Relaxed), 2);
}

#[test]
fn a_waiter_that_lost_its_place_goes_back_to_the_head_of_the_line() {
    let (_poll, m) = mailbox();
    let q = Arc::new(Queue::default());
    q.wait(Token(1), &m, false);
    q.wait(Token(2), &m, true);
    q.wake_one();
    assert_eq!(woken(&m), [Token(2)]);
    // Going back to the head is no new arrival for the count.
    assert_eq!(q.queued.load(std::sync::atomic::Ordering::Relaxed), 1);
}

#[test]
fn a_waiter_that_leaves_is_never_woken() {
    let (_poll, m) = mailbox();
    let q = Arc::new(Queue::default());
    q.wait(Token(1), &m, false);
    q.wait(Token(2), &m, false);
    assert!(q.leave(Token(1)));
    assert!(!q.leave(Token(1)));
    q.wake_one();
    q.wake_one();
    assert_eq!(woken(&m), [Token(2)]);
}

#[test]
fn wakes_go_to_each_waiters_own_worker() {
    let (_p1, a) = mailbox();
    let (_p2, b) = mailbox();
    let q = Arc::new(Queue::default());
    q.wait(Token(1), &a, false);
    q.wait(Token(2), &b, false);
    q.wake_one();
    q.wake_one();
    assert_eq!(woken(&a), [Token(1)]);
    assert_eq!(woken(&b), [Token(2)]);
}

#[test]
fn a_place_freed_with_no_one_waiting_posts_nothing() {
    let (_poll, m) = mailbox();
    let q = Arc::new(Queue::default());
    q.wake_one();
    assert!(woken(&m).is_empty());
}
