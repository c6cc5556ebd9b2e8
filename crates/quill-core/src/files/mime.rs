//! The media type of a file from its extension (RFC 9110 §8.3, the registry at IANA, RFC 9239
//! for JavaScript): a sorted static table searched without allocating. Text types, and only
//! those, carry `; charset=utf-8` (a text file served today is UTF-8; without a charset a browser
//! guesses). An unknown extension is `application/octet-stream` (§8.3: the recipient may then
//! treat it as bytes, and a browser downloads it rather than rendering it).

/// The type of a file whose extension is unknown or absent.
pub const DEFAULT: &str = "application/octet-stream";

/// The longest extension in [`TABLE`]; a longer one is unknown without a lookup.
const MAX_EXT: usize = 11;

/// Extension (lowercase, sorted by byte) → media type.
const TABLE: &[(&str, &str)] = &[
    ("3gp", "video/3gpp"),
    ("7z", "application/x-7z-compressed"),
    ("aac", "audio/aac"),
    ("apng", "image/apng"),
    ("atom", "application/atom+xml"),
    ("avi", "video/x-msvideo"),
    ("avif", "image/avif"),
    ("bin", "application/octet-stream"),
    ("bmp", "image/bmp"),
    ("br", "application/x-brotli"),
    ("bz2", "application/x-bzip2"),
    ("c", "text/x-c; charset=utf-8"),
    ("cjs", "text/javascript; charset=utf-8"),
    ("crt", "application/x-x509-ca-cert"),
    ("css", "text/css; charset=utf-8"),
    ("csv", "text/csv; charset=utf-8"),
    ("deb", "application/vnd.debian.binary-package"),
    ("doc", "application/msword"),
    (
        "docx",
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    ),
    ("eot", "application/vnd.ms-fontobject"),
    ("epub", "application/epub+zip"),
    ("flac", "audio/flac"),
    ("gif", "image/gif"),
    ("gz", "application/gzip"),
    ("h", "text/x-c; charset=utf-8"),
    ("heic", "image/heic"),
    ("htm", "text/html; charset=utf-8"),
    ("html", "text/html; charset=utf-8"),
    ("ico", "image/vnd.microsoft.icon"),
    ("ics", "text/calendar; charset=utf-8"),
    ("iso", "application/x-iso9660-image"),
    ("jar", "application/java-archive"),
    ("jpeg", "image/jpeg"),
    ("jpg", "image/jpeg"),
    ("js", "text/javascript; charset=utf-8"),
    ("json", "application/json"),
    ("jsonld", "application/ld+json"),
    ("jxl", "image/jxl"),
    ("m3u8", "application/vnd.apple.mpegurl"),
    ("m4a", "audio/mp4"),
    ("m4v", "video/mp4"),
    ("map", "application/json"),
    ("markdown", "text/markdown; charset=utf-8"),
    ("md", "text/markdown; charset=utf-8"),
    ("mid", "audio/midi"),
    ("midi", "audio/midi"),
    ("mjs", "text/javascript; charset=utf-8"),
    ("mkv", "video/x-matroska"),
    ("mov", "video/quicktime"),
    ("mp3", "audio/mpeg"),
    ("mp4", "video/mp4"),
    ("mpd", "application/dash+xml"),
    ("mpeg", "video/mpeg"),
    ("mpg", "video/mpeg"),
    ("oga", "audio/ogg"),
    ("ogg", "audio/ogg"),
    ("ogv", "video/ogg"),
    ("opus", "audio/opus"),
    ("otf", "font/otf"),
    ("pdf", "application/pdf"),
    ("pem", "application/x-pem-file"),
    ("png", "image/png"),
    ("ppt", "application/vnd.ms-powerpoint"),
    (
        "pptx",
        "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    ),
    ("ps", "application/postscript"),
    ("rar", "application/vnd.rar"),
    ("rss", "application/rss+xml"),
    ("rtf", "application/rtf"),
    ("sh", "application/x-sh"),
    ("svg", "image/svg+xml"),
    ("svgz", "image/svg+xml"),
    ("tar", "application/x-tar"),
    ("tif", "image/tiff"),
    ("tiff", "image/tiff"),
    ("toml", "application/toml"),
    ("ts", "video/mp2t"),
    ("tsv", "text/tab-separated-values; charset=utf-8"),
    ("ttf", "font/ttf"),
    ("txt", "text/plain; charset=utf-8"),
    ("vcf", "text/vcard; charset=utf-8"),
    ("vtt", "text/vtt; charset=utf-8"),
    ("wasm", "application/wasm"),
    ("wav", "audio/wav"),
    ("weba", "audio/webm"),
    ("webm", "video/webm"),
    ("webmanifest", "application/manifest+json"),
    ("webp", "image/webp"),
    ("woff", "font/woff"),
    ("woff2", "font/woff2"),
    ("xhtml", "application/xhtml+xml"),
    ("xls", "application/vnd.ms-excel"),
    (
        "xlsx",
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    ),
    ("xml", "application/xml"),
    ("xsl", "application/xslt+xml"),
    ("xz", "application/x-xz"),
    ("yaml", "application/yaml"),
    ("yml", "application/yaml"),
    ("zip", "application/zip"),
    ("zst", "application/zstd"),
];

/// The media type of an extension (without its dot), case-insensitive; [`DEFAULT`] if unknown.
pub fn from_extension(ext: &[u8]) -> &'static str {
    if ext.len() > MAX_EXT {
        return DEFAULT;
    }
    let mut buf = [0u8; MAX_EXT];
    let lower = &mut buf[..ext.len()];
    lower.copy_from_slice(ext);
    lower.make_ascii_lowercase();
    match TABLE.binary_search_by(|(e, _)| e.as_bytes().cmp(lower)) {
        Ok(i) => TABLE[i].1,
        Err(_) => DEFAULT,
    }
}

