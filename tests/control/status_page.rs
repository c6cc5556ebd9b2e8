//! The live status page (`/` on the admin listener) in a real browser: headless Chromium loads
//! it, its script runs (`--virtual-time-budget` lets it poll several times in a second or two of
//! real time), and `--dump-dom` gives the DOM the script built. The page must show every listener
//! and server, and its numbers must move when traffic flows, without a reload; the web server's
//! numbers (responses by source, the file cache, CGI children) are there too.
//!
//! Needs Debian's `chromium` at /usr/bin/chromium (`scripts/test` installs it). Without it these
//! tests fail: they never skip. The Chromium driver, the DOM readers and the gate that runs
//! traffic between two of the page's polls are in tests/admin_support/chromium.rs.

use crate::admin_support;
use crate::support;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use admin_support::chromium::{attr, dump_dom, series_values, tag, Gate};
use admin_support::*;
use support::*;

// ---------------------------------------------------------------------------------------------
// Reading the page's DOM
// ---------------------------------------------------------------------------------------------

/// An attribute value as it appears in serialized HTML.
fn html_attr(v: &str) -> String {
    v.replace('&', "&amp;").replace('"', "&quot;")
}

/// The `data-value` of the element with `id`.
fn id_value(dom: &str, id: &str) -> f64 {
    let t = tag(dom, &format!(" id=\"{id}\"")).unwrap_or_else(|| panic!("no #{id} in DOM:\n{dom}"));
    attr(t, "data-value")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("#{id} has no numeric data-value: {t}"))
}

/// The `<tr>` of server `key` ("LISTENER/INDEX"), up to its `</tr>`.
fn server_row<'a>(dom: &'a str, key: &str) -> &'a str {
    let needle = format!(" data-server=\"{}\"", html_attr(key));
    let at = dom
        .find(&needle)
        .unwrap_or_else(|| panic!("no row for server {key} in DOM:\n{dom}"));
    let start = dom[..at].rfind("<tr").unwrap();
    let end = at + dom[at..].find("</tr>").expect("row end");
    &dom[start..end]
}

/// The `data-value` of the cell with class `class` in a server row.
fn cell_value(row: &str, class: &str) -> u64 {
    let t =
        tag(row, &format!(" class=\"{class}\"")).unwrap_or_else(|| panic!("no .{class} in {row}"));
    attr(t, "data-value")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!(".{class} has no numeric data-value: {t}"))
}

/// The text inside the element with class `class` in a server row.
fn cell_text<'a>(row: &'a str, class: &str) -> &'a str {
    let t =
        tag(row, &format!(" class=\"{class}\"")).unwrap_or_else(|| panic!("no .{class} in {row}"));
    let start = row.find(t).unwrap() + t.len();
    &row[start..start + row[start..].find('<').unwrap()]
}

