//! `quill serve [DIR]`: one command to serve a directory (docs/web.md#quill-serve): an HTTP
//! listener (HTTPS with `-E`/`-K`) whose one route is a `static` root, with the access log, the
//! admin listener and the control socket as on any command line. The configuration it builds is
//! the one a file with `static = { root = DIR }` gives, so `quill check` and the control socket see
//! an ordinary listener.

use std::path::PathBuf;
use std::process::ExitCode;

use super::pen::PenTls;
use super::{addr_error, fail, ranged, run};
use crate::addr;
use crate::config::{
    self, Config, ConfigError, Global, ListenerConfig, ListenerKind, RouteAction, RouteConfig,
    StaticAction,
};
use crate::runtime::Start;
use crate::state::Rebuild;

/// `quill serve`'s options.
#[derive(Debug, Clone, clap::Args)]
pub(super) struct ServeArgs {
    /// The directory to serve [default: the current directory]
    #[arg(value_name = "DIR", default_value = ".")]
    dir: PathBuf,
    /// Where to listen: [HOST:]PORT or /path.sock
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR")]
    listen: String,
    /// List a directory that has no index file (HTML, or JSON when asked)
    #[arg(long)]
    listing: bool,
    /// Index files tried for a directory, in order [default: index.html]
    #[arg(long, value_name = "NAME")]
    index: Vec<String>,
    /// Serve NAME.br, NAME.zst and NAME.gz beside NAME to clients that accept them
    #[arg(long)]
    precompressed: bool,
    /// Serve names that start with a dot (`/.well-known/` always is)
    #[arg(long)]
    dotfiles: bool,
    /// `Cache-Control` sent with every file
    #[arg(long, value_name = "VALUE")]
    cache_control: Option<String>,
    /// Served for a path that names no file (a single-page application's /index.html)
    #[arg(long, value_name = "PATH")]
    fallback: Option<String>,
    /// Access log, one line per request; reopened on SIGUSR2
    #[arg(short = 'l', long, value_name = "FILE")]
    log: Option<PathBuf>,
    /// Access log format: text or json [default: text]
    #[arg(long, value_name = "FORMAT")]
    log_format: Option<String>,
    /// Admin HTTP listener: /metrics, /api/status and the live status page
    #[arg(long, value_name = "ADDR")]
    admin: Option<String>,
    /// Control socket: a Unix socket path (mode 0600) or a loopback HOST:PORT
    #[arg(short = 'C', long, value_name = "ADDR")]
    control: Option<String>,
    /// Worker threads [default: number of cores]
    #[arg(long, value_name = "N", value_parser = ranged::<usize>(1, config::MAX_WORKERS as u64))]
    workers: Option<usize>,
    #[command(flatten)]
    tls: PenTls,
}

/// Runs `quill serve`: builds the configuration (again on SIGHUP) and serves until stopped.
pub(super) fn serve(args: &ServeArgs) -> ExitCode {
    let config = match serve_config(args) {
        Ok(c) => c,
        Err(e) => return fail(e.kind, &e.message),
    };
    let again = args.clone();
    let rebuild: Rebuild = Box::new(move || serve_config(&again));
    run(
        config,
        Start {
            rebuild: Some(rebuild),
            ..Start::default()
        },
    )
}

/// The configuration `quill serve` runs: one HTTP listener with one `static` route.
pub(super) fn serve_config(args: &ServeArgs) -> Result<Config, ConfigError> {
    let root = std::path::absolute(&args.dir)
        .map_err(|e| ConfigError::usage(format!("{}: {e}", args.dir.display())))?;
    let dir = match std::fs::metadata(&root) {
        Ok(m) if m.is_dir() => root,
        Ok(_) => {
            return Err(ConfigError::usage(format!(
                "{}: not a directory",
                root.display()
            )))
        }
        Err(e) => return Err(ConfigError::usage(format!("{}: {e}", root.display()))),
    };
    let mut action = StaticAction::new(dir);
    action.listing = args.listing;
    if !args.index.is_empty() {
        action.index.clone_from(&args.index);
    }
    if args.precompressed {
        action.precompressed = quill_core::files::coding::Coding::ALL.to_vec();
    }
    action.dotfiles = args.dotfiles;
    action.cache_control.clone_from(&args.cache_control);
    action.fallback.clone_from(&args.fallback);
    let listen = addr::parse_listen(&args.listen).map_err(|e| addr_error(e, "--listen: "))?;
    let mut l = ListenerConfig::new("serve", listen);
    l.kind = ListenerKind::http(config::HttpSettings::default());
    l.set_tls(args.tls.settings()?);
    l.routes.push(RouteConfig::new(
        "files",
        RouteAction::Static(Box::new(action)),
    ));
    let mut global = Global::default();
    global.workers = args.workers.unwrap_or(global.workers);
    global.log.clone_from(&args.log);
    if let Some(f) = &args.log_format {
        global.log_format = config::LogFormat::parse(f).ok_or_else(|| {
            ConfigError::usage(format!("--log-format: '{f}' is not text or json"))
        })?;
    }
    if let Some(a) = &args.admin {
        global.admin =
            Some(config::parse_admin(a).map_err(|e| ConfigError::usage(format!("--admin: {e}")))?);
    }
    if let Some(c) = &args.control {
        // As Pen's `-C PORT`: a bare port is a loopback TCP port.
        let text = if c.parse::<u16>().is_ok() {
            format!("127.0.0.1:{c}")
        } else {
            c.clone()
        };
        global.control = Some(addr::parse_listen(&text).map_err(|e| addr_error(e, "-C: "))?);
    }
    let config = Config {
        global,
        listeners: vec![l],
        pools: Vec::new(),
    };
    config.validate()?;
    config.check_tls()?;
    Ok(config)
}
