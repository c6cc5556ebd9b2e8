//! The `quill` binary: everything is in the library (`quill::cli::main`).

// The workspace's panic bans, held at each crate root of this package (see Cargo.toml).
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

fn main() -> std::process::ExitCode {
    quill::cli::main()
}