/// The media type of a file by the extension of its last path segment (`/a/b.tar.gz` → `gz`);
/// a name without a dot, or a dot file (`.profile`), has none: [`DEFAULT`].
pub fn from_path(path: &[u8]) -> &'static str {
    let name = match path.iter().rposition(|&b| b == b'/') {
        Some(i) => &path[i + 1..],
        None => path,
    };
    match name.iter().rposition(|&b| b == b'.') {
        Some(i) if i > 0 => from_extension(&name[i + 1..]),
        _ => DEFAULT,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_table_is_sorted_lowercase_and_bounded() {
        for w in TABLE.windows(2) {
            assert!(w[0].0 < w[1].0, "{} before {}", w[0].0, w[1].0);
        }
        for (ext, _) in TABLE {
            assert!(ext.len() <= MAX_EXT && !ext.bytes().any(|b| b.is_ascii_uppercase()));
        }
        assert!(TABLE.iter().any(|(e, _)| e.len() == MAX_EXT));
        assert!(TABLE.len() >= 95, "{}", TABLE.len());
    }

    #[test]
    fn text_types_and_only_those_carry_a_charset() {
        for (ext, ty) in TABLE {
            let text = ty.starts_with("text/");
            assert_eq!(text, ty.ends_with("; charset=utf-8"), "{ext}: {ty}");
            assert_eq!(ty.matches("charset").count(), usize::from(text), "{ext}");
        }
    }

    #[test]
    fn common_extensions_have_their_registered_types() {
        assert_eq!(from_extension(b"html"), "text/html; charset=utf-8");
        assert_eq!(from_extension(b"HTML"), "text/html; charset=utf-8");
        assert_eq!(from_extension(b"js"), "text/javascript; charset=utf-8");
        assert_eq!(from_extension(b"mjs"), "text/javascript; charset=utf-8");
        assert_eq!(from_extension(b"JsOn"), "application/json");
        assert_eq!(from_extension(b"svg"), "image/svg+xml");
        assert_eq!(from_extension(b"woff2"), "font/woff2");
        assert_eq!(from_extension(b"wasm"), "application/wasm");
        assert_eq!(from_extension(b"webmanifest"), "application/manifest+json");
        assert_eq!(from_extension(b"exe"), DEFAULT);
        assert_eq!(from_extension(b""), DEFAULT);
        assert_eq!(from_extension(b"webmanifests"), DEFAULT);
    }

    #[test]
    fn a_path_takes_the_extension_of_its_last_segment() {
        assert_eq!(
            from_path(b"/srv/www/index.html"),
            "text/html; charset=utf-8"
        );
        assert_eq!(from_path(b"/a/b.tar.gz"), "application/gzip");
        assert_eq!(from_path(b"/a.d/README"), DEFAULT);
        assert_eq!(from_path(b"/home/.profile"), DEFAULT);
        assert_eq!(from_path(b"style.CSS"), "text/css; charset=utf-8");
        assert_eq!(from_path(b"/a/b."), DEFAULT);
    }

    proptest! {
        #[test]
        fn every_entry_is_found_in_any_case(i in 0..TABLE.len(), mask in any::<u16>()) {
            let (ext, ty) = TABLE[i];
            let mixed: Vec<u8> = ext.bytes().enumerate()
                .map(|(k, b)| if mask >> (k % 16) & 1 == 1 { b.to_ascii_uppercase() } else { b })
                .collect();
            prop_assert_eq!(from_extension(&mixed), ty);
        }

        #[test]
        fn arbitrary_paths_never_panic(p in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = from_path(&p);
        }
    }
}