/// Sends `n` requests through quill, one connection each; any failure is returned.
fn try_http_requests(quill: SocketAddr, n: usize) -> Result<(), String> {
    for i in 0..n {
        let r = try_request(quill, REQUEST).map_err(|e| format!("request {i}: {e}"))?;
        if r.status != 200 {
            return Err(format!("request {i}: {}", r.head));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[test]
fn status_page_shows_every_listener_and_server() {
    let backends: Vec<DemoServer> = ["a", "b", "c"].iter().map(|n| http(n)).collect();
    let servers: Vec<String> = backends.iter().map(|b| spec(b.addr())).collect();
    let (q, admin) =
        start_with_admin(|dir, port, admin| two_listener_config(dir, port, admin, &servers));
    http_requests(q.port, 3);
    let accepted = status_json(admin)["totals"]["accepted"].as_u64().unwrap();

    let dom = dump_dom(&format!("http://{admin}/"), 3000);

    assert!(
        id_value(&dom, "samples") >= 2.0,
        "the page polled only once:\n{dom}"
    );
    let conn = tag(&dom, " id=\"conn\"").unwrap();
    assert!(
        attr(conn, "class").unwrap().contains("live"),
        "connection badge: {conn}"
    );
    assert_eq!(
        id_value(&dom, "accepted"),
        accepted as f64,
        "accepted shown"
    );
    assert!(
        dom.contains(&format!(">{}</span>", env!("CARGO_PKG_VERSION"))),
        "version shown"
    );
    let odd = "odd\"name\\x";
    for listener in ["web", odd] {
        let needle = format!(" data-listener=\"{}\"", html_attr(listener));
        assert!(
            tag(&dom, &needle).is_some(),
            "no section for listener {listener}:\n{dom}"
        );
    }
    for (key, addr) in [
        ("web/0", &servers[0]),
        ("web/1", &servers[1]),
        (&format!("{odd}/0") as &str, &servers[2]),
        (&format!("{odd}/emergency"), &servers[0]),
    ] {
        let row = server_row(&dom, key);
        assert_eq!(cell_text(row, "address"), addr.as_str(), "address of {key}");
        assert_eq!(
            attr(tag(row, "<tr").unwrap(), "data-state").as_deref(),
            Some("up"),
            "{row}"
        );
        assert!(
            row.contains("class=\"badge state-up\""),
            "state badge of {key}: {row}"
        );
    }
    let web_total = cell_value(server_row(&dom, "web/0"), "total")
        + cell_value(server_row(&dom, "web/1"), "total");
    assert!(web_total >= 3, "web servers' totals shown: {web_total}");
    // A listener name is text on the page, never markup.
    assert!(
        dom.contains("odd\"name\\x</span>"),
        "listener name as text:\n{dom}"
    );
}

#[test]
fn status_page_numbers_move_with_traffic_without_a_reload() {
    const N: usize = 12;
    let backends: Vec<DemoServer> = ["a", "b"].iter().map(|n| http(n)).collect();
    let servers: Vec<String> = backends.iter().map(|b| spec(b.addr())).collect();
    let (q, admin) = start_pen_with_admin(&["-r"], &servers);
    let before = metrics(admin);
    let accepted = before.value("quill_sessions_accepted_total", &[]);
    let totals = before.sum("quill_server_sessions_total", &[]);
    let quill = q.addr();
    let gate = Gate::start(admin, move || try_http_requests(quill, N));

    let dom = dump_dom(&gate.url(), 6000);
    gate.check();

    let polls = gate.polls.load(Ordering::SeqCst);
    assert!(polls >= 3, "the page polled {polls} times");
    assert_eq!(
        gate.pages.load(Ordering::SeqCst),
        1,
        "the page was loaded once, never reloaded"
    );
    let n = N as f64;
    assert_eq!(
        id_value(&dom, "accepted"),
        accepted + n,
        "accepted after the traffic"
    );
    let shown: u64 = (0..servers.len())
        .map(|i| cell_value(server_row(&dom, &format!("default/{i}")), "total"))
        .sum();
    assert_eq!(
        shown as f64,
        totals + n,
        "servers' totals after the traffic"
    );
    // The chart's rates come from differences between the page's own samples: a positive one
    // means the page saw the counters move while it stayed loaded.
    for needle in [
        " data-series=\"accepted\"",
        " data-series=\"listener\" data-listener=\"default\"",
    ] {
        let values = series_values(&dom, needle);
        assert!(values.len() >= 2, "chart {needle}: {values:?}");
        assert!(
            values.iter().any(|&v| v > 0.0),
            "chart {needle} never moved: {values:?}"
        );
    }
}

#[test]
fn status_page_shows_named_pools_servers_and_a_udp_listener_as_udp() {
    let backends: Vec<DemoServer> = ["a", "b", "c"].iter().map(|n| http(n)).collect();
    let servers: Vec<String> = backends.iter().map(|b| spec(b.addr())).collect();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let udp_addr = udp.local_addr().unwrap();
    let (q, admin) = start_with_admin(|dir, port, admin| {
        pool_and_udp_config(dir, port, admin, &servers, udp_addr)
    });
    for i in 0..3 {
        let r = request(
            q.addr(),
            format!("GET /api/{i} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        );
        assert_eq!(r.status, 200, "{}", r.head);
    }

    let dom = dump_dom(&format!("http://{admin}/"), 3000);

    assert!(
        tag(&dom, " data-pool=\"api\"").is_some(),
        "no section for pool api:\n{dom}"
    );
    let mut total = 0;
    for (i, addr) in servers[..2].iter().enumerate() {
        let row = server_row(&dom, &format!("pool:api/{i}"));
        assert_eq!(cell_text(row, "address"), addr.as_str(), "{row}");
        assert!(row.contains("class=\"badge state-up\""), "{row}");
        total += cell_value(row, "total");
    }
    assert_eq!(total, 3, "the pool's servers took the three requests");
    // The UDP listener's card says UDP, the HTTP one HTTP.
    for (listener, protocol) in [("dns", "UDP ·"), ("web", "HTTP ·")] {
        let at = dom
            .find(&format!(
                "class=\"listener panel\" data-listener=\"{listener}\""
            ))
            .unwrap_or_else(|| panic!("no section for {listener}:\n{dom}"));
        let meta = tag(&dom[at..], "class=\"meta muted\"").unwrap();
        let start = dom[at..].find(meta).unwrap() + meta.len();
        let text = &dom[at + start..at + start + 10];
        assert!(text.starts_with(protocol), "{listener}'s card: {text:?}");
    }
}

/// Draws the chart with a sample of 100,000 sessions/s (through the page's own `drawChart`, once
/// it has polled) and lists each axis label's text and its left and right edges, in the chart's
/// pixels, in `<pre id="labels">` lines `TEXT|LEFT|RIGHT|WIDTH` (WIDTH: the chart's).
const LABEL_PROBE: &str = r#"
setTimeout(() => {
  const now = performance.now();
  history.push({ t: now - 1000, total: 100000, per: new Map(), http: new Map() });
  history.push({ t: now, total: 99000, per: new Map(), http: new Map() });
  drawChart([], [], now);
  const svg = document.getElementById("chart");
  const width = svg.getBoundingClientRect().width;
  const lines = [...svg.querySelectorAll("text")].map((t) => {
    const b = t.getBBox();
    return t.textContent + "|" + b.x.toFixed(1) + "|" + (b.x + b.width).toFixed(1) + "|" + width.toFixed(1);
  });
  const pre = document.createElement("pre");
  pre.id = "labels";
  pre.textContent = lines.join("\n");
  document.body.append(pre);
}, 2500);
"#;

#[test]
fn status_page_chart_axis_label_of_100000_is_drawn_whole() {
    let backends: Vec<DemoServer> = ["a"].iter().map(|n| http(n)).collect();
    let servers: Vec<String> = backends.iter().map(|b| spec(b.addr())).collect();
    let (_q, admin) = start_pen_with_admin(&["-r"], &servers);
    let gate = Gate::with_script(admin, LABEL_PROBE);

    let dom = dump_dom(&gate.url(), 4000);
    gate.check();

    let start = dom
        .find("<pre id=\"labels\">")
        .unwrap_or_else(|| panic!("the probe did not run:\n{dom}"))
        + "<pre id=\"labels\">".len();
    let text = &dom[start..start + dom[start..].find("</pre>").unwrap()];
    let labels: Vec<(&str, f64, f64, f64)> = text
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('|').collect();
            let n = |i: usize| f[i].parse::<f64>().unwrap();
            (f[0], n(1), n(2), n(3))
        })
        .collect();
    assert!(
        labels.iter().any(|l| l.0 == "100,000"),
        "no 100,000 label: {labels:?}"
    );
    assert!(
        labels.iter().any(|l| l.0 == "50,000"),
        "no 50,000 label: {labels:?}"
    );
    for (label, left, right, width) in &labels {
        assert!(
            *left >= 0.0 && *right <= *width,
            "axis label {label:?} drawn from {left} to {right} px, outside the chart's 0..{width}: {labels:?}"
        );
    }
}

#[test]
fn status_page_shows_responses_by_source_the_file_cache_and_cgi_children() {
    let (q, admin) = start_with_admin(|dir, port, admin| {
        let root = dir.join("www");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("a.txt"), b"a\n").unwrap();
        let cfg = dir.join("quill.toml");
        let text = format!(
            "workers = 1\nadmin = \"{admin}\"\n\
             [[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\
             [[listener.route]]\npath = \"/hello\"\nrespond = {{ body = \"hi\" }}\n\
             [[listener.route]]\nstatic = {{ root = \"{}\" }}\n",
            root.display()
        );
        std::fs::write(&cfg, text).unwrap();
        vec!["--config".into(), cfg.display().to_string()]
    });
    let get = |path: &str| {
        let raw = format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
        let r = request(q.addr(), raw.as_bytes());
        assert_eq!(r.status, 200, "{path}: {}", r.head);
    };
    // A miss, then a hit; and Quill's own answer.
    get("/a.txt");
    get("/a.txt");
    get("/hello");
    wait_metrics(admin, "three responses", |m| {
        m.sum("quill_http_responses_total", &[]) == 3.0
    });

    let dom = dump_dom(&format!("http://{admin}/"), 3000);
    let source = |name: &str| {
        let t = tag(&dom, &format!(" data-source=\"{name}\""))
            .unwrap_or_else(|| panic!("no source {name} in DOM:\n{dom}"));
        attr(t, "data-value").and_then(|v| v.parse::<u64>().ok())
    };
    assert_eq!(source("file"), Some(2));
    assert_eq!(source("quill"), Some(1));
    assert_eq!(source("server"), Some(0));
    assert_eq!(source("cgi"), Some(0));
    assert_eq!(id_value(&dom, "cache-hits"), 1.0);
    assert_eq!(id_value(&dom, "cache-misses"), 1.0);
    assert_eq!(id_value(&dom, "cache-entries"), 1.0);
    assert_eq!(
        id_value(&dom, "fds"),
        0.0,
        "a small file holds no descriptor"
    );
    assert!(id_value(&dom, "fds-max") > 0.0);
    assert_eq!(id_value(&dom, "http-304"), 0.0);
    assert_eq!(id_value(&dom, "http-206"), 0.0);
    assert_eq!(id_value(&dom, "cgi-children"), 0.0);
}
