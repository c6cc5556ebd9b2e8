//! The top level of a TOML file read into `Global`: the process-wide scalar keys (by the settings
//! table), paths relative to the file, the control socket and admin listener, ACLs and geoip.

use super::*;

/// The process-wide settings of a file (its top-level keys, ACLs and geoip database).
pub(super) fn read_global(
    raw: &RawFile,
    origin: &str,
    at: &dyn Fn(Range<usize>) -> String,
) -> Result<Global, ConfigError> {
    let mut global = Global::default();
    raw.global_scalars(&mut global, at)?;
    // Relative paths in the file are the file's directory's (as its TLS files, error pages,
    // command_file and geoip always were); command-line paths stay the working directory's.
    let file_dir = Path::new(origin).parent().unwrap_or(Path::new(""));
    let here = |what: &str, p: &Option<PathBuf>| {
        p.as_ref()
            .map(|p| relative_to_file(origin, file_dir, what, p))
    };
    global.pid_file = here("pid_file", &raw.pid_file);
    global.log = here("log", &raw.log);
    global.user = raw.user.clone();
    global.chroot = raw.chroot.clone();
    if let Some(f) = &raw.log_format {
        global.log_format = LogFormat::parse(f.get_ref()).ok_or_else(|| {
            ConfigError::usage(format!(
                "{}invalid log_format '{}' (expected text or json)",
                at(f.span()),
                f.get_ref()
            ))
        })?;
    }
    read_control(raw, &mut global, origin, at)?;
    global.allow_exit = raw.allow_exit.unwrap_or(false);
    // Relative to the file that names it, as `include` is: the file is read at start and on
    // every reload, like `-F`, and `write` without FILE writes there.
    global.command_file = raw
        .command_file
        .as_ref()
        .map(|f| match Path::new(origin).parent() {
            Some(dir) => dir.join(f),
            None => f.clone(),
        });
    global.status_file = here("status_file", &raw.status_file);
    read_acls(raw, &mut global, origin, at)?;
    Ok(global)
}

/// The control socket and admin listener keys of a file: `control`, `control_acl`,
/// `control_level`, the token files and `admin`.
fn read_control(
    raw: &RawFile,
    global: &mut Global,
    origin: &str,
    at: &dyn Fn(Range<usize>) -> String,
) -> Result<(), ConfigError> {
    let file_dir = Path::new(origin).parent().unwrap_or(Path::new(""));
    let relative = |what: &str, p: &Option<PathBuf>| {
        p.as_ref()
            .map(|p| relative_to_file(origin, file_dir, what, p))
    };
    if let Some(c) = &raw.control {
        let value = c.get_ref();
        // A control address is HOST:PORT or a port; anything else is the Unix socket's path
        // (`ctl.sock` as well as `./ctl.sock`), relative to the file's directory.
        let is_path = value.contains('/')
            || (!value.contains(':') && !value.bytes().all(|b| b.is_ascii_digit()));
        global.control = Some(if is_path {
            crate::addr::ListenAddr::Unix(relative_to_file(
                origin,
                file_dir,
                "control",
                Path::new(value),
            ))
        } else {
            addr::parse_listen(value)
                .map_err(|e| ConfigError::from_addr(e, &format!("{}control: ", at(c.span()))))?
        });
    }
    if let Some(n) = &raw.control_acl {
        global.control_acl = Some(acl_number(*n.get_ref(), &at(n.span()))?);
    }
    if let Some(l) = &raw.control_level {
        global.control_level = ControlLevel::parse(l.get_ref()).ok_or_else(|| {
            ConfigError::usage(format!(
                "{}invalid control_level '{}' (expected read, operate or admin)",
                at(l.span()),
                l.get_ref()
            ))
        })?;
    }
    global.control_token_file = relative("control_token_file", &raw.control_token_file);
    global.admin_token_file = relative("admin_token_file", &raw.admin_token_file);
    if let Some(a) = &raw.admin {
        global.admin = Some(
            parse_admin(a.get_ref())
                .map_err(|e| ConfigError::usage(format!("{}admin: {e}", at(a.span()))))?,
        );
    }
    Ok(())
}

/// The ACL lists of a file (`[acl]`) and the geoip database their country entries need.
fn read_acls(
    raw: &RawFile,
    global: &mut Global,
    origin: &str,
    at: &dyn Fn(Range<usize>) -> String,
) -> Result<(), ConfigError> {
    if let Some(g) = &raw.geoip {
        let dir = Path::new(origin).parent().unwrap_or(Path::new("."));
        global.acls.geo = Some(geoip::load(g, dir, at)?);
    }
    for (n, lines) in &raw.acl {
        let prefix = at(lines.span());
        let list =
            acl::parse_list(n).map_err(|e| ConfigError::usage(format!("{prefix}acl: {e}")))?;
        for line in lines.get_ref() {
            let words: Vec<&str> = line.split_whitespace().collect();
            let entry = acl::parse_entry(&words)
                .map_err(|e| ConfigError::usage(format!("{prefix}acl {list} '{line}': {e}")))?;
            global.acls[list].entries.push(entry);
        }
    }
    geoip::check(
        &global.acls,
        &|id| {
            raw.acl
                .iter()
                .find(|(n, _)| acl::parse_list(n).ok() == Some(id))
                .map(|(_, l)| l.span())
        },
        at,
    )?;
    Ok(())
}
