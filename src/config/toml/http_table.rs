//! `[http]` / `[listener.http]` tables read into an `HttpSettingsPatch`: the scalar keys by the
//! settings table (`settings::http_table`, read by their kinds in `config::http`), the header
//! edits and the error pages by hand.

use super::*;

/// `error_pages = { 503 = "path" }`: each status one Quill answers itself, each file read now
/// (relative to `dir`, the configuration file's directory), a regular file of at most 12 KiB.
fn error_pages(v: &toml::Value, dir: &std::path::Path) -> Result<Vec<ErrorPage>, String> {
    let toml::Value::Table(t) = v else {
        return Err(
            "expected a table of status = \"file\" (error_pages = { 503 = \"503.html\" })".into(),
        );
    };
    let mut pages = Vec::new();
    for (key, value) in t {
        let status: u16 = key
            .parse()
            .ok()
            .filter(|s| http_settings::ERROR_PAGE_STATUSES.contains(s))
            .ok_or_else(|| {
                format!(
                    "'{}' is not a status Quill answers itself (one of {})",
                    key.escape_debug(),
                    http_settings::ERROR_PAGE_STATUSES
                        .map(|s| s.to_string())
                        .join(", ")
                )
            })?;
        let toml::Value::String(file) = value else {
            return Err(format!("{status}: expected a file name in quotes"));
        };
        let path = dir.join(file);
        let body = read_page(&path).map_err(|e| format!("{status}: {}: {e}", path.display()))?;
        let html = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("html") || e.eq_ignore_ascii_case("htm"));
        pages.push(ErrorPage {
            status,
            path,
            content_type: if html {
                "text/html; charset=utf-8"
            } else {
                "text/plain; charset=utf-8"
            },
            body: body.into(),
        });
    }
    Ok(pages)
}

/// An error page's bytes: a regular file of at most [`http_settings::MAX_ERROR_PAGE`] bytes.
fn read_page(path: &std::path::Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    let mut body = Vec::new();
    file.take(http_settings::MAX_ERROR_PAGE + 1)
        .read_to_end(&mut body)
        .map_err(|e| e.to_string())?;
    if body.len() as u64 > http_settings::MAX_ERROR_PAGE {
        return Err(format!(
            "larger than {} KiB",
            http_settings::MAX_ERROR_PAGE >> 10
        ));
    }
    Ok(body)
}

/// Declares `RawHttp` with the scalar keys of `settings::http_table` (each kept as a TOML value
/// with its span, so that every error names the key, the value and the line) and the structured
/// keys given, and reads the scalar keys with their kinds (`config::http`).
macro_rules! with_http_keys {
    (
        $(#[$meta:meta])* $vis:vis struct $name:ident { $($(#[$fmeta:meta])* $f:ident : $fty:ty,)* } ;
        $(
            $(#[doc = $doc:literal])*
            $field:ident : $ty:ty = $default:expr, $kty:ident $({ $($kbody:tt)* })?, $bounds:expr;
        )*
    ) => {
        $(#[$meta])*
        $vis struct $name {
            $( $field: Option<<http_settings::$kty as settings::Kind>::Raw>, )*
            $($(#[$fmeta])* $f: $fty,)*
        }

        impl $name {
            /// The scalar keys set here, each read by its kind; errors start with the value's
            /// `FILE:LINE:`.
            pub(super) fn scalars(
                &self,
                at: &dyn Fn(Range<usize>) -> String,
            ) -> Result<HttpSettingsPatch, ConfigError> {
                Ok(HttpSettingsPatch {
                    $( $field: self
                        .$field
                        .as_ref()
                        .map(|raw| {
                            settings::Kind::read(
                                &http_settings::$kty $({ $($kbody)* })?,
                                stringify!($field),
                                raw,
                            )
                            .map_err(|(e, span)| ConfigError::usage(format!("{}{e}", at(span))))
                        })
                        .transpose()?, )*
                    ..HttpSettingsPatch::default()
                })
            }
        }
    };
}

settings::http_table! {
    with_http_keys
    /// `[http]` / `[listener.http]`: every key of `HttpSettings`.
    #[derive(Clone, Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(super) struct RawHttp {
        request_headers: Option<Spanned<RawEdits>>,
        response_headers: Option<Spanned<RawEdits>>,
        error_pages: Option<Spanned<toml::Value>>,
    }
}

impl RawHttp {
    /// The keys set here, each checked on its own; errors start with the key's `FILE:LINE:`.
    /// `dir`: where relative `error_pages` files are (the configuration file's directory).
    pub(super) fn patch(
        &self,
        at: &dyn Fn(Range<usize>) -> String,
        dir: &Path,
    ) -> Result<HttpSettingsPatch, ConfigError> {
        let mut patch = self.scalars(at)?;
        patch.request_headers = edits(&self.request_headers, "request_headers", at)?;
        patch.response_headers = edits(&self.response_headers, "response_headers", at)?;
        patch.error_pages = self
            .error_pages
            .as_ref()
            .map(|v| {
                error_pages(v.get_ref(), dir)
                    .map_err(|e| ConfigError::usage(format!("{}error_pages: {e}", at(v.span()))))
            })
            .transpose()?;
        Ok(patch)
    }

    /// Checks the settings this table gives a listener as a whole (`max_request_line` within
    /// `max_header_bytes`); the error names the line of the key that broke it, else the table's.
    pub(super) fn check(
        &self,
        settings: &HttpSettings,
        table: Range<usize>,
        at: &dyn Fn(Range<usize>) -> String,
    ) -> Result<(), ConfigError> {
        settings.check().map_err(|e| {
            let span = self
                .max_request_line
                .as_ref()
                .or(self.max_header_bytes.as_ref())
                .map_or(table, |v| v.span());
            ConfigError::usage(format!("{}{e}", at(span)))
        })
    }
}
