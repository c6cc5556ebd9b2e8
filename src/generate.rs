//! `quill generate`: the man pages and shell completions, rendered from the clap definitions of
//! `cli` so that they always name the options `--help` names. Packagers run it at build time
//! (the Debian package does); the configuration file's page, `quill.toml(5)`, is hand-written in
//! `docs/`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap_complete::Shell;

/// `quill generate man DIR` | `quill generate completions SHELL`.
#[derive(Debug, clap::Args)]
pub(crate) struct GenerateArgs {
    // The main command gives `-h` to Pen's hash, so each subcommand declares its own help flag.
    /// Print help
    #[arg(short = 'h', long, action = clap::ArgAction::Help)]
    help: Option<bool>,
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, clap::Subcommand)]
enum What {
    /// Write quill.1 and one page per subcommand (quill-ctl.1, ...) into DIR
    Man {
        /// Print help
        #[arg(short = 'h', long, action = clap::ArgAction::Help)]
        help: Option<bool>,
        /// The directory to write the pages into (created if missing)
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
    /// Print the completion script for SHELL on standard output
    #[command(
        after_help = "Install, e.g.:\n  quill generate completions bash > /usr/share/bash-completion/completions/quill\n  quill generate completions zsh > /usr/share/zsh/vendor-completions/_quill\n  quill generate completions fish > /usr/share/fish/vendor_completions.d/quill.fish"
    )]
    Completions {
        /// Print help
        #[arg(short = 'h', long, action = clap::ArgAction::Help)]
        help: Option<bool>,
        /// bash, zsh, fish, elvish or powershell
        #[arg(value_name = "SHELL")]
        shell: Shell,
    },
}

/// Runs `quill generate` over the command line's definition `cli` (passed in by `cli`, so this
/// module does not reach back up into it); the return value is the exit status (1 when a file
/// cannot be written).
pub(crate) fn run(args: &GenerateArgs, mut cli: clap::Command) -> ExitCode {
    let done = match &args.what {
        What::Man { dir, .. } => man_pages(dir, cli).map(|written| {
            for path in written {
                println!("{}", path.display());
            }
        }),
        What::Completions { shell, .. } => {
            // Rendered into memory first: clap_complete panics on a failed write, and standard
            // output may be a closed pipe.
            let mut script = Vec::new();
            clap_complete::generate(*shell, &mut cli, "quill", &mut script);
            let mut out = std::io::stdout().lock();
            out.write_all(&script)
                .and_then(|()| out.flush())
                .map_err(|e| format!("standard output: {e}"))
        }
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("quill: error: {e}");
            ExitCode::from(1)
        }
    }
}

/// Writes `quill.1` and a page for each visible subcommand into `dir`; returns the paths written.
fn man_pages(dir: &Path, cli: clap::Command) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut cmd = with_aliases_in_help(cli.disable_help_subcommand(true));
    // Building fills in the subcommands' display names (`quill-ctl`) and the version.
    cmd.build();
    let mut pages = vec![(cmd.clone(), None)];
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        pages.push((sub.clone(), Some(sub.get_name())));
    }
    let mut written = Vec::new();
    for (page, sub) in pages {
        let nested = page.has_subcommands();
        let man = clap_mangen::Man::new(page)
            .source(concat!("quill ", env!("CARGO_PKG_VERSION")))
            .manual("Quill Manual");
        let path = dir.join(man.get_filename());
        let mut roff = Vec::new();
        render(&man, sub.is_none(), nested, &see_also(&cmd, sub), &mut roff)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        std::fs::write(&path, roff).map_err(|e| format!("{}: {e}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

/// `cmd` with each visible alias named in its option's help, as `--help` shows it: clap_mangen
/// leaves aliases out, and `--connections-max` (socket-proxyd's name of `-x`) is one.
fn with_aliases_in_help(cmd: clap::Command) -> clap::Command {
    let cmd = cmd.mut_args(|arg| {
        let aliases: Vec<String> = arg
            .get_visible_aliases()
            .into_iter()
            .flatten()
            .map(|a| format!("--{a}"))
            .collect();
        if aliases.is_empty() {
            return arg;
        }
        let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
        arg.help(format!("{help} [alias: {}]", aliases.join(", ")))
    });
    let names: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    names.iter().fold(cmd, |cmd, name| {
        cmd.mut_subcommand(name, with_aliases_in_help)
    })
}

/// clap_mangen's sections, with the after-help text (SERVER syntax and examples) under NOTES;
/// the main page also gets FILES, SIGNALS and ENVIRONMENT, which clap does not know; every page
/// ends with SEE ALSO.
fn render(
    man: &clap_mangen::Man,
    main: bool,
    nested: bool,
    see_also: &str,
    w: &mut Vec<u8>,
) -> std::io::Result<()> {
    man.render_title(w)?;
    man.render_name_section(w)?;
    man.render_synopsis_section(w)?;
    man.render_description_section(w)?;
    man.render_options_section(w)?;
    let mut extra = Vec::new();
    man.render_extra_section(&mut extra)?;
    // Without an after-help text the section is only its heading: left out.
    let extra = String::from_utf8_lossy(&extra);
    if extra.lines().count() > 1 {
        w.extend(extra.replacen(".SH EXTRA", ".SH NOTES", 1).bytes());
    }
    if nested {
        man.render_subcommands_section(w)?;
    }
    if main {
        w.extend_from_slice(MAIN_PAGE_SECTIONS.as_bytes());
        // clap_mangen unwraps the version: only the main command has one.
        man.render_version_section(w)?;
    }
    writeln!(w, ".SH \"SEE ALSO\"\n{see_also}")
}

/// The main page's FILES, SIGNALS and ENVIRONMENT sections (roff).
const MAIN_PAGE_SECTIONS: &str = r#".SH FILES
.TP
\fI/etc/quill/quill.toml\fR
The configuration file read by \fB\-\-config\fR in the packaged systemd unit; see \fBquill.toml\fR(5).
.TP
\fI/run/quill/quill.sock\fR
The control socket of the packaged unit and the default of \fBquill ctl\fR.
.SH SIGNALS
.TP
\fBSIGHUP\fR
Reload the configuration (and reopen the access log).
.TP
\fBSIGTERM\fR, \fBSIGINT\fR
Stop accepting, let open sessions finish within the drain timeout; a second signal stops at once.
.TP
\fBSIGUSR1\fR
Write Pen's status report (\fB\-w\fR).
.SH ENVIRONMENT
.TP
\fBQUILL_SOCKET\fR, \fBQUILL_TOKEN_FILE\fR
Defaults of \fBquill ctl\fR's \fB\-\-socket\fR and \fB\-\-token\-file\fR.
.TP
\fBLISTEN_FDS\fR, \fBLISTEN_PID\fR, \fBLISTEN_FDNAMES\fR
Listening sockets passed by systemd (socket activation).
.TP
\fBNOTIFY_SOCKET\fR, \fBWATCHDOG_USEC\fR
systemd readiness notifications and watchdog.
"#;

/// The SEE ALSO line of the page of `sub` (the main page when `None`): the other pages.
fn see_also(cmd: &clap::Command, sub: Option<&str>) -> String {
    let mut names = vec![r"\fBquill.toml\fR(5)".to_string()];
    if sub.is_some() {
        names.insert(0, r"\fBquill\fR(1)".to_string());
    }
    for s in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        if Some(s.get_name()) != sub {
            names.push(format!(r"\fBquill\-{}\fR(1)", s.get_name()));
        }
    }
    names.join(", ")
}
