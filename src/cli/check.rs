//! `quill check`: a configuration file, or a command line, built and explained without binding
//! anything.

use std::process::ExitCode;

use clap::Parser;

use super::pen::build_config;
use super::{fail, Cli};
use crate::config::{self, ErrorKind, TuningPatch};

/// `quill check ARGS`: the configuration `quill ARGS` would start (with `--config FILE` when
/// given), built and explained without binding anything.
pub(super) fn check_command_line(config: Option<&std::path::Path>, args: &[String]) -> ExitCode {
    let mut argv = vec![std::ffi::OsString::from("quill")];
    if let Some(path) = config {
        argv.push("--config".into());
        argv.push(path.into());
    }
    argv.extend(args.iter().map(std::ffi::OsString::from));
    let cli = match Cli::try_parse_from(&argv) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    if cli.sub.is_some() {
        return fail(
            ErrorKind::Usage,
            "check: a subcommand is not a command line to check",
        );
    }
    match build_config(&cli) {
        Ok(config) => {
            print!("command line: OK\n{}", config.explain());
            ExitCode::SUCCESS
        }
        Err(e) => fail(e.kind, &e.message),
    }
}

pub(super) fn check(path: &std::path::Path) -> ExitCode {
    let loaded = config::load_file(path, &TuningPatch::default(), false).and_then(|mut config| {
        // The command file is part of what starts: check it too.
        if let Some(file) = config.global.command_file.clone() {
            config.apply_file(&file, 0)?;
            config.validate()?;
        }
        Ok(config)
    });
    match loaded {
        Ok(config) => {
            print!("{}: OK\n{}", path.display(), config.explain());
            ExitCode::SUCCESS
        }
        Err(e) => fail(ErrorKind::Usage, &e.message),
    }
}
