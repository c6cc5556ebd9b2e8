//! The differential test of static files: the same table of requests (methods, paths, content
//! types, conditionals, ranges, encodings, odd requests) to nginx 1.22 (Debian's, the reference:
//! it agrees with RFC 9110 on every case research/next-turn3.md A.2 tried) and to Quill, both
//! serving one directory; the status and the fields that matter are compared. Every case where
//! the two differ on purpose says why in its `Differs` reason; any other difference fails.
//!
//! nginx runs with the settings that make it follow RFC 9110 where its defaults do not:
//! `if_modified_since before` (its default `exact` answers 304 only for the exact date),
//! `absolute_redirect off` (a relative `Location`, as Quill sends), `charset utf-8` on the text
//! types (Quill's content types carry it), `gzip_static on` with `gzip_vary on`. Quill runs with
//! `precompressed = ["gzip"]` (this nginx has no brotli module) and `dotfiles = true` (nginx
//! serves them).

use crate::http_support;
use crate::support;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use http_support::*;
use support::*;

/// nginx as a child process, stopped by its PID when dropped.
struct Nginx {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const NGINX: &str = "/usr/sbin/nginx";

/// Starts nginx over `root` on `port`, its work files in `work`.
fn start_nginx(root: &Path, work: &Path, port: u16) -> Nginx {
    std::fs::create_dir_all(work.join("logs")).unwrap();
    let conf = format!(
        "worker_processes 1;\n\
         error_log {work}/logs/error.log;\n\
         pid {work}/nginx.pid;\n\
         events {{ worker_connections 256; }}\n\
         http {{\n\
           include /etc/nginx/mime.types;\n\
           default_type application/octet-stream;\n\
           access_log off;\n\
           client_body_temp_path {work}/body;\n\
           proxy_temp_path {work}/proxy;\n\
           fastcgi_temp_path {work}/fastcgi;\n\
           uwsgi_temp_path {work}/uwsgi;\n\
           scgi_temp_path {work}/scgi;\n\
           sendfile on; tcp_nopush on;\n\
           if_modified_since before;\n\
           absolute_redirect off;\n\
           server_tokens off;\n\
           charset utf-8;\n\
           charset_types text/plain text/css text/html application/javascript application/json;\n\
           gzip_static on; gzip_vary on;\n\
           server {{ listen 127.0.0.1:{port}; root {root}; }}\n\
         }}\n",
        work = work.display(),
        root = root.display(),
    );
    let path = work.join("nginx.conf");
    std::fs::write(&path, conf).unwrap();
    let child = Command::new(NGINX)
        .args([
            "-p",
            &work.display().to_string(),
            "-c",
            &path.display().to_string(),
        ])
        .args(["-g", "daemon off;"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nginx (Debian package nginx) must be installed: scripts/test installs it");
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "nginx did not start on {addr}");
        std::thread::sleep(Duration::from_millis(20));
    }
    Nginx { child, addr }
}

/// The directory both serve.
fn write_root(root: &Path) {
    let w = |name: &str, bytes: &[u8]| {
        let p = root.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    };
    w("index.html", b"<h1>home</h1>\n");
    w("hello.txt", b"hello, world\n");
    w("style.css", b"body { color: black }\n");
    w("data.bin", &body_pattern(5000));
    w("image.png", b"\x89PNG\r\n\x1a\nnot really");
    w("app.js", b"console.log('plain');\n");
    w("app.js.gz", b"GZIP-BYTES");
    w("sp ace.txt", b"space\n");
    w("docs/guide.html", b"<p>guide</p>\n");
    w("sub/index.html", b"<p>sub</p>\n");
    w(".hidden", b"dot\n");
    w("noext", b"?\n");
    w("zero.txt", b"");
    // Equal modification times on both sides: they serve the same files.
    let old = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    for entry in walk(root) {
        let f = std::fs::File::options().write(true).open(&entry).unwrap();
        f.set_modified(old).unwrap();
    }
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// How a case is judged.
#[derive(Clone, Copy)]
enum Expect {
    /// Same status and same fields that matter.
    Same,
    /// Same status; the fields differ for this reason.
    SameStatus(&'static str),
    /// The two answer differently, on purpose, for this reason.
    Differs(&'static str),
}

/// One request of the table: its name, its raw bytes (`{etag}` and `{lm}` are replaced by the
/// server's own validators of /data.bin), how it is judged.
struct Case {
    name: &'static str,
    raw: String,
    expect: Expect,
}

fn case(name: &'static str, method: &str, target: &str, extra: &str, expect: Expect) -> Case {
    Case {
        name,
        raw: format!(
            "{method} {target} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{extra}\r\n"
        ),
        expect,
    }
}

use Expect::*;

/// The table: at least 60 requests.
fn table() -> Vec<Case> {
    let js =
        "nginx's mime.types says application/javascript; Quill says text/javascript (RFC 9239)";
    let allow =
        "Quill adds Allow: GET, HEAD to its 405 (RFC 9110 §15.5.6 says it must); nginx does not";
    let merged = "Quill merges overlapping ranges before answering (CVE-2011-3192), nginx sends them as asked";
    vec![
        // Methods.
        case("get", "GET", "/hello.txt", "", Same),
        case("head", "HEAD", "/hello.txt", "", Same),
        case("post", "POST", "/hello.txt", "Content-Length: 0\r\n", SameStatus(allow)),
        case("put", "PUT", "/hello.txt", "Content-Length: 0\r\n", SameStatus(allow)),
        case("delete", "DELETE", "/hello.txt", "", SameStatus(allow)),
        case("options", "OPTIONS", "/hello.txt", "", SameStatus(allow)),
        case("patch", "PATCH", "/hello.txt", "Content-Length: 0\r\n", SameStatus(allow)),
        case("head dir slash", "HEAD", "/docs/", "", SameStatus("nginx's 403 has an HTML body, Quill's none")),
        // Paths.
        case("root", "GET", "/", "", Same),
        case("index file", "GET", "/index.html", "", Same),
        case("dir no slash", "GET", "/docs", "", SameStatus("nginx's 301 has an HTML body and type")),
        case("dir no slash query", "GET", "/sub?x=1", "", SameStatus("nginx's 301 has an HTML body and type")),
        case("dir index", "GET", "/sub/", "", Same),
        case("dir no index", "GET", "/docs/", "", SameStatus("nginx's 403 has an HTML body, Quill's none")),
        case("missing", "GET", "/missing.txt", "", SameStatus("nginx's 404 has an HTML body")),
        case("file with slash", "GET", "/hello.txt/", "", SameStatus("nginx's 404 has an HTML body")),
        case("escaped letter", "GET", "/%68ello.txt", "", Same),
        case("dot segment", "GET", "/./hello.txt", "", Same),
        case("double slash", "GET", "//hello.txt", "", Same),
        case("dot dot inside", "GET", "/docs/../hello.txt", "", Same),
        case("dot dot above", "GET", "/../hello.txt", "", SameStatus("nginx's 400 has an HTML body")),
        case("escaped dot dot", "GET", "/%2e%2e/hello.txt", "", SameStatus("nginx's 400 has an HTML body")),
        case("query", "GET", "/hello.txt?x=1&y", "", Same),
        case("space", "GET", "/sp%20ace.txt", "", Same),
        case("bad utf8", "GET", "/%ff", "", SameStatus("nginx's 404 has an HTML body")),
        case("encoded nul", "GET", "/a%00b", "", SameStatus("nginx's 400 has an HTML body")),
        case("encoded slash", "GET", "/docs%2fguide.html", "",
            Differs("nginx decodes %2F into a separator and serves the file; Quill refuses an encoded / (400): a / inside a name cannot exist")),
        case("dotfile", "GET", "/.hidden", "", Same),
        case("upper case", "GET", "/HELLO.TXT", "", SameStatus("nginx's 404 has an HTML body")),
        // Content types.
        case("css", "GET", "/style.css", "", Same),
        case("png", "GET", "/image.png", "", Same),
        case("bin", "GET", "/data.bin", "", Same),
        case("no extension", "GET", "/noext", "", Same),
        case("js", "GET", "/app.js", "", SameStatus(js)),
        case("empty file", "GET", "/zero.txt", "", Same),
        // Conditionals.
        case("inm match", "GET", "/data.bin", "If-None-Match: {etag}\r\n", Same),
        case("inm weak", "GET", "/data.bin", "If-None-Match: W/{etag}\r\n", Same),
        case("inm star", "GET", "/data.bin", "If-None-Match: *\r\n", Same),
        case("inm other", "GET", "/data.bin", "If-None-Match: \"other\"\r\n", Same),
        case("inm list", "GET", "/data.bin", "If-None-Match: \"a\", {etag}\r\n", Same),
        case("inm head", "HEAD", "/data.bin", "If-None-Match: {etag}\r\n", Same),
        case("ims equal", "GET", "/data.bin", "If-Modified-Since: {lm}\r\n", Same),
        case("ims later", "GET", "/data.bin", "If-Modified-Since: Fri, 01 Jan 2038 00:00:00 GMT\r\n", Same),
        case("ims earlier", "GET", "/data.bin", "If-Modified-Since: Sun, 06 Nov 1994 08:49:37 GMT\r\n", Same),
        case("ims invalid", "GET", "/data.bin", "If-Modified-Since: yesterday\r\n", Same),
        case("inm wins over ims", "GET", "/data.bin", "If-None-Match: \"other\"\r\nIf-Modified-Since: {lm}\r\n", Same),
        case("if-match", "GET", "/data.bin", "If-Match: {etag}\r\n", Same),
        case("if-match star", "GET", "/data.bin", "If-Match: *\r\n", Same),
        case("if-match other", "GET", "/data.bin", "If-Match: \"other\"\r\n", SameStatus("nginx's 412 has an HTML body")),
        case("ius earlier", "GET", "/data.bin", "If-Unmodified-Since: Sun, 06 Nov 1994 08:49:37 GMT\r\n", SameStatus("nginx's 412 has an HTML body")),
        case("ius equal", "GET", "/data.bin", "If-Unmodified-Since: {lm}\r\n", Same),
        // Ranges.
        case("range first", "GET", "/data.bin", "Range: bytes=0-9\r\n", Same),
        case("range open", "GET", "/data.bin", "Range: bytes=4990-\r\n", Same),
        case("range suffix", "GET", "/data.bin", "Range: bytes=-10\r\n", Same),
        case("range one byte", "GET", "/data.bin", "Range: bytes=0-0\r\n", Same),
        case("range end past size", "GET", "/data.bin", "Range: bytes=4990-9999\r\n", Same),
        case("range past end", "GET", "/data.bin", "Range: bytes=5000-\r\n", SameStatus("nginx's 416 has an HTML body")),
        case("range two", "GET", "/data.bin", "Range: bytes=0-9,20-29\r\n", Same),
        case("range overlap", "GET", "/data.bin", "Range: bytes=0-9,5-15\r\n", Differs(merged)),
        case("range not bytes", "GET", "/data.bin", "Range: items=0-9\r\n", Same),
        case("range head", "HEAD", "/data.bin", "Range: bytes=0-9\r\n", Differs("RFC 9110 §14.2: GET is the only method with ranges, a HEAD ignores Range (200); nginx answers 206")),
        case("if-range tag", "GET", "/data.bin", "Range: bytes=0-9\r\nIf-Range: {etag}\r\n", Same),
        case("if-range other", "GET", "/data.bin", "Range: bytes=0-9\r\nIf-Range: \"other\"\r\n", Same),
        case("if-range date", "GET", "/data.bin", "Range: bytes=0-9\r\nIf-Range: {lm}\r\n", Same),
        case("range empty file", "GET", "/zero.txt", "Range: bytes=0-9\r\n",
            Differs("RFC 9110 §14.1.1: of an empty file no int-range is satisfiable, Quill answers 416; nginx ignores the Range (200), which the RFC also allows")),
        // Encodings.
        case("gzip accepted", "GET", "/app.js", "Accept-Encoding: gzip\r\n", SameStatus(js)),
        case("gzip refused", "GET", "/app.js", "Accept-Encoding: gzip;q=0\r\n", SameStatus(js)),
        case("gzip upper case", "GET", "/app.js", "Accept-Encoding: GZIP\r\n", SameStatus(js)),
        case("no sibling", "GET", "/hello.txt", "Accept-Encoding: gzip\r\n", Same),
        // Odd requests.
        case("absolute form", "GET", "http://localhost/hello.txt", "", Same),
    ]
}

/// The fields compared (the ETag's value differs by design: compared by what it makes happen).
const FIELDS: [&str; 8] = [
    "content-type",
    "content-length",
    "content-range",
    "accept-ranges",
    "location",
    "vary",
    "content-encoding",
    "last-modified",
];

/// Sends `raw` to `addr` and reads the response (`Connection: close`).
fn ask(addr: SocketAddr, raw: &str, head_only: bool) -> Response {
    let mut c = Client::connect(addr);
    c.send(raw.as_bytes());
    c.try_read_response(head_only, Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("{raw:?} to {addr}: {e}"))
}

/// The server's validators of /data.bin.
fn validators(addr: SocketAddr) -> (String, String) {
    let r = ask(
        addr,
        "GET /data.bin HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
        false,
    );
    (
        r.header("etag").expect("ETag").to_string(),
        r.header("last-modified")
            .expect("Last-Modified")
            .to_string(),
    )
}

#[test]
fn sixty_requests_get_what_nginx_answers_or_a_stated_difference() {
    let (q, _probe, _) = Quill::spawn_first(|dir, port| {
        let root = dir.join("www");
        write_root(&root);
        let cfg = dir.join("quill.toml");
        std::fs::write(
            &cfg,
            format!(
                "workers = 1\n[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{port}\"\n\
                 protocol = \"http\"\n[[listener.route]]\n\
                 static = {{ root = \"www\", precompressed = [\"gzip\"], dotfiles = true }}\n"
            ),
        )
        .unwrap();
        vec!["--config".into(), cfg.display().to_string()]
    });
    let nginx_port = free_port();
    let nginx = start_nginx(
        &q.dir.path().join("www"),
        &q.dir.path().join("nginx"),
        nginx_port,
    );
    let table = table();
    assert!(table.len() >= 60, "{} cases", table.len());
    let (n_etag, n_lm) = validators(nginx.addr);
    let (q_etag, q_lm) = validators(q.addr());
    assert_eq!(n_lm, q_lm, "Last-Modified of the same file");
    let mut failures = Vec::new();
    for c in &table {
        let head_only = c.raw.starts_with("HEAD");
        let n = ask(
            nginx.addr,
            &c.raw.replace("{etag}", &n_etag).replace("{lm}", &n_lm),
            head_only,
        );
        let qr = ask(
            q.addr(),
            &c.raw.replace("{etag}", &q_etag).replace("{lm}", &q_lm),
            head_only,
        );
        // A multipart body's length depends on its boundary, which each server draws: its
        // parts are compared instead (`same_body`).
        let fields = |r: &Response| -> Vec<(String, Option<String>)> {
            let multipart = r
                .header("content-type")
                .is_some_and(|t| t.starts_with("multipart/"));
            FIELDS
                .iter()
                .map(|f| {
                    let v = match (*f, multipart) {
                        ("content-length", true) => Some("(multipart)".to_string()),
                        _ => r.header(f).map(multipart_neutral),
                    };
                    (f.to_string(), v)
                })
                .collect()
        };
        match c.expect {
            Same => {
                if n.status != qr.status || fields(&n) != fields(&qr) || !same_body(&n, &qr) {
                    failures.push(format!(
                        "{}: nginx {} {:?}\n   quill {} {:?}",
                        c.name,
                        n.status,
                        fields(&n),
                        qr.status,
                        fields(&qr)
                    ));
                }
            }
            SameStatus(why) => {
                if n.status != qr.status {
                    failures.push(format!(
                        "{}: nginx {} quill {} (only the fields were to differ: {why})",
                        c.name, n.status, qr.status
                    ));
                }
            }
            Differs(why) => {
                if n.status == qr.status && fields(&n) == fields(&qr) {
                    failures.push(format!(
                        "{}: expected to differ ({why}) but both answered alike",
                        c.name
                    ));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        table.len(),
        failures.join("\n")
    );
}

/// A field value with a multipart boundary replaced (each server draws its own).
fn multipart_neutral(v: &str) -> String {
    match v.find("boundary=") {
        Some(i) => format!("{}boundary=*", &v[..i]),
        None => v.to_string(),
    }
}

/// Whether two bodies carry the same bytes (multipart bodies: the same parts, each its fields
/// and its bytes, boundaries and the optional CRLF before the first one aside).
fn same_body(a: &Response, b: &Response) -> bool {
    let ct = a.header("content-type").unwrap_or("");
    if !ct.starts_with("multipart/byteranges") {
        return a.body == b.body;
    }
    let (pa, pb) = (parts(a), parts(b));
    !pa.is_empty() && pa == pb
}

/// The parts of a `multipart/byteranges` body: each its field lines and its bytes.
fn parts(r: &Response) -> Vec<(Vec<String>, Vec<u8>)> {
    let ct = r.header("content-type").unwrap_or("");
    let Some(i) = ct.find("boundary=") else {
        return Vec::new();
    };
    let delimiter = format!("--{}", ct[i + 9..].trim_matches('"'));
    let body = &r.body;
    let mut starts = Vec::new();
    let mut at = 0;
    while let Some(p) = body[at..]
        .windows(delimiter.len())
        .position(|w| w == delimiter.as_bytes())
    {
        starts.push(at + p);
        at += p + delimiter.len();
    }
    let mut out = Vec::new();
    for w in starts.windows(2) {
        let piece = &body[w[0] + delimiter.len()..w[1]];
        let piece = piece.strip_prefix(b"\r\n").unwrap_or(piece);
        let piece = piece.strip_suffix(b"\r\n").unwrap_or(piece);
        let Some(end) = piece.windows(4).position(|x| x == b"\r\n\r\n") else {
            out.push((vec!["(no head)".to_string()], piece.to_vec()));
            continue;
        };
        let mut fields: Vec<String> = String::from_utf8_lossy(&piece[..end])
            .split("\r\n")
            .map(|l| l.to_ascii_lowercase())
            .collect();
        fields.sort();
        out.push((fields, piece[end + 4..].to_vec()));
    }
    out
}
