//! A listener's kind: the control language's changes of kind, without sockets.

use super::*;
use crate::addr::ListenAddr;

fn tcp() -> ListenerConfig {
    let mut l = ListenerConfig::new("a", ListenAddr::Tcp("10.9.0.1:80".parse().unwrap()));
    l.servers
        .push(crate::addr::parse_server("10.9.0.2:80", None).unwrap());
    l
}

#[test]
fn dsr_settings_may_come_before_the_interface_and_need_it_in_the_end() {
    let mut l = tcp();
    l.set_dsr(true, DSR_WAIT_NEEDS_IF, |d| {
        d.wait = Some(Duration::from_millis(7))
    })
    .unwrap();
    // Not a DSR listener yet: no interface.
    assert_eq!(l.dsr(), None);
    let e = l.validate().unwrap_err().message;
    assert_eq!(e, "listener 'a': dsr_wait needs dsr_if");
    l.set_dsr_if(Some("eth0".into())).unwrap();
    let d = l.dsr().expect("a DSR listener");
    assert_eq!(
        (d.ifname(), d.wait),
        ("eth0", Some(Duration::from_millis(7)))
    );
    assert_eq!(l.dsr_wait_ms(), 7);
}

#[test]
fn a_dsr_listener_given_back_every_setting_is_tcp_again() {
    let mut l = tcp();
    l.set_dsr_if(Some("eth0".into())).unwrap();
    l.set_dsr(true, DSR_IP_NEEDS_IF, |d| {
        d.tarpit_acl = Some(AclId::new(1).unwrap())
    })
    .unwrap();
    l.set_dsr_if(None).unwrap();
    assert_eq!(
        l.validate().unwrap_err().message,
        "listener 'a': dsr_ip and tarpit_acl need dsr_if"
    );
    l.set_dsr(false, DSR_IP_NEEDS_IF, |d| d.tarpit_acl = None)
        .unwrap();
    assert_eq!(l.kind, ListenerKind::default());
}

#[test]
fn http_and_dsr_do_not_mix_whichever_comes_first() {
    let mut l = tcp();
    l.make_http().unwrap();
    assert!(l.is_http());
    assert_eq!(
        l.set_dsr_if(Some("eth0".into())),
        Err(NOT_HTTP_OR_TLS.into())
    );
    assert_eq!(
        l.set_dsr(true, DSR_WAIT_NEEDS_IF, |d| d.wait = None),
        Err(DSR_WAIT_NEEDS_IF.into())
    );
    assert!(l.is_http(), "a refused change changes nothing");
    let mut l = tcp();
    l.set_dsr_if(Some("eth0".into())).unwrap();
    assert_eq!(l.make_http(), Err(NOT_HTTP_OR_TLS.into()));
    assert!(l.dsr().is_some());
    l.make_tcp();
    assert!(l.dsr().is_some(), "no http leaves a DSR listener as it is");
}

#[test]
fn a_udp_listener_takes_neither_http_nor_dsr() {
    let mut l = tcp();
    l.kind = ListenerKind::Udp(UdpSettings::default());
    assert!(l.make_http().is_err());
    assert!(l.set_dsr_if(Some("eth0".into())).is_err());
    assert!(l.set_dsr_if(None).is_ok(), "taking nothing away is fine");
    assert_eq!(l.udp(), Some(&UdpSettings::default()));
}

#[test]
fn tls_and_accept_proxy_belong_to_stream_listeners() {
    let mut l = tcp();
    l.kind = ListenerKind::Udp(UdpSettings::default());
    l.set_tls(None);
    assert_eq!(l.tls(), None);
    assert_eq!(l.udp(), Some(&UdpSettings::default()));
    assert!(l.stream().is_none());
}
